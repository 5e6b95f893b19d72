"""Tests for dpjax.accounting.rdp against dp_accounting, closed forms and quadrature."""

import logging
import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from absl.testing import absltest, parameterized
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from scipy import integrate

from dpjax.accounting import gdp, rdp

# dp_accounting logs a warning for every fractional order it drops; keep CI quiet.
logging.getLogger("absl").setLevel(logging.ERROR)

_INT = rdp.DEFAULT_ORDERS == np.round(rdp.DEFAULT_ORDERS)


def _grid_points(n=52, seed=0):
  """(q, sigma, T, delta) spread log-uniformly over the issue's box."""
  rng = np.random.default_rng(seed)
  pts = []
  for i in range(n):
    q = float(10 ** rng.uniform(-4, 0)) if i % 9 else 1.0
    sigma = float(10 ** rng.uniform(math.log10(0.5), 2))
    t = int(round(10 ** rng.uniform(0, 5)))
    delta = float(10 ** rng.uniform(-10, -3))
    pts.append((f"p{i:02d}", q, sigma, t, delta))
  return pts


def _ref_rdp_mpmath(q, sigma, alpha, dps=30):
  """Independent reference: log(E_{N(0,s^2)}[(1 - q + q Y)^alpha]) / (alpha - 1) by mpmath.quad.

  Uses A - 1 = E[(1 + x)^alpha - 1 - alpha x] with x = q (Y - 1) so tiny values keep
  their relative precision; the integral is split at the component centres 0 and alpha.
  """
  with mpmath.workdps(dps):
    q, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)

    def f(z):
      x = q * mpmath.expm1((2 * z - 1) / (2 * s * s))
      return mpmath.npdf(z, 0, s) * ((1 + x) ** a - 1 - a * x)

    pts = sorted({-20 * s, -s, mpmath.mpf(0), mpmath.mpf("0.5"), a / 2, a, a + s, a + 20 * s})
    am1 = mpmath.quad(f, pts, maxdegree=10)
    return float(mpmath.log1p(am1) / (a - 1))


class SubsampledGaussianVsDpAccountingTest(parameterized.TestCase):
  """>= 50 (q, sigma, T, delta) points against dp_accounting's RdpAccountant."""

  @parameterized.named_parameters(*_grid_points())
  def test_matches_dp_accounting(self, q, sigma, t, delta):
    orders = rdp.DEFAULT_ORDERS
    ours = rdp.subsampled_gaussian_rdp(q, sigma, orders)
    theirs = dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
    self.assertTrue(np.all(np.isfinite(ours)), "an order was dropped")
    # Integer orders: same closed form. dp_accounting sums log A directly, so when
    # log A ~ 1e-12 its own float error dominates; allow ~1e-15 absolute in log A.
    atol = 1e-15 / (orders - 1.0)
    np.testing.assert_allclose(ours[_INT], theirs[_INT], rtol=1e-6, atol=atol[_INT].max())
    # Fractional orders: dp_accounting adds |terms| of the series (an upper bound) or
    # drops the order (inf); exact is never above it (up to its float noise).
    frac = ~_INT
    self.assertTrue(np.all(ours[frac] <= theirs[frac] * (1 + 1e-9) + atol[frac]),
                    f"ours above dp_accounting at orders {orders[frac][ours[frac] > theirs[frac] * (1 + 1e-9) + atol[frac]]}")
    # The accountant end to end: same orders, same (Balle et al.) conversion.
    acct = dp_accounting.rdp.RdpAccountant(orders=list(orders))
    acct.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), t)
    eps_theirs = acct.get_epsilon(delta)
    eps_ours, _ = rdp.rdp_to_epsilon(orders, t * ours, delta)
    self.assertLessEqual(eps_ours, eps_theirs * (1 + 1e-9) + 1e-12)
    # On integer orders alone the two accountants agree.
    io = orders[_INT]
    acct_i = dp_accounting.rdp.RdpAccountant(orders=list(io))
    acct_i.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), t)
    eps_i, _ = rdp.rdp_to_epsilon(io, t * ours[_INT], delta)
    np.testing.assert_allclose(eps_i, acct_i.get_epsilon(delta), rtol=1e-6, atol=1e-9)


class SubsampledGaussianExactnessTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("typical", 0.01, 1.0, [1.01, 1.5, 3.7, 10.9]),
      ("large_q_near_1", 0.2, 0.5, [1.01, 1.3, 1.9]),
      ("half", 0.5, 0.7, [1.05, 1.5, 2.5]),
      ("tiny_q_big_sigma", 1e-4, 100.0, [1.01, 2.5, 11.5]),
      ("q1e-6_sigma0.3", 1e-6, 0.3, [1.01, 1.5, 3.7]),
      ("q1e-6_sigma1000", 1e-6, 1000.0, [1.02, 7.5, 700.5]),
      ("q_near_1", 0.999, 3.0, [1.1, 4.4]),
  )
  def test_fractional_orders_equal_quadrature(self, q, sigma, orders):
    ours = rdp.subsampled_gaussian_rdp(q, sigma, orders)
    ref = np.array([_ref_rdp_mpmath(q, sigma, a) for a in orders])
    np.testing.assert_allclose(ours, ref, rtol=1e-8, atol=0)

  @pytest.mark.slow
  def test_fractional_orders_equal_quadrature_extreme(self):
    # Small sigma and large fractional orders: sharp, far-apart integrand peaks.
    for q, sigma, orders in [(0.01, 0.3, [150.5, 1000.5]), (1e-6, 0.3, [20.5, 64.5])]:
      ours = rdp.subsampled_gaussian_rdp(q, sigma, orders)
      ref = np.array([_ref_rdp_mpmath(q, sigma, a) for a in orders])
      np.testing.assert_allclose(ours, ref, rtol=1e-8, atol=0)

  def test_scipy_quad_direct_form(self):
    # A second, plain float64 reference on the undecomposed integrand.
    q, sigma, a = 0.05, 1.2, 2.7

    def integrand(z):
      return (math.exp(-z * z / (2 * sigma ** 2)) / math.sqrt(2 * math.pi) / sigma
              * (1 - q + q * math.exp((2 * z - 1) / (2 * sigma ** 2))) ** a)

    val, _ = integrate.quad(integrand, -30, 30, epsabs=0, epsrel=1e-13, limit=200)
    ours = float(rdp.subsampled_gaussian_rdp(q, sigma, [a])[0])
    self.assertAlmostEqual(ours, math.log(val) / (a - 1), delta=1e-10 * ours)

  @parameterized.product(q=[1e-6, 1e-3, 0.5, 0.999], sigma=[0.3, 1.0, 10.0, 1000.0])
  def test_no_overflow_and_monotone(self, q, sigma):
    orders = rdp.DEFAULT_ORDERS
    r = rdp.subsampled_gaussian_rdp(q, sigma, orders)
    self.assertTrue(np.all(np.isfinite(r)) and np.all(r > 0))
    # Renyi divergence is nondecreasing in the order, and below the unsampled Gaussian.
    self.assertTrue(np.all(np.diff(r) >= -1e-12 * r[1:]))
    self.assertTrue(np.all(r <= orders / (2 * sigma ** 2) * (1 + 1e-12)))

  def test_q_one_is_gaussian(self):
    np.testing.assert_allclose(rdp.subsampled_gaussian_rdp(1.0, 2.0, [1.5, 4.0]),
                               [1.5 / 8, 4.0 / 8], rtol=1e-15)

  def test_q_near_one_approaches_gaussian(self):
    orders = np.array([1.5, 3.0, 9.5])
    r = rdp.subsampled_gaussian_rdp(1 - 1e-9, 2.0, orders)
    np.testing.assert_allclose(r, orders / 8, rtol=1e-6)


