"""Tests for dpjax.audit.coverage: the simulators' exact privacy, the memoization, coverage.

Statistical checks use fixed seeds and state their tolerance:
  * sample frequencies: within 5 standard errors of the closed form;
  * coverage: the one-sided binomial test of "violation rate <= alpha" at level
    0.001 (`Coverage.p_value >= 1e-3`): an estimator exactly at alpha = 5% fails it
    with probability <= 0.001; one at twice alpha, over 1000 audits, passes it with
    probability < 1e-6.
"""

import math

import numpy as np
import pytest
from absl.testing import absltest, parameterized
from scipy import integrate
from scipy import stats as sps

from dpjax.accounting import gdp, pld
from dpjax.audit import coverage, one_run, one_run_fdp, score_audit, stats

_LEVEL = 1e-3
_DELTA = 1e-5


def _hockey_stick(pdf_in, pdf_out, eps, breaks, lo, hi):
  """delta(eps) = integral of max(0, p_IN - e^eps p_OUT), by adaptive quadrature."""
  f = lambda x: max(0.0, pdf_in(x) - math.exp(eps) * pdf_out(x))
  pts = [lo] + sorted(breaks) + [hi]
  return sum(integrate.quad(f, a, b, epsabs=1e-13, epsrel=1e-11, limit=200)[0]
             for a, b in zip(pts[:-1], pts[1:]))


