"""The white-box canary audits of matrix-factorization (DP-MF, DP-FTRL) training.

MF training is audited through the same door as DP-SGD: a `privatizer.CorrelatedNoisePrivatizer`
given to the engine as the `privatizer` component, everything else (sampler, clipping,
canaries, observations, bounds) the audit pipeline's own. A Dirac canary's observations are
o = u + sigma C^-1 z (units of C / B), u in {0, 1}^T its participation, so consecutive steps
share draws and DP-SGD's per-step bound, which composes i.i.d. steps, does not apply to o.
Whitening does: o_w = C o = C u + sigma z is an invertible, public post-processing of the
release (dropping coordinates of it is post-processing again).

Full batches (q = 1, `full_batch_training`): u = 1_T, the claim is the Gaussian mechanism
with multiplier sigma / ||C 1_T||. The whitened steps are independent Gaussian mechanisms
with means a_t = (C 1)_t; steps with one common value a (`iid_steps`) are i.i.d. copies of
N(a, sigma^2) vs N(0, sigma^2), so what they certify (DP-SGD's composed bound (b) at q = 1,
sigma / a, over |S| steps) is a lower bound on the eps of the whole release. The run-level
score <C 1, o_w> / ||C 1||^2 (the exact log-likelihood ratio, up to scale) is N(1, s^2) IN
and N(0, s^2) OUT, s = sigma / ||C 1||: the whole mechanism, one trial per (run, canary).

Cyclic Poisson sampling (q = p / s < 1, `audited_training` with a
`sampling.CyclicPoissonSampler(p, s)`, C with at most s bands, s <= T): a canary in bin j
takes part at step r = j (mod s) with probability p, independently, so
o_w = sum_r B_r C e_r + sigma z with B_r ~ Bernoulli(p), and the columns C e_r of one bin
have disjoint supports (rows r .. r + b - 1, b <= s). The projections
y_r = <C e_r, o_w> / ||C e_r||^2 (r in the canary's bin) are therefore independent, each the
Poisson-subsampled Gaussian step (1 - p) N(0, s_r^2) + p N(1, s_r^2) vs N(0, s_r^2),
s_r = sigma / ||C e_r||, and together they are sufficient for the release: the amplified
accountant's model (`matrix_factorization.amplified_event`) for that bin. The whitened
release is a mixture over participation patterns, but these projections are not: a per-step
bound composes them, not the whitened rows. `participation_columns` picks, per canary, P
columns of one common norm a; then
  * bound (b): `per_step.composed_bound` over those P projections, thresholds of DP-SGD's
    step at (p, sigma / a). ASSUMES the P per-participation projections are independent
    and identically distributed (true for MF as claimed, by the disjoint supports; false
    for a training whose noise is not the claimed C^-1 Z, where only the run-level bound
    holds). It certifies that the P-fold composition of the step pair, hence the release,
    is not (eps, delta)-DP below it; it is a lower bound on the amplified accountant's
    eps of the canary's worst bin.
  * run-level: sum_r step_llr(y_r; p, sigma / a) over the same P projections (the exact
    log-likelihood ratio of that part of the release), thresholded where the claimed law
    (`canary.llr_distribution(p, sigma / a, P)`) has its best certifiable test, fixed before
    any score is seen. A post-processing of the release scored per (run, canary) trial: no
    assumption on the steps, valid for any training (canaries independent, as every
    run-level bound here assumes). Pooling canaries of different bins is valid: each bin's
    (FPR, FNR) satisfies FNR + e^eps FPR >= 1 - delta at the fixed threshold, so their
    average does.
Both paths also give the final-model white-box bound: the canary leaf's total
displacement sum_t o_t (what the final model alone reveals, SGD without momentum), by
`runner.bounds_from_trials` ("best", valid for any training).

`per_step_audit` trains the runs (`per_step_run.step_observations`: canaries are records
after the data, sampled by the audited sampler) and calls `observation_audit`;
`canary_audit` runs `runner.audit_dpsgd` (gradient canaries and a black-box record canary
at q = 1; with a sampler, canaries sampled by it as records after the data). Each reports the MF accountant's eps (the
engine's statement, `CorrelatedNoisePrivatizer.epsilon`) beside the audit's lower bounds.

Shape letters: M runs, T steps, K canaries per run, P participations audited per canary.
"""

