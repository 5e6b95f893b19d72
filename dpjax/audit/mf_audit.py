"""The white-box canary audits of matrix-factorization (DP-MF, DP-FTRL) training.

MF training is audited through the same door as DP-SGD: a `privatizer.CorrelatedNoisePrivatizer`
given to the engine as the `privatizer` component, everything else (sampler, clipping,
canaries, observations, bounds) the audit pipeline's own. Full batches (q = 1): every record,
so every IN canary, takes part in all T steps, participation u = 1_T, and the claim is the
Gaussian mechanism x -> C x + sigma Z with multiplier sigma / sens, sens =
`matrix_factorization.cyclic_sensitivity(C, 1)` = ||C 1_T|| (exact for C^T C >= 0).

Per-step observations are NOT independent under correlated noise: a Dirac canary's
observations are o = u + sigma C^-1 z (units of C / B), so consecutive steps share draws and
DP-SGD's per-step bound, which composes i.i.d. steps, does not apply to o. Whitening does:
o_w = C o = C u + sigma z is an invertible, public post-processing of the release, and its
steps are independent Gaussian mechanisms with means a_t = (C u)_t. Steps with one common
value a (`iid_steps`) are i.i.d. copies of the step N(a, sigma^2) vs N(0, sigma^2); dropping
the others is post-processing again, so what those steps certify (DP-SGD's composed bound
(b) at q = 1, sigma / a, over |S| steps) is a lower bound on the eps of the whole release.
The run-level score <C u, o_w> / ||C u||^2 (the exact log-likelihood ratio, up to scale) is
N(1, s^2) IN and N(0, s^2) OUT, s = sigma / ||C u||: the whole Gaussian mechanism, one trial
per (run, canary), with no assumption on the steps.

`per_step_audit` runs both on `per_step_run.step_observations`; `canary_audit` runs
`runner.audit_dpsgd` (gradient canaries scored by the summed step statistic, which is the
final model's displacement along the canary, and a record canary scored black-box on the
final model). Each reports the MF accountant's eps beside the audit's lower bounds.

Shape letters: M runs, T steps, K canaries per run.
"""

from __future__ import annotations

import math
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from dpjax import _validate, dpsgd
from dpjax import matrix_factorization as mf
from dpjax import privatizer as privatizer_lib
from dpjax.accounting import gdp
from dpjax.audit import per_step, per_step_run, run, thresholds, variants


def whiten(o_MxTxK, strategy_TxT) -> jax.Array:
  """float32[M, T, K]: C o along the step axis (o = u + sigma C^-1 z becomes C u + sigma z).

  Examples:
    >>> c = np.array([[1.0, 0.0], [0.5, 1.0]])
    >>> o = np.linalg.solve(c, [1.0, 2.0]).reshape(1, 2, 1)
    >>> np.asarray(whiten(o, c)).ravel().tolist()
    [1.0, 2.0]
  """
  c = mf.check_strategy(strategy_TxT)
  o = _validate.check_array(o_MxTxK, "o_MxTxK", np.float32, ndim=3, min_size=1)
  if o.shape[1] != c.shape[0]:
    raise ValueError(f"o_MxTxK has {o.shape[1]} steps, strategy_TxT {c.shape[0]}")
  return jnp.einsum("ts,msk->mtk", jnp.asarray(c, jnp.float32), jnp.asarray(o))


def iid_steps(strategy_TxT, participation_T=None, rtol: float = 1e-6
              ) -> tuple[np.ndarray, float]:
  """(steps, a): the whitened steps with one common mean a = (C u)_t, chosen from C alone.

  Groups the steps by a_t = (C u)_t (equal within rtol, a_t > 0) and returns the group with
  the largest |S| a^2 (the most certifiable: its composition is mu = sqrt(|S|) a / sigma),
  the earliest on ties. u: float[T] participation, default all ones (full batches).

  Examples:
    >>> c = mf.banded_toeplitz([1.0, 0.5], 4)           # C 1 = (1, 1.5, 1.5, 1.5)
    >>> s, a = iid_steps(c)
    >>> s.tolist(), a
    ([1, 2, 3], 1.5)
  """
  c = mf.check_strategy(strategy_TxT)
  t = c.shape[0]
  u = (np.ones(t) if participation_T is None else
       _validate.check_array(participation_T, "participation_T", shape=(t,)))
  rtol = _validate.check_positive(rtol, "rtol")
  a = c @ u
  best, best_val = None, 0.0
  for i in np.flatnonzero(a > 0):
    group = np.flatnonzero(np.abs(a - a[i]) <= rtol * a[i])
    val = group.size * float(a[i]) ** 2
    if val > best_val * (1 + 1e-12):
      best, best_val = group, val
  if best is None:
    raise ValueError("participation_T: C u has no positive entry (nothing to audit)")
  return best, float(a[best[0]])