class MechanismTest(parameterized.TestCase):

  def test_gaussian_samples_follow_their_roc(self):
    mech = coverage.Mechanism("gaussian", 1.3)
    rng = np.random.default_rng(0)
    n = 200_000
    s_in = mech.sample(rng, np.ones(n, bool))
    s_out = mech.sample(rng, np.zeros(n, bool))
    t = np.array([-1.0, 0.0, 0.65, 1.5, 2.5])
    fpr, fnr = mech.roc(t)
    np.testing.assert_allclose(fpr, sps.norm.sf(t))
    np.testing.assert_allclose(1 - fnr, sps.norm.sf(t - 1.3))     # TPR = Phi(Phi^-1(FPR) + mu)
    np.testing.assert_allclose(1 - fnr, sps.norm.cdf(sps.norm.ppf(fpr) + 1.3))
    for rate, emp in ((fpr, (s_out[:, None] > t).mean(0)), (fnr, (s_in[:, None] <= t).mean(0))):
      se = np.sqrt(rate * (1 - rate) / n)
      self.assertTrue(np.all(np.abs(emp - rate) <= 5 * se + 1e-12), (emp, rate))
    self.assertGreater(sps.kstest(s_in - 1.3, "norm").pvalue, 1e-3)
    self.assertGreater(sps.kstest(s_out, "norm").pvalue, 1e-3)

  def test_randomized_response_frequencies(self):
    eps = 1.0
    mech = coverage.Mechanism("randomized_response", eps)
    p = math.exp(eps) / (1 + math.exp(eps))
    rng = np.random.default_rng(1)
    n = 200_000
    s_in = mech.sample(rng, np.ones(n, bool))
    s_out = mech.sample(rng, np.zeros(n, bool))
    self.assertEqual(set(np.unique(np.r_[s_in, s_out])), {0.0, 1.0})
    se = math.sqrt(p * (1 - p) / n)
    self.assertLess(abs(s_in.mean() - p), 5 * se)
    self.assertLess(abs(s_out.mean() - (1 - p)), 5 * se)
    fpr, fnr = mech.roc([-0.5, 0.5, 1.5])
    np.testing.assert_allclose(fpr, [1, 1 - p, 0])
    np.testing.assert_allclose(fnr, [0, 1 - p, 1])
    # The ROC of the threshold tests meets the eps-DP region's corner.
    np.testing.assert_allclose(1 - fnr[1], math.exp(eps) * fpr[1])

  def test_laplace_samples(self):
    mech = coverage.Mechanism("laplace", 2.0)
    rng = np.random.default_rng(2)
    inc = rng.random(100_000) < 0.5
    s = mech.sample(rng, inc)
    self.assertGreater(sps.kstest(s[inc] - 1.0, sps.laplace(scale=0.5).cdf).pvalue, 1e-3)
    self.assertGreater(sps.kstest(s[~inc], sps.laplace(scale=0.5).cdf).pvalue, 1e-3)
    fpr, fnr = mech.roc(np.array([0.25, 0.5, 2.0]))
    np.testing.assert_allclose(fpr, sps.laplace(scale=0.5).sf([0.25, 0.5, 2.0]))
    np.testing.assert_allclose(fnr, sps.laplace(loc=1.0, scale=0.5).cdf([0.25, 0.5, 2.0]))

  @parameterized.parameters(0.5, 1.0, 2.0, 4.0)
  def test_laplace_true_epsilon_is_its_hockey_stick(self, eps):
    mech = coverage.Mechanism("laplace", eps)
    b = 1.0 / eps
    pin, pout = sps.laplace(loc=1.0, scale=b).pdf, sps.laplace(scale=b).pdf
    for delta in (1e-5, 1e-2, 0.1):
      e = mech.true_epsilon(delta)
      self.assertAlmostEqual(e, eps + 2 * math.log1p(-delta), places=12)
      # delta(e) by numerical integration equals the claimed profile at the answer ...
      d = _hockey_stick(pin, pout, e, [0.0, 1.0], -60 * b, 1 + 60 * b)
      self.assertAlmostEqual(d, delta, delta=1e-9 + 1e-6 * delta)
      # ... and a hair below it the mechanism is not (e', delta)-DP.
      self.assertGreater(_hockey_stick(pin, pout, e - 1e-3, [0.0, 1.0], -60 * b, 1 + 60 * b),
                         delta)
    # The library's Laplace PLD (pessimistic discretisation) agrees from above.
    p_eps = pld.laplace_pld(b).epsilon(1e-5)
    self.assertGreaterEqual(p_eps, mech.true_epsilon(1e-5) - 1e-9)
    self.assertLess(p_eps, mech.true_epsilon(1e-5) + 0.01)

  @parameterized.parameters(0.5, 1.0, 2.0, 4.0)
  def test_randomized_response_true_epsilon(self, eps):
    mech = coverage.Mechanism("randomized_response", eps)
    p = math.exp(eps) / (1 + math.exp(eps))
    for delta in (1e-5, 1e-2):
      e = mech.true_epsilon(delta)
      two_point = lambda x: max(0.0, p - math.exp(x) * (1 - p)) + max(0.0, 1 - p - math.exp(x) * p)
      self.assertAlmostEqual(two_point(e), delta, delta=1e-12)
      self.assertGreater(two_point(e - 1e-4), delta)
    self.assertAlmostEqual(mech.true_epsilon(1e-300), eps, places=9)
    p_eps = pld.randomized_response_pld(eps).epsilon(1e-5)
    self.assertGreaterEqual(p_eps, mech.true_epsilon(1e-5) - 1e-9)
    self.assertLess(p_eps, mech.true_epsilon(1e-5) + 0.01)

  def test_gaussian_true_epsilon_and_calibration(self):
    for eps in (0.5, 1.0, 2.0, 4.0):
      mech = coverage.gaussian_at(eps, _DELTA)
      self.assertEqual(mech.true_epsilon(_DELTA), gdp.gaussian_epsilon(_DELTA, mech.strength))
      self.assertAlmostEqual(mech.true_epsilon(_DELTA), eps, places=8)

  @parameterized.parameters("gaussian", "randomized_response", "laplace")
  def test_null_mechanisms(self, kind):
    mech = coverage.Mechanism(kind, 0.0)
    self.assertTrue(mech.null and mech.is_gdp)
    self.assertEqual(mech.true_epsilon(0.3), 0.0)
    self.assertStartsWith(mech.label, "null")
    rng = np.random.default_rng(3)
    s_in = mech.sample(rng, np.ones(50_000, bool))
    s_out = mech.sample(rng, np.zeros(50_000, bool))
    self.assertGreater(sps.ks_2samp(s_in, s_out).pvalue, 1e-3)
    fpr, fnr = mech.roc(np.array([0.5]))
    np.testing.assert_allclose(fpr + fnr, 1.0)            # every test is a coin flip

  def test_gdp_flags(self):
    self.assertTrue(coverage.Mechanism("gaussian", 1.0).is_gdp)
    self.assertFalse(coverage.Mechanism("laplace", 1.0).is_gdp)
    self.assertFalse(coverage.Mechanism("randomized_response", 1.0).is_gdp)

  def test_bad_mechanisms(self):
    for kw, name in ((dict(kind="poisson", strength=1.0), "kind"),
                     (dict(kind="gaussian", strength=-1.0), "strength"),
                     (dict(kind="gaussian", strength=math.nan), "strength"),
                     (dict(kind="laplace", strength=math.inf), "strength")):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, name):
          coverage.Mechanism(**kw)
    with self.assertRaisesRegex(TypeError, "rng"):
      coverage.Mechanism("gaussian", 1.0).sample(0, np.ones(3, bool))

  def test_optimal_choices_are_sensible(self):
    rr = coverage.Mechanism("randomized_response", 2.0)
    self.assertEqual(coverage.optimal_threshold(rr, 100, delta=_DELTA), 0.5)
    self.assertEqual(coverage.optimal_guesses(rr, 200, delta=_DELTA), 100)
    g = coverage.Mechanism("gaussian", 2.0)
    t = coverage.optimal_threshold(g, 1000, delta=_DELTA)
    self.assertGreater(abs(t - 1.0), 1.0)   # a tail test, away from the symmetric point mu / 2
    k = coverage.optimal_guesses(g, 2000, delta=_DELTA)
    self.assertTrue(1 <= k <= 1000)


