"""A canary audit of PATE's released labels: fixed teachers, repeated aggregation.

PATE's accountant (`dpjax.pate`) counts only the aggregator's noise: for ANY two histograms one
teacher's vote apart, Q GNMax answers are (alpha, Q alpha / sigma^2)-RDP. So the audit builds
the pair once and repeats only the aggregation; a bound on that pair refutes the claim. GNMax
returns o_q = argmax_c v_qc + sigma z_qc, with

    P_v(o_q = c) = int phi(z) prod_{j != c} Phi((v_qc - v_qj) / sigma + z) dz

(`output_log_probs`); Confident-GNMax adds "not answered" (outcome C) w.p.
Phi((T - max_c v_qc) / sigma_t). Releases are scored by the exact LLR (`llr_scores`) against
thresholds declared from the claimed law, each at 1 - alpha / k (`thresholds.Bonferroni`).
Shape letters: Q queries, C classes, O outcomes per query (C, or C + 1), K trials.

References: Papernot et al. 2018, ICLR ("Scalable private learning with PATE"); Jagielski,
Ullman & Oprea 2020; Nasr et al. 2021.

Examples:
  >>> v_in, v_out = crafted_pair(num_teachers=11, num_queries=4)
  >>> v_in[0].tolist(), v_out[0].tolist()
  ([6, 5], [5, 6])
  >>> r = audit_labels(jax.random.key(0), v_in, v_out, sigma=2.0, num_trials=2000,
  ...                  delta=1e-5)
  >>> bool(r.epsilon_lower <= r.exact_epsilon <= r.claimed_epsilon)
  True
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats as sp_stats

from dpjax import _validate, accounting, pate
from dpjax.audit import stats, thresholds

__all__ = ["LabelAudit", "audit_labels", "calibrate_sigma", "claimed_epsilon", "crafted_pair",
           "exact_epsilon", "llr_scores", "output_log_probs"]

# Trials per device call: about this many noise draws (trials x Q x C) at once.
_DRAWS_PER_CHUNK = 1 << 22
# Grid of the C > 2 argmax integral: step and margin (in units of the noise).
_QUAD_STEP = 0.02
_QUAD_MARGIN = 12.0


# inputs


def _check_pair(votes_in_QxC, votes_out_QxC) -> tuple[np.ndarray, np.ndarray]:
  """Two histograms that differ in at most one teacher's vote on every query."""
  v_in = pate.check_votes(votes_in_QxC, "votes_in_QxC", ndim=2, integer=True)
  v_out = pate.check_votes(votes_out_QxC, "votes_out_QxC", ndim=2, integer=True)
  if v_in.shape != v_out.shape:
    raise ValueError(f"votes_in_QxC and votes_out_QxC must have the same shape, got "
                     f"{v_in.shape} and {v_out.shape}")
  if np.any(v_in.sum(axis=1) != v_out.sum(axis=1)):
    raise ValueError("votes_in_QxC and votes_out_QxC must count the same number of teachers "
                     "on every query (the canary changes one teacher's vote, not their number)")
  if np.any(np.abs(v_in - v_out).sum(axis=1) > 2):
    raise ValueError("votes_in_QxC and votes_out_QxC must differ by at most one teacher's vote "
                     "per query (one count -1, another +1): PATE's guarantee covers only such "
                     "neighbouring histograms")
  return v_in, v_out


# exact output distributions and the likelihood-ratio score


_MAX_SPREAD = 1e5                    # largest |v_c - v_j| / sigma the quadrature spans


def _argmax_log_probs(v_C: np.ndarray, sigma: float) -> np.ndarray:
  """log P(argmax_c v_c + sigma z_c = c) for each c: float64[C] (exact for C = 2)."""
  c = v_C.size
  if c == 2:
    d = (v_C[0] - v_C[1]) / (math.sqrt(2.0) * sigma)
    return np.array([sp_stats.norm.logcdf(d), sp_stats.norm.logcdf(-d)])
  a = (v_C[:, None] - v_C[None, :]) / sigma           # a[c, j] = (v_c - v_j) / sigma
  spread = float(np.max(np.abs(a)))
  if not spread <= _MAX_SPREAD:
    raise ValueError(f"sigma = {sigma!r}: the vote gaps / sigma reach {spread:.3g}, past "
                     f"{_MAX_SPREAD:g} (the quadrature grid would need over "
                     f"{2 * _MAX_SPREAD / _QUAD_STEP:.0e} points)")
  z = np.arange(-_QUAD_MARGIN - spread, _QUAD_MARGIN + spread + _QUAD_STEP, _QUAD_STEP)
  out = np.empty(c)
  for k in range(c):
    others = np.delete(a[k], k)
    log_f = sp_stats.norm.logpdf(z) + sp_stats.norm.logcdf(others[:, None] + z[None, :]).sum(0)
    out[k] = special.logsumexp(log_f) + math.log(_QUAD_STEP)
  return out - special.logsumexp(out)                 # the grid's mass error, normalised away


