"""Tests for dpjax.accounting.mixture_pld: the Gaussian special cases and dp_accounting.

A two-point law {0: 1 - q, 1: q} is the Poisson-subsampled Gaussian and a one-point law
{c: 1} the Gaussian with sensitivity c (exact PLD); dp_accounting's
MixtureOfGaussiansDpEvent (optional oracle, skipped when absent) is the general check.
"""

import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import gdp, mixture_pld, pld

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


if __name__ == "__main__":
  absltest.main()