class MemoizationTest(absltest.TestCase):

  def test_clopper_pearson_table_equals_direct_calls(self):
    rng = np.random.default_rng(4)
    calls = [(rng.integers(0, 501, 300), 500, 0.95), (np.float64(7.0), np.float64(40.0), 0.975),
             (np.array([0.0, 40.0]), 40, 0.9), (3, 10, 0.95),
             (np.array([2.5, 3.0]), 10, 0.95),               # expected counts: not tabulated
             (np.array([1, 2]), np.array([10, 20]), 0.95)]   # several n: not tabulated
    direct = [stats.clopper_pearson(*c) for c in calls]
    eps = stats.epsilon_lower_bound(3, 500, 100, 500, 1e-5)
    with coverage._memoized_counts():
      for _ in range(2):                                   # fresh table, then cached
        for c, d in zip(calls, direct):
          got = stats.clopper_pearson(*c)
          self.assertEqual(type(got[0]), type(d[0]))
          np.testing.assert_array_equal(got[0], d[0])
          np.testing.assert_array_equal(got[1], d[1])
      self.assertEqual(stats.epsilon_lower_bound(3, 500, 100, 500, 1e-5), eps)

  def test_one_run_memo_equals_direct_and_is_restored(self):
    kw = dict(num_canaries=400, num_guesses=60, num_correct=52, delta=1e-5, confidence=0.95)
    direct = one_run.epsilon_lower_bound(**kw)
    fdp = one_run_fdp.fdp_epsilon_lower_bound(**kw, family="gdp")
    originals = (stats.clopper_pearson, one_run.epsilon_lower_bound,
                 one_run_fdp.fdp_epsilon_lower_bound)
    with self.assertRaises(RuntimeError):
      with coverage._memoized_counts():
        self.assertEqual(one_run.epsilon_lower_bound(**kw), direct)
        self.assertEqual(one_run.epsilon_lower_bound(**kw), direct)
        self.assertEqual(one_run_fdp.fdp_epsilon_lower_bound(**kw, family="gdp"), fdp)
        raise RuntimeError("leave the block")
    self.assertEqual((stats.clopper_pearson, one_run.epsilon_lower_bound,
                      one_run_fdp.fdp_epsilon_lower_bound), originals)

  def test_measure_equals_unmemoized_estimators(self):
    # The same audits scored by the estimators outside `measure` (no memo).
    mech = coverage.Mechanism("laplace", 2.0)
    ests = (coverage.threshold_estimators(mech, trials=60, delta=_DELTA)
            + coverage.one_run_estimators(mech, trials=60, delta=_DELTA))
    res = coverage.measure(ests, mech, audits=4, trials=60, delta=_DELTA,
                           rng=np.random.default_rng(5))
    rng = np.random.default_rng(5)
    s_in = mech.sample(rng, np.ones((4, 60), bool))
    s_out = mech.sample(rng, np.zeros((4, 60), bool))
    bits = rng.random((4, 120)) < 0.5
    s_can = mech.sample(rng, bits)
    for e, r in zip(ests, res):
      want = [e.bound(s_in[i], s_out[i], _DELTA, 0.95) if e.inputs == "two_sample"
              else e.bound(s_can[i], bits[i], _DELTA, 0.95) for i in range(4)]
      np.testing.assert_array_equal(r.epsilon_lower_A, want, err_msg=e.name)
    self.assertTrue(any(r.positives for r in res))       # not a comparison of zeros