from __future__ import annotations

import functools
import math
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from dpjax import _validate, dpsgd, sampling
from dpjax import matrix_factorization as mf
from dpjax import privatizer as privatizer_lib
from dpjax.accounting import gdp
from dpjax.audit import canary, per_step, per_step_run, run, runner, thresholds, variants


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


def _check_cycle(sampler, strategy_TxT: np.ndarray) -> tuple[float, int]:
  """(p, s) of a `sampling.CyclicPoissonSampler` that the amplified audit can read."""
  if type(sampler) is not sampling.CyclicPoissonSampler:   # pylint: disable=unidiomatic-typecheck
    raise ValueError("sampler must be None (full batches) or a sampling.CyclicPoissonSampler, "
                     f"got {type(sampler).__name__}")
  t, s = strategy_TxT.shape[0], sampler.cycle_length
  if s > t:
    raise ValueError(f"sampler.cycle_length = {s} > num_steps = {t}: bins {t} .. {s - 1} never "
                     "take part (use cycle_length <= num_steps)")
  bands = mf.num_bands(strategy_TxT)
  if bands > s:
    raise ValueError(f"the strategy has {bands} bands but sampler.cycle_length = {s}: the "
                     "amplified audit, like the amplified accountant, needs at most "
                     "cycle_length bands (participations moving disjoint rows of C x)")
  return sampler.bin_prob, s


def participation_columns(strategy_TxT, cycle_length: int, bins_K, rtol: float = 1e-6
                          ) -> tuple[np.ndarray, float]:
  """(columns_KxP, a): per canary, P steps of its bin whose columns of C have norm a.

  Canary k in bin j_k = bins_K[k] can take part at steps r = j_k (mod s). Groups the
  columns by ||C e_r|| (equal within rtol, > 0); for each group, P is the least number
  of its columns in any of the canaries' bins; returns the group with the largest P a^2
  (the most certifiable), the earliest on ties, and for each canary its first P columns.
  With at most s bands these columns are disjoint in support, so their projections
  <C e_r, o_w> / a^2 are independent steps (module docstring).

  Examples:
    >>> c = mf.banded_toeplitz([1.0, 0.5], 6)          # norms: sqrt(1.25) x 5, then 1
    >>> cols, a = participation_columns(c, 2, [0, 1, 1])
    >>> cols.tolist(), round(a ** 2, 6)
    ([[0, 2], [1, 3], [1, 3]], 1.25)
  """
  c = mf.check_strategy(strategy_TxT)
  t = c.shape[0]
  s = _validate.check_int(cycle_length, "cycle_length", 1, t)
  bins = _validate.check_array(bins_K, "bins_K", ndim=1, min_size=1, low=0.0)
  if np.any(bins != np.round(bins)) or np.any(bins >= s):
    raise ValueError(f"bins_K must be integers in [0, cycle_length = {s})")
  bins = bins.astype(np.int64)
  rtol = _validate.check_positive(rtol, "rtol")
  norms = np.sqrt(np.sum(c * c, axis=0))
  residue = np.arange(t) % s
  best, best_val, best_a = None, 0.0, 0.0
  for i in np.flatnonzero(norms > 0):
    group = np.abs(norms - norms[i]) <= rtol * norms[i]
    per_bin = {int(j): np.flatnonzero(group & (residue == j)) for j in np.unique(bins)}
    p = min(v.size for v in per_bin.values())
    val = p * float(norms[i]) ** 2
    if p > 0 and val > best_val * (1 + 1e-12):
      best = np.stack([per_bin[int(j)][:p] for j in bins])
      best_val, best_a = val, float(norms[i])
  if best is None:
    raise ValueError("bins_K: no column norm is shared by every canary's bin "
                     "(nothing to audit per step)")
  return best, best_a


