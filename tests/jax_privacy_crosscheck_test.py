"""Cross-check of our score estimators against jax_privacy's `auditing.CanaryScoreAuditor`.

jax_privacy is an optional dependency (not in requirements.txt); without it every
test here is skipped. On the same score arrays:

* Clopper-Pearson at a fixed threshold is the same method in both: equal to
  rounding (their `Explicit` strategy, `one_sided=False`, vs `FixedThreshold`).
  Their default (`Bonferroni`: every threshold on the same scores, confidence
  split over them) is reproduced exactly by our counts and `stats` at the
  per-threshold confidence; ours chooses the threshold on half the trials.
* One-run (Steinke, Nasr & Jagielski 2023): the same counts (canaries, guesses,
  correct guesses) give the same eps, to their root-finder tolerance.
* Their f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2025) takes the
  Gaussian mechanism calibrated to (eps, delta) as f: it is our
  `fdp_epsilon_lower_bound(family="gdp")` on the same counts.
* Their `epsilon_from_gdp` (2.0.0) takes |mu| of Clopper-Pearson UPPER limits on
  FPR and FNR; on null scores those give a negative mu, mirrored into a positive
  eps. Ours clamps it to 0.

`agreement_table()` prints the full-pipeline comparison kept in BUILD_NOTES.md.
"""

import numpy as np
import pytest
from absl.testing import absltest
from scipy import stats as sps

from dpjax.accounting import gdp
from dpjax.audit import one_run, one_run_fdp, score_audit, stats, thresholds

jpa = pytest.importorskip("jax_privacy.auditing")

_DELTA = 1e-5
_ALPHA = 0.05
# Thresholds that no continuous score equals, so ">= t" (theirs) and "> t" (ours)
# make the same decisions.
_THRESHOLDS = (-0.5123, 0.7123, 1.9123, 3.1123)


def _scores(seed, mu, k_in, k_out):
  rng = np.random.default_rng(seed)
  return rng.normal(mu, 1.0, k_in), rng.normal(0.0, 1.0, k_out)


def _cases():
  """(mu, K_in, K_out) score sets: null, weak, strong, a small unbalanced one."""
  return [(0.0, 400, 400), (1.0, 400, 407), (2.0, 60, 50), (4.0, 300, 300)]


