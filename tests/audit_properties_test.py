"""Property-based tests (hypothesis) of the audit estimators: less evidence, no larger bound.

An eps lower bound must never grow when the evidence behind it shrinks. What
"less evidence" means depends on the estimator, and only the monotonicity that
really holds is asserted:

* Clopper-Pearson counts (`stats`): more errors (FP up or FN up), fewer trials with
  the same error count, a higher confidence, or a larger claimed delta.
* A threshold fixed in advance (`thresholds.FixedThreshold`, `gdp_estimate` with a
  threshold): dropping trials the test got right, or turning right calls into
  wrong ones.
* A threshold chosen on the first halves (`SplitThreshold`): the selection halves
  are left as they are (they decide the threshold) and right calls in the
  evaluation halves are turned into wrong ones. Removing trials is NOT evidence
  removal here: it moves the split and can raise the bound by chance.
* One run (`one_run`): fewer correct guesses among the same number, a correct
  guess withdrawn, more canaries (a larger delta term), a higher confidence; for
  `audit`, lowering an included canary's score or raising an excluded one's.

Bounds come from exact beta quantiles (monotone to float rounding) and, for one
run, from a root finder with xtol 1e-10; comparisons allow _ATOL = 1e-9 absolute
and _RTOL = 1e-12 relative.
"""

import math

import hypothesis
import numpy as np
from absl.testing import absltest
from hypothesis import strategies as st

from dpjax.audit import one_run, parametric, stats, thresholds
from tests import helpers

given = hypothesis.given

_ATOL = 1e-9
_RTOL = 1e-12

CONFIDENCES = st.floats(0.5, 0.999)
DELTAS = st.one_of(st.just(0.0), st.floats(-10.0, -2.0).map(lambda e: 10.0 ** e))
# Scores: any finite float or +-inf (attack scores may saturate), and a coarse grid
# that produces ties with the threshold.
SCORES = st.one_of(st.floats(allow_nan=False), st.integers(-3, 3).map(float))
SCORE_LISTS = st.lists(SCORES, min_size=1, max_size=60)


def _assert_le(test, small, big, msg=""):
  test.assertLessEqual(small, big + _RTOL * abs(big) + _ATOL if math.isfinite(big) else big, msg)


@st.composite
def counts(draw, integer=True):
  """(errors, trials) with 0 <= errors <= trials, trials >= 1; float errors allowed."""
  n = draw(st.integers(1, 100_000))
  k = draw(st.integers(0, n)) if integer else draw(st.floats(0.0, float(n)))
  # scipy's beta quantiles floor at the smallest normal float (2.2e-308), so a
  # subnormal count would get a lower limit above k / n; such counts are rounded to 0.
  return (0.0 if 0 < k < 1e-300 else k), n


class ClopperPearsonTest(absltest.TestCase):
  """stats.epsilon_lower_bound and clopper_pearson as functions of the counts."""

  @helpers.property_settings(100)
  @given(neg=counts(), pos=counts(), more_fp=st.integers(0, 100_000),
         more_fn=st.integers(0, 100_000), delta=DELTAS, confidence=CONFIDENCES)
  def test_more_errors_never_raise_the_bound(self, neg, pos, more_fp, more_fn, delta,
                                             confidence):
    (fp, n_neg), (fn, n_pos) = neg, pos
    base = stats.epsilon_lower_bound(fp, n_neg, fn, n_pos, delta, confidence)
    worse = stats.epsilon_lower_bound(min(n_neg, fp + more_fp), n_neg,
                                      min(n_pos, fn + more_fn), n_pos, delta, confidence)
    _assert_le(self, worse, base)

  @helpers.property_settings(100)
  @given(neg=counts(), pos=counts(), drop_neg=st.integers(0, 100_000),
         drop_pos=st.integers(0, 100_000), delta=DELTAS, confidence=CONFIDENCES)
  def test_fewer_trials_with_the_same_errors_never_raise_the_bound(
      self, neg, pos, drop_neg, drop_pos, delta, confidence):
    # Dropping trials the test got right: the error counts stay, the totals shrink.
    (fp, n_neg), (fn, n_pos) = neg, pos
    base = stats.epsilon_lower_bound(fp, n_neg, fn, n_pos, delta, confidence)
    less = stats.epsilon_lower_bound(fp, max(fp, 1, n_neg - drop_neg), fn,
                                     max(fn, 1, n_pos - drop_pos), delta, confidence)
    _assert_le(self, less, base)

  @helpers.property_settings(100)
  @given(neg=counts(integer=False), pos=counts(integer=False), confidence=CONFIDENCES,
         more=st.floats(0.0, 0.0999), delta=DELTAS, more_delta=st.floats(0.0, 0.5))
  def test_higher_confidence_or_larger_delta_never_raise_the_bound(
      self, neg, pos, confidence, more, delta, more_delta):
    (fp, n_neg), (fn, n_pos) = neg, pos
    base = stats.epsilon_lower_bound(fp, n_neg, fn, n_pos, delta, confidence)
    _assert_le(self, stats.epsilon_lower_bound(fp, n_neg, fn, n_pos, delta,
                                               min(0.9999, confidence + more)), base)
    _assert_le(self, stats.epsilon_lower_bound(fp, n_neg, fn, n_pos,
                                               min(0.9, delta + more_delta), confidence), base)

  @helpers.property_settings(100)
  @given(c=counts(integer=False), more=st.floats(0.0, 1e5), confidence=CONFIDENCES)
  def test_upper_limit_rises_with_errors(self, c, more, confidence):
    k, n = c
    lo, hi = stats.clopper_pearson(k, n, confidence)
    lo2, hi2 = stats.clopper_pearson(min(float(n), k + more), n, confidence)
    self.assertTrue(0.0 <= lo <= k / n <= hi <= 1.0, (lo, k / n, hi))
    _assert_le(self, hi, hi2)
    _assert_le(self, lo, lo2)


