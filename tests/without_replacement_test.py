"""Tests for dpjax.accounting.without_replacement: dp_accounting's WOR RDP (optional oracle),
the Gaussian's Theorem 27 forward differences against quadrature, the gamma = 1 and
monotonicity properties, and named errors."""

import itertools
import math

import mpmath
import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from dpjax.accounting import gdp
from dpjax.accounting import pld
from dpjax.accounting import rdp
from dpjax.accounting import without_replacement as wr

try:
  import dp_accounting
  from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
except ImportError:  # pragma: no cover - optional oracle
  dp_accounting = None

_NEEDS_DPA = absltest.skipIf(dp_accounting is None, "dp_accounting is not installed")
_ORDERS = np.asarray(rdp.DEFAULT_ORDERS)
# A cheaper order set for the dp_accounting grid (its Theorem 27 costs O(alpha^2) per order).
_GRID_ORDERS = np.array([1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.5, 12.0, 16.0, 24.0, 32.0,
                         48.0, 64.0, 96.0, 100.5, 128.0, 192.0, 256.0, 320.0, 512.0])

_CHEAP_ORDERS = np.array([1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 64.0])


def _theirs(gamma, sigma):
  """dp_accounting's Theorem 27 curve at _GRID_ORDERS."""
  return dpa_rdp._compute_rdp_sample_wor_gaussian(gamma, sigma, _GRID_ORDERS)  # pylint: disable=protected-access


def _gauss(sigma):
  return lambda a: np.asarray(a, np.float64) / (2.0 * sigma ** 2)


