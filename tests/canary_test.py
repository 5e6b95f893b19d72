"""Tests for dpjax.audit.canary: the exact white-box LLR distribution and the canaries."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from scipy import optimize

from dpjax import dpsgd, models
from dpjax.accounting import gdp, pld
from dpjax.audit import canary, stats


class LlrDistributionTest(parameterized.TestCase):

  @parameterized.named_parameters(("q02", 0.2, 1.5, 20), ("q1", 1.0, 3.0, 10))
  def test_matches_monte_carlo(self, q, sigma, t):
    dist = canary.LlrDistribution.compute(q, sigma, t)
    rng = np.random.default_rng(0)
    k = 200_000
    o_out = sigma * rng.normal(size=(k, t))
    o_in = o_out + (rng.random((k, t)) < q)
    l_out = canary.white_box_scores(o_out, q, sigma)
    l_in = canary.white_box_scores(o_in, q, sigma)
    thr, fpr, fnr = dist.roc()
    for level in (0.5, 0.1, 0.01):
      j = int(np.argmin(np.abs(fpr - level)))
      # binomial standard errors at k = 200,000 are < 0.0012; 5 SE tolerance
      se = math.sqrt(level * (1 - level) / k)
      self.assertAlmostEqual(np.mean(l_out > thr[j]), fpr[j], delta=5 * se + 1e-4)
      se2 = math.sqrt(fnr[j] * (1 - fnr[j]) / k)
      self.assertAlmostEqual(np.mean(l_in <= thr[j]), fnr[j], delta=5 * se2 + 1e-4)

  def test_gaussian_case_is_exact_gdp(self):
    # q = 1: T steps of N(1, s^2) vs N(0, s^2) = one Gaussian with mu = sqrt(T)/s.
    sigma, t = 4.0, 16
    dist = canary.LlrDistribution.compute(1.0, sigma, t)
    mu = math.sqrt(t) / sigma
    for eps in (0.0, 0.5, 1.0, 2.0):
      self.assertAlmostEqual(dist.delta(eps), gdp.gaussian_delta(eps, mu), delta=2e-4)

  @parameterized.named_parameters(("eps2", 9.7042, 1.84), ("eps8", 2.9836, 7.41))
  def test_privacy_profile_matches_pld_accountant(self, sigma, approx_eps):
    # The white-box statistic is the DP-SGD privacy loss: its delta(eps) must agree
    # with the PLD accountant's (a pessimistic upper bound, to within its grid error).
    q, t = 0.2, 500
    dist = canary.llr_distribution(q, sigma, t)
    eps_pld = pld.dpsgd_epsilon(sigma, q, t, 1e-5)
    self.assertAlmostEqual(eps_pld, approx_eps, delta=0.05)  # RDP-calibrated sigma for 2, 8
    ours = optimize.brentq(lambda e: dist.delta(e) - 1e-5, 0.0, 2 * eps_pld, xtol=1e-6)
    self.assertAlmostEqual(ours, eps_pld, delta=0.01 * eps_pld)

  def test_best_threshold_is_below_trials_ceiling_and_gdp_scale(self):
    dist = canary.llr_distribution(0.2, 9.7042, 500)
    thr, ceil = dist.best_threshold(10_000, 1e-5)
    self.assertLess(ceil, canary.perfect_ceiling(10_000, 1e-5))
    # a Gaussian mechanism with the same (PLD) eps gives a similar ceiling
    eps = pld.dpsgd_epsilon(9.7042, 0.2, 500, 1e-5)
    g = canary.gaussian_ceiling(gdp.mu_for_epsilon(eps, 1e-5), 10_000, 1e-5)
    self.assertAlmostEqual(ceil, g, delta=0.15)

  def test_null_white_box_scores_give_no_bound(self):
    # The same observations IN and OUT (no canary effect): nothing certified.
    rng = np.random.default_rng(2)
    sigma, q, t = 2.0, 0.2, 50
    o = sigma * rng.normal(size=(4000, t))
    s = canary.white_box_scores(o, q, sigma)
    thr, _ = canary.llr_distribution(q, sigma, t).best_threshold(2000, 1e-5)
    r = stats.audit_scores(s[:2000], s[2000:], delta=1e-5, threshold=thr)
    self.assertLess(r.epsilon_lower, 0.3)
    g = canary.gdp_epsilon_estimate(s[:2000], s[2000:], 1e-5)
    self.assertLess(g["epsilon"], 0.3)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      canary.LlrDistribution.compute(0.2, 0.0, 10)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      canary.step_llr(0.0, 1.5, 1.0)
    with self.assertRaisesRegex(ValueError, "num_models"):
      canary.balanced_design(6)


class EngineCanaryTest(absltest.TestCase):

  def test_white_box_observations_follow_the_claimed_model(self):
    # Through the real engine: o_t = b_t + sigma z_t, with b_t ~ Bernoulli(q) iff the
    # gradient canary is in. 200 models x 60 steps: the mean of o under IN is q,
    # OUT 0, the variance sigma^2; tolerances are 5 SE.
    data = canary.audit_data(jax.random.key(0), base_size=40)
    model = models.logistic_regression(data.num_features)
    sigma, q, t, m = 2.0, 0.2, 60, 200
    cfg = dpsgd.DpSgdConfig(dataset_size=41, sampling_prob=q, num_steps=t, noise_multiplier=sigma)
    r, s = canary.balanced_design(m)
    keep = np.ones((m, 41), bool)
    keep[:, data.canary_index] = r
    out = dpsgd.train_many(jax.random.key(1), data.x_NxD, data.y_N, jnp.asarray(keep), cfg, model,
                           observe_fn=canary.observe_last_coordinate(),
                           gradient_canary=canary.gradient_canary(data.num_features, 1.0),
                           canary_keep_M=jnp.asarray(s), progress=False)
    o = canary.normalized_observations(out.observations, expected_batch_size=cfg.expected_batch_size,
                                       l2_clip_norm=1.0)
    k = o[s].size
    self.assertAlmostEqual(o[s].mean(), q, delta=5 * sigma / math.sqrt(k))
    self.assertAlmostEqual(o[~s].mean(), 0.0, delta=5 * sigma / math.sqrt(k))
    self.assertAlmostEqual(o[~s].std(), sigma, delta=5 * sigma / math.sqrt(2 * k))
    # the record canary never touches the white-box coordinate
    self.assertEqual(float(np.abs(np.asarray(data.x_NxD)[:, -1]).max()), 0.0)
    bb = canary.black_box_scores(np.asarray(out.params["w"]), np.asarray(data.x_NxD[-1]))
    self.assertEqual(bb.shape, (m,))
    self.assertTrue(np.all(np.isfinite(bb)))


if __name__ == "__main__":
  absltest.main()
