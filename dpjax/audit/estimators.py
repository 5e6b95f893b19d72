"""From attack scores to privacy bounds: threshold strategies, their bound records, spread.

An auditor runs a mechanism (a training run, a query) many times with a canary IN
and many times with it OUT, scores each run (higher = IN), and turns the two score
samples into an eps lower bound. Anything can produce the scores: the white-box
or black-box canary adversaries of `dpjax.audit.canary`, a membership attack, or
someone else's training code. This module holds the threshold tests in between:

* threshold strategies, each with a `bound(scores_in_K, scores_out_K, delta=,
  confidence=)` method returning a `ThresholdBound` (the bound, the counts behind
  it, the confidence and what it assumes):
  - `FixedThreshold`: a threshold fixed in advance (e.g. from the claimed
    mechanism's likelihood ratio), evaluated on every trial;
  - `SplitThreshold`: chosen on the first half of each side, evaluated on the
    second (valid whatever the scores are, at the price of half the trials);
  - `Bonferroni`: several strategies on the same trials, each at confidence
    1 - alpha / k, the largest bound reported (valid at 1 - alpha);
* `bootstrap_spread`: how much a `ThresholdBound` moves when its error counts are
  redrawn.

The other estimators live beside it: `dpjax.audit.certifiable.best_certifiable`
(the best bound any adversary is expected to certify from a known ROC, the
audit's ceiling), `dpjax.audit.parametric.gdp_estimate` (the mu-GDP bound of Nasr
et al. 2023, valid only if the mechanism is mu-GDP) and
`dpjax.audit.score_audit.score_bounds` (every estimator, the one-run ones
included, on one pair of score samples).

The threshold of a test must not be picked on the trials it is evaluated on
(maximising over thresholds inflates the bound); the order of the trials must not
depend on the scores (a split takes the first half of each side as given).

Typical use, the white-box policy of `dpjax.audit.run.evaluate`:

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

  With probability >= `confidence` over the trials, the mechanism is not
  (eps, delta)-DP for any eps < `epsilon_lower`, provided `assumptions` hold.

  Attributes:
    epsilon_lower: the certified bound, >= 0.
    threshold: the test was "IN iff sign * score > threshold".
    sign: +1 or -1.
    false_positives, negatives: OUT trials called IN, and OUT evaluation trials.
    false_negatives, positives: IN trials called OUT, and IN evaluation trials.
    selection_trials: (IN, OUT) trials spent choosing the threshold ((0, 0) if fixed).
    delta: the delta of the claim being tested.
    confidence: the confidence of this bound.
    strategy: "fixed" or "split".
    assumptions: what the bound's validity rests on, in words.
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
    """The evaluation counts as a dict (for records)."""
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
  """The threshold (and sign) that maximises the certified bound on these trials.

  Evaluating it on the same trials overstates the bound: use it on fresh trials
  (`FixedThreshold`), or let `SplitThreshold` do the split.

  Args:
    scores_in_K, scores_out_K: float[K_in], float[K_out] scores (higher = IN).
    delta, confidence: as in `stats.epsilon_lower_bound`.
    both_signs: also consider the tests "IN iff score < t" (sign -1).
  Returns:
    (threshold, sign): the test "IN iff sign * score > threshold".

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
  """The test "IN iff sign * score > threshold", fixed in advance; all trials evaluate it.

  Attributes:
    threshold: chosen without looking at the scores it is evaluated on (e.g. from
      the claimed mechanism's likelihood-ratio distribution); +-inf allowed.
    sign: +1 or -1.
  """
  threshold: float
  sign: int = 1

  def __post_init__(self):
    _validate.check_range(self.threshold, "threshold", allow_inf=True)
    _validate.check_choice(self.sign, (1, -1), "sign")

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> ThresholdBound:
    """eps lower bound of this test on the given trials.

    Args:
      scores_in_K: float[K_in] scores of runs with the canary (higher = IN).
      scores_out_K: float[K_out] scores of runs without it.
      delta: the delta of the claim, in [0, 1).
      confidence: in (0, 1).

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
  """Chooses the threshold on the first half of each side, evaluates it on the second.

  Attributes:
    both_signs: also consider the tests "IN iff score < t".
  """
  both_signs: bool = False

  def bound(self, scores_in_K, scores_out_K, *, delta: float = 0.0,
            confidence: float = 0.95) -> ThresholdBound:
    """eps lower bound: threshold from the first halves, counts from the second halves.

    Args:
      scores_in_K, scores_out_K: as in `FixedThreshold.bound`, >= 2 trials each, in
        an order that does not depend on the scores.
      delta, confidence: as in `FixedThreshold.bound`; the selection maximises the
        bound at this same confidence.

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
  """The largest of several bounds, each at 1 - alpha / k, valid jointly at 1 - alpha.

  Attributes:
    epsilon_lower: max over `parts` of their bounds.
    parts: the individual `ThresholdBound`s, in the order of the strategies.
    delta: the delta of the claim.
    confidence: the joint confidence 1 - alpha.
    assumptions: what the bound rests on (the union bound and each part's).
  """
  epsilon_lower: float
  parts: tuple[ThresholdBound, ...]
  delta: float
  confidence: float
  assumptions: str


@dataclasses.dataclass(frozen=True)
class Bonferroni:
  """Runs several strategies on the same trials and reports the largest bound.

  Each strategy runs at confidence 1 - alpha / k (`bonferroni_confidence`), so by
  the union bound all k bounds hold together with probability >= 1 - alpha, and so
  does their maximum, whatever the dependence between them.

  Attributes:
    strategies: a non-empty tuple of strategies (objects with a `bound` method
      returning a `ThresholdBound`).
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
  """Parametric-bootstrap spread of a threshold bound.

  Attributes:
    sd: standard deviation of the bound over the replicates.
    epsilon_lower_R: float64[R] the replicates' bounds.
    assumptions: what the spread describes.
  """
  sd: float
  epsilon_lower_R: np.ndarray
  assumptions: str


def bootstrap_spread(result: ThresholdBound, rng: np.random.Generator,
                     num_replicates: int = 400) -> BootstrapSpread:
  """How much a bound moves when its error counts are redrawn at their observed rates.

  FP* ~ Binomial(negatives, FP / negatives), FN* ~ Binomial(positives, FN /
  positives), the threshold held fixed; each replicate's bound is computed with
  the result's delta and confidence. The spread is the noise against which two
  bounds (two adversaries, two runs) are compared; it is not a confidence interval.

  Args:
    result: a `ThresholdBound`.
    rng: host randomness (`np.random.default_rng(seed)`).
    num_replicates: R >= 2.
  Returns:
    BootstrapSpread.

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
