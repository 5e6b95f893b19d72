"""Threshold tests: from attack scores to eps lower bounds, and the thresholds to declare.

A strategy's `bound(scores_in_K, scores_out_K, delta=, confidence=)` (higher = IN) gives a
`ThresholdBound`: `FixedThreshold` (fixed in advance, all trials), `SplitThreshold` (chosen on
the first half of each side, evaluated on the second), `Bonferroni` (k strategies at
1 - alpha / k, the max reported). `best_certifiable` and `declared_ladder` fix thresholds from a
claimed law before any score. VALIDITY: the threshold must not be picked on the trials it is
evaluated on, nor the order of the trials depend on the scores.
Shape letters: K trials (models), J candidate thresholds, R bootstrap replicates.

References: Jagielski, Ullman & Oprea 2020 (arXiv:2006.07709); Nasr et al. 2021
(arXiv:2101.04535) and 2023 (arXiv:2302.07956); Kairouz, Oh & Viswanath 2015.

Examples:
  >>> r = SplitThreshold().bound(np.full(1000, 1.0), np.zeros(1000))   # separable
  >>> round(r.epsilon_lower, 2), r.positives                            # 500 evaluate
  (4.91, 500)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from dpjax import _validate
from dpjax.audit import stats

_SPLIT_ASSUMPTIONS = (
    "threshold (and sign) chosen on the first half of each side's trials, evaluated on "
    "the second half; valid when the order of the trials does not depend on the scores")
_FIXED_ASSUMPTIONS = ("threshold fixed before seeing these scores, evaluated on every trial")
# Declared ladders: false-positive rates 2^-i with >= this many expected false positives.
_MIN_EXPECTED_FALSE_POSITIVES = 4.0
# best_certifiable's pruning: absolute allowance for the bound's rounding (see its docstring).
_PRUNE_TOLERANCE = 1e-9
_MAX_TRIALS = 2**40          # best_certifiable's counts (the Beta quantiles' cost grows with them)


@dataclasses.dataclass(frozen=True)
class ThresholdBound:
  """An eps lower bound from the test "IN iff sign * score > threshold", with its counts.

  With probability >= `confidence` the mechanism is not (eps, delta)-DP for any eps <
  `epsilon_lower`, if `assumptions` hold. `selection_trials` (IN, OUT) chose the threshold
  ((0, 0) if fixed); the counts are over the evaluation trials.
  """
  epsilon_lower: float
  threshold: float
  sign: int
  false_positives: int
  negatives: int
  false_negatives: int
  positives: int
  selection_trials: tuple[int, int]
  delta: float
  confidence: float
  strategy: str
  assumptions: str

  def counts(self) -> dict:
    """The evaluation counts as a dict."""
    return {"false_positives": self.false_positives, "negatives": self.negatives,
            "false_negatives": self.false_negatives, "positives": self.positives}


def _evaluate(s_in, s_out, threshold, sign, delta, confidence, selection, strategy,
              assumptions) -> ThresholdBound:
  fp, fn = stats.error_counts(sign * s_in, sign * s_out, np.asarray([threshold]))
  eps = stats.epsilon_lower_bound(fp[0], s_out.size, fn[0], s_in.size, delta, confidence)
  return ThresholdBound(float(eps), float(threshold), int(sign), int(fp[0]), int(s_out.size),
                        int(fn[0]), int(s_in.size), selection, float(delta), float(confidence),
                        strategy, assumptions)


def choose_threshold(scores_in_K, scores_out_K, delta: float = 0.0, confidence: float = 0.95,
                     both_signs: bool = False) -> tuple[float, int]:
  """(threshold, sign) maximising the certified bound on these trials (sign -1 too if both_signs).

  Evaluating it on the same trials overstates the bound: use fresh trials or `SplitThreshold`.

  Examples:
    >>> choose_threshold(np.arange(20.0) + 100, np.arange(20.0))
    (19.0, 1)
  """
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  delta, confidence = _validate.check_delta_confidence(delta, confidence, allow_zero=True)
  both_signs = _validate.check_bool(both_signs, "both_signs")
  best = (-1.0, math.inf, 1)
  for sign in ((1, -1) if both_signs else (1,)):
    a, b = sign * s_in, sign * s_out
    cand = np.unique(np.concatenate([a, b, [-np.inf]]))
    fp, fn = stats.error_counts(a, b, cand)
    j, eps = stats.monotone_argmax(
        fp, fn, lambda f, g: stats.epsilon_lower_bound(f, b.size, g, a.size, delta, confidence))
    if eps > best[0]:
      best = (eps, float(cand[j]), sign)
  return best[1], best[2]


@dataclasses.dataclass(frozen=True)
class FixedThreshold:
  """The test "IN iff sign * score > t" (+-inf ok), t chosen without the scores, on all trials."""
  threshold: float
  sign: int = 1

  def __post_init__(self):
    _validate.check_range(self.threshold, "threshold", allow_inf=True)
    _validate.check_choice(self.sign, (1, -1), "sign")

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> ThresholdBound:
    """eps lower bound on float[K_in] IN, float[K_out] OUT scores; delta in [0, 1).

    Examples:
      >>> r = FixedThreshold(1.0).bound(np.full(300, 2.0), np.zeros(300))
      >>> r.false_positives, r.false_negatives, r.positives
      (0, 0, 300)
    """
    s_in = stats.check_scores(scores_in_K, "scores_in_K")
    s_out = stats.check_scores(scores_out_K, "scores_out_K")
    delta, confidence = _validate.check_delta_confidence(delta, confidence, allow_zero=True)
    return _evaluate(s_in, s_out, float(self.threshold), self.sign, delta, confidence, (0, 0),
                     "fixed", _FIXED_ASSUMPTIONS)


@dataclasses.dataclass(frozen=True)
class SplitThreshold:
  """Threshold (and sign) chosen on the first half of each side, evaluated on the second."""
  both_signs: bool = False

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> ThresholdBound:
    """eps lower bound: threshold from the first halves (>= 2 trials a side), counts from the rest.

    Examples:
      >>> x = np.tile(np.arange(20.0), 2)                  # both halves alike
      >>> r = SplitThreshold().bound(x + 100, x)
      >>> r.selection_trials, r.threshold, r.false_positives, round(r.epsilon_lower, 2)
      ((20, 20), 19.0, 0, 1.6)
    """
    s_in = stats.check_scores(scores_in_K, "scores_in_K")
    s_out = stats.check_scores(scores_out_K, "scores_out_K")
    delta, confidence = _validate.check_delta_confidence(delta, confidence, allow_zero=True)
    if s_in.size < 2 or s_out.size < 2:
      raise ValueError("scores_in_K and scores_out_K need >= 2 trials each to split into "
                       "selection and evaluation halves")
    h_in, h_out = s_in.size // 2, s_out.size // 2
    threshold, sign = choose_threshold(s_in[:h_in], s_out[:h_out], delta, confidence,
                                       self.both_signs)
    return _evaluate(s_in[h_in:], s_out[h_out:], threshold, sign, delta, confidence,
                     (h_in, h_out), "split", _SPLIT_ASSUMPTIONS)


def bonferroni_confidence(confidence: float, num_tests: int) -> float:
  """Per-test confidence 1 - alpha / k that makes k tests valid jointly at 1 - alpha.

  Examples:
    >>> round(bonferroni_confidence(0.95, 2), 6)
    0.975
  """
  confidence = _validate.check_confidence(confidence)
  k = _validate.check_int(num_tests, "num_tests")
  return 1.0 - (1.0 - confidence) / k


@dataclasses.dataclass(frozen=True)
class BonferroniBound:
  """The largest of several bounds (`parts`), each at 1 - alpha / k, valid jointly at 1 - alpha."""
  epsilon_lower: float
  parts: tuple[ThresholdBound, ...]
  delta: float
  confidence: float
  assumptions: str

  def tests(self) -> list:
    """Each part's threshold, counts and bound, JSON-ready."""
    return [{"threshold": p.threshold, **p.counts(), "epsilon_lower": p.epsilon_lower}
            for p in self.parts]


