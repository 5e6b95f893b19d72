"""Tests for dpjax.audit.mf_audit: the white-box audits of MF training.

Real MF runs (banded Toeplitz, b = 4 square-root coefficients, and the tree, T = 16)
through the privatizer door: full batches, and cyclic Poisson batches (bin rate p = 0.75,
cycle s = 4 >= b, so the amplified accountant applies). One training per strategy is
shared by the tests that read its observations (`_full_batch_runs`). Statistical checks
state their tolerance: sample moments within 5 standard errors; audit bounds are
one-sided 95% bounds, checked against the accountant's eps (never above it) and, for a
planted bug, against the bug's claimed eps (above it), at fixed seeds.
"""

import functools
import math
import warnings

import jax
import numpy as np
import pytest
from absl.testing import absltest, parameterized

from dpjax import matrix_factorization as mf
from dpjax import models, sampling
from dpjax import privatizer as privatizer_lib
from dpjax.audit import mf_audit, mf_variants, per_step_run
from dpjax.audit import run as arun
from dpjax.data import canaries

_T = 16
_STRATEGIES = {"banded": mf.banded_toeplitz(mf.sqrt_toeplitz_coefs(4), _T),
               "tree": mf.tree_aggregation(_T)}
_DELTA = 1e-5


@functools.lru_cache(maxsize=None)
def _data():
  """30 Gaussian records and a record canary (the last row), 8 features: the Dirac canaries'
  observations do not depend on the records (the model never reads their leaf), so a
  synthetic set stands in for `canaries.audit_data`'s credit records at no cost."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(31, 8)).astype(np.float32)
  y = (rng.random(31) < 0.5).astype(np.int32)
  data = canaries.AuditData(jax.numpy.asarray(x), jax.numpy.asarray(y), 30, 8)
  return data, models.logistic_regression(data.num_features)


def _sigma(c, mu=1.5):
  """sigma at which full-batch training with C is mu-GDP."""
  return mf.cyclic_sensitivity(c, 1) / mu


@functools.lru_cache(maxsize=None)
def _full_batch_runs(name, runs=8, canaries_per_run=2048):
  """(o float32[M, T, K], in bool[M, K], sigma): what `per_step_audit(key(1), ...)` trains."""
  c = _STRATEGIES[name]
  sigma = _sigma(c)
  data, model = _data()
  var = mf_audit.full_batch_training(c, sigma, int(data.x_NxD.shape[0]))
  g = per_step_run.canary_bits(runs, canaries_per_run, 0)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    o = per_step_run.step_observations(jax.random.key(1), arun.Setting("mf", 1.0, sigma),
                                       data, model, var, g)
  return np.asarray(o), g, sigma


class HelpersTest(absltest.TestCase):

  def test_whiten_inverts_the_strategy(self):
    c = _STRATEGIES["tree"]
    o = np.random.default_rng(0).normal(size=(2, _T, 3)).astype(np.float32)
    back = np.linalg.solve(c, np.asarray(mf_audit.whiten(o, c), np.float64))
    np.testing.assert_allclose(back.transpose(1, 0, 2), o.transpose(1, 0, 2), atol=1e-4)
    with self.assertRaisesRegex(ValueError, "steps"):
      mf_audit.whiten(o[:, :4], c)

  def test_iid_steps_by_hand(self):
    s, a = mf_audit.iid_steps(_STRATEGIES["banded"])      # C 1 = 1, 1.5, 1.875, 2.1875...
    self.assertEqual(s.tolist(), list(range(3, _T)))
    self.assertAlmostEqual(a, 2.1875)
    s, a = mf_audit.iid_steps(_STRATEGIES["tree"])        # the root: the largest a^2
    a_all = _STRATEGIES["tree"].sum(axis=1)
    self.assertEqual(s.tolist(), [_T - 1])
    self.assertAlmostEqual(a, a_all.max())
    self.assertTrue(all(np.sum(np.isclose(a_all, v)) * v * v <= a * a + 1e-9 for v in a_all))
    with self.assertRaisesRegex(ValueError, "participation_T"):
      mf_audit.iid_steps(np.eye(3), np.zeros(3))

  def test_participation_columns_by_hand(self):
    c = _STRATEGIES["banded"]        # b = 4: columns 0 .. 12 full (norm ||coefs||), 13 .. 15 cut
    cols, a = mf_audit.participation_columns(c, 4, [0, 1, 2, 3, 1])
    self.assertAlmostEqual(a, np.linalg.norm(mf.sqrt_toeplitz_coefs(4)))
    # bin 0 has 0, 4, 8, 12; bins 1..3 three full columns each: P = 3.
    self.assertEqual(cols.tolist(), [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11], [1, 5, 9]])
    # The columns of one bin have disjoint supports: C^T C is diagonal on them.
    x = c.T @ c
    for row in cols:
      np.testing.assert_allclose(x[np.ix_(row, row)], a * a * np.eye(3), atol=1e-12)
    with self.assertRaisesRegex(ValueError, "bins_K"):
      mf_audit.participation_columns(c, 4, [4])
    with self.assertRaisesRegex(ValueError, "bands"):
      mf_audit.audited_training(c, 1.0, 10, sampler=sampling.CyclicPoissonSampler(0.5, 2))
    with self.assertRaisesRegex(ValueError, "cycle_length"):
      mf_audit.audited_training(c, 1.0, 10, sampler=sampling.CyclicPoissonSampler(0.5, 17))

  def test_accountant_epsilon_is_the_gaussian_mechanism(self):
    c = _STRATEGIES["banded"]
    from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top
    mu = np.linalg.norm(c.sum(axis=1)) / 3.0
    self.assertAlmostEqual(mf_audit.accountant_epsilon(c, 3.0, _DELTA),
                           gdp.gaussian_epsilon(_DELTA, mu), delta=1e-3)


class ObservationsTest(parameterized.TestCase):
  """The audited MF runs' canary coordinates: covariance sigma^2 C^-1 C^-T, whitened I."""

  @parameterized.named_parameters(("banded", "banded"), ("tree", "tree"))
  def test_whitened_steps_are_independent(self, name):
    c = _STRATEGIES[name]
    o, g, sigma = _full_batch_runs(name)
    o = o.astype(np.float64)
    out = o.transpose(0, 2, 1)[~g]                              # OUT: [n, T], pure noise
    inside = o.transpose(0, 2, 1)[g]
    n = out.shape[0]
    cinv = np.linalg.inv(c)
    expected = sigma ** 2 * cinv @ cinv.T
    sd = np.sqrt((expected ** 2 + np.outer(np.diag(expected), np.diag(expected))) / n)
    self.assertLess(np.max(np.abs(out.T @ out / n - expected) / sd), 5.0)
    w = np.asarray(mf_audit.whiten(o.astype(np.float32), c), np.float64).transpose(0, 2, 1)
    w_out, w_in = w[~g], w[g]
    cov = w_out.T @ w_out / n
    np.testing.assert_array_less(np.abs(cov - sigma ** 2 * np.eye(_T)),
                                 5 * sigma ** 2 * math.sqrt(2 / n))
    # IN: mean C 1 after whitening, 1 before (every step, full batches).
    se = sigma / math.sqrt(inside.shape[0])
    np.testing.assert_array_less(np.abs(w_in.mean(0) - c.sum(axis=1)), 5 * se)
    np.testing.assert_array_less(np.abs(inside.mean(0) - 1.0), 5 * np.sqrt(np.diag(expected))
                                 / math.sqrt(inside.shape[0]))