class JaxPrivacyCrossCheckTest(absltest.TestCase):

  def test_clopper_pearson_at_a_fixed_threshold_is_the_same_method(self):
    n = 0
    for seed, (mu, k_in, k_out) in enumerate(_cases()):
      s_in, s_out = _scores(seed, mu, k_in, k_out)
      auditor = jpa.CanaryScoreAuditor(s_in, s_out)
      for t in _THRESHOLDS:
        theirs = auditor.epsilon_clopper_pearson(_ALPHA, _DELTA, one_sided=False,
                                                 threshold_strategy=jpa.Explicit(t))
        ours = thresholds.FixedThreshold(t).bound(s_in, s_out, delta=_DELTA,
                                                  confidence=1 - _ALPHA).epsilon_lower
        self.assertAlmostEqual(theirs, ours, delta=1e-12, msg=(mu, t))
        # one_sided=True keeps only ln(TPR_lower - delta) - ln(FPR_upper), with each
        # rate's limit at alpha / 2 (our two-sided interval's upper limit).
        one = auditor.epsilon_clopper_pearson(_ALPHA, _DELTA, one_sided=True,
                                              threshold_strategy=jpa.Explicit(t))
        _, fpr_u = stats.clopper_pearson(int((s_out > t).sum()), k_out, 1 - _ALPHA)
        _, fnr_u = stats.clopper_pearson(int((s_in <= t).sum()), k_in, 1 - _ALPHA)
        want = max(0.0, np.log(max(1 - fnr_u - _DELTA, 1e-300)) - np.log(fpr_u))
        self.assertAlmostEqual(one, want, delta=1e-12)
        self.assertLessEqual(one, ours + 1e-12)
        n += ours > 0
    self.assertGreaterEqual(n, 6)         # the comparison is not all zeros

  def test_their_default_is_every_threshold_at_a_split_confidence(self):
    for seed, (mu, k_in, k_out) in enumerate(_cases()):
      s_in, s_out = _scores(seed, mu, k_in, k_out)
      theirs = jpa.CanaryScoreAuditor(s_in, s_out).epsilon_clopper_pearson(
          _ALPHA, _DELTA, one_sided=False)
      # Their candidate tests are "IN iff score >= t" at the vertices of the concave hull
      # of the empirical ROC (chosen from these same scores); the union bound divides by
      # their number. Given that set (an attribute of theirs), our statistics agree.
      auditor = jpa.CanaryScoreAuditor(s_in, s_out)
      thr = np.asarray(auditor._thresholds)                    # pylint: disable=protected-access
      num_tests = thr.size
      self.assertLess(num_tests, np.union1d(s_in, s_out).size / 4)
      fp = (s_out[None, :] >= thr[:, None]).sum(1)
      fn = (s_in[None, :] < thr[:, None]).sum(1)
      per = 1 - _ALPHA / num_tests
      ours = np.max(stats.epsilon_lower_bound(fp, k_out, fn, k_in, _DELTA, per))
      self.assertAlmostEqual(theirs, float(ours), delta=1e-9, msg=mu)

  def test_one_run_same_counts_same_bound(self):
    for seed, (mu, k_in, k_out) in enumerate(_cases()):
      s_in, s_out = _scores(seed, mu, k_in, k_out)
      auditor = jpa.CanaryScoreAuditor(s_in, s_out)
      for t in _THRESHOLDS:
        # Theirs: every score a canary, guesses IN for scores >= t, no OUT guesses.
        m, v = k_in + k_out, int((s_in >= t).sum())
        r = v + int((s_out >= t).sum())
        theirs = auditor.epsilon_one_run(_ALPHA, _DELTA, threshold_strategy=jpa.Explicit(t))
        ours = one_run.epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                           delta=_DELTA, confidence=1 - _ALPHA)
        self.assertAlmostEqual(theirs, ours, delta=2e-6, msg=(mu, t))   # their xtol 1e-6

  def test_their_fdp_one_run_is_ours_with_gaussian_f(self):
    hits = 0
    for seed, (mu, k_in, k_out) in enumerate(_cases()[1:]):
      s_in, s_out = _scores(seed + 1, mu, k_in, k_out)
      auditor = jpa.CanaryScoreAuditor(s_in, s_out)
      for t in _THRESHOLDS[1:3]:
        m, v = k_in + k_out, int((s_in >= t).sum())
        r = v + int((s_out >= t).sum())
        theirs = auditor.epsilon_one_run_fdp(_ALPHA, _DELTA,
                                             threshold_strategy=jpa.Explicit(t))
        ours = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                               delta=_DELTA, family="gdp",
                                               confidence=1 - _ALPHA).epsilon_lower
        # Theirs: Brent to 1e-6 in eps with sigma from dp_accounting's calibration; ours:
        # the largest rejected mu on a refined grid, then eps of that mu.
        self.assertAlmostEqual(theirs, ours, delta=1e-4 + 1e-4 * ours, msg=(mu, t))
        # And the (eps, delta)-DP trade-off function, valid for every mechanism, is weaker.
        dp = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                             delta=_DELTA, family="dp",
                                             confidence=1 - _ALPHA).epsilon_lower
        self.assertLessEqual(dp, ours + 1e-9)
        hits += ours > 0.5
    self.assertGreaterEqual(hits, 3)

  def test_their_gdp_estimate_mirrors_a_negative_mu_on_null_scores(self):
    for seed in range(4):
      s_in, s_out = _scores(100 + seed, 0.0, 1000, 1000)
      auditor = jpa.CanaryScoreAuditor(s_in, s_out)
      theirs = auditor.epsilon_from_gdp(_ALPHA, _DELTA)
      ours = score_audit.score_bounds(s_in, s_out, delta=_DELTA, confidence=1 - _ALPHA)
      self.assertEqual(ours["gdp"].epsilon_lower, 0.0)
      self.assertEqual(ours["clopper_pearson"].epsilon_lower, 0.0)
      self.assertGreater(theirs, 0.5, seed)            # no signal, yet a positive eps
      # Why: their mu per threshold is Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) with upper
      # limits (Bonferroni over 2 x the tests); on null scores FPR_u + FNR_u > 1 at every
      # tested threshold (the ROC hull's vertices), so every mu is negative, and they report
      # the eps of max |mu|.
      thr = np.asarray(auditor._thresholds)                    # pylint: disable=protected-access
      fp = (s_out[None, :] >= thr[:, None]).sum(1)
      fn = (s_in[None, :] < thr[:, None]).sum(1)
      sig = _ALPHA / (2 * thr.size)
      fpr_u = np.where(fp < 1000, sps.beta.ppf(1 - sig, fp + 1, 1000 - fp), 1.0)
      fnr_u = np.where(fn < 1000, sps.beta.ppf(1 - sig, fn + 1, 1000 - fn), 1.0)
      ok = np.maximum(fpr_u, fnr_u) < 1 - _DELTA
      mu = sps.norm.isf(fpr_u[ok]) - sps.norm.ppf(fnr_u[ok])
      self.assertLess(np.max(mu), 0.0)
      self.assertAlmostEqual(theirs, gdp.gaussian_epsilon(_DELTA, float(np.max(-mu))),
                             delta=1e-4)


