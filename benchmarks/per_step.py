"""Benchmark: the per-step white-box audit against the exact eps, with its CPU cost.

    .venv/bin/python -m benchmarks.per_step                                   # q = 0.2
    .venv/bin/python -m benchmarks.per_step --sampling_prob 1 --canaries 16384

Per claimed eps (sigma by the calibration of `dpjax.audit.run.settings`), the runs of
`audit.per_step_run.per_step_audit` (Dirac canaries in a parameter leaf): estimate (a)
(`per_step.step_estimate`), bound (b) (`per_step.composed_bound`) and the run-level bound on
the same runs, each beside the exact eps, with the row's CPU seconds.
"""

from __future__ import annotations

from absl import app
from absl import flags

_Q = flags.DEFINE_float("sampling_prob", 0.2, "Poisson sampling probability q.")
_T = flags.DEFINE_integer("num_steps", 500, "DP-SGD steps T.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "delta.")
_EPS = flags.DEFINE_list("epsilons", ["1", "2", "4", "8"], "Claimed epsilons.")
_RUNS = flags.DEFINE_integer("runs", 8, "Training runs per claim.")
_CANARIES = flags.DEFINE_integer("canaries", 2 ** 15, "Dirac canaries per run.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the data and the training keys.")


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  from dpjax import models  # pylint: disable=g-import-not-at-top
  from dpjax.audit import per_step_run  # pylint: disable=g-import-not-at-top
  from dpjax.audit import run as audit_run  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  q, t, d = _Q.value, _T.value, _DELTA.value
  spec = per_step_run.PerStepSpec(sampling_prob=q, num_steps=t, delta=d, runs=_RUNS.value,
                                  canaries=_CANARIES.value)
  key_data, key_train = jax.random.split(jax.random.key(_SEED.value))
  data = canaries.audit_data(key_data, 150)
  model = models.logistic_regression(data.num_features)
  eps = [float(e) for e in _EPS.value]
  for si, st in enumerate(audit_run.settings(eps, q, t, d, False)):
    r = per_step_run.per_step_audit(jax.random.fold_in(key_train, si), spec, st, data, model)
    exact = r["epsilon_pld"]
    print(f"q={q:g} claimed={st.claimed_epsilon:g} exact={exact:.3f} "
          f"(a) lower={r['estimate']:.3f} ({r['estimate_fraction_of_exact']:.3f}) "
          f"point={r['estimate_point']:.3f} ({r['estimate_point_fraction_of_exact']:.3f})  "
          f"(b)={r['bound']:.3f} ({r['bound_fraction_of_exact']:.3f})  run-level="
          f"{r['run_level_bound']:.3f}  [{spec.runs}x{spec.canaries}, "
          f"{r['cpu_seconds']:.1f} CPU-s]", flush=True)


if __name__ == "__main__":
  app.run(main)
