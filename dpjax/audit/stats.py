"""Audit statistics: Clopper-Pearson intervals and epsilon lower bounds from attack errors.

If an (eps, delta)-DP mechanism is run on neighbours D (canary OUT) and D' (canary
IN), every membership test with false-positive rate FPR and false-negative rate FNR
satisfies (lecture §6.2; Kairouz, Oh & Viswanath 2015)

    FPR + e^eps * FNR >= 1 - delta     and     FNR + e^eps * FPR >= 1 - delta,

so observed error rates imply eps >= max(ln((1 - delta - FPR)/FNR), ln((1 - delta - FNR)/FPR)).
An audit replaces the rates by their Clopper-Pearson UPPER confidence limits
(Jagielski, Ullman & Oprea 2020), so the bound holds with the stated confidence.

Confidence: `confidence = 1 - alpha` gives each rate the upper limit of the two-sided
(1 - alpha) Clopper-Pearson interval, i.e. a one-sided (1 - alpha/2) bound; both hold
together with probability >= 1 - alpha (union bound), and on that event both forms
of the inequality are valid, so taking their maximum needs no further correction.
This is the lecture's convention: 0 errors in N trials gives FPR_u = 1 - 0.025^(1/N)
~ 3.7/N, hence the trials' ceiling ln(N/3.7).

The threshold of a test must not be picked on the same trials it is evaluated on
(maximising over thresholds inflates the bound): `audit_scores` chooses it on one
half and evaluates on the other, or evaluates a threshold fixed in advance on all
trials.

Shape letters: K trials (models), J candidate thresholds.

Examples:
  >>> round(epsilon_lower_bound(0, 500, 0, 500), 2)       # perfect attack, 500 per side
  4.91
  >>> round(epsilon_lower_bound(0, 10_000, 0, 10_000), 2)
  7.9
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats


def _check_confidence(confidence: float) -> float:
  if not (0.0 < confidence < 1.0) or math.isnan(confidence):
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  return float(confidence)


def _check_delta(delta: float) -> float:
  if not (0.0 <= delta < 1.0) or math.isnan(delta):
    raise ValueError(f"delta must be in [0, 1), got {delta}")
  return float(delta)


def _check_counts(k, n, k_name: str, n_name: str) -> tuple[np.ndarray, np.ndarray]:
  k = np.asarray(k, np.float64)
  n = np.asarray(n, np.float64)
  if np.any(np.isnan(k)) or np.any(k < 0):
    raise ValueError(f"{k_name} must be >= 0, got {k}")
  if np.any(np.isnan(n)) or np.any(n < 1):
    raise ValueError(f"{n_name} must be >= 1, got {n}")
  if np.any(k > n):
    raise ValueError(f"{k_name} must be <= {n_name} ({k} > {n})")
  return k, n


def clopper_pearson(successes, trials, confidence: float = 0.95):
  """Two-sided Clopper-Pearson ("exact") interval for a binomial proportion.

  Args:
    successes: k in [0, trials], scalar or array; non-integer k (expected counts)
      is allowed and interpolates the beta quantiles.
    trials: n >= 1, broadcastable with `successes`.
    confidence: 1 - alpha in (0, 1); each limit is a one-sided (1 - alpha/2) bound.
  Returns:
    (lower, upper), float64 arrays (or floats) in [0, 1]:
    lower = Beta(alpha/2; k, n - k + 1) (0 when k = 0),
    upper = Beta(1 - alpha/2; k + 1, n - k) (1 when k = n).

  Examples:
    >>> lo, hi = clopper_pearson(0, 500)
    >>> round(hi * 500, 2)                                # the "3.7 / N" rule
    3.68
  """
  alpha = 1.0 - _check_confidence(confidence)
  k, n = _check_counts(successes, trials, "successes", "trials")
  k, n = np.broadcast_arrays(k, n)
  with np.errstate(invalid="ignore", divide="ignore"):
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
  if lo.ndim == 0:
    return float(lo), float(hi)
  return lo, hi


def epsilon_from_rates(fpr, fnr, delta: float = 0.0):
  """The eps implied by error rates (no confidence correction), >= 0.

  max(ln((1 - delta - FPR)/FNR), ln((1 - delta - FNR)/FPR), 0); inf when a rate is 0
  and the other is < 1 - delta.

  Args:
    fpr, fnr: rates in [0, 1], broadcastable arrays.
    delta: in [0, 1).
  """
  delta = _check_delta(delta)
  fpr = np.asarray(fpr, np.float64)
  fnr = np.asarray(fnr, np.float64)
  for name, r in (("fpr", fpr), ("fnr", fnr)):
    if np.any(np.isnan(r)) or np.any(r < 0) or np.any(r > 1):
      raise ValueError(f"{name} must be in [0, 1]")
  with np.errstate(divide="ignore", invalid="ignore"):
    a = np.log(np.maximum(1.0 - delta - fpr, 0.0)) - np.log(fnr)
    b = np.log(np.maximum(1.0 - delta - fnr, 0.0)) - np.log(fpr)
  out = np.fmax(np.fmax(np.nan_to_num(a, nan=0.0, posinf=np.inf, neginf=0.0),
                        np.nan_to_num(b, nan=0.0, posinf=np.inf, neginf=0.0)), 0.0)
  return float(out) if out.ndim == 0 else out


def epsilon_lower_bound(false_positives, negatives, false_negatives, positives,
                        delta: float = 0.0, confidence: float = 0.95):
  """eps lower bound certified by a membership test's errors, at the given confidence.

  Args:
    false_positives: OUT trials the test called IN, in [0, negatives] (array ok).
    negatives: number of OUT trials (canary absent), >= 1.
    false_negatives: IN trials the test called OUT, in [0, positives].
    positives: number of IN trials (canary present), >= 1.
    delta: the delta of the claim being audited, in [0, 1).
    confidence: in (0, 1); see the module docstring for how it is split.
  Returns:
    eps_lower >= 0 (float, or an array for array counts): with probability >=
    `confidence` over the trials, a mechanism for which this holds is not
    (eps, delta)-DP for any eps < eps_lower.

  Examples:
    >>> epsilon_lower_bound(250, 500, 250, 500)   # a coin flip certifies nothing
    0.0
  """
  fp, neg = _check_counts(false_positives, negatives, "false_positives", "negatives")
  fn, pos = _check_counts(false_negatives, positives, "false_negatives", "positives")
  _, fpr_u = clopper_pearson(fp, neg, confidence)
  _, fnr_u = clopper_pearson(fn, pos, confidence)
  return epsilon_from_rates(fpr_u, fnr_u, delta)


def perfect_attack_ceiling(trials: int, delta: float = 0.0, confidence: float = 0.95) -> float:
  """Largest eps any audit with `trials` evaluation trials per side can certify (~ ln(N/3.7))."""
  if int(trials) != trials or trials < 1:
    raise ValueError(f"trials must be an integer >= 1, got {trials}")
  return epsilon_lower_bound(0, trials, 0, trials, delta, confidence)


def error_counts(scores_in_K, scores_out_K, thresholds_J):
  """Errors of the tests "IN iff score > threshold" for each threshold.

  Args:
    scores_in_K: float[K_in] scores of trials with the canary (higher = IN).
    scores_out_K: float[K_out] scores of trials without it.
    thresholds_J: float[J].
  Returns:
    (false_positives_J, false_negatives_J): int64 arrays; FP = #{out > t},
    FN = #{in <= t}.
  """
  s_in = np.sort(_check_scores(scores_in_K, "scores_in_K"))
  s_out = np.sort(_check_scores(scores_out_K, "scores_out_K"))
  t = np.asarray(thresholds_J, np.float64)
  if t.ndim != 1 or np.any(np.isnan(t)):
    raise ValueError("thresholds_J must be a 1-D array without NaN")
  fp = s_out.size - np.searchsorted(s_out, t, side="right")
  fn = np.searchsorted(s_in, t, side="right")
  return fp.astype(np.int64), fn.astype(np.int64)


def _check_scores(s, name: str) -> np.ndarray:
  s = np.asarray(s, np.float64)
  if s.ndim != 1 or s.size < 1:
    raise ValueError(f"{name} must be a non-empty 1-D array, got shape {s.shape}")
  if np.any(np.isnan(s)):
    raise ValueError(f"{name} contains NaN")
  return s


class AuditResult(NamedTuple):
  """Outcome of one threshold audit.

  Attributes:
    epsilon_lower: the certified eps lower bound (>= 0).
    threshold: the test was "IN iff sign * score > threshold".
    sign: +1 or -1 (direction chosen with the threshold).
    false_positives, negatives, false_negatives, positives: evaluation counts.
    selection_trials: (in, out) trials used to choose the threshold (0 if fixed).
  """
  epsilon_lower: float
  threshold: float
  sign: int
  false_positives: int
  negatives: int
  false_negatives: int
  positives: int
  selection_trials: tuple


def best_threshold(scores_in_K, scores_out_K, delta: float = 0.0,
                   confidence: float = 0.95, both_signs: bool = False) -> tuple[float, int]:
  """The threshold (and sign) that maximises the certified bound on these trials.

  Using it on the same trials overstates the bound; pass the result to
  `audit_scores(..., threshold=...)` on fresh trials.
  """
  s_in = _check_scores(scores_in_K, "scores_in_K")
  s_out = _check_scores(scores_out_K, "scores_out_K")
  best = (-1.0, math.inf, 1)
  for sign in ((1, -1) if both_signs else (1,)):
    a, b = sign * s_in, sign * s_out
    cand = np.unique(np.concatenate([a, b, [-np.inf]]))
    fp, fn = error_counts(a, b, cand)
    eps = epsilon_lower_bound(fp, b.size, fn, a.size, delta, confidence)
    j = int(np.argmax(eps))
    if eps[j] > best[0]:
      best = (float(eps[j]), float(cand[j]), sign)
  return best[1], best[2]


def audit_scores(scores_in_K, scores_out_K, *, delta: float = 0.0,
                 confidence: float = 0.95, threshold: float | None = None,
                 sign: int = 1, both_signs: bool = False) -> AuditResult:
  """eps lower bound from attack scores on IN and OUT trials.

  Args:
    scores_in_K: float[K_in] scores of models trained with the canary (higher = IN).
    scores_out_K: float[K_out] scores of models trained without it.
    delta: delta of the claim, in [0, 1).
    confidence: in (0, 1).
    threshold: a threshold fixed IN ADVANCE (independent of these scores, e.g. from
      the known likelihood ratio); then every trial is used for evaluation. If None,
      the first half of each side (in the given order, which must not depend on the
      scores) chooses the threshold and the second half evaluates it.
    sign: direction of a fixed threshold (+1: IN iff score > threshold).
    both_signs: when choosing the threshold, also consider "IN iff score < t".
  Returns:
    AuditResult.

  Examples:
    >>> import numpy as np
    >>> r = audit_scores(np.full(1000, 1.0), np.zeros(1000))   # perfectly separable
    >>> round(r.epsilon_lower, 2), r.positives                  # 500 evaluation trials
    (4.91, 500)
  """
  s_in = _check_scores(scores_in_K, "scores_in_K")
  s_out = _check_scores(scores_out_K, "scores_out_K")
  if sign not in (1, -1):
    raise ValueError(f"sign must be +1 or -1, got {sign}")
  if threshold is None:
    if s_in.size < 2 or s_out.size < 2:
      raise ValueError("need >= 2 trials per side to split into selection/evaluation halves")
    h_in, h_out = s_in.size // 2, s_out.size // 2
    threshold, sign = best_threshold(s_in[:h_in], s_out[:h_out], delta, confidence, both_signs)
    s_in, s_out = s_in[h_in:], s_out[h_out:]
    sel = (h_in, h_out)
  else:
    if math.isnan(threshold):
      raise ValueError("threshold must not be NaN")
    sel = (0, 0)
  fp, fn = error_counts(sign * s_in, sign * s_out, np.asarray([threshold]))
  eps = epsilon_lower_bound(fp[0], s_out.size, fn[0], s_in.size, delta, confidence)
  return AuditResult(float(eps), float(threshold), int(sign), int(fp[0]), int(s_out.size),
                     int(fn[0]), int(s_in.size), sel)


def best_certifiable_epsilon(fpr_J, fnr_J, trials: int, delta: float = 0.0,
                             confidence: float = 0.95) -> float:
  """Best bound certifiable from expected counts on a known ROC (the audit's ceiling).

  For each operating point (FPR_j, FNR_j) of a test -- e.g. the trade-off curve of
  the accounted mechanism, which no adversary can beat -- the expected counts
  trials*FPR_j and trials*FNR_j are plugged into `epsilon_lower_bound`; the maximum
  over j is what the best adversary would certify with `trials` evaluation trials
  per side and this confidence procedure (on typical, i.e. expected, counts).

  Args:
    fpr_J, fnr_J: float[J] operating points in [0, 1].
    trials: evaluation trials per side, >= 1.
    delta, confidence: as in `epsilon_lower_bound`.

  Examples:
    >>> from scipy import stats
    >>> a = np.linspace(0, 1, 2001)                    # trade-off curve of 1-GDP
    >>> b = stats.norm.cdf(stats.norm.ppf(1 - a) - 1.0)
    >>> round(best_certifiable_epsilon(a, b, 10_000), 2)
    2.17
  """
  if int(trials) != trials or trials < 1:
    raise ValueError(f"trials must be an integer >= 1, got {trials}")
  fpr = np.asarray(fpr_J, np.float64)
  fnr = np.asarray(fnr_J, np.float64)
  if fpr.shape != fnr.shape or fpr.ndim != 1:
    raise ValueError("fpr_J and fnr_J must be 1-D arrays of the same shape")
  eps = epsilon_lower_bound(np.clip(fpr, 0, 1) * trials, trials, np.clip(fnr, 0, 1) * trials,
                            trials, delta, confidence)
  return float(np.max(eps))
