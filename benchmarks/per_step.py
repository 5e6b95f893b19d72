"""Benchmark: the per-step white-box audit against the exact eps, with its CPU cost.

    .venv/bin/python -m benchmarks.per_step                                   # q = 0.2
    .venv/bin/python -m benchmarks.per_step --sampling_prob 1 --bound_runs 2048

Per claimed eps (sigma by PLD), the design of `audit.per_step_run.per_step_statistics` twice:
estimate (a) (`per_step.step_estimate`) from a few runs with many canaries, bound (b)
(`per_step.composed_bound`) from many runs; each beside the exact eps, with its CPU seconds.
"""

from __future__ import annotations

import time

from absl import app
from absl import flags

_Q = flags.DEFINE_float("sampling_prob", 0.2, "Poisson sampling probability q.")
_T = flags.DEFINE_integer("num_steps", 500, "DP-SGD steps T.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "delta.")
_EPS = flags.DEFINE_list("epsilons", ["1", "2", "4", "8"], "Claimed epsilons.")
_EST = flags.DEFINE_list("estimate", ["8", "2048"], "(a): runs, canaries per run.")
_BOUND_RUNS = flags.DEFINE_integer("bound_runs", 1024, "(b): runs.")
_BOUND_CANARIES = flags.DEFINE_integer("bound_canaries", 128, "(b): canaries per run.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the data and the training keys.")


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  from dpjax import accounting, models  # pylint: disable=g-import-not-at-top
  from dpjax.audit import per_step, per_step_run  # pylint: disable=g-import-not-at-top
  from dpjax.audit import run as audit_run  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  q, t, d = _Q.value, _T.value, _DELTA.value
  er, ek = (int(v) for v in _EST.value)
  br, bk = _BOUND_RUNS.value, _BOUND_CANARIES.value
  spec = per_step_run.PerStepSpec(sampling_prob=q, num_steps=t, delta=d, estimate_runs=er,
                                  estimate_canaries=ek, bound_runs=br, bound_canaries=bk)
  key_data, key_train = jax.random.split(jax.random.key(_SEED.value))

  def inputs(k):
    x = canaries.audit_data(key_data, 150, unused_features=k)
    return x, models.logistic_regression(x.num_features)

  est_in, bnd_in = inputs(ek), inputs(bk)
  eps = [float(e) for e in _EPS.value]
  for si, st in enumerate(audit_run.settings(eps, q, t, d, False)):
    k = jax.random.fold_in(key_train, si)
    exact = accounting.dpsgd_epsilon(st.sigma, q, t, d, accountant="pld")
    c0 = time.process_time()
    sa = per_step_run.per_step_statistics(jax.random.fold_in(k, 0), spec, st, *est_in,
                                          runs=er, canaries=ek)
    a = per_step.step_estimate(sa, sampling_prob=q, num_steps=t, delta=d)
    c1 = time.process_time()
    sb = per_step_run.per_step_statistics(jax.random.fold_in(k, 1), spec, st, *bnd_in,
                                          runs=br, canaries=bk)
    b = per_step.composed_bound(sb, num_steps=t, delta=d)
    c2 = time.process_time()
    print(f"q={q:g} claimed={st.claimed_epsilon:g} exact={exact:.3f} "
          f"(a) lower={a.epsilon:.3f} ({a.epsilon / exact:.2f}) point={a.epsilon_point:.3f} "
          f"({a.epsilon_point / exact:.2f}) [{er}x{ek}, {c1 - c0:.1f} CPU-s]  "
          f"(b)={b.epsilon_lower:.3f} ({b.epsilon_lower / exact:.2f}) [{br}x{bk}, "
          f"{c2 - c1:.1f} CPU-s]", flush=True)


if __name__ == "__main__":
  app.run(main)
