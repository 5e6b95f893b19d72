"""Tests for dpjax.accounting.without_replacement: dp_accounting's WOR RDP (optional oracle),
the gamma = 1 and monotonicity properties, and named errors."""

import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from dpjax.accounting import rdp
from dpjax.accounting import without_replacement as wr

try:
  import dp_accounting
  from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
except ImportError:  # pragma: no cover - optional oracle
  dp_accounting = None

_NEEDS_DPA = absltest.skipIf(dp_accounting is None, "dp_accounting is not installed")
_ORDERS = np.asarray(rdp.DEFAULT_ORDERS)


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


if __name__ == "__main__":
  absltest.main()
