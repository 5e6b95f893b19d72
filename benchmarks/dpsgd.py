"""Benchmark: the many-model DP-SGD engine against a careful NumPy baseline.

    .venv/bin/python -m benchmarks.dpsgd               # writes benchmarks/results/dpsgd.json
    .venv/bin/python -m benchmarks.dpsgd --sizes 128,2000 --skip_deep --json /tmp/d.json

The audit workload (logistic regression on 56 cubic credit features, n = 150, q = 0.2, T = 500,
C = 1, sigma = 1, lr = 0.5, M models), in one process, best of --repeats: numpy (two BLAS
matmuls per step, best thread count); `dpsgd.train_many`'s GLM fast path; the same with
stand-in random numbers (`stand_in_rng_*`: one multiply per mask bit and noise value in place
of threefry and the inverse CDF, through the engine's sampler and privatizer doors; NOT
random, so it bounds what any exact sampler could gain); the generic paths (`generic_*`,
`generic_plain_*` without the sqnorm rewrite, `generic_one_pass_*`) unless --skip_generic;
a float32 matmul peak; the peak memory of a fresh subprocess at the largest M; `dpsgd_deep`
merged in unless --skip_deep. One step is 4 N D = 33.6 kFLOP. --main_job_trials N also runs
`experiments.audit --trials N` in a child process and records its CPU seconds (user + sys).
--merge keeps the existing JSON's figures of the rows (M) and parts this run does not measure.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import ClassVar

import numpy as np
from absl import app
from absl import flags

from benchmarks import report

_SIZES = flags.DEFINE_string("sizes", "128,2000,20000", "Comma-separated model counts M.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (best is kept).")
_JSON = flags.DEFINE_string("json", None, "Where to write the figures (default: "
                             "benchmarks/results/dpsgd.json, what RESULTS.md is built from).")
_SKIP_DEEP = flags.DEFINE_bool("skip_deep", False, "Skip benchmarks.dpsgd_deep.")
_SKIP_GENERIC_LARGEST = flags.DEFINE_bool(
    "skip_generic_largest", False, "Skip the generic path at the largest M.")
_SKIP_GENERIC = flags.DEFINE_bool("skip_generic", False, "Skip the generic paths at every M.")
_MAIN_JOB_TRIALS = flags.DEFINE_integer(
    "main_job_trials", 0, "Also time `experiments.audit --trials N` in a child (0: no).")
_MERGE = flags.DEFINE_bool("merge", False, "Keep the existing JSON's figures that this run "
                           "does not measure.")
_MEM_CHILD = flags.DEFINE_integer("mem_child", 0, "(internal) train M models and exit.")
_CHUNK_SIZES = flags.DEFINE_string(
    "chunk_sizes", None, "Only time one chunk of the main job (2,000 audit models, K = 1 and "
    "K = 10 gradient canaries) at these engine chunk sizes (max_chunk); writes "
    "benchmarks/results/dpsgd_chunks.json (or --json).")

N, D, Q, T, C, SIGMA, LR = 150, 56, 0.2, 500, 1.0, 1.0, 0.5
FLOP_PER_MODEL = 4 * N * D * T


def _data():
  import jax  # pylint: disable=g-import-not-at-top
  from dpjax.data import credit  # pylint: disable=g-import-not-at-top
  k_pub, k_priv = jax.random.split(jax.random.key(0))
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 4000).x_NxF)
  data = credit.sample(k_priv, N)
  return (np.asarray(credit.cubic_features(data.x_NxF, scaler), np.float32),
          np.asarray(data.y_N, np.float32))


def numpy_train(x_NxD, y_N, num_models, rng):
  """The matrix-parallel NumPy baseline: W is D x M, two matmuls per step."""
  x = x_NxD.astype(np.float32)
  y = y_N.astype(np.float32)[:, None]
  row_norm = np.sqrt(np.sum(x * x, axis=1))[:, None]        # ||x_i||, [N, 1]
  xt = np.ascontiguousarray(x.T)
  w = np.zeros((x.shape[1], num_models), np.float32)
  b = Q * N
  for _ in range(T):
    mask = rng.random((N, num_models), dtype=np.float32) < Q
    z = x @ w                                                # [N, M]
    r = 1.0 / (1.0 + np.exp(-z)) - y
    norm = np.abs(r) * row_norm                              # per-example grad norms
    scale = np.minimum(1.0, C / np.maximum(norm, 1e-12))
    g = xt @ (r * scale * mask)                              # clipped sum, [D, M]
    g += (SIGMA * C) * rng.standard_normal((x.shape[1], num_models), dtype=np.float32)
    w -= (LR / b) * g
  return w


def _blas_threads(threads):
  """A context that limits NumPy's BLAS to `threads` (a no-op without threadpoolctl)."""
  try:
    from threadpoolctl import threadpool_limits  # pylint: disable=g-import-not-at-top
  except ImportError:
    import contextlib  # pylint: disable=g-import-not-at-top
    return contextlib.nullcontext()
  return threadpool_limits(limits=threads, user_api="blas")


