"""Tests for the neighbouring relations of dpjax.accounting.event_accounting: randomized
response under replace-special (dp_accounting, optional oracle, and the closed form),
replace-special equal to add/remove elsewhere, sampling without replacement and truncated
sampling dispatched, refusals named."""

import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from dpjax.accounting import rdp

try:
  import dp_accounting
  from dp_accounting.pld import pld_privacy_accountant as dpa_pld
  from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
except ImportError:  # pragma: no cover - optional oracle
  dp_accounting = None

_NEEDS_DPA = absltest.skipIf(dp_accounting is None, "dp_accounting is not installed")
_ORDERS = np.asarray(rdp.DEFAULT_ORDERS)


def _rr_noise(eps, k):
  """dp_accounting's noise parameter p of k-ary RR at eps: p / k = 1 / (e^eps + k - 1)."""
  return k / (math.exp(eps) + k - 1)


class ReplaceSpecialTest(parameterized.TestCase):

  @parameterized.parameters((1.0, 2), (0.5, 5), (3.0, 10))
  def test_rr_special_closed_form(self, eps, k):
    # remove direction: losses log(k e^eps / Z) (mass e^eps / Z), log(k / Z) (mass (k-1) / Z)
    z = math.exp(eps) + k - 1
    lp = [math.log(k * math.exp(eps) / z), math.log(k / z)]
    mp = [math.exp(eps) / z, (k - 1) / z]
    mq = [1.0 / k, (k - 1) / k]
    def delta_dir(losses, masses, e):
      return sum(m * max(0.0, 1 - math.exp(e - l)) for l, m in zip(losses, masses))
    e_test = 0.3 * eps
    exact = max(delta_dir(lp, mp, e_test), delta_dir([-l for l in lp], mq, e_test))
    got = ea.delta(ev.RandomizedResponseEvent(eps, k), e_test, relation=ev.REPLACE_SPECIAL,
                   value_discretization=1e-5)
    self.assertGreaterEqual(got, exact - 1e-12)
    self.assertAlmostEqual(got, exact, delta=1e-5)
    # replace-special is weaker than replace-one: never a larger delta
    self.assertLessEqual(got, ea.delta(ev.RandomizedResponseEvent(eps, k), e_test,
                                       relation=ev.REPLACE_ONE, value_discretization=1e-5))

  @_NEEDS_DPA
  @parameterized.parameters((1.0, 2, 10), (0.5, 5, 30), (2.0, 10, 3))
  def test_rr_special_matches_dp_accounting(self, eps, k, count):
    event = ev.SelfComposedEvent(ev.RandomizedResponseEvent(eps, k), count)
    theirs = dp_accounting.SelfComposedDpEvent(
        dp_accounting.RandomizedResponseDpEvent(_rr_noise(eps, k), k), count)
    acct = dpa_rdp.RdpAccountant(list(_ORDERS), dpa_rdp.NeighborRel.REPLACE_SPECIAL)
    acct.compose(theirs)
    ours_rdp = ea.rdp_curve(event, _ORDERS, ev.REPLACE_SPECIAL)[1]
    np.testing.assert_allclose(ours_rdp, acct._rdp, rtol=1e-9)   # pylint: disable=protected-access
    # dp_accounting 0.6.0's PLD accountant composes an RR event once whatever its count:
    # compared at count 1; the composition is checked against enumeration below
    pacct = dpa_pld.PLDAccountant(dpa_pld.NeighborRel.REPLACE_SPECIAL, 1e-4)
    pacct.compose(dp_accounting.RandomizedResponseDpEvent(_rr_noise(eps, k), k))
    ref = pacct.get_epsilon(1e-6)
    ours = ea.epsilon(ev.RandomizedResponseEvent(eps, k), 1e-6, relation=ev.REPLACE_SPECIAL)
    self.assertAlmostEqual(ours, ref, delta=2e-4)

  @parameterized.parameters((1.0, 2, 10), (0.5, 5, 30), (2.0, 10, 3))
  def test_rr_special_composition_is_the_binomial_sum(self, eps, k, count):
    z = math.exp(eps) + k - 1
    l1, l2 = math.log(k * math.exp(eps) / z), math.log(k / z)
    j = np.arange(count + 1)
    log_binom = np.array([math.lgamma(count + 1) - math.lgamma(i + 1)
                          - math.lgamma(count - i + 1) for i in j])
    def delta_dir(losses, log_masses, e):
      return float(np.sum(np.exp(log_masses) * np.maximum(0.0, -np.expm1(e - losses))))
    e_test = 0.5 * count * eps ** 2 / 2 + 0.1
    remove = delta_dir(j * l1 + (count - j) * l2, log_binom + j * math.log(math.exp(eps) / z)
                       + (count - j) * math.log((k - 1) / z), e_test)
    add = delta_dir(-(j * l1 + (count - j) * l2), log_binom - j * math.log(k)
                    + (count - j) * math.log((k - 1) / k), e_test)
    got = ea.delta(ev.SelfComposedEvent(ev.RandomizedResponseEvent(eps, k), count), e_test,
                   relation=ev.REPLACE_SPECIAL, value_discretization=1e-5)
    exact = max(remove, add)
    self.assertGreaterEqual(got, exact - 1e-12)
    self.assertAlmostEqual(got, exact, delta=1e-4 * exact + 1e-9)

  def test_other_events_are_accounted_as_add_remove(self):
    event = ev.ComposedEvent((ev.SelfComposedEvent(
        ev.PoissonSampledEvent(0.01, ev.GaussianEvent(1.0)), 100), ev.LaplaceEvent(3.0),
        ev.TreeAggregationEvent(2.0, 100)))
    for acc in ("rdp", "pld"):
      self.assertEqual(ea.epsilon(event, 1e-5, acc, ev.REPLACE_SPECIAL),
                       ea.epsilon(event, 1e-5, acc, ev.ADD_REMOVE))

  def test_refusals_are_named(self):
    rr = ev.RandomizedResponseEvent(1.0)
    with self.assertRaisesRegex(ev.UnsupportedEventError, "replace_special"):
      ea.epsilon(rr, 1e-5, relation=ev.ADD_REMOVE)
    wor = ev.SampledWithoutReplacementEvent(100, 10, ev.GaussianEvent(1.0))
    with self.assertRaisesRegex(ev.UnsupportedEventError, "accountant='rdp'"):
      ea.epsilon(ev.SampledWithoutReplacementEvent(100, 10, ev.ZCdpEvent(0.1)), 1e-5, "pld",
                 ev.REPLACE_ONE)
    with self.assertRaisesRegex(ev.UnsupportedEventError, "replace-one guarantee"):
      ea.epsilon(wor, 1e-5, "rdp", ev.REPLACE_SPECIAL)
    with self.assertRaisesRegex(ev.UnsupportedEventError, "Poisson sampling"):
      ea.epsilon(ev.PoissonSampledEvent(0.1, ev.LaplaceEvent(1.0)), 1e-5, "pld",
                 ev.REPLACE_ONE)
    with self.assertRaisesRegex(ValueError, "relation"):
      ev.check_relation("swap")


