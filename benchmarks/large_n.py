"""Benchmark: one DP-SGD epoch at a real data size, against the non-private epoch and Opacus.

    .venv/bin/python -m benchmarks.large_n             # writes benchmarks/results/large_n.json
    .venv/bin/python -m benchmarks.large_n --workloads mlp --n 6000 --json /tmp/l.json

n = 60,000 synthetic 28x28x1 images, an MLP (784, 256, 256, 10) and a CNN (16, 32 channels),
B = 256, one epoch = round(n / B) steps, C = 1, sigma = 1. Per workload, in one process
(interleaved, best of --repeats): (a) non-private optax SGD; (b) dp_padded, `dpsgd.train_one`
with `batch_capacity="auto"`; (c) full_mask, `batch_capacity=None`, extrapolated from two step
counts (and from n / --full_mask_shrink records where n does not fit: a lower bound); (d) Opacus
ghost clipping with Poisson sampling. Peak memory (VmHWM) from a fresh subprocess per
configuration. Keys: `<w>.<config>_epoch_s`, `<w>.compile_s.<config>` (wall s of
`jax.jit(...).lower(...).compile()` of its program, timed apart),
`<w>.peak_rss_bytes.<config>`, `<w>.accuracy.<config>`, `<w>.dp_over_nonprivate` (targets 1.3
MLP, 2 CNN), `<w>.full_mask_over_padded` (target >= 10), `<w>.opacus_over_ours`.

    .venv/bin/python -m benchmarks.large_n --batches 256,1024,4096   # large_n_batches.json

--batches: (a), (b) and (d) at each expected batch B, every B timed interleaved in one
process; keys `<w>.B<b>.{nonprivate_epoch_s, dp_epoch_s, dp_over_nonprivate, compile_s.*,
peak_rss_bytes.*, opacus_epoch_s}`; targets 1.6 at B = 256 and 1.3 at B >= 1,024
(`batch_target`). --small: n = 3,750 and every B / 16, a check of the harness.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Callable

import numpy as np
from absl import app
from absl import flags

from benchmarks import report

BATCH = 256   # the expected batch B; `set_batch` (--batch) changes it for this process
IMAGE = (28, 28, 1)
NUM_CLASSES = 10
NUM_TEST = 10_000
CLIP = 1.0
SIGMA = 1.0
LR_NONPRIVATE = 0.1
LR_DP = 1.0
SEED = 0
TARGETS = {"mlp": 1.3, "cnn": 2.0, "full_mask": 10.0}
# Share of physical memory the full-mask temporaries may use before it is timed at n / shrink.
_MEMORY_FRACTION = 0.5

_MODELS = {
    "mlp": ("mlp", dict(num_inputs=784, hidden=(256, 256), num_classes=NUM_CLASSES)),
    "cnn": ("cnn", dict(input_shape=IMAGE, channels=(16, 32), num_classes=NUM_CLASSES)),
}
# --small: n records and the divisor of every B (a toy run that checks the harness).
SMALL_N = 3_750
SMALL_DIVISOR = 16
# Opacus's memory subprocess trains this many steps (its footprint does not grow with them).
_OPACUS_MEMORY_STEPS = 20


def synthetic_images(seed: int, n: int, num_test: int = 0):
  """(x_train [n, 784], y_train int32[n], x_test, y_test): a 7x7 random class template
  upsampled to 28x28 plus N(0, 0.5^2) pixel noise, clipped to [0, 1]; labels in [0, 10)."""
  rng = np.random.default_rng(seed)
  coarse = rng.random((NUM_CLASSES, 7, 7), dtype=np.float32)
  templates = np.kron(coarse, np.ones((4, 4), np.float32)).reshape(NUM_CLASSES, -1)
  total = n + num_test
  y = rng.integers(0, NUM_CLASSES, total).astype(np.int32)
  x = templates[y] + np.float32(0.5) * rng.standard_normal((total, 784), dtype=np.float32)
  np.clip(x, 0.0, 1.0, out=x)
  return x[:n], y[:n], x[n:], y[n:]


def set_batch(batch: int) -> None:
  """Sets the expected batch size B every runner of this module reads (--batch)."""
  global BATCH
  if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
    raise ValueError(f"batch must be a positive int, got {batch!r}")
  BATCH = batch


def steps_per_epoch(n: int, batch: int | None = None) -> int:
  """T = round(1 / q) = round(n / B) steps: one epoch in expectation (B: `batch` or BATCH)."""
  return max(1, round(n / (batch or BATCH)))


def _model(name: str):
  from dpjax import models  # pylint: disable=g-import-not-at-top
  kind, kwargs = _MODELS[name]
  return getattr(models, kind)(**kwargs)


def _dp_config(n: int, num_steps: int, batch: int | None = None):
  from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
  return dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=(batch or BATCH) / n,
                           num_steps=num_steps,
                           l2_clip_norm=CLIP, noise_multiplier=SIGMA, learning_rate=LR_DP,
                           delta=1.0 / (10 * n))


def _accuracy(model, params, x, y) -> float:
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  logits = model.apply(params, jnp.asarray(x))
  return float(jnp.mean(jnp.argmax(logits, axis=1) == jnp.asarray(y)))


class _Runner:
  """A zero-argument timed function; `last` holds what its latest call returned, `cpu_s`
  the CPU seconds (all threads of this process) of each call: on a shared machine a
  steadier measure of the work than wall time. `compile_fn`: a zero-argument function that
  builds the runner's jitted program ahead of time (`jax.jit(...).lower(...).compile()`),
  timed apart by `compile_s`."""

  def __init__(self, fn: Callable[[], object], compile_fn: Callable[[], object] | None = None):
    self.fn = fn
    self.compile_fn = compile_fn
    self.last = None
    self.cpu_s = []

  def compile_s(self) -> float | None:
    """Wall seconds of tracing, lowering and compiling the program once (None: no program)."""
    if self.compile_fn is None:
      return None
    t0 = time.perf_counter()
    self.compile_fn()
    return time.perf_counter() - t0

  def __call__(self):
    t0 = time.process_time()
    self.last = self.fn()
    self.cpu_s.append(time.process_time() - t0)


def fast_apply(model):
  """model.apply; for a CNN, its convolutions as im2col matmuls (`clipping.ghost`'s forward):
  XLA:CPU's convolution gradient is many times slower and would flatter DP-SGD."""
  if model.kind != "cnn":
    return model.apply
  from dpjax.clipping import ghost  # pylint: disable=g-import-not-at-top
  shape = model.input_shape
  forward = ghost._cnn_forward  # pylint: disable=protected-access
  return lambda params, x: forward(params, x, None, shape)[0]


def nonprivate_runner(model, x, y, num_steps: int, seed: int = SEED,
                      batch: int | None = None) -> _Runner:
  """(a): one non-private epoch per call of batches of `batch` (default BATCH) rows; call i
  shuffles with fold_in(key, i)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from dpjax import models  # pylint: disable=g-import-not-at-top

  opt = optax.sgd(LR_NONPRIVATE)
  apply = fast_apply(model)
  b = batch or BATCH

  @jax.jit
  def epoch(params, key, x, y):
    perm = jax.random.permutation(key, x.shape[0])

    def step(carry, t):
      p, s = carry
      idx = jax.lax.dynamic_slice_in_dim(perm, t * b, b)
      xb, yb = x[idx], y[idx]
      g = jax.grad(lambda q: jnp.mean(models.loss_from_logits(apply(q, xb), yb)))(p)
      u, s = opt.update(g, s, p)
      return (optax.apply_updates(p, u), s), None

    return jax.lax.scan(step, (params, opt.init(params)),
                        jnp.arange(num_steps, dtype=jnp.int32))[0][0]

  k_init, k_shuffle = jax.random.split(jax.random.key(seed))
  params0 = model.init(k_init)
  calls = [0]

  def run():
    calls[0] += 1
    return jax.block_until_ready(epoch(params0, jax.random.fold_in(k_shuffle, calls[0]), x, y))
  return _Runner(run, lambda: epoch.lower(params0, k_shuffle, x, y).compile())


def dp_runner(model, x, y, num_steps: int, batch_capacity="auto", seed: int = SEED,
              batch: int | None = None) -> _Runner:
  """(b) / (c): `dpsgd.train_one` for num_steps steps at q = B / n, end to end."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import dpsgd  # pylint: disable=g-import-not-at-top

  n = x.shape[0]
  cfg, keep, key = _dp_config(n, num_steps, batch), jnp.ones((n,), bool), jax.random.key(seed + 1)
  perf = dpsgd.PerformanceFlags(batch_capacity=batch_capacity, progress=False)

  def compile_program():   # the program train_one runs (`dpsgd.program`), ahead of time
    fn, args = dpsgd.program(key[None], x, y, keep[None], cfg, model, perf=perf)
    return fn.lower(*args).compile()
  return _Runner(lambda: jax.block_until_ready(
      dpsgd.train_one(key, x, y, keep, cfg, model, perf=perf).params), compile_program)


def profile_runners(model, x, y, num_steps: int, capacity: int, seed: int = SEED,
                    batch: int | None = None) -> dict:
  """Where the padded DP epoch's time goes: jitted scans of its parts (module docstring)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from dpjax import clipping, dpsgd, privatizer, sampling  # pylint: disable=g-import-not-at-top

  n = x.shape[0]
  b = batch or BATCH
  q = b / n
  sampler = sampling.PoissonSampler(q)
  keep = jnp.ones((n,), bool)
  k_sample = jax.random.key(seed + 2)
  steps = jnp.arange(num_steps, dtype=jnp.int32)

  def scan_sum(part):
    @jax.jit
    def fn(x, y):
      def step(acc, t):
        return acc + part(t, x, y), None
      return jax.lax.scan(step, jnp.float32(0), steps)[0]
    return fn

  def mask(t, x, y):
    del x, y
    return jnp.sum(sampler.batch_mask(k_sample, t, keep), dtype=jnp.int32).astype(jnp.float32)

  def pad(t, x, y):
    del x, y
    idx, ok = sampling.padded_batch(sampler.batch_mask(k_sample, t, keep), capacity, 0)
    return jnp.sum(idx).astype(jnp.float32) + jnp.sum(ok)

  def gather(t, x, y):
    idx, ok = sampling.padded_batch(sampler.batch_mask(k_sample, t, keep), capacity, 0)
    return jnp.sum(x[idx] * ok[:, None]) + jnp.sum(y[idx])

  path = clipping.path_for(model)
  opt = optax.chain(privatizer.dp_aggregate(SIGMA * CLIP, b, jax.random.key(seed + 3)),
                    optax.sgd(LR_DP))
  params0 = model.init(jax.random.key(seed))

  def fixed_batches(use_sum: bool, use_noise: bool):
    """A scan over T steps on fixed batches of K rows: the clipped sum and/or the noise."""
    @jax.jit
    def fn(x, y):
      perm = jax.random.permutation(jax.random.key(seed + 4), n)
      w = jnp.ones((capacity,), jnp.float32)
      zero = jax.tree.map(jnp.zeros_like, params0)

      def step(carry, t):
        p, s = carry
        if use_sum:
          start = (t * capacity) % (n - capacity + 1)
          idx = jax.lax.dynamic_slice_in_dim(perm, start, capacity)
          gsum, _ = path.on_buffer(p, x[idx], y[idx], w, CLIP)
        else:
          gsum = zero
        if use_noise:
          u, s = opt.update(gsum, s, p)
        else:
          u = jax.tree.map(lambda g: -1e-3 * g, gsum)
        return (optax.apply_updates(p, u), s), None
      return jax.lax.scan(step, (params0, opt.init(params0)), steps)[0][0]
    return fn

  fns = {"mask": scan_sum(mask), "pad": scan_sum(pad), "gather": scan_sum(gather),
         "clipped_sum": fixed_batches(True, False), "noise_update": fixed_batches(False, True),
         "fixed_batch_dp": fixed_batches(True, True)}
  out = {k: _Runner(lambda f=f: jax.block_until_ready(f(x, y))) for k, f in fns.items()}
  out["host_check"] = _Runner(lambda: dpsgd.inputs.check_records(x, y, model))
  return out


def full_mask_temp_bytes(model, n: int) -> int:
  """XLA temporaries of the default clipping path's clipped sum over n rows (compiled, not run)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import clipping  # pylint: disable=g-import-not-at-top
  path = clipping.path_for(model)
  params = jax.eval_shape(model.init, jax.random.key(0))
  args = (params, jax.ShapeDtypeStruct((n, 784), jnp.float32),
          jax.ShapeDtypeStruct((n,), jnp.int32), jax.ShapeDtypeStruct((n,), jnp.float32))
  compiled = jax.jit(lambda p, a, b, w: path(p, a, b, w, CLIP)).lower(*args).compile()
  return int(compiled.memory_analysis().temp_size_in_bytes)


def _physical_memory_bytes() -> int:
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def opacus_runner(name: str, x_np, y_np, threads: int | None, batch: int | None = None):
  """(d): (runner, model), runner() training one Opacus epoch (ghost clipping, Poisson
  loader, expected batch `batch` or BATCH) with torch limited to `threads` (None: default);
  or (None, reason)."""
  try:
    import opacus  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    return None, f"torch / opacus not importable ({e})"
  import warnings  # pylint: disable=g-import-not-at-top
  from benchmarks.dpsgd_deep import _torch_model  # pylint: disable=g-import-not-at-top

  kind, kwargs = _MODELS[name]
  torch.manual_seed(SEED)
  model = _torch_model(kind, dict(kwargs, num_inputs=784) if kind == "mlp" else kwargs)
  loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
      _torch_images(name, x_np), torch.from_numpy(y_np.astype(np.int64))), batch_size=batch or BATCH)
  opt = torch.optim.SGD(model.parameters(), lr=LR_DP)
  engine = opacus.PrivacyEngine()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pmodel, popt, pcrit, ploader = engine.make_private(
        module=model, optimizer=opt, data_loader=loader,
        criterion=torch.nn.CrossEntropyLoss(), noise_multiplier=SIGMA, max_grad_norm=CLIP,
        poisson_sampling=True, grad_sample_mode="ghost")
  default_threads = torch.get_num_threads()

  def run(max_steps: int | None = None):
    if threads is not None:
      torch.set_num_threads(threads)
    steps = 0
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      for xb, yb in ploader:
        popt.zero_grad()
        pcrit(pmodel(xb), yb).backward()
        popt.step()
        steps += 1
        if max_steps is not None and steps >= max_steps:
          break
    torch.set_num_threads(default_threads)
    return steps
  return run, pmodel


