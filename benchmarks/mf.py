"""Benchmark: matrix-factorization (BandMF) training against DP-SGD, per step.

    .venv/bin/python -m benchmarks.mf            # writes benchmarks/results/mf.json

Two workloads, each timed round-robin in one process (`report.interleaved_times`, best of
--repeats, default 2, after a compiling call; --json overrides the output path), DP-SGD and BandMF with the same Poisson sampler,
clipping and step count, so the ratio is the cost of the correlated noise
(`privatizer.CorrelatedNoisePrivatizer` on `matrix_factorization.toeplitz_stream` with b
bands, state b - 1 past noise draws per parameter):

  audit: `benchmarks.dpsgd`'s audit workload (logistic regression, n = 150, 56
    parameters, q = 0.2, T = 500) for M = --models models in one `train_many`;
  large_n: one MLP 784-256-256-10 (269,322 parameters) at n = 60,000, B = 256, for
    --large_steps steps (`benchmarks.large_n`'s data and configuration).

Plus BandMF on `sampling.CyclicPoissonSampler` (cycle = b, bin rate q b, the same
expected batch) where q b <= 1. Target: BandMF time / DP-SGD time <= 1.2 for b <= 64.

Floor (`ring_b<b>`, timed in the same round-robin): the stream's recursion alone,
`toeplitz_stream(coefs, T).from_draw` on a fixed draw for the same M models and P
parameters (no sampling, clipping or PRNG): one pass over the ring of (b - 1) P M
float32 and one slot written per step, the memory traffic every step of the exact
recursion must make. floor ratio = 1 + ring time / DP-SGD time: the best BandMF / DP-SGD
ratio any implementation that reads the ring once per step can reach here.
"""

from __future__ import annotations

import math

import numpy as np
from absl import app
from absl import flags

from benchmarks import dpsgd as bench_dpsgd   # defines --repeats and --json, used here too
from benchmarks import report

_MODELS = flags.DEFINE_integer("models", 2000, "Models M of the audit workload.")
_BANDS = flags.DEFINE_list("bands", ["1", "4", "16", "64"], "Bands b.")
_LARGE_N = flags.DEFINE_integer("large_n", 60_000, "Records of the large-n workload.")
_LARGE_STEPS = flags.DEFINE_integer("large_steps", 40, "Steps of the large-n workload.")
_SKIP_LARGE = flags.DEFINE_bool("skip_large", False, "Skip the large-n workload.")
_SKIP_AUDIT = flags.DEFINE_bool("skip_audit", False, "Skip the audit workload.")

TARGET = 1.2


def _privatizer(bands: int, num_steps: int):
  from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  from dpjax import privatizer  # pylint: disable=g-import-not-at-top
  coefs = mf.sqrt_toeplitz_coefs(bands)
  return privatizer.CorrelatedNoisePrivatizer(mf.toeplitz_stream(coefs, num_steps))


def _quiet(fn):
  """fn with the engine's accounting warnings silenced (the timings are the point)."""
  import warnings  # pylint: disable=g-import-not-at-top

  def run():
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      return fn()
  return run


def _variants(bands, num_steps, sampling_prob, runner):
  """{name: zero-argument timed function}: DP-SGD, BandMF b per b, BandMF on cyclic
  Poisson batches where q b <= 1."""
  from dpjax import sampling  # pylint: disable=g-import-not-at-top
  fns = {"dpsgd": _quiet(runner())}
  for b in bands:
    priv = _privatizer(b, num_steps)
    fns[f"mf_b{b}"] = _quiet(runner(privatizer=priv))
    if 1 < b and sampling_prob * b <= 1:
      cyc = sampling.CyclicPoissonSampler(bin_prob=sampling_prob * b, cycle_length=b)
      fns[f"mf_b{b}_cyclic"] = _quiet(runner(privatizer=priv, sampler=cyc))
  return fns


