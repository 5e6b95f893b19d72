"""Tests for dpjax.accounting.subsampled_rdp: the quadrature against the closed form.

At integer orders A_alpha - 1 has a finite binomial sum; the trapezoid rule used for
fractional orders must reproduce it there (rtol 1e-10), and the vectorised grid must equal
the per-order grid. The full curve is checked against dp_accounting and mpmath in
tests/rdp_test.py.
"""

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import rdp, subsampled_rdp


class QuadratureTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("typical", 0.01, 1.0), ("small_sigma", 0.3, 0.3), ("big_sigma", 1e-3, 300.0),
      ("tiny_q", 1e-6, 2.0))
  def test_integration_path_equals_closed_form_at_integer_orders(self, q, sigma):
    orders = np.array([2.0, 3.0, 7.0, 32.0, 256.0])
    closed = subsampled_rdp._log_a_minus_1_int(q, sigma, orders)
    quad = np.array([subsampled_rdp._log_a_minus_1_frac(q, sigma, a) for a in orders])
    np.testing.assert_allclose(quad, closed, rtol=1e-10, atol=1e-10)

  def test_vectorised_grid_equals_per_order(self):
    alphas = np.array([1.01, 1.5, 2.5, 10.9, 64.5])
    for q, sigma in ((0.01, 1.0), (0.3, 0.4), (1e-5, 50.0)):
      many = subsampled_rdp._log_a_minus_1_frac_many(q, sigma, alphas)
      one = [subsampled_rdp._log_a_minus_1_frac(q, sigma, a) for a in alphas]
      np.testing.assert_allclose(many, one, rtol=1e-13, atol=1e-13)

  def test_rdp_re_exports_the_same_function(self):
    self.assertIs(rdp.subsampled_gaussian_rdp, subsampled_rdp.subsampled_gaussian_rdp)


if __name__ == "__main__":
  absltest.main()