def _torch_images(name, x_np):
  import torch  # pylint: disable=g-import-not-at-top
  shape = (-1, 784) if _MODELS[name][0] == "mlp" else (-1, IMAGE[2], IMAGE[0], IMAGE[1])
  return torch.from_numpy(np.ascontiguousarray(x_np.reshape(shape)))


def _opacus_accuracy(pmodel, name, x_np, y_np) -> float:
  import torch  # pylint: disable=g-import-not-at-top
  with torch.no_grad():
    logits = pmodel(_torch_images(name, x_np))
  return float((logits.argmax(1).numpy() == y_np).mean())


def _opacus_threads(name, x_np, y_np, log, batch=None) -> tuple[int | None, str | None]:
  """torch's faster thread count here (1 or its default), timed on a few steps; or a reason."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    return None, f"torch / opacus not importable ({e})"
  best = None
  for threads in sorted({1, torch.get_num_threads()}):
    run, why = opacus_runner(name, x_np, y_np, threads, batch)
    if run is None:
      return None, why
    run(3)
    t0 = time.perf_counter()
    steps = run(8)
    rate = steps / (time.perf_counter() - t0)
    log(f"[large_n] {name} opacus {threads} thread(s): {rate:.1f} steps/s")
    if best is None or rate > best[0]:
      best = (rate, threads)
  return best[1], None


def _opacus_baseline(name, x_np, y_np, skip: bool, log, batch=None) -> tuple:
  """(d) at torch's faster thread count: (runner, model, {"opacus_threads": t}) or (None, None,
  {"opacus_skipped": why})."""
  threads, why = (None, "skipped (--skip_opacus)") if skip else \
      _opacus_threads(name, x_np, y_np, log, batch)
  if why is not None:
    return None, None, {"opacus_skipped": why}
  run, model = opacus_runner(name, x_np, y_np, threads, batch)
  return _Runner(run), model, {"opacus_threads": threads}


def _timed(runners: dict, repeats: int, log, uncompiled=()) -> tuple[dict, dict]:
  return report.interleaved_times(runners, repeats, lambda s: log("[large_n] " + s), uncompiled)


def compile_times(runners: dict, names, log=print) -> dict:
  """{name: wall seconds to trace, lower and compile runners[name]'s program ahead of time},
  each timed on its own before any runner is called (so each is a fresh compilation, never a
  cache hit of this process)."""
  out = {}
  for name in names:
    out[name] = runners[name].compile_s()
    log(f"[large_n]   compile {name}: {out[name]:.2f} s")
  return out


def measure_workload(name: str, n: int, repeats: int, skip_opacus: bool, shrink: int,
                     data, log=print, full_mask: bool = True) -> dict:
  """One workload's figures (keys without the workload prefix); full_mask=False skips (c)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import dpsgd, sampling  # pylint: disable=g-import-not-at-top

  x_np, y_np, xt_np, yt_np = data
  x, y = jnp.asarray(x_np), jnp.asarray(y_np)
  model = _model(name)
  t_steps = steps_per_epoch(n)
  capacity = dpsgd.batch_layout(n, BATCH / n)
  # Full mask: where its clipped sum over n rows would not fit, time it at n / shrink.
  temp = full_mask_temp_bytes(model, n)
  out: dict = {"capacity": capacity, "full_mask_temp_bytes": temp}
  fm_n = n
  if temp > _MEMORY_FRACTION * _physical_memory_bytes():
    fm_n = n // shrink
    log(f"[large_n] {name}: the full-mask step needs {temp / 2**30:.1f} GiB of temporaries "
        f"at n = {n}; timing it at n = {fm_n} and scaling by {n / fm_n:g}")
  k1, k2 = (1, 3) if name == "mlp" else (1, 2)   # fewer steps where a step is slow
  fm_x, fm_y = x[:fm_n], y[:fm_n]
  runners = {"nonprivate": nonprivate_runner(model, x, y, t_steps),
             "dp_padded": dp_runner(model, x, y, t_steps, "auto")}
  if full_mask:
    runners.update(full_mask_k1=dp_runner(model, fm_x, fm_y, k1, None),
                   full_mask_k2=dp_runner(model, fm_x, fm_y, k2, None))
  if full_mask and name == "mlp":   # the full-mask step's cost is linear in n: check at n / shrink
    small = n // shrink
    runners.update(full_mask_small_k1=dp_runner(model, x[:small], y[:small], 2, None),
                   full_mask_small_k2=dp_runner(model, x[:small], y[:small], 12, None))
  runner, opacus_model, info = _opacus_baseline(name, x_np, y_np, skip_opacus, log)
  out.update(info)
  if runner is None:
    log(f"[large_n] {name}: Opacus baseline {info['opacus_skipped']}")
  else:
    runners["opacus"] = runner
  compile_s = compile_times(runners, ("nonprivate", "dp_padded")
                            + (("full_mask_k1",) if full_mask else ()), log)
  _, best = _timed(runners, repeats, log, uncompiled=("opacus",))

  out.update(nonprivate_epoch_s=best["nonprivate"], dp_padded_epoch_s=best["dp_padded"],
             compile_s={c: compile_s[c] for c in ("nonprivate", "dp_padded")},
             dp_over_nonprivate=best["dp_padded"] / best["nonprivate"],
             target_dp_over_nonprivate=TARGETS[name])
  if full_mask:
    per_step = (best["full_mask_k2"] - best["full_mask_k1"]) / (k2 - k1)
    scale = n / fm_n
    epoch = (best["full_mask_k1"] + (t_steps - k1) * per_step) * scale
    out.update(full_mask_timed_n=fm_n, full_mask_steps_timed=[k1, k2],
               full_mask_per_step_s=per_step * scale, full_mask_epoch_s=epoch,
               full_mask_over_padded=epoch / best["dp_padded"],
               target_full_mask_over_padded=TARGETS["full_mask"])
    if name == "mlp":
      small_step = (best["full_mask_small_k2"] - best["full_mask_small_k1"]) / 10
      out.update(full_mask_small_n=n // shrink, full_mask_small_per_step_s=small_step,
                 full_mask_linearity=per_step / small_step / (n / (n // shrink)))
    out["compile_s"]["full_mask"] = compile_s["full_mask_k1"]
  if "opacus" in runners:
    out.update(opacus_epoch_s=best["opacus"], opacus_over_ours=best["opacus"] / best["dp_padded"])
  out["accuracy"] = {c: _accuracy(model, runners[c].last, xt_np, yt_np)
                     for c in ("nonprivate", "dp_padded")}
  if opacus_model is not None:
    out["accuracy"]["opacus"] = _opacus_accuracy(opacus_model, name, xt_np, yt_np)

  # Where the padded epoch's time goes (seconds per epoch), when it misses its target.
  if capacity is not None and out["dp_over_nonprivate"] > TARGETS[name]:
    out["profile"] = _timed(profile_runners(model, x, y, t_steps, capacity), repeats, log)[1]
  out["default_capacity"] = sampling.default_batch_capacity(n, BATCH / n)
  return out


def _mem_child(spec: str, n: int) -> None:
  """Runs one configuration once (after building the data) and prints its peak RSS."""
  name, config = spec.split(":")
  data = synthetic_images(SEED, n)
  if config != "data_only":
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    x, y = jnp.asarray(data[0]), jnp.asarray(data[1])
    model = _model(name)
    t_steps = steps_per_epoch(n)
    if config == "nonprivate":
      nonprivate_runner(model, x, y, t_steps)()
    elif config == "dp_padded":
      dp_runner(model, x, y, t_steps, "auto")()
    elif config == "full_mask":
      fm_n = int(os.environ.get("LARGE_N_FULL_MASK_N", n))
      dp_runner(model, x[:fm_n], y[:fm_n], 1, None)()
    elif config == "opacus":
      threads = int(os.environ.get("LARGE_N_OPACUS_THREADS", "1"))
      run, _ = opacus_runner(name, data[0], data[1], threads)
      run(_OPACUS_MEMORY_STEPS)
    else:
      raise ValueError(f"unknown configuration {config!r}")
  print(json.dumps({"peak_rss_bytes": report.peak_rss_bytes()}))


def peak_rss(name: str, config: str, n: int, env: dict | None = None) -> int | None:
  """Peak resident bytes of a fresh process running `config` once (None if it failed)."""
  return report.child_peak_rss(
      "large_n", [f"--mem_child={name}:{config}", f"--n={n}", f"--batch={BATCH}"], env)


def measure_memory(name: str, n: int, full_mask_n: int | None, opacus_threads: int | None,
                   cache_dir: str | None) -> dict:
  """Peak resident bytes of each configuration in a fresh subprocess; cache_dir: a persistent
  compilation cache holding this workload's programs (None: they compile)."""
  cache = _cache_env(cache_dir)
  mem = {"data_only": peak_rss(name, "data_only", n)}
  for config in ("nonprivate", "dp_padded") + (("full_mask",) if full_mask_n else ()):
    mem[config] = peak_rss(name, config, n, dict(cache, LARGE_N_FULL_MASK_N=str(full_mask_n)))
  if opacus_threads is not None:
    mem["opacus"] = peak_rss(name, "opacus", n, {"LARGE_N_OPACUS_THREADS": str(opacus_threads)})
  return mem


def remeasure_memory(path: str, workloads) -> None:
  """Re-measures the peak memory of `workloads` in an existing results file (the rest kept;
  this run's command recorded as `memory_command`)."""
  with open(path) as f:
    doc = json.load(f)
  fig = doc["figures"]
  set_batch(fig.get("batch", BATCH))
  for name in workloads:
    mem = measure_memory(name, fig["n"], fig.get(f"{name}.full_mask_timed_n"),
                         fig.get(f"{name}.opacus_threads"),
                         os.environ.get("JAX_COMPILATION_CACHE_DIR"))
    fig.update(report.flatten(mem, f"{name}.peak_rss_bytes."))
  doc["memory_command"] = report.command("large_n")
  report.dump(path, doc)


def measure(workloads, n: int, repeats: int, skip_opacus: bool = False,
            skip_memory: bool = False, shrink: int = 10, log=print,
            checkpoint: Callable[[dict], object] | None = None,
            skip_full_mask: bool = False) -> dict:
  """All figures, a flat dict with dotted keys; `checkpoint(figures)` after each workload."""
  def one(name, data, cache_dir):
    log(f"[large_n] workload {name}")
    res = measure_workload(name, n, repeats, skip_opacus, shrink, data, log,
                           full_mask=not skip_full_mask)
    if not skip_memory:
      res["peak_rss_bytes"] = measure_memory(name, n, res.get("full_mask_timed_n"),
                                             res.get("opacus_threads"), cache_dir)
    return res
  return _each_workload(workloads, n, skip_memory, checkpoint, one, batch=BATCH,
                        sampling_prob=BATCH / n, steps_per_epoch=steps_per_epoch(n))


def _each_workload(workloads, n: int, skip_memory: bool, checkpoint, measure_one,
                   **header) -> dict:
  """{n, **header, ...} and `measure_one(name, data, cache_dir)` under `<name>.`, checkpointed."""
  import jax  # pylint: disable=g-import-not-at-top
  with _compilation_cache(not skip_memory) as cache_dir:
    data = synthetic_images(SEED, n, NUM_TEST)
    figures = {"n": n, **header, "noise_multiplier": SIGMA, "l2_clip_norm": CLIP,
               "compile_timing": "aot",   # `compile_times`
               "device": jax.devices()[0].platform,
               "physical_memory_bytes": _physical_memory_bytes()}
    for name in workloads:
      out = measure_one(name, data, cache_dir)
      out["command"] = report.command("large_n")
      figures.update(report.flatten(out, f"{name}."))
      if checkpoint is not None:
        checkpoint(figures)
  return figures


def _cache_env(cache_dir: str | None) -> dict:   # a memory subprocess's compilation cache
  return {} if cache_dir is None else {
      "JAX_COMPILATION_CACHE_DIR": cache_dir, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


@contextlib.contextmanager
def _compilation_cache(enabled: bool):
  """Yields a fresh persistent compilation cache folder (None when not enabled): this process
  compiles (its compile times are real), the memory subprocesses load the programs (their
  peak RSS is that of running, not of the compiler). On exit the previous settings are
  restored, JAX's cache handle reset and the folder removed."""
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental.compilation_cache import compilation_cache  # pylint: disable=g-import-not-at-top
  cache_dir, saved = None, {}
  if enabled:
    cache_dir = tempfile.mkdtemp(prefix="large_n_xla_cache_")
    for option, value in (("jax_compilation_cache_dir", cache_dir),
                          ("jax_persistent_cache_min_compile_time_secs", 0.0)):
      saved[option] = getattr(jax.config, option)
      jax.config.update(option, value)
  try:
    yield cache_dir
  finally:
    for option, value in saved.items():
      jax.config.update(option, value)
    if cache_dir is not None:
      compilation_cache.reset_cache()   # no later compile writes into the removed folder
      shutil.rmtree(cache_dir, ignore_errors=True)


def batch_target(batch: int, n: int) -> float:
  """The DP / non-private epoch target at expected batch B on n records: 1.6 below the
  equivalent of B = 1,024 at n = 60,000 (B n_0 / n < 1,024), else 1.3."""
  return 1.6 if batch * 60_000 / n < 1024 else 1.3


def measure_batches(workloads, n: int, batches, repeats: int, skip_opacus: bool = False,
                    skip_memory: bool = False, profile: bool = False, log=print,
                    checkpoint: Callable[[dict], object] | None = None) -> dict:
  """DP over non-private epochs at each expected batch B of `batches`: per workload, every
  B's runners timed interleaved in one process (compile: `compile_times`, apart); peak
  memory per configuration in fresh subprocesses; `profile`: where each DP epoch's time
  goes. Keys `<w>.B<b>.<figure>`; `checkpoint(figures)` after each workload."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
  batches = [int(b) for b in batches]
  if not batches or min(batches) < 1:
    raise ValueError(f"batches must be positive ints, got {batches!r}")

  def one(name, data, cache_dir):
    log(f"[large_n] workload {name}, B = {batches}")
    x, y = jnp.asarray(data[0]), jnp.asarray(data[1])
    model = _model(name)
    runners, opacus_models, out = {}, {}, {}
    for b in batches:
      t = steps_per_epoch(n, b)
      out[f"B{b}"] = {"steps_per_epoch": t, "capacity": dpsgd.batch_layout(n, b / n),
                      "target_dp_over_nonprivate": batch_target(b, n)}
      runners[f"B{b}.nonprivate"] = nonprivate_runner(model, x, y, t, batch=b)
      runners[f"B{b}.dp"] = dp_runner(model, x, y, t, "auto", batch=b)
      runner, opacus_models[b], info = _opacus_baseline(name, data[0], data[1], skip_opacus,
                                                        log, b)
      out[f"B{b}"].update(info)
      if runner is not None:
        runners[f"B{b}.opacus"] = runner
    compile_s = compile_times(runners, [f"B{b}.{c}" for b in batches
                                        for c in ("nonprivate", "dp")], log)
    _, best = _timed(runners, repeats, log,
                     uncompiled=tuple(k for k in runners if k.endswith("opacus")))
    for b in batches:
      o, k = out[f"B{b}"], f"B{b}."
      cpu = {c: min(runners[k + c].cpu_s[1:]) for c in ("nonprivate", "dp")}
      o.update(nonprivate_epoch_s=best[k + "nonprivate"], dp_epoch_s=best[k + "dp"],
               dp_over_nonprivate=best[k + "dp"] / best[k + "nonprivate"],
               nonprivate_epoch_cpu_s=cpu["nonprivate"], dp_epoch_cpu_s=cpu["dp"],
               dp_over_nonprivate_cpu=cpu["dp"] / cpu["nonprivate"],
               compile_s={c: compile_s[k + c] for c in ("nonprivate", "dp")},
               accuracy={c: _accuracy(model, runners[k + c].last, data[2], data[3])
                         for c in ("nonprivate", "dp")})
      if k + "opacus" in runners:
        o.update(opacus_epoch_s=best[k + "opacus"],
                 opacus_over_ours=best[k + "opacus"] / best[k + "dp"])
        o["accuracy"]["opacus"] = _opacus_accuracy(opacus_models[b], name, data[2], data[3])
      if profile and o["capacity"] is not None:
        o["profile"] = _timed(profile_runners(model, x, y, o["steps_per_epoch"],
                                              o["capacity"], batch=b), repeats, log)[1]
      if not skip_memory:
        set_batch(b)   # the memory subprocesses' --batch
        o["peak_rss_bytes"] = {c: peak_rss(name, c, n, _cache_env(cache_dir))
                               for c in ("nonprivate", "dp_padded")}
    return out
  return _each_workload(workloads, n, skip_memory, checkpoint, one, batches=batches)


def _define_flags() -> None:
  """The flags, defined only when run as a program (importing this module defines none)."""
  flags.DEFINE_string("workloads", "mlp,cnn", "Comma-separated: mlp, cnn.")
  flags.DEFINE_integer("n", 60_000, "Training records.")
  flags.DEFINE_integer("batch", BATCH, "Expected batch size B (q = B / n).")
  flags.DEFINE_bool("skip_full_mask", False, "Skip the full-mask configuration (c).")
  flags.DEFINE_integer("repeats", 2, "Timed repetitions (best is kept).")
  flags.DEFINE_integer("full_mask_shrink", 10, "The full-mask step is timed at n / this "
                       "many records when its temporaries at n would not fit in memory.")
  flags.DEFINE_bool("skip_opacus", False, "Skip the Opacus baseline.")
  flags.DEFINE_bool("skip_memory", False, "Skip the peak-memory subprocesses.")
  flags.DEFINE_string("json", None, "Where to write the figures (default: "
                      "benchmarks/results/large_n.json, what RESULTS.md is built from).")
  flags.DEFINE_bool("merge", False, "Keep the other workloads' figures of the existing "
                    "results file (each records its own command).")
  flags.DEFINE_bool("memory_only", False, "Only re-measure the peak memory of --workloads "
                    "in the existing results file (--json or the default).")
  flags.DEFINE_list("batches", [], "Expected batch sizes B to sweep (e.g. 256,1024,4096): "
                    "DP / non-private epoch at each, written to --json or "
                    "benchmarks/results/large_n_batches.json (full mask not run).")
  flags.DEFINE_bool("profile", False, "With --batches: where each DP epoch's time goes.")
  flags.DEFINE_bool("small", False, f"Toy sizes: n = {SMALL_N:,} and every B divided by "
                    f"{SMALL_DIVISOR} (a check of the harness, not a measurement).")
  flags.DEFINE_string("mem_child", None, "(internal) run <workload>:<config> once and print "
                      "its peak RSS.")


def main(argv):
  del argv
  fv = flags.FLAGS
  set_batch(fv.batch)
  if fv.mem_child:
    _mem_child(fv.mem_child, fv.n)
    return
  workloads = [w for w in fv.workloads.split(",") if w]
  for w in workloads:
    if w not in _MODELS:
      raise ValueError(f"--workloads: unknown workload {w!r} (known: {sorted(_MODELS)})")
  n = SMALL_N if fv.small else fv.n
  if fv.batches:
    batches = [max(1, int(b) // SMALL_DIVISOR) if fv.small else int(b) for b in fv.batches]
    path = fv.json or os.path.join(report.RESULTS_DIR, "large_n_batches.json")

    def save_batches(f):
      report.dump(path, {"benchmark": "large_n_batches", "command": report.command("large_n"),
                         "environment": report.environment(), "figures": f})
    figures = measure_batches(workloads, n, batches, fv.repeats, fv.skip_opacus,
                              fv.skip_memory, fv.profile, checkpoint=save_batches)
    save_batches(figures)
    return
  if fv.small:
    set_batch(max(1, fv.batch // SMALL_DIVISOR))
  path = fv.json or os.path.join(report.RESULTS_DIR, "large_n.json")
  if fv.memory_only:
    remeasure_memory(path, workloads)
    return
  kept = _kept_figures(path, workloads, n) if fv.merge else {}

  def save(f):
    report.write("large_n", dict(kept, **f), fv.json)
  figures = measure(workloads, n, fv.repeats, fv.skip_opacus, fv.skip_memory,
                    fv.full_mask_shrink, checkpoint=save, skip_full_mask=fv.skip_full_mask)
  for k, v in figures.items():
    print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
  save(figures)


def _kept_figures(path: str, workloads, n: int) -> dict:
  """The other workloads' figures in an existing results file (--merge), each with the
  command that measured it (`<w>.command`)."""
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    doc = json.load(f)
  fig = doc["figures"]
  if fig.get("n") != n:
    raise ValueError(f"--merge: {path} was measured at n = {fig.get('n')}, not {n}")
  if fig.get("batch", BATCH) != BATCH:
    raise ValueError(f"--merge: {path} was measured at B = {fig.get('batch')}, not {BATCH}")
  kept = {k: v for k, v in fig.items() if k.split(".")[0] not in workloads}
  for name in {k.split(".")[0] for k in kept if "." in k}:
    kept.setdefault(f"{name}.command", doc["command"])
  return kept


if __name__ == "__main__":
  _define_flags()
  app.run(main)
