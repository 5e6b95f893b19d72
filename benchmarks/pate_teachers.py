"""Benchmark: PATE teachers trained in one vmapped program against a per-teacher loop.

    .venv/bin/python -m benchmarks.pate_teachers     # writes benchmarks/results/pate_teachers.json
    .venv/bin/python -m benchmarks.pate_teachers --teachers 250 --json /tmp/p.json

The teachers of `experiments/pate_credit.py` (M logistic regressions on 6 features, full-batch
Adam, 300 steps, lr 0.05, --per_teacher records each). Per M, in one process: the vmapped
`pate.fit_non_private` (first call apart, then best of --repeats) against a loop of single fits
over --loop_teachers teachers scaled to M; their ratio, the largest parameter difference, XLA's
temporary memory and the peak resident memory (VmHWM).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from benchmarks import report
from dpjax import fitting, models, pate
from dpjax.data import credit

_JSON = flags.DEFINE_string("json", None, "Where to write the figures (default: "
                             "benchmarks/results/pate_teachers.json).")
_TEACHERS = flags.DEFINE_string("teachers", "250,500,1000", "Numbers of teachers M.")
_PER_TEACHER = flags.DEFINE_integer("per_teacher", 300, "Records per teacher.")
_LOOP = flags.DEFINE_integer("loop_teachers", 25, "Teachers timed in the Python loop.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (best is kept).")
_STEPS = 300
_LR = 0.05


def measure(teachers: list[int], per_teacher: int, loop_teachers: int, repeats: int) -> dict:
  """Times the vmapped fit and the per-teacher loop for each M; returns flat figures."""
  m_max = max(teachers)
  k_data, k_pub, k_part, k_fit = jax.random.split(jax.random.key(0), 4)
  world = credit.sample(k_data, m_max * per_teacher)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 2000).x_NxF)
  x_all, y_all = credit.linear_features(world.x_NxF, scaler), world.y_N
  model = models.logistic_regression(credit.LINEAR_DIM)
  fit = lambda key, x, y, keep: pate.fit_non_private(key, x, y, keep, model, num_steps=_STEPS,
                                                     learning_rate=_LR)
  figures = {"per_teacher": per_teacher, "steps": _STEPS, "features": credit.LINEAR_DIM,
             "loop_teachers": loop_teachers, "teachers": list(teachers)}
  one = jnp.ones((1, per_teacher), bool)
  for m in sorted(teachers):
    n = m * per_teacher
    x, y = x_all[:n], y_all[:n]
    keep = np.asarray(pate.partition(k_part, n, m))
    first, params = report.best_time(lambda: jax.block_until_ready(fit(k_fit, x, y, keep)), 1)
    vmapped, _ = report.best_time(lambda: jax.block_until_ready(fit(k_fit, x, y, keep)), repeats)
    # The compiled program of pate.fit_non_private (fitting.train_nonprivate, full batch).
    # pylint: disable=protected-access
    idx, w = fitting._padded_indices(keep, per_teacher)
    program = fitting._program(model, pate.aggregation._adam(_LR), None, _STEPS, False, False)
    # pylint: enable=protected-access
    lowered = program.lower(jax.random.split(k_fit, m), None, x, jnp.asarray(y, jnp.float32),
                            idx, w, None)
    mem = lowered.compile().memory_analysis()
    temp = int(mem.temp_size_in_bytes) if mem is not None else None
    looped = min(loop_teachers, m)
    members = [np.flatnonzero(keep[i]) for i in range(looped)]
    jax.block_until_ready(fit(k_fit, x[members[0]], y[members[0]], one))   # compile M = 1

    def loop():
      return [fit(k_fit, x[mem_i], y[mem_i], one) for mem_i in members]

    loop_time, _ = report.best_time(lambda: jax.block_until_ready(loop()), repeats)
    loop_params = loop()
    diff = max(float(jnp.max(jnp.abs(lp["w"][0] - params["w"][i])))
               for i, lp in enumerate(loop_params))
    loop_full = loop_time * m / looped
    figures.update(report.flatten(dict(
        records=n, vmapped_s=vmapped, vmapped_first_call_s=first, loop_timed_teachers=looped,
        loop_timed_s=loop_time, loop_s=loop_full, loop_over_vmapped=loop_full / vmapped,
        teachers_per_s_vmapped=m / vmapped, max_param_diff=diff, xla_temp_bytes=temp,
        peak_rss_bytes=report.peak_rss_bytes()), f"M{m}."))
    print(f"M = {m}: vmapped {vmapped:.3f} s (first call {first:.2f} s), loop {loop_full:.2f} s "
          f"(timed {looped} teachers, scaled by {m / looped:g}), ratio "
          f"{loop_full / vmapped:.1f}x, max |param diff| {diff:.2e}")
  return figures


def main(argv):
  del argv
  teachers = report.model_counts(_TEACHERS.value, "teachers")
  if _LOOP.value < 1 or _REPEATS.value < 1 or _PER_TEACHER.value < 1:
    raise app.UsageError("--loop_teachers, --repeats and --per_teacher must be >= 1", exitcode=2)
  report.write("pate_teachers", measure(teachers, _PER_TEACHER.value, _LOOP.value,
                                        _REPEATS.value), _JSON.value)


if __name__ == "__main__":
  app.run(main)
