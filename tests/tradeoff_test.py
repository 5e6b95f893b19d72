"""Tests for dpjax.tradeoff: trade-off curves against closed forms and Monte Carlo."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats

from dpjax import mechanisms, tradeoff
from dpjax.accounting import pld
from dpjax.audit import canary

_MC = 200_000          # Monte Carlo draws per hypothesis
_SE = 5.0              # Monte Carlo tolerance in standard errors


def _mc_tpr(s_out, s_in, fpr):
  """Empirical TPR of the test with threshold at the empirical (1 - fpr) quantile of OUT."""
  thr = np.quantile(s_out, 1 - fpr, method="higher")
  return float(np.mean(s_in > thr))


def _mc_tolerance(tpr, fpr, slope, n):
  """_SE standard errors of an empirical TPR at an empirically placed threshold."""
  return _SE * math.sqrt(tpr * (1 - tpr) / n + slope ** 2 * fpr * (1 - fpr) / n) + 2.0 / n


class DpRegionTest(parameterized.TestCase):

  def test_matches_both_forms_of_the_region(self):
    f = np.linspace(0, 1, 1001)
    for eps in (0.0, 0.1, 1.0, 3.0, 8.0):
      for delta in (0.0, 1e-5, 0.1):
        want = np.minimum(np.minimum(1.0, math.exp(eps) * f + delta),
                          1.0 - math.exp(-eps) * np.maximum(1.0 - delta - f, 0.0))
        np.testing.assert_allclose(tradeoff.dp_tpr_bound(f, eps, delta), want, rtol=1e-12,
                                   atol=1e-15)

  def test_lecture_values(self):
    # lecture §6.1: eps = 2, FPR = 1% gives TPR <= 0.074; §2.4: eps = 1 gives 0.027;
    # eps = 8 is vacuous (1.000).
    self.assertAlmostEqual(tradeoff.dp_tpr_bound(0.01, 2.0, 1e-5), math.exp(2) * 0.01 + 1e-5,
                           places=14)
    self.assertAlmostEqual(tradeoff.dp_tpr_bound(0.01, 1.0, 1e-5), 0.027, delta=5e-4)
    self.assertAlmostEqual(tradeoff.dp_tpr_bound(0.01, 8.0, 1e-5), 1.0, places=3)
    self.assertEqual(tradeoff.dp_tpr_bound(0.01, math.inf), 1.0)
    self.assertEqual(tradeoff.dp_tpr_bound([0.0, 0.5], math.inf).tolist(), [1.0, 1.0])

  @parameterized.parameters(0.1, 1.0, 3.0, 8.0)
  def test_advantage_bound_is_max_of_region(self, eps):
    delta = 1e-5
    f = np.linspace(0, 1, 2_000_001)
    best = np.max(tradeoff.dp_tpr_bound(f, eps, delta) - f)
    # grid spacing 5e-7 times the steeper slope e^eps <= 3e3 gives < 2e-6
    self.assertAlmostEqual(best, tradeoff.advantage_bound(eps, delta), delta=2e-6)
    self.assertAlmostEqual(tradeoff.advantage_bound(eps), math.tanh(eps / 2), places=14)

  def test_posterior_bound_is_attained_by_randomized_response(self):
    # Bayes on eps-RR: P(member | report 1) = pi p / (pi p + (1 - pi)(1 - p)) exactly.
    eps = 1.5
    p = mechanisms.rr_truth_prob(eps)
    for pi in (0.01, 0.1, 0.5, 0.9):
      want = pi * p / (pi * p + (1 - pi) * (1 - p))
      self.assertAlmostEqual(tradeoff.posterior_bound(pi, eps), want, places=12)
    # and by simulation: members drawn with prior 0.1, reports through RR.
    rng = np.random.default_rng(0)
    member = rng.random(_MC) < 0.1
    report = np.where(rng.random(_MC) < p, member, ~member)
    post = member[report].mean()
    se = math.sqrt(post * (1 - post) / report.sum())
    self.assertAlmostEqual(post, tradeoff.posterior_bound(0.1, eps), delta=_SE * se)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "fpr_F"):
      tradeoff.dp_tpr_bound(1.5, 1.0)
    with self.assertRaisesRegex(ValueError, "epsilon"):
      tradeoff.dp_tpr_bound(0.5, -1.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      tradeoff.advantage_bound(1.0, 1.0)
    with self.assertRaisesRegex(ValueError, "prior"):
      tradeoff.posterior_bound(float("nan"), 1.0)


class GaussianTest(parameterized.TestCase):

  def test_tpr_is_the_neyman_pearson_test(self):
    # Threshold test on x ~ N(0,1) vs N(mu,1): reject when x > t; FPR = 1 - Phi(t).
    mu = 1.3
    t = np.linspace(-3, 5, 17)
    fpr, tpr = stats.norm.sf(t), stats.norm.sf(t - mu)
    np.testing.assert_allclose(tradeoff.gaussian_tpr(fpr, mu), tpr, rtol=1e-9, atol=1e-15)
    # the trade-off function keeps its relative accuracy in the far tail
    t = np.linspace(3, 12, 10)
    np.testing.assert_allclose(tradeoff.gaussian_fnr(stats.norm.sf(t), mu),
                               stats.norm.cdf(t - mu), rtol=1e-9)
    np.testing.assert_allclose(tradeoff.gaussian_fnr(fpr, mu), 1 - tradeoff.gaussian_tpr(fpr, mu),
                               atol=1e-12)

  def test_mu_inverts_the_curve_and_advantage(self):
    a = np.array([1e-6, 1e-3, 0.05, 0.5, 0.9])
    for mu in (0.2, 1.0, 4.0):
      np.testing.assert_allclose(tradeoff.gaussian_mu(a, tradeoff.gaussian_fnr(a, mu)), mu,
                                 rtol=1e-9)
      f = np.linspace(0, 1, 200_001)
      self.assertAlmostEqual(np.max(tradeoff.gaussian_tpr(f, mu) - f),
                             tradeoff.gaussian_advantage(mu), delta=1e-8)

  def test_monte_carlo(self):
    mu = 1.0
    rng = np.random.default_rng(1)
    s_out, s_in = rng.normal(size=_MC), mu + rng.normal(size=_MC)
    for fpr in (0.01, 0.1, 0.5):
      want = tradeoff.gaussian_tpr(fpr, mu)
      slope = stats.norm.pdf(stats.norm.ppf(fpr) + mu) / stats.norm.pdf(stats.norm.ppf(fpr))
      self.assertAlmostEqual(_mc_tpr(s_out, s_in, fpr), want,
                             delta=_mc_tolerance(want, fpr, slope, _MC))


class PureDpMechanismTest(parameterized.TestCase):

  _TESTS = {
      "rr": (tradeoff.randomized_response_tpr, tradeoff.randomized_response_advantage),
      "laplace": (tradeoff.laplace_tpr, tradeoff.laplace_advantage),
  }

  @parameterized.parameters(0.1, 0.5, 2.0, 4.0)
  def test_best_tests_inside_the_region(self, eps):
    f = np.linspace(0, 1, 10_001)
    bound = tradeoff.dp_tpr_bound(f, eps, 0.0)
    for tpr_fn, adv_fn in self._TESTS.values():
      tpr = tpr_fn(f, eps)
      np.testing.assert_array_less(tpr, bound + 1e-12)
      self.assertAlmostEqual(np.max(tpr - f), adv_fn(eps), delta=1e-3)
    # RR is the region's boundary for pure DP
    np.testing.assert_allclose(tradeoff.randomized_response_tpr(f, eps), bound, atol=1e-12)
    mu = 1.0 / mechanisms.gaussian_sigma(eps, 1e-5)
    np.testing.assert_array_less(tradeoff.gaussian_tpr(f, mu),
                                 tradeoff.dp_tpr_bound(f, eps, 1e-5) + 1e-12)

  def test_lecture_pure_math(self):
    mu = 1.0 / mechanisms.gaussian_sigma(8.0, 1e-5)
    self.assertAlmostEqual(tradeoff.gaussian_advantage(mu), 0.595, delta=5e-4)
    self.assertAlmostEqual(tradeoff.gaussian_tpr(0.01, mu), 0.2545, delta=5e-5)
    # RR attains the advantage bound (up to 2 delta / (e^eps + 1)).
    for eps in (0.1, 1.0, 8.0):
      gap = tradeoff.advantage_bound(eps, 1e-5) - tradeoff.randomized_response_advantage(eps)
      self.assertAlmostEqual(gap, 2e-5 / (math.exp(eps) + 1), delta=1e-12)
    # Laplace's TPR@1% equals e^eps * 1% for eps <= ln(50) (so for 0.1..2), not at 4.
    for eps, equal in ((0.1, True), (1.0, True), (2.0, True), (4.0, False)):
      tpr = tradeoff.laplace_tpr(0.01, eps)
      self.assertEqual(abs(tpr - 0.01 * math.exp(eps)) < 1e-12, equal)

  @parameterized.parameters(0.5, 2.0)
  def test_monte_carlo(self, eps):
    rng = np.random.default_rng(2)
    b = 1.0 / eps
    lap_out, lap_in = rng.laplace(0.0, b, _MC), 1.0 + rng.laplace(0.0, b, _MC)
    p = mechanisms.rr_truth_prob(eps)
    # RR on bit 0 / bit 1, with an independent uniform tie-break (a randomised test)
    rr_out = (rng.random(_MC) >= p) + 1e-3 * rng.random(_MC)
    rr_in = (rng.random(_MC) < p) + 1e-3 * rng.random(_MC)
    for fpr in (0.01, 0.2):
      for (s_out, s_in), fn in (((lap_out, lap_in), tradeoff.laplace_tpr),
                                ((rr_out, rr_in), tradeoff.randomized_response_tpr)):
        want = fn(fpr, eps)
        slope = (fn(fpr + 1e-4, eps) - fn(fpr - 1e-4, eps)) / 2e-4
        self.assertAlmostEqual(_mc_tpr(s_out, s_in, fpr), want,
                               delta=_mc_tolerance(want, fpr, slope, _MC), msg=fn.__name__)
      self.assertAlmostEqual(np.mean(lap_in > 0.5) - np.mean(lap_out > 0.5),
                             tradeoff.laplace_advantage(eps), delta=_SE * math.sqrt(0.5 / _MC))


class ProfileAndPmfTest(parameterized.TestCase):

  def test_pld_bound_is_valid_and_near_the_gaussian(self):
    # For a plain Gaussian (q = 1) the PLD profile is the exact mu-GDP profile, so the
    # bound from it must be >= the exact trade-off curve and close to it (400 eps
    # points: within 0.01 at these FPRs).
    mu = 1.0
    fprs = [0.001, 0.01, 0.1]
    got = tradeoff.pld_tpr_bound(pld.gaussian_pld(1.0 / mu), fprs, 10.0)
    want = tradeoff.gaussian_tpr(np.array(fprs), mu)
    np.testing.assert_array_less(want - 1e-12, got)
    np.testing.assert_array_less(got, want + 0.01)

  def test_pld_bound_contains_the_subsampled_roc(self):
    # The exact ROC of the subsampled Gaussian's likelihood-ratio test (from its
    # pmf pair) lies below the bound read off the accountant's PLD profile, and
    # close to it.
    q, sigma, t = 0.2, 2.0, 30
    dist = canary.LlrDistribution.compute(q, sigma, t)
    _, fpr, fnr = tradeoff.likelihood_ratio_roc(dist.grid_J, dist.pmf_in_J, dist.pmf_out_J)
    grid = np.array([1e-3, 1e-2, 0.1, 0.3])
    tpr = np.interp(grid, fpr[::-1], 1 - fnr[::-1])
    composed = pld.gaussian_pld(sigma, q, value_discretization=1e-3).self_compose(t)
    bound = tradeoff.pld_tpr_bound(composed, grid, 20.0)
    np.testing.assert_array_less(tpr, bound + 1e-6)
    np.testing.assert_array_less(bound, tpr + 0.02)

  def test_likelihood_ratio_roc_by_hand_and_gaussian(self):
    thr, fpr, fnr = tradeoff.likelihood_ratio_roc([0.0, 1.0, 2.0], [0.2, 0.3, 0.5],
                                                  [0.6, 0.3, 0.1])
    np.testing.assert_allclose(thr, [0.5, 1.5, 2.5])
    np.testing.assert_allclose(fpr, [0.4, 0.1, 0.0], atol=1e-15)
    np.testing.assert_allclose(fnr, [0.2, 0.5, 1.0], atol=1e-15)
    # q = 1: T Gaussian steps = one mu-GDP pair; its ROC is Phi's curve (grid error
    # ~h = std / 2000 in the threshold).
    dist = canary.LlrDistribution.compute(1.0, 2.0, 4)
    _, fpr, fnr = tradeoff.likelihood_ratio_roc(dist.grid_J, dist.pmf_in_J, dist.pmf_out_J)
    keep = (fpr > 1e-4) & (fpr < 0.9)
    np.testing.assert_allclose(fnr[keep], tradeoff.gaussian_fnr(fpr[keep], 1.0), atol=1e-3)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "values_J"):
      tradeoff.likelihood_ratio_roc([1.0, 0.0], [0.5, 0.5], [0.5, 0.5])
    with self.assertRaisesRegex(ValueError, "pmf_out_J"):
      tradeoff.likelihood_ratio_roc([0.0, 1.0], [0.5, 0.5], [0.5])
    with self.assertRaisesRegex(ValueError, "max_epsilon"):
      tradeoff.pld_tpr_bound(pld.gaussian_pld(1.0), [0.1], 0.0)
    # A vector that is not a pmf (sum 1.1) used to give an ROC with rates past 1.
    with self.assertRaisesRegex(ValueError, "pmf_in_J must be a probability mass"):
      tradeoff.likelihood_ratio_roc([0.0, 1.0, 2.0], [0.2, 0.3, 0.6], [0.5, 0.3, 0.2])
    with self.assertRaisesRegex(ValueError, "pmf_out_J"):
      tradeoff.likelihood_ratio_roc([0.0, 1.0, 2.0], [0.2, 0.3, 0.5], [0.5, 0.3, 0.3])


if __name__ == "__main__":
  absltest.main()
