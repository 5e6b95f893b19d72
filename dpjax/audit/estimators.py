"""From attack scores to privacy bounds: threshold strategies, spread, ceilings, GDP.

An auditor runs a mechanism (a training run, a query) many times with a canary IN
and many times with it OUT, scores each run (higher = IN), and turns the two score
samples into an eps lower bound. Anything can produce the scores: the white-box
or black-box canary adversaries of `dpjax.audit.canary`, a membership attack, or
someone else's training code. This module is the policy in between:

* threshold strategies, each with a `bound(scores_in_K, scores_out_K, delta=,
  confidence=)` method returning a `ThresholdBound` (the bound, the counts behind
  it, the confidence and what it assumes):
  - `FixedThreshold`: a threshold fixed in advance (e.g. from the claimed
    mechanism's likelihood ratio), evaluated on every trial;
  - `SplitThreshold`: chosen on the first half of each side, evaluated on the
    second (valid whatever the scores are, at the price of half the trials);
  - `Bonferroni`: several strategies on the same trials, each at confidence
    1 - alpha / k, the largest bound reported (valid at 1 - alpha);
* `bootstrap_spread`: how much a bound moves when its error counts are redrawn;
* `best_certifiable`: the best bound any adversary is expected to certify with a
  given number of trials, from a known ROC (the audit's ceiling for a mechanism);
* `gdp_estimate`: the mu-GDP bound of Nasr et al. 2023, valid only if the
  mechanism is mu-GDP;
* `score_bounds`: every estimator above and the one-run ones (`dpjax.audit.one_run`:
  Steinke, Nasr & Jagielski 2023; Mahloujifar, Melis & Chaudhuri 2025) on one
  pair of score samples, each a `ScoreBound` with its assumptions, plus their
  Bonferroni-valid maximum.

The threshold of a test must not be picked on the trials it is evaluated on
(maximising over thresholds inflates the bound); the order of the trials must not
depend on the scores (a split takes the first half of each side as given).

Typical use, the white-box policy of `dpjax.audit.run.evaluate`:

    per_test = bonferroni_confidence(0.95, 2)
    ceiling = best_certifiable(fpr_J, fnr_J, trials, delta=1e-5, confidence=per_test,
                               thresholds_J=thresholds_J)
    policy = Bonferroni((FixedThreshold(ceiling.threshold), SplitThreshold(both_signs=True)))
    result = policy.bound(scores_in_K, scores_out_K, delta=1e-5, confidence=0.95)

References: Jagielski, Ullman & Oprea 2020 (https://arxiv.org/abs/2006.07709);
Nasr et al. 2021 (https://arxiv.org/abs/2101.04535) and 2023
(https://arxiv.org/abs/2302.07956); Kairouz, Oh & Viswanath 2015.

Shape letters: K trials (models), J candidate thresholds or ROC points, R bootstrap
replicates.

Examples:
  >>> import numpy as np
  >>> r = SplitThreshold().bound(np.full(1000, 1.0), np.zeros(1000))   # separable
  >>> round(r.epsilon_lower, 2), r.positives                            # 500 evaluate
  (4.91, 500)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from dpjax import _validate, tradeoff
from dpjax.accounting import gdp
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
# Spread, ceiling, estimate.


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


@dataclasses.dataclass(frozen=True)
class CertifiableBound:
  """The best bound certifiable from expected counts on a known ROC.

  Attributes:
    epsilon: the best bound (max over the ROC's points).
    index: the ROC point attaining it.
    threshold: that point's threshold (None when no thresholds were given).
    fpr, fnr: that point's rates.
    trials: evaluation trials per side.
    delta, confidence: as passed.
    assumptions: what the number means.
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


def best_certifiable(fpr_J, fnr_J, trials: int, *, delta: float = 0.0,
                     confidence: float = 0.95,
                     thresholds_J: Optional[Sequence[float]] = None,
                     trials_in: Optional[int] = None) -> CertifiableBound:
  """Best bound certifiable from expected counts on a known ROC (the audit's ceiling).

  For each operating point (FPR_j, FNR_j) of a test -- e.g. the trade-off curve of
  the accounted mechanism, which no adversary can beat -- the expected counts
  trials * FPR_j and trials * FNR_j are plugged into `stats.epsilon_lower_bound`;
  the maximum over j is what the best adversary would certify with `trials`
  evaluation trials per side and this confidence procedure, on typical (expected)
  counts (with `trials_in` IN trials and `trials` OUT trials when the sides differ:
  trials * FPR_j false positives, trials_in * FNR_j false negatives). Points with
  FPR = FNR = 0 (a degenerate perfect test) are skipped. The
  point's threshold is the natural threshold to fix in advance (`FixedThreshold`).

  Args:
    fpr_J, fnr_J: float[J] operating points in [0, 1] (J >= 1), e.g. from
      `dpjax.tradeoff.likelihood_ratio_roc` or `dpjax.tradeoff.gaussian_fnr`.
    trials: evaluation trials per side (the OUT side when trials_in is given), >= 1.
    delta, confidence: as in `stats.epsilon_lower_bound`.
    thresholds_J: optional float[J] thresholds of the points.
    trials_in: IN trials, >= 1, when they differ from `trials` (default: trials).
  Returns:
    CertifiableBound (its `trials` is the OUT side's).

  Examples:
    >>> import numpy as np
    >>> from dpjax import tradeoff
    >>> a = np.linspace(0, 1, 2001)                       # trade-off curve of 1-GDP
    >>> round(best_certifiable(a, tradeoff.gaussian_fnr(a, 1.0), 10_000).epsilon, 2)
    2.17
  """
  trials = _validate.check_int(trials, "trials")
  n_in = trials if trials_in is None else _validate.check_int(trials_in, "trials_in")
  fpr = _validate.check_array(fpr_J, "fpr_J", ndim=1, low=0.0, high=1.0)
  fnr = _validate.check_array(fnr_J, "fnr_J", shape=fpr.shape, low=0.0, high=1.0)
  thr = None if thresholds_J is None else _validate.check_array(
      thresholds_J, "thresholds_J", shape=fpr.shape, allow_inf=True)
  delta, confidence = _check_delta_confidence(delta, confidence)
  ok = np.flatnonzero((fpr > 0) | (fnr > 0))
  if ok.size == 0:
    raise ValueError("fpr_J and fnr_J have no point with FPR > 0 or FNR > 0")
  eps = stats.epsilon_lower_bound(fpr[ok] * trials, trials, fnr[ok] * n_in, n_in,
                                  delta, confidence)
  j = int(np.argmax(eps))
  i = int(ok[j])
  return CertifiableBound(
      float(eps[j]), i, None if thr is None else float(thr[i]), float(fpr[i]), float(fnr[i]),
      trials, delta, confidence,
      "expected counts (trials x rate) at the best point of the given ROC; what the best "
      "adversary for that ROC typically certifies, not a bound on any one audit")


@dataclasses.dataclass(frozen=True)
class GdpEstimate:
  """A mu-GDP lower bound from one test's error rates (Nasr et al. 2023).

  Valid only if the mechanism is mu-GDP for some mu: then, with probability >=
  `confidence`, its mu is >= `mu` and its eps at `delta` is >= `epsilon`.

  Attributes:
    mu: mu of the Gaussian trade-off curve through the rates' confidence limits
      (negative when FPR_u + FNR_u > 1).
    epsilon: eps at `delta` of a mu-GDP mechanism; 0 when mu <= 0 (a negative mu
      is clamped, never mirrored to |mu|).
    threshold: the threshold whose errors were used.
    delta, confidence: as passed.
    assumptions: what the bound assumes.
  """
  mu: float
  epsilon: float
  threshold: float
  delta: float
  confidence: float
  assumptions: str


def gdp_estimate(scores_in_K, scores_out_K, delta: float, confidence: float = 0.95,
                 threshold: Optional[float] = None) -> GdpEstimate:
  """eps lower bound of Nasr et al. 2023, valid only if the mechanism is mu-GDP.

  A mu-GDP mechanism has FNR >= Phi(Phi^-1(1 - FPR) - mu) for every test. With
  FPR <= FPR_u and FNR <= FNR_u (Clopper-Pearson upper limits; the two-sided
  interval at `confidence` puts each at 1 - alpha/2, so both hold together with
  probability >= 1 - alpha, as in `stats.epsilon_lower_bound`), and the right
  side decreasing in FPR,

      mu >= Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) =: mu_lower,

  and eps(delta) of mu-GDP increases in mu, so eps >= eps_mu(mu_lower). Using
  the Gaussian shape of the curve gives far tighter numbers than a threshold
  bound, but only under that assumption. mu_lower < 0 (FPR_u + FNR_u > 1, e.g.
  on scores without signal) certifies nothing: eps = 0. Mirroring it to |mu|
  would certify a positive eps from pure noise.

  Args:
    scores_in_K, scores_out_K: float[K_in], float[K_out] (higher = IN).
    delta: in (0, 1).
    confidence: in (0, 1).
    threshold: fixed in advance; None = choose the mu-maximising threshold on the
      first half of each side and evaluate on the second half.
  Returns:
    GdpEstimate.

  Examples:
    >>> import numpy as np
    >>> from scipy import stats as sps
    >>> q = sps.norm.ppf((np.arange(4000) + 0.5) / 4000)       # N(0, 1) by quantiles
    >>> g = gdp_estimate(q + 2.0, q, 1e-5, threshold=1.0)       # 2-GDP scores
    >>> bool(1.8 < g.mu < 2.0)
    True
  """
  delta = _validate.check_delta(delta)
  confidence = _validate.check_confidence(confidence)
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  if threshold is None:
    h_in, h_out = s_in.size // 2, s_out.size // 2
    cand = np.unique(np.r_[s_in[:h_in], s_out[:h_out]])
    fp, fn = stats.error_counts(s_in[:h_in], s_out[:h_out], cand)
    mu_c = _mu_lower(fp, h_out, fn, h_in, confidence)
    threshold = float(cand[int(np.argmax(mu_c))])
    s_in, s_out = s_in[h_in:], s_out[h_out:]
  else:
    threshold = _validate.check_range(threshold, "threshold", allow_inf=True)
  fp, fn = stats.error_counts(s_in, s_out, np.asarray([threshold]))
  mu = float(_mu_lower(fp, s_out.size, fn, s_in.size, confidence)[0])
  eps = gdp.gaussian_epsilon(delta, mu) if mu > 0 else 0.0
  return GdpEstimate(
      mu, float(eps), float(threshold), delta, confidence,
      "valid only if the mechanism is mu-GDP (Gaussian trade-off curve): mu >= "
      "Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) with Clopper-Pearson upper limits holding jointly "
      "at the confidence; a negative mu gives eps 0")


def _mu_lower(fp, neg, fn, pos, confidence):
  _, fpr_u = stats.clopper_pearson(fp, neg, confidence)
  _, fnr_u = stats.clopper_pearson(fn, pos, confidence)
  return np.atleast_1d(tradeoff.gaussian_mu(fpr_u, fnr_u))


# ----------------------------------------------------------------------------------
# Every estimator on one pair of score samples.

SCORE_BOUND_NAMES = ("clopper_pearson", "clopper_pearson_bonferroni", "clopper_pearson_fixed",
                     "gdp", "one_run", "fdp_one_run", "fdp_one_run_gdp", "best")
_GDP_ONLY = "valid only if the mechanism is mu-GDP (Gaussian trade-off curve); "
_MAX_LEVELS = 8        # quantile levels 2^-1 .. 2^-8 per side and sign (declared set)


@dataclasses.dataclass(frozen=True)
class ScoreBound:
  """One estimator's eps lower bound on a pair of score samples.

  With probability >= `confidence` over the trials, the mechanism is not
  (eps, delta)-DP for any eps < `epsilon_lower`, provided `assumptions` hold.

  Attributes:
    name: the estimator (a key of `score_bounds`).
    epsilon_lower: the bound, >= 0.
    assumptions: what its validity rests on, in words.
    details: the counts, thresholds and settings behind it, as strict JSON (plain
      ints, floats, strings, lists, dicts; an infinite number is the string "inf"
      or "-inf").
    confidence: the confidence of this bound alone.
    delta: the delta of the claim tested.
  """
  name: str
  epsilon_lower: float
  assumptions: str
  details: dict
  confidence: float
  delta: float


def _json_number(x) -> float | str | None:
  """A float for strict JSON: finite as is, +-inf as "inf" / "-inf", NaN as None."""
  x = float(x)
  if math.isnan(x):
    return None
  return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _threshold_details(b: ThresholdBound) -> dict:
  return {"threshold": _json_number(b.threshold), "sign": int(b.sign), **b.counts(),
          "selection_trials": list(b.selection_trials), "strategy": b.strategy}


def _declared_thresholds(sel_in, sel_out) -> list[tuple[float, int]]:
  """The declared set: (threshold, sign) at quantile levels 2^-i of the selection scores.

  For each sign s, thresholds at the (1 - 2^-i) quantiles of s * OUT scores (false
  positive rate ~ 2^-i: the region of ln((1 - delta - FNR) / FPR)) and at the 2^-i
  quantiles of s * IN scores (FNR ~ 2^-i: the region of ln((1 - delta - FPR) / FNR)),
  i = 1..L with 2^L <= the selection size, L <= 8.
  """
  out = []
  for sign in (1, -1):
    a, b = np.sort(sign * sel_in), np.sort(sign * sel_out)
    for i in range(1, _MAX_LEVELS + 1):
      if 2**i > min(a.size, b.size):
        break
      out.append((float(b[int(math.ceil(b.size * (1 - 2.0**-i))) - 1]), sign))
      out.append((float(a[int(math.floor(a.size * 2.0**-i))]), sign))
  return sorted(set(out))


def _one_run_canaries(s_in, s_out, seed: int):
  """n = min(K_in, K_out) one-run canaries: canary i is IN score i or OUT score i.

  The inclusion bits b_i ~ Bernoulli(1/2) are drawn from `seed` independently of
  the scores; canary i's observation is s_in[i] if b_i else s_out[i]. Each trial
  is a separate run, so the runs together form one mechanism in which every bit
  is protected as each run protects its canary, with i.i.d. uniform bits: the
  setting of the one-run theorems. (Pooling all K_in + K_out scores instead fixes
  the number of IN canaries, which those theorems do not cover.)
  """
  n = min(s_in.size, s_out.size)
  bits = np.random.default_rng(seed).random(n) < 0.5
  return np.where(bits, s_in[:n], s_out[:n]), bits


def _one_run_bound(name, s_in, s_out, delta, confidence, seed) -> ScoreBound:
  from dpjax.audit import one_run  # pylint: disable=g-import-not-at-top
  scores, bits = _one_run_canaries(s_in, s_out, seed)
  n = scores.size
  method = {"one_run": "steinke", "fdp_one_run": "fdp", "fdp_one_run_gdp": "fdp_gdp"}[name]
  res = one_run.audit_declared_guesses(scores, bits, delta=delta, confidence=confidence,
                                       method=method)
  counts, per = list(res.guess_counts), res.confidence_per_test
  best = (res.epsilon_lower, res.num_guesses, res.num_correct, res.mu_lower)
  base = ("trials as one-run canaries: canary i is IN score i or OUT score i by a fair "
          f"coin (seed {seed}) drawn independently of the scores; guesses IN for the top r/2 "
          "and OUT for the bottom r/2, r over the declared set "
          f"{counts} with a union bound (confidence {per:g} each); valid when the trials "
          "are independent runs in an order that does not depend on the scores")
  if name == "one_run":
    text = "Steinke, Nasr & Jagielski 2023 test of (eps, delta)-DP; " + base
  elif name == "fdp_one_run":
    text = ("Mahloujifar, Melis & Chaudhuri 2025 test with the (eps, delta)-DP trade-off "
            "function; " + base)
  else:
    text = (_GDP_ONLY + "Mahloujifar, Melis & Chaudhuri 2025 test with f = G_mu, largest "
            "mu rejected converted to eps at delta; " + base)
  details = {"num_canaries": int(n), "num_guesses": int(best[1]), "num_correct": int(best[2]),
             "guess_counts": [int(c) for c in counts], "seed": int(seed),
             "confidence_per_test": per}
  if name == "fdp_one_run_gdp":
    details["mu_lower"] = _json_number(best[3])
  return ScoreBound(name, best[0], text, details, confidence, delta)


def _cp_split(s_in, s_out, delta, confidence) -> ScoreBound:
  b = SplitThreshold(both_signs=True).bound(s_in, s_out, delta=delta, confidence=confidence)
  return ScoreBound("clopper_pearson", b.epsilon_lower,
                    "Clopper-Pearson (eps, delta) bound; " + b.assumptions,
                    _threshold_details(b), confidence, delta)


def _cp_declared(s_in, s_out, delta, confidence, thresholds) -> ScoreBound:
  if thresholds is None:
    h_in, h_out = s_in.size // 2, s_out.size // 2
    tests = _declared_thresholds(s_in[:h_in], s_out[:h_out])
    e_in, e_out, sel = s_in[h_in:], s_out[h_out:], (h_in, h_out)
    how = ("thresholds at quantile levels 2^-i of the first half of each side (both signs), "
           "every one evaluated on the second half")
  else:
    tests = [(float(t), 1) for t in thresholds]
    e_in, e_out, sel = s_in, s_out, (0, 0)
    how = "thresholds declared before seeing the scores, evaluated on every trial"
  if not tests:
    tests = [(float(np.median(np.r_[s_in[:1], s_out[:1]])), 1)]
  per = bonferroni_confidence(confidence, len(tests))
  eps_T = np.full(len(tests), -1.0)
  for sign in (1, -1):
    idx = [i for i, (_, sg) in enumerate(tests) if sg == sign]
    if idx:
      fp, fn = stats.error_counts(sign * e_in, sign * e_out, np.array([tests[i][0] for i in idx]))
      eps_T[idx] = stats.epsilon_lower_bound(fp, e_out.size, fn, e_in.size, delta, per)
  t, sign = tests[int(np.argmax(eps_T))]
  best_b = _evaluate(e_in, e_out, t, sign, delta, per, sel, "declared", how)
  details = {**_threshold_details(best_b), "num_tests": len(tests),
             "confidence_per_test": per, "strategy": "bonferroni"}
  return ScoreBound("clopper_pearson_bonferroni", best_b.epsilon_lower,
                    f"Clopper-Pearson (eps, delta) bound, union bound over {len(tests)} tests "
                    f"at confidence {per:g} each; {how}; valid when the order of the trials "
                    "does not depend on the scores", details, confidence, delta)


def _cp_fixed(s_in, s_out, delta, confidence, threshold) -> ScoreBound:
  b = FixedThreshold(threshold).bound(s_in, s_out, delta=delta, confidence=confidence)
  return ScoreBound("clopper_pearson_fixed", b.epsilon_lower,
                    "Clopper-Pearson (eps, delta) bound; " + b.assumptions,
                    _threshold_details(b), confidence, delta)


def _gdp(s_in, s_out, delta, confidence) -> ScoreBound:
  g = gdp_estimate(s_in, s_out, delta, confidence)
  return ScoreBound("gdp", g.epsilon,
                    _GDP_ONLY + "Nasr et al. 2023: Clopper-Pearson upper limits on FPR and FNR "
                    "(jointly at the confidence) give mu >= Phi^-1(1 - FPR) - Phi^-1(FNR), "
                    "eps of that mu at delta; threshold chosen on the first half of each side, "
                    "evaluated on the second; a negative mu gives 0",
                    {"mu_lower": _json_number(g.mu), "threshold": _json_number(g.threshold)},
                    confidence,
                    delta)


def score_bounds(scores_in_K, scores_out_K, *, delta: float, confidence: float = 0.95,
                 claimed_epsilon: Optional[float] = None, threshold: Optional[float] = None,
                 thresholds: Optional[Sequence[float]] = None,
                 seed: int = 0) -> dict[str, ScoreBound]:
  """Every estimator's eps lower bound on one pair of score samples.

  Each trial is one run of the mechanism with the canary IN or OUT, scored by an
  attack (higher = IN). Each entry is a separate test, valid at `confidence` on
  its own; the largest of them is NOT valid at `confidence` (maximising over
  tests inflates the bound). Entry "best" is the valid maximum: the
  assumption-free estimators rerun at 1 - (1 - confidence) / k each (union bound).

  Entries:
    "clopper_pearson": `SplitThreshold(both_signs=True)`: threshold and sign
      chosen on the first half of each side, evaluated on the second.
    "clopper_pearson_bonferroni": a declared set of thresholds, each evaluated
      with a union bound. With `thresholds` given: those (sign +1), declared
      before seeing the scores, evaluated on every trial. Otherwise: the set is
      fixed from the first half of each side only (quantile levels 2^-i, both
      signs) and every member is evaluated on the second half; since the second
      half is independent of the first, the set is declared independently of the
      evaluated scores, and the union bound over it makes the maximum valid.
    "clopper_pearson_fixed": only when `threshold` is given (sign +1, all trials).
    "gdp": Nasr et al. 2023, valid only if the mechanism is mu-GDP.
    "one_run": Steinke, Nasr & Jagielski 2023 on the trials as canaries.
    "fdp_one_run": Mahloujifar, Melis & Chaudhuri 2025 with the (eps, delta)-DP
      trade-off function (valid for any (eps, delta)-DP mechanism).
    "fdp_one_run_gdp": the same with f = G_mu, valid only if mu-GDP.
    "best": the maximum over the assumption-free entries (all but "gdp" and
      "fdp_one_run_gdp") at Bonferroni-corrected confidence.

  The one-run entries use n = min(K_in, K_out) canaries: canary i is IN score i
  or OUT score i by a fair coin drawn from `seed` (independent of the scores), so
  that inclusion bits are i.i.d. uniform as those theorems require. The number of
  guesses r ranges over the declared set 2 floor(n / 2^(j+1)), j = 0..11 (union
  bound), r/2 IN on the top scores and r/2 OUT on the bottom ones.

  Args:
    scores_in_K: float[K_in] scores of runs with the canary, >= 2.
    scores_out_K: float[K_out] scores of runs without it, >= 2; both in an order
      that does not depend on the scores.
    delta: the delta of the claim, in (0, 1).
    confidence: in (0, 1).
    claimed_epsilon: optional eps >= 0 of the claim; each entry's details then
      record "falsifies_claim" (epsilon_lower > claimed_epsilon).
    threshold: optional threshold fixed in advance (adds "clopper_pearson_fixed").
    thresholds: optional thresholds declared in advance (used by
      "clopper_pearson_bonferroni" instead of the first-half set), >= 1 of them.
    seed: int >= 0, the seed of the one-run inclusion coins.
  Returns:
    {name: ScoreBound}, in the order of SCORE_BOUND_NAMES.

  References: Nasr et al. 2023, https://arxiv.org/abs/2302.07956; Steinke, Nasr &
  Jagielski 2023, https://arxiv.org/abs/2305.08846; Mahloujifar, Melis &
  Chaudhuri 2025, https://arxiv.org/abs/2410.22235.

  Examples:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> b = score_bounds(rng.normal(size=1000), rng.normal(size=1000), delta=1e-5)
    >>> sorted(b)[:3], b["clopper_pearson"].epsilon_lower   # null scores: nothing
    (['best', 'clopper_pearson', 'clopper_pearson_bonferroni'], 0.0)
  """
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  delta = _validate.check_delta(delta)
  confidence = _validate.check_confidence(confidence)
  if s_in.size < 2 or s_out.size < 2:
    raise ValueError("scores_in_K and scores_out_K need >= 2 trials each, got "
                     f"{s_in.size} and {s_out.size}")
  if claimed_epsilon is not None:
    claimed_epsilon = _validate.check_epsilon(claimed_epsilon, "claimed_epsilon",
                                              allow_zero=True)
  if threshold is not None:
    threshold = _validate.check_range(threshold, "threshold", allow_inf=True)
  if thresholds is not None:
    thresholds = _validate.check_array(thresholds, "thresholds", ndim=1, allow_inf=True,
                                       min_size=1).tolist()
  seed = _validate.check_int(seed, "seed", minimum=0)

  free = {
      "clopper_pearson": lambda c: _cp_split(s_in, s_out, delta, c),
      "clopper_pearson_bonferroni": lambda c: _cp_declared(s_in, s_out, delta, c, thresholds),
  }
  if threshold is not None:
    free["clopper_pearson_fixed"] = lambda c: _cp_fixed(s_in, s_out, delta, c, threshold)
  free["one_run"] = lambda c: _one_run_bound("one_run", s_in, s_out, delta, c, seed)
  free["fdp_one_run"] = lambda c: _one_run_bound("fdp_one_run", s_in, s_out, delta, c, seed)
  out = {name: fn(confidence) for name, fn in free.items()}
  out["gdp"] = _gdp(s_in, s_out, delta, confidence)
  out["fdp_one_run_gdp"] = _one_run_bound("fdp_one_run_gdp", s_in, s_out, delta, confidence,
                                          seed)
  per = bonferroni_confidence(confidence, len(free))
  parts = {name: fn(per) for name, fn in free.items()}
  top = max(parts, key=lambda k: parts[k].epsilon_lower)
  out["best"] = ScoreBound(
      "best", parts[top].epsilon_lower,
      f"union bound over {len(parts)} estimators ({', '.join(parts)}) at confidence "
      f"{per:g} each; the largest reported; each part's assumptions hold",
      {"estimator": top, "confidence_per_test": per,
       "parts": {k: _json_number(v.epsilon_lower) for k, v in parts.items()}}, confidence,
      delta)
  if claimed_epsilon is not None:
    for k, v in out.items():
      v.details["claimed_epsilon"] = claimed_epsilon
      v.details["falsifies_claim"] = bool(v.epsilon_lower > claimed_epsilon)
  return {k: out[k] for k in SCORE_BOUND_NAMES if k in out}
