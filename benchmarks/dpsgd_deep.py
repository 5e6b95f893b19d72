"""Benchmark: DP-SGD steps on an MLP and small CNNs, against the non-private step and Opacus.

    .venv/bin/python -m benchmarks.dpsgd_deep --json /tmp/deep.json   (also part of benchmarks.dpsgd)
    .venv/bin/python -m benchmarks.dpsgd_deep --quick          # ~1 minute, fewer steps

B = 256, 10-class cross-entropy, SGD; mlp (64, 256, 256, 10), cnn 8x8 (16, 32), cnn28 28x28
(16, 32). Examples/second of one step (best of `repeats`, one process): nonprivate; naive
(`clipping.vmap.clipped_grad_sum`); ghost (`clipping.ghost.clipped_sum_fn`); generic
(`clipping.vmap.two_pass_clipped_grad_sum`); opacus_hooks / opacus_ghost (torch CPU, better of 1
and default threads). JAX DP steps add noise by `privatizer.dp_aggregate`, divide by B.
Keys: `<w>.<method>_ex_per_s`; `mlp.speedup_vs_opacus` (target >= 2);
`<w>.overhead_vs_nonprivate` (targets: mlp <= 1.5, cnn <= 2); `<w>.ratio_vs_opacus`,
`<w>.speedup_vs_naive`, `<w>.generic_overhead_vs_nonprivate`.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from benchmarks import report

BATCH = 256
NUM_CLASSES = 10
LEARNING_RATE = 0.1
CLIP = 1.0
SIGMA = 1.0

# name -> (factory kwargs, flat input size, (H, W, C) or None)
_WORKLOADS = {
    "mlp": ("mlp", dict(num_inputs=64, hidden=(256, 256), num_classes=NUM_CLASSES), 64, None),
    "cnn": ("cnn", dict(input_shape=(8, 8, 1), channels=(16, 32), num_classes=NUM_CLASSES),
            64, (8, 8, 1)),
    "cnn28": ("cnn", dict(input_shape=(28, 28, 1), channels=(16, 32), num_classes=NUM_CLASSES),
              784, (28, 28, 1)),
}


def _best_rates(runs: dict, steps: dict, repeats: int) -> dict:
  """Examples/second of each zero-argument loop (`report.interleaved_times`)."""
  _, best = report.interleaved_times(runs, repeats)
  return {name: steps[name] * BATCH / best[name] for name in runs}


def _jax_runners(kind, kwargs, num_features, steps):
  """The JAX steps (nonprivate, naive, ghost, generic, profiles) as zero-argument timed loops."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from dpjax import models, privatizer  # pylint: disable=g-import-not-at-top
  from dpjax.clipping import ghost, vmap  # pylint: disable=g-import-not-at-top

  model = getattr(models, kind)(**kwargs)
  kx, ky, kp = jax.random.split(jax.random.key(0), 3)
  kn = jax.random.key(1)
  x = jax.random.uniform(kx, (BATCH, num_features), jnp.float32)
  y = jax.random.randint(ky, (BATCH,), 0, NUM_CLASSES)
  ones = jnp.ones((BATCH,), jnp.float32)
  params0 = model.init(kp)

  def nonprivate(params, t):
    del t
    g = jax.grad(lambda p: jnp.mean(models.per_example_loss(model, p, x, y)))(params)
    return jax.tree.map(lambda p, gl: p - LEARNING_RATE * gl, params, g)

  agg = privatizer.dp_aggregate(SIGMA * CLIP, BATCH, kn)

  def private(clipped_sum, params, t):
    gsum, _ = clipped_sum(params, x, y, ones, CLIP)
    # The library's aggregate (noise per leaf from the engine's sampler, then / B);
    # its state at update t is (kn, t).
    state = (privatizer.GaussianPrivatizerState(kn, jnp.asarray(t, jnp.int32)), optax.EmptyState())
    priv, _ = agg.update(gsum, state)
    return jax.tree.map(lambda p, u: p - LEARNING_RATE * u, params, priv)

  naive_sum = functools.partial(vmap.clipped_grad_sum, model)
  generic_sum = functools.partial(vmap.two_pass_clipped_grad_sum, model)
  ghost_sum = ghost.clipped_sum_fn(model)
  def forward_only(params, t):  # profile: the forward pass alone (logits)
    del t
    return model.apply(params, x), params

  def ghost_sum_only(params, t):  # profile: the clipped sum without noise / update
    del t
    return ghost_sum(params, x, y, ones, CLIP), params

  zero_sum = jax.tree.map(jnp.zeros_like, params0)

  def noise_only(params, t):  # profile: noise draw + denominator + SGD update, no gradient
    return private(lambda *a: (zero_sum, None), params, t)

  steps_fns = {"nonprivate": nonprivate, "naive": functools.partial(private, naive_sum),
               "ghost": functools.partial(private, ghost_sum),
               "generic": functools.partial(private, generic_sum),
               "profile_forward": forward_only, "profile_ghost_sum": ghost_sum_only,
               "profile_noise_update": noise_only}

  def loop(step_fn):
    jitted = jax.jit(step_fn)

    def run():
      p, out = params0, None
      for t in range(steps):
        out = jitted(p, t)
        if isinstance(out, tuple):  # profile runners return (output, params)
          out = out[0]
        else:
          p = out
      jax.block_until_ready(out)
    return run

  return {name: loop(fn) for name, fn in steps_fns.items()}


