"""Tests for dpjax.accounting.pld_dpsgd: the minimum with dp_accounting's PLD."""

import sys
from unittest import mock

from absl.testing import absltest, parameterized

from dpjax.accounting import pld_dpsgd

try:
  import dp_accounting
except ImportError:  # pragma: no cover - optional oracle
  dp_accounting = None


class NeverLooserTest(parameterized.TestCase):

  @absltest.skipIf(dp_accounting is None, "dp_accounting is not installed")
  @parameterized.parameters((1.0, 0.01, 1000, 1e-5), (5.0, 0.001, 100, 1e-6),
                            (0.8, 0.1, 50, 1e-3))
  def test_is_the_minimum_of_two_upper_bounds(self, sigma, q, t, delta):
    r = pld_dpsgd.dpsgd_epsilon_never_looser(sigma, q, t, delta)
    acct = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acct.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), t)
    ref = acct.get_epsilon(delta)
    self.assertEqual(r.reference, ref)
    self.assertEqual(r.ours, pld_dpsgd.dpsgd_epsilon(sigma, q, t, delta))
    self.assertEqual(r.value, min(r.ours, ref))
    self.assertEqual(r.winner, "dp_accounting" if ref < r.ours else "dpjax")
    # both are upper bounds of the same quantity; at eps ~ 1e-2 dp_accounting's fixed
    # grid (1e-4) is coarse next to eps, so they agree only to a few per cent there
    self.assertAlmostEqual(r.ours, ref, delta=(5e-2 if ref < 0.05 else 1e-4) * ref)

  def test_without_dp_accounting_the_answer_is_ours(self):
    with mock.patch.dict(sys.modules, {"dp_accounting": None}):
      r = pld_dpsgd.dpsgd_epsilon_never_looser(1.0, 0.01, 100, 1e-5)
    self.assertIsNone(r.reference)
    self.assertEqual(r.winner, "dpjax")
    self.assertEqual(r.value, pld_dpsgd.dpsgd_epsilon(1.0, 0.01, 100, 1e-5))

  def test_bad_input_is_named(self):
    with self.assertRaisesRegex(ValueError, "value_discretization"):
      pld_dpsgd.dpsgd_epsilon_never_looser(1.0, 0.01, 10, 1e-5, value_discretization=0.0)
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      pld_dpsgd.dpsgd_epsilon_never_looser(-1.0, 0.01, 10, 1e-5)


if __name__ == "__main__":
  absltest.main()