@dataclasses.dataclass(frozen=True)
class Bonferroni:
  """Runs k strategies on the same trials at 1 - alpha / k each and reports the largest bound
  (valid jointly at 1 - alpha by the union bound, whatever their dependence).
  """
  strategies: tuple

  def __post_init__(self):
    if not isinstance(self.strategies, tuple) or not self.strategies or not all(
        callable(getattr(s, "bound", None)) for s in self.strategies):
      raise ValueError("strategies must be a non-empty tuple of objects with a bound() method, "
                       f"got {self.strategies!r}")

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> BonferroniBound:
    """The largest bound of the strategies, each at 1 - (1 - confidence) / k.

    Examples:
      >>> p = Bonferroni((FixedThreshold(1.0), SplitThreshold()))
      >>> r = p.bound(np.full(300, 2.0), np.zeros(300))
      >>> r.parts[0].confidence, r.epsilon_lower == r.parts[0].epsilon_lower
      (0.975, True)
    """
    delta, confidence = _validate.check_delta_confidence(delta, confidence, allow_zero=True)
    per_test = bonferroni_confidence(confidence, len(self.strategies))
    parts = tuple(s.bound(scores_in_K, scores_out_K, delta=delta, confidence=per_test)
                  for s in self.strategies)
    text = (f"union bound over {len(parts)} tests at confidence {per_test:g} each; "
            + "; ".join(f"test {i} ({p.strategy}): {p.assumptions}" for i, p in enumerate(parts)))
    return BonferroniBound(max(p.epsilon_lower for p in parts), parts, delta, confidence, text)


