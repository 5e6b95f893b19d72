"""Tests for dpjax.accounting.bounded_range: closed forms, limits, known bounds, brute force."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import special

from dpjax.accounting import bounded_range as br
from dpjax.accounting import composition


def _renyi(p, q, a):
  """D_a(P || Q) of finite pmfs p, q [K] (all entries > 0)."""
  return special.logsumexp(a * np.log(p) + (1 - a) * np.log(q)) / (a - 1)


class BoundedRangeTest(parameterized.TestCase):

  @parameterized.parameters(0.05, 0.3, 1.0, 3.0, 10.0)
  def test_kl_is_the_limit_at_order_one(self, eps):
    got = float(br.bounded_range_rdp(eps, [1.0 + 1e-7])[0])
    self.assertAlmostEqual(got / br.bounded_range_kl(eps), 1.0, delta=1e-5)

  @parameterized.parameters(0.05, 0.3, 1.0, 3.0)
  def test_kl_closed_form_is_the_max_over_two_point_pairs(self, eps):
    # KL(P_t || Q_t) = t - eps (e^t - 1) / (e^eps - 1), maximised by brute force in t.
    t = np.linspace(0.0, eps, 200_001)
    kl = t - eps * np.expm1(t) / math.expm1(eps)
    self.assertGreaterEqual(br.bounded_range_kl(eps), float(kl.max()) - 1e-15)
    self.assertAlmostEqual(br.bounded_range_kl(eps), float(kl.max()), delta=1e-9)

  @parameterized.parameters(0.1, 0.5, 2.0, 6.0)
  def test_below_pure_dp_and_zcdp_and_tends_to_eps(self, eps):
    a = np.array([1.01, 1.5, 2.0, 4.0, 16.0, 256.0])
    got = br.bounded_range_rdp(eps, a)
    self.assertTrue(np.all(got <= composition.pure_dp_rdp(eps, a) * (1 + 1e-12)))
    self.assertTrue(np.all(got <= a * eps * eps / 8 * (1 + 1e-9)))   # Cesar & Rogers 2021
    self.assertTrue(np.all(np.diff(got) >= -1e-12))                   # nondecreasing in alpha
    self.assertAlmostEqual(float(br.bounded_range_rdp(eps, [1e7])[0]), eps, delta=1e-5 * eps + 1e-6)

  @parameterized.parameters(0.3, 1.0, 4.0)
  def test_exponential_mechanism_instances_stay_below_and_the_max_is_reached(self, eps):
    # Exponential mechanism exp(eps u / (2 Delta)) on random utilities of sensitivity 1:
    # every neighbour pair's Renyi divergence is below the curve, and the two-point pair
    # attaining the maximum (a brute-force grid in t) meets it.
    rng = np.random.default_rng(0)
    a = np.array([1.5, 2.0, 5.0, 20.0])
    curve = br.bounded_range_rdp(eps, a)
    worst = np.zeros_like(a)
    for _ in range(300):
      k = int(rng.integers(2, 6))
      u = rng.uniform(0, 3, k)
      u2 = u + rng.uniform(-1, 1, k)
      p = special.softmax(eps * u / 2)
      q = special.softmax(eps * u2 / 2)
      worst = np.maximum(worst, [_renyi(p, q, ai) for ai in a])
    self.assertTrue(np.all(worst <= curve * (1 + 1e-9)))
    t = np.linspace(1e-9, eps - 1e-9, 100_001)
    p1 = (math.exp(eps) - np.exp(t)) / math.expm1(eps)
    for i, ai in enumerate(a):
      vals = np.logaddexp(np.log(p1) + (ai - 1) * t, np.log1p(-p1) + (ai - 1) * (t - eps))
      brute = float(vals.max()) / (ai - 1)   # a grid: at most the true maximum
      self.assertGreaterEqual(float(curve[i]), brute * (1 - 1e-13))
      self.assertAlmostEqual(brute / float(curve[i]), 1.0, delta=1e-8)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "epsilon"):
      br.bounded_range_rdp(0.0, [2.0])
    with self.assertRaisesRegex(ValueError, "orders"):
      br.bounded_range_rdp(1.0, [0.5])
    with self.assertRaisesRegex(ValueError, "epsilon"):
      br.bounded_range_kl(math.inf)


if __name__ == "__main__":
  absltest.main()