class PerStepAuditTest(parameterized.TestCase):

  @parameterized.named_parameters(("banded", "banded"), ("tree", "tree"))
  def test_below_the_accountant_and_catches_one_participation(self, name):
    c = _STRATEGIES[name]
    o, g, sigma = _full_batch_runs(name)
    r = mf_audit.observation_audit(o, g, c, sigma, delta=_DELTA)
    exact = mf_audit.accountant_epsilon(c, sigma, _DELTA)
    claimed = mf.epsilon(sigma, mf.sensitivity(c, 1), _DELTA)    # one participation
    self.assertAlmostEqual(exact, mf.epsilon(sigma, np.linalg.norm(c.sum(axis=1)), _DELTA))
    # Valid bounds stay below the accountant's eps of the training that ran ...
    self.assertLess(r["bound"], exact)
    self.assertLess(r["run_level_bound"], exact)
    self.assertLess(r["final_model_bound"], exact)
    self.assertGreater(r["run_level_bound"], 0.3 * exact)
    if name == "banded":                       # 13 i.i.d. whitened steps: most of eps
      self.assertGreater(r["bound"], 0.7 * exact)
    # ... and above the eps claimed for one participation (the records took part T times).
    self.assertLess(claimed, 0.2 * exact)
    self.assertGreater(r["bound"], claimed)
    self.assertGreater(r["run_level_bound"], claimed)

  def test_per_step_audit_is_the_observation_audit_of_its_runs(self):
    c = _STRATEGIES["banded"]
    o, g, sigma = _full_batch_runs("banded")
    data, model = _data()
    r = mf_audit.per_step_audit(jax.random.key(1), c, sigma, data, model, runs=8,
                                canaries=2048, claimed_sensitivity=mf.sensitivity(c, 1))
    direct = mf_audit.observation_audit(o, g, c, sigma, delta=_DELTA)
    for k in ("bound", "run_level_bound", "final_model_bound", "estimate", "estimate_full"):
      self.assertEqual(r[k], direct[k], k)
    self.assertAlmostEqual(r["epsilon_claimed"],
                           mf.epsilon(sigma, mf.sensitivity(c, 1), _DELTA))

  @pytest.mark.slow  # a third compiled training; mf_variants_test measures this bug's eps
  def test_noise_not_carried_is_harmless(self):
    coefs = mf.sqrt_toeplitz_coefs(4)
    c = mf.banded_toeplitz(coefs, _T)
    data, model = _data()
    sigma = _sigma(c)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      priv = mf_variants.NoiseNotCarried(mf.toeplitz_stream(coefs, _T))
    r = mf_audit.per_step_audit(jax.random.key(2), c, sigma, data, model, runs=4,
                                canaries=1024, privatizer=priv)
    # Independent noise z_t / c_0: the Gaussian mechanism with sens c_0 sqrt(T) < ||C 1||.
    true_eps = mf.epsilon(sigma, coefs[0] * math.sqrt(_T), _DELTA)
    self.assertLess(true_eps, r["epsilon_accountant"])
    self.assertLess(r["run_level_bound"], true_eps)   # valid without i.i.d. steps
    self.assertLess(r["final_model_bound"], true_eps)


