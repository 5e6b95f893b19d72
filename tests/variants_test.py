"""Tests for dpjax.audit.variants: each broken component does what it says; claims unchanged."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from absl.testing import parameterized
from scipy import stats

from dpjax import accounting
from dpjax import dpsgd
from dpjax import models
from dpjax import privatizer
from dpjax import sampling
from dpjax.audit import thresholds
from dpjax.audit import variants
from dpjax.clipping import vmap
from tests import helpers

_QUIET = dpsgd.PerformanceFlags(progress=False)

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
                            observe_fn=_identity, perf=_QUIET, **v.components, **kw)


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

  def test_calibrated_claim_is_kept_by_the_variant(self):
    # A claim calibrated to a target epsilon keeps its sigma: a variant never
    # re-calibrates its own noise.
    cfg = helpers.small_config(dataset_size=151, sampling_prob=0.2, num_steps=500).calibrate(2.0)
    v = _variant("noise_on_mean", cfg)
    self.assertEqual(v.config.noise_multiplier, cfg.noise_multiplier)
    self.assertEqual(v.config, cfg)
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
                       perf=_QUIET, **v.components)


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
      ("noise_half", "noise_half", 2.0 * 4.0 / 7.2 / 2.0),
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

  def test_clip_four_c(self):
    got, x, y, wts = self._one_step("clip_four_c", c=0.05)
    s, _ = vmap.clipped_grad_sum(_LR, {"w": jnp.zeros(4)}, x, y, wts, 0.2)
    np.testing.assert_allclose(got, np.asarray(s["w"]) / 24.0, rtol=1e-5)

  def test_realised_denominator_privatizer_needs_the_batch_size(self):
    tx = variants.RealisedBatchDenominator().transform(0.0, 4.0, jax.random.key(0))
    g = {"w": jnp.ones(2)}
    with self.assertRaisesRegex(ValueError, "batch_size"):
      tx.update(g, tx.init(g))
    out, _ = tx.update(g, tx.init(g), batch_size=jnp.float32(0.0))   # floor at 1
    np.testing.assert_array_equal(out["w"], [1.0, 1.0])
    self.assertFalse(variants.RealisedBatchDenominator.accounted)
    self.assertTrue(privatizer.GaussianPrivatizer.accounted)


class ShippedBugComponentsTest(parameterized.TestCase):
  """The components imitating shipped bugs, each against its closed form."""

  def test_exact_epsilon_is_the_transformed_mechanism(self):
    cfg = helpers.small_config(noise_multiplier=2.0, sampling_prob=0.3, num_steps=6)

    def pld(sigma, q):
      return accounting.dpsgd_epsilon(sigma, q, 6, 1e-5, accountant="pld")

    want = {"correct": pld(2.0, 0.3), "noise_half": pld(1.0, 0.3), "clip_four_c": pld(0.5, 0.3),
            "sampler_twice_q": pld(2.0, 0.6), "over_rate_sampler": pld(2.0, 1.0),
            "noise_without_clip_norm": pld(0.2, 0.3)}
    for name in variants.VARIANTS:
      got = variants.exact_epsilon(name, cfg)
      if name in want:
        self.assertEqual(got, want[name], name)
      else:
        self.assertIsNone(got, name)
    with self.assertRaisesRegex(ValueError, "noise"):
      variants.exact_epsilon("correct", helpers.small_config(noise_multiplier=0.0))

  def test_sampler_twice_q_rate(self):
    v = _variant("sampler_twice_q", helpers.small_config(sampling_prob=0.3))
    self.assertAlmostEqual(v.sampler.true_rate, 0.6)
    v = _variant("sampler_twice_q", helpers.small_config(sampling_prob=0.7))
    self.assertEqual(v.sampler.true_rate, 1.0)

  def test_over_rate_sampler_rate(self):
    s = variants.OverRateSampler(0.001, factor=200.0)
    self.assertAlmostEqual(s.true_rate, 0.2)
    self.assertEqual(s.sampling_prob, 0.001)
    self.assertFalse(s.accounted)
    keep = jnp.ones((2000,), bool)
    masks = jax.vmap(lambda t: s.batch_mask(jax.random.key(3), t, keep))(jnp.arange(50))
    rate, n = float(jnp.mean(masks)), masks.size
    self.assertLess(abs(rate - 0.2), 5 * math.sqrt(0.2 * 0.8 / n))  # 5 SE of the closed form
    # the default factor saturates at rate 1: every kept record in every batch
    full = variants.OverRateSampler(0.01)
    self.assertEqual(full.true_rate, 1.0)
    keep = jnp.arange(10) < 7
    np.testing.assert_array_equal(full.batch_mask(jax.random.key(0), 4, keep), keep)
    with self.assertRaisesRegex(ValueError, "factor"):
      variants.OverRateSampler(0.1, factor=0.0)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      variants.OverRateSampler(0.0)

  def test_floored_denominator(self):
    for q, n in ((0.5, 3), (0.5, 4), (0.1, 5), (0.3, 24), (0.25, 9), (1.0, 7)):
      self.assertEqual(variants.floored_denominator(q, n), max(1, math.floor(q * n)))
    p = variants.FlooredExpectedBatch(sampling_prob=0.5, dataset_size=4)
    self.assertEqual((p.denominator, p.on_dataset(3).denominator), (2, 1))
    self.assertFalse(p.accounted)
    with self.assertRaisesRegex(ValueError, "dataset_size"):
      variants.floored_denominator(0.5, 0)

  def test_floored_variant_divides_by_the_data_sets_own_floor(self):
    # q = 1, sigma = 0: the update is the clipped sum / floor(q n) for the n it is told.
    kx, ky = jax.random.split(jax.random.key(0))
    x = 3.0 * jax.random.normal(kx, (24, 4))
    y = jax.random.bernoulli(ky, 0.5, (24,)).astype(jnp.int32)
    keep = (jnp.arange(24) < 12)[None, :]
    v = _variant("floored_expected_batch",
                 helpers.small_config(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1))
    s, _ = vmap.clipped_grad_sum(_LR, {"w": jnp.zeros(4)}, x, y,
                                 keep[0].astype(jnp.float32), 1.0)
    for n in (24, 12):
      v = v._replace(privatizer=v.privatizer.on_dataset(n))
      got = np.asarray(_train(v, x, y, keep).observations[0, 0])
      np.testing.assert_allclose(got, s["w"] / n, rtol=1e-5)

  def test_backprop_clipping_closed_form_and_sensitivity(self):
    path = variants.backprop_clipping()
    c = 1.0
    c_in = c / variants.BACKPROP_GRAD_CLIP
    # w = 0: residual r = 1/2 - y. Six records of norm 20 >= C_in, labels 0 / 1.
    x = jnp.asarray(np.eye(6, 6) * 20.0, jnp.float32)
    y = jnp.asarray([0, 1, 0, 1, 0, 0], jnp.int32)
    wts = jnp.ones(6)
    gsum, norms = path.fn({"w": jnp.zeros(6)}, x, y, wts, c)
    r = 0.5 - np.asarray(y)
    want = np.sign(r) * np.minimum(np.abs(r), 6 * variants.BACKPROP_GRAD_CLIP) * c_in
    np.testing.assert_allclose(gsum["w"], want, rtol=1e-6)
    np.testing.assert_allclose(norms, 0.5 * 20.0, rtol=1e-6)
    # One record moves the sum by 5 C, not C: the claimed sensitivity is wrong.
    without, _ = path.fn({"w": jnp.zeros(6)}, x, y, wts.at[0].set(0.0), c)
    moved = np.linalg.norm(np.asarray(gsum["w"]) - np.asarray(without["w"]))
    self.assertAlmostEqual(moved, 5.0 * c, places=4)
    # Where nothing is clipped (small records, |r| / b <= C_out) it is the plain gradient sum.
    xs = 0.1 * jax.random.normal(jax.random.key(1), (6, 6))
    small, _ = path.fn({"w": jnp.full(6, 0.3)}, xs, y, wts, c)
    plain, _ = vmap.clipped_grad_sum(models.logistic_regression(6), {"w": jnp.full(6, 0.3)},
                                     xs, y, wts, math.inf)
    np.testing.assert_allclose(small["w"], plain["w"], rtol=1e-5, atol=1e-7)
    self.assertFalse(path.accounted)
    with self.assertRaisesRegex(ValueError, "grad_clip"):
      variants.backprop_clipping(1.0)
    with self.assertRaisesRegex(ValueError, "logistic_regression"):
      variants.variant("backprop_clipping", helpers.small_config(), models.mlp(4, (3,)))

  def test_backprop_clipping_in_the_engine(self):
    # q = 1, sigma = 0, one step: the engine's update is the path's sum / (q n).
    kx, ky = jax.random.split(jax.random.key(2))
    x = 30.0 * jax.random.normal(kx, (24, 4))
    y = jax.random.bernoulli(ky, 0.5, (24,)).astype(jnp.int32)
    keep = jnp.ones((1, 24), bool)
    v = _variant("backprop_clipping",
                 helpers.small_config(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1))
    got = np.asarray(_train(v, x, y, keep).observations[0, 0])
    s, _ = variants.backprop_clipping().fn({"w": jnp.zeros(4)}, x, y, jnp.ones(24), 1.0)
    np.testing.assert_allclose(got, np.asarray(s["w"]) / 24.0, rtol=1e-5)


class PlantedBugCaughtTest(parameterized.TestCase):
  """One base record and a canary (gradient C e_1) in a 2-record data set; the claim is
  eps = 1 at q = 0.01, T = 8. The canary's summed coordinate, thresholded on half of
  200 runs per side, is the adversary (95% Clopper-Pearson)."""

  def _bound(self, name):
    sigma = accounting.calibrate_noise(1.0, 0.01, 8, 1e-5)
    x = jnp.asarray([[100.0, 0.0], [0.0, 100.0]])
    y = jnp.zeros((2,), jnp.int32)
    keep = np.ones((400, 2), bool)
    keep[::2, 1] = False
    cfg = dpsgd.DpSgdConfig(dataset_size=2, sampling_prob=0.01, num_steps=8, l2_clip_norm=1.0,
                            noise_multiplier=sigma, learning_rate=1e-8)
    model = models.logistic_regression(2)
    out = _train(_variant(name, cfg, model), x, y, jnp.asarray(keep), model=model, key=5)
    score = np.asarray(out.observations)[:, :, 1].sum(axis=1)
    return thresholds.SplitThreshold(both_signs=True).bound(
        score[keep[:, 1]], score[~keep[:, 1]], delta=1e-5).epsilon_lower

  def test_over_rate_sampler_is_caught_at_claimed_eps_1(self):
    # sampled at rate 1, not 0.01: eps (PLD) 15.2 at this sigma, against 0.34 claimed
    self.assertGreater(self._bound("over_rate_sampler"), 1.0)

  @pytest.mark.slow
  def test_correct_is_not_caught(self):
    self.assertLess(self._bound("correct"), accounting.dpsgd_epsilon(
        accounting.calibrate_noise(1.0, 0.01, 8, 1e-5), 0.01, 8, 1e-5, "pld"))


if __name__ == "__main__":
  absltest.main()