@_validate.names_extreme_arguments
def accountant_epsilon(strategy_TxT, noise_multiplier: float, delta: float,
                       sampler=None) -> float:
  """eps at delta of MF training with strategy C (T steps): the engine's statement.

  sampler None (full batches): `matrix_factorization.epsilon` at ||C 1_T||
  (`cyclic_sensitivity(C, 1)`: every record in every step). A
  `sampling.CyclicPoissonSampler`: `CorrelatedNoisePrivatizer.epsilon` on it (the smaller
  of the unamplified eps and `matrix_factorization.amplified_epsilon` when C has at most
  cycle_length bands). The one-participation bug claims this eps with
  `CyclicPoissonSampler(p, T)` (each record at most once).
  """
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  delta = _validate.check_delta(delta)
  if sampler is None:
    return mf.epsilon(sigma, mf.cyclic_sensitivity(c, 1), delta)
  _validate.check_instance(sampler, sampling.CyclicPoissonSampler, "sampler")
  return _correct_privatizer(c).epsilon(sigma, c.shape[0], delta, sampler)


@functools.lru_cache(maxsize=16)
def _privatizer_of(shape: tuple, data: bytes) -> privatizer_lib.CorrelatedNoisePrivatizer:
  return privatizer_lib.CorrelatedNoisePrivatizer(
      mf.matrix_stream(np.frombuffer(data, np.float64).reshape(shape)))


def _correct_privatizer(c: np.ndarray) -> privatizer_lib.CorrelatedNoisePrivatizer:
  """`CorrelatedNoisePrivatizer(matrix_stream(C))`, one instance per C: its compiled
  training and its memoised `epsilon` (the engine's statement) are shared by calls."""
  c = np.ascontiguousarray(c, np.float64)
  return _privatizer_of(c.shape, c.tobytes())


def audited_training(strategy_TxT, noise_multiplier: float, dataset_size: int, *,
                     sampler=None, delta: float = 1e-5, privatizer=None,
                     learning_rate: float = 0.1, name: str = "mf") -> variants.Variant:
  """The audited MF training: T = C's steps, sigma, the privatizer (default
  `CorrelatedNoisePrivatizer(matrix_stream(C))`, a faulty one allowed) through its door.

  sampler None: full batches (q = 1). A `sampling.CyclicPoissonSampler(p, s)`: its
  batches, q = p / s (the fixed denominator q n), s <= T and C with at most s bands.
  """
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = 1.0
  if sampler is not None:
    _check_cycle(sampler, c)
    q = sampler.sampling_prob
  cfg = dpsgd.DpSgdConfig(dataset_size=_validate.check_int(dataset_size, "dataset_size"),
                          sampling_prob=q, num_steps=c.shape[0], noise_multiplier=sigma,
                          delta=_validate.check_delta(delta),
                          learning_rate=_validate.check_positive(learning_rate,
                                                                 "learning_rate"))
  if privatizer is None:
    privatizer = _correct_privatizer(c)
  return variants.Variant(name, cfg, sampler=sampler, privatizer=privatizer)


def full_batch_training(strategy_TxT, noise_multiplier: float, dataset_size: int, *,
                        delta: float = 1e-5, privatizer=None, learning_rate: float = 0.1,
                        name: str = "mf") -> variants.Variant:
  """`audited_training` with full batches (q = 1)."""
  return audited_training(strategy_TxT, noise_multiplier, dataset_size, delta=delta,
                          privatizer=privatizer, learning_rate=learning_rate, name=name)


def _gaussian_threshold(mu: float, n_in: int, n_out: int, delta: float, conf: float) -> float:
  """The threshold of the best certifiable test of N(1, 1/mu^2) vs N(0, 1/mu^2), fixed from
  the claim before any score is seen."""
  grid = np.linspace(-4.0 / mu, 1.0 + 4.0 / mu, 2001)
  fpr, fnr = sps.norm.sf(grid * mu), sps.norm.cdf((grid - 1.0) * mu)
  return thresholds.best_certifiable(fpr, fnr, n_out, trials_in=n_in, delta=delta,
                                     confidence=conf, thresholds_J=grid).threshold


