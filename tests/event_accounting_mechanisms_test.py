"""Tests for the selection, tree-aggregation and mixture events of
dpjax.accounting.event_accounting: dp_accounting (optional oracle), closed forms and
properties (composition never lowers eps; Poisson subsampling never raises it).
"""

import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import bounded_range, composition, gdp, mixture_pld, rdp
from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev

try:
  from dp_accounting import dp_event as dpe
  from dp_accounting.pld import pld_privacy_accountant as dpa_pld
  from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
except ImportError:  # pragma: no cover - optional oracle
  dpe = None

_NEEDS_DPA = absltest.skipIf(dpe is None, "dp_accounting is not installed")
_INT_ORDERS = np.arange(2.0, 129.0)
_H = 1e-3


def _envelope(x):
  return np.minimum.accumulate(np.asarray(x)[::-1])[::-1]


class TreeAggregationTest(parameterized.TestCase):

  @_NEEDS_DPA
  @parameterized.parameters((1.0, [100], 1), (2.5, [100, 37], 1), (4.0, [1000], 5),
                            (0.8, [1], 3), (3.0, [255, 256], 10))
  def test_rdp_matches_dp_accounting(self, sigma, counts, epochs):
    ours_event = ev.SelfComposedEvent(ev.TreeAggregationEvent(sigma, counts), epochs)
    # dp_accounting names the relation REPLACE_SPECIAL (a record's leaf set to zero).
    acct = dpa_rdp.RdpAccountant(orders=list(rdp.DEFAULT_ORDERS),
                                 neighboring_relation=dpa_rdp.NeighborRel.REPLACE_SPECIAL)
    acct.compose(dpe.SingleEpochTreeAggregationDpEvent(sigma, counts), epochs)
    _, curve = ea.rdp_curve(ours_event)
    np.testing.assert_allclose(curve, acct._rdp, rtol=1e-12)  # pylint: disable=protected-access
    for delta in (1e-5, 1e-9):
      self.assertAlmostEqual(ea.epsilon(ours_event, delta, "rdp") / acct.get_epsilon(delta),
                             1.0, delta=1e-9)

  @parameterized.parameters((1.0, [100], 1), (4.0, [1000, 10], 5))
  def test_pld_is_the_exact_gaussian(self, sigma, counts, epochs):
    e = ev.SelfComposedEvent(ev.TreeAggregationEvent(sigma, counts), epochs)
    depth = math.ceil(math.log2(max(counts) + 1))
    mu = math.sqrt(depth * epochs) / sigma
    for delta in (1e-5, 1e-9):
      self.assertAlmostEqual(ea.epsilon(e, delta, "pld"), gdp.gaussian_epsilon(delta, mu),
                             delta=1e-9)
      self.assertLessEqual(ea.epsilon(e, delta, "pld"), ea.epsilon(e, delta, "rdp") + 1e-12)

  def test_depth(self):
    for n, depth in ((1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4), (1023, 10), (1024, 11)):
      self.assertEqual(ev.TreeAggregationEvent(1.0, n).depth, depth)
      self.assertEqual(depth, math.floor(math.log2(n)) + 1)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "step_counts"):
      ev.TreeAggregationEvent(1.0, [10, 0])
    with self.assertRaisesRegex(ValueError, "step_counts"):
      ev.TreeAggregationEvent(1.0, [])
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      ev.TreeAggregationEvent(0.0, 10)
    with self.assertRaisesRegex(ValueError, "step_counts"):
      rdp.tree_aggregation_rdp(1.0, [0], [2.0])


class RepeatAndSelectTest(parameterized.TestCase):

  @_NEEDS_DPA
  @parameterized.product(shape=(0.0, 1.0, 3.0, math.inf), mean=(3.0, 40.0))
  def test_matches_dp_accounting(self, shape, mean):
    inner = ev.SelfComposedEvent(ev.PoissonSampledEvent(0.02, ev.GaussianEvent(1.5)), 300)
    ours = ev.RepeatAndSelectEvent(inner, mean, shape)
    acct = dpa_rdp.RdpAccountant(orders=list(_INT_ORDERS))
    acct.compose(dpe.RepeatAndSelectDpEvent(dpe.SelfComposedDpEvent(
        dpe.PoissonSampledDpEvent(0.02, dpe.GaussianDpEvent(1.5)), 300), mean, shape))
    _, curve = ea.rdp_curve(ours, _INT_ORDERS)
    np.testing.assert_allclose(curve, _envelope(acct._rdp), rtol=1e-6)  # pylint: disable=protected-access
    self.assertAlmostEqual(ea.epsilon(ours, 1e-5, "rdp", orders=_INT_ORDERS)
                           / acct.get_epsilon(1e-5), 1.0, delta=1e-6)

  def test_equals_the_curve_function_and_is_rdp_only(self):
    inner = ev.ComposedEvent((ev.GaussianEvent(3.0), ev.ExponentialMechanismEvent(0.5)))
    e = ev.RepeatAndSelectEvent(inner, 10.0, "poisson")
    o, base = ea.rdp_curve(inner)
    np.testing.assert_array_equal(ea.rdp_curve(e)[1], rdp.repeat_and_select_rdp(
        o, base, mean_runs=10.0, shape=math.inf))
    with self.assertRaisesRegex(ev.UnsupportedEventError, "RepeatAndSelectEvent"):
      ea.epsilon(e, 1e-5, "pld")
    bad = ev.RepeatAndSelectEvent(ev.EpsilonDeltaEvent(1.0, 1e-6), 3.0, 1.0)
    with self.assertRaisesRegex(ev.UnsupportedEventError, "infinite"):
      ea.epsilon(bad, 1e-5, "rdp")
    with self.assertRaisesRegex(ValueError, "mean_runs"):
      ev.RepeatAndSelectEvent(inner, 0.5, 1.0)


