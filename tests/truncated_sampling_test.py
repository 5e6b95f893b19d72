"""Tests for dpjax.accounting.truncated_sampling: the uncapped limit, sandwich bounds, the
binomial cut probability, dp_accounting's truncated event (optional oracle) and a Monte
Carlo check of the cut branch's keep rate."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats

from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from dpjax.accounting import pld, rdp
from dpjax.accounting import truncated_sampling as ts

try:
  from dp_accounting.pld import privacy_loss_distribution as dpa_pld
except ImportError:  # pragma: no cover - optional oracle
  dpa_pld = None

_ORDERS = np.asarray(rdp.DEFAULT_ORDERS)


class TruncatedSamplingTest(parameterized.TestCase):

  def test_a_cap_never_reached_is_the_subsampled_gaussian(self):
    self.assertEqual(ts.cut_probability(0.01, 1000, 1001), 0.0)
    np.testing.assert_array_equal(ts.truncated_subsampled_gaussian_rdp(1.0, 0.01, 1000, 1001,
                                                                       _ORDERS),
                                  rdp.subsampled_gaussian_rdp(0.01, 1.0, _ORDERS))
    a = ts.truncated_subsampled_gaussian_pld(1.0, 0.01, 1000, 1001, 1e-3).self_compose(50)
    b = pld.gaussian_pld(1.0, 0.01, value_discretization=1e-3).self_compose(50)
    self.assertEqual(a.epsilon(1e-5), b.epsilon(1e-5))

  @parameterized.parameters((0.01, 1000, 12), (0.3, 50, 10), (1e-3, 10**6, 1000))
  def test_branches_are_the_binomial_law(self, q, n, b):
    w, r, c = ts.branches(q, n, b)
    self.assertAlmostEqual(w.sum(), 1.0, delta=1e-12)
    self.assertAlmostEqual(1.0 - w[0], stats.binom.sf(b - 1, n, q), delta=1e-12)
    self.assertEqual((r[0], c[0]), (q, 1.0))
    self.assertTrue(np.all(c[1:] == 2.0))
    # the edge branch (N = B - 1 others drawn, and the added one): rate q, weight
    # q P(Binomial(n - 1, q) = B - 1); the groups after it: rates <= q B / (B + 1)
    self.assertEqual(r[1], q)
    self.assertAlmostEqual(w[1], q * stats.binom.pmf(b - 1, n - 1, q), delta=1e-15)
    self.assertTrue(np.all(r[2:] <= q * b / (b + 1.0)))

  def test_covers_both_kinds_of_neighbour(self):
    # one step: the revealed-branch bound of each scenario alone (n - 1 others when a
    # record is removed, n when one is added) never exceeds the combined bound
    for s, q, n, b in ((1.0, 0.3, 10, 2), (1.0, 0.5, 20, 10)):
      ours = ts.truncated_subsampled_gaussian_pld(s, q, n, b, 1e-3)
      for m in (n - 1, n):
        pk = stats.binom.pmf(np.arange(m + 1), m, q)
        parts = [(pk[:b].sum(), q, 1.0)] + [(pk[k], q * b / (k + 1.0), 2.0)
                                            for k in range(b, m + 1)]
        plds = [(w, pld.gaussian_pld(s / c, r, value_discretization=1e-3))
                for w, r, c in parts]
        for e in (0.5, 2.0):
          self.assertLessEqual(sum(w * d.delta(e) for w, d in plds), ours.delta(e) + 1e-12)

  @parameterized.parameters((1.0, 0.01, 1000, 12, 100), (2.0, 0.1, 100, 10, 50),
                            (1.1, 256 / 60000, 60000, 288, 300))
  def test_between_uncapped_at_sensitivity_one_and_two(self, sigma, q, n, b, t):
    # every branch is dominated by the subsampled Gaussian at rate q and sensitivity 2C;
    # the (1 - p_cut)-weighted uncapped branch alone bounds delta from below
    cap = ea.epsilon(ev.SelfComposedEvent(ev.TruncatedPoissonSampledGaussianEvent(
        sigma, q, n, b), t), 1e-5, value_discretization=1e-3)
    two = pld.gaussian_pld(sigma / 2.0, q, value_discretization=1e-3).self_compose(t)
    one = pld.gaussian_pld(sigma, q, value_discretization=1e-3).self_compose(t)
    self.assertLessEqual(cap, two.epsilon(1e-5))
    self.assertGreaterEqual(cap, one.epsilon(1e-5 / (1.0 - ts.cut_probability(q, n, b)) ** t)
                            if (1.0 - ts.cut_probability(q, n, b)) ** t > 1e-5 else 0.0)
    r_cap = ea.epsilon(ev.SelfComposedEvent(ev.TruncatedPoissonSampledGaussianEvent(
        sigma, q, n, b), t), 1e-5, accountant="rdp")
    self.assertLessEqual(r_cap, rdp.rdp_to_epsilon(
        _ORDERS, t * rdp.subsampled_gaussian_rdp(q, sigma / 2.0, _ORDERS), 1e-5)[0])
    self.assertGreaterEqual(r_cap, cap * (1 - 1e-3))   # RDP is the looser of the two here

  @absltest.skipIf(dpa_pld is None, "dp_accounting is not installed")
  @parameterized.parameters((1.0, 0.01, 1000, 12, 100), (1.0, 0.01, 1000, 15, 1000),
                            (1.1, 256 / 60000, 60000, 288, 1000), (2.0, 0.1, 100, 10, 50))
  def test_not_above_dp_accounting(self, sigma, q, n, b, t):
    ours = ts.truncated_subsampled_gaussian_pld(sigma, q, n, b, 1e-4).self_compose(t)
    theirs = dpa_pld.from_truncated_subsampled_gaussian_mechanism(n, q, b, sigma, 1e-4)
    ref = theirs.self_compose(t).get_epsilon_for_delta(1e-5)
    self.assertLessEqual(ours.epsilon(1e-5), ref)
    self.assertGreater(ours.epsilon(1e-5), 0.75 * ref)

  def test_keep_rate_by_monte_carlo(self):
    # the cut branch's rate: P(x kept | x drawn, N = k) = B / (k + 1) <= B / (B + 1)
    rng = np.random.default_rng(0)
    n, q, b, trials = 40, 0.4, 15, 20000
    kept = hits = 0
    for _ in range(trials):
      others = rng.random(n) < q
      k = int(others.sum())
      if k < b:
        continue
      hits += 1
      kept += rng.permutation(k + 1)[:b].__contains__(0)
    rate = kept / hits
    expected = sum(stats.binom.pmf(k, n, q) * b / (k + 1) for k in range(b, n + 1)) / \
        stats.binom.sf(b - 1, n, q)
    self.assertAlmostEqual(rate, expected, delta=5 * math.sqrt(rate * (1 - rate) / hits))
    self.assertLessEqual(expected, b / (b + 1.0))

  def test_composition_is_monotone(self):
    step = ev.TruncatedPoissonSampledGaussianEvent(1.0, 0.02, 500, 12)
    for acc, kw in (("pld", {"value_discretization": 1e-3}), ("rdp", {})):
      eps = [ea.epsilon(ev.SelfComposedEvent(step, t), 1e-5, acc, **kw) for t in (1, 10, 100)]
      self.assertTrue(eps[0] < eps[1] < eps[2], (acc, eps))
      both = ea.epsilon(ev.ComposedEvent((ev.SelfComposedEvent(step, 10),
                                          ev.GaussianEvent(5.0))), 1e-5, acc, **kw)
      self.assertGreater(both, eps[1])

  def test_bad_input_is_named(self):
    with self.assertRaisesRegex(ValueError, "max_batch_size"):
      ts.truncated_subsampled_gaussian_pld(1.0, 0.1, 100, 0)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      ts.truncated_subsampled_gaussian_rdp(1.0, 1.5, 100, 10, [2.0])
    with self.assertRaisesRegex(ev.UnsupportedEventError, "add/remove"):
      ea.epsilon(ev.TruncatedPoissonSampledGaussianEvent(1.0, 0.1, 100, 10), 1e-5,
                 relation=ev.REPLACE_ONE)


if __name__ == "__main__":
  absltest.main()