def observation_audit(o_MxTxK, canary_in_MxK, strategy_TxT, noise_multiplier: float, *,
                      sampler=None, bins_K=None, delta: float = 1e-5,
                      confidence: float = 0.95, num_thresholds: int = 7) -> dict:
  """The white-box bounds of MF canary observations (module docstring for the math).

  Args:
    o_MxTxK: float32[M, T, K], each Dirac canary's coordinate of every privatized update
      in units of C / B (`per_step_run.step_observations`).
    canary_in_MxK: bool[M, K], IN bits fixed before training (>= 2 IN and OUT trials).
    strategy_TxT: the claimed lower-triangular C (T steps).
    noise_multiplier: the claimed sigma > 0.
    sampler: None (full batches) or the claimed `sampling.CyclicPoissonSampler`.
    bins_K: with a sampler, int[K] canary k's bin (its record index mod cycle_length).
    delta, confidence: of every bound.
    num_thresholds: J of bound (b).
  Returns:
    a dict of plain values: "bound" (b) over "iid_steps" steps of mean "step_mean" a,
    "estimate" (a)'s lower limit over them, "estimate_point", "estimate_full" (that fit
    carried to the whole release under the claimed family), "step_shift" and "step_scale"
    (the fitted step: 1 and "step_scale_claimed" = sigma / a as claimed), "run_level_bound",
    "final_model_bound", the trial counts, and what (b) certifies.
  """
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  delta, conf = _validate.check_delta(delta), _validate.check_confidence(confidence)
  j = _validate.check_int(num_thresholds, "num_thresholds", 1, 1000)
  o = _validate.check_array(o_MxTxK, "o_MxTxK", np.float32, ndim=3, min_size=1)
  m, t, k = o.shape
  if t != c.shape[0]:
    raise ValueError(f"o_MxTxK has {t} steps, strategy_TxT {c.shape[0]}")
  g = np.asarray(_validate.check_binary(canary_in_MxK, "canary_in_MxK", shape=(m, k)), bool)
  if min(g.sum(), (~g).sum()) < 2:
    raise ValueError("canary_in_MxK needs >= 2 IN and >= 2 OUT trials")
  ow = whiten(o, c)
  if sampler is None:
    q, sens = 1.0, mf.cyclic_sensitivity(c, 1)
    steps, a = iid_steps(c)
    r = ow[:, steps, :] / a
    num = int(steps.size)
  else:
    q, s = _check_cycle(sampler, c)
    if bins_K is None:
      raise ValueError("bins_K is required with a sampler (canary k's bin)")
    cols, a = participation_columns(c, s, bins_K)
    if cols.shape[0] != k:
      raise ValueError(f"bins_K has {cols.shape[0]} canaries, o_MxTxK {k}")
    proj = np.asarray(jnp.einsum("tr,mtk->mrk", jnp.asarray(c, jnp.float32), ow)) / a ** 2
    r = jnp.asarray(proj[:, cols.T, np.arange(k)[None, :]])          # [M, P, K]
    num = int(cols.shape[1])
  s_eff = sigma / a
  st = per_step.observation_statistics(r, g, per_step.design_thresholds(q, s_eff, j))
  bnd = per_step.composed_bound(st, num_steps=num, delta=delta, confidence=conf)
  est = per_step.step_estimate(st, sampling_prob=q, num_steps=num, delta=delta,
                               confidence=conf)
  if sampler is None:
    # (a)'s lower limit on mu over S is sqrt(|S|) a / sigma_fit; the whole release has
    # mu = ||C 1|| / sigma_fit under the same family.
    mu_s = gdp.mu_for_epsilon(est.epsilon, delta) if est.epsilon > 0 else 0.0
    full_mu = mu_s * sens / (math.sqrt(num) * a)
    full = gdp.gaussian_epsilon(delta, full_mu) if full_mu > 0 else 0.0
    w = jnp.asarray(c.sum(axis=1) / sens ** 2, jnp.float32)        # C 1 / ||C 1||^2
    score = np.asarray(jnp.einsum("t,mtk->mk", w, ow), np.float64)
    thr = _gaussian_threshold(sens / sigma, int(g.sum()), int((~g).sum()), delta, conf)
  else:
    # (a)'s fitted step noise sigma_fit / a (at its confidence limit) carried to the whole
    # release: the amplified accountant at sigma_fit.
    sig_up = est.noise_multiplier_upper * a
    full = (mf.amplified_epsilon(c, sig_up, q, sampler.cycle_length, delta, 1e-3)
            if math.isfinite(sig_up) else 0.0)
    score = np.asarray(run.white_box_llr_scores(r, 1.0, sampling_prob=q,
                                                noise_multiplier=s_eff), np.float64)
    grid, fpr, fnr = canary.llr_distribution(q, s_eff, num).roc()
    thr = thresholds.best_certifiable(fpr, fnr, int((~g).sum()), trials_in=int(g.sum()),
                                      delta=delta, confidence=conf,
                                      thresholds_J=grid).threshold
  run_level = thresholds.FixedThreshold(thr).bound(score[g], score[~g], delta=delta,
                                                   confidence=conf).epsilon_lower
  final = np.asarray(jnp.sum(jnp.asarray(o), axis=1), np.float64)    # the final leaf / lr
  final_bound = runner.bounds_from_trials(final, g, delta=delta, confidence=conf)["best"]
  return {"participation_prob": q, "iid_steps": num, "step_mean": a,
          "trials_in": st.n_in, "trials_out": st.n_out,
          "bound": bnd.epsilon_lower, "estimate": est.epsilon,
          "estimate_point": est.epsilon_point, "estimate_full": full,
          "step_shift": est.shift, "step_scale": est.scale, "step_scale_claimed": s_eff,
          "run_level_bound": run_level,
          "final_model_bound": float(final_bound.epsilon_lower),
          "bound_certifies": (
              f"with probability >= {conf:g}, if the {num} "
              + ("whitened steps in S" if sampler is None else
                 "per-participation projections of each canary")
              + " are i.i.d. (true for MF as claimed), the release is not (eps, delta)-DP "
              f"for any eps < {bnd.epsilon_lower:.6g}")}


