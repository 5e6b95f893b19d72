"""Benchmark: compile time of the DP-SGD engine against the matching non-private program.

    .venv/bin/python -m benchmarks.compile_time        # writes benchmarks/results/compile_time.json
    .venv/bin/python -m benchmarks.compile_time --n 6000 --models 200 --out /tmp/c.json

RESULTS.md shows beside it `results/compile_time_before.json` when present: this benchmark
run on an earlier engine (`--label` names it), for before / after ratios.

Compiled ahead of time in one process (`lower`, then `compile`, timed apart; nothing run;
best of --compiles fresh compiles, the DP and non-private programs taken in turn, so a burst
of load or the process's first compile hits both alike):
`mlp` (`dpsgd.train_one`'s program, MLP 784-256-256-10 on 60,000 synthetic images, B = 256, one
epoch: Poisson batches in padded buffers, ghost clipping) and `audit` (`dpsgd.train_many`'s
program for the `benchmarks.dpsgd` workload, M = 2,000, GLM clipping, unrolled steps), each
against optax SGD over the same T steps (initialising its parameters from a key inside the
program, as the DP program does); the other engine paths, each against its workload's
non-private program: `mlp_full_mask` (batch_capacity=None), `mlp_vmap` (per-example
gradients, the generic two-pass vmap path), `cnn` (28x28 CNN, ghost) and `audit_secure`
(`privatizer.secure_components`). Keys:
`<w>.<dp|nonprivate>.{lower_s, compile_s, compile_cpu_s, stablehlo_ops, hlo_ops, run_s}`,
`<w>.compile_ratio` (DP / non-private compile wall time, target <= 2),
`<w>.compile_cpu_ratio` (the same from the process's CPU seconds, steadier on a loaded
machine), `<w>.run_ratio`.
"""

from __future__ import annotations

import re
import time

from absl import app
from absl import flags

from benchmarks import report

_N = flags.DEFINE_integer("n", 60_000, "Records of the MLP workload.")
_MODELS = flags.DEFINE_integer("models", 2_000, "Models M of the audit workload.")
_WORKLOADS = flags.DEFINE_list("workloads", ["mlp", "audit"],
                                "Workloads to measure: mlp, audit, mlp_full_mask, mlp_vmap, "
                                "cnn, audit_secure.")
# Not --repeats / --json: benchmarks.dpsgd, imported for its workload, defines those.
_RUNS = flags.DEFINE_integer("runs", 2, "Timed runs of each compiled program (0: none).")
_COMPILES = flags.DEFINE_integer("compiles", 3, "Fresh compiles of each program (best kept).")
_OUT = flags.DEFINE_string("out", None, "Output (default benchmarks/results/compile_time.json).")
_LABEL = flags.DEFINE_string("label", None, "What engine was measured (e.g. its commit), kept "
                             "in the JSON.")


TARGET = 2.0


