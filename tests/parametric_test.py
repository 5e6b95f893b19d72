"""Tests for dpjax.audit.parametric: the mu-GDP estimate (Nasr et al. 2023)."""


import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax.accounting import gdp
from tests import helpers
from dpjax.audit import parametric, stats


class GdpBoundTest(parameterized.TestCase):
  """The GDP bound of Nasr et al. 2023: joint confidence, clamping, null behaviour."""

  def test_null_scores_positive_in_at_most_five_percent(self):
    # 1,000 null audits (200 trials per side): positive in <= 5% + 3 s.e.
    # (0.05 + 3 * 0.0069 = 0.071). A mirrored |mu| would be positive in ~all of them.
    rng = np.random.default_rng(11)
    res = [parametric.gdp_estimate(rng.normal(size=200), rng.normal(size=200), 1e-5)
           for _ in range(1000)]
    eps = np.array([g.epsilon for g in res])
    mu = np.array([g.mu for g in res])
    self.assertLessEqual(np.mean(eps > 0), 0.071)
    self.assertTrue(np.all(eps[mu <= 0] == 0.0))
    self.assertGreater(np.mean(mu < 0), 0.9)          # the upper limits push mu below 0
    mirrored = [gdp.gaussian_epsilon(1e-5, abs(m)) for m in mu[mu < 0][:50]]
    self.assertGreater(np.mean(np.array(mirrored) > 0), 0.9)

  def test_negative_mu_is_clamped_not_mirrored(self):
    # IN scores far BELOW OUT scores at a fixed threshold: FPR_u + FNR_u ~ 2, mu ~ -4.
    s_in, s_out = helpers.quantile_scores(-4.0, 2000)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5, threshold=-2.0)
    self.assertLess(g.mu, -3.0)
    self.assertEqual(g.epsilon, 0.0)

  def test_joint_confidence_by_hand(self):
    # mu uses the upper limits of the two-sided interval at `confidence`: each a
    # one-sided 1 - alpha/2 bound, jointly 1 - alpha (the convention of stats).
    s_in, s_out = helpers.quantile_scores(1.0, 4000)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5, confidence=0.9, threshold=0.5)
    fp, fn = stats.error_counts(s_in, s_out, [0.5])
    fpr_u = sps.beta.ppf(0.95, fp[0] + 1, 4000 - fp[0])
    fnr_u = sps.beta.ppf(0.95, fn[0] + 1, 4000 - fn[0])
    self.assertAlmostEqual(g.mu, sps.norm.isf(fpr_u) - sps.norm.ppf(fnr_u), places=10)

  def test_coverage_on_exact_gdp(self):
    # 300 audits of exactly 1-GDP scores: mu_lower > 1 in <= 5% + 3 s.e. (0.088).
    rng = np.random.default_rng(12)
    mus = np.array([parametric.gdp_estimate(rng.normal(size=300) + 1.0, rng.normal(size=300),
                                            1e-5).mu for _ in range(300)])
    self.assertLessEqual(np.mean(mus > 1.0), 0.088)


class GdpEstimateTest(parameterized.TestCase):

  def test_gdp_estimate_recovers_mu_and_is_labelled(self):
    mu, n = 1.5, 20_000
    s_in, s_out = helpers.quantile_scores(mu, n)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5)
    # the Clopper-Pearson limits pull mu down a little; quantile scores pin it
    self.assertLess(g.mu, mu)
    self.assertGreater(g.mu, mu - 0.15)
    self.assertAlmostEqual(g.epsilon, gdp.gaussian_epsilon(1e-5, g.mu), places=12)
    self.assertIn("valid only if the mechanism is mu-GDP", g.assumptions)
    # a fixed threshold uses every trial; mu by hand at that threshold
    g = parametric.gdp_estimate(s_in, s_out, 1e-5, threshold=0.75)
    fp, fn = stats.error_counts(s_in, s_out, [0.75])
    _, fpr_u = stats.clopper_pearson(fp[0], n)
    _, fnr_u = stats.clopper_pearson(fn[0], n)
    self.assertAlmostEqual(g.mu, sps.norm.ppf(1 - fpr_u) - sps.norm.ppf(fnr_u), places=12)
    # no signal: eps 0
    rng = np.random.default_rng(3)
    self.assertEqual(parametric.gdp_estimate(rng.normal(size=2000), rng.normal(size=2000),
                                             1e-5).epsilon, 0.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      parametric.gdp_estimate(s_in, s_out, 0.0)


if __name__ == "__main__":
  absltest.main()