def per_step_audit(key, strategy_TxT, noise_multiplier: float, data, model, *, runs: int = 8,
                   canaries: int = 2048, delta: float = 1e-5, confidence: float = 0.95,
                   num_thresholds: int = 7, privatizer=None, sampler=None,
                   claimed_sensitivity: float | None = None,
                   claimed_epsilon: float | None = None) -> dict:
  """The per-step, run-level and final-model white-box audit of MF training on `data`.

  Trains `runs` runs with `canaries` Dirac canaries each (`per_step_run.step_observations`,
  a random half IN per run; canary k is record N + k, N = data's records, so in bin
  (N + k) mod s of a cyclic Poisson sampler) and returns `observation_audit` of them
  with the accountant's eps and the claim.

  Args:
    key: the runs' key.
    strategy_TxT: the claimed lower-triangular C (T steps).
    noise_multiplier: sigma > 0.
    data, model: `canaries.audit_data(...)` and the audited model.
    runs, canaries: M >= 1 and K >= 2.
    delta, confidence: of every bound.
    num_thresholds: J of bound (b).
    privatizer: the audited privatizer (default the correct one for C).
    sampler: None (full batches) or a `sampling.CyclicPoissonSampler` (module docstring).
    claimed_sensitivity: q = 1 only: the sens the claim is computed with (default
      ||C 1||, correct); a planted bug passes a smaller one.
    claimed_epsilon: the claimed eps (default the accountant's); not with
      claimed_sensitivity.
  Returns:
    `observation_audit`'s dict plus "epsilon_accountant" (`accountant_epsilon`),
    "epsilon_claimed", "num_steps", "noise_multiplier", "sensitivity" (q = 1: ||C 1||;
    else the unamplified `cyclic_sensitivity(C, s)`), "runs", "canaries", "cpu_seconds".
  """
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  delta, conf = _validate.check_delta(delta), _validate.check_confidence(confidence)
  m = _validate.check_int(runs, "runs")
  k = _validate.check_int(canaries, "canaries", 2)
  cpu0 = time.process_time()
  exact = accountant_epsilon(c, sigma, delta, sampler)
  claimed = _claim(c, sigma, delta, sampler, exact, claimed_sensitivity, claimed_epsilon)
  n = int(data.x_NxD.shape[0])
  var = audited_training(c, sigma, n, sampler=sampler, delta=delta, privatizer=privatizer)
  setting = run.Setting("mf", claimed, sigma)
  g = per_step_run.canary_bits(m, k, 0)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    o = per_step_run.step_observations(key, setting, data, model, var, g)
  bins = None if sampler is None else (n + np.arange(k)) % sampler.cycle_length
  out = observation_audit(np.asarray(o), g, c, sigma, sampler=sampler, bins_K=bins,
                          delta=delta, confidence=conf, num_thresholds=num_thresholds)
  s = 1 if sampler is None else sampler.cycle_length
  return {"num_steps": c.shape[0], "noise_multiplier": sigma,
          "sensitivity": mf.cyclic_sensitivity(c, s), "epsilon_accountant": exact,
          "epsilon_claimed": claimed, "runs": m, "canaries": k, **out,
          "cpu_seconds": time.process_time() - cpu0}