def numpy_best_threads(x, y, num_models, rng):
  """BLAS thread count (1 or os.cpu_count()) at which the NumPy baseline runs fastest here."""
  best = None
  for threads in sorted({1, os.cpu_count() or 1}):
    with _blas_threads(threads):
      t = _best(lambda: numpy_train(x, y, num_models, rng), 1)
    if best is None or t < best[0]:
      best = (t, threads)
  return best[1]


def _best(f, repeats):
  return report.interleaved_times({"f": f}, repeats)[1]["f"]


def matmul_peak_gflops(size=1024, reps_per_timing=20, repeats=3):
  """Best sustained float32 GFLOP/s of size^3 matmuls, max over NumPy and XLA; each timing
  covers `reps_per_timing` back-to-back matmuls (about a second)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
  flop = 2.0 * size ** 3 * reps_per_timing

  def np_loop():
    for _ in range(reps_per_timing):
      a @ a
  aj = jnp.asarray(a)
  mm = jax.jit(lambda u: u @ u)

  def jx_loop():
    outs = [mm(aj) for _ in range(reps_per_timing)]
    jax.block_until_ready(outs)
  t_np = _best(np_loop, repeats)
  t_jx = _best(jx_loop, repeats)
  return {"numpy_gflops": flop / t_np / 1e9, "xla_gflops": flop / t_jx / 1e9,
          "peak_gflops": flop / min(t_np, t_jx) / 1e9}


def _dpjax_runner(x, y, num_models, generic):
  from dpjax import models  # pylint: disable=g-import-not-at-top
  from dpjax.clipping import vmap  # pylint: disable=g-import-not-at-top
  model = models.logistic_regression(D)
  csf = {False: None, True: functools.partial(vmap.clipped_grad_sum, model),
         "two_pass": functools.partial(vmap.two_pass_clipped_grad_sum, model),
         "two_pass_plain": functools.partial(vmap.two_pass_clipped_grad_sum, model,
                                             rewrite_norms=False)}[generic]
  return audit_runner(x, y, num_models, clipping=csf)


def _stand_in_bits(key, step, n):
  """uint32[n]: one multiply-add per element from the key and step; NOT random."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  k = jax.random.key_data(key)
  seed = k[0] ^ (jnp.asarray(step, jnp.uint32) * jnp.uint32(0x85EBCA6B))
  return jnp.arange(n, dtype=jnp.uint32) * (k[1] | jnp.uint32(1)) + seed


@dataclasses.dataclass(frozen=True)
class StandInSampler:
  """Batch bits from `_stand_in_bits` (rate about q); benchmarks only, not a sampler."""
  sampling_prob: float = Q
  accounted: ClassVar[bool] = False

  def batch_mask(self, key, step, keep_N):
    thr = int(self.sampling_prob * 2 ** 16)
    return ((_stand_in_bits(key, step, keep_N.shape[0]) >> 16) < thr) & keep_N


@dataclasses.dataclass(frozen=True)
class StandInPrivatizer:
  """Adds std * (a value in [-1, 1) from `_stand_in_bits`), then divides by B; benchmarks only."""
  accounted: ClassVar[bool] = False

  def noise_stddev(self, noise_multiplier, l2_clip_norm):
    return float(noise_multiplier) * float(l2_clip_norm)

  def transform(self, noise_stddev, expected_batch_size, key):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    import optax  # pylint: disable=g-import-not-at-top

    def update(updates, count, params=None):
      del params
      leaves, tree = jax.tree.flatten(updates)
      out = []
      for i, l in enumerate(leaves):
        u = _stand_in_bits(jax.random.fold_in(key, i), count, l.size) >> 9
        out.append(l + noise_stddev * (u.astype(jnp.float32) * 2.0 ** -22 - 1.0).reshape(l.shape))
      return jax.tree.unflatten(tree, out), count + 1
    noise = optax.GradientTransformation(lambda p: jnp.zeros((), jnp.int32), update)
    return optax.chain(noise, optax.scale(1.0 / expected_batch_size))