class AmplifiedAuditTest(absltest.TestCase):
  """Cyclic Poisson batches (p = 0.75, s = 4 >= b = 4, T = 16: k = 4 participations per
  record, P = 3 full-norm columns in every bin): the amplified accountant's eps is the
  claim; the one-participation claim (`accountant_epsilon` with cycle T) is the bug."""

  _P, _S, _SIGMA = 0.75, 4, 1.2

  def test_below_the_amplified_accountant_and_catches_one_participation(self):
    c = _STRATEGIES["banded"]
    data, model = _data()
    sampler = sampling.CyclicPoissonSampler(bin_prob=self._P, cycle_length=self._S)
    # The claim of one participation: one subsampled step at the largest column norm (an
    # upper bound on it: a coarse grid), i.e. `accountant_epsilon` with cycle_length T.
    one = mf.amplified_epsilon(c, self._SIGMA, self._P, _T, _DELTA, 1e-3)
    r = mf_audit.per_step_audit(jax.random.key(1), c, self._SIGMA, data, model, runs=8,
                                canaries=2048, sampler=sampler, claimed_epsilon=one)
    exact = r["epsilon_accountant"]
    # The engine's statement is the amplified eps (the fitted step carried to the whole
    # release, "estimate_full", lands on it), below the unamplified one.
    self.assertAlmostEqual(r["estimate_full"] / exact, 1.0, delta=0.1)
    self.assertLess(exact, mf.epsilon(self._SIGMA, mf.cyclic_sensitivity(c, self._S), _DELTA))
    self.assertEqual(r["iid_steps"], 3)
    # The projections are the claimed step: shift 1 (p of the time), scale sigma / a,
    # within 5 standard errors (n = 8 * 2048 * 3 trials per side).
    n = r["trials_out"]
    s_claim = r["step_scale_claimed"]
    self.assertLess(abs(r["step_scale"] - s_claim), 5 * s_claim / math.sqrt(2 * n))
    var_in = s_claim ** 2 + self._P * (1 - self._P)               # the mixture's variance
    se_shift = math.sqrt((var_in + s_claim ** 2) / n) / self._P
    self.assertLess(abs(r["step_shift"] - 1.0), 5 * se_shift)
    # Valid bounds stay below the amplified accountant's eps (95% each) ...
    for k in ("bound", "run_level_bound", "final_model_bound", "estimate"):
      self.assertLess(r[k], exact, k)
    self.assertGreater(r["run_level_bound"], 0.25 * exact)
    self.assertGreater(r["bound"], 0.5 * exact)
    # ... and bound (b) (3 participations) is above the one-participation claim.
    self.assertLess(one, 0.5 * exact)
    self.assertGreater(r["bound"], one)
    # Where records take part once (s >= T) the one-participation claim is no bug: the
    # sensitivity it uses is the one of the sampler's participation.
    self.assertEqual(mf.cyclic_sensitivity(c, _T), mf.sensitivity(c, 1))

  @pytest.mark.slow
  def test_black_box_canary_audit_below_the_amplified_accountant(self):
    c = _STRATEGIES["banded"]
    data, model = _data()
    n = data.canary_index
    r = mf_audit.canary_audit(
        jax.random.key(5), c, self._SIGMA, data.x_NxD[:n], data.y_N[:n], model,
        num_runs=1000, num_gradient_canaries=0,
        record_canary=(data.x_NxD[n], int(data.y_N[n])),
        sampler=sampling.CyclicPoissonSampler(self._P, self._S))
    self.assertIsNone(r["white_box"])
    self.assertLess(r["black_box"], r["epsilon_accountant"])