@dataclasses.dataclass(frozen=True)
class BootstrapSpread:
  """Parametric-bootstrap spread of a threshold bound: sd, epsilon_lower_R float64[R]."""
  sd: float
  epsilon_lower_R: np.ndarray
  assumptions: str


def bootstrap_spread(result: ThresholdBound, rng: np.random.Generator,
                     num_replicates: int = 400) -> BootstrapSpread:
  """Spread of a bound when its error counts are redrawn at their observed rates (R >= 2).

  FP* ~ Binomial(negatives, FP / negatives), FN* likewise, threshold fixed: the noise for
  comparing two bounds, NOT a confidence interval.

  Examples:
    >>> r = FixedThreshold(0.0).bound(np.r_[np.ones(900), -np.ones(100)], -np.ones(1000))
    >>> s = bootstrap_spread(r, np.random.default_rng(0))
    >>> bool(0 < s.sd < 0.5), s.epsilon_lower_R.shape
    (True, (400,))
  """
  if not isinstance(result, ThresholdBound):
    raise ValueError(f"result must be a ThresholdBound, got {type(result).__name__}")
  _validate.check_instance(rng, np.random.Generator, "rng")
  reps = _validate.check_size(num_replicates, "num_replicates", minimum=2, bytes_per_unit=64)
  fp, neg = result.false_positives, result.negatives
  fn, pos = result.false_negatives, result.positives
  fp_b = rng.binomial(neg, fp / neg, reps)
  fn_b = rng.binomial(pos, fn / pos, reps)
  eps = stats.epsilon_lower_bound(fp_b, neg, fn_b, pos, result.delta, result.confidence)
  return BootstrapSpread(
      float(np.std(eps)), eps,
      f"{reps} parametric-bootstrap replicates: error counts redrawn as binomials at the "
      "observed rates, threshold held fixed; the spread of the bound, not a confidence interval")


# Thresholds declared from a claimed law, and what they are expected to certify.


@dataclasses.dataclass(frozen=True)
class CertifiableBound:
  """The best bound certifiable from expected counts on a known ROC, at ROC point `index` (its
  threshold, None when none were given, and rates); trials: evaluation trials on the OUT side.
  """
  epsilon: float
  index: int
  threshold: Optional[float]
  fpr: float
  fnr: float
  trials: int
  delta: float
  confidence: float
  assumptions: str