def _right_in(s, t, sign):
  return sign * s > t


def _wrong_in_score(t, sign):
  """An IN score the test "IN iff sign * s > t" calls OUT."""
  return sign * t


def _wrong_out_score(t, sign):
  """An OUT score the test calls IN (None when t = +inf: nothing is above it)."""
  if t == math.inf:
    return None
  above = 0.0 if t == -math.inf else t + max(1.0, abs(t))   # may be +inf, still > t
  return sign * above


def _degrade(data, s_in, s_out, t, sign, start_in=0, start_out=0):
  """Turns a drawn subset of the right calls at index >= start into wrong ones."""
  s_in, s_out = list(s_in), list(s_out)
  for i in range(start_in, len(s_in)):
    if _right_in(s_in[i], t, sign) and data.draw(st.booleans()):
      s_in[i] = _wrong_in_score(t, sign)
  bad_out = _wrong_out_score(t, sign)
  for i in range(start_out, len(s_out)):
    if bad_out is not None and not _right_in(s_out[i], t, sign) and data.draw(st.booleans()):
      s_out[i] = bad_out
  return s_in, s_out


def _drop_right(data, s_in, s_out, t, sign):
  """Drops a drawn subset of the right calls, keeping at least one trial per side."""
  def drop(scores, right):
    kept = [s for s in scores if not (right(s) and data.draw(st.booleans()))]
    return kept or scores[:1]
  return (drop(s_in, lambda s: _right_in(s, t, sign)),
          drop(s_out, lambda s: not _right_in(s, t, sign)))


class FixedThresholdTest(absltest.TestCase):
  """A threshold fixed in advance: fewer right calls, no larger bound."""

  @helpers.property_settings(60)
  @given(s_in=SCORE_LISTS, s_out=SCORE_LISTS, t=st.floats(-5.0, 5.0),
         sign=st.sampled_from((1, -1)), delta=DELTAS, confidence=CONFIDENCES, data=st.data())
  def test_removing_or_spoiling_right_calls(self, s_in, s_out, t, sign, delta, confidence,
                                            data):
    test = thresholds.FixedThreshold(t, sign)
    base = test.bound(s_in, s_out, delta=delta, confidence=confidence)
    kw = dict(delta=delta, confidence=confidence)
    fewer = test.bound(*_drop_right(data, s_in, s_out, t, sign), **kw)
    _assert_le(self, fewer.epsilon_lower, base.epsilon_lower, f"{fewer} vs {base}")
    spoilt = test.bound(*_degrade(data, s_in, s_out, t, sign), **kw)
    _assert_le(self, spoilt.epsilon_lower, base.epsilon_lower, f"{spoilt} vs {base}")

  @helpers.property_settings(40)
  @given(s_in=SCORE_LISTS, s_out=SCORE_LISTS, t=st.floats(-5.0, 5.0),
         delta=st.floats(-10.0, -2.0).map(lambda e: 10.0 ** e), confidence=CONFIDENCES,
         data=st.data())
  def test_gdp_estimate_at_a_fixed_threshold(self, s_in, s_out, t, delta, confidence, data):
    # A bound only for mu-GDP mechanisms, but its mu is monotone in the error counts.
    base = parametric.gdp_estimate(s_in, s_out, delta, confidence, threshold=t)
    spoilt = parametric.gdp_estimate(*_degrade(data, s_in, s_out, t, 1), delta, confidence,
                                     threshold=t)
    _assert_le(self, spoilt.mu, base.mu)
    _assert_le(self, spoilt.epsilon, base.epsilon)


