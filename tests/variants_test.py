"""Tests for dpjax.audit.variants: each broken component does what it says; claims unchanged."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from scipy import stats

from dpjax import dpsgd
from dpjax import models
from dpjax import privatizer
from dpjax import sampling
from dpjax.audit import variants
from dpjax.clipping import vmap
from tests import helpers

_LR = models.logistic_regression(4)


def _identity(u):
  return u["w"]


def _variant(name, cfg, model=_LR):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", variants.FaultyDpSgdWarning)
    return variants.variant(name, cfg, model)


def _train(v, x, y, keep, model=_LR, key=0, **kw):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", dpsgd.UnaccountedComponentWarning)
    return dpsgd.train_many(jax.random.key(key), x, y, keep, v.config, model,
                            observe_fn=_identity, progress=False, **v.components, **kw)


class VariantConstructionTest(parameterized.TestCase):

  @parameterized.parameters(*[n for n in variants.VARIANTS if n != "correct"])
  def test_faulty_variants_warn_and_keep_the_claim(self, name):
    cfg = helpers.small_config(noise_multiplier=2.0)
    with self.assertWarns(variants.FaultyDpSgdWarning):
      v = variants.variant(name, cfg, _LR)
    self.assertEqual(len(v.components), 1)
    replaced = next(iter(v.components.values()))
    self.assertFalse(replaced.accounted)
    self.assertEqual((v.config.sampling_prob, v.config.noise_multiplier, v.config.num_steps,
                      v.config.delta), (0.3, 2.0, 6, 1e-5))

  def test_correct_is_the_claim(self):
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      v = variants.variant("correct", helpers.small_config(noise_multiplier=2.0), _LR)
    self.assertEqual(v.config, helpers.small_config(noise_multiplier=2.0))
    self.assertEqual(v.components, {})

  def test_noise_without_clip_norm_runs_with_c10(self):
    v = _variant("noise_without_clip_norm", helpers.small_config(noise_multiplier=2.0))
    self.assertEqual(v.config.l2_clip_norm, variants.NOISE_WITHOUT_CLIP_NORM_C)
    self.assertEqual(v.privatizer.noise_stddev(2.0, 10.0), 2.0)

  def test_shuffle_sampler(self):
    v = _variant("shuffle_as_poisson", helpers.small_config(noise_multiplier=2.0))
    self.assertIsInstance(v.sampler, sampling.ShuffleSampler)
    self.assertEqual(v.sampler.batch_size, round(0.3 * 24))

  def test_target_epsilon_resolved_to_claimed_sigma(self):
    cfg = helpers.small_config(dataset_size=151, sampling_prob=0.2, num_steps=500, noise_multiplier=None,
                   target_epsilon=2.0)
    v = _variant("noise_on_mean", cfg)
    self.assertIsNone(v.config.target_epsilon)
    self.assertAlmostEqual(v.config.noise_multiplier, cfg.sigma)
    self.assertAlmostEqual(v.config.epsilon(), 2.0, delta=0.02)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "variant"):
      variants.variant("nope", helpers.small_config(), _LR)
    with self.assertRaisesRegex(ValueError, "cfg"):
      variants.variant("correct", {"sampling_prob": 0.3}, _LR)

  def test_training_warns(self):
    v = _variant("noise_on_mean", helpers.small_config())
    x, y = jnp.zeros((24, 4)), jnp.zeros((24,), jnp.int32)
    with self.assertWarnsRegex(dpsgd.UnaccountedComponentWarning, "privatizer"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((1, 24), bool), v.config, _LR,
                       progress=False, **v.components)


class VariantBehaviourTest(parameterized.TestCase):
  """One step at q = 1 from w = 0: each variant's update, against its arithmetic by hand."""

  def _one_step(self, name, sigma=0.0, c=1.0, keep_n=12):
    kx, ky = jax.random.split(jax.random.key(0))
    x = 3.0 * jax.random.normal(kx, (24, 4))
    y = jax.random.bernoulli(ky, 0.5, (24,)).astype(jnp.int32)
    keep = jnp.arange(24)[None, :] < keep_n
    v = _variant(name, helpers.small_config(sampling_prob=1.0, noise_multiplier=sigma, num_steps=1,
                                l2_clip_norm=c))
    out = _train(v, x, y, keep)
    wts = keep[0].astype(jnp.float32)
    return np.asarray(out.observations[0, 0]), x, y, wts

  def test_realised_denominator(self):
    got, x, y, wts = self._one_step("realised_batch_denominator")
    s, _ = vmap.clipped_grad_sum(_LR, {"w": jnp.zeros(4)}, x, y, wts, 1.0)
    np.testing.assert_allclose(got, s["w"] / 12.0, rtol=1e-5)

  def test_clip_batch_mean(self):
    got, x, y, wts = self._one_step("clip_batch_mean", c=0.05)
    s, _ = vmap.clipped_grad_sum(_LR, {"w": jnp.zeros(4)}, x, y, wts, math.inf)
    mean = np.asarray(s["w"]) / 12.0
    want = 12.0 * mean * min(1.0, 0.05 / np.linalg.norm(mean)) / 24.0
    np.testing.assert_allclose(got, want, rtol=1e-5)
    correct, *_ = self._one_step("correct", c=0.05)
    self.assertGreater(np.abs(got - correct).max(), 1e-4)

  @parameterized.named_parameters(
      ("correct", "correct", 2.0 * 4.0 / 7.2),
      ("noise_without_clip_norm", "noise_without_clip_norm", 2.0 / 7.2),
      ("noise_on_mean", "noise_on_mean", 2.0 * 4.0),
  )
  def test_noise_std(self, name, want_std):
    x = jnp.zeros((24, 3))
    y = jnp.zeros((24,), jnp.int32)
    model = models.logistic_regression(3)
    cfg = helpers.small_config(noise_multiplier=2.0, l2_clip_norm=4.0, num_steps=4)
    v = _variant(name, cfg, model)
    out = _train(v, x, y, jnp.ones((100, 24), bool), model=model, key=1)
    self.assertAlmostEqual(cfg.expected_batch_size, 7.2)
    z = np.asarray(out.observations).ravel() / want_std
    self.assertGreater(stats.kstest(z, "norm").pvalue, 1e-3)
    for wrong in (2 / 3, 3 / 2):
      self.assertLess(stats.kstest(z / wrong, "norm").pvalue, 1e-6)

  def test_realised_denominator_privatizer_needs_the_batch_size(self):
    tx = variants.RealisedBatchDenominator().transform(0.0, 4.0, jax.random.key(0))
    g = {"w": jnp.ones(2)}
    with self.assertRaisesRegex(ValueError, "batch_size"):
      tx.update(g, tx.init(g))
    out, _ = tx.update(g, tx.init(g), batch_size=jnp.float32(0.0))   # floor at 1
    np.testing.assert_array_equal(out["w"], [1.0, 1.0])
    self.assertFalse(variants.RealisedBatchDenominator.accounted)
    self.assertTrue(privatizer.GaussianPrivatizer.accounted)


if __name__ == "__main__":
  absltest.main()