def _claim(c, sigma, delta, sampler, exact, claimed_sensitivity, claimed_epsilon) -> float:
  """The claimed eps: the accountant's, or one computed with claimed_sensitivity (q = 1),
  or claimed_epsilon."""
  if claimed_sensitivity is not None and claimed_epsilon is not None:
    raise ValueError("pass claimed_sensitivity or claimed_epsilon, not both")
  if claimed_epsilon is not None:
    return _validate.check_epsilon(claimed_epsilon, "claimed_epsilon")
  if claimed_sensitivity is not None:
    if sampler is not None:
      raise ValueError("claimed_sensitivity is for full batches; with a sampler pass "
                       "claimed_epsilon (e.g. accountant_epsilon with the claimed sampler)")
    return mf.epsilon(sigma, _validate.check_positive(claimed_sensitivity,
                                                      "claimed_sensitivity"), delta)
  return exact


def canary_audit(key, strategy_TxT, noise_multiplier: float, x_NxF, y_N, model, *,
                 num_runs: int = 1000, num_gradient_canaries: int = 1, record_canary=None,
                 delta: float = 1e-5, confidence: float = 0.95, privatizer=None,
                 sampler=None, claimed_sensitivity: float | None = None,
                 claimed_epsilon: float | None = None) -> dict:
  """`runner.audit_dpsgd` on MF training (the privatizer through its door).

  The gradient canaries' score is the audit's DP-SGD statistic at q = 1, sum_t o_t: the
  final model's displacement along the canary (mean T IN, sd sigma ||C^-T 1||), so what
  the final model alone reveals; the record canary is scored black-box on the final model.
  Every "best" bound is valid for any training (`score_audit.score_bounds`). With a
  `sampling.CyclicPoissonSampler`, the canaries take part as records of the sampler: the
  record canary is record N (bin N mod s) and gradient canary j is record N' + j (bin
  (N' + j) mod s, N' = N + 1 with a record canary, else N), each drawn with
  probability p at the steps of its bin (the engine samples fixed gradients by the sampler).

  Returns {"epsilon_accountant", "epsilon_claimed", "white_box", "black_box" (each the
  "best" eps_lower or None), "audit" (`runner.DpSgdAudit.to_json()`, whose own
  claimed eps is DP-SGD's and does not apply)}.
  """
  c = mf.check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  delta = _validate.check_delta(delta)
  exact = accountant_epsilon(c, sigma, delta, sampler)
  claimed = _claim(c, sigma, delta, sampler, exact, claimed_sensitivity, claimed_epsilon)
  var = audited_training(c, sigma, int(np.shape(x_NxF)[0]), sampler=sampler, delta=delta,
                         privatizer=privatizer)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    res = runner.audit_dpsgd(key, var.config, model, x_NxF, y_N, num_runs=num_runs,
                             num_gradient_canaries=num_gradient_canaries,
                             record_canary=record_canary, confidence=confidence,
                             progress=False, **var.components)
  best = lambda a: None if a is None else float(a.bounds["best"].epsilon_lower)
  return {"epsilon_accountant": exact, "epsilon_claimed": claimed,
          "white_box": best(res.white_box), "black_box": best(res.black_box),
          "audit": res.to_json()}
