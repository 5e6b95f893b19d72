"""Tests for dpjax.audit.mf_audit: the white-box audits of MF training.

Real full-batch MF runs (banded Toeplitz, b = 4 square-root coefficients, and the tree,
T = 16) through the privatizer door. Statistical checks state their tolerance: sample
covariances within 5 standard errors; audit bounds are one-sided 95% bounds, checked
against the MF accountant's eps (never above it) and, for a planted bug, against the
bug's claimed eps (above it), at fixed seeds.
"""

import math
import warnings

import jax
import numpy as np
from absl.testing import absltest, parameterized

from dpjax import matrix_factorization as mf
from dpjax import models
from dpjax import privatizer as privatizer_lib
from dpjax.audit import mf_audit, mf_variants, per_step_run
from dpjax.audit import run as arun
from dpjax.data import canaries

_T = 16
_STRATEGIES = {"banded": mf.banded_toeplitz(mf.sqrt_toeplitz_coefs(4), _T),
               "tree": mf.tree_aggregation(_T)}


def _data():
  data = canaries.audit_data(jax.random.key(0), 30)
  return data, models.logistic_regression(data.num_features)


def _sigma(c, mu=1.5):
  """sigma at which full-batch training with C is mu-GDP."""
  return mf.cyclic_sensitivity(c, 1) / mu


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

  def test_accountant_epsilon_is_the_gaussian_mechanism(self):
    c = _STRATEGIES["banded"]
    from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top
    mu = np.linalg.norm(c.sum(axis=1)) / 3.0
    self.assertAlmostEqual(mf_audit.accountant_epsilon(c, 3.0, 1e-5),
                           gdp.gaussian_epsilon(1e-5, mu), delta=1e-3)


class ObservationsTest(parameterized.TestCase):
  """The audited MF runs' canary coordinates: covariance sigma^2 C^-1 C^-T, whitened I."""

  @parameterized.named_parameters(("banded", "banded"), ("tree", "tree"))
  def test_whitened_steps_are_independent(self, name):
    c = _STRATEGIES[name]
    sigma = 2.0
    data, model = _data()
    var = mf_audit.full_batch_training(c, sigma, int(data.x_NxD.shape[0]))
    g = per_step_run.canary_bits(8, 512, 0)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      o = per_step_run.step_observations(jax.random.key(3), arun.Setting("mf", 1.0, sigma),
                                         data, model, var, g)
    o = np.asarray(o, np.float64)
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
    data, model = _data()
    sigma = _sigma(c)
    r = mf_audit.per_step_audit(jax.random.key(1), c, sigma, data, model, runs=8,
                                canaries=2048, claimed_sensitivity=mf.sensitivity(c, 1))
    exact = r["epsilon_accountant"]
    self.assertAlmostEqual(exact, mf.epsilon(sigma, np.linalg.norm(c.sum(axis=1)), 1e-5))
    # Valid bounds stay below the accountant's eps of the training that ran ...
    self.assertLess(r["bound"], exact)
    self.assertLess(r["run_level_bound"], exact)
    self.assertGreater(r["run_level_bound"], 0.3 * exact)
    if name == "banded":                       # 13 i.i.d. whitened steps: most of eps
      self.assertGreater(r["bound"], 0.7 * exact)
    # ... and above the eps claimed for one participation (the records took part T times).
    self.assertLess(r["epsilon_claimed"], 0.2 * exact)
    self.assertGreater(r["bound"], r["epsilon_claimed"])
    self.assertGreater(r["run_level_bound"], r["epsilon_claimed"])

  def test_noise_not_carried_is_harmless(self):
    coefs = mf.sqrt_toeplitz_coefs(4)
    c = mf.banded_toeplitz(coefs, _T)
    data, model = _data()
    sigma = _sigma(c)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      priv = mf_variants.NoiseNotCarried(mf.toeplitz_stream(coefs, _T))
    r = mf_audit.per_step_audit(jax.random.key(2), c, sigma, data, model, runs=8,
                                canaries=1024, privatizer=priv)
    # Independent noise z_t / c_0: the Gaussian mechanism with sens c_0 sqrt(T) < ||C 1||.
    true_eps = mf.epsilon(sigma, coefs[0] * math.sqrt(_T), 1e-5)
    self.assertLess(true_eps, r["epsilon_accountant"])
    self.assertLess(r["run_level_bound"], true_eps)   # valid without i.i.d. steps


class CanaryAuditTest(parameterized.TestCase):

  @parameterized.named_parameters(("banded", "banded"), ("tree", "tree"))
  def test_final_model_audit_below_accountant_and_catches_bug(self, name):
    c = _STRATEGIES[name]
    data, model = _data()
    sigma = _sigma(c, mu=2.0)
    n = data.canary_index
    r = mf_audit.canary_audit(jax.random.key(5), c, sigma, data.x_NxD[:n], data.y_N[:n], model,
                              num_runs=1000, num_gradient_canaries=8,
                              record_canary=(data.x_NxD[n], int(data.y_N[n])),
                              claimed_sensitivity=mf.sensitivity(c, 1))
    self.assertLess(r["white_box"], r["epsilon_accountant"])
    self.assertLess(r["black_box"], r["epsilon_accountant"])
    self.assertGreater(r["white_box"], r["epsilon_claimed"])     # one participation: caught

  def test_correct_privatizer_is_the_default(self):
    var = mf_audit.full_batch_training(_STRATEGIES["tree"], 1.0, 10)
    self.assertIsInstance(var.privatizer, privatizer_lib.CorrelatedNoisePrivatizer)
    self.assertEqual(var.config.sampling_prob, 1.0)
    self.assertEqual(var.config.num_steps, _T)


if __name__ == "__main__":
  absltest.main()