class SplitThresholdTest(absltest.TestCase):
  """Chosen on the first halves: spoiling right calls in the evaluation halves never helps."""

  @helpers.property_settings(60)
  @given(s_in=st.lists(SCORES, min_size=2, max_size=60), s_out=st.lists(SCORES, min_size=2,
                                                                         max_size=60),
         both_signs=st.booleans(), delta=DELTAS, confidence=CONFIDENCES, data=st.data())
  def test_spoiling_the_evaluation_half(self, s_in, s_out, both_signs, delta, confidence,
                                        data):
    policy = thresholds.SplitThreshold(both_signs=both_signs)
    base = policy.bound(s_in, s_out, delta=delta, confidence=confidence)
    new_in, new_out = _degrade(data, s_in, s_out, base.threshold, base.sign,
                               start_in=len(s_in) // 2, start_out=len(s_out) // 2)
    spoilt = policy.bound(new_in, new_out, delta=delta, confidence=confidence)
    self.assertEqual((spoilt.threshold, spoilt.sign), (base.threshold, base.sign))
    _assert_le(self, spoilt.epsilon_lower, base.epsilon_lower, f"{spoilt} vs {base}")


@st.composite
def guesses(draw):
  """(m canaries, r guesses, v correct) with 0 <= v <= r <= m."""
  m = draw(st.integers(1, 5000))
  r = draw(st.integers(0, m))
  v = draw(st.integers(0, r))
  return m, r, v


class OneRunTest(absltest.TestCase):
  """The one-run bound (Steinke, Nasr & Jagielski 2023) as a function of its evidence."""

  @helpers.property_settings(60)
  @given(g=guesses(), fewer=st.integers(0, 5000), delta=DELTAS, confidence=CONFIDENCES)
  def test_fewer_correct_guesses(self, g, fewer, delta, confidence):
    m, r, v = g
    kw = dict(num_canaries=m, num_guesses=r, delta=delta, confidence=confidence)
    _assert_le(self, one_run.epsilon_lower_bound(num_correct=max(0, v - fewer), **kw),
               one_run.epsilon_lower_bound(num_correct=v, **kw))

  @helpers.property_settings(60)
  @given(g=guesses(), withdrawn=st.integers(0, 5000), delta=DELTAS, confidence=CONFIDENCES)
  def test_withdrawing_correct_guesses(self, g, withdrawn, delta, confidence):
    # Abstaining on guesses that were right: r and v both fall by the same amount.
    m, r, v = g
    w = min(withdrawn, v)
    kw = dict(num_canaries=m, delta=delta, confidence=confidence)
    _assert_le(self, one_run.epsilon_lower_bound(num_guesses=r - w, num_correct=v - w, **kw),
               one_run.epsilon_lower_bound(num_guesses=r, num_correct=v, **kw))

  @helpers.property_settings(60)
  @given(g=guesses(), more_canaries=st.integers(0, 5000), delta=DELTAS, confidence=CONFIDENCES,
         more=st.floats(0.0, 0.0999))
  def test_more_canaries_or_higher_confidence(self, g, more_canaries, delta, confidence, more):
    m, r, v = g
    base = one_run.epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                       delta=delta, confidence=confidence)
    _assert_le(self, one_run.epsilon_lower_bound(
        num_canaries=m + more_canaries, num_guesses=r, num_correct=v, delta=delta,
        confidence=confidence), base)
    _assert_le(self, one_run.epsilon_lower_bound(
        num_canaries=m, num_guesses=r, num_correct=v, delta=delta,
        confidence=min(0.9999, confidence + more)), base)

  @helpers.property_settings(100)
  @given(g=guesses(), eps=st.floats(0.0, 30.0), gap=st.floats(0.0, 10.0), delta=DELTAS)
  def test_p_value_rises_with_epsilon(self, g, eps, gap, delta):
    # epsilon_lower_bound's root search relies on this.
    m, r, v = g
    _assert_le(self, one_run.p_value(m, r, v, eps, delta),
               one_run.p_value(m, r, v, eps + gap, delta))

  @helpers.property_settings(60)
  @given(scores=st.lists(st.floats(-10.0, 10.0), min_size=1, max_size=80), data=st.data(),
         delta=DELTAS, confidence=CONFIDENCES)
  def test_audit_with_a_weaker_attack(self, scores, data, delta, confidence):
    # Lowering included canaries' scores or raising excluded ones' can only move
    # included canaries out of the IN guesses and into the OUT guesses.
    k = len(scores)
    inc = np.array(data.draw(st.lists(st.booleans(), min_size=k, max_size=k)))
    kp = data.draw(st.integers(0, k))
    kn = data.draw(st.integers(0, k - kp))
    shift = np.array(data.draw(st.lists(st.floats(0.0, 20.0), min_size=k, max_size=k)))
    weaker = np.asarray(scores) + np.where(inc, -shift, shift)
    kw = dict(num_positive_guesses=kp, num_negative_guesses=kn, delta=delta,
              confidence=confidence)
    base = one_run.audit(scores, inc, **kw)
    worse = one_run.audit(weaker, inc, **kw)
    self.assertLessEqual(worse.num_correct, base.num_correct)
    _assert_le(self, worse.epsilon_lower, base.epsilon_lower)


if __name__ == "__main__":
  absltest.main()
