"""Tests for dpjax.audit.probe: the probe worlds' theory against Monte Carlo and closed
forms, their scores, and one audited case."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from scipy import optimize
from scipy import stats as sps

from dpjax import accounting, sampling
from dpjax.accounting import gdp
from dpjax.audit import canary, probe, variants


class TheoryTest(absltest.TestCase):

  def test_scale_min_rates_match_monte_carlo(self):
    # K = 3 free coordinates, one base record, q = 0.5, T = 4: chi2_3 / d^2 per step,
    # d = max(1, Binomial(n, q)) with n = 1 (OUT) or 2 (IN); "some step below tau".
    k, n0, q, t, tau = 3, 1, 0.5, 4, 0.4
    lf, lt = variants.scale_min_log_rates(tau, k, n0, q, t)
    rng = np.random.default_rng(0)
    m = 400_000
    for n, got in ((n0, lf[0]), (n0 + 1, lt[0])):
      d = np.maximum(rng.binomial(n, q, (m, t)), 1)
      s = rng.chisquare(k, (m, t)) / d ** 2
      p = np.mean(np.min(s, axis=1) < tau)
      self.assertLess(abs(math.exp(got) - p), 5 * math.sqrt(p * (1 - p) / m), (n, p))

  def test_floored_bound_is_the_chi2_test(self):
    # n0 = 3, q = 0.5: divisors 1 (OUT) and 2 (IN) at every step.
    k, t = 4, 3
    eps = variants.floored_denominator_lower_bound(k, 3, 0.5, t, 1e-5)
    # direct: at tau = K T / 2, FPR = P(chi2_KT < tau), TPR = P(chi2_KT < 4 tau)
    tau = k * t / 2.0
    direct = math.log((sps.chi2.cdf(4 * tau, k * t) - 1e-5) / sps.chi2.cdf(tau, k * t))
    self.assertGreaterEqual(eps, direct - 1e-9)
    # the best threshold, found independently (bounded search on log tau)
    f = lambda lt: -(math.log(max(sps.chi2.cdf(4 * math.exp(lt), k * t) - 1e-5, 1e-300))
                     - sps.chi2.logcdf(math.exp(lt), k * t))
    best = -optimize.minimize_scalar(f, bounds=(math.log(0.05), math.log(2.0 * k * t)),
                                     method="bounded").fun
    self.assertAlmostEqual(eps, best, delta=0.02 * best)
    # equal divisors (n0 = 4 -> 2, n0 + 1 = 5 -> 2): nothing to see
    self.assertEqual(variants.floored_denominator_lower_bound(k, 4, 0.5, t, 1e-5), 0.0)

  def test_shuffle_leaves_the_last_batch_empty_without_the_canary(self):
    # The premise of the slot test: 9 records in 10 slots of 1, the canary fills the last.
    s = sampling.ShuffleSampler.like_poisson(0.1, 10)
    self.assertEqual((s.batch_size, s.steps_per_epoch), (1, 10))
    masks = jax.jit(jax.vmap(s.batch_mask, in_axes=(None, 0, None)))
    out = np.asarray(masks(jax.random.key(4), jnp.arange(30), jnp.arange(10) < 9))
    self.assertEqual(out[9::10].sum(), 0)            # the last batch of each epoch
    np.testing.assert_array_equal(out.sum(axis=0), [3] * 9 + [0])   # once per epoch
    full = np.asarray(masks(jax.random.key(4), jnp.arange(30), jnp.ones(10, bool)))
    np.testing.assert_array_equal(full.sum(axis=1), np.ones(30))
    # the slot statistic is exactly Gaussian: mean gap T // E, sd sqrt(2 T // E) sigma
    mu = variants.shuffle_slot_mu(2.0, 100, 10)
    self.assertAlmostEqual(mu, 10 / (math.sqrt(20) * 2.0))
    self.assertGreater(gdp.gaussian_epsilon(1e-5, mu), 0.0)

  def test_true_epsilon_kinds(self):
    by = {c.key: c for c in probe.CASES}
    sigma, kw = 3.0, dict(noise_coords=100, delta=1e-5)
    eps, kind = probe.true_epsilon(by["correct_q0.5_n2"], sigma, **kw)
    self.assertEqual(kind, "exact")
    self.assertAlmostEqual(eps, accounting.dpsgd_epsilon(sigma, 0.5, 32, 1e-5, "pld"))
    public, kind = probe.true_epsilon(by["floored_expected_batch_public"], sigma, **kw)
    self.assertEqual((public, kind), (eps, "exact"))          # post-processing
    over, kind = probe.true_epsilon(by["over_rate_sampler"], sigma, **kw)
    self.assertAlmostEqual(over, accounting.dpsgd_epsilon(sigma, 1.0, 32, 1e-5, "pld"))
    self.assertEqual(probe.true_epsilon(by["shuffle_as_poisson"], sigma, **kw)[1], ">=")


class ScoresAndAuditTest(absltest.TestCase):

  def test_scores_by_hand(self):
    rng = np.random.default_rng(0)
    obs = np.abs(rng.normal(size=(4, 6, 3)))
    w = rng.normal(size=(4, 5))
    s = probe.scores(obs, w, sampling_prob=0.5, noise_multiplier=2.0, expected_batch_size=2.0,
                     steps_per_epoch=3)
    want_llr = canary.white_box_scores(obs[..., 1] * 2.0 / probe.CLIP, 0.5, 2.0)
    np.testing.assert_array_equal(s["llr"], want_llr)
    np.testing.assert_array_equal(s["slot"], (obs[:, [2, 5], 0] + obs[:, [2, 5], 1]).sum(1))
    np.testing.assert_array_equal(s["scale_min"], -np.log(obs[..., 2].min(1)))
    z = -w / (probe.LEARNING_RATE * 2.0)
    np.testing.assert_array_equal(s["final_canary"], z[:, 1])
    np.testing.assert_allclose(s["final_scale"], -np.log((z[:, 2:] ** 2).sum(1)))
    self.assertEqual(probe.steps_per_epoch(probe.CASES[-1]), 50)   # 50 records, batch 1

  def test_correct_case_stays_below_its_exact_epsilon(self):
    case = probe.CASES[0]                       # correct, q = 0.5, n = 2, T = 32
    row = probe.audit_case(jax.random.key(0), case, 2.0, trials=40, noise_coords=5,
                           delta=1e-5, confidence=0.95, design_seed=0)
    self.assertEqual(row["true_epsilon_kind"], "exact")
    self.assertLessEqual(row["epsilon_lower"], row["true_epsilon"])
    self.assertLessEqual(row["epsilon_lower"], row["ceiling"] + 1e-12)
    self.assertLess(row["max_abs_logit"], 0.1)
    self.assertEqual(set(row["bounds"]), set(probe.ADVERSARIES))
    self.assertEqual(sum(b["positives"] for b in row["bounds"].values()), 6 * 20)


if __name__ == "__main__":
  absltest.main()