class MeasureTest(parameterized.TestCase):

  def _check_within(self, results, min_tightness=None):
    for r in results:
      with self.subTest(r.estimator, mechanism=r.mechanism):
        self.assertTrue(r.assumption_met)
        self.assertGreaterEqual(r.p_value, _LEVEL, r)
        if min_tightness is not None:
          self.assertGreater(r.tightness, min_tightness, r)   # bounds that could exceed

  def test_threshold_strategies_and_one_run_on_randomized_response(self):
    # RR is the tight case: its optimal test meets the eps-DP region's corner, so
    # these bounds sit close to the true eps and could exceed it.
    mech = coverage.Mechanism("randomized_response", 2.0)
    fixed, _, split2, bonf, _ = coverage.threshold_estimators(mech, trials=100, delta=_DELTA)
    ests = (fixed, split2, bonf, coverage.one_run_estimators(mech, trials=100, delta=_DELTA)[0])
    res = coverage.measure(ests, mech, audits=1000, trials=100, delta=_DELTA,
                           rng=np.random.default_rng(6))
    self.assertEqual([r.estimator for r in res],
                     ["fixed", "split_both_signs", "bonferroni", "one_run"])
    self._check_within(res, min_tightness=0.5)
    self.assertTrue(any(r.violations > 0 for r in res))   # the event is reachable

  def test_gdp_on_gaussian(self):
    # mu = 2 (eps ~ 10 at delta = 1e-5); with 100 trials per side the median bound is
    # about half of eps, and the upper tail of the audits reaches it.
    mech = coverage.Mechanism("gaussian", 2.0)
    gdp_est = coverage.threshold_estimators(mech, trials=100, delta=_DELTA)[4]
    res = coverage.measure(gdp_est, mech, audits=1000, trials=100, delta=_DELTA,
                           rng=np.random.default_rng(7))
    self._check_within(res, min_tightness=0.4)
    self.assertGreater(np.quantile(res[0].epsilon_lower_A, 0.99), 0.8 * res[0].true_epsilon)

  def test_null_with_ties(self):
    # A fair bit IN and OUT: massive ties; positive bounds in <= 5% of audits.
    mech = coverage.Mechanism("randomized_response", 0.0)
    _, split1, _, _, gdp_est = coverage.threshold_estimators(mech, trials=100, delta=_DELTA)
    ests = (split1, gdp_est, coverage.one_run_estimators(mech, trials=100, delta=_DELTA)[0])
    res = coverage.measure(ests, mech, audits=1000, trials=100, delta=_DELTA,
                           rng=np.random.default_rng(8))
    self._check_within(res)
    for r in res:
      self.assertEqual(r.violations, r.positives)
      self.assertEqual(r.tightness, None)

  def test_gdp_bound_without_its_assumption_is_flagged(self):
    mech = coverage.Mechanism("randomized_response", 2.0)
    gdp_est = coverage.threshold_estimators(mech, trials=100, delta=_DELTA)[4]
    r, = coverage.measure(gdp_est, mech, audits=100, trials=100, delta=_DELTA,
                          rng=np.random.default_rng(9))
    self.assertFalse(r.assumption_met)
    self.assertGreater(r.violation_rate, 0.5)       # why the label matters

  def test_an_invalid_estimator_is_caught(self):
    # Threshold maximised on the evaluation trials, on Laplace scores (whose tail
    # tests all sit at the eps-DP corner): far more than 5% of bounds exceed eps.
    mech = coverage.Mechanism("laplace", 2.0)
    r, = coverage.measure(coverage.overfit_estimator(), mech, audits=200, trials=10_000,
                          delta=_DELTA, rng=np.random.default_rng(10))
    self.assertLess(r.p_value, 1e-6)
    self.assertGreater(r.violation_rate, 0.1)
    self.assertFalse(r.within_nominal())

  def test_record_reproducibility_and_p_value(self):
    mech = coverage.Mechanism("gaussian", 1.0)
    est = coverage.threshold_estimators(mech, trials=20, delta=_DELTA)[1]
    a, = coverage.measure(est, mech, audits=30, trials=20, delta=_DELTA,
                          rng=np.random.default_rng(11))
    b, = coverage.measure(est, mech, audits=30, trials=20, delta=_DELTA,
                          rng=np.random.default_rng(11))
    np.testing.assert_array_equal(a.epsilon_lower_A, b.epsilon_lower_A)
    rec = a.record()
    self.assertEqual(rec["audits"], 30)
    self.assertEqual(rec["violation_rate"], a.violations / 30)
    self.assertNotIn("epsilon_lower_A", rec)
    self.assertAlmostEqual(coverage.violation_p_value(60, 1000, 0.05),
                           sps.binom.sf(59, 1000, 0.05))
    self.assertEqual(coverage.violation_p_value(0, 10, 0.05), 1.0)

  def test_score_bounds_entries(self):
    est = coverage.score_bounds_estimator()
    self.assertEqual(est.outputs, tuple(n for n in score_audit.SCORE_BOUND_NAMES
                                        if n != "clopper_pearson_fixed"))
    mech = coverage.Mechanism("laplace", 1.0)
    res = coverage.measure(est, mech, audits=3, trials=50, delta=_DELTA,
                           rng=np.random.default_rng(12))
    self.assertEqual([r.estimator for r in res], [f"score_bounds.{o}" for o in est.outputs])
    met = {r.estimator.split(".")[1]: r.assumption_met for r in res}
    self.assertFalse(met["gdp"] or met["fdp_one_run_gdp"])
    self.assertTrue(met["clopper_pearson"] and met["best"])

  def test_bad_arguments(self):
    mech = coverage.Mechanism("gaussian", 1.0)
    est = coverage.overfit_estimator()
    rng = np.random.default_rng(0)
    for kw, name in ((dict(audits=0), "audits"), (dict(trials=1), "trials"),
                     (dict(delta=0.0), "delta"), (dict(confidence=1.0), "confidence"),
                     (dict(trials=10**15), "trials")):
      with self.subTest(kw):
        args = dict(audits=2, trials=10, delta=_DELTA, rng=rng) | kw
        with self.assertRaisesRegex(ValueError, name):
          coverage.measure(est, mech, **args)
    with self.assertRaisesRegex(TypeError, "estimator"):
      coverage.measure([], mech, audits=2, trials=10, delta=_DELTA, rng=rng)
    with self.assertRaisesRegex(TypeError, "mechanism"):
      coverage.measure(est, "gaussian", audits=2, trials=10, delta=_DELTA, rng=rng)
    with self.assertRaisesRegex(ValueError, "inputs"):
      coverage.Estimator("x", lambda *a: 0.0, inputs="pairs")


