"""Tests for dpjax.accounting.mixture_pld: the Gaussian special cases and dp_accounting.

A two-point law {0: 1 - q, 1: q} is the Poisson-subsampled Gaussian and a one-point law
{c: 1} the Gaussian with sensitivity c (exact PLD); dp_accounting's
MixtureOfGaussiansDpEvent (optional oracle, skipped when absent) is the general check.
"""

import math

import numpy as np
from absl.testing import absltest, parameterized

from scipy import integrate, special, stats

from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from dpjax.accounting import gdp, mixture_pld, pld, rdp

try:
  from dp_accounting import dp_event as dpe
  from dp_accounting.pld import pld_privacy_accountant as dpa_pld
except ImportError:  # pragma: no cover - optional oracle
  dpe = None

_H = 1e-3


class MixtureOfGaussiansPldTest(parameterized.TestCase):

  @parameterized.parameters((0.1, 1.0, 1), (0.01, 0.8, 100), (0.5, 2.0, 20))
  def test_two_point_law_is_the_subsampled_gaussian(self, q, sigma, k):
    ours = mixture_pld.mixture_of_gaussians_pld(sigma, [0.0, 1.0], [1 - q, q],
                                                value_discretization=_H).self_compose(k)
    ref = pld.gaussian_pld(sigma, q, value_discretization=_H).self_compose(k)
    for delta in (1e-3, 1e-6):
      self.assertAlmostEqual(ours.epsilon(delta), ref.epsilon(delta), delta=1e-8)

  @parameterized.parameters((1.0, 1.0), (3.0, 2.0), (0.7, 0.5))
  def test_one_point_law_is_the_gaussian(self, sigma, c):
    ours = mixture_pld.mixture_of_gaussians_pld(sigma, [c], [1.0], value_discretization=_H)
    for delta in (1e-3, 1e-6):
      exact = gdp.gaussian_epsilon(delta, c / sigma)
      got = ours.epsilon(delta)
      self.assertGreaterEqual(got, exact - 1e-9)        # pessimistic discretisation
      self.assertLess(got - exact, 1e-2)

  def test_more_weight_on_a_larger_shift_never_lowers_eps(self):
    lo = mixture_pld.mixture_of_gaussians_pld(2.0, [0, 1, 2], [0.6, 0.3, 0.1],
                                              value_discretization=_H)
    hi = mixture_pld.mixture_of_gaussians_pld(2.0, [0, 1, 2], [0.6, 0.2, 0.2],
                                              value_discretization=_H)
    for delta in (1e-2, 1e-5):
      self.assertLessEqual(lo.epsilon(delta), hi.epsilon(delta) + 1e-9)

  @absltest.skipIf(dpe is None, "dp_accounting is not installed")
  def test_against_dp_accounting(self):
    for sigma, c, p, k in [(1.0, [0, 1], [0.5, 0.5], 1), (2.0, [0, 1, 2], [0.6, 0.3, 0.1], 50),
                           (1.5, [1, 2], [0.4, 0.6], 3),
                           (5.0, [0, 1, 2, 3], [0.97, 0.02, 0.007, 0.003], 500)]:
      acc = dpa_pld.PLDAccountant(value_discretization_interval=_H)
      acc.compose(dpe.SelfComposedDpEvent(dpe.MixtureOfGaussiansDpEvent(sigma, c, p), k))
      ours = mixture_pld.mixture_of_gaussians_pld(sigma, c, p, value_discretization=_H)
      ours = ours.self_compose(k) if k > 1 else ours
      for delta in (1e-3, 1e-6):
        theirs = acc.get_epsilon(delta)
        self.assertAlmostEqual(ours.epsilon(delta) / theirs, 1.0, delta=1e-6,
                               msg=f"{sigma} {c} {p} {k} {delta}")

  @parameterized.parameters((1.0, 0.1, 1), (2.0, 0.01, 1000), (0.8, 0.5, 10))
  def test_replace_one_against_dp_accounting(self, std, q, k):
    # dp_accounting's REPLACE_ONE pair is (1-q) N(0) + q N(-1) vs (1-q) N(0) + q N(1) with
    # noise std `std` per unit shift; ours takes sigma relative to the distance 2: std / 2.
    if dpe is None:
      self.skipTest("dp_accounting is not installed")
    from dp_accounting import privacy_accountant  # pylint: disable=g-import-not-at-top
    acc = dpa_pld.PLDAccountant(privacy_accountant.NeighboringRelation.REPLACE_ONE,
                                value_discretization_interval=_H)
    acc.compose(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(std)), k)
    ours = mixture_pld.replace_one_subsampled_gaussian_pld(std / 2, q, value_discretization=_H)
    ours = ours.self_compose(k) if k > 1 else ours
    for delta in (1e-3, 1e-6):
      self.assertAlmostEqual(ours.epsilon(delta) / acc.get_epsilon(delta), 1.0, delta=1e-6)

  @parameterized.parameters((0.5, 0.1), (1.0, 0.01), (0.3, 0.9))
  def test_replace_one_lies_between_add_remove_and_the_unsampled_gaussian(self, sigma, q):
    # Shifts +-1/(2 sigma): at least add/remove with shift 1/(2 sigma) (Q is a mixture
    # too) and at most the unsampled Gaussian of mu = 1/sigma (sampling never hurts).
    rep = mixture_pld.replace_one_subsampled_gaussian_pld(sigma, q, value_discretization=_H)
    half = pld.gaussian_pld(2 * sigma, q, value_discretization=_H)
    for delta in (1e-3, 1e-6):
      got = rep.epsilon(delta)
      self.assertGreaterEqual(got, half.epsilon(delta) - 1e-9)
      self.assertLessEqual(got, gdp.gaussian_epsilon(delta, 1.0 / sigma) + 2 * _H)

  def test_replace_one_at_q_one_is_the_gaussian(self):
    d = mixture_pld.replace_one_subsampled_gaussian_pld(0.7, 1.0)
    self.assertAlmostEqual(d.epsilon(1e-6), gdp.gaussian_epsilon(1e-6, 1 / 0.7), delta=1e-9)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      mixture_pld.replace_one_subsampled_gaussian_pld(1.0, 0.0)

  def test_validation(self):
    f = mixture_pld.mixture_of_gaussians_pld
    with self.assertRaisesRegex(ValueError, "probs"):
      f(1.0, [0.0, 1.0], [0.5, 0.6])
    with self.assertRaisesRegex(ValueError, "probs"):
      f(1.0, [0.0, 1.0], [0.5])
    with self.assertRaisesRegex(ValueError, "sensitivities"):
      f(1.0, [0.0, -1.0], [0.5, 0.5])
    with self.assertRaisesRegex(ValueError, "sensitivities"):
      f(1.0, [0.0, 1.0], [1.0, 0.0])          # only a zero shift has mass
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      f(math.nan, [1.0], [1.0])
    with self.assertRaisesRegex(ValueError, "value_discretization"):
      f(1.0, [1.0], [1.0], value_discretization=0.0)


