"""From attack scores to privacy bounds: threshold strategies, their bound records, spread.

Runs with a canary IN and OUT are scored (higher = IN, any source) and turned into an
eps lower bound by a strategy's `bound(scores_in_K, scores_out_K, delta=, confidence=)`,
which returns a `ThresholdBound`: `FixedThreshold` (fixed in advance, all trials),
`SplitThreshold` (chosen on the first half of each side, evaluated on the second),
`Bonferroni` (k strategies at 1 - alpha / k each, the max reported).
`bootstrap_spread` gives a bound's spread.

VALIDITY: the threshold must not be picked on the trials it is evaluated on, and the
order of the trials must not depend on the scores.

Typical use (the white-box policy of `dpjax.audit.run.evaluate`):

    per_test = bonferroni_confidence(0.95, 2)
    ceiling = certifiable.best_certifiable(fpr_J, fnr_J, trials, delta=1e-5,
                                           confidence=per_test, thresholds_J=thresholds_J)
    policy = Bonferroni((FixedThreshold(ceiling.threshold), SplitThreshold(both_signs=True)))
    result = policy.bound(scores_in_K, scores_out_K, delta=1e-5, confidence=0.95)

References: Jagielski, Ullman & Oprea 2020 (https://arxiv.org/abs/2006.07709);
Nasr et al. 2021 (https://arxiv.org/abs/2101.04535) and 2023
(https://arxiv.org/abs/2302.07956); Kairouz, Oh & Viswanath 2015.

Shape letters: K trials (models), J candidate thresholds, R bootstrap replicates.

Examples:
  >>> import numpy as np
  >>> r = SplitThreshold().bound(np.full(1000, 1.0), np.zeros(1000))   # separable
  >>> round(r.epsilon_lower, 2), r.positives                            # 500 evaluate
  (4.91, 500)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax import _validate
from dpjax.audit import stats

_SPLIT_ASSUMPTIONS = (
    "threshold (and sign) chosen on the first half of each side's trials, evaluated on "
    "the second half; valid when the order of the trials does not depend on the scores")
_FIXED_ASSUMPTIONS = (
    "threshold fixed before seeing these scores, evaluated on every trial")


@dataclasses.dataclass(frozen=True)
class ThresholdBound:
  """An eps lower bound from one threshold test, with the counts behind it.

  With probability >= `confidence`, the mechanism is not (eps, delta)-DP for any
  eps < `epsilon_lower`, provided `assumptions` (in words) hold. The test was
  "IN iff sign * score > threshold"; false_positives of `negatives` OUT and
  false_negatives of `positives` IN evaluation trials; `selection_trials` (IN, OUT) spent
  choosing the threshold ((0, 0) if fixed); `strategy` "fixed" or "split".
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


def _check_delta_confidence(delta, confidence) -> tuple[float, float]:
  return (_validate.check_delta(delta, allow_zero=True),
          _validate.check_confidence(confidence))


def choose_threshold(scores_in_K, scores_out_K, delta: float = 0.0, confidence: float = 0.95,
                     both_signs: bool = False) -> tuple[float, int]:
  """(threshold, sign) maximising the certified bound on these trials: "IN iff sign * s > t".

  Evaluating it on the same trials overstates the bound: use fresh trials or
  `SplitThreshold`. `both_signs` also tries sign -1.

  Examples:
    >>> import numpy as np
    >>> choose_threshold(np.arange(20.0) + 100, np.arange(20.0))
    (19.0, 1)
  """
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  best = (-1.0, math.inf, 1)
  for sign in ((1, -1) if both_signs else (1,)):
    a, b = sign * s_in, sign * s_out
    cand = np.unique(np.concatenate([a, b, [-np.inf]]))
    fp, fn = stats.error_counts(a, b, cand)
    eps = stats.epsilon_lower_bound(fp, b.size, fn, a.size, delta, confidence)
    j = int(np.argmax(eps))
    if eps[j] > best[0]:
      best = (float(eps[j]), float(cand[j]), sign)
  return best[1], best[2]


