"""Audit statistics: Clopper-Pearson intervals and epsilon lower bounds from attack errors.

An (eps, delta)-DP mechanism on neighbours D (OUT) and D' (IN) forces, for every test
(Kairouz, Oh & Viswanath 2015),

    FPR + e^eps FNR >= 1 - delta     and     FNR + e^eps FPR >= 1 - delta,

so eps >= max(ln((1 - delta - FPR)/FNR), ln((1 - delta - FNR)/FPR)) at the rates'
Clopper-Pearson upper limits, each one-sided at 1 - alpha/2 (Jagielski, Ullman & Oprea 2020).
0 errors in N trials: FPR_u ~ 3.7/N, ceiling ln(N/3.7).
Shape letters: K trials (models), J candidate thresholds.

Examples:
  >>> round(epsilon_lower_bound(0, 500, 0, 500), 2)       # perfect attack, 500 per side
  4.91
  >>> round(epsilon_lower_bound(0, 10_000, 0, 10_000), 2)
  7.9
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from dpjax import _validate


def _check_counts(k, n, k_name: str, n_name: str) -> tuple[np.ndarray, np.ndarray]:
  """Counts k in [0, n] and integer totals n >= 1 as float64 arrays (non-integer k allowed)."""
  if np.asarray(k).dtype == np.bool_:
    raise ValueError(f"{k_name} must be a count (a number >= 0), got a boolean")
  k = _validate.check_array(k, k_name, low=0.0)
  n = _validate.check_array(n, n_name, low=1.0, integer=True)
  if np.any(k > n):
    raise ValueError(f"{k_name} must be <= {n_name} ({k} > {n})")
  return k, n


def clopper_pearson(successes, trials, confidence: float = 0.95):
  """Two-sided Clopper-Pearson interval (lower, upper) for k in [0, n] successes of n >= 1 trials.

  Beta(alpha/2; k, n - k + 1) (0 if k = 0) and Beta(1 - alpha/2; k + 1, n - k) (1 if k = n);
  non-integer k interpolates; broadcastable.

  Examples:
    >>> lo, hi = clopper_pearson(0, 500)
    >>> round(hi * 500, 2)                                # the "3.7 / N" rule
    3.68
  """
  alpha = 1.0 - _validate.check_confidence(confidence)
  k, n = _check_counts(successes, trials, "successes", "trials")
  k, n = np.broadcast_arrays(k, n)
  with np.errstate(invalid="ignore", divide="ignore"):
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
  hi = _upper(k, n, alpha)
  if lo.ndim == 0:
    return float(lo), hi
  return lo, hi


def clopper_pearson_upper(successes, trials, confidence: float = 0.95):
  """The upper limit of `clopper_pearson`'s two-sided interval alone (the same values, half
  the Beta quantiles): Beta(1 - alpha/2; k + 1, n - k), 1 if k = n; broadcastable.

  Examples:
    >>> clopper_pearson_upper(0, 500) == clopper_pearson(0, 500)[1]
    True
  """
  alpha = 1.0 - _validate.check_confidence(confidence)
  k, n = _check_counts(successes, trials, "successes", "trials")
  k, n = np.broadcast_arrays(k, n)
  return _upper(k, n, alpha)


def _upper(k, n, alpha):
  with np.errstate(invalid="ignore", divide="ignore"):
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
  return float(hi) if hi.ndim == 0 else hi


def epsilon_from_rates(fpr, fnr, delta: float = 0.0):
  """max(ln((1 - delta - FPR)/FNR), ln((1 - delta - FNR)/FPR), 0), no confidence correction
  (inf when a rate is 0 and the other < 1 - delta).
  """
  delta = _validate.check_delta(delta, allow_zero=True)
  for rate, name in ((fpr, "fpr"), (fnr, "fnr")):
    if np.asarray(rate).dtype == np.bool_:
      raise ValueError(f"{name} must be rates in [0, 1], got booleans")
  fpr = _validate.check_array(fpr, "fpr", low=0.0, high=1.0)
  fnr = _validate.check_array(fnr, "fnr", low=0.0, high=1.0)
  with np.errstate(divide="ignore", invalid="ignore"):
    a = np.log(np.maximum(1.0 - delta - fpr, 0.0)) - np.log(fnr)
    b = np.log(np.maximum(1.0 - delta - fnr, 0.0)) - np.log(fpr)
  out = np.fmax(np.fmax(np.nan_to_num(a, nan=0.0, posinf=np.inf, neginf=0.0),
                        np.nan_to_num(b, nan=0.0, posinf=np.inf, neginf=0.0)), 0.0)
  return float(out) if out.ndim == 0 else out


def epsilon_lower_bound(false_positives, negatives, false_negatives, positives,
                        delta: float = 0.0, confidence: float = 0.95):
  """eps lower bound certified at `confidence` by a test's false positives of `negatives` OUT
  trials and false negatives of `positives` IN trials (arrays ok).

  Examples:
    >>> epsilon_lower_bound(250, 500, 250, 500)   # a coin flip certifies nothing
    0.0
  """
  fp, neg = _check_counts(false_positives, negatives, "false_positives", "negatives")
  fn, pos = _check_counts(false_negatives, positives, "false_negatives", "positives")
  fpr_u = clopper_pearson_upper(fp, neg, confidence)
  fnr_u = clopper_pearson_upper(fn, pos, confidence)
  return epsilon_from_rates(fpr_u, fnr_u, delta)


def perfect_attack_ceiling(trials: int, delta: float = 0.0, confidence: float = 0.95) -> float:
  """Largest eps any audit with `trials` evaluation trials per side can certify (~ ln(N/3.7)).

  Examples:
    >>> round(perfect_attack_ceiling(500), 2)                # the lecture's 4.91
    4.91
  """
  trials = _validate.check_int(trials, "trials")
  return epsilon_lower_bound(0, trials, 0, trials, delta, confidence)


def error_counts(scores_in_K, scores_out_K, thresholds_J):
  """Errors of "IN iff score > t" per t in thresholds_J: int64 FP = #{out > t}, FN = #{in <= t}.

  Examples:
    >>> fp, fn = error_counts([1, 2, 3], [0, 1, 2, 5], [0.5, 2.0])
    >>> fp.tolist(), fn.tolist()
    ([3, 1], [0, 2])
  """
  s_in = np.sort(check_scores(scores_in_K, "scores_in_K"))
  s_out = np.sort(check_scores(scores_out_K, "scores_out_K"))
  t = _validate.check_array(thresholds_J, "thresholds_J", ndim=1, allow_inf=True, min_size=1)
  fp = s_out.size - np.searchsorted(s_out, t, side="right")
  fn = np.searchsorted(s_in, t, side="right")
  return fp.astype(np.int64), fn.astype(np.int64)


def check_scores(scores_K, name: str) -> np.ndarray:
  """Attack scores as a non-empty float64[K] without NaN (+-inf allowed); bool arrays refused.

  Examples:
    >>> check_scores([0.5, float("inf")], "scores_in_K")
    array([0.5, inf])
    >>> check_scores(np.array([True, False]), "scores_in_K")
    Traceback (most recent call last):
    ...
    ValueError: scores_in_K must hold real-valued scores, got a bool array (labels?)
  """
  if getattr(scores_K, "dtype", None) == np.bool_ or (
      isinstance(scores_K, (list, tuple)) and scores_K
      and all(isinstance(v, (bool, np.bool_)) for v in scores_K)):
    raise ValueError(f"{name} must hold real-valued scores, got a bool array (labels?)")
  return _validate.check_array(scores_K, name, ndim=1, allow_inf=True, min_size=1)


_BLOCKS = 1024       # blocks of candidates bounded at once by monotone_argmax
_SPLIT = 32          # sub-blocks per surviving block


def monotone_argmax(fp_J, fn_J, value_fn, *, tolerance: float = 0.0) -> tuple[int, float]:
  """(j, v[j]), j = np.argmax(v), v = value_fn(fp_J, fn_J), in near-linear time.

  Needs fp_J non-increasing, fn_J non-decreasing and value_fn non-increasing in each count (as
  `epsilon_lower_bound`): a block [i, k] is bounded by value_fn(fp_J[k], fn_J[i]), so blocks
  below the best so far are dropped and the rest split. Same result (first maximum) as
  evaluating every candidate. A block is dropped only when its bound, plus 1e-9 of its
  magnitude and `tolerance` >= 0 (room for value_fn's rounding), is below the best value, or
  equal to it with the block after the best index.

  Examples:
    >>> fp, fn = np.array([5, 3, 3, 1, 0]), np.array([0, 1, 2, 2, 4])
    >>> monotone_argmax(fp, fn, lambda a, b: -(a + b))
    (3, -3.0)
  """
  fp = _validate.check_array(fp_J, "fp_J", ndim=1, min_size=1)
  fn = _validate.check_array(fn_J, "fn_J", shape=fp.shape)
  _validate.check_callable(value_fn, "value_fn")
  tolerance = _validate.check_nonnegative(tolerance, "tolerance")
  if np.any(np.diff(fp) > 0):
    raise ValueError("fp_J must be non-increasing (thresholds in ascending order)")
  if np.any(np.diff(fn) < 0):
    raise ValueError("fn_J must be non-decreasing (thresholds in ascending order)")
  n = fp.size
  best_v, best_j = -np.inf, n

  def evaluate(idx):
    nonlocal best_v, best_j
    v = np.asarray(value_fn(fp[idx], fn[idx]), np.float64).reshape(idx.shape)
    m = v.max()
    if m > best_v or (m == best_v and best_j == n):
      best_v, best_j = m, int(idx[v == m].min())
    elif m == best_v:
      best_j = min(best_j, int(idx[v == m].min()))

  size = -(-n // _BLOCKS)
  starts = np.arange(0, n, size)
  while size > 1 and starts.size:
    ends = np.minimum(starts + size, n) - 1
    evaluate(np.unique(np.r_[starts, ends]))
    bound = np.asarray(value_fn(fp[ends], fn[starts]), np.float64).reshape(starts.shape)
    with np.errstate(invalid="ignore"):             # room for rounding in value_fn
      bound = np.where(np.isfinite(bound), bound + 1e-9 * np.abs(bound) + tolerance, bound)
    keep = (bound > best_v) | ((bound >= best_v) & (starts < best_j))
    starts = starts[keep]
    size, old = -(-size // _SPLIT), size
    starts = (starts[:, None] + np.arange(0, old, size)[None, :]).ravel()
    starts = starts[starts < np.minimum(np.repeat(ends[keep], -(-old // size)), n - 1) + 1]
  if starts.size:
    evaluate(starts)
  return best_j, float(best_v)
