"""Tests for the budget helpers of lecture exercise 6.

`mechanisms.grouped_rates` (per-group rates under parallel composition) against its
noiseless histograms and, by Monte Carlo, against the delta-method sd it reports;
`composition.pure_dp_rdp` against exact Renyi divergences of eps-DP and eps-BR pairs;
`composition.group_privacy` against the exact privacy profiles of Laplace and
Gaussian mechanisms on a group of k records.
"""

import math

import jax
import numpy as np
from absl.testing import absltest

from dpjax import mechanisms, selection
from dpjax.accounting import composition, gdp

_ORDERS = np.array([1.1, 1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 64.0, 256.0])


def _renyi(p, q, alpha):
  """Exact D_alpha(p || q) of two discrete distributions (float64)."""
  lp, lq = np.log(np.asarray(p, np.float64)), np.log(np.asarray(q, np.float64))
  return np.logaddexp.reduce(alpha * lp + (1.0 - alpha) * lq) / (alpha - 1.0)


class GroupedRatesTest(absltest.TestCase):

  def test_noiseless_limit_is_the_histograms(self):
    # eps = 1e4: the Laplace scale is 1e-4 (plus a grid of at most 2^-10), so the
    # released vectors are the exact histograms; values are clipped to [0, 1].
    groups = np.array([0, 2, 2, 2, 1, 0, 2])
    values = np.array([1.0, 0.0, 1.0, 1.7, -0.3, 0.5, 1.0])
    out = mechanisms.grouped_rates(jax.random.key(0), groups, values, 4, 1e4)
    np.testing.assert_allclose(out.noisy_counts, [2, 1, 4, 0], atol=0.02)
    np.testing.assert_allclose(out.noisy_totals, [1.5, 0.0, 3.0, 0.0], atol=0.02)
    np.testing.assert_allclose(out.rate[:3], [0.75, 0.0, 0.75], atol=0.02)
    self.assertEqual(out.reliable.shape, (4,))
    np.testing.assert_array_equal(out.reliable, np.asarray(out.rate_sd) <= 0.05)

  def test_rate_sd_matches_monte_carlo(self):
    # Groups of 10, 400 and 1,600 people with rates 0.3, 0.3, 0.6 at eps = 0.7 (the
    # lecture's zip budget: 0.35 per histogram). For the two large groups the
    # delta-method sd sqrt(2 b^2 (1 + r^2)) / n must match the spread of 4,000
    # releases to within 8 % (about 3.5 standard errors of a Laplace-noise sd
    # estimate at K = 4,000: se(s) / s ~ sqrt((2 + kurtosis excess 3) / K) / 2 = 1.8 %).
    n = np.array([10, 400, 1600])
    rate = np.array([0.3, 0.3, 0.6])
    groups = np.repeat([0, 1, 2], n)
    values = np.concatenate([np.arange(k) < r * k for k, r in zip(n, rate)]).astype(float)
    keys = jax.random.split(jax.random.key(1), 4000)
    out = jax.vmap(lambda k: mechanisms.grouped_rates(k, groups, values, 3, 0.7))(keys)
    b = (1.0 + 3 * mechanisms.laplace_grid(0.35)) / 0.35    # the defended release's scale
    sd_formula = np.sqrt(2 * b * b * (1 + rate ** 2)) / n
    rates = np.asarray(out.rate)
    np.testing.assert_allclose(rates.std(axis=0)[1:], sd_formula[1:], rtol=0.08)
    np.testing.assert_allclose(np.asarray(out.noisy_counts).std(axis=0), math.sqrt(2) * b,
                               rtol=0.08)
    # The reported sd (the formula at the released values) is close to the truth's.
    np.testing.assert_allclose(np.asarray(out.rate_sd).mean(axis=0)[1:], sd_formula[1:],
                               rtol=0.03)
    # Unbiased to first order: mean within 4 standard errors of the true rate.
    se = sd_formula[1:] / math.sqrt(len(keys))
    self.assertTrue(np.all(np.abs(rates.mean(axis=0)[1:] - rate[1:]) < 4 * se))
    # sd 0.014 and 0.004 in the large groups: reliable in every release; the group of
    # 10 (sd ~ 0.4) is flagged in nearly all of them.
    reliable = np.asarray(out.reliable)
    np.testing.assert_array_equal(reliable, np.asarray(out.rate_sd) <= 0.05)
    self.assertTrue(bool(reliable[:, 1:].all()))
    self.assertLess(reliable[:, 0].mean(), 0.01)

  def test_bad_inputs_name_the_parameter(self):
    g, v = np.array([0, 1]), np.array([1.0, 0.0])
    key = jax.random.key(0)
    for kwargs, name in (
        (dict(group_U=np.array([0, 2])), "group_U"),
        (dict(group_U=np.array([0.5, 1])), "group_U"),
        (dict(values_U=np.array([1.0])), "values_U"),
        (dict(values_U=np.array([1.0, np.nan])), "values_U"),
        (dict(num_groups=0), "num_groups"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(count_fraction=1.0), "count_fraction"),
        (dict(max_rate_sd=0.0), "max_rate_sd")):
      args = dict(key=key, group_U=g, values_U=v, num_groups=2, epsilon=1.0)
      args.update(kwargs)
      with self.subTest(name=name, kwargs=kwargs):
        with self.assertRaisesRegex(ValueError, name):
          mechanisms.grouped_rates(**args)