@_validate.names_extreme_arguments
def accountant_epsilon(strategy_TxT, noise_multiplier: float, delta: float) -> float:
  """eps at delta of full-batch MF training: `matrix_factorization.epsilon` at ||C 1_T||
  (`cyclic_sensitivity(C, 1)`: every record in every step)."""
  c = mf.check_strategy(strategy_TxT)
  return mf.epsilon(noise_multiplier, mf.cyclic_sensitivity(c, 1), delta)


def full_batch_training(strategy_TxT, noise_multiplier: float, dataset_size: int, *,
                        delta: float = 1e-5, privatizer=None, learning_rate: float = 0.1,
                        name: str = "mf") -> variants.Variant:
  """The audited MF training: q = 1, T = C's steps, sigma; the privatizer (default
  `CorrelatedNoisePrivatizer(matrix_stream(C))`, a faulty one allowed) through its door."""
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  cfg = dpsgd.DpSgdConfig(dataset_size=_validate.check_int(dataset_size, "dataset_size"),
                          sampling_prob=1.0, num_steps=c.shape[0], noise_multiplier=sigma,
                          delta=_validate.check_delta(delta),
                          learning_rate=_validate.check_positive(learning_rate,
                                                                 "learning_rate"))
  if privatizer is None:
    privatizer = privatizer_lib.CorrelatedNoisePrivatizer(mf.matrix_stream(c))
  return variants.Variant(name, cfg, privatizer=privatizer)


def _gaussian_threshold(mu: float, n_in: int, n_out: int, delta: float, conf: float) -> float:
  """The threshold of the best certifiable test of N(1, 1/mu^2) vs N(0, 1/mu^2), fixed from
  the claim before any score is seen."""
  grid = np.linspace(-4.0 / mu, 1.0 + 4.0 / mu, 2001)
  fpr, fnr = sps.norm.sf(grid * mu), sps.norm.cdf((grid - 1.0) * mu)
  return thresholds.best_certifiable(fpr, fnr, n_out, trials_in=n_in, delta=delta,
                                     confidence=conf, thresholds_J=grid).threshold