def _nonprivate(model, num_steps: int, batch: int, lr: float):
  """f(key, x, y): model.init, then num_steps SGD steps on batches of `batch` permuted rows."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from dpjax import models  # pylint: disable=g-import-not-at-top
  opt = optax.sgd(lr)

  def train(key, x, y):
    k_init, k_perm = jax.random.split(key)
    params = model.init(k_init)
    perm = jax.random.permutation(k_perm, x.shape[0])

    def step(carry, t):
      p, s = carry
      start = (t * batch) % (x.shape[0] - batch + 1)
      idx = jax.lax.dynamic_slice_in_dim(perm, start, batch)
      g = jax.grad(lambda w: jnp.mean(models.loss_from_logits(model.apply(w, x[idx]), y[idx])))(p)
      u, s = opt.update(g, s, p)
      return (optax.apply_updates(p, u), s), None
    return jax.lax.scan(step, (params, opt.init(params)),
                        jnp.arange(num_steps, dtype=jnp.int32))[0][0]
  return train


# Workloads whose full run is too slow to time here (every record's gradient at every step).
_NOT_RUN = ("mlp_full_mask",)


def _programs(workload: str):
  """{"dp": (fn, args), "nonprivate": (fn, args)} for one workload."""
  import warnings  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from benchmarks import dpsgd as dpsgd_bench  # pylint: disable=g-import-not-at-top
  from benchmarks import large_n  # pylint: disable=g-import-not-at-top
  from dpjax import clipping, dpsgd, models, privatizer  # pylint: disable=g-import-not-at-top
  if workload in ("mlp", "mlp_full_mask", "mlp_vmap", "cnn"):
    n = _N.value
    x, y, _, _ = large_n.synthetic_images(large_n.SEED, n)
    x, y = jnp.asarray(x), jnp.asarray(y)
    model = large_n._model("cnn" if workload == "cnn" else "mlp")  # pylint: disable=protected-access
    steps = large_n.steps_per_epoch(n)
    cfg = large_n._dp_config(n, steps)  # pylint: disable=protected-access
    kwargs = {"perf": dpsgd.PerformanceFlags(progress=False)}
    if workload == "mlp_full_mask":
      kwargs["perf"] = dpsgd.PerformanceFlags(progress=False, batch_capacity=None)
    if workload == "mlp_vmap":
      kwargs["clipping"] = clipping.generic_path(model)
    dp = dpsgd.program(jax.random.key(1), x, y, jnp.ones((1, n), bool), cfg, model, **kwargs)
    train = _nonprivate(model, steps, large_n.BATCH, large_n.LR_NONPRIVATE)
    return {"dp": dp, "nonprivate": (train, (jax.random.key(2), x, y))}
  x, y = dpsgd_bench._data()  # pylint: disable=protected-access
  x, y = jnp.asarray(x), jnp.asarray(y, jnp.int32)
  m, n = _MODELS.value, x.shape[0]
  model = models.logistic_regression(dpsgd_bench.D)
  cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=dpsgd_bench.Q,
                          num_steps=dpsgd_bench.T, l2_clip_norm=dpsgd_bench.C,
                          noise_multiplier=dpsgd_bench.SIGMA, learning_rate=dpsgd_bench.LR)
  kwargs = {}
  if workload == "audit_secure":
    kwargs["clipping"], kwargs["privatizer"] = privatizer.secure_components(
        dpsgd_bench.SIGMA, dpsgd_bench.C, model)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", dpsgd.UnaccountedComponentWarning)
    dp = dpsgd.program(jax.random.key(1), x, y, jnp.ones((m, n), bool), cfg, model,
                       perf=dpsgd.PerformanceFlags(progress=False), **kwargs)
  one = _nonprivate(model, dpsgd_bench.T, round(dpsgd_bench.Q * n), dpsgd_bench.LR)
  train = jax.vmap(one, in_axes=(0, None, None))
  return {"dp": dp, "nonprivate": (train, (jax.random.split(jax.random.key(2), m), x, y))}


def _ops(text: str) -> int:
  """Instructions of an HLO / StableHLO module text (lines defining a value)."""
  return len(re.findall(r"^\s*(?:ROOT\s+)?%\S+\s*=", text, re.MULTILINE))


def measure(fn, args) -> tuple[dict, object]:
  """Lower and compile `fn` ahead of time (timed apart), after clearing JAX's caches (a
  fresh compile): (figures, the compiled program)."""
  import jax  # pylint: disable=g-import-not-at-top
  jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
  jax.clear_caches()
  t0 = time.perf_counter()
  lowered = jitted.lower(*args)
  t1 = time.perf_counter()
  c1 = time.process_time()   # all threads of the process: XLA compiles kernels in parallel
  compiled = lowered.compile()
  c2 = time.process_time()
  t2 = time.perf_counter()
  return {"lower_s": t1 - t0, "compile_s": t2 - t1, "compile_cpu_s": c2 - c1,
          "stablehlo_ops": _ops(lowered.as_text()), "hlo_ops": _ops(compiled.as_text())}, compiled


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  figures = {"n_mlp": _N.value, "models_audit": _MODELS.value, "target": TARGET,
             "compiles": _COMPILES.value}
  if _LABEL.value:
    figures["label"] = _LABEL.value
  for w in _WORKLOADS.value:
    res, runs = {}, {}
    programs = _programs(w)
    for _ in range(max(1, _COMPILES.value)):
      for k in ("nonprivate", "dp"):
        fn, args = programs[k]
        got, compiled = measure(fn, args)
        res[k] = got if k not in res else {
            key: min(v, got[key]) if key.endswith("_s") else v for key, v in res[k].items()}
        runs[k] = lambda c=compiled, a=args: jax.block_until_ready(c(*a))
    res["compile_ratio"] = res["dp"]["compile_s"] / res["nonprivate"]["compile_s"]
    res["compile_cpu_ratio"] = res["dp"]["compile_cpu_s"] / res["nonprivate"]["compile_cpu_s"]
    if _RUNS.value and w not in _NOT_RUN:   # round-robin, so a burst of load hits both alike
      best = report.interleaved_times(runs, _RUNS.value)[1]
      for k, v in best.items():
        res[k]["run_s"] = v
      res["run_ratio"] = best["dp"] / best["nonprivate"]
    print(w, res, flush=True)
    figures.update(report.flatten(res, f"{w}."))
    report.write("compile_time", figures, _OUT.value)   # after each workload: a cut run counts


if __name__ == "__main__":
  app.run(main)
