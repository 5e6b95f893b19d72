"""Tests for dpjax.accounting.pld_grid: atom gridding and grid deltas against closed forms."""

import math
from unittest import mock
import warnings

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import gdp, pld_dpsgd, pld_grid, pld_pmfs


def _atoms_delta(losses, p, eps, inf=0.0):
  return inf + float(np.sum(p * np.maximum(0.0, -np.expm1(eps - losses))))


class AtomsToGridTest(parameterized.TestCase):

  @parameterized.parameters(1e-2, 1e-3)
  def test_exact_at_grid_points_and_above_between(self, h):
    rng = np.random.default_rng(0)
    losses = rng.uniform(-2.0, 3.0, 40)
    p = rng.dirichlet(np.ones(40)) * 0.99
    pmf = pld_grid.atoms_to_grid(losses, p, h, infinity_mass=0.01)
    for eps in (0.0, 0.37, 1.0, 2.5, 5.0):
      exact = _atoms_delta(losses, p, eps, 0.01)
      self.assertGreaterEqual(pmf.delta(eps), exact - 1e-15)
      self.assertAlmostEqual(pmf.delta(eps), exact, delta=h * h)   # chord error O(h^2)
    for j in (3, 100, 250):
      l = pmf.losses[j]
      self.assertAlmostEqual(pmf.delta(l), _atoms_delta(losses, p, l, 0.01), places=13)

  def test_agrees_with_the_tail_discretisation(self):
    losses = np.array([-0.7, 0.0, 0.45, 1.2])
    p = np.array([0.1, 0.2, 0.3, 0.4])
    a = pld_grid.atoms_to_grid(losses, p, 1e-3)
    b = pld_pmfs.atoms_pmf(losses, p, 1e-3)
    for eps in np.linspace(0.0, 1.3, 27):
      self.assertAlmostEqual(a.delta(eps), b.delta(eps), places=12)

  def test_grid_deltas_equal_pointwise_deltas(self):
    pmf = pld_grid.atoms_to_grid(np.array([-1.0, 0.3, 2.0]), np.array([0.2, 0.5, 0.3]), 1e-2)
    d = pmf.grid_deltas()
    for j in range(0, pmf.probs.size, 37):
      self.assertAlmostEqual(d[j], pmf.delta(pmf.losses[j]), places=13)

  def test_huge_grid_is_refused(self):
    with self.assertRaises(pld_grid.GridTooLarge):
      pld_grid.atoms_to_grid(np.array([0.0, 1e4]), np.array([0.5, 0.5]), 1e-4)
    self.assertTrue(math.isfinite(pld_grid.MAX_POINTS))