def _mem_child(num_models):
  x, y = _data()
  _dpjax_runner(x, y, num_models, generic=False)()
  print(json.dumps({"peak_rss_bytes": report.peak_rss_bytes()}))


def measure_audit_workload(sizes, repeats, skip_generic_largest=False, log=print,
                           skip_generic=False):
  x, y = _data()
  res = {}
  peak = matmul_peak_gflops()
  res["matmul_peak"] = peak
  log(f"float32 matmul peak: {peak['peak_gflops']:.1f} GFLOP/s "
      f"(numpy {peak['numpy_gflops']:.1f}, XLA {peak['xla_gflops']:.1f})")
  for m in sizes:
    row = {}
    rng = np.random.default_rng(0)
    reps = repeats if m <= 2000 else min(repeats, 2)   # large M: ~15 s per numpy run
    np_threads = numpy_best_threads(x, y, m, rng)
    row["numpy_blas_threads"] = np_threads

    def numpy_run():
      with _blas_threads(np_threads):
        numpy_train(x, y, m, rng)
    fns = {"numpy": numpy_run, "fast": _dpjax_runner(x, y, m, generic=False),
           "stand_in": audit_runner(x, y, m, sampler=StandInSampler(),
                                    privatizer=StandInPrivatizer())}
    if not skip_generic and not (skip_generic_largest and m == max(sizes)):
      fns["generic"] = _dpjax_runner(x, y, m, generic="two_pass")
      if m != max(sizes) or len(sizes) == 1:
        fns["plain"] = _dpjax_runner(x, y, m, generic="two_pass_plain")
        fns["one_pass"] = _dpjax_runner(x, y, m, generic=True)
    _, best = report.interleaved_times(fns, reps)
    t_np, t_fast = best["numpy"], best["fast"]
    row["numpy_models_per_s"] = m / t_np
    row["dpjax_models_per_s"] = m / t_fast
    row["speedup_vs_numpy"] = t_np / t_fast
    row["gflops"] = m * FLOP_PER_MODEL / t_fast / 1e9
    row["fraction_of_peak"] = row["gflops"] / peak["peak_gflops"]
    row["numpy_fraction_of_peak"] = m * FLOP_PER_MODEL / t_np / 1e9 / peak["peak_gflops"]
    row["stand_in_rng_models_per_s"] = m / best["stand_in"]
    row["stand_in_rng_speedup_vs_numpy"] = t_np / best["stand_in"]
    row["rng_share_of_fast"] = 1.0 - best["stand_in"] / t_fast
    line = (f"M={m:6d}: numpy {m / t_np:7.0f} models/s | dpjax fast {m / t_fast:7.0f} "
            f"models/s ({t_np / t_fast:.2f}x, {row['gflops']:.1f} GFLOP/s = "
            f"{100 * row['fraction_of_peak']:.0f}% of peak) | stand-in random numbers "
            f"{m / best['stand_in']:7.0f} models/s ({t_np / best['stand_in']:.2f}x; random "
            f"numbers {100 * row['rng_share_of_fast']:.0f}% of the fast path's time)")
    for name, label in (("generic", "generic vmap(grad) two-pass"),
                        ("plain", "without the norm rewrite"), ("one_pass", "one-pass")):
      if name in best:
        key = "generic" if name == "generic" else f"generic_{name}"
        row[f"{key}_models_per_s"] = m / best[name]
        row[f"{key}_slowdown_vs_fast"] = best[name] / t_fast
        line += (f" | {label} {m / best[name]:7.0f} models/s "
                 f"({best[name] / t_fast:.2f}x the fast path's time)")
    res[f"M{m}"] = row
    log(line)
  big = max(sizes)
  res["peak_rss_bytes_largest"] = report.child_peak_rss("dpsgd", [f"--mem_child={big}"])
  log(f"peak RSS of a fresh process training M={big}: "
      f"{res['peak_rss_bytes_largest'] / 2**30:.2f} GiB")
  return res


