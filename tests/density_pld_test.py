"""Tests for dpjax.accounting.density_pld: Laplace pairs exactly, Gaussian pairs to the
interpolation error, composition against the closed form, upper bound for the interpolated
pair (pmf pair on a fine grid), and named errors."""

import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import density_pld as dp
from dpjax.accounting import gdp, pld


class LogDensityPairTest(parameterized.TestCase):

  @parameterized.parameters((1.0, 1.0), (0.5, 2.0), (3.0, 1.0))
  def test_laplace_pair_is_exact(self, b, shift):
    # log-linear between kinks at 0 and shift: the interpolation is the Laplace pair itself
    x = np.concatenate([np.linspace(-40 * b, 0.0, 4001), np.linspace(0.0, shift, 101)[1:],
                        np.linspace(shift, shift + 40 * b, 4001)[1:]])
    d = dp.log_density_pair_pld(x, -np.abs(x) / b, -np.abs(x - shift) / b, 1e-4)
    ref = pld.laplace_pld(b, shift, value_discretization=1e-4)
    eps0 = shift / b
    for eps in (0.0, 0.2 * eps0, 0.7 * eps0):
      exact = -math.expm1((eps - eps0) / 2.0)     # delta(eps) of the Laplace pair
      self.assertGreaterEqual(d.delta(eps), exact - 1e-12)
      self.assertAlmostEqual(d.delta(eps), exact, delta=1e-6)
      self.assertAlmostEqual(d.delta(eps), ref.delta(eps), delta=1e-6)
    self.assertAlmostEqual(d.epsilon(1e-12), shift / b, delta=1e-4)

  @parameterized.parameters((1.0, 1.0), (2.0, 1.0), (0.5, 0.3))
  def test_gaussian_pair_matches_the_closed_form(self, sigma, shift):
    x = np.linspace(-14 * sigma, 14 * sigma + shift, 40001)
    d = dp.log_density_pair_pld(x, -x ** 2 / (2 * sigma ** 2),
                                -(x - shift) ** 2 / (2 * sigma ** 2), 1e-4, tail_mass=1e-40)
    mu = shift / sigma
    for eps in (0.0, 0.5, 1.0):
      self.assertAlmostEqual(d.delta(eps), gdp.gaussian_delta(eps, mu),
                             delta=1e-6 * gdp.gaussian_delta(eps, mu) + 1e-15)
    composed = d.self_compose(20).epsilon(1e-5)
    exact = gdp.gaussian_epsilon(1e-5, mu * math.sqrt(20))
    self.assertAlmostEqual(composed, exact, delta=1e-4 * exact)

  def test_upper_bound_for_the_interpolated_pair(self):
    # refine each cell 200-fold (the interpolated pair's densities at the finer points);
    # the fine pmf pair (cell masses) is a post-processing of the interpolated pair, so
    # its delta never exceeds the coarse bound
    x = np.linspace(-6.0, 7.0, 53)
    lp, lq = -x ** 2 / 2, -(x - 1.0) ** 2 / 2 + 0.3 * np.sin(x)
    coarse = dp.log_density_pair_pld(x, lp, lq, 1e-4)
    xf = np.linspace(x[0], x[-1], (x.size - 1) * 200 + 1)
    lpf, lqf = np.interp(xf, x, lp), np.interp(xf, x, lq)
    mp = np.exp(0.5 * (lpf[1:] + lpf[:-1])) * np.diff(xf)
    mq = np.exp(0.5 * (lqf[1:] + lqf[:-1])) * np.diff(xf)
    fine = pld.pmf_pair_pld(mp / mp.sum(), mq / mq.sum(), 1e-4)
    for eps in (0.0, 0.3, 0.8, 1.5):
      # slack: the fine masses use the midpoint rule (relative error ~ 2e-6)
      self.assertLessEqual(fine.delta(eps), coarse.delta(eps) + 1e-5)
      # cells of width 0.25 with a wiggling Q: the two-point worst case costs <= 1e-2
      self.assertAlmostEqual(fine.delta(eps), coarse.delta(eps), delta=1e-2)

  def test_disjoint_support_goes_to_infinity(self):
    x = np.array([0.0, 1.0, 2.0, 3.0])
    lp = np.array([0.0, 0.0, -np.inf, -np.inf])
    lq = np.array([-np.inf, 0.0, 0.0, 0.0])
    d = dp.log_density_pair_pld(x, lp, lq, 1e-3)
    # P has mass 1/2 on [0, 1] where Q is 0 (interpolated from -inf: zero), so delta(eps) >= 1/2
    self.assertGreaterEqual(d.delta(5.0), 0.5 - 1e-12)

  def test_bad_input_is_named(self):
    x = np.array([0.0, 1.0, 2.0])
    with self.assertRaisesRegex(ValueError, "x_K"):
      dp.log_density_pair_pld(x[::-1], -x, -x)
    with self.assertRaisesRegex(ValueError, "log_q_K"):
      dp.log_density_pair_pld(x, -x, np.array([np.inf, 0.0, 0.0]))
    with self.assertRaisesRegex(ValueError, "log_p_K"):
      dp.log_density_pair_pld(x, np.full(3, -np.inf), -x)
    with self.assertRaisesRegex(ValueError, "tail_mass"):
      dp.log_density_pair_pld(x, -x, -x, tail_mass=0.5)


if __name__ == "__main__":
  absltest.main()