class WithoutReplacementTest(parameterized.TestCase):

  @_NEEDS_DPA
  @parameterized.parameters((1000, 10, 1.0), (60000, 256, 1.1), (10000, 1, 0.6),
                            (5000, 150, 1.0))
  def test_equals_dp_accounting_at_small_fractions(self, n, m, sigma):
    # gamma <= 0.03 and sigma <= 1.1: Theorem 9 and dp_accounting's Theorem 27 coincide at
    # integer orders (to 1e-12); fractional orders interpolate the cumulant, never above.
    ours = wr.sampled_without_replacement_rdp(m / n, _gauss(sigma), _ORDERS)
    acct = dpa_rdp.RdpAccountant(list(_ORDERS), dpa_rdp.NeighborRel.REPLACE_ONE)
    acct.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        n, m, dp_accounting.GaussianDpEvent(sigma)))
    theirs = np.asarray(acct._rdp)   # pylint: disable=protected-access
    integer = _ORDERS == np.round(_ORDERS)
    np.testing.assert_allclose(ours[integer], theirs[integer], rtol=1e-12)
    self.assertTrue(np.all(ours[~integer] <= theirs[~integer] * (1 + 1e-12)))
    event = ev.SelfComposedEvent(ev.SampledWithoutReplacementEvent(
        n, m, ev.GaussianEvent(sigma)), 100)
    acct.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        n, m, dp_accounting.GaussianDpEvent(sigma)), 99)
    self.assertLessEqual(ea.epsilon(event, 1e-5, "rdp", ev.REPLACE_ONE),
                         acct.get_epsilon(1e-5) * (1 + 1e-12))

  @_NEEDS_DPA
  @parameterized.parameters(itertools.product((0.5, 1.0, 2.0, 3.0), (1e-3, 0.03, 0.1, 0.3)))
  def test_gaussian_equals_dp_accounting_theorem_27(self, sigma, gamma):
    # Equal (1e-9 relative) at integer orders <= 256 where neither curve is capped by the
    # unsampled alpha / (2 sigma^2); never above it anywhere (fractional orders interpolate
    # a cumulant we also cap; above 256 dp_accounting drops to Theorem 9's terms).
    ours = wr.sampled_without_replacement_gaussian_rdp(gamma, sigma, _GRID_ORDERS)
    theirs = _theirs(gamma, sigma)
    direct = _GRID_ORDERS / (2 * sigma ** 2)
    same = (_GRID_ORDERS == np.round(_GRID_ORDERS)) & (_GRID_ORDERS <= 256) & (
        theirs < direct * (1 - 1e-9))
    self.assertGreater(same.sum(), 5)
    np.testing.assert_allclose(ours[same], theirs[same], rtol=1e-9)
    self.assertTrue(np.all(ours <= theirs * (1 + 1e-9)))
    self.assertTrue(np.all(ours <= direct))

  @_NEEDS_DPA
  @parameterized.parameters((5.0, 0.1), (5.0, 0.9), (10.0, 0.3), (30.0, 0.1))
  def test_gaussian_at_large_sigma_is_never_above_dp_accounting(self, sigma, gamma):
    # dp_accounting's float64 forward differences lose their digits here: some land up to
    # 2e-8 below the exact value (its curve is then up to ~7e-10 below the theorem, hence the
    # 1e-9 slack), others far above (then ours is up to ~90% lower).
    ours = wr.sampled_without_replacement_gaussian_rdp(gamma, sigma, _GRID_ORDERS)
    theirs = _theirs(gamma, sigma)
    self.assertTrue(np.all(ours <= theirs * (1 + 1e-9)))

  @parameterized.parameters(itertools.product((0.7, 2.0, 5.0, 30.0), (0.01, 0.1, 0.5)))
  def test_gaussian_is_never_above_theorem_9(self, sigma, gamma):
    t27 = wr.sampled_without_replacement_gaussian_rdp(gamma, sigma, _ORDERS)
    t9 = wr.sampled_without_replacement_rdp(gamma, _gauss(sigma), _ORDERS)
    self.assertTrue(np.all(t27 <= t9 * (1 + 1e-12)))
    self.assertTrue(np.all(t27 > 0))

  @parameterized.parameters((0.8, (8,)), (5.0, (16, 64)), (10.0, (32,)), (100.0, (64,)))
  def test_forward_differences_equal_quadrature(self, sigma, ks):
    # Delta^k phi(0) = E_Q[(P/Q - 1)^k] for P = N(1, s^2), Q = N(0, s^2): an independent
    # integral (mpmath quadrature, pieces of width sigma) with no cancellation at even k.
    got = wr._log_gaussian_forward_differences(sigma, max(ks))  # pylint: disable=protected-access
    for k in ks:
      with mpmath.workdps(30):
        f = lambda x, k=k: (mpmath.npdf(x, 0, sigma)
                            * mpmath.expm1((2 * x - 1) / (2 * sigma ** 2)) ** k)
        reach = int(max(k / sigma, math.sqrt(k))) + 13   # the integrand's peaks, in sigmas
        pts = [-mpmath.inf] + [sigma * j for j in range(-reach, reach)] + [0.5, mpmath.inf]
        want = float(mpmath.log(mpmath.quad(f, sorted(pts))))
      self.assertAlmostEqual(got[k], want, delta=1e-9)   # relative error of the value

  def test_gaussian_full_sample_and_monotone(self):
    np.testing.assert_array_equal(
        wr.sampled_without_replacement_gaussian_rdp(1.0, 1.5, _ORDERS), _ORDERS / 4.5)
    prev = np.zeros_like(_ORDERS)
    for gamma in (1e-4, 1e-2, 0.1, 0.5, 0.9):
      cur = wr.sampled_without_replacement_gaussian_rdp(gamma, 1.5, _ORDERS)
      self.assertTrue(np.all(cur >= prev - 1e-15))
      prev = cur

  @_NEEDS_DPA
  def test_event_with_composed_gaussians_matches_dp_accounting(self):
    inner = ev.ComposedEvent((ev.GaussianEvent(3.0), ev.SelfComposedEvent(ev.GaussianEvent(4.0),
                                                                          2)))
    event = ev.SelfComposedEvent(ev.SampledWithoutReplacementEvent(1000, 100, inner), 50)
    acct = dpa_rdp.RdpAccountant(list(_ORDERS), dpa_rdp.NeighborRel.REPLACE_ONE)
    theirs_inner = dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(3.0),
         dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0), 2)])
    acct.compose(dp_accounting.SampledWithoutReplacementDpEvent(1000, 100, theirs_inner), 50)
    ours = ea.epsilon(event, 1e-5, "rdp", ev.REPLACE_ONE)
    self.assertLessEqual(ours, acct.get_epsilon(1e-5) * (1 + 1e-12))
    self.assertAlmostEqual(ours, acct.get_epsilon(1e-5), delta=1e-9)
    # the whole dataset: the composed Gaussians themselves, in both accountants
    full = ev.SampledWithoutReplacementEvent(100, 100, inner)
    for acc in ("rdp", "pld"):
      self.assertAlmostEqual(ea.epsilon(full, 1e-5, acc, ev.REPLACE_ONE),
                             ea.epsilon(inner, 1e-5, acc, ev.REPLACE_ONE), delta=1e-9)
    with self.assertRaisesRegex(ev.UnsupportedEventError, "composition"):
      ea.epsilon(ev.SampledWithoutReplacementEvent(100, 10, ev.ComposedEvent(
          (ev.GaussianEvent(1.0), ev.LaplaceEvent(1.0)))), 1e-5, "rdp", ev.REPLACE_ONE)

  def test_full_sample_is_the_mechanism_and_sampling_helps(self):
    g = _gauss(1.5)
    np.testing.assert_array_equal(wr.sampled_without_replacement_rdp(1.0, g, _ORDERS),
                                  g(_ORDERS))
    prev = np.zeros_like(_ORDERS)
    for gamma in (1e-4, 1e-2, 0.1, 0.5, 0.9):
      cur = wr.sampled_without_replacement_rdp(gamma, g, _ORDERS)
      self.assertTrue(np.all(cur <= g(_ORDERS)))
      self.assertTrue(np.all(cur >= prev - 1e-15))   # monotone in the fraction
      prev = cur

  def test_pure_dp_inner_is_below_its_epsilon(self):
    # a Laplace mechanism (pure eps = 1): the amplified curve stays below
    # log(1 + gamma (e^eps - 1)) * 2 at every order (a loose but sure envelope)
    eps = 1.0
    lap = lambda a: rdp.laplace_rdp(1.0, a)
    r = wr.sampled_without_replacement_rdp(0.01, lap, _ORDERS, pure_epsilon=eps)
    self.assertTrue(np.all(r <= lap(_ORDERS)))
    self.assertLess(r[-1], 2.0 * math.log1p(0.01 * math.expm1(eps)))

  def test_bad_input_is_named(self):
    with self.assertRaisesRegex(ValueError, "sample_fraction"):
      wr.sampled_without_replacement_rdp(0.0, _gauss(1.0), [2.0])
    with self.assertRaisesRegex(ValueError, "orders"):
      wr.sampled_without_replacement_rdp(0.1, _gauss(1.0), [2.0 * wr.MAX_ORDER])
    with self.assertRaisesRegex(ValueError, "inner_rdp"):
      wr.sampled_without_replacement_rdp(0.1, lambda a: -np.ones_like(a), [2.0])
    with self.assertRaisesRegex(ValueError, "pure_epsilon"):
      wr.sampled_without_replacement_rdp(0.1, _gauss(1.0), [2.0], pure_epsilon=-1.0)
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      wr.sampled_without_replacement_gaussian_rdp(0.1, 0.0, [2.0])
    with self.assertRaisesRegex(ValueError, "sample_fraction"):
      wr.sampled_without_replacement_gaussian_rdp(1.5, 1.0, [2.0])
    with self.assertRaisesRegex(ValueError, "orders"):
      wr.sampled_without_replacement_gaussian_rdp(0.1, 1.0, [1.0])


