"""experiments/audit_bugs.py: its probe world's theory (`variants`) against Monte Carlo, and a small run."""

import json
import math
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from scipy import optimize
from scipy import stats as sps

from dpjax import accounting, sampling
from dpjax.accounting import gdp
from dpjax.audit import variants
from experiments import audit_bugs


class TheoryTest(absltest.TestCase):

  def test_scale_min_rates_match_monte_carlo(self):
    # K = 3 free coordinates, one base record, q = 0.5, T = 4: chi2_3 / d^2 per step,
    # d = max(1, Binomial(n, q)) with n = 1 (OUT) or 2 (IN); "some step below tau".
    k, n0, q, t, tau = 3, 1, 0.5, 4, 0.4
    lf, lt = variants.scale_min_log_rates(tau, k, n0, q, t)
    rng = np.random.default_rng(0)
    m = 400_000
    for n, got in ((n0, lf[0]), (n0 + 1, lt[0])):
      d = np.maximum(rng.binomial(n, q, (m, t)), 1)
      s = rng.chisquare(k, (m, t)) / d ** 2
      p = np.mean(np.min(s, axis=1) < tau)
      self.assertLess(abs(math.exp(got) - p), 5 * math.sqrt(p * (1 - p) / m), (n, p))

  def test_floored_bound_is_the_chi2_test(self):
    # n0 = 3, q = 0.5: divisors 1 (OUT) and 2 (IN) at every step.
    k, t = 4, 3
    eps = variants.floored_denominator_lower_bound(k, 3, 0.5, t, 1e-5)
    # direct: at tau = K T / 2, FPR = P(chi2_KT < tau), TPR = P(chi2_KT < 4 tau)
    tau = k * t / 2.0
    direct = math.log((sps.chi2.cdf(4 * tau, k * t) - 1e-5) / sps.chi2.cdf(tau, k * t))
    self.assertGreaterEqual(eps, direct - 1e-9)
    # the best threshold, found independently (bounded search on log tau)
    f = lambda lt: -(math.log(max(sps.chi2.cdf(4 * math.exp(lt), k * t) - 1e-5, 1e-300))
                     - sps.chi2.logcdf(math.exp(lt), k * t))
    best = -optimize.minimize_scalar(f, bounds=(math.log(0.05), math.log(2.0 * k * t)),
                                     method="bounded").fun
    self.assertAlmostEqual(eps, best, delta=0.02 * best)
    # equal divisors (n0 = 4 -> 2, n0 + 1 = 5 -> 2): nothing to see
    self.assertEqual(variants.floored_denominator_lower_bound(k, 4, 0.5, t, 1e-5), 0.0)

  def test_shuffle_leaves_the_last_batch_empty_without_the_canary(self):
    # The premise of the slot test: 9 records in 10 slots of 1, the canary fills the last.
    s = sampling.ShuffleSampler.like_poisson(0.1, 10)
    self.assertEqual((s.batch_size, s.steps_per_epoch), (1, 10))
    masks = jax.jit(jax.vmap(s.batch_mask, in_axes=(None, 0, None)))
    out = np.asarray(masks(jax.random.key(4), jnp.arange(30), jnp.arange(10) < 9))
    self.assertEqual(out[9::10].sum(), 0)            # the last batch of each epoch
    np.testing.assert_array_equal(out.sum(axis=0), [3] * 9 + [0])   # once per epoch
    full = np.asarray(masks(jax.random.key(4), jnp.arange(30), jnp.ones(10, bool)))
    np.testing.assert_array_equal(full.sum(axis=1), np.ones(30))
    # the slot statistic is exactly Gaussian: mean gap T // E, sd sqrt(2 T // E) sigma
    mu = variants.shuffle_slot_mu(2.0, 100, 10)
    self.assertAlmostEqual(mu, 10 / (math.sqrt(20) * 2.0))
    self.assertGreater(gdp.gaussian_epsilon(1e-5, mu), 0.0)

  def test_true_epsilon_kinds(self):
    cfg = audit_bugs.AuditBugsConfig(trials=10)
    by = {c.key: c for c in audit_bugs.CASES}
    sigma = 3.0
    eps, kind = audit_bugs.true_epsilon(by["correct_q0.5_n2"], sigma, cfg)
    self.assertEqual(kind, "exact")
    self.assertAlmostEqual(eps, accounting.dpsgd_epsilon(sigma, 0.5, 32, 1e-5, "pld"))
    public, kind = audit_bugs.true_epsilon(by["floored_expected_batch_public"], sigma, cfg)
    self.assertEqual((public, kind), (eps, "exact"))          # post-processing
    over, kind = audit_bugs.true_epsilon(by["over_rate_sampler"], sigma, cfg)
    self.assertAlmostEqual(over, accounting.dpsgd_epsilon(sigma, 1.0, 32, 1e-5, "pld"))

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "trials"):
      audit_bugs.AuditBugsConfig(trials=1)
    with self.assertRaisesRegex(ValueError, "cases"):
      audit_bugs.AuditBugsConfig(cases=("nope",))


class RunTest(absltest.TestCase):

  @pytest.mark.slow
  def test_run_small(self):
    cfg = audit_bugs.AuditBugsConfig(
        trials=100, epsilons=(1.0,), noise_coords=50,
        cases=("correct_q0.5_n4", "floored_expected_batch", "floored_expected_batch_public",
               "realised_batch_denominator"))
    out = tempfile.mkdtemp()
    audit_bugs.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertTrue(os.path.exists(os.path.join(out, "audit_bugs.png")))
    rows = {r["case"].split(" (")[0] + ("_public" if "claimed n" in r["case"] else ""): r
            for r in doc["results"]["rows"]}
    for r in doc["results"]["rows"]:
      for b in r["bounds"].values():
        self.assertLessEqual(b["epsilon_lower"], r["ceiling"] + 1e-9)
      if r["true_epsilon_kind"] == "exact":            # correct, or a public divisor
        self.assertLessEqual(r["epsilon_lower"], r["true_epsilon"])
        self.assertFalse(r["caught"])
    self.assertTrue(rows["floored_expected_batch"]["caught"])
    self.assertTrue(rows["realised_batch_denominator"]["caught"])
    self.assertIn("scale_sum", rows["floored_expected_batch"]["caught_by"])
    out2 = tempfile.mkdtemp()
    audit_bugs.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])


if __name__ == "__main__":
  absltest.main()
