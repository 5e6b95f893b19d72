"""accounting.smallest_noise: the one sigma search, against closed forms."""

import math

from absl.testing import absltest

from dpjax import accounting
from dpjax.accounting import bisection, gdp


class SmallestNoiseTest(absltest.TestCase):

  def test_closed_form_gaussian(self):
    # One Gaussian mechanism of sensitivity 1: eps(sigma) at delta is exact
    # (`gdp.gaussian_epsilon(delta, 1 / sigma)`); sigma for eps = 1 at delta = 1e-5 is
    # the root, met from above to rtol.
    delta = 1e-5

    def eps(s):
      return gdp.gaussian_epsilon(delta, 1.0 / s)

    s = accounting.smallest_noise(eps, 1.0, 0.5, 50.0, rtol=1e-10)
    self.assertLessEqual(eps(s), 1.0)
    self.assertGreater(eps(s * (1 - 1e-9)), 1.0 - 1e-6)
    self.assertAlmostEqual(gdp.gaussian_delta(1.0, 1.0 / s), delta, delta=1e-13)

  def test_bracket_is_widened_both_ways(self):
    for lo, hi in ((1e-3, 2e-3), (1e3, 2e3)):
      s = accounting.smallest_noise(lambda x: 10.0 / x, 2.0, lo, hi, factor=3.0, rtol=1e-12)
      self.assertAlmostEqual(s, 5.0, places=9)
      self.assertLessEqual(10.0 / s, 2.0)

  def test_answer_outside_the_limits_is_a_named_error(self):
    with self.assertRaisesRegex(ValueError, "not reached at noise multiplier 8, and the next bracket end 16 is beyond the limit 10"):
      accounting.smallest_noise(lambda x: 100.0 / x, 1.0, 1.0, 2.0, factor=2.0,
                                limits=(0.0, 10.0))
    with self.assertRaisesRegex(ValueError, "already met"):
      accounting.smallest_noise(lambda x: 1e-3 / x, 1.0, 1.0, 2.0, factor=2.0,
                                limits=(0.5, 10.0))

  def test_rtol_below_float_resolution_stops(self):
    calls = []

    def eps(s):
      calls.append(s)
      return 1.0 / s

    s = accounting.smallest_noise(eps, 0.5, 1.0, 4.0, rtol=1e-300)
    self.assertEqual(s, 2.0)
    self.assertLessEqual(len(calls), bisection.MAX_BISECTION_STEPS)

  def test_unbracketable_target_is_bounded(self):
    # eps never drops below 1: widening stops at the limit, not after forever.
    with self.assertRaisesRegex(ValueError, "not reached"):
      accounting.smallest_noise(lambda x: 1.0 + 1.0 / x, 0.5, 1.0, 2.0, factor=10.0)

  def test_bad_bracket(self):
    with self.assertRaisesRegex(ValueError, "lo must be < hi"):
      accounting.smallest_noise(lambda x: 1.0 / x, 0.5, 4.0, 1.0)
    with self.assertRaisesRegex(ValueError, "factor"):
      accounting.smallest_noise(lambda x: 1.0 / x, 0.5, 1.0, 4.0, factor=1.0)
    self.assertTrue(math.isfinite(accounting.smallest_noise(lambda x: 1.0 / x, 0.5, 1.0, 4.0)))


if __name__ == "__main__":
  absltest.main()
