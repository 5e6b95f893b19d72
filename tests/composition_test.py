"""Tests for dpjax.accounting.composition: closed forms, brute force and KOV's theorem."""

import itertools
import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import composition as comp


def _brute_force_delta(eps0, delta0, k, eps):
  """Hockey-stick divergence of the k-fold product of the (eps0, delta0) dominating pair."""
  a = math.exp(eps0) / (1 + math.exp(eps0))
  p1 = np.array([delta0, (1 - delta0) * a, (1 - delta0) * (1 - a), 0.0])
  q1 = np.array([0.0, (1 - delta0) * (1 - a), (1 - delta0) * a, delta0])
  total = 0.0
  for idx in itertools.product(range(4), repeat=k):
    p = np.prod(p1[list(idx)])
    q = np.prod(q1[list(idx)])
    total += max(0.0, p - math.exp(eps) * q)
  return total


def _kov_breakpoint(eps0, delta0, k, i):
  """KOV 2015 Thm 3.3: delta at eps = (k - 2i) eps0."""
  s = sum(math.comb(k, l) * (math.exp((k - l) * eps0) - math.exp((k - 2 * i + l) * eps0))
          for l in range(i))
  d_i = s / (1 + math.exp(eps0)) ** k
  # 1 - (1 - delta0)^k (1 - d_i), written without float cancellation.
  return -math.expm1(k * math.log1p(-delta0) + math.log1p(-d_i))


class BasicAdvancedTest(absltest.TestCase):

  def test_basic(self):
    e, d = comp.basic_composition(0.3, 1e-7, 7)
    self.assertAlmostEqual(e, 2.1, places=12)
    self.assertAlmostEqual(d, 7e-7, places=18)

  def test_advanced_formula(self):
    e0, k, ds = 0.05, 400, 1e-6
    e, d = comp.advanced_composition(e0, 1e-8, k, ds)
    self.assertAlmostEqual(e, math.sqrt(2 * k * math.log(1 / ds)) * e0 + k * e0 * math.expm1(e0),
                           places=12)
    self.assertAlmostEqual(d, k * 1e-8 + ds, places=15)

  def test_advanced_beats_basic_only_for_many_small_steps(self):
    # Lecture sec. 4.2: advanced does not help for k <= 10.
    self.assertGreater(comp.advanced_composition(0.1, 0, 10, 1e-5)[0],
                       comp.basic_composition(0.1, 0, 10)[0])
    self.assertLess(comp.advanced_composition(0.01, 0, 10_000, 1e-5)[0],
                    comp.basic_composition(0.01, 0, 10_000)[0])


class OptimalCompositionTest(parameterized.TestCase):

  @parameterized.parameters((0.5, 0.0, 3), (0.3, 1e-3, 4), (1.0, 0.01, 5), (0.2, 0.0, 6))
  def test_equals_brute_force(self, eps0, delta0, k):
    for eps in (0.0, 0.1, 0.5 * k * eps0, k * eps0 - 0.05, k * eps0 + 0.1):
      want = _brute_force_delta(eps0, delta0, k, max(eps, 0.0))
      got = comp.optimal_composition_delta(eps0, delta0, k, max(eps, 0.0))
      self.assertAlmostEqual(got, want, delta=1e-12)

  @parameterized.parameters((0.1, 0.0, 50), (0.05, 1e-7, 200), (0.5, 1e-4, 30))
  def test_kov_breakpoints(self, eps0, delta0, k):
    for i in (0, 1, k // 4, k // 2):
      want = _kov_breakpoint(eps0, delta0, k, i)
      got = comp.optimal_composition_delta(eps0, delta0, k, (k - 2 * i) * eps0)
      self.assertAlmostEqual(got, want, delta=1e-10 * max(want, 1e-300) + 1e-15)

  def test_between_advanced_and_truth(self):
    for e0, k in ((0.1, 100), (0.01, 10_000), (1.0, 10)):
      opt = comp.optimal_composition_epsilon(e0, 0.0, k, 1e-5)
      self.assertLessEqual(opt, comp.advanced_composition(e0, 0.0, k, 1e-5)[0])
      self.assertLessEqual(opt, comp.basic_composition(e0, 0.0, k)[0])
      # It is the exact inverse of the delta curve.
      self.assertAlmostEqual(comp.optimal_composition_delta(e0, 0.0, k, opt), 1e-5, delta=1e-12)

  def test_epsilon_vectorised_delta(self):
    eps = np.linspace(0, 3, 7)
    d = comp.optimal_composition_delta(0.1, 0.0, 100, eps)
    self.assertEqual(d.shape, (7,))
    self.assertTrue(np.all(np.diff(d) <= 0))

  def test_large_k_is_finite(self):
    e = comp.optimal_composition_epsilon(0.001, 1e-12, 100_000, 1e-5)
    self.assertTrue(0 < e < comp.advanced_composition(0.001, 1e-12, 100_000, 1e-5 / 2)[0])


class ValidationTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("eps0", lambda: comp.basic_composition(-1.0, 0.0, 2), "epsilon0"),
      ("delta0", lambda: comp.basic_composition(1.0, 1.0, 2), "delta0"),
      ("k", lambda: comp.basic_composition(1.0, 0.0, 0), "k"),
      ("k_frac", lambda: comp.advanced_composition(1.0, 0.0, 2.5, 1e-5), "k"),
      ("slack", lambda: comp.advanced_composition(1.0, 0.0, 2, 0.0), "delta_slack"),
      ("opt_delta", lambda: comp.optimal_composition_epsilon(1.0, 0.0, 2, 1.0), "delta"),
      ("opt_floor", lambda: comp.optimal_composition_epsilon(1.0, 0.01, 10, 0.05), "delta"),
      ("opt_eps", lambda: comp.optimal_composition_delta(1.0, 0.0, 2, -1.0), "epsilon"),
  )
  def test_bad_input(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


if __name__ == "__main__":
  absltest.main()