def output_log_probs(votes_QxC, *, sigma: float, threshold: Optional[float] = None,
                     sigma_threshold: Optional[float] = None) -> np.ndarray:
  """Exact log-probabilities of every per-query outcome of (Confident-)GNMax: float64[Q, O].

  C = 2: Phi(+-(v_0 - v_1) / (sqrt(2) sigma)); C > 2: trapezoid rule in log space (step 0.02),
  rows renormalised. Give both of threshold, sigma_threshold or neither (column C: not answered).

  Examples:
    >>> p = np.exp(output_log_probs([[3, 1]], sigma=np.sqrt(2)))
    >>> np.round(p, 4).tolist()                      # Phi(1), Phi(-1)
    [[0.8413, 0.1587]]
  """
  v = pate.check_votes(votes_QxC, ndim=2)
  s = _validate.check_positive(sigma, "sigma")
  t, st = pate.check_threshold(threshold, sigma_threshold)
  rows, inverse = np.unique(v, axis=0, return_inverse=True)
  table = np.stack([_argmax_log_probs(r, s) for r in rows])
  if t is not None:
    log_skip = sp_stats.norm.logcdf((t - rows.max(axis=1)) / st)     # not answered
    log_answer = sp_stats.norm.logsf((t - rows.max(axis=1)) / st)
    table = np.concatenate([table + log_answer[:, None], log_skip[:, None]], axis=1)
  return table[np.reshape(inverse, -1)]


def llr_scores(outcomes_KxQ, log_probs_in_QxO, log_probs_out_QxO) -> np.ndarray:
  """LLR of each release, sum_q log P_in(o_kq) - log P_out(o_kq): float64[K], higher = IN.

  Examples:
    >>> lp_in, lp_out = np.log([[0.75, 0.25]]), np.log([[0.25, 0.75]])
    >>> np.round(llr_scores([[0], [1]], lp_in, lp_out), 4).tolist()
    [1.0986, -1.0986]
  """
  lp_in = _validate.check_array(log_probs_in_QxO, "log_probs_in_QxO", ndim=2, high=0.0,
                                allow_inf=True, min_size=1)
  lp_out = _validate.check_array(log_probs_out_QxO, "log_probs_out_QxO", shape=lp_in.shape,
                                 high=0.0, allow_inf=True)
  q, o = lp_in.shape
  out = _validate.check_array(outcomes_KxQ, "outcomes_KxQ", np.int64, shape=(None, q),
                              low=0, high=o - 1, integer=True, min_size=1)
  with np.errstate(invalid="ignore"):
    diff = lp_in - lp_out
  diff = np.where(np.isneginf(lp_in) & np.isneginf(lp_out), 0.0, diff)  # impossible in both
  return diff[np.arange(q)[None, :], out].sum(axis=1)


@_validate.names_extreme_arguments
def exact_epsilon(votes_in_QxC, votes_out_QxC, *, sigma: float, delta: float,
                  threshold: Optional[float] = None,
                  sigma_threshold: Optional[float] = None) -> float:
  """Exact eps at delta of (Confident-)GNMax on a neighbouring pair (0 if equal).

  Composition of each differing query's outcome PLD, both directions, discretised pessimistically
  (grid 1e-4; 1e-3 beyond 8 distinct queries): an upper bound within about the grid per query.

  Examples:
    >>> from scipy import stats as st
    >>> p = st.norm.cdf(1 / np.sqrt(2))                # one tied query, sigma = 1
    >>> round(exact_epsilon([[3, 2]], [[2, 3]], sigma=1.0, delta=1e-5), 3)
    1.154
    >>> round(float(np.log((p - 1e-5) / (1 - p))), 3)   # the closed form
    1.154
  """
  v_in, v_out = _check_pair(votes_in_QxC, votes_out_QxC)
  s = _validate.check_positive(sigma, "sigma")
  d = _validate.check_delta(delta)
  t, st = pate.check_threshold(threshold, sigma_threshold)
  total = _pair_pld(v_in, v_out, s, t, st)
  return 0.0 if total is None else float(total.epsilon(d))