class GaussianCompositionTest(parameterized.TestCase):
  """The DP-SGD path's grid operations on the Gaussian (q = 1), whose PLD is exact: the
  k-fold remove PLD is N(mu_k^2 / 2, mu_k^2) with mu_k = sqrt(k) mu (`gdp.gaussian_delta`)."""

  def _step(self, h, stride=1, fine_mass=0.0, mu=0.5):
    (pmf,) = pld_pmfs.subsampled_gaussian_pmfs(mu, 1.0, h, 1e-15, ("remove",), stride, fine_mass)
    return pmf

  def test_strided_tails_are_exact_at_their_points_and_above_between(self):
    fine, strided = self._step(1e-3), self._step(1e-3, stride=16, fine_mass=1e-4)
    self.assertLess(np.count_nonzero(strided.probs), 0.6 * np.count_nonzero(fine.probs))
    for eps in np.linspace(0.0, 1.5, 31):
      exact = gdp.gaussian_delta(eps, 0.5)
      self.assertGreaterEqual(strided.delta(eps), exact - 1e-15)
      self.assertGreaterEqual(strided.delta(eps), fine.delta(eps) - 1e-15)   # coarser: above
      self.assertAlmostEqual(strided.delta(eps), exact, delta=1e-6)
    # exact at the points of the strided upper tail (grid indices that are multiples of 16)
    top = strided.offset + int(0.8 * strided.probs.size)
    for i in (top - top % 16, top - top % 16 - 32):
      self.assertGreater(strided.probs[i - strided.offset], 0.0)
      self.assertEqual(np.count_nonzero(strided.probs[i - strided.offset + 1:i - strided.offset + 16]), 0)
      self.assertAlmostEqual(strided.delta(i * 1e-3), gdp.gaussian_delta(i * 1e-3, 0.5), delta=1e-15)

  @parameterized.parameters((4096, 8, 1e-5, 0.1), (20_000, 16, 1e-10, 0.05), (300, 4, 1e-3, 0.5),
                            (4099, 8, 1e-5, 0.1))   # 4099 is prime: steps left over
  def test_blocked_composition_is_above_the_exact_delta_and_close(self, k, factor, delta, mu1):
    h = 2e-4
    mu = mu1 * math.sqrt(k)
    exact = gdp.gaussian_epsilon(delta, mu)
    one = pld_grid.self_compose(self._step(h, mu=mu1), k, 1e-16, exact, 1e-4 * delta)
    two = pld_grid.blocked_self_compose(
        self._step(h / math.sqrt(2), 32, 1e-3 * delta / k, mu1), k, factor, 1e-16, exact,
        1e-4 * delta)
    self.assertLess(two.probs.size, 1.25 * math.sqrt(2) / factor * one.probs.size)   # f h / sqrt(2)
    for pmf in (one, two):
      eps = pmf.epsilon(delta)
      self.assertGreaterEqual(eps, exact)
      self.assertLess(eps - exact, 2e-4 * exact)
    # the same error as one level at h: both within a third of each other's distance
    e1, e2 = one.epsilon(delta) - exact, two.epsilon(delta) - exact
    self.assertLess(abs(e1 - e2), 0.35 * max(e1, e2), (e1, e2))
    for e in (0.5 * exact, exact, 1.5 * exact):
      self.assertGreaterEqual(two.delta(e), gdp.gaussian_delta(e, mu) * (1 - 1e-9))

  def test_block_size_is_a_nearby_divisor_else_the_square(self):
    self.assertEqual(pld_grid._block_size(100_000, 16), 250)   # pylint: disable=protected-access
    self.assertEqual(pld_grid._block_size(4096, 8), 64)   # pylint: disable=protected-access
    self.assertEqual(pld_grid._block_size(4099, 8), 64)   # pylint: disable=protected-access
    for k in (300, 14_063, 99_991, 65_536):
      for f in (4, 8, 16):
        m = pld_grid._block_size(k, f)   # pylint: disable=protected-access
        self.assertTrue(k % m == 0 and 7 * f * f <= 8 * m <= 10 * f * f or m == f * f, (k, f, m))

  def test_huge_step_counts_are_refused_not_searched(self):
    # the divisor search is O(f^2): above 2^16 steps per block it is skipped, and the
    # accountant refuses T = 2^63 - 1 by name (it once scanned ~1e9 candidates)
    self.assertEqual(pld_grid._block_size(2 ** 63 - 1, 1 << 12), 1 << 24)   # pylint: disable=protected-access
    with self.assertRaises(pld_grid.GridTooLarge):
      pld_dpsgd.dpsgd_epsilon(1.0, 0.2, 2 ** 63 - 1, 1e-5)

  def test_tilted_power_alone_where_it_is_no_noisier(self):
    # a tilted 256-fold block is one FFT power (the plain one would add nothing at the
    # tilt), and its delta at the tilt point matches the exact Gaussian's as one level does
    k, mu1, h = 256, 0.05, 1e-4
    mu = mu1 * math.sqrt(k)
    step = self._step(h, mu=mu1)
    tilt = gdp.gaussian_epsilon(1e-10, mu)
    calls, power = _recording_power()
    with mock.patch.object(pld_grid, "_cyclic_power", power):
      tilted = pld_grid.self_compose(step, k, 1e-16, tilt, 0.0)
    self.assertLen(calls, 1)
    plain = pld_grid.self_compose(step, k, 1e-16)
    exact = gdp.gaussian_delta(tilt, mu)
    self.assertGreaterEqual(tilted.delta(tilt), exact * (1 - 1e-9))
    self.assertAlmostEqual(tilted.delta(tilt), plain.delta(tilt), delta=1e-4 * exact)
    self.assertLess(abs(tilted.delta(tilt) / exact - 1), 1e-2)

  def test_blocking_pays_only_without_rare_large_losses(self):
    (light,) = pld_pmfs.subsampled_gaussian_pmfs(0.5, 1e-3, 1e-4, 1e-15, ("remove",))
    self.assertGreater(pld_grid.blocking_factor(light, 100_000, 1e-16), 1)
    # q = 1e-4, mu = 1: a step's loss reaches 0.17 while the 1000-fold sum spreads ~0.004
    (heavy,) = pld_pmfs.subsampled_gaussian_pmfs(1.0, 1e-4, 1e-4, 1e-15, ("remove",))
    self.assertEqual(pld_grid.blocking_factor(heavy, 1000, 1e-16), 1)
    self.assertEqual(pld_grid.blocking_factor(light, 10, 1e-16), 1)


def _recording_power():
  """A stand-in for pld_grid._cyclic_power that records (window width, k) of each FFT."""
  calls, real = [], pld_grid._cyclic_power  # pylint: disable=protected-access

  def power(probs, k, n_fft, shift, width):
    calls.append((width, k))
    return real(probs, k, n_fft, shift, width)

  return calls, power