def audit_runner(x, y, num_models: int, **train_kwargs):
  """A zero-argument function that trains `num_models` models of the audit workload (all
  records kept, key 1) with `dpsgd.train_many(..., **train_kwargs)` and blocks until done."""
  import warnings  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import dpsgd, models  # pylint: disable=g-import-not-at-top
  model = models.logistic_regression(D)
  cfg = dpsgd.DpSgdConfig(dataset_size=N, sampling_prob=Q, num_steps=T,
                          l2_clip_norm=C, noise_multiplier=SIGMA, learning_rate=LR)
  keep = jnp.ones((num_models, N), bool)
  xj, yj = jnp.asarray(x), jnp.asarray(y, jnp.int32)
  key = jax.random.key(1)

  def run():
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.UnaccountedComponentWarning)
      out = dpsgd.train_many(key, xj, yj, keep, cfg, model,
                             perf=dpsgd.PerformanceFlags(progress=False), **train_kwargs)
    jax.block_until_ready(out.params)
  return run


def audit_chunk_runner(num_canaries: int, max_chunk: int):
  """A zero-argument function that trains chunk 0 of the claim eps = 2 of the main job
  (`experiments.audit --trials 10000`: 2,000 models, K gradient canaries) as
  `audit.run.train_chunk` does, but with the engine's chunks capped at `max_chunk`
  models; it returns (params w, observations) as NumPy arrays."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import dpsgd, models  # pylint: disable=g-import-not-at-top
  from dpjax.audit import canary  # pylint: disable=g-import-not-at-top
  from dpjax.audit import run as audit_run  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  from experiments import audit  # pylint: disable=g-import-not-at-top
  k = num_canaries
  cfg = audit.AuditConfig(trials=10_000, canaries_per_run=k)
  k_data, k_train = jax.random.split(jax.random.key(cfg.seed))
  data = canaries.audit_data(k_data, cfg.base_size, unused_features=k)
  model = models.logistic_regression(data.num_features)
  spec = audit._spec(cfg)  # pylint: disable=protected-access
  si, st = 1, audit_run.settings(cfg.epsilons, cfg.sampling_prob, cfg.num_steps, cfg.delta,
                                 cfg.no_noise)[1]
  var = audit_run.audited_training(spec, st, int(data.x_NxD.shape[0]), model)
  hi = spec.models_per_chunk
  if k == 1:
    r, s = canary.balanced_design(spec.models_per_setting)
    s_in = jnp.asarray(s[:hi])[:, None]
  else:
    r, s = canary.canaries_design(spec.models_per_setting, k, spec.canary_in_fraction,
                                  spec.design_seed)
    s_in = jnp.asarray(s[:hi])
  keep = np.ones((hi, data.x_NxD.shape[0]), bool)
  keep[:, data.canary_index] = r[:hi]
  design = audit_run.Design(data.x_NxD, data.y_N, keep, dpsgd.FixedGradients(
      canary.gradient_canaries(data.num_features, k, var.config.l2_clip_norm), s_in))
  observe = canary.observe_last_coordinate() if k == 1 else canary.observe_last_coordinates(k)
  perf = dpsgd.PerformanceFlags(max_chunk=max_chunk, progress=False)
  key = audit_run.chunk_key(k_train, si, 0)

  def run():
    out = audit_run.train(key, design, var.config, model, quiet=True, observe_fn=observe,
                          components=dict(var.components, perf=perf))
    return np.asarray(out.params["w"]), np.asarray(out.observations)
  return run


def measure_chunk_sizes(sizes, canaries=(1, 10), repeats: int = 3, log=print) -> dict:
  """CPU and wall seconds of one main-job chunk per engine chunk size, interleaved.

  For each K in `canaries` and each size: the first call's CPU seconds (compilation and
  one run), the best of `repeats` interleaved calls (CPU and wall), and whether the
  parameters and observations equal those at the first size bit for bit.
  """
  res = {}
  for k in canaries:
    fns = {mc: audit_chunk_runner(k, mc) for mc in sizes}
    first, cpu, wall, same, ref = {}, {}, {}, {}, None
    for mc, f in fns.items():
      c0 = time.process_time()
      out = f()
      first[mc] = time.process_time() - c0
      ref = out if ref is None else ref
      same[mc] = all(np.array_equal(a, b) for a, b in zip(out, ref))
      cpu[mc] = wall[mc] = math.inf
    for _ in range(repeats):
      for mc, f in fns.items():
        c0, w0 = time.process_time(), time.perf_counter()
        f()
        cpu[mc] = min(cpu[mc], time.process_time() - c0)
        wall[mc] = min(wall[mc], time.perf_counter() - w0)
    base = max(sizes)
    for mc in sizes:
      row = {"first_call_cpu_s": first[mc], "cpu_s": cpu[mc], "wall_s": wall[mc],
             "compile_cpu_s": max(0.0, first[mc] - cpu[mc]),
             "cpu_ratio_vs_largest": cpu[mc] / cpu[base], "identical": same[mc]}
      res[f"K{k}.chunk{mc}"] = row
      log(f"K={k} max_chunk={mc:5d}: {cpu[mc]:.3f} CPU-s ({row['cpu_ratio_vs_largest']:.2f}x "
          f"the largest), {wall[mc]:.3f} s wall, first call {first[mc]:.2f} CPU-s, "
          f"identical {same[mc]}")
  res["load_average_1min_at_end"] = os.getloadavg()[0]
  return res


def time_main_job(trials: int, log=print) -> dict:
  """CPU seconds (user + sys) and wall seconds of `python -m experiments.audit --trials N`
  in a fresh child process writing to a temporary directory."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  with tempfile.TemporaryDirectory() as out:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "experiments.audit", f"--trials={trials}",
                    f"--out={out}"], check=True, cwd=root, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  user, sys_s = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
  log(f"main job (--trials {trials}): {user + sys_s:.1f} CPU-s (user {user:.1f}, sys "
      f"{sys_s:.1f}), {wall:.0f} s wall, load average {os.getloadavg()[0]:.1f}")
  return {"trials": trials, "cpu_s": user + sys_s, "user_s": user, "sys_s": sys_s,
          "wall_s": wall, "load_average_1min_at_end": os.getloadavg()[0]}