class CanaryAuditTest(parameterized.TestCase):

  def _final_model_audit(self, name, num_runs):
    c = _STRATEGIES[name]
    data, model = _data()
    sigma = _sigma(c, mu=2.0)
    n = data.canary_index
    r = mf_audit.canary_audit(jax.random.key(5), c, sigma, data.x_NxD[:n], data.y_N[:n], model,
                              num_runs=num_runs, num_gradient_canaries=8,
                              record_canary=(data.x_NxD[n], int(data.y_N[n])),
                              claimed_sensitivity=mf.sensitivity(c, 1))
    self.assertLess(r["white_box"], r["epsilon_accountant"])
    self.assertLess(r["black_box"], r["epsilon_accountant"])
    self.assertGreater(r["white_box"], r["epsilon_claimed"])     # one participation: caught

  def test_final_model_audit_below_accountant_and_catches_bug_banded(self):
    self._final_model_audit("banded", 400)

  @pytest.mark.slow
  def test_final_model_audit_below_accountant_and_catches_bug_tree(self):
    self._final_model_audit("tree", 1000)

  @pytest.mark.slow
  def test_final_model_audit_banded_many_runs(self):
    self._final_model_audit("banded", 1000)

  def test_correct_privatizer_is_the_default(self):
    var = mf_audit.full_batch_training(_STRATEGIES["tree"], 1.0, 10)
    self.assertIsInstance(var.privatizer, privatizer_lib.CorrelatedNoisePrivatizer)
    self.assertEqual(var.config.sampling_prob, 1.0)
    self.assertEqual(var.config.num_steps, _T)
    amp = mf_audit.audited_training(_STRATEGIES["banded"], 1.0, 10,
                                    sampler=sampling.CyclicPoissonSampler(0.5, 4))
    self.assertEqual(amp.config.sampling_prob, 0.125)
    self.assertIs(amp.privatizer, mf_audit.audited_training(_STRATEGIES["banded"], 2.0, 10)
                  .privatizer)                    # one instance per C: one compiled program


if __name__ == "__main__":
  absltest.main()
