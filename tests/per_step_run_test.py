"""Tests for dpjax.audit.per_step_run: the per-step audit's runs and row, and its coverage.

Statistical checks use fixed seeds and state their tolerance:
  * per-step score moments from real DP-SGD runs: within 5 standard errors of the
    closed form (OUT N(0, s^2), IN (1 - q) N(0, s^2) + q N(1, s^2));
  * coverage: the one-sided binomial test of "violation rate <= alpha" at level
    0.001 (`Coverage.p_value >= 1e-3`), as in tests/coverage_test.py.
"""

import math

import jax
import numpy as np
import pytest
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax import accounting, dpsgd, models
from dpjax.audit import coverage, per_step, per_step_run, variants
from dpjax.audit import run as arun
from dpjax.data import canaries

_DELTA = 1e-5


class CoverageTest(parameterized.TestCase):

  @parameterized.named_parameters(("gdp", 1.0, 3.0, 20), ("subsampled", 0.2, 1.0, 20))
  def test_never_above_exact_beyond_alpha(self, q, sigma, t):
    mech = per_step_run.step_mechanism(sigma, q, t)
    exact = mech.true_epsilon(_DELTA)
    self.assertAlmostEqual(exact, accounting.dpsgd_epsilon(sigma, q, t, _DELTA, accountant="pld"))
    res = coverage.measure(per_step_run.coverage_estimators(mech), mech, audits=100, trials=20_000,
                           delta=_DELTA, rng=np.random.default_rng(0))
    by = {r.estimator: r for r in res}
    for r in res:
      self.assertTrue(r.assumption_met)
      self.assertTrue(r.within_nominal(1e-3), r)
    self.assertEqual(by["per_step_bound"].violations, 0)        # also an absolute check
    self.assertGreater(by["per_step_bound"].median_epsilon_lower, 0.3 * exact)
    self.assertGreater(by["per_step_estimate"].median_epsilon_lower, 0.8 * exact)

  def test_step_mechanism_samples_its_law(self):
    mech = per_step_run.step_mechanism(2.0, 0.3, 10)
    rng = np.random.default_rng(4)
    n = 400_000
    s_in = mech.sample(rng, np.ones(n, bool))
    s_out = mech.sample(rng, np.zeros(n, bool))
    self.assertLess(abs(s_out.mean()) / (2.0 / math.sqrt(n)), 5)
    self.assertLess(abs(s_in.mean() - 0.3) / (math.sqrt(4.0 + 0.21) / math.sqrt(n)), 5)
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      per_step_run.step_mechanism(-1.0, 0.3, 10)


class RunLevelScoresTest(parameterized.TestCase):

  @parameterized.named_parameters(("q02", 0.2), ("q1", 1.0))
  def test_one_program_per_q_equals_the_pipelines_scores_bit_for_bit(self, q):
    # sigma is traced (one program for every claim at q); the scores must be those of
    # run.white_box_llr_scores, whose program has sigma as a constant
    rng = np.random.default_rng(5)
    programs = per_step_run._llr_sums._cache_size()
    for sigma in (18.176, 9.704, 2.984, 0.7):
      o = (sigma * rng.standard_normal((2, 40, 16)) + (rng.random((2, 40, 16)) < q)).astype(
          np.float32)
      ours = per_step_run._llr_sums(o, 2.0 * sigma * sigma, sampling_prob=q)
      ref = arun.white_box_llr_scores(o, 1.0, sampling_prob=q, noise_multiplier=sigma)
      np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    self.assertLessEqual(per_step_run._llr_sums._cache_size() - programs, 1)