@dataclasses.dataclass(frozen=True)
class FixedThreshold:
  """The test "IN iff sign * score > threshold" (sign +-1), fixed in advance, on all trials.

  `threshold` (+-inf allowed) must be chosen without the scores it is evaluated on.
  """
  threshold: float
  sign: int = 1

  def __post_init__(self):
    _validate.check_range(self.threshold, "threshold", allow_inf=True)
    _validate.check_choice(self.sign, (1, -1), "sign")

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> ThresholdBound:
    """eps lower bound on float[K_in] IN, float[K_out] OUT scores; delta in [0, 1).

    Examples:
      >>> import numpy as np
      >>> r = FixedThreshold(1.0).bound(np.full(300, 2.0), np.zeros(300))
      >>> r.false_positives, r.false_negatives, r.positives
      (0, 0, 300)
    """
    s_in = stats.check_scores(scores_in_K, "scores_in_K")
    s_out = stats.check_scores(scores_out_K, "scores_out_K")
    delta, confidence = _check_delta_confidence(delta, confidence)
    return _evaluate(s_in, s_out, float(self.threshold), self.sign, delta, confidence, (0, 0),
                     "fixed", _FIXED_ASSUMPTIONS)


@dataclasses.dataclass(frozen=True)
class SplitThreshold:
  """Threshold (and sign) chosen on the first half of each side, evaluated on the second."""
  both_signs: bool = False

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> ThresholdBound:
    """eps lower bound: threshold from the first halves, counts from the second halves.

    >= 2 trials per side, in an order that does not depend on the scores.

    Examples:
      >>> import numpy as np
      >>> x = np.tile(np.arange(20.0), 2)                  # both halves alike
      >>> r = SplitThreshold().bound(x + 100, x)
      >>> r.selection_trials, r.threshold, r.false_positives, round(r.epsilon_lower, 2)
      ((20, 20), 19.0, 0, 1.6)
    """
    s_in = stats.check_scores(scores_in_K, "scores_in_K")
    s_out = stats.check_scores(scores_out_K, "scores_out_K")
    delta, confidence = _check_delta_confidence(delta, confidence)
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


@dataclasses.dataclass(frozen=True)
class Bonferroni:
  """Runs several strategies on the same trials and reports the largest bound.

  Each runs at 1 - alpha / k, so by the union bound all k bounds and their maximum hold
  together with probability >= 1 - alpha, whatever their dependence.
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
      >>> import numpy as np
      >>> p = Bonferroni((FixedThreshold(1.0), SplitThreshold()))
      >>> r = p.bound(np.full(300, 2.0), np.zeros(300))
      >>> r.parts[0].confidence, r.epsilon_lower == r.parts[0].epsilon_lower
      (0.975, True)
    """
    delta, confidence = _check_delta_confidence(delta, confidence)
    per_test = bonferroni_confidence(confidence, len(self.strategies))
    parts = tuple(s.bound(scores_in_K, scores_out_K, delta=delta, confidence=per_test)
                  for s in self.strategies)
    text = (f"union bound over {len(parts)} tests at confidence {per_test:g} each; "
            + "; ".join(f"test {i} ({p.strategy}): {p.assumptions}" for i, p in enumerate(parts)))
    return BonferroniBound(max(p.epsilon_lower for p in parts), parts, delta, confidence, text)


# ----------------------------------------------------------------------------------
# Spread of a threshold bound.


@dataclasses.dataclass(frozen=True)
class BootstrapSpread:
  """Parametric-bootstrap spread of a threshold bound: sd, epsilon_lower_R float64[R]."""
  sd: float
  epsilon_lower_R: np.ndarray
  assumptions: str


def bootstrap_spread(result: ThresholdBound, rng: np.random.Generator,
                     num_replicates: int = 400) -> BootstrapSpread:
  """How much a bound moves when its error counts are redrawn at their observed rates.

  FP* ~ Binomial(negatives, FP / negatives), FN* ~ Binomial(positives, FN / positives),
  threshold fixed; R = num_replicates >= 2. The noise for comparing two bounds, NOT a
  confidence interval.

  Examples:
    >>> import numpy as np
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