class PublishedAndLectureValuesTest(absltest.TestCase):

  def test_opacus_constant(self):
    # opacus/tests/accountants_test.py: q = 0.04, sigma = 1.5, steps = int(90 / 0.04),
    # delta = 1e-5, Opacus's default orders, Balle et al. conversion.
    orders = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
    r = 2250 * rdp.subsampled_gaussian_rdp(0.04, 1.5, orders)
    eps, _ = rdp.rdp_to_epsilon(orders, r, 1e-5)
    self.assertAlmostEqual(eps, 7.32911117143, delta=1e-9)

  def test_issue_example_dp_accounting_drops_orders(self):
    # q = 0.2, sigma = 0.5, T = 500 on dp_accounting's default orders: it reports
    # 339.98 (orders < 1.7 dropped); exact RDP on the same orders gives 177.31.
    orders = np.array(dp_rdp.DEFAULT_RDP_ORDERS, dtype=float)
    r = 500 * rdp.subsampled_gaussian_rdp(0.2, 0.5, orders)
    eps, order = rdp.rdp_to_epsilon(orders, r, 1e-5)
    acct = dp_accounting.rdp.RdpAccountant()
    acct.compose(dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(0.5)), 500)
    theirs = acct.get_epsilon(1e-5)
    self.assertAlmostEqual(theirs, 339.98, places=2)
    self.assertAlmostEqual(eps, 177.31, places=2)
    self.assertLess(order, 1.7)

  def test_default_grid_has_no_64_127_hole(self):
    # q = 0.01, sigma = 8, T = 1000 wants an order between 64 and 128.
    r = 1000 * rdp.subsampled_gaussian_rdp(0.01, 8.0, rdp.DEFAULT_ORDERS)
    eps, order = rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, r, 1e-5)
    self.assertGreater(order, 64)
    self.assertLess(order, 128)
    old = np.array(dp_rdp.DEFAULT_RDP_ORDERS, dtype=float)
    eps_old, _ = rdp.rdp_to_epsilon(old, 1000 * rdp.subsampled_gaussian_rdp(0.01, 8.0, old), 1e-5)
    self.assertLess(eps, eps_old)
    self.assertLess(rdp.DEFAULT_ORDERS.min(), 1.02)
    self.assertEqual(rdp.DEFAULT_ORDERS.max(), 1024)
    self.assertTrue(np.all(np.isin(np.arange(11, 129), rdp.DEFAULT_ORDERS)))

  def test_lecture_demo3_integer_orders(self):
    # Lecture sec. 4.4: q = 0.01, sigma = 1, delta = 1e-5, integer orders: 0.96 / 6.72.
    orders = np.arange(2, 257, dtype=float)
    one = rdp.subsampled_gaussian_rdp(0.01, 1.0, orders)
    self.assertAlmostEqual(rdp.rdp_to_epsilon(orders, one, 1e-5)[0], 0.96, places=2)
    self.assertAlmostEqual(rdp.rdp_to_epsilon(orders, 1e4 * one, 1e-5)[0], 6.72, places=2)

  def test_lecture_rdp_vs_exact_gaussian(self):
    # mu0 = 0.01 composed 1e4 times is a mu = 1 Gaussian: RDP 4.75 (integer orders,
    # improved conversion), 5.30 classic (exercise 3b), exact 4.38.
    orders = np.arange(2, 257, dtype=float)
    r = 1e4 * rdp.gaussian_rdp(100.0, orders)
    self.assertAlmostEqual(rdp.rdp_to_epsilon(orders, r, 1e-5)[0], 4.75, places=2)
    self.assertAlmostEqual(rdp.rdp_to_epsilon(orders, r, 1e-5, method="classic")[0], 5.30,
                           places=2)
    self.assertAlmostEqual(gdp.gaussian_epsilon(1e-5, 1.0), 4.38, places=2)


class SimpleMechanismsTest(parameterized.TestCase):

  @parameterized.parameters(0.5, 1.0, 4.0, 100.0)
  def test_gaussian_matches_dp_accounting(self, sigma):
    acct = dp_accounting.rdp.RdpAccountant(orders=list(rdp.DEFAULT_ORDERS))
    acct.compose(dp_accounting.GaussianDpEvent(sigma), 3)
    np.testing.assert_allclose(3 * rdp.gaussian_rdp(sigma, rdp.DEFAULT_ORDERS), acct._rdp,
                               rtol=1e-12)

  @parameterized.parameters((0.5, 1.0), (1.0, 1.0), (3.0, 2.0), (0.1, 1.0))
  def test_laplace_matches_dp_accounting_and_quadrature(self, scale, sens):
    orders = rdp.DEFAULT_ORDERS
    ours = rdp.laplace_rdp(scale, orders, sensitivity=sens)
    theirs = np.array([dp_rdp._laplace_rdp(sens / scale, a) for a in orders])
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    # Direct quadrature of the Renyi divergence between Lap(0, b) and Lap(sens, b).
    for a in (1.5, 4.0):
      f = lambda y: (math.exp(-abs(y) / scale) / (2 * scale)) ** a * (
          math.exp(-abs(y - sens) / scale) / (2 * scale)) ** (1 - a)
      val = integrate.quad(f, -60 * scale, 60 * scale, points=[0.0, sens], epsabs=0,
                           epsrel=1e-13, limit=200)[0]
      j = int(np.flatnonzero(orders == a)[0])
      self.assertAlmostEqual(ours[j], math.log(val) / (a - 1), delta=1e-9 * ours[j])

  @parameterized.parameters((0.5, 2), (1.0, 2), (2.0, 5), (0.1, 3))
  def test_randomized_response_matches_dp_accounting(self, eps, k):
    orders = rdp.DEFAULT_ORDERS
    p = k / (math.exp(eps) + k - 1)   # dp_accounting's noise parameter
    theirs = np.array([dp_rdp._randomized_response_rdp_replace_one(p, k, a) for a in orders])
    np.testing.assert_allclose(rdp.randomized_response_rdp(eps, orders, num_buckets=k), theirs,
                               rtol=1e-9)
    # Approaches the pure-DP parameter as alpha grows.
    self.assertLess(abs(rdp.randomized_response_rdp(eps, [1e7], k)[0] - eps), 1e-5)