class SelectionEventsTest(parameterized.TestCase):

  @parameterized.parameters(0.1, 1.0, 3.0)
  def test_curves_and_support(self, eps):
    o = rdp.DEFAULT_ORDERS
    for relation in ev.RELATIONS:
      em = ea.rdp_curve(ev.ExponentialMechanismEvent(eps), o, relation)[1]
      pf = ea.rdp_curve(ev.PermuteAndFlipEvent(eps), o, relation)[1]
      np.testing.assert_array_equal(em, bounded_range.bounded_range_rdp(eps, o))
      np.testing.assert_array_equal(pf, composition.pure_dp_rdp(eps, o))
      for e in (ev.ExponentialMechanismEvent(eps), ev.PermuteAndFlipEvent(eps)):
        # one pure eps-DP release: delta(eps) = 0 and eps(delta) <= eps
        self.assertLessEqual(ea.delta(e, eps * (1 + 1e-9), "pld", relation,
                                      value_discretization=1e-4), 1e-12)
        self.assertLessEqual(ea.epsilon(e, 1e-6, "pld", relation, value_discretization=1e-4),
                             eps + 1e-4)
        self.assertEqual(ev.pure_epsilon(e), eps)

  def test_bounded_range_beats_pure_dp_under_composition(self):
    em = ev.SelfComposedEvent(ev.ExponentialMechanismEvent(0.2), 200)
    pf = ev.SelfComposedEvent(ev.PermuteAndFlipEvent(0.2), 200)
    self.assertLess(ea.epsilon(em, 1e-6, "rdp"), ea.epsilon(pf, 1e-6, "rdp"))

  def test_sampled_pure_dp_pld_reaches_the_amplified_epsilon(self):
    # A Poisson-sampled eps-DP release (the (eps, 0) pair mixture) is
    # log(1 + q (e^eps - 1))-DP, tight: delta is 0 one grid step above it, > 0 below.
    q, eps, h = 0.1, 1.0, 1e-4
    e = ev.PoissonSampledEvent(q, ev.PermuteAndFlipEvent(eps))
    amplified = math.log1p(q * math.expm1(eps))
    self.assertLessEqual(ea.delta(e, amplified + 2 * h, "pld", value_discretization=h), 1e-12)
    self.assertGreater(ea.delta(e, amplified * 0.9, "pld", value_discretization=h), 0.0)


class MixtureOfGaussiansEventTest(absltest.TestCase):

  @_NEEDS_DPA
  def test_matches_dp_accounting(self):
    e = ev.ComposedEvent((
        ev.SelfComposedEvent(ev.MixtureOfGaussiansEvent(2.0, (0, 1, 2), (0.6, 0.3, 0.1)), 20),
        ev.GaussianEvent(4.0)))
    acct = dpa_pld.PLDAccountant(value_discretization_interval=_H)
    acct.compose(dpe.MixtureOfGaussiansDpEvent(2.0, [0, 1, 2], [0.6, 0.3, 0.1]), 20)
    acct.compose(dpe.GaussianDpEvent(4.0))
    for delta in (1e-3, 1e-6):
      self.assertAlmostEqual(ea.epsilon(e, delta, value_discretization=_H)
                             / acct.get_epsilon(delta), 1.0, delta=1e-5)

  def test_support(self):
    e = ev.MixtureOfGaussiansEvent(1.0, (0.0, 1.0), (0.9, 0.1))
    with self.assertRaisesRegex(ev.UnsupportedEventError, "add_remove"):
      ea.epsilon(e, 1e-5, "pld", ev.REPLACE_ONE)
    with self.assertRaisesRegex(ev.UnsupportedEventError, "add_remove"):
      ea.epsilon(e, 1e-5, "rdp", ev.REPLACE_ONE)
    orders = np.array([2.0, 8.0, 32.0])   # the RDP curve is `mixture_of_gaussians_rdp`'s
    np.testing.assert_array_equal(ea.rdp_curve(e, orders)[1], mixture_pld.mixture_of_gaussians_rdp(
        1.0, (0.0, 1.0), (0.9, 0.1), orders))
    with self.assertRaisesRegex(ValueError, "probs"):
      ev.MixtureOfGaussiansEvent(1.0, (0.0, 1.0), (0.9, 0.2))