def _exact_symmetric_delta(p, q, gamma, count, eps):
  """delta(eps) of `count` compositions of the symmetric pair S built from the remove pair
  (gamma p + (1 - gamma) q, q), by exact enumeration of S's atoms (independent of the grid)."""
  mix = gamma * p + (1 - gamma) * q
  losses = np.log(mix) - np.log(q)
  pos = losses > 0
  atoms = list(zip(losses[pos], mix[pos])) + list(zip(-losses[pos], q[pos]))
  atoms.append((0.0, 1.0 - mix[pos].sum() - q[pos].sum()))
  total = {0.0: 1.0}
  for _ in range(count):
    nxt = {}
    for l0, m0 in total.items():
      for l1, m1 in atoms:
        nxt[l0 + l1] = nxt.get(l0 + l1, 0.0) + m0 * m1
    total = nxt
  return sum(m * -math.expm1(eps - l) for l, m in total.items() if l > eps)


class WithoutReplacementPldTest(parameterized.TestCase):

  @parameterized.parameters((0.01, 1.0), (0.2, 0.7), (0.5, 2.0))
  def test_one_step_is_the_closed_form_remove_profile(self, gamma, sigma):
    # delta(eps >= 0) = gamma delta_G(log(1 + (e^eps - 1) / gamma)), mu = 1 / sigma
    # (Balle, Barthe & Gaboardi 2018), pessimistic within the grid.
    d = wr.sampled_without_replacement_gaussian_pld(gamma, sigma)
    for eps in (0.0, 0.1, 0.5, 1.0, 2.0):
      exact = gamma * gdp.gaussian_delta(math.log1p(math.expm1(eps) / gamma), 1.0 / sigma)
      ours = d.delta(eps)
      self.assertGreaterEqual(ours, exact * (1 - 1e-9))
      self.assertLessEqual(ours, exact * (1 + 1e-3) + 1e-12)

  def test_pair_is_symmetric_and_normalised(self):
    d = wr.sampled_without_replacement_gaussian_pld(0.1, 1.0, value_discretization=1e-3)
    losses, probs, inf = d.loss_pmf(0)
    self.assertAlmostEqual(float(probs.sum()) + inf, 1.0, delta=1e-12)
    np.testing.assert_allclose(losses, -losses[::-1], atol=1e-12)
    keep = losses > 0
    np.testing.assert_allclose(probs[::-1][keep], (probs * np.exp(-losses))[keep], rtol=1e-12,
                               atol=1e-300)

  @parameterized.parameters((0.3, 1.0, 2, 3), (0.05, 0.5, 3, 4), (0.5, 2.0, 4, 2))
  def test_composition_equals_exact_enumeration(self, gamma, eps0, k, count):
    # randomized response (k buckets, replace-one) sampled without replacement, composed:
    # the grid answer is an upper bound within ~count * h of the exact atoms' answer.
    e = ev.RandomizedResponseEvent(eps0, k)
    p, q = ea._rr_pair(e)  # pylint: disable=protected-access
    d = wr.sampled_without_replacement_pair_pld(gamma, p, q, 1e-5).self_compose(count)
    for eps in (0.0, 0.2, 0.6):
      exact = _exact_symmetric_delta(p, q, gamma, count, eps)
      self.assertGreaterEqual(d.delta(eps), exact - 1e-12)
      self.assertLessEqual(d.delta(eps), exact + 1e-4 * count)

  def test_between_achievable_lower_bound_and_rdp(self):
    # Lower bound: the adversary fixing the remove shape R (all common records like x') or its
    # mirror every step is the Poisson remove / add direction composed, both achievable.
    gamma, sigma, t = 0.05, 1.0, 40
    event = ev.SelfComposedEvent(
        ev.SampledWithoutReplacementEvent(1000, 50, ev.GaussianEvent(sigma)), t)
    ours = ea.epsilon(event, 1e-5, "pld", ev.REPLACE_ONE, value_discretization=1e-3)
    poisson = pld.gaussian_pld(sigma, gamma, value_discretization=1e-3).self_compose(t)
    lower = poisson.epsilon(1e-5)   # both directions are upper bounds within ~t h^2 of exact
    self.assertGreaterEqual(ours, lower - 1e-3)
    self.assertLessEqual(ours, ea.epsilon(event, 1e-5, "rdp", ev.REPLACE_ONE,
                                          orders=_CHEAP_ORDERS))

  @parameterized.parameters(
      ev.LaplaceEvent(1.0), ev.RandomizedResponseEvent(1.0, 3), ev.DiscreteLaplaceEvent(0.5, 2),
      ev.DiscreteGaussianEvent(3.0), ev.ExponentialMechanismEvent(1.0),
      ev.ComposedEvent((ev.GaussianEvent(1.0), ev.GaussianEvent(2.0))))
  def test_pld_below_rdp_and_sampling_helps(self, inner):
    wor = ev.SelfComposedEvent(ev.SampledWithoutReplacementEvent(1000, 50, inner), 20)
    full = ev.SelfComposedEvent(inner, 20)
    ours = ea.epsilon(wor, 1e-5, "pld", ev.REPLACE_ONE, value_discretization=1e-3)
    self.assertLessEqual(ours, ea.epsilon(wor, 1e-5, "rdp", ev.REPLACE_ONE,
                                          orders=_CHEAP_ORDERS))
    self.assertLess(ours, ea.epsilon(full, 1e-5, "pld", ev.REPLACE_ONE,
                                     value_discretization=1e-3))

  def test_laplace_one_step_pure_epsilon(self):
    # log(1 + gamma (e^{1/b} - 1)) (Balle, Barthe & Gaboardi 2018, Thm 10)
    for gamma, b in ((0.1, 1.0), (0.5, 0.5)):
      d = wr.sampled_without_replacement_laplace_pld(gamma, b)
      self.assertAlmostEqual(d.epsilon(1e-12), math.log1p(gamma * math.expm1(1 / b)),
                             delta=2e-4)

  def test_whole_dataset_is_the_inner_pld(self):
    self.assertEqual(wr.sampled_without_replacement_gaussian_pld(1.0, 2.0).mu, 0.5)
    self.assertEqual(wr.sampled_without_replacement_laplace_pld(1.0, 1.0).epsilon(1e-9),
                     pld.laplace_pld(1.0).epsilon(1e-9))

  def test_refusals_are_named(self):
    with self.assertRaisesRegex(ValueError, "symmetri"):
      wr.sampled_without_replacement_pair_pld(0.5, [0.9, 0.1], [0.5, 0.5])
    with self.assertRaisesRegex(ValueError, "sample_fraction"):
      wr.sampled_without_replacement_gaussian_pld(0.0, 1.0)
    wor = ev.SampledWithoutReplacementEvent(100, 10, ev.ZCdpEvent(0.1))
    with self.assertRaisesRegex(ev.UnsupportedEventError, "ZCdpEvent without replacement"):
      ea.epsilon(wor, 1e-5, "pld", ev.REPLACE_ONE)
    gw = ev.SampledWithoutReplacementEvent(100, 10, ev.GaussianEvent(1.0))
    with self.assertRaisesRegex(ev.UnsupportedEventError, "replace-one guarantee"):
      ea.epsilon(gw, 1e-5, "pld", ev.ADD_REMOVE)


if __name__ == "__main__":
  absltest.main()