def _torch_model(kind, kwargs):
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top
  if kind == "mlp":
    sizes = (kwargs["num_inputs"],) + tuple(kwargs["hidden"]) + (kwargs["num_classes"],)
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
      layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]))
  h, w, c = kwargs["input_shape"]
  layers = []
  for c_out in kwargs["channels"]:
    layers += [nn.Conv2d(c, c_out, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2)]
    c, h, w = c_out, h // 2, w // 2
  layers += [nn.Flatten(), nn.Linear(h * w * c, kwargs["num_classes"])]
  del torch
  return nn.Sequential(*layers)


def _opacus_runners(kind, kwargs, num_features, image_shape, steps, log):
  """Opacus hooks / ghost-clipping steps, or {} with a message when unavailable."""
  try:
    import opacus  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    log(f"[dpsgd_deep] Opacus baseline skipped: torch/opacus not importable ({e}); "
        "install torch==2.13.0 and opacus into .venv to enable it")
    return {}
  import warnings  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  # Torch's OpenMP threads can slow down by an order of magnitude when the cores are
  # shared with other processes, so each mode is timed with 1 thread and with torch's
  # default, and the better one is Opacus's figure.
  default_threads = torch.get_num_threads()
  thread_counts = sorted({1, default_threads})
  gen = np.random.default_rng(0)
  shape = (BATCH, num_features) if image_shape is None else (
      BATCH, image_shape[2], image_shape[0], image_shape[1])
  x = torch.tensor(gen.random(shape, dtype=np.float32))
  y = torch.tensor(gen.integers(0, NUM_CLASSES, BATCH))
  dataset = torch.utils.data.TensorDataset(torch.cat([x] * 4), torch.cat([y] * 4))
  runners = {}
  for mode in ("hooks", "ghost"):
    model = _torch_model(kind, kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH)
    engine = opacus.PrivacyEngine()
    crit = torch.nn.CrossEntropyLoss()
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                  criterion=crit, noise_multiplier=SIGMA,
                                  max_grad_norm=CLIP, poisson_sampling=False,
                                  grad_sample_mode=mode)
    except Exception as e:  # pylint: disable=broad-except
      log(f"[dpsgd_deep] Opacus mode {mode!r} unavailable: {e}")
      continue
    if mode == "ghost":
      pmodel, popt, pcrit, _ = out
    else:
      pmodel, popt, _ = out
      pcrit = crit

    for threads in thread_counts:
      def run(pmodel=pmodel, popt=popt, pcrit=pcrit, threads=threads):
        torch.set_num_threads(threads)
        with warnings.catch_warnings():
          warnings.simplefilter("ignore")  # "full backward hook ... no inputs require grad"
          for _ in range(steps):
            popt.zero_grad()
            pcrit(pmodel(x), y).backward()
            popt.step()
        torch.set_num_threads(default_threads)
      runners[f"opacus_{mode}_{threads}thr"] = run
  return runners