class ConversionTest(parameterized.TestCase):

  @parameterized.parameters(1e-10, 1e-5, 1e-3)
  def test_balle2020_matches_dp_accounting(self, delta):
    rng = np.random.default_rng(1)
    orders = rdp.DEFAULT_ORDERS
    for _ in range(5):
      r = rng.uniform(0.01, 3) * orders ** rng.uniform(0.5, 1.5)
      eps, a = rdp.rdp_to_epsilon(orders, r, delta)
      eps_t, a_t = dp_rdp.compute_epsilon(orders, r, delta)
      self.assertAlmostEqual(eps, eps_t, delta=1e-12 * max(1, eps))
      d, _ = rdp.rdp_to_delta(orders, r, eps)
      d_t, _ = dp_rdp.compute_delta(orders, r, eps)
      self.assertAlmostEqual(d, d_t, delta=1e-9 * d_t)
      self.assertLessEqual(d, delta * (1 + 1e-9))   # round trip

  def test_classic_is_looser_and_both_bound_the_exact_gaussian(self):
    orders = rdp.DEFAULT_ORDERS
    for mu in (0.1, 0.5, 1.0, 3.0):
      r = rdp.gaussian_rdp(1 / mu, orders)
      for delta in (1e-8, 1e-5, 1e-3):
        e_b, _ = rdp.rdp_to_epsilon(orders, r, delta)
        e_c, _ = rdp.rdp_to_epsilon(orders, r, delta, method="classic")
        exact = gdp.gaussian_epsilon(delta, mu)
        self.assertLessEqual(exact, e_b + 1e-12)
        self.assertLessEqual(e_b, e_c + 1e-12)
        d_b, _ = rdp.rdp_to_delta(orders, r, e_b)
        self.assertGreaterEqual(d_b, gdp.gaussian_delta(e_b, mu))

  def test_classic_closed_form(self):
    orders = np.array([2.0, 3.0, 5.0])
    r = np.array([0.5, 1.0, 4.0])
    eps, a = rdp.rdp_to_epsilon(orders, r, 1e-3, method="classic")
    want = r + math.log(1e3) / (orders - 1)
    self.assertAlmostEqual(eps, want.min(), places=12)
    self.assertEqual(a, orders[np.argmin(want)])

  def test_inf_orders_are_skipped_not_fatal(self):
    orders = np.array([1.5, 2.0, 3.0])
    eps, a = rdp.rdp_to_epsilon(orders, np.array([np.inf, 0.1, 0.2]), 1e-5)
    self.assertTrue(math.isfinite(eps))
    self.assertIn(a, (2.0, 3.0))


class ValidationTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("q_zero", lambda: rdp.subsampled_gaussian_rdp(0.0, 1.0, [2]), "sampling_prob"),
      ("q_big", lambda: rdp.subsampled_gaussian_rdp(1.5, 1.0, [2]), "sampling_prob"),
      ("sigma_zero", lambda: rdp.subsampled_gaussian_rdp(0.1, 0.0, [2]), "noise_multiplier"),
      ("sigma_nan", lambda: rdp.gaussian_rdp(float("nan"), [2]), "noise_multiplier"),
      ("order_one", lambda: rdp.gaussian_rdp(1.0, [1.0, 2.0]), "orders"),
      ("laplace_scale", lambda: rdp.laplace_rdp(-1.0, [2]), "scale"),
      ("rr_eps", lambda: rdp.randomized_response_rdp(0.0, [2]), "epsilon"),
      ("rr_k", lambda: rdp.randomized_response_rdp(1.0, [2], num_buckets=1), "num_buckets"),
      ("delta_zero", lambda: rdp.rdp_to_epsilon([2.0], [1.0], 0.0), "delta"),
      ("delta_one", lambda: rdp.rdp_to_epsilon([2.0], [1.0], 1.0), "delta"),
      ("method", lambda: rdp.rdp_to_epsilon([2.0], [1.0], 1e-5, method="x"), "method"),
      ("shape", lambda: rdp.rdp_to_epsilon([2.0, 3.0], [1.0], 1e-5), "rdp_values"),
      ("neg_rdp", lambda: rdp.rdp_to_epsilon([2.0], [-1.0], 1e-5), "rdp_values"),
      ("neg_eps", lambda: rdp.rdp_to_delta([2.0], [1.0], -1.0), "epsilon"),
  )
  def test_bad_input_raises(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


if __name__ == "__main__":
  absltest.main()
