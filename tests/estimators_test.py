"""Tests for dpjax.audit.estimators: threshold strategies, Bonferroni, spread, ceilings, GDP."""

import collections
import json
import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax import tradeoff
from dpjax.accounting import gdp
from dpjax.audit import certifiable, estimators, one_run, parametric, score_audit, stats


def _quantile_scores(mu, n, seed=0):
  """N(mu, 1) vs N(0, 1) scores of n trials per side, each half exactly the quantiles."""
  half = sps.norm.ppf((np.arange(n // 2) + 0.5) / (n // 2))
  rng = np.random.default_rng(seed)
  s_out = np.concatenate([rng.permutation(half), rng.permutation(half)])
  s_in = np.concatenate([rng.permutation(half), rng.permutation(half)]) + mu
  return s_in, s_out


class ThresholdStrategyTest(parameterized.TestCase):

  def test_null_scores_never_spuriously_positive(self):
    # Same distribution IN and OUT: the split audit must certify ~0. Over 40
    # independent audits the chance that any exceeds 0.3 is far below 5%.
    rng = np.random.default_rng(1)
    eps = [estimators.SplitThreshold().bound(rng.normal(size=2000), rng.normal(size=2000),
                                             delta=1e-5).epsilon_lower for _ in range(40)]
    self.assertLess(max(eps), 0.3)
    self.assertLessEqual(np.mean(np.array(eps) > 0), 0.2)
    # heavy ties (a discrete null) too
    e = estimators.SplitThreshold(both_signs=True).bound(rng.integers(0, 3, 4000),
                                                         rng.integers(0, 3, 4000))
    self.assertLess(e.epsilon_lower, 0.3)

  def test_gaussian_scores_below_analytic_epsilon(self):
    # The audit of a mu-GDP pair must not exceed the exact eps and should reach most
    # of the best certifiable bound for these trials.
    mu, n, delta = 2.0, 20_000, 1e-5
    s_in, s_out = _quantile_scores(mu, n)
    r = estimators.SplitThreshold().bound(s_in, s_out, delta=delta)
    exact = gdp.gaussian_epsilon(delta, mu)
    a = np.linspace(0, 1, 100_001)
    ceiling = certifiable.best_certifiable(a, tradeoff.gaussian_fnr(a, mu), n // 2,
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
    r = estimators.FixedThreshold(1.0).bound(s_in, s_out)
    self.assertEqual((r.positives, r.negatives, r.false_positives, r.false_negatives),
                     (300, 300, 0, 0))
    self.assertAlmostEqual(r.epsilon_lower, stats.perfect_attack_ceiling(300), places=12)
    self.assertEqual((r.selection_trials, r.strategy), ((0, 0), "fixed"))
    # sign = -1: the test is "IN iff -score > threshold"
    r = estimators.FixedThreshold(1.0, sign=-1).bound(-s_in, -s_out)
    self.assertEqual((r.false_positives, r.false_negatives), (0, 0))
    self.assertEqual(r.counts(), {"false_positives": 0, "negatives": 300,
                                  "false_negatives": 0, "positives": 300})

  def test_fixed_threshold_by_hand(self):
    r = estimators.FixedThreshold(0.5).bound([1, 1, 0, 1], [0, 1, 0, 0], delta=1e-3,
                                             confidence=0.9)
    self.assertEqual((r.false_positives, r.false_negatives), (1, 1))
    self.assertEqual(r.epsilon_lower, stats.epsilon_lower_bound(1, 4, 1, 4, 1e-3, 0.9))

  def test_split_uses_the_first_halves_to_choose(self):
    # First halves: IN above 10, OUT below; second halves the same. A threshold
    # chosen on the first halves separates the second halves perfectly.
    x = np.tile(np.arange(10.0), 2)
    r = estimators.SplitThreshold().bound(x + 10, x)
    self.assertEqual((r.threshold, r.false_positives, r.false_negatives), (9.0, 0, 0))
    self.assertEqual(r.threshold, estimators.choose_threshold(x[:10] + 10, x[:10])[0])
    # reversed scores: only both_signs finds the test
    r = estimators.SplitThreshold(both_signs=True).bound(-(x + 10), -x)
    self.assertEqual((r.sign, r.false_positives, r.false_negatives), (-1, 0, 0))

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "threshold"):
      estimators.FixedThreshold(float("nan"))
    with self.assertRaisesRegex(ValueError, "sign"):
      estimators.FixedThreshold(0.0, sign=2)
    with self.assertRaisesRegex(ValueError, "scores_in_K"):
      estimators.FixedThreshold(0.0).bound([np.nan], [0.0])
    with self.assertRaisesRegex(ValueError, "confidence"):
      estimators.FixedThreshold(0.0).bound([1.0], [0.0], confidence=1.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      estimators.SplitThreshold().bound([1.0, 2.0], [0.0, 1.0], delta=-0.1)
    with self.assertRaisesRegex(ValueError, ">= 2 trials"):
      estimators.SplitThreshold().bound([1.0], [0.0, 1.0])
    with self.assertRaisesRegex(ValueError, "strategies"):
      estimators.Bonferroni(())


class BonferroniTest(parameterized.TestCase):

  def test_each_part_at_alpha_over_k_and_max_reported(self):
    s_in, s_out = _quantile_scores(1.5, 4000)
    parts = (estimators.FixedThreshold(0.75), estimators.SplitThreshold(both_signs=True),
             estimators.FixedThreshold(2.0))
    r = estimators.Bonferroni(parts).bound(s_in, s_out, delta=1e-5, confidence=0.9)
    self.assertAlmostEqual(estimators.bonferroni_confidence(0.9, 3), 1 - 0.1 / 3, places=15)
    for p, strategy in zip(r.parts, parts):
      self.assertEqual(p.confidence, estimators.bonferroni_confidence(0.9, 3))
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
    thr = certifiable.best_certifiable(a, tradeoff.gaussian_fnr(a, mu), 500, delta=delta,
                                      confidence=0.95, thresholds_J=sps.norm.isf(a))
    policy = estimators.Bonferroni((estimators.FixedThreshold(thr.threshold),
                                    estimators.SplitThreshold(both_signs=True)))
    rng = np.random.default_rng(5)
    over = sum(policy.bound(mu + rng.normal(size=500), rng.normal(size=500), delta=delta,
                            confidence=0.9).epsilon_lower > exact for _ in range(200))
    self.assertLessEqual(over, 32)


class SpreadCeilingEstimateTest(parameterized.TestCase):

  def test_bootstrap_spread_by_hand(self):
    r = estimators.FixedThreshold(0.0).bound(np.r_[np.ones(900), -np.ones(100)],
                                             -np.ones(1000), delta=1e-5, confidence=0.975)
    s = estimators.bootstrap_spread(r, np.random.default_rng(0), num_replicates=300)
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
      estimators.bootstrap_spread(0.5, rng)

  def test_best_certifiable_gaussian_scale(self):
    # A Gaussian mechanism with eps = 2 at delta = 1e-5 lets a perfect adversary
    # certify ~0.8 with 5,000 trials per side, ~0.9 with 10,000.
    mu = gdp.mu_for_epsilon(2.0, 1e-5)
    a = np.linspace(0, 1, 200_001)
    b = tradeoff.gaussian_fnr(a, mu)
    self.assertAlmostEqual(certifiable.best_certifiable(a, b, 5000, delta=1e-5).epsilon, 0.8,
                           delta=0.05)
    c = certifiable.best_certifiable(a, b, 10_000, delta=1e-5, thresholds_J=sps.norm.isf(a))
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
    c = certifiable.best_certifiable([0.0, 0.1, 0.5], [0.0, 0.2, 0.5], 100)
    self.assertEqual(c.index, 1)
    with self.assertRaisesRegex(ValueError, "no point"):
      certifiable.best_certifiable([0.0], [0.0], 100)
    with self.assertRaisesRegex(ValueError, "fnr_J"):
      certifiable.best_certifiable([0.1, 0.2], [0.1], 100)

  def test_gdp_estimate_recovers_mu_and_is_labelled(self):
    mu, n = 1.5, 20_000
    s_in, s_out = _quantile_scores(mu, n)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5)
    # the Clopper-Pearson limits pull mu down a little; quantile scores pin it
    self.assertLess(g.mu, mu)
    self.assertGreater(g.mu, mu - 0.15)
    self.assertAlmostEqual(g.epsilon, gdp.gaussian_epsilon(1e-5, g.mu), places=12)
    self.assertIn("valid only if the mechanism is mu-GDP", g.assumptions)
    # a fixed threshold uses every trial; mu by hand at that threshold
    g = parametric.gdp_estimate(s_in, s_out, 1e-5, threshold=0.75)
    fp, fn = stats.error_counts(s_in, s_out, [0.75])
    _, fpr_u = stats.clopper_pearson(fp[0], n)
    _, fnr_u = stats.clopper_pearson(fn[0], n)
    self.assertAlmostEqual(g.mu, sps.norm.ppf(1 - fpr_u) - sps.norm.ppf(fnr_u), places=12)
    # no signal: eps 0
    rng = np.random.default_rng(3)
    self.assertEqual(parametric.gdp_estimate(rng.normal(size=2000), rng.normal(size=2000),
                                             1e-5).epsilon, 0.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      parametric.gdp_estimate(s_in, s_out, 0.0)


class ScoreBoundsTest(parameterized.TestCase):
  """score_audit.score_bounds: every estimator on one pair of score samples."""

  def test_records_keys_and_json(self):
    s_in, s_out = _quantile_scores(1.5, 2000)
    b = score_audit.score_bounds(s_in, s_out, delta=1e-5, claimed_epsilon=0.5)
    self.assertEqual(list(b), ["clopper_pearson", "clopper_pearson_bonferroni", "gdp", "one_run",
                               "fdp_one_run", "fdp_one_run_gdp", "best"])
    for name, r in b.items():
      self.assertIsInstance(r, score_audit.ScoreBound)
      self.assertEqual((r.name, r.confidence, r.delta), (name, 0.95, 1e-5))
      self.assertGreaterEqual(r.epsilon_lower, 0.0)
      json.dumps(r.details, allow_nan=False)        # strict JSON
      self.assertEqual(r.details["falsifies_claim"], r.epsilon_lower > 0.5)
    self.assertIn("valid only if the mechanism is mu-GDP", b["gdp"].assumptions)
    self.assertIn("valid only if the mechanism is mu-GDP", b["fdp_one_run_gdp"].assumptions)
    self.assertNotIn("mu-GDP", b["clopper_pearson"].assumptions)
    with_t = score_audit.score_bounds(s_in, s_out, delta=1e-5, threshold=0.75)
    self.assertIn("clopper_pearson_fixed", with_t)
    # strict JSON even with infinite scores, thresholds and a mu of -inf
    odd = score_audit.score_bounds([0.0, 0.0, -np.inf], [1.0, 1.0, np.inf], delta=1e-5,
                                  threshold=np.inf)
    for r in odd.values():
      json.dumps(r.details, allow_nan=False)
    self.assertEqual(odd["clopper_pearson_fixed"].details["threshold"], "inf")

  def test_entries_match_their_strategies(self):
    s_in, s_out = _quantile_scores(1.5, 2000, seed=2)
    b = score_audit.score_bounds(s_in, s_out, delta=1e-5, threshold=0.75,
                                thresholds=[0.5, 1.0, 1.5])
    split = estimators.SplitThreshold(both_signs=True).bound(s_in, s_out, delta=1e-5)
    self.assertEqual(b["clopper_pearson"].epsilon_lower, split.epsilon_lower)
    fixed = estimators.FixedThreshold(0.75).bound(s_in, s_out, delta=1e-5)
    self.assertEqual(b["clopper_pearson_fixed"].epsilon_lower, fixed.epsilon_lower)
    # declared thresholds: each at 1 - 0.05 / 3 on every trial, the largest reported
    each = [estimators.FixedThreshold(t).bound(s_in, s_out, delta=1e-5,
                                               confidence=1 - 0.05 / 3).epsilon_lower
            for t in (0.5, 1.0, 1.5)]
    self.assertAlmostEqual(b["clopper_pearson_bonferroni"].epsilon_lower, max(each), places=12)
    self.assertEqual(b["clopper_pearson_bonferroni"].details["num_tests"], 3)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5)
    self.assertEqual(b["gdp"].epsilon_lower, g.epsilon)
    # best: the assumption-free entries rerun at 1 - 0.05 / 5, the largest reported
    parts = b["best"].details["parts"]
    self.assertEqual(sorted(parts), sorted(["clopper_pearson", "clopper_pearson_bonferroni",
                                            "clopper_pearson_fixed", "one_run", "fdp_one_run"]))
    self.assertEqual(b["best"].epsilon_lower, max(parts.values()))
    self.assertAlmostEqual(b["best"].details["confidence_per_test"], 0.99, places=12)
    for k, v in parts.items():
      self.assertLessEqual(v, b[k].epsilon_lower + 1e-9)   # stricter confidence, smaller bound

  def test_one_run_entries_by_hand(self):
    # Canary i is IN score i or OUT score i by the seeded coin; n = min(K_in, K_out).
    rng = np.random.default_rng(4)
    s_in, s_out = rng.normal(size=700) + 1.0, rng.normal(size=500)
    b = score_audit.score_bounds(s_in, s_out, delta=1e-5, seed=3)
    bits = np.random.default_rng(3).random(500) < 0.5
    canaries = np.where(bits, s_in[:500], s_out)
    for name in ("one_run", "fdp_one_run", "fdp_one_run_gdp"):
      d = b[name].details
      self.assertEqual((d["num_canaries"], d["seed"]), (500, 3))
      self.assertEqual(d["guess_counts"], [500, 250, 124, 62, 30, 14, 6, 2])
      k = d["num_guesses"] // 2
      res = one_run.audit(canaries, bits, num_positive_guesses=k, num_negative_guesses=k,
                          delta=1e-5, confidence=1 - 0.05 / 8)
      self.assertEqual(res.num_correct, d["num_correct"])
      if name == "one_run":
        self.assertAlmostEqual(b[name].epsilon_lower, res.epsilon_lower, places=9)
      else:
        fam = "dp" if name == "fdp_one_run" else "gdp"
        want = one_run.fdp_epsilon_lower_bound(
            num_canaries=500, num_guesses=2 * k, num_correct=res.num_correct, delta=1e-5,
            family=fam, confidence=1 - 0.05 / 8).epsilon_lower
        self.assertAlmostEqual(b[name].epsilon_lower, want, delta=1e-3 * max(1.0, want))
    # each reported guess count beats every other at its own confidence (the maximum)
    self.assertGreater(b["one_run"].epsilon_lower, 0.5)

  def test_null_scores_rarely_positive(self):
    # 100 null audits, 100 trials per side: each entry positive in <= 5% of them plus
    # three binomial standard errors (0.05 + 3 * 0.0218 = 0.115).
    rng = np.random.default_rng(5)
    pos = collections.Counter()
    for _ in range(100):
      b = score_audit.score_bounds(rng.normal(size=100), rng.normal(size=100), delta=1e-5)
      pos.update(k for k, v in b.items() if v.epsilon_lower > 0)
    for k in score_audit.SCORE_BOUND_NAMES:
      self.assertLessEqual(pos[k] / 100, 0.115, (k, pos))

  def test_gaussian_scores_below_exact_epsilon(self):
    # Scores N(mu, 1) vs N(0, 1) are exactly mu-GDP, so every entry (the GDP ones
    # included) is a valid bound: at most 5% + 3 s.e. (0.05 + 3 * 0.0345 = 0.153) of
    # 40 audits may exceed the exact eps; "best" must carry signal.
    mu, delta = 1.0, 1e-5
    exact = gdp.gaussian_epsilon(delta, mu)
    rng = np.random.default_rng(6)
    over, best = collections.Counter(), []
    for _ in range(40):
      b = score_audit.score_bounds(rng.normal(size=300) + mu, rng.normal(size=300), delta=delta)
      over.update(k for k, v in b.items() if v.epsilon_lower > exact)
      best.append(b["best"].epsilon_lower)
    for k in score_audit.SCORE_BOUND_NAMES:
      self.assertLessEqual(over[k] / 40, 0.153, (k, over))
    self.assertGreater(np.median(best), 0.3)

  def test_gdp_label_matters_on_randomized_response(self):
    # eps0-randomized response is (eps0, 0)-DP but not mu-GDP: the GDP bound, fitted
    # through one point, certifies far more than eps0, while the assumption-free
    # entries stay below it. This is why "gdp" carries its label.
    eps0, n = 1.0, 10_000
    rng = np.random.default_rng(1)
    p = 1 / (1 + math.exp(eps0))
    s_in = (rng.random(n) > p) + 1e-3 * rng.random(n)
    s_out = (rng.random(n) < p) + 1e-3 * rng.random(n)
    b = score_audit.score_bounds(s_in, s_out, delta=1e-5)
    self.assertGreater(b["gdp"].epsilon_lower, 3 * eps0)
    for k in ("clopper_pearson", "clopper_pearson_bonferroni", "one_run", "fdp_one_run", "best"):
      self.assertLessEqual(b[k].epsilon_lower, eps0, k)

  def test_validation(self):
    s = np.arange(10.0)
    for kw, name in ((dict(delta=0.0), "delta"), (dict(delta=1e-5, confidence=1.0), "confidence"),
                     (dict(delta=1e-5, claimed_epsilon=-1.0), "claimed_epsilon"),
                     (dict(delta=1e-5, threshold=float("nan")), "threshold"),
                     (dict(delta=1e-5, thresholds=[]), "thresholds"),
                     (dict(delta=1e-5, seed=-1), "seed")):
      with self.assertRaisesRegex(ValueError, name):
        score_audit.score_bounds(s, s, **kw)
    with self.assertRaisesRegex(ValueError, ">= 2 trials"):
      score_audit.score_bounds(s[:1], s, delta=1e-5)
    with self.assertRaisesRegex(ValueError, "scores_out_K"):
      score_audit.score_bounds(s, [1.0, float("nan")], delta=1e-5)


class GdpBoundTest(parameterized.TestCase):
  """The GDP bound of Nasr et al. 2023: joint confidence, clamping, null behaviour."""

  def test_null_scores_positive_in_at_most_five_percent(self):
    # 1,000 null audits (200 trials per side): positive in <= 5% + 3 s.e.
    # (0.05 + 3 * 0.0069 = 0.071). A mirrored |mu| would be positive in ~all of them.
    rng = np.random.default_rng(11)
    res = [parametric.gdp_estimate(rng.normal(size=200), rng.normal(size=200), 1e-5)
           for _ in range(1000)]
    eps = np.array([g.epsilon for g in res])
    mu = np.array([g.mu for g in res])
    self.assertLessEqual(np.mean(eps > 0), 0.071)
    self.assertTrue(np.all(eps[mu <= 0] == 0.0))
    self.assertGreater(np.mean(mu < 0), 0.9)          # the upper limits push mu below 0
    mirrored = [gdp.gaussian_epsilon(1e-5, abs(m)) for m in mu[mu < 0][:50]]
    self.assertGreater(np.mean(np.array(mirrored) > 0), 0.9)

  def test_negative_mu_is_clamped_not_mirrored(self):
    # IN scores far BELOW OUT scores at a fixed threshold: FPR_u + FNR_u ~ 2, mu ~ -4.
    s_in, s_out = _quantile_scores(-4.0, 2000)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5, threshold=-2.0)
    self.assertLess(g.mu, -3.0)
    self.assertEqual(g.epsilon, 0.0)

  def test_joint_confidence_by_hand(self):
    # mu uses the upper limits of the two-sided interval at `confidence`: each a
    # one-sided 1 - alpha/2 bound, jointly 1 - alpha (the convention of stats).
    s_in, s_out = _quantile_scores(1.0, 4000)
    g = parametric.gdp_estimate(s_in, s_out, 1e-5, confidence=0.9, threshold=0.5)
    fp, fn = stats.error_counts(s_in, s_out, [0.5])
    fpr_u = sps.beta.ppf(0.95, fp[0] + 1, 4000 - fp[0])
    fnr_u = sps.beta.ppf(0.95, fn[0] + 1, 4000 - fn[0])
    self.assertAlmostEqual(g.mu, sps.norm.isf(fpr_u) - sps.norm.ppf(fnr_u), places=10)

  def test_coverage_on_exact_gdp(self):
    # 300 audits of exactly 1-GDP scores: mu_lower > 1 in <= 5% + 3 s.e. (0.088).
    rng = np.random.default_rng(12)
    mus = np.array([parametric.gdp_estimate(rng.normal(size=300) + 1.0, rng.normal(size=300),
                                            1e-5).mu for _ in range(300)])
    self.assertLessEqual(np.mean(mus > 1.0), 0.088)


if __name__ == "__main__":
  absltest.main()