class StepObservationsTest(parameterized.TestCase):
  """The trainer's per-step scores against their closed form (real DP-SGD runs)."""

  @parameterized.named_parameters(("q1", 1.0), ("q02", 0.2))
  def test_scores_follow_the_closed_form(self, q):
    sigma, t, k, m = 2.0, 100, 32, 8
    data = canaries.audit_data(jax.random.key(0), 20)
    model = models.logistic_regression(data.num_features)
    st = arun.Setting("s", accounting.dpsgd_epsilon(sigma, q, t, _DELTA), sigma)
    cfg = dpsgd.DpSgdConfig(dataset_size=int(data.x_NxD.shape[0]), sampling_prob=q,
                            num_steps=t, noise_multiplier=sigma, delta=_DELTA)
    var = variants.variant("correct", cfg, model)
    g = per_step_run.canary_bits(m, k, 0)
    np.testing.assert_array_equal(g.sum(axis=1), k // 2)
    o = np.asarray(per_step_run.step_observations(jax.random.key(1), st, data, model, var, g),
                   np.float64)
    self.assertEqual(o.shape, (m, t, k))
    o_in, o_out = np.transpose(o, (0, 2, 1))[g].ravel(), np.transpose(o, (0, 2, 1))[~g].ravel()
    n_in, n_out = o_in.size, o_out.size
    var_in = sigma ** 2 + q * (1 - q)
    # means: N(0, s^2) OUT, mean q IN; variances: s^2 and s^2 + q (1 - q) (sd of a
    # sample variance ~ v sqrt(2 / n) for near-normal data)
    self.assertLess(abs(o_out.mean()) / (sigma / math.sqrt(n_out)), 5)
    self.assertLess(abs(o_in.mean() - q) / math.sqrt(var_in / n_in), 5)
    self.assertLess(abs(o_out.var() - sigma ** 2) / (sigma ** 2 * math.sqrt(2 / n_out)), 5)
    self.assertLess(abs(o_in.var() - var_in) / (var_in * math.sqrt(2 / n_in)), 5)
    # consecutive steps uncorrelated: lag-1 correlation of each canary's centred steps
    c = np.transpose(o, (0, 2, 1)) - np.where(g, q, 0.0)[:, :, None]      # [M, K, T]
    self.assertLess(abs(np.corrcoef(c[..., :-1].ravel(), c[..., 1:].ravel())[0, 1]),
                    5 / math.sqrt(c[..., 1:].size))
    if q < 1:   # the mixture: P(o > 1/2 | IN) = (1 - q) Phi(-1/(2s)) + q Phi(1/(2s))
      p = (1 - q) * sps.norm.sf(0.5 / sigma) + q * sps.norm.sf(-0.5 / sigma)
      self.assertLess(abs(np.mean(o_in > 0.5) - p) / math.sqrt(p * (1 - p) / n_in), 5)

  def test_noise_free_full_batch_observations_are_the_bits(self):
    # q = 1 and no noise: each canary's leaf coordinate is its IN bit at every step
    data = canaries.audit_data(jax.random.key(0), 20)
    model = models.logistic_regression(data.num_features)
    cfg = dpsgd.DpSgdConfig(dataset_size=int(data.x_NxD.shape[0]), sampling_prob=1.0,
                            num_steps=5, noise_multiplier=0.0, delta=_DELTA)
    var = variants.variant("correct", cfg, model)
    st = arun.Setting("s", 1.0, 1.0)           # only sigma > 0 is checked; cfg has none
    o = per_step_run.step_observations(jax.random.key(3), st, data, model, var,
                                       np.array([[True, False, True], [False, False, True]]))
    np.testing.assert_array_equal(np.asarray(o), np.broadcast_to(
        np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], np.float32)[:, None, :], (2, 5, 3)))

  @pytest.mark.slow  # about 20 s; the experiment's per-step test checks a row end to end
  def test_per_step_audit_row(self):
    data = canaries.audit_data(jax.random.key(0), 20)
    model = models.logistic_regression(data.num_features)
    spec = per_step_run.PerStepSpec(sampling_prob=0.5, num_steps=50, delta=_DELTA, runs=8,
                                    canaries=8, observation_budget=50 * 8 * 3)
    st = arun.settings([8.0], 0.5, 50, _DELTA, False)[0]
    row = per_step_run.per_step_audit(jax.random.key(2), spec, st, data, model)
    self.assertLessEqual(row["bound"], row["epsilon_pld"])
    self.assertEqual((row["trials_in"], row["trials_out"]), (8 * 4 * 50, 8 * 4 * 50))
    self.assertAlmostEqual(row["bound_fraction_of_exact"], row["bound"] / row["epsilon_pld"])
    self.assertEqual(row["estimate_assumption"], per_step.ASSUMPTION_SUBSAMPLED_GAUSSIAN)
    self.assertLessEqual(row["run_level_bound"], row["epsilon_pld"])
    self.assertGreater(row["cpu_seconds"], 0)
    with self.assertRaisesRegex(ValueError, "canaries"):
      per_step_run.PerStepSpec(sampling_prob=0.5, num_steps=50, delta=_DELTA, canaries=1)
    with self.assertRaisesRegex(ValueError, "setting"):
      per_step_run.per_step_audit(jax.random.key(2), spec, arun.Setting("n", math.inf, 0.0),
                                  data, model)


if __name__ == "__main__":
  absltest.main()
