"""Tests for dpjax.audit.score_audit: every estimator on one pair of score samples."""

import collections
import json
import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import gdp
from tests import helpers
from dpjax.audit import one_run, one_run_fdp, parametric, score_audit, thresholds


class ScoreBoundsTest(parameterized.TestCase):
  """score_audit.score_bounds: every estimator on one pair of score samples."""

  def test_records_keys_and_json(self):
    s_in, s_out = helpers.quantile_scores(1.5, 2000)
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
    s_in, s_out = helpers.quantile_scores(1.5, 2000, seed=2)
    b = score_audit.score_bounds(s_in, s_out, delta=1e-5, threshold=0.75,
                                thresholds=[0.5, 1.0, 1.5])
    split = thresholds.SplitThreshold(both_signs=True).bound(s_in, s_out, delta=1e-5)
    self.assertEqual(b["clopper_pearson"].epsilon_lower, split.epsilon_lower)
    fixed = thresholds.FixedThreshold(0.75).bound(s_in, s_out, delta=1e-5)
    self.assertEqual(b["clopper_pearson_fixed"].epsilon_lower, fixed.epsilon_lower)
    # declared thresholds: each at 1 - 0.05 / 3 on every trial, the largest reported
    each = [thresholds.FixedThreshold(t).bound(s_in, s_out, delta=1e-5,
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
        want = one_run_fdp.fdp_epsilon_lower_bound(
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
    # bool arrays are labels, not scores: they used to be audited as 0 / 1 scores
    b = np.array([True, False, True])
    with self.assertRaisesRegex(ValueError, "scores_in_K must hold real-valued scores"):
      score_audit.score_bounds(b, np.arange(3.0), delta=1e-5)
    with self.assertRaisesRegex(ValueError, "scores_out_K"):
      score_audit.score_bounds(np.arange(3.0), b, delta=1e-5)


if __name__ == "__main__":
  absltest.main()