class ReplaceOnePoissonGaussianTest(parameterized.TestCase):

  @parameterized.parameters((1.0, 0.1, 100), (0.6, 0.02, 1000))
  def test_event_uses_the_replace_one_pair(self, sigma, q, steps):
    from dpjax.accounting import mixture_pld  # pylint: disable=g-import-not-at-top
    e = ev.SelfComposedEvent(ev.PoissonSampledEvent(q, ev.GaussianEvent(sigma)), steps)
    got = ea.epsilon(e, 1e-6, "pld", ev.REPLACE_ONE, value_discretization=_H)
    ref = mixture_pld.replace_one_subsampled_gaussian_pld(
        sigma, q, value_discretization=_H).self_compose(steps).epsilon(1e-6)
    self.assertEqual(got, ref)
    # Sampling never raises eps: below the unsampled Gaussian under replace-one.
    full = ea.epsilon(ev.SelfComposedEvent(ev.GaussianEvent(sigma), steps), 1e-6, "pld",
                      ev.REPLACE_ONE)
    self.assertLessEqual(got, full + 1e-9)
    # RDP: the same pair's curve (`replace_one_subsampled_gaussian_rdp`), looser than the PLD.
    orders = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    curve = ea.rdp_curve(e, orders, ev.REPLACE_ONE)[1]
    np.testing.assert_array_equal(
        curve, steps * mixture_pld.replace_one_subsampled_gaussian_rdp(sigma, q, orders))
    self.assertLess(got, ea.epsilon(e, 1e-6, "rdp", ev.REPLACE_ONE, orders=orders))


class PropertiesTest(parameterized.TestCase):
  """Over random leaves: adding a release never lowers eps; Poisson sampling never raises it."""

  def _leaves(self, rng):
    return [ev.GaussianEvent(float(rng.uniform(0.5, 5))),
            ev.LaplaceEvent(float(rng.uniform(0.5, 5))),
            ev.ExponentialMechanismEvent(float(rng.uniform(0.05, 1))),
            ev.PermuteAndFlipEvent(float(rng.uniform(0.05, 1))),
            ev.TreeAggregationEvent(float(rng.uniform(1, 8)), int(rng.integers(1, 500))),
            ev.DiscreteLaplaceEvent(float(rng.uniform(0.2, 1)))]

  @parameterized.parameters("rdp", "pld")
  def test_composition_is_monotone(self, accountant):
    rng = np.random.default_rng(1)
    for _ in range(3):
      leaves = self._leaves(rng)
      rng.shuffle(leaves)
      prev = 0.0
      for k in range(1, len(leaves) + 1):
        cur = ea.epsilon(ev.ComposedEvent(tuple(leaves[:k])), 1e-6, accountant,
                         value_discretization=_H if accountant == "pld" else None)
        self.assertGreaterEqual(cur, prev - 1e-9, f"{leaves[:k]}")
        prev = cur

  @parameterized.parameters("rdp", "pld")
  def test_poisson_sampling_never_raises_eps(self, accountant):
    rng = np.random.default_rng(2)
    inners = ([ev.GaussianEvent(float(s)) for s in rng.uniform(0.6, 4, 3)]
              if accountant == "rdp" else
              [ev.GaussianEvent(1.5), ev.LaplaceEvent(1.0), ev.ExponentialMechanismEvent(0.8),
               ev.PermuteAndFlipEvent(2.0), ev.DiscreteLaplaceEvent(0.5)])
    for inner in inners:
      full = ea.epsilon(ev.SelfComposedEvent(inner, 10), 1e-6, accountant,
                        value_discretization=_H if accountant == "pld" else None)
      prev = full
      for q in (0.9, 0.5, 0.1, 0.01):
        cur = ea.epsilon(ev.SelfComposedEvent(ev.PoissonSampledEvent(q, inner), 10), 1e-6,
                         accountant, value_discretization=_H if accountant == "pld" else None)
        self.assertLessEqual(cur, prev + 1e-9, f"{inner} q={q}")
        prev = cur


if __name__ == "__main__":
  absltest.main()
