"""Tests for dpjax.audit.last_iterate: the last-iterate trade-off law."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest, parameterized
from scipy import special, stats as sp_stats

from dpjax import accounting, dpsgd, models, tradeoff
from dpjax.accounting import gdp
from dpjax.audit import crafting, last_iterate, thresholds
from dpjax.audit import final_model as fm
from dpjax.data import digits


class LastIterateTest(parameterized.TestCase):

  @parameterized.named_parameters(("T1", 1, 1.0), ("T16", 16, 2.0), ("T100", 100, 3.0))
  def test_full_batch_is_gaussian(self, t, sigma):
    # q = 1: the sum of T steps is N(T, T sigma^2) vs N(0, T sigma^2): mu = sqrt(T)/sigma.
    mu = math.sqrt(t) / sigma
    for e in (0.0, 0.5, 2.0, 5.0):
      np.testing.assert_allclose(last_iterate.last_iterate_delta(e, 1.0, sigma, t),
                                 float(gdp.gaussian_delta(e, mu)), rtol=1e-9, atol=1e-15)
    self.assertAlmostEqual(last_iterate.last_iterate_epsilon(1.0, sigma, t, 1e-5),
                           gdp.gaussian_epsilon(1e-5, mu), delta=1e-8)

  @parameterized.named_parameters(("q03", 0.3, 5, 1.0), ("q01", 0.1, 20, 0.8))
  def test_monte_carlo(self, q, t, sigma):
    # delta_remove(eps) = E_IN[(1 - e^(eps - l(X)))_+], delta_add = E_OUT[(1 - e^(eps + l(X)))_+]
    rng = np.random.default_rng(0)
    m = 100_000
    s = sigma * math.sqrt(t)
    x_in = rng.binomial(t, q, m) + s * rng.standard_normal(m)
    x_out = s * rng.standard_normal(m)
    k = np.arange(t + 1.0)
    logw = sp_stats.binom.logpmf(k, t, q)

    def log_l(x):
      return special.logsumexp(logw + (2 * k * x[:, None] - k * k) / (2 * s * s), axis=1)
    l_in, l_out = log_l(x_in), log_l(x_out)
    for e in (0.2, 1.0):
      for direction, z in (("remove", np.maximum(0, 1 - np.exp(e - l_in))),
                           ("add", np.maximum(0, 1 - np.exp(e + l_out)))):
        exact = last_iterate.last_iterate_delta(e, q, sigma, t, direction=direction)
        tol = 5 * z.std() / math.sqrt(m) + 1e-6
        self.assertLess(abs(z.mean() - exact), tol, (direction, e, z.mean(), exact))

  @parameterized.named_parameters(("small_q", 0.01, 1.0, 500), ("mid_q", 0.2, 1.5, 50))
  def test_below_the_composition(self, q, sigma, t):
    # The final sum is a post-processing of the T updates: its eps is at most the
    # accountant's exact (PLD) eps of the composition.
    heur = last_iterate.last_iterate_epsilon(q, sigma, t, 1e-5)
    exact = accounting.dpsgd_epsilon(sigma, q, t, 1e-5, accountant="pld")
    self.assertLess(heur, exact + 1e-3)
    self.assertGreater(heur, 0.0)

  def test_epsilon_inverts_delta(self):
    e = last_iterate.last_iterate_epsilon(0.1, 1.0, 50, 1e-5, tol=1e-10)
    self.assertLessEqual(last_iterate.last_iterate_delta(e, 0.1, 1.0, 50), 1e-5 * (1 + 1e-9))
    self.assertGreater(last_iterate.last_iterate_delta(e - 1e-6, 0.1, 1.0, 50), 1e-5)

  def test_roc_is_the_laws(self):
    thr, fpr, fnr = last_iterate.last_iterate_roc(0.3, 1.0, 4, num_points=201)
    self.assertTrue(np.all(np.diff(fpr) <= 0) and np.all(np.diff(fnr) >= 0))
    rng = np.random.default_rng(1)
    x_in = rng.binomial(4, 0.3, 200_000) + 2.0 * rng.standard_normal(200_000)
    j = 100
    self.assertAlmostEqual(fnr[j], float(np.mean(x_in <= thr[j])), delta=0.005)
    self.assertAlmostEqual(fpr[j], float(special.ndtr(-thr[j] / 2.0)), places=12)

  def test_certifiable_epsilon(self):
    # q = 1: the law is mu-GDP with mu = sqrt(T) / sigma, so the target is best_certifiable
    # on the closed-form Gaussian ROC; it grows with the trials and stays below the law's eps.
    fpr = np.concatenate([[1.0], np.geomspace(1.0, 1e-12, 20_000), [0.0]])
    for n in (100, 1000, 100_000):
      want = thresholds.best_certifiable(fpr, tradeoff.gaussian_fnr(fpr, 2.0), n,
                                         delta=1e-5).epsilon
      got = last_iterate.certifiable_epsilon(1.0, 1.0, 4, n, delta=1e-5)
      self.assertAlmostEqual(got, want, delta=0.01 * want)
    small, large = (last_iterate.certifiable_epsilon(0.2, 1.0, 10, n, delta=1e-5)
                    for n in (200, 20_000))
    self.assertLess(small, large)
    self.assertLess(large, last_iterate.last_iterate_epsilon(0.2, 1.0, 10, 1e-5))
    with self.assertRaisesRegex(ValueError, "trials"):
      last_iterate.certifiable_epsilon(0.5, 1.0, 2, 0)

  def test_rejects(self):
    with self.assertRaisesRegex(ValueError, "direction"):
      last_iterate.last_iterate_delta(1.0, 0.5, 1.0, 2, direction="both_ways")
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      last_iterate.last_iterate_epsilon(0.5, math.inf, 2, 1e-5)


if __name__ == "__main__":
  absltest.main()
