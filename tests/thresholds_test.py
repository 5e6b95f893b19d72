"""Tests for dpjax.audit.thresholds: threshold strategies, Bonferroni, spread, declared thresholds."""

import math
from unittest import mock

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax import tradeoff
from dpjax.accounting import gdp
from dpjax.audit import canary, stats, thresholds
from tests import helpers


class ThresholdStrategyTest(parameterized.TestCase):

  def test_null_scores_never_spuriously_positive(self):
    # Same distribution IN and OUT: the split audit must certify ~0. Over 40
    # independent audits the chance that any exceeds 0.3 is far below 5%.
    rng = np.random.default_rng(1)
    eps = [thresholds.SplitThreshold().bound(rng.normal(size=2000), rng.normal(size=2000),
                                             delta=1e-5).epsilon_lower for _ in range(40)]
    self.assertLess(max(eps), 0.3)
    self.assertLessEqual(np.mean(np.array(eps) > 0), 0.2)
    # heavy ties (a discrete null) too
    e = thresholds.SplitThreshold(both_signs=True).bound(rng.integers(0, 3, 4000),
                                                         rng.integers(0, 3, 4000))
    self.assertLess(e.epsilon_lower, 0.3)

  def test_gaussian_scores_below_analytic_epsilon(self):
    # The audit of a mu-GDP pair must not exceed the exact eps and should reach most
    # of the best certifiable bound for these trials.
    mu, n, delta = 2.0, 20_000, 1e-5
    s_in, s_out = helpers.quantile_scores(mu, n)
    r = thresholds.SplitThreshold().bound(s_in, s_out, delta=delta)
    exact = gdp.gaussian_epsilon(delta, mu)
    a = np.linspace(0, 1, 100_001)
    ceiling = thresholds.best_certifiable(a, tradeoff.gaussian_fnr(a, mu), n // 2,
                                          delta=delta).epsilon
    self.assertLessEqual(r.epsilon_lower, exact)
    # The ceiling is on expected counts (e.g. 3.2 errors); quantile data has integer
    # counts at the optimum (3), worth < 0.15 in eps here.
    self.assertLessEqual(r.epsilon_lower, ceiling + 0.15)
    self.assertGreater(r.epsilon_lower, 0.9 * ceiling)
    self.assertEqual((r.positives, r.negatives, r.selection_trials), (n // 2, n // 2,
                                                                      (n // 2, n // 2)))
    self.assertEqual((r.strategy, r.confidence, r.delta), ("split", 0.95, delta))
    self.assertIn("first half", r.assumptions)

  def test_fixed_threshold_uses_all_trials(self):
    s_in, s_out = np.full(300, 2.0), np.zeros(300)
    r = thresholds.FixedThreshold(1.0).bound(s_in, s_out)
    self.assertEqual((r.positives, r.negatives, r.false_positives, r.false_negatives),
                     (300, 300, 0, 0))
    self.assertAlmostEqual(r.epsilon_lower, stats.perfect_attack_ceiling(300), places=12)
    self.assertEqual((r.selection_trials, r.strategy), ((0, 0), "fixed"))
    # sign = -1: the test is "IN iff -score > threshold"
    r = thresholds.FixedThreshold(1.0, sign=-1).bound(-s_in, -s_out)
    self.assertEqual((r.false_positives, r.false_negatives), (0, 0))
    self.assertEqual(r.counts(), {"false_positives": 0, "negatives": 300,
                                  "false_negatives": 0, "positives": 300})

  def test_fixed_threshold_by_hand(self):
    r = thresholds.FixedThreshold(0.5).bound([1, 1, 0, 1], [0, 1, 0, 0], delta=1e-3,
                                             confidence=0.9)
    self.assertEqual((r.false_positives, r.false_negatives), (1, 1))
    self.assertEqual(r.epsilon_lower, stats.epsilon_lower_bound(1, 4, 1, 4, 1e-3, 0.9))

  def test_split_uses_the_first_halves_to_choose(self):
    # First halves: IN above 10, OUT below; second halves the same. A threshold
    # chosen on the first halves separates the second halves perfectly.
    x = np.tile(np.arange(10.0), 2)
    r = thresholds.SplitThreshold().bound(x + 10, x)
    self.assertEqual((r.threshold, r.false_positives, r.false_negatives), (9.0, 0, 0))
    self.assertEqual(r.threshold, thresholds.choose_threshold(x[:10] + 10, x[:10])[0])
    # reversed scores: only both_signs finds the test
    r = thresholds.SplitThreshold(both_signs=True).bound(-(x + 10), -x)
    self.assertEqual((r.sign, r.false_positives, r.false_negatives), (-1, 0, 0))

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "threshold"):
      thresholds.FixedThreshold(float("nan"))
    with self.assertRaisesRegex(ValueError, "sign"):
      thresholds.FixedThreshold(0.0, sign=2)
    with self.assertRaisesRegex(ValueError, "scores_in_K"):
      thresholds.FixedThreshold(0.0).bound([np.nan], [0.0])
    with self.assertRaisesRegex(ValueError, "confidence"):
      thresholds.FixedThreshold(0.0).bound([1.0], [0.0], confidence=1.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      thresholds.SplitThreshold().bound([1.0, 2.0], [0.0, 1.0], delta=-0.1)
    with self.assertRaisesRegex(ValueError, ">= 2 trials"):
      thresholds.SplitThreshold().bound([1.0], [0.0, 1.0])
    with self.assertRaisesRegex(ValueError, "strategies"):
      thresholds.Bonferroni(())


class BestCertifiableCostTest(absltest.TestCase):

  def test_trials_past_2_to_the_40_are_named(self):
    # Beta quantiles at 2^63 trials took minutes for a 4001-point ROC, then gave NaN.
    a = np.linspace(0.0, 1.0, 4001)
    fnr = tradeoff.gaussian_fnr(a, 1.0)
    for kw in (dict(trials=2**63 - 1), dict(trials=2**63), dict(trials=10, trials_in=2**41)):
      with self.assertRaisesRegex(ValueError, "trials(_in)? must be an integer in"):
        thresholds.best_certifiable(a, fnr, **kw)
    # at the cap: a finite bound, below the ceiling of 1-GDP (eps(delta = 0) = inf, so the
    # trials' ceiling), and growing with the trials
    small = thresholds.best_certifiable(a, fnr, 10_000).epsilon
    big = thresholds.best_certifiable(a, fnr, 2**40).epsilon
    self.assertTrue(0.0 < small < big < stats.perfect_attack_ceiling(2**40))


class BonferroniTest(parameterized.TestCase):

  def test_each_part_at_alpha_over_k_and_max_reported(self):
    s_in, s_out = helpers.quantile_scores(1.5, 4000)
    parts = (thresholds.FixedThreshold(0.75), thresholds.SplitThreshold(both_signs=True),
             thresholds.FixedThreshold(2.0))
    r = thresholds.Bonferroni(parts).bound(s_in, s_out, delta=1e-5, confidence=0.9)
    self.assertAlmostEqual(thresholds.bonferroni_confidence(0.9, 3), 1 - 0.1 / 3, places=15)
    for p, strategy in zip(r.parts, parts):
      self.assertEqual(p.confidence, thresholds.bonferroni_confidence(0.9, 3))
      self.assertEqual(p, strategy.bound(s_in, s_out, delta=1e-5, confidence=p.confidence))
    self.assertEqual(r.epsilon_lower, max(p.epsilon_lower for p in r.parts))
    self.assertEqual((r.confidence, r.delta), (0.9, 1e-5))
    self.assertIn("union bound over 3 tests", r.assumptions)

  def test_family_wise_coverage_on_a_known_mechanism(self):
    # Scores of a mu-GDP pair whose exact eps at delta is known: over 200 audits the
    # reported maximum of two tests may exceed the exact eps in at most ~alpha of
    # them (here alpha = 0.1; binomial(200, 0.1) exceeds 32 with probability < 1%).
    mu, delta = 1.0, 1e-5
    exact = gdp.gaussian_epsilon(delta, mu)
    a = np.linspace(0, 1, 20_001)
    thr = thresholds.best_certifiable(a, tradeoff.gaussian_fnr(a, mu), 500, delta=delta,
                                      confidence=0.95, thresholds_J=sps.norm.isf(a))
    policy = thresholds.Bonferroni((thresholds.FixedThreshold(thr.threshold),
                                    thresholds.SplitThreshold(both_signs=True)))
    rng = np.random.default_rng(5)
    over = sum(policy.bound(mu + rng.normal(size=500), rng.normal(size=500), delta=delta,
                            confidence=0.9).epsilon_lower > exact for _ in range(200))
    self.assertLessEqual(over, 32)


class SpreadCeilingEstimateTest(parameterized.TestCase):

  def test_bootstrap_spread_by_hand(self):
    r = thresholds.FixedThreshold(0.0).bound(np.r_[np.ones(900), -np.ones(100)],
                                             -np.ones(1000), delta=1e-5, confidence=0.975)
    s = thresholds.bootstrap_spread(r, np.random.default_rng(0), num_replicates=300)
    rng = np.random.default_rng(0)
    fp = rng.binomial(1000, 0.0, 300)
    fn = rng.binomial(1000, 0.1, 300)
    want = stats.epsilon_lower_bound(fp, 1000, fn, 1000, 1e-5, 0.975)
    np.testing.assert_array_equal(s.epsilon_lower_R, want)
    self.assertEqual(s.sd, float(np.std(want)))
    # its scale: with FP = 0 the bound is log((1 - delta - FNR_u) / FPR_u), whose
    # delta-method sd is sd(FNR) / (1 - FNR_u) = sqrt(0.1 * 0.9 / 1000) / 0.88 = 0.011
    _, fnr_u = stats.clopper_pearson(100, 1000, 0.975)
    self.assertAlmostEqual(s.sd, math.sqrt(0.09 / 1000) / (1 - fnr_u), delta=0.003)
    with self.assertRaisesRegex(ValueError, "ThresholdBound"):
      thresholds.bootstrap_spread(0.5, rng)


class BestCertifiableTest(parameterized.TestCase):

  def test_best_certifiable_gaussian_scale(self):
    # A Gaussian mechanism with eps = 2 at delta = 1e-5 lets a perfect adversary
    # certify ~0.8 with 5,000 trials per side, ~0.9 with 10,000.
    mu = gdp.mu_for_epsilon(2.0, 1e-5)
    a = np.linspace(0, 1, 200_001)
    b = tradeoff.gaussian_fnr(a, mu)
    self.assertAlmostEqual(thresholds.best_certifiable(a, b, 5000, delta=1e-5).epsilon, 0.8,
                           delta=0.05)
    c = thresholds.best_certifiable(a, b, 10_000, delta=1e-5, thresholds_J=sps.norm.isf(a))
    self.assertAlmostEqual(c.epsilon, 0.9, delta=0.05)
    # the point it reports, and its bound by hand
    self.assertEqual((c.fpr, c.fnr), (a[c.index], b[c.index]))
    self.assertEqual(c.threshold, sps.norm.isf(a[c.index]))
    self.assertEqual(c.epsilon, stats.epsilon_lower_bound(c.fpr * 10_000, 10_000,
                                                          c.fnr * 10_000, 10_000, 1e-5))
    # below the trials' ceiling and the mechanism's exact eps
    self.assertLess(c.epsilon, stats.perfect_attack_ceiling(10_000, 1e-5))
    self.assertLess(c.epsilon, 2.0)

  def test_best_certifiable_skips_degenerate_points(self):
    c = thresholds.best_certifiable([0.0, 0.1, 0.5], [0.0, 0.2, 0.5], 100)
    self.assertEqual(c.index, 1)
    with self.assertRaisesRegex(ValueError, "no point"):
      thresholds.best_certifiable([0.0], [0.0], 100)
    with self.assertRaisesRegex(ValueError, "fnr_J"):
      thresholds.best_certifiable([0.1, 0.2], [0.1], 100)


  def test_integer_counts_round_the_expected_counts(self):
    fpr, fnr = np.array([0.013, 0.2]), np.array([0.5, 0.0261])
    b = thresholds.best_certifiable(fpr, fnr, 100, trials_in=300, delta=1e-5,
                                    integer_counts=True)
    want = stats.epsilon_lower_bound([1, 20], 100, [150, 8], 300, 1e-5)
    self.assertEqual(b.epsilon, float(np.max(want)))
    self.assertGreater(thresholds.best_certifiable(fpr, fnr, 100, trials_in=300,
                                                   delta=1e-5).epsilon, 0.0)


def _exhaustive_best(fpr, fnr, trials, trials_in, delta, confidence, integer_counts):
  """(epsilon, index) of best_certifiable by evaluating every point (np.argmax)."""
  ok = np.flatnonzero((fpr > 0) | (fnr > 0))
  fp, fn = trials * fpr[ok], trials_in * fnr[ok]
  if integer_counts:
    fp, fn = np.minimum(np.rint(fp), trials), np.minimum(np.rint(fn), trials_in)
  eps = stats.epsilon_lower_bound(fp, trials, fn, trials_in, delta, confidence)
  j = int(np.argmax(eps))
  return float(eps[j]), int(ok[j])


class BestCertifiablePruningTest(parameterized.TestCase):
  """The pruned search returns exactly the exhaustive argmax (value, first index)."""

  def _check(self, fpr, fnr, trials, trials_in, delta=1e-5, confidence=0.95,
             integer_counts=False, msg=None):
    thr = np.arange(fpr.size, dtype=np.float64)
    b = thresholds.best_certifiable(fpr, fnr, trials, trials_in=trials_in, delta=delta,
                                    confidence=confidence, thresholds_J=thr,
                                    integer_counts=integer_counts)
    want = _exhaustive_best(fpr, fnr, trials, trials_in, delta, confidence, integer_counts)
    self.assertEqual((b.epsilon, b.index), want, msg)
    self.assertEqual((b.threshold, b.fpr, b.fnr), (thr[b.index], fpr[b.index], fnr[b.index]))

  @parameterized.parameters((4, 2), (1024, 32))
  def test_random_rocs(self, blocks, split):
    # Likelihood-ratio ROCs of random discrete pairs (the order likelihood_ratio_roc gives),
    # fine and coarse, at random trials, delta and confidence; small blocks prune deeper.
    rng = np.random.default_rng(blocks)
    old = stats._BLOCKS, stats._SPLIT
    stats._BLOCKS, stats._SPLIT = blocks, split
    try:
      for trial in range(25):
        j = int(rng.integers(2, 4000))
        p_out = rng.dirichlet(np.full(j, float(rng.choice([0.05, 1.0]))))
        p_in = p_out * np.exp(rng.normal(0, 3, j).cumsum() / j ** 0.5 + rng.uniform(0, 2)
                              * np.linspace(0, 1, j))
        p_in /= p_in.sum()
        _, fpr, fnr = tradeoff.likelihood_ratio_roc(np.arange(j, dtype=float), p_in, p_out)
        n = int(rng.choice([10, 1000, 10_000, 2 ** 20]))
        self._check(fpr, fnr, n, int(rng.choice([n, 3 * n])),
                    delta=float(rng.choice([0.0, 1e-5, 0.01])),
                    confidence=float(rng.choice([0.9, 0.95, 0.975])),
                    integer_counts=bool(rng.integers(2)), msg=trial)
    finally:
      stats._BLOCKS, stats._SPLIT = old

  def test_adversarial_rocs(self):
    old = stats._BLOCKS, stats._SPLIT
    stats._BLOCKS, stats._SPLIT = 16, 4
    try:
      # A symmetric ROC: (a, b) and (b, a) certify exactly the same bound (trials_in =
      # trials) at two separated indices; the first must win.
      a = np.linspace(1.0, 0.25, 800)
      b = tradeoff.gaussian_fnr(a, 1.5)                 # < 0.25 = a's last: one chain
      fpr, fnr = np.r_[a, b[::-1]], np.r_[b, a[::-1]]
      self._check(fpr, fnr, 10_000, 10_000)
      halves = [stats.epsilon_lower_bound(f * 10_000, 10_000, g * 10_000, 10_000, 1e-5)
                for f, g in ((a, b), (b, a))]
      self.assertEqual(halves[0].max(), halves[1].max())   # the tie is exact
      # Plateaus: every point repeated, so every value is tied with its neighbours.
      _, fpr, fnr = tradeoff.likelihood_ratio_roc(
          np.arange(400.0), *(lambda o: (np.sort(o)[::-1] / o.sum(), np.sort(o) / o.sum()))(
              np.random.default_rng(3).random(400)))
      self._check(np.repeat(fpr, 7), np.repeat(fnr, 7), 5000, 5000)
      # A coin flip: every point certifies 0 (the first non-degenerate point wins).
      grid = np.linspace(0.0, 1.0, 3001)
      self._check(grid[::-1].copy(), grid.copy(), 10_000, 10_000)
      # Integer counts at few trials: long runs of equal counts.
      self._check(fpr, fnr, 20, 20, integer_counts=True)
      # Counts one rounding step apart (values equal or one ulp apart).
      fnr2 = np.r_[0.0, 0.2 + np.arange(60) * np.spacing(0.2), 1.0]
      self._check(np.r_[0.5, np.full(60, 0.01), 0.0], fnr2, 1000, 1000)
      # FPR ascending (the other order) is evaluated point by point.
      self._check(a, b, 10_000, 10_000)
    finally:
      stats._BLOCKS, stats._SPLIT = old

  def test_the_audits_rocs_evaluate_few_points(self):
    # The claimed mechanism's ROC of the main job (J ~ 10^5 points): the same point as the
    # exhaustive search from a small share of the points.
    thr, fpr, fnr = canary.llr_distribution(0.2, 9.7, 500).roc()
    seen = [0]
    real = stats.epsilon_lower_bound

    def counting(fp, n, fn, *args):
      seen[0] += np.size(fp)
      return real(fp, n, fn, *args)
    with mock.patch.object(stats, "epsilon_lower_bound", counting):
      b = thresholds.best_certifiable(fpr, fnr, 10_000, delta=1e-5, confidence=0.975,
                                      thresholds_J=thr)
    self.assertLess(seen[0], fpr.size // 10)
    self.assertEqual((b.epsilon, b.index),
                     _exhaustive_best(fpr, fnr, 10_000, 10_000, 1e-5, 0.975, False))


class DeclaredTest(parameterized.TestCase):

  def test_ladder_levels_and_first_threshold_at_each(self):
    thr = np.arange(6.0)
    fpr = np.array([1.0, 0.6, 0.3, 0.2, 0.06, 0.0])
    t, lv = thresholds.declared_ladder(thr, fpr, 64)
    # levels 1/2 .. 1/16 (64 / 16 = 4 expected false positives); 1/2 first met at 2, etc.
    self.assertEqual(lv.tolist(), [0.5, 0.25, 0.125, 0.0625])
    self.assertEqual(t.tolist(), [2.0, 3.0, 4.0, 4.0])
    # at least the level 1/2, and a level no test reaches is left out
    t, lv = thresholds.declared_ladder(thr[:2], fpr[:2], 3)
    self.assertEqual((t.size, lv.size), (0, 0))
    t, lv = thresholds.declared_ladder(thr, fpr, 3)
    self.assertEqual((t.tolist(), lv.tolist()), ([2.0], [0.5]))
    with self.assertRaisesRegex(ValueError, "thresholds_J"):
      thresholds.declared_ladder([0.0], [0.5, 0.1], 10)

  def test_best_exact_epsilon_by_hand(self):
    lf, lt = np.r_[np.log([0.5, 0.01]), -np.inf], np.log([0.9, 0.5, 0.4])
    self.assertAlmostEqual(thresholds.best_exact_epsilon(lf, lt, 0.1),
                           math.log((0.5 - 0.1) / 0.01), places=12)
    self.assertEqual(thresholds.best_exact_epsilon(np.log([0.5]), np.log([0.4]), 0.0), 0.0)
    with self.assertRaisesRegex(ValueError, "log_tpr_J"):
      thresholds.best_exact_epsilon([-1.0], [0.5], 0.0)


if __name__ == "__main__":
  absltest.main()
