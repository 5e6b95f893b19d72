"""Tests for dpjax.accounting.gdp: exact Gaussian DP, trade-off curves, the DP-SGD CLT."""

import math

import dp_accounting
import numpy as np
from absl.testing import absltest, parameterized
from scipy import integrate, stats

from dpjax.accounting import gdp


class ExactGaussianTest(parameterized.TestCase):

  @parameterized.parameters((0.5, 1e-5), (1.0, 1e-5), (3.0, 1e-3), (0.1, 1e-10), (10.0, 1e-6))
  def test_epsilon_matches_dp_accounting(self, sigma, delta):
    self.assertAlmostEqual(gdp.gaussian_epsilon(delta, 1 / sigma),
                           dp_accounting.get_epsilon_gaussian(sigma, delta), delta=1e-8)

  @parameterized.parameters((1.0, 1e-5), (0.3, 1e-6), (4.0, 1e-3))
  def test_mu_matches_dp_accounting_sigma(self, eps, delta):
    sigma = dp_accounting.get_sigma_gaussian(eps, delta)
    self.assertAlmostEqual(1 / gdp.mu_for_epsilon(eps, delta), sigma, delta=1e-6 * sigma)

  @parameterized.parameters((0.0, 1.0), (0.5, 1.0), (2.0, 0.5), (4.0, 2.0))
  def test_delta_is_the_hockey_stick_integral(self, eps, mu):
    # delta(eps) = int (p(x) - e^eps q(x))_+ dx for p = N(mu, 1), q = N(0, 1).
    f = lambda x: max(0.0, stats.norm.pdf(x, mu) - math.exp(eps) * stats.norm.pdf(x))
    x0 = eps / mu + mu / 2   # the densities cross here
    val = integrate.quad(f, x0, 40, epsabs=1e-15, epsrel=1e-12)[0]
    self.assertAlmostEqual(gdp.gaussian_delta(eps, mu), val, delta=1e-11)

  def test_composition_and_lecture_value(self):
    mu = gdp.compose_mu(0.01, 10_000)
    self.assertAlmostEqual(mu, 1.0, places=12)
    self.assertAlmostEqual(gdp.gaussian_epsilon(1e-5, mu), 4.38, places=2)   # lecture sec. 4.5


class CltTest(parameterized.TestCase):

  def test_bu_et_al_mnist_values(self):
    # Bu, Dong, Long & Su (2020) README: N = 60000, batch 256, sigma = 1.3, 15 epochs,
    # delta = 1e-5: 0.227-GDP (Poisson), eps = 1.0685 by the uniform-sampling CLT.
    t = math.ceil(15 * 60000 / 256)
    self.assertAlmostEqual(gdp.dpsgd_clt_mu(1.3, 256 / 60000, t), 0.227, places=3)
    self.assertAlmostEqual(gdp.dpsgd_clt_epsilon(1.3, 256 / 60000, t, 1e-5, sampler="uniform"),
                           1.0685, places=3)

  @parameterized.parameters(10.0, 30.0, 100.0)
  def test_unsampled_limit_is_the_exact_gaussian(self, sigma):
    # q = 1: mu_clt = sqrt(T (e^{1/s^2} - 1)) -> sqrt(T)/s with relative error ~ 1/(4 s^2).
    t = 400
    self.assertAlmostEqual(gdp.dpsgd_clt_mu(sigma, 1.0, t) / (math.sqrt(t) / sigma), 1.0,
                           delta=1 / (3 * sigma ** 2))

  @parameterized.named_parameters(
      ("sigma", lambda: gdp.dpsgd_clt_mu(0.0, 0.1, 10), "noise_multiplier"),
      ("q", lambda: gdp.dpsgd_clt_mu(1.0, 0.0, 10), "sampling_prob"),
      ("steps", lambda: gdp.dpsgd_clt_mu(1.0, 0.1, 0), "num_steps"),
      ("sampler", lambda: gdp.dpsgd_clt_mu(1.0, 0.1, 10, sampler="x"), "sampler"),
      ("delta", lambda: gdp.dpsgd_clt_epsilon(1.0, 0.1, 10, 2.0), "delta"),
      ("mu", lambda: gdp.gaussian_delta(1.0, -1.0), "mu"),
      ("eps", lambda: gdp.mu_for_epsilon(0.0, 1e-5), "epsilon"),
  )
  def test_bad_input(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


class MuForEpsilonSafeSideTest(absltest.TestCase):

  def test_analytic_mu_never_overshoots_delta(self):
    # The calibrated mu must give delta(eps) <= delta exactly, not just to the root
    # finder's tolerance (gaussian_sigma(20, 1e-10) once gave delta = 1.0000000000000034e-10).
    for eps in np.geomspace(0.01, 50.0, 60):
      for delta in (1e-3, 1e-5, 1e-10, 1e-14):
        mu = gdp.mu_for_epsilon(float(eps), delta)
        self.assertLessEqual(gdp.gaussian_delta(float(eps), mu), delta)
        self.assertGreater(gdp.gaussian_delta(float(eps), mu * (1 + 1e-6)), delta)

  def test_epsilon_never_undershoots_delta(self):
    # gaussian_epsilon is the smallest eps with delta(eps) <= delta as evaluated, and
    # minimal to ~1e-12 relative. The root finder alone stops below the root for 52
    # of these 120 pairs (mu = 0.01, delta = 1e-5: delta(eps) = delta (1 + 3.2e-13)).
    for mu in np.geomspace(1e-3, 300.0, 40):
      for delta in (1e-2, 1e-5, 1e-10):
        eps = gdp.gaussian_epsilon(delta, float(mu))
        self.assertLessEqual(gdp.gaussian_delta(eps, float(mu)), delta)
        if eps > 0:
          self.assertGreater(gdp.gaussian_delta(eps * (1 - 1e-11), float(mu)), delta)


if __name__ == "__main__":
  absltest.main()