class PureDpRdpTest(absltest.TestCase):

  def test_randomized_response_attains_the_bound(self):
    for eps in (0.05, 0.3, 1.0, 3.0):
      p = math.exp(eps) / (1 + math.exp(eps))
      exact = [_renyi([p, 1 - p], [1 - p, p], a) for a in _ORDERS]
      np.testing.assert_allclose(composition.pure_dp_rdp(eps, _ORDERS), exact, rtol=1e-10)

  def test_bounds_every_pure_dp_pair(self):
    rng = np.random.default_rng(0)
    for _ in range(300):
      eps = rng.uniform(0.05, 3.0)
      q = rng.dirichlet(np.ones(6))
      # P proportional to Q e^r with |r| <= eps / 2: after normalising, |log P/Q| <= eps.
      p = q * np.exp(rng.uniform(-eps / 2, eps / 2, 6))
      p /= p.sum()
      assert np.max(np.abs(np.log(p / q))) <= eps + 1e-12
      bound = composition.pure_dp_rdp(eps, _ORDERS)
      for a, b in zip(_ORDERS, bound):
        self.assertLessEqual(_renyi(p, q, a), b + 1e-12)
        self.assertLessEqual(_renyi(q, p, a), b + 1e-12)

  def test_exponential_mechanism_within_bounded_range_bound(self):
    rng = np.random.default_rng(1)
    for monotonic in (False, True):
      for _ in range(200):
        eps = rng.uniform(0.05, 2.0)
        u = rng.normal(size=8) * 3
        # Neighbour: each utility moves by at most Delta_u = 1 (in one direction if
        # monotonic, then the scale is Delta_u / eps instead of 2 Delta_u / eps).
        c = rng.uniform(0, 1, 8) if monotonic else rng.uniform(-1, 1, 8)
        scale = (1.0 if monotonic else 2.0) / eps
        p = np.exp(u / scale - np.logaddexp.reduce(u / scale))
        # The same probabilities as the library's exponential mechanism (float32).
        np.testing.assert_allclose(
            selection.exponential_probs(u, eps, monotonic=monotonic), p, atol=1e-5)
        q = np.exp((u + c) / scale - np.logaddexp.reduce((u + c) / scale))
        bound = composition.pure_dp_rdp(eps, _ORDERS, bounded_range=True)
        for a, b in zip(_ORDERS, bound):
          self.assertLessEqual(_renyi(p, q, a), b + 1e-12)
          self.assertLessEqual(_renyi(q, p, a), b + 1e-12)

  def test_bounded_range_constant_is_tight(self):
    # Loss +-eps/2 with probability 1/2 each: D_alpha -> alpha eps^2 / 8 as eps -> 0.
    eps = 0.01
    p = 1.0 / (1.0 + math.exp(-eps / 2))
    for a in (2.0, 8.0):
      ratio = _renyi([p, 1 - p], [1 - p, p], a) / (a * eps * eps / 8)
      self.assertBetween(ratio, 0.99, 1.0 + 1e-9)

  def test_curve_properties(self):
    for eps in (0.1, 0.3, 2.0):
      rr = composition.pure_dp_rdp(eps, _ORDERS)
      br = composition.pure_dp_rdp(eps, _ORDERS, bounded_range=True)
      self.assertTrue(np.all(br <= rr + 1e-15))
      self.assertTrue(np.all(rr <= eps + 1e-12))
      self.assertTrue(np.all(rr <= _ORDERS * eps * eps / 2 + 1e-12))   # eps^2/2-zCDP
      self.assertTrue(np.all(np.diff(rr) >= -1e-15))                     # nondecreasing
    with self.assertRaisesRegex(TypeError, "bounded_range"):
      composition.pure_dp_rdp(0.3, _ORDERS, bounded_range="yes")


class GroupPrivacyTest(absltest.TestCase):

  def test_pure_dp_is_tight_for_laplace(self):
    # Laplace(1/eps) on a count moved by k: the largest privacy loss is exactly k eps.
    eps, k = 0.7, 5
    x = np.linspace(-20, 20, 4001)
    loss = (np.abs(x - k) - np.abs(x)) * eps
    self.assertAlmostEqual(float(loss.max()), composition.group_privacy(eps, 0.0, k)[0],
                           places=9)

  def test_gaussian_group_delta_is_below_the_bound(self):
    # A Gaussian mechanism calibrated to (eps, delta) for one record: a group of k moves
    # the mean by k, so its exact delta at k eps is gaussian_delta(k eps, k / sigma).
    for eps in (0.3, 1.0, 2.0):
      for delta in (1e-5, 1e-3):
        sigma = mechanisms.gaussian_sigma(eps, delta)
        self.assertAlmostEqual(gdp.gaussian_delta(eps, 1.0 / sigma) / delta, 1.0, places=2)
        for k in (1, 2, 5):
          eps_k, delta_k = composition.group_privacy(eps, delta, k)
          self.assertAlmostEqual(eps_k, k * eps, places=12)
          self.assertLessEqual(gdp.gaussian_delta(eps_k, k / sigma), delta_k * (1 + 1e-3))
    self.assertEqual(composition.group_privacy(3.0, 1e-5, 5), (15.0, 1.0))
    eps_5, delta_5 = composition.group_privacy(0.1, 1e-6, 5)
    self.assertAlmostEqual(delta_5, 5 * math.exp(0.4) * 1e-6, delta=1e-15)

  def test_bad_inputs(self):
    for args, name in (((-1.0, 1e-5, 2), "epsilon"), ((1.0, 1.0, 2), "delta"),
                       ((1.0, 1e-5, 0), "k")):
      with self.assertRaisesRegex(ValueError, name):
        composition.group_privacy(*args)


if __name__ == "__main__":
  absltest.main()