class WorkBudgetTest(absltest.TestCase):
  """self_compose refuses past MAX_WORK (window points x log2 k) before any FFT; the
  accountants then answer on a coarser grid, which dominates (never below the truth)."""

  def test_refused_before_any_fft(self):
    # 2^31 - 1 steps at h = 0.02: ~6e6 window points (< MAX_POINTS), x 31 > MAX_WORK
    (pmf,) = pld_pmfs.subsampled_gaussian_pmfs(1.0, 0.1, 0.02, 1e-20, directions=("remove",))
    with mock.patch.object(pld_grid, "_cyclic_power",
                           side_effect=AssertionError("an FFT past the budget")):
      with self.assertRaisesRegex(pld_grid.GridTooLarge, "work budget"):
        pld_grid.self_compose(pmf, 2**31 - 1)
    # the same grid and fewer compositions: inside the budget, composed
    calls, power = _recording_power()
    with mock.patch.object(pld_grid, "_cyclic_power", power):
      out = pld_grid.self_compose(pmf, 2**20)
    self.assertLen(calls, 1)
    self.assertLessEqual(calls[0][0] * math.log2(calls[0][1]), pld_grid.MAX_WORK)
    self.assertAlmostEqual(out.probs.sum() + out.infinity_mass, 1.0, delta=1e-9)

  def test_delta_at_int32_max_steps_stays_in_budget_and_dominates(self):
    calls, power = _recording_power()
    with mock.patch.object(pld_grid, "_cyclic_power", power), warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      big = pld_dpsgd.dpsgd_delta_bound(1.0, 0.1, 2**31 - 1, 1.0, rtol=1e-3)
    self.assertNotEmpty(calls)
    for width, k in calls:
      self.assertLessEqual(width * math.log2(k), pld_grid.MAX_WORK)
    # delta(eps) of a composition does not decrease with the number of steps, and is <= 1
    small = pld_dpsgd.dpsgd_delta_bound(1.0, 0.1, 4096, 1.0, rtol=1e-3)
    self.assertGreaterEqual(big.value, small.value - small.error)
    self.assertLessEqual(big.value, 1.0)
    self.assertGreater(big.value, 0.99)

  def test_a_budget_limited_answer_is_pessimistic(self):
    full = pld_dpsgd.dpsgd_epsilon_bound(1.0, 0.01, 1000, 1e-5, rtol=1e-5)
    fulld = pld_dpsgd.dpsgd_delta_bound(1.0, 0.01, 1000, 1.0, rtol=1e-5)
    calls, power = _recording_power()
    with mock.patch.object(pld_grid, "MAX_WORK", 2**19), \
         mock.patch.object(pld_grid, "_cyclic_power", power):
      with self.assertWarnsRegex(RuntimeWarning, "PLD grid limited by the work budget"):
        capped = pld_dpsgd.dpsgd_epsilon_bound(1.0, 0.01, 1000, 1e-5, rtol=1e-5)
      with self.assertWarnsRegex(RuntimeWarning, "PLD grid limited by the work budget"):
        cappedd = pld_dpsgd.dpsgd_delta_bound(1.0, 0.01, 1000, 1.0, rtol=1e-5)
    for width, k in calls:
      self.assertLessEqual(width * math.log2(k), 2**19)
    # a coarser connect-the-dots grid dominates a finer one: eps and delta only grow
    self.assertGreater(capped.value_discretization, full.value_discretization)
    self.assertGreaterEqual(capped.value, full.value)
    self.assertGreater(cappedd.value_discretization, fulld.value_discretization)
    self.assertGreaterEqual(cappedd.value, fulld.value)
    # and stays close: the truth lies within each answer's stated error
    self.assertLessEqual(capped.value - full.value, 2 * capped.error + full.error + 1e-9)

  def test_the_warning_names_the_limit_that_stopped_the_grid(self):
    # a grid refused for its points (memory) is named so; the work budget is named apart
    with mock.patch.object(pld_grid, "MAX_POINTS", 3000):
      with self.assertWarnsRegex(RuntimeWarning, "PLD grid limited by memory") as cm:
        pld_dpsgd.dpsgd_delta_bound(1.0, 0.01, 100, 1.0, rtol=1e-8)
    self.assertNotIn("work budget", str(cm.warning))
    with mock.patch.object(pld_grid, "MAX_WORK", 2**15):
      with self.assertWarnsRegex(RuntimeWarning, "PLD grid limited by the work budget") as cm:
        pld_dpsgd.dpsgd_delta_bound(1.0, 0.01, 100, 1.0, rtol=1e-8)
    self.assertNotIn("memory", str(cm.warning))
    self.assertEqual(pld_grid.GridTooLarge("x").limit, "memory")


if __name__ == "__main__":
  absltest.main()
