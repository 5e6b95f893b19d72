"""Tests for dpjax.audit.stats: Clopper-Pearson, eps lower bounds, threshold audits."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax.accounting import gdp
from dpjax.audit import stats


class ClopperPearsonTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("zero", 0, 500), ("small", 3, 40), ("half", 50, 100), ("all", 20, 20), ("one", 1, 1))
  def test_matches_scipy_beta_quantiles(self, k, n):
    for conf in (0.9, 0.95, 0.99):
      a = 1 - conf
      lo, hi = stats.clopper_pearson(k, n, conf)
      want_lo = 0.0 if k == 0 else sps.beta.ppf(a / 2, k, n - k + 1)
      want_hi = 1.0 if k == n else sps.beta.ppf(1 - a / 2, k + 1, n - k)
      self.assertAlmostEqual(lo, want_lo, places=12)
      self.assertAlmostEqual(hi, want_hi, places=12)
      # and the defining tail equations of the exact interval
      if k < n:
        self.assertAlmostEqual(sps.binom.cdf(k, n, hi), a / 2, places=9)
      if k > 0:
        self.assertAlmostEqual(sps.binom.sf(k - 1, n, lo), a / 2, places=9)

  def test_coverage_monte_carlo(self):
    # 20,000 binomial draws at p = 0.03, n = 200: the upper limit (one-sided 97.5%)
    # must cover p in >= 97.5% of draws (exact intervals are conservative); the
    # Monte Carlo standard error of the rate is ~0.0011.
    rng = np.random.default_rng(0)
    k = rng.binomial(200, 0.03, 20_000)
    _, hi = stats.clopper_pearson(k, 200, 0.95)
    self.assertGreaterEqual(np.mean(hi >= 0.03), 0.975 - 0.004)

  def test_vectorised_and_validation(self):
    lo, hi = stats.clopper_pearson(np.array([0, 5]), 10)
    self.assertEqual(lo.shape, (2,))
    with self.assertRaisesRegex(ValueError, "successes"):
      stats.clopper_pearson(11, 10)
    with self.assertRaisesRegex(ValueError, "trials"):
      stats.clopper_pearson(0, 0)
    with self.assertRaisesRegex(ValueError, "confidence"):
      stats.clopper_pearson(1, 10, 1.0)


class EpsilonLowerBoundTest(parameterized.TestCase):

  @parameterized.named_parameters(("n500", 500, 4.91), ("n10000", 10_000, 7.90))
  def test_lecture_hand_counts(self, n, lecture):
    eps = stats.epsilon_lower_bound(0, n, 0, n, delta=0.0)
    # closed form: FPR_u = FNR_u = 1 - 0.025^(1/N)
    u = 1 - 0.025 ** (1 / n)
    self.assertAlmostEqual(eps, math.log((1 - u) / u), places=9)
    self.assertAlmostEqual(eps, lecture, delta=0.005)
    self.assertAlmostEqual(stats.perfect_attack_ceiling(n), eps, places=12)

  def test_formula_both_forms_and_delta(self):
    fp, fn, n = 10, 200, 1000
    _, fpr_u = stats.clopper_pearson(fp, n)
    _, fnr_u = stats.clopper_pearson(fn, n)
    want = max(math.log((1 - 1e-3 - fpr_u) / fnr_u), math.log((1 - 1e-3 - fnr_u) / fpr_u))
    self.assertAlmostEqual(stats.epsilon_lower_bound(fp, n, fn, n, delta=1e-3), want, places=12)
    # symmetric in swapping the roles of the two error types
    self.assertAlmostEqual(stats.epsilon_lower_bound(fn, n, fp, n, 1e-3), want, places=12)

  def test_no_signal_is_zero(self):
    self.assertEqual(stats.epsilon_lower_bound(500, 1000, 500, 1000), 0.0)
    self.assertEqual(stats.epsilon_lower_bound(1000, 1000, 0, 1000), 0.0)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "negatives"):
      stats.epsilon_lower_bound(0, 0, 0, 10)
    with self.assertRaisesRegex(ValueError, "false_negatives"):
      stats.epsilon_lower_bound(0, 10, 11, 10)
    with self.assertRaisesRegex(ValueError, "delta"):
      stats.epsilon_lower_bound(0, 10, 0, 10, delta=1.0)


class AuditScoresTest(parameterized.TestCase):

  def test_null_scores_never_spuriously_positive(self):
    # Same distribution IN and OUT: the held-out audit must certify ~0. Over 40
    # independent audits the chance that any exceeds 0.3 is far below 5%.
    rng = np.random.default_rng(1)
    eps = [stats.audit_scores(rng.normal(size=2000), rng.normal(size=2000), delta=1e-5).epsilon_lower
           for _ in range(40)]
    self.assertLess(max(eps), 0.3)
    self.assertLessEqual(np.mean(np.array(eps) > 0), 0.2)
    # heavy ties (a discrete null) too
    e = stats.audit_scores(rng.integers(0, 3, 4000), rng.integers(0, 3, 4000), both_signs=True)
    self.assertLess(e.epsilon_lower, 0.3)

  def test_gaussian_scores_below_analytic_epsilon(self):
    # Scores N(mu, 1) vs N(0, 1) built from quantiles (each half exactly): the audit
    # of a mu-GDP pair must not exceed the exact eps and should reach most of the
    # best certifiable bound for these trials.
    mu, n, delta = 2.0, 20_000, 1e-5
    half = sps.norm.ppf((np.arange(n // 2) + 0.5) / (n // 2))
    rng = np.random.default_rng(0)
    s_out = np.concatenate([rng.permutation(half), rng.permutation(half)])
    s_in = np.concatenate([rng.permutation(half), rng.permutation(half)]) + mu
    r = stats.audit_scores(s_in, s_out, delta=delta)
    exact = gdp.gaussian_epsilon(delta, mu)
    a = np.linspace(0, 1, 100_001)
    ceiling = stats.best_certifiable_epsilon(a, sps.norm.cdf(sps.norm.ppf(1 - a) - mu), n // 2, delta)
    self.assertLessEqual(r.epsilon_lower, exact)
    # The ceiling is on expected counts (e.g. 3.2 errors); quantile data has integer
    # counts at the optimum (3), worth < 0.15 in eps here.
    self.assertLessEqual(r.epsilon_lower, ceiling + 0.15)
    self.assertGreater(r.epsilon_lower, 0.9 * ceiling)
    self.assertEqual(r.positives, n // 2)

  def test_fixed_threshold_uses_all_trials(self):
    s_in, s_out = np.full(300, 2.0), np.zeros(300)
    r = stats.audit_scores(s_in, s_out, threshold=1.0)
    self.assertEqual((r.positives, r.negatives, r.false_positives, r.false_negatives), (300, 300, 0, 0))
    self.assertAlmostEqual(r.epsilon_lower, stats.perfect_attack_ceiling(300), places=12)
    # sign = -1: the test is "IN iff -score > threshold"
    r = stats.audit_scores(-s_in, -s_out, threshold=1.0, sign=-1)
    self.assertEqual((r.false_positives, r.false_negatives), (0, 0))

  def test_error_counts_by_hand(self):
    fp, fn = stats.error_counts([1, 2, 3], [0, 1, 2, 5], [0.5, 2.0])
    np.testing.assert_array_equal(fp, [3, 1])
    np.testing.assert_array_equal(fn, [0, 2])

  def test_best_certifiable_gaussian_scale(self):
    # The scale: a Gaussian mechanism with eps = 2 at delta = 1e-5 lets a
    # perfect adversary certify ~0.8 with 5,000 trials per side, ~0.9 with 10,000.
    mu = gdp.mu_for_epsilon(2.0, 1e-5)
    a = np.linspace(0, 1, 200_001)
    b = sps.norm.cdf(sps.norm.ppf(1 - a) - mu)
    self.assertAlmostEqual(stats.best_certifiable_epsilon(a, b, 5000, 1e-5), 0.8, delta=0.05)
    self.assertAlmostEqual(stats.best_certifiable_epsilon(a, b, 10_000, 1e-5), 0.9, delta=0.05)


if __name__ == "__main__":
  absltest.main()