def per_step_audit(key, strategy_TxT, noise_multiplier: float, data, model, *, runs: int = 8,
                   canaries: int = 2048, delta: float = 1e-5, confidence: float = 0.95,
                   num_thresholds: int = 7, privatizer=None,
                   claimed_sensitivity: float | None = None) -> dict:
  """The per-step and run-level white-box audit of full-batch MF training on `data`.

  Trains `runs` runs with `canaries` Dirac canaries each (`per_step_run.step_observations`,
  a random half IN per run), whitens the observations with the claimed C (`whiten`) and
  computes on the same runs: (b) `per_step.composed_bound` over the i.i.d. whitened steps
  S (`iid_steps`), normalized to N(1, (sigma / a)^2); (a) `per_step.step_estimate` on them,
  and that fit carried to the whole release (mu = ||C 1|| / sigma_fit, assuming the
  whitened steps are Gaussian with the claimed means); the run-level bound (each (run,
  canary) one trial, the score <C 1, o_w> / ||C 1||^2 at a threshold fixed from the claim).

  Args:
    key: the runs' key.
    strategy_TxT: the claimed lower-triangular C (T steps).
    noise_multiplier: sigma > 0.
    data, model: `canaries.audit_data(...)` and the audited model.
    runs, canaries: M >= 1 and K >= 2.
    delta, confidence: of every bound.
    num_thresholds: J of bound (b).
    privatizer: the audited privatizer (default the correct one for C).
    claimed_sensitivity: the sens the claim is computed with (default ||C 1||, correct);
      a planted bug passes a smaller one.
  Returns:
    a dict of plain values: "epsilon_accountant" (the MF accountant, correct sens),
    "epsilon_claimed", "bound" (b), "estimate" (a, its lower limit over S), "estimate_full",
    "run_level_bound", "iid_steps", "step_mean", the counts, and "cpu_seconds".
  """
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  delta, conf = _validate.check_delta(delta), _validate.check_confidence(confidence)
  m = _validate.check_int(runs, "runs")
  k = _validate.check_int(canaries, "canaries", 2)
  cpu0 = time.process_time()
  t = c.shape[0]
  sens = mf.cyclic_sensitivity(c, 1)
  claim_sens = (sens if claimed_sensitivity is None else
                _validate.check_positive(claimed_sensitivity, "claimed_sensitivity"))
  exact = mf.epsilon(sigma, sens, delta)
  claimed = mf.epsilon(sigma, claim_sens, delta)
  var = full_batch_training(c, sigma, int(data.x_NxD.shape[0]), delta=delta,
                            privatizer=privatizer)
  setting = run.Setting("mf", claimed, sigma)
  g = per_step_run.canary_bits(m, k, 0)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    o = per_step_run.step_observations(key, setting, data, model, var, g)
  ow = whiten(np.asarray(o), c)
  steps, a = iid_steps(c)
  r = ow[:, steps, :] / a
  s_eff = sigma / a
  st = per_step.observation_statistics(r, g, per_step.design_thresholds(1.0, s_eff,
                                                                         num_thresholds))
  bnd = per_step.composed_bound(st, num_steps=steps.size, delta=delta, confidence=conf)
  est = per_step.step_estimate(st, sampling_prob=1.0, num_steps=steps.size, delta=delta,
                               confidence=conf)
  # (a)'s lower limit on mu over S is sqrt(|S|) a / sigma_fit; the whole release has
  # mu = ||C 1|| / sigma_fit under the same family.
  mu_s = gdp.mu_for_epsilon(est.epsilon, delta) if est.epsilon > 0 else 0.0
  full_mu = mu_s * sens / (math.sqrt(steps.size) * a)
  w = jnp.asarray(c.sum(axis=1) / sens ** 2, jnp.float32)        # C 1 / ||C 1||^2
  score = np.asarray(jnp.einsum("t,mtk->mk", w, ow), np.float64)
  thr = _gaussian_threshold(sens / sigma, int(g.sum()), int((~g).sum()), delta, conf)
  run_level = thresholds.FixedThreshold(thr).bound(score[g], score[~g], delta=delta,
                                                   confidence=conf).epsilon_lower
  return {"num_steps": t, "noise_multiplier": sigma, "sensitivity": sens,
          "claimed_sensitivity": claim_sens, "epsilon_accountant": exact,
          "epsilon_claimed": claimed, "runs": m, "canaries": k,
          "iid_steps": int(steps.size), "step_mean": a,
          "trials_in": st.n_in, "trials_out": st.n_out,
          "bound": bnd.epsilon_lower, "estimate": est.epsilon,
          "estimate_point": est.epsilon_point,
          "estimate_full": gdp.gaussian_epsilon(delta, full_mu) if full_mu > 0 else 0.0,
          "run_level_bound": run_level,
          "bound_certifies": (f"with probability >= {conf:g}, if the whitened steps in S are "
                              "i.i.d. (true for MF as claimed), the release is not (eps, "
                              f"delta)-DP for any eps < {bnd.epsilon_lower:.6g}"),
          "cpu_seconds": time.process_time() - cpu0}


def canary_audit(key, strategy_TxT, noise_multiplier: float, x_NxF, y_N, model, *,
                 num_runs: int = 1000, num_gradient_canaries: int = 1, record_canary=None,
                 delta: float = 1e-5, confidence: float = 0.95, privatizer=None,
                 claimed_sensitivity: float | None = None) -> dict:
  """`runner.audit_dpsgd` on full-batch MF training (the privatizer through its door).

  The gradient canaries' score is the audit's DP-SGD statistic at q = 1, sum_t o_t: the
  final model's displacement along the canary (mean T IN, sd sigma ||C^-T 1||), so what
  the final model alone reveals; the record canary is scored black-box on the final model.
  Every "best" bound is valid for any training (`score_audit.score_bounds`).

  Returns {"epsilon_accountant", "epsilon_claimed", "white_box", "black_box" (each the
  "best" eps_lower or None), "audit" (`runner.DpSgdAudit.to_json()`, whose own
  claimed eps is DP-SGD's and does not apply)}.
  """
  from dpjax.audit import runner  # pylint: disable=g-import-not-at-top
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  delta = _validate.check_delta(delta)
  sens = mf.cyclic_sensitivity(c, 1)
  claim_sens = (sens if claimed_sensitivity is None else
                _validate.check_positive(claimed_sensitivity, "claimed_sensitivity"))
  var = full_batch_training(c, sigma, int(np.shape(x_NxF)[0]), delta=delta,
                            privatizer=privatizer)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    res = runner.audit_dpsgd(key, var.config, model, x_NxF, y_N, num_runs=num_runs,
                             num_gradient_canaries=num_gradient_canaries,
                             record_canary=record_canary, confidence=confidence,
                             progress=False, **var.components)
  best = lambda a: None if a is None else float(a.bounds["best"].epsilon_lower)
  return {"epsilon_accountant": mf.epsilon(sigma, sens, delta),
          "epsilon_claimed": mf.epsilon(sigma, claim_sens, delta),
          "white_box": best(res.white_box), "black_box": best(res.black_box),
          "audit": res.to_json()}