def main(argv):
  del argv
  if _MEM_CHILD.value:
    _mem_child(_MEM_CHILD.value)
    return
  if _CHUNK_SIZES.value:
    from experiments import _common  # pylint: disable=g-import-not-at-top
    _common.start_backend_one_thread()     # as the main job (`--xla_one_thread`)
    figures = measure_chunk_sizes(report.model_counts(_CHUNK_SIZES.value, "chunk_sizes"),
                                  repeats=_REPEATS.value)
    path = _JSON.value or os.path.join(report.RESULTS_DIR, "dpsgd_chunks.json")
    report.dump(path, {"benchmark": "dpsgd_chunks", "command": report.command("dpsgd"),
                       "environment": report.environment(), "figures": figures})
    return
  sizes = report.model_counts(_SIZES.value, "sizes")
  audit = measure_audit_workload(sizes, _REPEATS.value, _SKIP_GENERIC_LARGEST.value,
                                 skip_generic=_SKIP_GENERIC.value)
  figures = report.flatten(audit, "audit_workload.")
  if _MAIN_JOB_TRIALS.value:
    figures.update(report.flatten(time_main_job(_MAIN_JOB_TRIALS.value), "main_job."))
  # Headline keys: the M = 2000 row when present.
  head = f"M{2000 if 2000 in sizes else max(sizes)}"
  figures["audit_workload.speedup_vs_numpy"] = audit[head]["speedup_vs_numpy"]
  figures["audit_workload.fraction_of_peak"] = audit[head]["fraction_of_peak"]
  if not _SKIP_DEEP.value:
    from benchmarks import dpsgd_deep  # pylint: disable=g-import-not-at-top
    deep = dpsgd_deep.measure()
    figures.update(deep)
    for k, v in deep.items():
      print(f"{k}: {v}")
  if _MERGE.value:
    path = _JSON.value or os.path.join(report.RESULTS_DIR, "dpsgd.json")
    if os.path.exists(path):
      with open(path) as f:
        old = json.load(f)["figures"]
      # A row measured now replaces the stored row whole (no stale columns beside new ones).
      stale = tuple(f"audit_workload.M{m}." for m in sizes)
      figures = {**{k: v for k, v in old.items() if not k.startswith(stale)}, **figures}
  report.write("dpsgd", figures, _JSON.value)


if __name__ == "__main__":
  app.run(main)