_FEW_ORDERS = np.array([1.01, 1.5, 2.0, 3.0, 8.0, 32.0, 256.0])


def _log_quad_moment(log_p, log_q, alpha, lo, hi):
  """log of the integral of p^alpha q^(1 - alpha) over [lo, hi] by Simpson's rule on 100,001
  points, scaled by its peak (a reference accurate to ~1e-10 relative for these smooth laws)."""
  xs = np.linspace(lo, hi, 100_001)
  f = alpha * log_p(xs) + (1 - alpha) * log_q(xs)
  peak = float(np.max(f))
  return math.log(integrate.simpson(np.exp(f - peak), x=xs)) + peak


def _log_mixture_pdf(log_w, t):
  log_w, t = np.asarray(log_w, np.float64), np.asarray(t, np.float64)
  return lambda x: np.logaddexp.reduce(
      log_w[None, :] - 0.5 * (np.asarray(x)[:, None] - t[None, :]) ** 2
      - 0.5 * math.log(2 * math.pi), axis=1)


class MixtureRdpTest(parameterized.TestCase):

  @parameterized.parameters((1.0, 0.01), (5.0, 0.001), (0.3, 0.6))
  def test_two_point_law_is_the_poisson_subsampled_gaussian(self, sigma, q):
    # The exact RDP (Mironov, Talwar & Zhang 2019) is a lower bound; ours within 1e-3.
    ours = mixture_pld.mixture_of_gaussians_rdp(sigma, [0.0, 1.0], [1 - q, q], _FEW_ORDERS)
    exact = rdp.subsampled_gaussian_rdp(q, sigma, _FEW_ORDERS)
    np.testing.assert_array_less(exact * (1 - 1e-12), ours)
    np.testing.assert_array_less(ours, exact * (1 + 1e-3))

  def test_three_point_law_against_closed_form_and_quadrature(self):
    # Remove direction at integer orders: E_Q[(P/Q)^a] = sum over k (multinomial) of
    # prod p_i^{k_i} exp(((sum k_i mu_i)^2 - sum k_i mu_i^2) / 2); add direction by quadrature.
    sigma, c, p = 1.5, np.array([0.0, 1.0, 2.0]), np.array([0.8, 0.15, 0.05])
    mu = c / sigma
    orders = np.array([2.0, 3.0, 5.0, 8.0])
    ours = mixture_pld.mixture_of_gaussians_rdp(sigma, c, p, orders)
    log_p_mix = _log_mixture_pdf(np.log(p), mu)
    log_n0 = lambda x: stats.norm.logpdf(np.asarray(x))
    for a, got in zip(orders.astype(int), ours):
      terms = []
      for k1 in range(a + 1):
        for k2 in range(a - k1 + 1):
          k = np.array([a - k1 - k2, k1, k2])
          log_multi = special.gammaln(a + 1) - special.gammaln(k + 1).sum()
          s1, s2 = float(k @ mu), float(k @ (mu * mu))
          terms.append(log_multi + float(k @ np.log(p)) + (s1 * s1 - s2) / 2)
      remove = special.logsumexp(terms) / (a - 1)
      add = _log_quad_moment(log_n0, log_p_mix, float(a), -40.0, 40.0) / (a - 1)
      exact = max(remove, add)
      self.assertGreaterEqual(got, exact * (1 - 1e-9))
      self.assertLessEqual(got, exact * (1 + 1e-3))

  @parameterized.parameters((1.0, 0.01), (0.5, 0.2))
  def test_replace_one_against_quadrature(self, sigma, q):
    m = 0.5 / sigma
    log_p = _log_mixture_pdf(np.log([1 - q, q]), [0.0, m])
    log_q = _log_mixture_pdf(np.log([1 - q, q]), [0.0, -m])
    orders = np.array([1.5, 2.0, 8.0, 32.0])
    ours = mixture_pld.replace_one_subsampled_gaussian_rdp(sigma, q, orders)
    for a, got in zip(orders, ours):
      exact = _log_quad_moment(log_p, log_q, a, -40.0, a * m + 40.0) / (a - 1)
      self.assertGreaterEqual(got, exact * (1 - 1e-9))
      self.assertLessEqual(got, exact * (1 + 1e-3))

  def test_replace_one_limits(self):
    orders = np.array([2.0, 16.0])
    np.testing.assert_array_equal(
        mixture_pld.replace_one_subsampled_gaussian_rdp(2.0, 1.0, orders), orders / 8.0)
    r = mixture_pld.replace_one_subsampled_gaussian_rdp(2.0, 0.999, orders)
    np.testing.assert_array_less(r, orders / 8.0 + 1e-12)
    self.assertGreater(r[0], 0.9 * 2.0 / 8.0)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      mixture_pld.replace_one_subsampled_gaussian_rdp(1.0, 0.0, orders)

  def test_events_pld_below_rdp(self):
    orders = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    step = ev.PoissonSampledEvent(0.02, ev.GaussianEvent(0.8))
    run = ev.SelfComposedEvent(step, 100)
    r1 = ea.epsilon(run, 1e-5, "rdp", ev.REPLACE_ONE, orders=orders)
    p1 = ea.epsilon(run, 1e-5, "pld", ev.REPLACE_ONE, value_discretization=1e-3)
    self.assertLess(p1, r1)
    mog = ev.SelfComposedEvent(ev.MixtureOfGaussiansEvent(2.0, (0.0, 1.0, 2.0),
                                                          (0.9, 0.07, 0.03)), 20)
    self.assertLess(ea.epsilon(mog, 1e-5, "pld", value_discretization=1e-3),
                    ea.epsilon(mog, 1e-5, "rdp", orders=orders))
    with self.assertRaisesRegex(ev.UnsupportedEventError, "add/remove guarantee"):
      ea.epsilon(mog, 1e-5, "rdp", ev.REPLACE_ONE)


if __name__ == "__main__":
  absltest.main()