def _pair_pld(v_in: np.ndarray, v_out: np.ndarray, s: float, t, st):
  """The pair's PLD (both directions), or None if v_in == v_out: each distinct differing
  query an `events.OutputPairEvent` of its outcome laws, self-composed over its repeats,
  accounted by `event_accounting` (pld)."""
  from dpjax.accounting import event_accounting, events  # pylint: disable=g-import-not-at-top
  differ = np.any(v_in != v_out, axis=1)
  if not np.any(differ):
    return None
  pairs, counts = np.unique(np.concatenate([v_in[differ], v_out[differ]], axis=1), axis=0,
                            return_counts=True)
  c = v_in.shape[1]
  lp_in = output_log_probs(pairs[:, :c], sigma=s, threshold=t, sigma_threshold=st)
  lp_out = output_log_probs(pairs[:, c:], sigma=s, threshold=t, sigma_threshold=st)
  h = 1e-4 if pairs.shape[0] <= 8 else 1e-3
  # P-side PLDs: in -> out (loss log P_in / P_out under P_in) and out -> in.
  run = events.ComposedEvent(tuple(events.SelfComposedEvent(events.OutputPairEvent(a, b), int(k))
                                   for a, b, k in zip(lp_in, lp_out, counts)))
  return event_accounting.privacy_loss_distribution(run, value_discretization=h)


def _declared_thresholds(total, n: int, delta: float, confidence: float
                         ) -> tuple[np.ndarray, float]:
  """(float64[k] thresholds on L from the claimed law alone, expected bound of the best): the
  `best_certifiable` one for n trials per side and those of FPR 2^-i with n 2^-i >= 4.
  """
  from dpjax import tradeoff  # pylint: disable=g-import-not-at-top
  losses, p_in, _ = total.loss_pmf(0)
  if losses.size < 2:
    return np.array([0.0]), 0.0
  p_out = p_in * np.exp(-losses)
  p_out = p_out / max(1.0, float(p_out.sum()))
  p_in = p_in / max(1.0, float(p_in.sum()))
  thr, fpr, fnr = tradeoff.likelihood_ratio_roc(losses, p_in, p_out)
  ladder = thresholds.declared_ladder(thr, fpr, n)[0].tolist()
  per_test = thresholds.bonferroni_confidence(confidence, len(ladder) + 1)
  best = thresholds.best_certifiable(fpr, fnr, n, delta=delta, confidence=per_test,
                                     thresholds_J=thr)
  return np.unique([float(best.threshold)] + ladder), float(best.epsilon)


# histograms, calibration


def crafted_pair(num_teachers: int, num_queries: int, num_classes: int = 2
                 ) -> tuple[np.ndarray, np.ndarray]:
  """The worst case: M - 1 other teachers tied (floor((M-1)/2) on class 0), the canary's teacher
  votes 0 (IN) or 1 (OUT), on Q identical queries. Returns (votes_in, votes_out) int64[Q, C].

  Examples:
    >>> v_in, v_out = crafted_pair(251, 1)
    >>> v_in.tolist(), v_out.tolist()
    ([[126, 125]], [[125, 126]])
    >>> [v.tolist() for v in crafted_pair(250, 1)]      # M even: no exact tie
    [[[125, 125]], [[124, 126]]]
  """
  m = _validate.check_int(num_teachers, "num_teachers", minimum=2)
  c = _validate.check_size(num_classes, "num_classes", minimum=2, bytes_per_unit=8)
  q = _validate.check_size(num_queries, "num_queries", bytes_per_unit=16, units=c)
  a = (m - 1) // 2
  base = np.zeros((q, c), np.int64)
  base[:, 0], base[:, 1] = a, m - 1 - a
  v_in, v_out = base.copy(), base.copy()
  v_in[:, 0] += 1
  v_out[:, 1] += 1
  return v_in, v_out