@_validate.names_extreme_arguments
def best_certifiable(fpr_J, fnr_J, trials: int, *, delta: float = 0.0,
                     confidence: float = 0.95,
                     thresholds_J: Optional[Sequence[float]] = None,
                     trials_in: Optional[int] = None,
                     integer_counts: bool = False) -> CertifiableBound:
  """Best bound certifiable from expected counts on a known ROC (the audit's ceiling).

  max_j `stats.epsilon_lower_bound` of the counts trials FPR_j and trials_in FNR_j (default
  trials; rounded when integer_counts; trials, trials_in <= 2^40), skipping FPR = FNR = 0. A
  benchmark (what the best adversary for that ROC typically certifies), not a bound on any one
  audit; the best point's threshold is the natural one to fix in advance. The point is the
  first j of the maximum, as np.argmax over every point would give.

  Pruning (the same point and value as evaluating every point): when the counts come in
  threshold order (expected false positives non-increasing and false negatives
  non-decreasing in j, as `tradeoff.likelihood_ratio_roc` gives them), the maximum is found
  by `stats.monotone_argmax` from a few thousand of the J points. Proof: the Clopper-Pearson
  upper limit of k errors in n trials (the Beta(1 - alpha/2; k + 1, n - k) quantile) is
  increasing in k, and the bound is non-increasing in each upper limit, so it is
  non-increasing in each count. In a block of consecutive points [i, k] every point's
  counts are at least (FP_k, FN_i), so the bound at (FP_k, FN_i) is at least every point's
  in the block. A block is dropped only when that value, plus 1e-9 of its magnitude plus
  1e-9 (room for rounding: the computed bound is within ~1e-13 of the exact one, the
  quantiles' relative error carried through a logarithm), is below the best value found so
  far, or equal to it with the block after the best index; so no dropped point holds the
  maximum or an earlier tie, and each kept block is split down to single points and
  evaluated (each point's bound is computed elementwise, the same in any batch).
  Multiplying by trials, rounding (integer_counts) and capping keep the order, which is
  checked on the counts themselves; in any other order (e.g. FPR ascending) every point is
  evaluated.

  Examples:
    >>> from dpjax import tradeoff
    >>> a = np.linspace(0, 1, 2001)                       # trade-off curve of 1-GDP
    >>> round(best_certifiable(a, tradeoff.gaussian_fnr(a, 1.0), 10_000).epsilon, 2)
    2.17
  """
  # The Beta quantiles' cost grows with the count: for J ~ 4000 rates, seconds at 2^40,
  # a minute at 2^53, minutes (and NaN) at 2^63.
  trials = _validate.check_int(trials, "trials", maximum=_MAX_TRIALS)
  n_in = trials if trials_in is None else _validate.check_int(trials_in, "trials_in",
                                                               maximum=_MAX_TRIALS)
  fpr = _validate.check_array(fpr_J, "fpr_J", ndim=1, low=0.0, high=1.0)
  fnr = _validate.check_array(fnr_J, "fnr_J", shape=fpr.shape, low=0.0, high=1.0)
  thr = None if thresholds_J is None else _validate.check_array(
      thresholds_J, "thresholds_J", shape=fpr.shape, allow_inf=True)
  delta, confidence = _validate.check_delta_confidence(delta, confidence, allow_zero=True)
  integer_counts = _validate.check_bool(integer_counts, "integer_counts")
  ok = np.flatnonzero((fpr > 0) | (fnr > 0))
  if ok.size == 0:
    raise ValueError("fpr_J and fnr_J have no point with FPR > 0 or FNR > 0")
  fp, fn = trials * fpr[ok], n_in * fnr[ok]
  if integer_counts:
    fp, fn = np.minimum(np.rint(fp), trials), np.minimum(np.rint(fn), n_in)

  def bound(f, g):
    return stats.epsilon_lower_bound(f, trials, g, n_in, delta, confidence)
  if np.all(np.diff(fp) <= 0) and np.all(np.diff(fn) >= 0):
    j, best = stats.monotone_argmax(fp, fn, bound, tolerance=_PRUNE_TOLERANCE)
  else:
    eps = bound(fp, fn)
    j = int(np.argmax(eps))
    best = float(eps[j])
  i = int(ok[j])
  return CertifiableBound(
      best, i, None if thr is None else float(thr[i]), float(fpr[i]), float(fnr[i]),
      trials, delta, confidence,
      "expected counts (trials x rate) at the best point of the given ROC; what the best "
      "adversary for that ROC typically certifies, not a bound on any one audit")


def declared_ladder(thresholds_J, fpr_J, num_out: int) -> tuple[np.ndarray, np.ndarray]:
  """The tests of false-positive rates 2^-i, declared from a claimed law before any score.

  For i = 1, 2, ... while num_out 2^-i >= 4 (at least i = 1), the first threshold with
  fpr_J <= 2^-i (fpr_J non-increasing; unreached levels left out). Returns (thresholds, levels).

  Examples:
    >>> declared_ladder([0.0, 1.0, 2.0, 3.0], [0.9, 0.4, 0.2, 0.05], 40)
    (array([1., 2., 3.]), array([0.5  , 0.25 , 0.125]))
  """
  n = _validate.check_int(num_out, "num_out")
  fpr = _validate.check_array(fpr_J, "fpr_J", ndim=1, low=0.0, high=1.0, min_size=1)
  thr = _validate.check_array(thresholds_J, "thresholds_J", shape=fpr.shape, allow_inf=True)
  levels = [0.5]
  while n * 2.0 ** -(len(levels) + 1) >= _MIN_EXPECTED_FALSE_POSITIVES:
    levels.append(2.0 ** -(len(levels) + 1))
  found = [(float(thr[int(np.argmax(fpr <= lv))]), lv) for lv in levels if np.any(fpr <= lv)]
  return np.asarray([t for t, _ in found]), np.asarray([lv for _, lv in found])


def best_exact_epsilon(log_fpr_J, log_tpr_J, delta: float) -> float:
  """max_j ln((TPR_j - delta) / FPR_j) >= 0 from exact log rates (no confidence); a log FPR of
  -inf (underflow) does not count.

  Examples:
    >>> round(best_exact_epsilon(np.log([0.5, 0.01]), np.log([0.9, 0.5]), 0.0), 3)
    3.912
  """
  lf = _validate.check_array(log_fpr_J, "log_fpr_J", ndim=1, allow_inf=True, min_size=1, high=0.0)
  lt = _validate.check_array(log_tpr_J, "log_tpr_J", shape=lf.shape, allow_inf=True, high=0.0)
  delta = _validate.check_delta(delta, allow_zero=True)
  tpr = np.exp(lt)
  with np.errstate(divide="ignore", invalid="ignore"):
    eps = np.where((tpr > delta) & np.isfinite(lf), np.log(np.maximum(tpr - delta, 1e-300)) - lf,
                   0.0)
  return float(max(0.0, np.max(eps)))
