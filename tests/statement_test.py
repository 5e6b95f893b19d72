"""Tests for dpjax.accounting.statement: the cost of a statement stays bounded."""

import math
from unittest import mock

from absl.testing import absltest

from dpjax.accounting import pld_dpsgd, pld_grid, statement


class PrivacyStatementCostTest(absltest.TestCase):

  def test_int32_max_steps_is_a_named_error_within_the_work_budget(self):
    calls, real = [], pld_grid._cyclic_power  # pylint: disable=protected-access

    def power(probs, k, n_fft, shift, width):
      calls.append((width, k))
      return real(probs, k, n_fft, shift, width)

    with mock.patch.object(pld_grid, "_cyclic_power", power):
      with self.assertRaisesRegex(pld_grid.GridTooLarge, "num_steps = 2147483647"):
        statement.privacy_statement(2.0, 0.1, 2**31 - 1, 1000, deltas=(1e-5,), fprs=(0.1,),
                                    pld_rtol=1e-2)
    for width, k in calls:   # every FFT composition stayed inside the budget
      self.assertLessEqual(width * math.log2(k), pld_grid.MAX_WORK)

  def test_rows_are_the_accountants_bounds(self):
    # eps per delta: the PLD row is dpsgd_epsilon_bound, never below it; RDP is an upper bound
    s = statement.privacy_statement(1.0, 0.01, 1000, 60000, deltas=(1e-5,), fprs=(0.1,),
                                    pld_rtol=1e-3)
    ref = pld_dpsgd.dpsgd_epsilon_bound(1.0, 0.01, 1000, 1e-5, rtol=1e-3)
    self.assertEqual(s.rows[0].pld_epsilon, ref.value)
    self.assertGreaterEqual(s.rows[0].rdp_epsilon, ref.value - ref.error)


if __name__ == "__main__":
  absltest.main()
