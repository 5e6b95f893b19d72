"""Tests for dpjax.audit.stats: Clopper-Pearson, eps lower bounds, threshold audits."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax.audit import stats


class ClopperPearsonTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("zero", 0, 500), ("small", 3, 40), ("half", 50, 100), ("all", 20, 20), ("one", 1, 1))
  def test_matches_scipy_beta_quantiles(self, k, n):
    for conf in (0.9, 0.95, 0.99):
      a = 1 - conf
      lo, hi = stats.clopper_pearson(k, n, conf)
      want_lo = 0.0 if k == 0 else sps.beta.ppf(a / 2, k, n - k + 1)
      want_hi = 1.0 if k == n else sps.beta.ppf(1 - a / 2, k + 1, n - k)
      self.assertAlmostEqual(lo, want_lo, places=12)
      self.assertAlmostEqual(hi, want_hi, places=12)
      # and the defining tail equations of the exact interval
      if k < n:
        self.assertAlmostEqual(sps.binom.cdf(k, n, hi), a / 2, places=9)
      if k > 0:
        self.assertAlmostEqual(sps.binom.sf(k - 1, n, lo), a / 2, places=9)

  def test_upper_alone_equals_the_interval_upper(self):
    # The same Beta quantile as the two-sided interval's upper limit, bit for bit, scalar
    # and broadcast (fractional expected counts included), and the same validation.
    k = np.array([0.0, 0.5, 3.0, 17.25, 40.0])
    for conf in (0.9, 0.95, 0.99):
      _, hi = stats.clopper_pearson(k, 40, conf)
      np.testing.assert_array_equal(stats.clopper_pearson_upper(k, 40, conf), hi)
      self.assertEqual(stats.clopper_pearson_upper(3, 40, conf),
                       stats.clopper_pearson(3, 40, conf)[1])
    self.assertEqual(stats.clopper_pearson_upper(20, 20), 1.0)
    a = 0.05
    self.assertAlmostEqual(sps.binom.cdf(3, 40, stats.clopper_pearson_upper(3, 40)), a / 2,
                           places=9)
    with self.assertRaises(ValueError):
      stats.clopper_pearson_upper(11, 10)
    with self.assertRaises(ValueError):
      stats.clopper_pearson_upper(1, 10, 1.0)

  def test_coverage_monte_carlo(self):
    # 20,000 binomial draws at p = 0.03, n = 200: the upper limit (one-sided 97.5%)
    # must cover p in >= 97.5% of draws (exact intervals are conservative); the
    # Monte Carlo standard error of the rate is ~0.0011.
    rng = np.random.default_rng(0)
    k = rng.binomial(200, 0.03, 20_000)
    _, hi = stats.clopper_pearson(k, 200, 0.95)
    self.assertGreaterEqual(np.mean(hi >= 0.03), 0.975 - 0.004)

  def test_vectorised_and_validation(self):
    lo, hi = stats.clopper_pearson(np.array([0, 5]), 10)
    self.assertEqual(lo.shape, (2,))
    with self.assertRaisesRegex(ValueError, "successes"):
      stats.clopper_pearson(11, 10)
    with self.assertRaisesRegex(ValueError, "trials"):
      stats.clopper_pearson(0, 0)
    with self.assertRaisesRegex(ValueError, "confidence"):
      stats.clopper_pearson(1, 10, 1.0)


class EpsilonLowerBoundTest(parameterized.TestCase):

  @parameterized.named_parameters(("n500", 500, 4.91), ("n10000", 10_000, 7.90))
  def test_lecture_hand_counts(self, n, lecture):
    eps = stats.epsilon_lower_bound(0, n, 0, n, delta=0.0)
    # closed form: FPR_u = FNR_u = 1 - 0.025^(1/N)
    u = 1 - 0.025 ** (1 / n)
    self.assertAlmostEqual(eps, math.log((1 - u) / u), places=9)
    self.assertAlmostEqual(eps, lecture, delta=0.005)
    self.assertAlmostEqual(stats.perfect_attack_ceiling(n), eps, places=12)

  def test_formula_both_forms_and_delta(self):
    fp, fn, n = 10, 200, 1000
    _, fpr_u = stats.clopper_pearson(fp, n)
    _, fnr_u = stats.clopper_pearson(fn, n)
    want = max(math.log((1 - 1e-3 - fpr_u) / fnr_u), math.log((1 - 1e-3 - fnr_u) / fpr_u))
    self.assertAlmostEqual(stats.epsilon_lower_bound(fp, n, fn, n, delta=1e-3), want, places=12)
    # symmetric in swapping the roles of the two error types
    self.assertAlmostEqual(stats.epsilon_lower_bound(fn, n, fp, n, 1e-3), want, places=12)

  def test_no_signal_is_zero(self):
    self.assertEqual(stats.epsilon_lower_bound(500, 1000, 500, 1000), 0.0)
    self.assertEqual(stats.epsilon_lower_bound(1000, 1000, 0, 1000), 0.0)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "negatives"):
      stats.epsilon_lower_bound(0, 0, 0, 10)
    with self.assertRaisesRegex(ValueError, "false_negatives"):
      stats.epsilon_lower_bound(0, 10, 11, 10)
    with self.assertRaisesRegex(ValueError, "delta"):
      stats.epsilon_lower_bound(0, 10, 0, 10, delta=1.0)


class ErrorCountsTest(absltest.TestCase):

  def test_error_counts_by_hand(self):
    fp, fn = stats.error_counts([1, 2, 3], [0, 1, 2, 5], [0.5, 2.0])
    np.testing.assert_array_equal(fp, [3, 1])
    np.testing.assert_array_equal(fn, [0, 2])
    # +-inf thresholds: everything IN / everything OUT
    fp, fn = stats.error_counts([1, 2], [0, 5], [-np.inf, np.inf])
    np.testing.assert_array_equal(fp, [2, 0])
    np.testing.assert_array_equal(fn, [0, 2])

  def test_scores_validation(self):
    with self.assertRaisesRegex(ValueError, "scores_in_K"):
      stats.error_counts([1.0, float("nan")], [0.0], [0.5])
    with self.assertRaisesRegex(ValueError, "scores_out_K"):
      stats.error_counts([1.0], [], [0.5])
    with self.assertRaisesRegex(ValueError, "thresholds_J"):
      stats.error_counts([1.0], [0.0], [[0.5]])
    self.assertEqual(stats.check_scores([np.inf], "s").tolist(), [np.inf])


class MonotoneArgmaxTest(parameterized.TestCase):
  """The branch and bound returns exactly np.argmax over every candidate (ties included)."""

  @parameterized.parameters((4, 2), (16, 3), (1024, 32))
  def test_equals_the_exhaustive_argmax(self, blocks, split):
    rng = np.random.default_rng(blocks)
    old = stats._BLOCKS, stats._SPLIT
    stats._BLOCKS, stats._SPLIT = blocks, split
    try:
      for trial in range(60):
        n = int(rng.integers(2, 3000))
        grid = int(rng.choice([2, 5, 1000]))          # coarse grids: many tied counts
        shift = float(rng.choice([0.0, 0.5, 3.0]))     # 0: null scores, every bound 0
        a = np.round(rng.normal(shift, 1, n) * grid) / grid
        b = np.round(rng.normal(0, 1, n) * grid) / grid
        cand = np.unique(np.r_[a, b, -np.inf])
        fp, fn = stats.error_counts(a, b, cand)
        value = lambda f, g: stats.epsilon_lower_bound(f, n, g, n, 1e-5, 0.9)
        v = value(fp, fn)
        self.assertEqual(stats.monotone_argmax(fp, fn, value),
                         (int(np.argmax(v)), float(v.max())), trial)
      fp, fn = np.arange(50.0)[::-1], np.arange(50.0)
      self.assertEqual(stats.monotone_argmax(fp, fn, lambda f, g: np.full(f.shape, -np.inf)),
                       (0, -np.inf))
    finally:
      stats._BLOCKS, stats._SPLIT = old

  def test_many_scores_evaluate_few_candidates(self):
    # The exhaustive scan evaluated the bound at every threshold (2n + 1 of them: minutes
    # at 10^6-10^7 scores per side); the branch and bound evaluates a small share.
    rng = np.random.default_rng(0)
    n = 200_000
    a, b = rng.normal(1.0, 1, n), rng.normal(0, 1, n)
    cand = np.unique(np.r_[a, b, -np.inf])
    fp, fn = stats.error_counts(a, b, cand)
    seen = [0]

    def value(f, g):
      seen[0] += np.size(f)
      return stats.epsilon_lower_bound(f, n, g, n, 1e-5, 0.9)
    i, v = stats.monotone_argmax(fp, fn, value)
    self.assertLess(seen[0], cand.size // 20)
    j = int(np.argmax(value(fp, fn)))
    self.assertEqual((i, v), (j, float(value(fp[j:j + 1], fn[j:j + 1])[0])))

  def test_counts_out_of_order_are_refused_by_name(self):
    with self.assertRaisesRegex(ValueError, "fp_J must be non-increasing"):
      stats.monotone_argmax([1, 2], [0, 1], lambda f, g: -f)
    with self.assertRaisesRegex(ValueError, "fn_J must be non-decreasing"):
      stats.monotone_argmax([2, 1], [1, 0], lambda f, g: -f)


if __name__ == "__main__":
  absltest.main()
