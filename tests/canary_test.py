"""Tests for dpjax.audit.canary: the exact white-box LLR distribution and the canaries."""

import math
from unittest import mock
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from scipy import optimize, special

from dpjax import dpsgd, models, tradeoff
from dpjax.accounting import gdp, pld
from dpjax.audit import canary, parametric, stats, thresholds
from dpjax.data import canaries

_QUIET = dpsgd.PerformanceFlags(progress=False)

# The audit's noise multipliers (RDP-calibrated to eps 1, 2, 4, 8 at q = 0.2, T = 500).
_AUDIT_SIGMAS = (18.175692507729106, 9.704236335876162, 5.2851436171643185, 2.9836419458722774)


def _roc(dist):
  return tradeoff.likelihood_ratio_roc(dist.grid_J, dist.pmf_in_J, dist.pmf_out_J)


def _best(dist, trials, delta=0.0, confidence=0.95):
  thr, fpr, fnr = _roc(dist)
  return thresholds.best_certifiable(fpr, fnr, trials, delta=delta, confidence=confidence,
                                     thresholds_J=thr)


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
    thr, fpr, fnr = _roc(dist)
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

  @parameterized.named_parameters(*[(f"sigma{s:.1f}", s) for s in _AUDIT_SIGMAS])
  def test_equals_the_accountants_pld(self, sigma):
    # The white-box statistic's distribution is the PLD that accounting.pld composes:
    # at the audit's settings their privacy profiles (each the worse of the two
    # neighbour directions) agree on an eps grid, from above and from below, to
    # 1e-3 relative (the two grids' discretisation; measured: <= 4e-4) plus 1e-12
    # absolute (our plain FFT's float64 noise floor, ~1e-13; the accountant tilts
    # its FFT to avoid it).
    q, t = 0.2, 500
    dist = canary.llr_distribution(q, sigma, t)
    composed = pld.gaussian_pld(sigma, q).self_compose(t)
    eps = np.linspace(0.0, 8.0, 33)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)    # pld: deltas near its noise floor
      want = np.array([composed.delta(e) for e in eps])
    np.testing.assert_allclose(dist.delta(eps), want, rtol=1e-3, atol=1e-12)

  def test_each_direction_matches_the_closed_form_of_one_step(self):
    # One step (T = 1): L > eps iff o > o*(eps), so both directions' profiles are
    # Gaussian tail sums:
    #   remove: P_IN(L > e) - e^e P_OUT(L > e),  add: P_OUT(L < -e) - e^e P_IN(L < -e).
    q, s = 0.2, 1.0
    dist = canary.LlrDistribution.compute(q, s, 1)

    def o_star(target):   # the o with step_llr(o) = target (target > log(1 - q))
      return s * s * math.log((math.exp(target) - 1 + q) / q) + 0.5

    def remove(e):
      o = o_star(e)
      return ((1 - q) * special.ndtr(-o / s) + q * special.ndtr((1 - o) / s)
              - math.exp(e) * special.ndtr(-o / s))

    def add(e):
      if math.exp(-e) <= 1 - q:     # L >= log(1 - q) > -e: no mass below -e
        return 0.0
      o = o_star(-e)
      return special.ndtr(o / s) - math.exp(e) * ((1 - q) * special.ndtr(o / s)
                                                  + q * special.ndtr((o - 1) / s))

    eps = np.linspace(0.0, 3.0, 31)
    want = {"remove": [remove(e) for e in eps], "add": [add(e) for e in eps]}
    for direction, values in want.items():
      np.testing.assert_allclose(dist.delta(eps, direction), values, rtol=0, atol=1e-8,
                                 err_msg=direction)
    np.testing.assert_allclose(dist.delta(eps), np.maximum(want["remove"], want["add"]),
                               atol=1e-8)

  def test_best_certifiable_is_below_trials_ceiling_and_gdp_scale(self):
    dist = canary.llr_distribution(0.2, 9.7042, 500)
    ceil = _best(dist, 10_000, 1e-5).epsilon
    self.assertLess(ceil, stats.perfect_attack_ceiling(10_000, 1e-5))
    # a Gaussian mechanism with the same (PLD) eps gives a similar ceiling
    eps = pld.dpsgd_epsilon(9.7042, 0.2, 500, 1e-5)
    a = np.r_[0.0, np.geomspace(1e-12, 1.0, 20_001)]
    g = thresholds.best_certifiable(a, tradeoff.gaussian_fnr(a, gdp.mu_for_epsilon(eps, 1e-5)),
                                    10_000, delta=1e-5).epsilon
    self.assertAlmostEqual(ceil, g, delta=0.15)

  def test_null_white_box_scores_give_no_bound(self):
    # The same observations IN and OUT (no canary effect): nothing certified.
    rng = np.random.default_rng(2)
    sigma, q, t = 2.0, 0.2, 50
    o = sigma * rng.normal(size=(4000, t))
    s = canary.white_box_scores(o, q, sigma)
    thr = _best(canary.llr_distribution(q, sigma, t), 2000, 1e-5).threshold
    r = thresholds.FixedThreshold(thr).bound(s[:2000], s[2000:], delta=1e-5)
    self.assertLess(r.epsilon_lower, 0.3)
    g = parametric.gdp_estimate(s[:2000], s[2000:], 1e-5)
    self.assertLess(g.epsilon, 0.3)

  def test_work_budget_is_checked_before_any_fft(self):
    with mock.patch.object(np.fft, "rfft", side_effect=AssertionError("an FFT was run")):
      for t in (2**20, 2**31 - 1, 2**31):
        with self.assertRaisesRegex(ValueError, "num_steps = [0-9]+.* more than"):
          canary.llr_distribution(0.1, 1.0, t)
    # inside the budget: the mean of L under OUT is T E_Q[step_llr] = -T KL(Q || P_mix)
    # (quadrature). Each step's loss is rounded to the grid, so the grid must resolve one
    # step (at 1e5 steps a grid of 2000 points per sd of L was 0.1 sd off).
    q, s = 0.1, 1.0
    z = np.linspace(-12.0, 12.0, 400_001) * s
    w = np.exp(-0.5 * (z / s) ** 2) / (s * math.sqrt(2 * math.pi))   # o ~ N(0, s^2)
    l1 = canary.step_llr(z, q, s)
    m1 = np.sum(w * l1) * (z[1] - z[0])
    sd1 = math.sqrt(np.sum(w * l1 * l1) * (z[1] - z[0]) - m1 * m1)
    for t in (4096, 100_000):
      d = canary.LlrDistribution.compute(q, s, t)
      mean = float(np.dot(d.grid_J, d.pmf_out_J))
      sd = math.sqrt(float(np.dot(d.grid_J ** 2, d.pmf_out_J)) - mean ** 2)
      self.assertAlmostEqual(mean, t * m1, delta=0.01 * math.sqrt(t) * sd1, msg=t)
      self.assertAlmostEqual(sd / (math.sqrt(t) * sd1), 1.0, delta=1e-3, msg=t)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      canary.LlrDistribution.compute(0.2, 0.0, 10)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      canary.step_llr(0.0, 1.5, 1.0)
    with self.assertRaisesRegex(ValueError, "num_steps"):
      canary.LlrDistribution.compute(0.2, 1.0, 0)
    with self.assertRaisesRegex(ValueError, "num_models"):
      canary.balanced_design(6)
    with self.assertRaisesRegex(ValueError, "direction"):
      canary.LlrDistribution.compute(0.2, 1.0, 2).delta(1.0, "both ways")
    with self.assertRaisesRegex(ValueError, "l2_clip_norm"):
      canary.gradient_canary(3, 0.0)
    with self.assertRaisesRegex(ValueError, "x_canary_D"):
      canary.black_box_scores(np.zeros((2, 3)), np.zeros(2))
    with self.assertRaisesRegex(ValueError, "o_MxT"):
      canary.white_box_scores(np.zeros(3), 0.2, 1.0)
    with self.assertRaisesRegex(ValueError, "expected_batch_size"):
      canary.normalized_observations(np.zeros((1, 1)), expected_batch_size=0.0, l2_clip_norm=1.0)


class EngineCanaryTest(absltest.TestCase):

  def test_white_box_observations_follow_the_claimed_model(self):
    # Through the real engine: o_t = b_t + sigma z_t, with b_t ~ Bernoulli(q) iff the
    # gradient canary is in. 200 models x 60 steps: the mean of o under IN is q,
    # OUT 0, the variance sigma^2; tolerances are 5 SE.
    data = canaries.audit_data(jax.random.key(0), base_size=40)
    model = models.logistic_regression(data.num_features)
    sigma, q, t, m = 2.0, 0.2, 60, 200
    cfg = dpsgd.DpSgdConfig(dataset_size=41, sampling_prob=q, num_steps=t, noise_multiplier=sigma)
    r, s = canary.balanced_design(m)
    keep = np.ones((m, 41), bool)
    keep[:, data.canary_index] = r
    out = dpsgd.train_many(jax.random.key(1), data.x_NxD, data.y_N, jnp.asarray(keep), cfg, model,
                           observe_fn=canary.observe_last_coordinate(),
                           fixed_gradients=dpsgd.FixedGradients(
                               canary.gradient_canaries(data.num_features, 1, 1.0),
                               jnp.asarray(s)[:, None]),
                           perf=_QUIET)
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