def measure_workload(name: str, steps: int, repeats: int, naive_steps: int, torch_steps: int,
                     log: Callable[[str], None] = print) -> dict:
  """Rates (examples/s) and ratios for one workload; keys without the workload prefix."""
  kind, kwargs, num_features, image_shape = _WORKLOADS[name]
  runs = _jax_runners(kind, kwargs, num_features, steps)
  num_steps = {k: steps for k in runs}
  runs["naive"] = _jax_runners(kind, kwargs, num_features, naive_steps)["naive"]
  num_steps["naive"] = naive_steps
  opacus = _opacus_runners(kind, kwargs, num_features, image_shape, torch_steps, log)
  runs.update(opacus)
  num_steps.update(dict.fromkeys(opacus, torch_steps))
  rates = _best_rates(runs, num_steps, repeats)
  for k, v in rates.items():
    log(f"[dpsgd_deep] {name} {k}: {v:,.0f} examples/s")
  out = {}
  for k, v in rates.items():
    if k.startswith("opacus_"):  # opacus_<mode>_<n>thr -> best over thread counts
      mode, threads = k.rsplit("_", 1)
      if v > out.get(f"{mode}_ex_per_s", 0.0):
        out[f"{mode}_ex_per_s"] = v
        out[f"{mode}_threads"] = int(threads[:-3])
    else:
      out[f"{k}_ex_per_s"] = v
  ghost_rate = out["ghost_ex_per_s"]
  out["overhead_vs_nonprivate"] = out["nonprivate_ex_per_s"] / ghost_rate
  out["speedup_vs_naive"] = ghost_rate / out["naive_ex_per_s"]
  out["generic_overhead_vs_nonprivate"] = out["nonprivate_ex_per_s"] / out["generic_ex_per_s"]
  opacus = [v for k, v in out.items() if k.startswith("opacus_") and k.endswith("_ex_per_s")]
  if opacus:
    out["opacus_best_ex_per_s"] = max(opacus)
    out["speedup_vs_opacus"] = ghost_rate / max(opacus)
  return out


def measure(quick: bool = False, log: Callable[[str], None] = print) -> dict:
  """All workloads as a flat dict with dotted keys (module docstring); `quick`: fewer steps."""
  import jax  # pylint: disable=g-import-not-at-top
  plan = {  # name -> (JAX steps, naive vmap(grad) steps, Opacus steps) per timed loop
      "mlp": (30, 2, 3) if quick else (100, 8, 12),
      "cnn": (20, 2, 3) if quick else (60, 8, 12),
      "cnn28": (3, 1, 1) if quick else (10, 3, 3),
  }
  repeats = 2 if quick else 3
  figures = {"device": str(jax.devices()[0].platform), "batch_size": BATCH}
  try:
    import torch  # pylint: disable=g-import-not-at-top
    figures["torch_threads"] = torch.get_num_threads()
  except ImportError:
    pass
  for name, (steps, naive_steps, torch_steps) in plan.items():
    figures.update(report.flatten(
        measure_workload(name, steps, repeats, naive_steps, torch_steps, log), f"{name}."))
  if "cnn.speedup_vs_opacus" in figures:
    figures["cnn.ratio_vs_opacus"] = figures["cnn.speedup_vs_opacus"]
    figures["cnn28.ratio_vs_opacus"] = figures["cnn28.speedup_vs_opacus"]
  return figures


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  fv = flags.FLAGS
  figures = measure(quick=fv.quick)
  for k, v in figures.items():
    print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
  if fv.json:
    report.write("dpsgd_deep", figures, fv.json)


if __name__ == "__main__":
  from absl import app, flags  # pylint: disable=g-import-not-at-top,g-multiple-import
  flags.DEFINE_bool("quick", False, "Fewer steps and repeats (noisier).")
  flags.DEFINE_string("json", None, "Write the figures to this JSON file.")
  app.run(main)
