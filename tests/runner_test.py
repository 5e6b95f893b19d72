"""dpjax.audit.runner: auditing a user's training function and our DP-SGD with any model.

Known answers: a Gaussian mechanism of known mu written as a train_fn (bounds below
its exact eps, and where score_bounds puts directly simulated scores of the same
mechanism); a train_fn that reveals the bits (bound at the trials' ceiling); null
scores (nothing certified); DP-SGD with an MLP (white-box bounds below the PLD eps,
and a broken variant caught above its claim).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest

from dpjax import dpsgd, models
from dpjax.accounting import gdp
from dpjax.audit import one_run, runner, score_audit, variants

DELTA = 1e-5
MU = 1.5


def gaussian_train_fn(key, included_K):
  """K independent Gaussian mechanisms: canary j adds MU to its own N(0, 1)."""
  return MU * included_K + jax.random.normal(key, included_K.shape)


def leaky_train_fn(key, included_K):
  del key
  return included_K.astype(jnp.float32)


def null_train_fn(key, included_K):
  return jax.random.normal(key, included_K.shape)


class InclusionBitsTest(absltest.TestCase):

  def test_balanced_and_independent(self):
    bits = runner.inclusion_bits(jax.random.key(3), 9, 400)
    np.testing.assert_array_equal(bits.sum(axis=0), 4)      # floor(9 / 2) per canary
    # different canaries choose their runs independently: the 400 columns are not
    # all the same set (the chance that two given columns coincide is 1 / C(9, 4)).
    self.assertGreater(len({tuple(c) for c in bits.T}), 60)

  def test_one_run_bits_iid_half(self):
    bits = runner.inclusion_bits(jax.random.key(4), 1, 20_000, mode="one_run")
    # Bernoulli(1/2): mean within 4 standard errors (0.0035) of 1/2
    self.assertLess(abs(bits.mean() - 0.5), 4 * 0.5 / np.sqrt(20_000))


class AuditTrainingTest(absltest.TestCase):

  def test_gaussian_mechanism(self):
    r, k = 500, 4
    a = runner.audit_training(jax.random.key(0), gaussian_train_fn, num_runs=r,
                              num_canaries=k, delta=DELTA, progress=False)
    self.assertEqual(a.scores_RxK.shape, (r, k))
    self.assertEqual(a.scores_in.size, 1000)
    true_eps = gdp.gaussian_epsilon(DELTA, MU)
    for name, b in a.bounds.items():
      self.assertGreaterEqual(b.epsilon_lower, 0.0, name)
      self.assertLessEqual(b.epsilon_lower, true_eps, name)
    # the scores are the mechanism's: IN ~ N(MU, 1), OUT ~ N(0, 1) (4 standard errors)
    self.assertLess(abs(a.scores_in.mean() - MU), 4 / np.sqrt(1000))
    self.assertLess(abs(a.scores_out.mean()), 4 / np.sqrt(1000))
    # the runner's bounds are score_bounds' on its own scores ...
    direct = score_audit.score_bounds(a.scores_in, a.scores_out, delta=DELTA,
                                     seed=a.bounds["one_run"].details["seed"])
    for name in direct:
      self.assertEqual(direct[name].epsilon_lower, a.bounds[name].epsilon_lower, name)
    # ... and within the spread of score_bounds on directly simulated scores
    rng = np.random.default_rng(0)
    sims = np.array([score_audit.score_bounds(rng.normal(MU, 1, 1000), rng.normal(0, 1, 1000),
                                             delta=DELTA)["clopper_pearson"].epsilon_lower
                     for _ in range(5)])
    cp = a.bounds["clopper_pearson"].epsilon_lower
    self.assertGreater(sims.min(), 0.3)
    self.assertLess(abs(cp - sims.mean()), 4 * sims.std() + 0.1, (cp, sims))

  def test_leaky_training_caught(self):
    a = runner.audit_training(jax.random.key(1), leaky_train_fn, num_runs=200,
                              num_canaries=5, delta=DELTA, claimed_epsilon=1.0,
                              progress=False)
    perfect = score_audit.score_bounds(np.ones(500), np.zeros(500), delta=DELTA)
    cp = a.bounds["clopper_pearson"]
    self.assertAlmostEqual(cp.epsilon_lower, perfect["clopper_pearson"].epsilon_lower, 12)
    self.assertGreater(cp.epsilon_lower, 4.0)
    self.assertTrue(cp.details["falsifies_claim"])

  def test_null_scores_certify_nothing(self):
    a = runner.audit_training(jax.random.key(2), null_train_fn, num_runs=300,
                              num_canaries=3, delta=DELTA, progress=False)
    for name, b in a.bounds.items():
      self.assertEqual(b.epsilon_lower, 0.0, name)

  def test_score_fn_and_chunking_and_determinism(self):
    def train_fn(key, included_K):       # an observation that is not the score
      return {"update": gaussian_train_fn(key, included_K), "junk": jnp.zeros(7)}

    def score_fn(obs):
      return obs["update"]
    kw = dict(num_runs=23, num_canaries=2, score_fn=score_fn, delta=DELTA, progress=False)
    a = runner.audit_training(jax.random.key(5), train_fn, **kw)
    b = runner.audit_training(jax.random.key(5), train_fn, chunk_size=4, **kw)
    c = runner.audit_training(jax.random.key(6), train_fn, **kw)
    np.testing.assert_array_equal(a.scores_RxK, b.scores_RxK)      # chunking-independent
    np.testing.assert_array_equal(a.included_RxK, b.included_RxK)
    self.assertEqual(a.epsilon_lower(), b.epsilon_lower())
    self.assertFalse(np.array_equal(a.scores_RxK, c.scores_RxK))   # the key matters
    # run i's observation is train_fn(split(k_runs, R)[i], bits[i])
    _, k_runs, _ = jax.random.split(jax.random.key(5), 3)
    key7 = jax.random.split(k_runs, 23)[7]
    np.testing.assert_allclose(a.scores_RxK[7], np.asarray(
        gaussian_train_fn(key7, jnp.asarray(a.included_RxK[7]))), rtol=1e-6)

  def test_one_run_mode(self):
    # One run, 2000 canaries: the one-run tests only, on the runner's own bits.
    a = runner.audit_training(jax.random.key(7), gaussian_train_fn, num_runs=1,
                              num_canaries=2000, delta=DELTA, mode="one_run", progress=False)
    self.assertEqual(sorted(a.bounds), ["fdp_one_run", "fdp_one_run_gdp", "one_run"])
    true_eps = gdp.gaussian_epsilon(DELTA, MU)
    direct = one_run.audit_declared_guesses(a.scores_RxK[0], a.included_RxK[0], delta=DELTA)
    self.assertEqual(a.bounds["one_run"].epsilon_lower, direct.epsilon_lower)
    for name, b in a.bounds.items():
      self.assertGreater(b.epsilon_lower, 0.3, name)
      self.assertLessEqual(b.epsilon_lower, true_eps, name)

  def test_validation(self):
    key = jax.random.key(0)
    kw = dict(num_runs=10, num_canaries=3, delta=DELTA, progress=False)
    with self.assertRaisesRegex(TypeError, "train_fn"):
      runner.audit_training(key, 3, **kw)
    with self.assertRaisesRegex(TypeError, "score_fn"):
      runner.audit_training(key, null_train_fn, score_fn="x", **kw)
    with self.assertRaisesRegex(TypeError, "key"):
      runner.audit_training(7, null_train_fn, **kw)
    with self.assertRaisesRegex(ValueError, r"float\[3\]"):
      runner.audit_training(key, lambda k, inc: jnp.zeros(4), **kw)
    with self.assertRaisesRegex(ValueError, r"float\[3\]"):
      runner.audit_training(key, lambda k, inc: {"a": inc * 1.0}, **kw)
    with self.assertRaisesRegex(ValueError, "NaN.*run 0, canary 1"):
      runner.audit_training(key, lambda k, inc: jnp.array([0.0, jnp.nan, 0.0]), **kw)
    with self.assertRaisesRegex(ValueError, "train_fn failed"):
      runner.audit_training(key, lambda k, inc: inc @ jnp.ones(5), **kw)
    with self.assertRaisesRegex(ValueError, "num_runs"):
      runner.audit_training(key, null_train_fn, num_runs=1, num_canaries=3, delta=DELTA)
    with self.assertRaisesRegex(ValueError, "mode"):
      runner.audit_training(key, null_train_fn, mode="pooled", **kw)
    with self.assertRaisesRegex(ValueError, "delta"):
      runner.audit_training(key, null_train_fn, num_runs=10, delta=0.0)


def _tiny_mlp_problem():
  x = jax.random.uniform(jax.random.key(0), (40, 8))
  y = (x[:, 0] > 0.5).astype(jnp.int32)
  cfg = dpsgd.DpSgdConfig(dataset_size=40, sampling_prob=0.25, num_steps=8,
                          noise_multiplier=1.0, learning_rate=0.5)
  return x, y, cfg, models.mlp(8, (4,), 2)


class AuditDpSgdTest(absltest.TestCase):

  @pytest.mark.slow  # an MLP audit, about 40 s; test_gaussian_mechanism and test_leaky_training_caught cover the runner by default
  def test_mlp_white_and_black_box(self):
    x, y, cfg, mlp = _tiny_mlp_problem()
    canary = (np.ones(8, np.float32), 0)          # far from the data, mislabeled
    a = runner.audit_dpsgd(jax.random.key(1), cfg, mlp, x, y, num_runs=16,
                           num_gradient_canaries=24, record_canary=canary, progress=False)
    self.assertEqual(a.white_box.scores_RxK.shape, (16, 24))
    self.assertEqual(a.black_box.scores_RxK.shape, (16, 1))
    np.testing.assert_array_equal(a.white_box.included_RxK.sum(axis=0), 8)
    self.assertAlmostEqual(a.claimed_epsilon, cfg.epsilon())
    self.assertLessEqual(a.exact_epsilon, a.claimed_epsilon + 1e-9)  # RDP is an upper bound
    for audit in (a.white_box, a.black_box):
      for name, b in audit.bounds.items():
        self.assertLessEqual(b.epsilon_lower, a.exact_epsilon, name)
    # the white-box statistic is the exact LLR under the claim: IN scores are larger
    self.assertGreater(a.white_box.scores_in.mean(), a.white_box.scores_out.mean())
    self.assertTrue(np.isfinite(a.black_box.scores_RxK).all())
    rec = a.to_json()
    self.assertEqual(rec["white_box"]["num_in"], 16 * 24 // 2)

  def test_validation(self):
    x, y, cfg, mlp = _tiny_mlp_problem()
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "nothing to audit"):
      runner.audit_dpsgd(key, cfg, mlp, x, y, num_runs=4, num_gradient_canaries=0)
    with self.assertRaisesRegex(ValueError, "num_runs"):
      runner.audit_dpsgd(key, cfg, mlp, x, y, num_runs=1)
    with self.assertRaisesRegex(ValueError, "record_canary"):
      runner.audit_dpsgd(key, cfg, mlp, x, y, num_runs=4, record_canary=(np.ones(3), 0))
    with self.assertRaisesRegex(ValueError, "observe_fn"):
      runner.audit_dpsgd(key, cfg, mlp, x, y, num_runs=4, observe_fn=lambda u: u)
    # The audit's canaries are the engine's fixed-gradient records: set by the runner.
    params = mlp.init(jax.random.key(0))
    mine = dpsgd.FixedGradients(jax.tree.map(lambda v: jnp.zeros((1,) + v.shape), params),
                                np.ones((4, 1), bool))
    with self.assertRaisesRegex(ValueError, "fixed_gradients is set by the audit"):
      runner.audit_dpsgd(key, cfg, mlp, x, y, num_runs=4, fixed_gradients=mine)
    with self.assertRaisesRegex(TypeError, "cfg"):
      runner.audit_dpsgd(key, "cfg", mlp, x, y, num_runs=4)

  @pytest.mark.slow
  def test_faulty_variant_caught_and_determinism(self):
    # noise std sigma instead of sigma * C at C = 10: an effective noise multiplier
    # sigma / 10, far above the claim; the white-box audit falsifies the claimed eps.
    x, y, cfg, mlp = _tiny_mlp_problem()
    cfg = dpsgd.DpSgdConfig(dataset_size=40, sampling_prob=0.25, num_steps=8,
                            noise_multiplier=4.0, learning_rate=0.1)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      v = variants.variant("noise_without_clip_norm", cfg, mlp)
      kw = dict(num_runs=32, num_gradient_canaries=32, progress=False, **v.components)
      a = runner.audit_dpsgd(jax.random.key(2), v.config, mlp, x, y, **kw)
      b = runner.audit_dpsgd(jax.random.key(2), v.config, mlp, x, y, **kw)
    self.assertLess(a.claimed_epsilon, 1.0)
    cp = a.white_box.bounds["clopper_pearson"]
    self.assertGreater(cp.epsilon_lower, 2.0 * a.claimed_epsilon)
    self.assertTrue(cp.details["falsifies_claim"])
    np.testing.assert_array_equal(a.white_box.scores_RxK, b.white_box.scores_RxK)


if __name__ == "__main__":
  absltest.main()