class WithoutReplacementEventTest(parameterized.TestCase):

  @_NEEDS_DPA
  def test_heterogeneous_composition_matches_dp_accounting(self):
    wor = ev.SampledWithoutReplacementEvent(10_000, 100, ev.GaussianEvent(1.0))
    event = ev.ComposedEvent((ev.SelfComposedEvent(wor, 500), ev.GaussianEvent(8.0)))
    acct = dpa_rdp.RdpAccountant(list(_ORDERS), dpa_rdp.NeighborRel.REPLACE_ONE)
    acct.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        10_000, 100, dp_accounting.GaussianDpEvent(1.0)), 500)
    acct.compose(dp_accounting.GaussianDpEvent(8.0))
    ours = ea.epsilon(event, 1e-6, "rdp", ev.REPLACE_ONE)
    self.assertLessEqual(ours, acct.get_epsilon(1e-6) * (1 + 1e-12))
    self.assertAlmostEqual(ours, acct.get_epsilon(1e-6), delta=1e-9)

  def test_sampling_never_raises_epsilon(self):
    for inner in (ev.GaussianEvent(2.0), ev.LaplaceEvent(1.0), ev.RandomizedResponseEvent(1.0)):
      full = ea.epsilon(ev.SelfComposedEvent(inner, 20), 1e-5, "rdp", ev.REPLACE_ONE)
      sub = ea.epsilon(ev.SelfComposedEvent(ev.SampledWithoutReplacementEvent(
          1000, 50, inner), 20), 1e-5, "rdp", ev.REPLACE_ONE)
      self.assertLess(sub, full)


if __name__ == "__main__":
  absltest.main()