@_validate.names_extreme_arguments
def claimed_epsilon(num_queries: int, *, sigma: float, delta: float,
                    sigma_threshold: Optional[float] = None, orders=None) -> float:
  """Data-independent eps of Q answers: RDP Q (alpha/sigma^2 + alpha/(2 sigma_t^2)), `pate.epsilon`
  of the curve of `pate.aggregation_event` (every query answered) by `event_accounting`.

  Examples:
    >>> from dpjax.accounting import rdp
    >>> e = claimed_epsilon(3, sigma=4.0, delta=1e-5)
    >>> e == pate.epsilon(rdp.DEFAULT_ORDERS, 3 * rdp.DEFAULT_ORDERS / 16.0, 1e-5)
    True
  """
  from dpjax.accounting import event_accounting, rdp  # pylint: disable=g-import-not-at-top
  q = _validate.check_int(num_queries, "num_queries")
  lam = rdp.DEFAULT_ORDERS if orders is None else _validate.check_orders(orders)
  event = pate.aggregation_event(q, q, sigma=sigma, sigma_threshold=sigma_threshold)
  curve = event_accounting.rdp_curve(event, lam)[1]
  return float(pate.epsilon(lam, curve, _validate.check_delta(delta)))


@_validate.names_extreme_arguments
def calibrate_sigma(target_epsilon: float, num_queries: int, *, delta: float,
                    threshold_ratio: Optional[float] = None, orders=None) -> float:
  """sigma with `claimed_epsilon` = target_epsilon (rtol 1e-9, not above); sigma_t = ratio sigma.

  Examples:
    >>> s = calibrate_sigma(2.0, 10, delta=1e-5)
    >>> round(claimed_epsilon(10, sigma=s, delta=1e-5), 6)
    2.0
  """
  e = _validate.check_epsilon(target_epsilon, "target_epsilon")
  q = _validate.check_int(num_queries, "num_queries")
  d = _validate.check_delta(delta)
  ratio = None if threshold_ratio is None else _validate.check_positive(threshold_ratio,
                                                                         "threshold_ratio")

  def eps_of(s):
    return claimed_epsilon(q, sigma=s, delta=d, orders=orders,
                           sigma_threshold=None if ratio is None else ratio * s)

  # eps_of decreases in sigma: widen from [1e-3, 1e3] by factors of 10, then bisect.
  return accounting.smallest_noise(eps_of, e, 1e-3, 1e3, rtol=1e-9, factor=10.0)


# the audit


class LabelAudit(NamedTuple):
  """The result of `audit_labels`: the certified bound, the pair's claimed, data-dependent
  (Papernot et al. 2018 Thm 6) and exact eps, the bound a correct aggregator should give, and
  `exceeds_exact` (releases not the claimed aggregator's; probability <= 1 - confidence if correct).
  """
  epsilon_lower: float
  claimed_epsilon: float
  data_dependent_epsilon: float
  exact_epsilon: float
  expected_epsilon_lower: float
  ceiling: float
  falsified: bool
  exceeds_exact: bool
  bound: Any
  num_queries: int
  num_differing: int
  answered_in: float
  answered_out: float
  sigma: float
  threshold: Optional[float]
  sigma_threshold: Optional[float]
  delta: float
  confidence: float

  def to_json(self) -> dict:
    d = self._asdict()
    b = d.pop("bound")
    d["tests"] = b.tests()
    return d


def _release_fn(aggregator: Callable, q: int, c: int, *, sigma: float, threshold,
                sigma_threshold) -> Callable:
  """jit(vmap) of one release over trial keys: (keys [K], votes [Q, C]) -> outcomes int32[K, Q]."""
  confident = threshold is not None

  def one(k, v):
    if confident:
      labels, answered = aggregator(k, v, threshold=threshold, sigma_threshold=sigma_threshold,
                                    sigma=sigma)
      labels, answered = jnp.asarray(labels), jnp.asarray(answered)
      if labels.shape != (q,) or answered.shape != (q,):
        raise ValueError(f"aggregator must return (labels [Q], answered [Q]) with Q = {q}, "
                         f"got shapes {labels.shape} and {answered.shape}")
      return jnp.where(answered.astype(bool), labels.astype(jnp.int32), c)
    labels = jnp.asarray(aggregator(k, v, sigma=sigma))
    if labels.shape != (q,):
      raise ValueError(f"aggregator must return labels of shape [Q] = ({q},), got "
                       f"{labels.shape}")
    return labels.astype(jnp.int32)

  return jax.jit(jax.vmap(one, in_axes=(0, None)))