def agreement_table(k=1000, seed=0):
  """Markdown table: ours vs theirs, every pipeline at its defaults (delta 1e-5, 95%)."""
  rng = np.random.default_rng(seed)
  sets = [("null", rng.normal(0, 1, k), rng.normal(0, 1, k)),
          ("Gaussian mu = 1", rng.normal(1, 1, k), rng.normal(0, 1, k)),
          ("Gaussian mu = 2", rng.normal(2, 1, k), rng.normal(0, 1, k)),
          ("separable", rng.normal(0, 1, k) + 100, rng.normal(0, 1, k))]
  cols = ["scores", "CP ours split", "CP ours declared set", "CP theirs Bonferroni",
          "CP theirs Split", "one-run ours", "one-run theirs", "f-DP Gaussian ours",
          "f-DP Gaussian theirs", "GDP ours", "GDP theirs", "exact eps"]
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  for name, s_in, s_out in sets:
    a = jpa.CanaryScoreAuditor(s_in, s_out)
    o = score_audit.score_bounds(s_in, s_out, delta=_DELTA, confidence=1 - _ALPHA)
    mu = {"null": 0.0, "Gaussian mu = 1": 1.0, "Gaussian mu = 2": 2.0}.get(name)
    exact = None if mu is None else (0.0 if mu == 0 else gdp.gaussian_epsilon(_DELTA, mu))
    vals = [o["clopper_pearson"].epsilon_lower, o["clopper_pearson_bonferroni"].epsilon_lower,
            a.epsilon_clopper_pearson(_ALPHA, _DELTA, one_sided=False),
            a.epsilon_clopper_pearson(_ALPHA, _DELTA, one_sided=False,
                                      threshold_strategy=jpa.Split(seed=seed)),
            o["one_run"].epsilon_lower, a.epsilon_one_run(_ALPHA, _DELTA),
            o["fdp_one_run_gdp"].epsilon_lower, a.epsilon_one_run_fdp(_ALPHA, _DELTA),
            o["gdp"].epsilon_lower, a.epsilon_from_gdp(_ALPHA, _DELTA), exact]
    lines.append(f"| {name} | " + " | ".join("–" if v is None else f"{float(v):.2f}"
                                            for v in vals) + " |")
  return "\n".join(lines)


if __name__ == "__main__":
  absltest.main()
