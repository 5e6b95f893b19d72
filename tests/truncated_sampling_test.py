"""Tests for dpjax.accounting.truncated_sampling: the uncapped limit, sandwich bounds, the
binomial cut probability, dp_accounting's truncated event (optional oracle) and a Monte
Carlo check of the cut branch's keep rate."""

import itertools
import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import signal, stats

from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from dpjax.accounting import pld, rdp
from dpjax.accounting import truncated_sampling as ts

try:
  from dp_accounting.pld import privacy_loss_distribution as dpa_pld
except ImportError:  # pragma: no cover - optional oracle
  dpa_pld = None

_ORDERS = np.asarray(rdp.DEFAULT_ORDERS)


def _output_law(grads, q, b):
  """{sum of the kept gradients: probability} of one truncated Poisson draw over `grads`
  (every draw pattern, and every kept B-subset of an over-full draw, enumerated)."""
  law = {}
  n = len(grads)
  for mask in itertools.product((0, 1), repeat=n):
    drawn = [g for g, m in zip(grads, mask) if m]
    p = q ** len(drawn) * (1 - q) ** (n - len(drawn))
    kept = (list(itertools.combinations(drawn, b)) if len(drawn) > b else [tuple(drawn)])
    for sub in kept:
      law[sum(sub)] = law.get(sum(sub), 0.0) + p / len(kept)
  return law


def _composed_delta(p, p2, sigma, t, epsilons):
  """delta(eps) of t independent releases of the Gaussian mixtures p against p2 ({mean:
  weight}, noise sigma), for each eps: the loss on a fine output grid, rounded down to
  multiples of 1e-3 (so a lower estimate of the exact value), convolved t times."""
  means = list(p) + list(p2)
  y = np.arange(min(means) - 14 * sigma, max(means) + 14 * sigma, 2e-4)
  dens = [sum(w * np.exp(-0.5 * ((y - m) / sigma) ** 2) for m, w in law.items())
          for law in (p, p2)]                 # the common factor 1 / (sigma sqrt(2 pi)) below
  keep = dens[0] > 0
  loss = np.log(dens[0][keep]) - np.log(dens[1][keep])
  mass = dens[0][keep] * 2e-4 / (sigma * math.sqrt(2 * math.pi))
  idx = np.floor(loss / 1e-3).astype(int)
  lo = idx.min()
  one = np.bincount(idx - lo, weights=mass)
  total = one
  for _ in range(t - 1):
    total = np.clip(signal.fftconvolve(total, one), 0.0, None)
  values = (np.arange(total.size) + t * lo) * 1e-3
  return [float(np.sum(total * np.clip(1.0 - np.exp(e - values), 0.0, None)))
          for e in epsilons]


class TruncatedSamplingTest(parameterized.TestCase):

  def test_a_cap_never_reached_is_the_subsampled_gaussian(self):
    self.assertEqual(ts.cut_probability(0.01, 1000, 1001), 0.0)
    np.testing.assert_array_equal(ts.truncated_subsampled_gaussian_rdp(1.0, 0.01, 1000, 1001,
                                                                       _ORDERS),
                                  rdp.subsampled_gaussian_rdp(0.01, 1.0, _ORDERS))
    a = ts.truncated_subsampled_gaussian_pld(1.0, 0.01, 1000, 1001, 1e-3).self_compose(50)
    b = pld.gaussian_pld(1.0, 0.01, value_discretization=1e-3).self_compose(50)
    self.assertEqual(a.epsilon(1e-5), b.epsilon(1e-5))

  @parameterized.parameters((0.01, 1000, 12), (0.3, 50, 10), (1e-3, 10**6, 1000), (0.5, 4, 2))
  def test_branches_match_direct_sums(self, q, n, b):
    # the closed forms against sums over N ~ Binomial(n - 1, q) term by term
    k = np.arange(b, n)
    pk = stats.binom.pmf(k, n - 1, q)
    cut = pk.sum()
    rate = (pk * q * b / (k + 1.0)).sum() / cut
    kept_z = (pk * q * b / (k + 1.0)).sum()
    rho = (pk * q * b * b / ((k + 1.0) * (k + 2.0))).sum() / (pk * b / (k + 1.0)).sum()
    w, r, c = ts.branches(q, n, b, "removal")
    np.testing.assert_allclose(w, [1.0 - cut, cut], rtol=1e-9)
    np.testing.assert_allclose(r, [q, rate], rtol=1e-9)
    self.assertGreaterEqual(r[1], rate)                        # rounded up
    w, r, c = ts.branches(q, n, b)
    edge = q * stats.binom.pmf(b - 1, n - 1, q)
    np.testing.assert_allclose(w, [1.0 - cut - edge, edge, cut - kept_z, kept_z], rtol=1e-9)
    np.testing.assert_allclose(r, [q, q, rate, max(rate, rho)], rtol=1e-9)
    self.assertEqual(c.tolist(), [1.0, 2.0, 2.0, 2.0])
    self.assertAlmostEqual(w.sum(), 1.0, delta=1e-12)
    self.assertTrue(np.all(r[1:] <= q))

  @parameterized.parameters("both", "removal")
  def test_never_below_the_exact_delta_of_enumerated_datasets(self, neighbours):
    # 1-D, C = 1: every kept subset of every draw enumerated, the output law of each dataset
    # a Gaussian mixture; delta(eps) of T steps (losses rounded down: a lower estimate of
    # the exact value) never above our bound, for records of gradient -1, 0 or +1 beside x
    sigma, tol = 1.0, 1e-9
    for q, n, b, t in ((0.5, 4, 2, 1), (0.5, 4, 2, 3), (0.3, 6, 2, 2), (0.9, 5, 3, 2),
                       (1.0, 5, 2, 1)):       # q = 1: every step cut, no uncut branch
      ours = ts.truncated_subsampled_gaussian_pld(sigma, q, n, b, 1e-4, neighbours=neighbours)
      ours = ours.self_compose(t)
      sizes = (n,) if neighbours == "removal" else (n, n + 1)
      for size in sizes:                      # the dataset holding x has `size` records
        for others in ([-1.0] * (size - 1), [0.0] * (size - 1),
                       [-1.0, 1.0] * size):
          others = others[:size - 1]
          with_x, without = _output_law(others + [1.0], q, b), _output_law(others, q, b)
          for p, p2 in ((with_x, without), (without, with_x)):
            exact = _composed_delta(p, p2, sigma, t, (0.5, 1.0, 2.0))
            for eps, d in zip((0.5, 1.0, 2.0), exact):
              self.assertLessEqual(d, ours.delta(eps) + tol, (q, n, b, t, size, others, eps))

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
    # the same pairs as dp_accounting's event ("removal"); "both" covers more pairs
    ours = ts.truncated_subsampled_gaussian_pld(sigma, q, n, b, 1e-4,
                                                neighbours="removal").self_compose(t)
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