def _release_scores(fn: Callable, key: jax.Array, votes: np.ndarray, n: int,
                    diff_QxO: np.ndarray, top: int) -> tuple[np.ndarray, int]:
  """n releases by `fn` on `votes`, LLR-scored on the host: (float64[n], number answered)."""
  q, c = votes.shape
  v = jnp.asarray(votes, jnp.float32)
  chunk = max(1, min(n, _DRAWS_PER_CHUNK // (q * c)))
  keys = jax.random.split(key, n)
  scores = np.empty(n)
  answers = 0
  rows = np.arange(q)[None, :]
  for start in range(0, n, chunk):
    k = keys[start:start + chunk]
    m = k.shape[0]
    if m < chunk:                                      # pad: one compiled shape
      k = jnp.concatenate([k, jnp.broadcast_to(k[:1], (chunk - m,) + k.shape[1:])])
    out = np.asarray(fn(k, v))[:m]
    if out.min() < 0 or out.max() > top:
      raise ValueError(f"aggregator returned labels outside [0, {c - 1}]")
    scores[start:start + m] = diff_QxO[rows, out].sum(axis=1)
    answers += int(np.count_nonzero(out != c))
  return scores, answers


@_validate.names_extreme_arguments
def audit_labels(key: jax.Array, votes_in_QxC, votes_out_QxC, *, sigma: float,
                 threshold: Optional[float] = None, sigma_threshold: Optional[float] = None,
                 num_trials: int, delta: float, confidence: float = 0.95,
                 aggregator: Optional[Callable] = None, orders=None) -> LabelAudit:
  """Audits (Confident-)GNMax on a neighbouring pair of vote histograms (see the module docstring).

  aggregator (default `pate.gnmax` / `pate.confident_gnmax`): aggregator(key, votes, sigma=) ->
  int[Q], or with threshold=, sigma_threshold= -> (labels int[Q], answered bool[Q]); traceable
  under jit and vmap over the key. num_trials: releases per world.
  """
  from dpjax.accounting import rdp  # pylint: disable=g-import-not-at-top
  v_in, v_out = _check_pair(votes_in_QxC, votes_out_QxC)
  s = _validate.check_positive(sigma, "sigma")
  t, st = pate.check_threshold(threshold, sigma_threshold)
  q = v_in.shape[0]
  n = _validate.check_size(num_trials, "num_trials", bytes_per_unit=8, units=2 * q)
  d, conf = _validate.check_delta_confidence(delta, confidence)
  if aggregator is None:
    aggregator = pate.gnmax if t is None else pate.confident_gnmax
  _validate.check_callable(aggregator, "aggregator")
  lam = rdp.DEFAULT_ORDERS if orders is None else _validate.check_orders(orders)

  total = _pair_pld(v_in, v_out, s, t, st)
  exact = 0.0 if total is None else float(total.epsilon(d))
  tests, expected = ((np.array([0.0]), 0.0) if total is None
                     else _declared_thresholds(total, n, d, conf))
  lp_in = output_log_probs(v_in, sigma=s, threshold=t, sigma_threshold=st)
  lp_out = output_log_probs(v_out, sigma=s, threshold=t, sigma_threshold=st)
  with np.errstate(invalid="ignore"):
    diff = np.where(np.isneginf(lp_in) & np.isneginf(lp_out), 0.0, lp_in - lp_out)
  k_in, k_out = jax.random.split(key)
  c = v_in.shape[1]
  fn = _release_fn(aggregator, q, c, sigma=s, threshold=t, sigma_threshold=st)
  top = c - 1 if t is None else c
  s_in, a_in = _release_scores(fn, k_in, v_in, n, diff, top)
  s_out, a_out = _release_scores(fn, k_out, v_out, n, diff, top)
  policy = thresholds.Bonferroni(tuple(thresholds.FixedThreshold(float(x)) for x in tests))
  bound = policy.bound(s_in, s_out, delta=d, confidence=conf)

  claimed = claimed_epsilon(q, sigma=s, delta=d, sigma_threshold=st, orders=lam)
  dd = max(pate.epsilon(lam, pate.pate_rdp(v, sigma=s, orders=lam, threshold=t,
                                           sigma_threshold=st).data_dependent, d)
           for v in (v_in, v_out))
  return LabelAudit(
      epsilon_lower=float(bound.epsilon_lower), claimed_epsilon=float(claimed),
      data_dependent_epsilon=float(dd), exact_epsilon=exact, expected_epsilon_lower=expected,
      ceiling=float(stats.perfect_attack_ceiling(n, d, conf)),
      falsified=bool(bound.epsilon_lower > claimed),
      exceeds_exact=bool(bound.epsilon_lower > exact), bound=bound,
      num_queries=q, num_differing=int(np.any(v_in != v_out, axis=1).sum()),
      answered_in=a_in / (n * q), answered_out=a_out / (n * q), sigma=s, threshold=t,
      sigma_threshold=st, delta=d, confidence=conf)