class FullScaleCoverageTest(absltest.TestCase):

  @pytest.mark.slow
  def test_every_estimator_within_nominal_at_scale(self):
    # 1000 audits per row, trials 100 and 1000, eps 1 and 4, every mechanism and
    # null; the front door (score_bounds, ~50 ms an audit) with 300 audits at trials
    # 100. About 6 CPU minutes.
    rows = []
    rng = np.random.default_rng(13)
    for trials in (100, 1000):
      mechs = [coverage.Mechanism(k, 0.0) for k in coverage.MECHANISM_KINDS]
      for eps in (1.0, 4.0):
        mechs += [coverage.gaussian_at(eps, _DELTA), coverage.Mechanism("laplace", eps),
                  coverage.Mechanism("randomized_response", eps)]
      for mech in mechs:
        ests = (coverage.threshold_estimators(mech, trials=trials, delta=_DELTA)
                + coverage.one_run_estimators(mech, trials=trials, delta=_DELTA))
        rows += coverage.measure(ests, mech, audits=1000, trials=trials, delta=_DELTA, rng=rng)
        if trials == 100:
          rows += coverage.measure(coverage.score_bounds_estimator(), mech, audits=300,
                                   trials=trials, delta=_DELTA, rng=rng)
    # Many rows: each tested at 0.001 / rows, so that the whole table passes with
    # probability >= 0.999 when every estimator is valid.
    bad = [(r.estimator, r.mechanism, r.trials, r.violations) for r in rows
           if r.assumption_met and not r.within_nominal(_LEVEL / len(rows))]
    self.assertEqual(bad, [])
    # Each null row's positives are violations, so the same test bounds them.
    self.assertTrue(all(r.positives == r.violations for r in rows if r.true_epsilon == 0))


if __name__ == "__main__":
  absltest.main()