def _ring_runner(bands: int, num_steps: int, num_models: int, num_params: int):
  """A zero-argument function that runs the b-band stream's recursion alone (`from_draw`
  on a fixed draw, no PRNG) over T steps for M models of P parameters, vmapped over
  models as the engine does (unbatched for M = 1), and blocks until done."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  stream = mf.toeplitz_stream(mf.sqrt_toeplitz_coefs(bands), num_steps)
  z = jnp.ones((num_models, num_params), jnp.float32)

  def one(z1):
    def body(st, t):
      return stream.from_draw(st, z1, t)[1], None
    return jax.lax.scan(body, stream.init((num_params,)),
                        jnp.arange(num_steps, dtype=jnp.int32))[0]

  fn = jax.jit(jax.vmap(one) if num_models > 1 else lambda zz: one(zz[0]))
  return lambda: jax.block_until_ready(fn(z))


def _with_rings(fns: dict, bands, num_steps: int, num_models: int, num_params: int) -> dict:
  """fns plus `ring_b<b>` (`_ring_runner`) for each b > 1."""
  out = dict(fns)
  for b in bands:
    if b > 1:
      out[f"ring_b{b}"] = _ring_runner(b, num_steps, num_models, num_params)
  return out


def _ratios(best: dict, num_steps: int, log, label: str) -> dict:
  out = {"dpsgd_s_per_step": best["dpsgd"] / num_steps}
  for k, v in best.items():
    if k == "dpsgd":
      continue
    if k.startswith("ring_"):
      out[f"{k}_s_per_step"] = v / num_steps
      out[f"{k}_floor"] = 1.0 + v / best["dpsgd"]
      log(f"[{label}] {k}: {1e3 * v / num_steps:.3f} ms/step (floor ratio "
          f"{1.0 + v / best['dpsgd']:.3f}x)")
      continue
    out[f"{k}_s_per_step"] = v / num_steps
    out[f"{k}_ratio"] = v / best["dpsgd"]
    log(f"[{label}] {k}: {v / best['dpsgd']:.3f}x DP-SGD "
        f"({1e3 * v / num_steps:.3f} vs {1e3 * best['dpsgd'] / num_steps:.3f} ms/step)")
  return out


def _num_params(num_features: int) -> int:
  """P of the audit workload's `models.logistic_regression(D)`."""
  import jax  # pylint: disable=g-import-not-at-top
  from dpjax import models  # pylint: disable=g-import-not-at-top
  return sum(math.prod(l.shape) for l in jax.tree.leaves(
      jax.eval_shape(models.logistic_regression(num_features).init, jax.random.key(0))))


def measure_audit(num_models: int, bands, repeats: int, log=print) -> dict:
  import functools  # pylint: disable=g-import-not-at-top
  x, y = bench_dpsgd._data()  # pylint: disable=protected-access
  runner = functools.partial(bench_dpsgd.audit_runner, x, y, num_models)
  _, best = report.interleaved_times(
      _with_rings(_variants(bands, bench_dpsgd.T, bench_dpsgd.Q, runner), bands,
                  bench_dpsgd.T, num_models, _num_params(bench_dpsgd.D)), repeats,
      lambda s: log("[audit] " + s))
  return _ratios(best, bench_dpsgd.T, log, f"audit M={num_models}")


def measure_large_n(n: int, num_steps: int, bands, repeats: int, log=print) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from benchmarks import large_n  # pylint: disable=g-import-not-at-top
  from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
  x, y, _, _ = large_n.synthetic_images(large_n.SEED, n)
  x, y = jnp.asarray(x), jnp.asarray(y)
  model = large_n._model("mlp")  # pylint: disable=protected-access
  cfg = large_n._dp_config(n, num_steps)  # pylint: disable=protected-access
  keep = jnp.ones((n,), bool)
  key = jax.random.key(large_n.SEED + 1)

  def runner(**kw):
    def run():
      out = dpsgd.train_one(key, x, y, keep, cfg, model,
                            perf=dpsgd.PerformanceFlags(progress=False), **kw)
      return jax.block_until_ready(out.params)
    return run

  bands = [b for b in bands if b <= num_steps]
  num_params = sum(math.prod(l.shape) for l in jax.tree.leaves(
      jax.eval_shape(model.init, jax.random.key(0))))
  _, best = report.interleaved_times(
      _with_rings(_variants(bands, num_steps, cfg.sampling_prob, runner), bands, num_steps,
                  1, num_params),
      repeats, lambda s: log("[large_n] " + s))
  return _ratios(best, num_steps, log, f"large_n n={n}")


def main(argv):
  del argv
  bands = [int(b) for b in _BANDS.value]
  figures = {"target_ratio": TARGET, "bands": bands}
  if not _SKIP_AUDIT.value:
    figures["audit"] = {"models": _MODELS.value,
                        **measure_audit(_MODELS.value, bands, flags.FLAGS.repeats)}
  if not _SKIP_LARGE.value:
    figures["large_n"] = {"n": _LARGE_N.value, "steps": _LARGE_STEPS.value,
                          **measure_large_n(_LARGE_N.value, _LARGE_STEPS.value, bands,
                                            flags.FLAGS.repeats)}
  worst = max(v for w in ("audit", "large_n") if w in figures
              for k, v in figures[w].items() if k.endswith("_ratio"))
  figures["worst_ratio"] = worst
  print(f"worst BandMF / DP-SGD ratio: {worst:.3f} (target <= {TARGET})")
  print("wrote", report.write("mf", figures, flags.FLAGS.json))


if __name__ == "__main__":
  np.seterr(all="ignore")
  app.run(main)
