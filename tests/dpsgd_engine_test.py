"""Tests of dpjax/dpsgd/engine.py: train_many / train_sweep / train_one (sweeps equal their
configs one by one, fixed-gradient records, divergence reported per model)."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import pytest
from dpjax import dpsgd
from dpjax import models
from tests import helpers


class SweepTest(absltest.TestCase):
  """train_sweep: configs that differ only in noise share one program."""

  def _cfgs(self, **kw):
    return [helpers.small_config(noise_multiplier=0.0, **kw), helpers.small_config(noise_multiplier=0.8, **kw),
            helpers.small_config(**kw).calibrate(3.0)]

  def test_each_model_equals_train_one_with_its_config(self):
    self._check_each_model_equals_train_one(models.logistic_regression(4, l2=0.01))

  @pytest.mark.slow  # the same for an MLP, about 20 s
  def test_each_model_equals_train_one_with_its_config_mlp(self):
    self._check_each_model_equals_train_one(models.mlp(4, hidden=(5,), num_classes=2))

  def _check_each_model_equals_train_one(self, model):
    x, y = helpers.binary_data()
    keep = jax.random.bernoulli(jax.random.key(1), 0.7, (6, 24))
    idx = np.array([0, 1, 2, 2, 1, 0])
    cfgs = self._cfgs(l2_clip_norm=0.7)
    out = dpsgd.train_sweep(jax.random.key(2), x, y, keep, cfgs, idx, model,
                            observe_fn=None, per_example_stats=True, perf=helpers.QUIET)
    keys = jax.random.split(jax.random.key(2), 6)
    for i in range(6):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfgs[idx[i]], model,
                            per_example_stats=True)
      helpers.assert_trees_close(jax.tree.map(lambda a, i=i: a[i], out.params), one.params)
      np.testing.assert_array_equal(out.stats["times_sampled"][i],
                                    one.stats["times_sampled"])

  def test_a_sigma_sweep_compiles_once(self):
    x, y = helpers.binary_data()
    keep = jnp.ones((3, 24), bool)
    model = models.logistic_regression(4)
    before = dpsgd.engine._compiled.cache_info().misses
    for sigma in (0.3, 0.9, 2.7):   # all > 0: the same program
      dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(noise_multiplier=sigma,
                                                          num_steps=7), model, perf=helpers.QUIET)
    self.assertEqual(dpsgd.engine._compiled.cache_info().misses - before, 1)

  def test_noise_std_scales_with_sigma(self):
    # One step from w = 0 on records x = 0 (every gradient is 0): the update is
    # lr * noise / B, so sigma = 0 models stay at exactly 0 and sigma = 2 models
    # spread with std lr * sigma * C / B per coordinate.
    x = jnp.zeros((24, 4))
    y = jnp.zeros((24,), jnp.int32)
    m = 4000
    cfgs = [helpers.small_config(noise_multiplier=s, num_steps=1, sampling_prob=1.0, l2_clip_norm=0.5)
            for s in (0.0, 2.0)]
    idx = np.repeat([0, 1], m // 2)
    out = dpsgd.train_sweep(jax.random.key(5), x, y, jnp.ones((m, 24), bool), cfgs, idx,
                            models.logistic_regression(4), perf=helpers.QUIET)
    w = np.asarray(out.params["w"])
    np.testing.assert_array_equal(w[: m // 2], 0.0)
    want = 0.5 * 2.0 * 0.5 / 24.0           # lr * sigma * C / B
    sd = w[m // 2:].std()
    # 8000 draws: the sample sd is within 4 % of the truth with prob > 0.999.
    self.assertAlmostEqual(sd / want, 1.0, delta=0.04)

  def test_bad_inputs(self):
    x, y = helpers.binary_data()
    keep = jnp.ones((2, 24), bool)
    model = models.logistic_regression(4)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep,
                        [helpers.small_config(), helpers.small_config(sampling_prob=0.5)], [0, 1], model)
    with self.assertRaisesRegex(ValueError, "config_index_M"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep, [helpers.small_config()], [0], model)
    with self.assertRaisesRegex(ValueError, "config_index_M"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep, [helpers.small_config()], [0, 1], model)
    with self.assertRaisesRegex(ValueError, "DpSgdConfig"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep, [], [0, 0], model)


class CanaryTest(parameterized.TestCase):

  def test_gradient_canary_added_clipped(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    cfg = helpers.small_config(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1, l2_clip_norm=1.0)
    canary = {"w": jnp.array([3.0, 0.0, 4.0, 0.0])}     # norm 5 -> clipped to 1
    keep = jnp.ones((2, 24), bool)
    out = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                           fixed_gradients=helpers.one_fixed(canary, [True, False]),
                           observe_fn=helpers.identity, perf=helpers.QUIET)
    diff = (out.observations[0, 0] - out.observations[1, 0]) * cfg.expected_batch_size
    np.testing.assert_allclose(diff, [0.6, 0.0, 0.8, 0.0], atol=1e-5)

  def test_canary_sampled_at_rate_q(self):
    x = jnp.zeros((10, 2))
    y = jnp.zeros((10,), jnp.int32)
    cfg = dpsgd.DpSgdConfig(dataset_size=10, sampling_prob=0.3, num_steps=200,
                            noise_multiplier=0.0)
    out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((20, 10), bool), cfg,
                           models.logistic_regression(2),
                           fixed_gradients=helpers.one_fixed({"w": jnp.array([1.0, 0.0])},
                                                      np.ones((20,), bool)),
                           observe_fn=helpers.identity,
                           perf=helpers.QUIET)
    rate = float(jnp.mean(out.observations[:, :, 0] > 0))
    self.assertAlmostEqual(rate, 0.3, delta=4 * math.sqrt(0.21 / 4000))


class DivergenceTest(absltest.TestCase):

  def test_exploding_learning_rate_reported_per_model(self):
    # Clipping keeps every gradient finite (a record whose gradient overflows is
    # dropped), so the parameters blow up only through the update itself: here the
    # noise times a learning rate of 3.4e38. Models 1, 3, 5 have no noise and no data,
    # so no update.
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)   # the cheapest compile; any model diverges here
    keep = np.zeros((6, 24), bool)
    keep[::2] = True
    cfgs = [helpers.small_config(noise_multiplier=s, learning_rate=3.4e38, num_steps=8)
            for s in (0.0, 10.0)]
    with self.assertWarnsRegex(dpsgd.DivergenceWarning, "3 of 6 models"):
      out = dpsgd.train_sweep(jax.random.key(2), x, y, jnp.asarray(keep), cfgs,
                              [1, 0, 1, 0, 1, 0], model, perf=helpers.QUIET)
    np.testing.assert_array_equal(out.finite, [False, True] * 3)
    finite = np.all([np.all(np.isfinite(np.asarray(l).reshape(6, -1)), axis=1)
                     for l in jax.tree.leaves(out.params)], axis=0)
    np.testing.assert_array_equal(out.finite, finite)
    first = np.asarray(out.first_nonfinite_step)
    np.testing.assert_array_equal(first[1::2], -1)
    self.assertTrue(np.all((first[::2] >= 0) & (first[::2] < 8)), first)
    # The step is exact: the same model trained for that many steps is still finite,
    # and one step more is not (a model's stream does not depend on T).
    keys = jax.random.split(jax.random.key(2), 6)
    t = int(first[0])
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.DivergenceWarning)
      for steps, want in ((t, True), (t + 1, False)):
        if steps == 0:
          continue
        one = dpsgd.train_one(keys[0], x, y, jnp.asarray(keep[0]),
                              helpers.small_config(noise_multiplier=10.0, learning_rate=3.4e38,
                                                   num_steps=steps), model)
        self.assertEqual(bool(one.finite), want)
        self.assertEqual(int(one.first_nonfinite_step), -1 if want else t)

  def test_one_padded_model_reports_the_same_step_as_the_vmapped_program(self):
    # One model on the padded step runs unbatched (its per-step check: a sum, then the
    # element-wise check only if the sum is not finite); two copies of it run vmapped.
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    cfg = helpers.small_config(noise_multiplier=10.0, learning_rate=3.4e38, num_steps=8)
    perf = dpsgd.PerformanceFlags(batch_capacity=8, progress=False)
    key, keep = jax.random.key(3), jnp.ones((24,), bool)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.DivergenceWarning)
      one = dpsgd.train_one(key, x, y, keep, cfg, model, perf=perf)
      two = dpsgd.train_many(jnp.stack([key, key]), x, y, jnp.ones((2, 24), bool), cfg, model,
                             perf=perf)
    self.assertFalse(bool(one.finite))
    np.testing.assert_array_equal(two.first_nonfinite_step, int(one.first_nonfinite_step))
    self.assertGreaterEqual(int(one.first_nonfinite_step), 0)

  def test_unbatched_finiteness_check_equals_the_element_wise_one(self):
    from dpjax.dpsgd import step   # pylint: disable=g-import-not-at-top
    f32 = np.finfo(np.float32).max
    fast, exact = jax.jit(step._all_finite_unbatched), jax.jit(step._all_finite)
    for w, want in (([1.0, -2.0], True), ([f32, f32], True),      # the sum overflows
                    ([-f32, -f32], True), ([np.nan, 0.0], False), ([np.inf, 1.0], False),
                    ([-np.inf, np.inf], False), ([0.0, 0.0], True)):
      for b in (np.float32(0.5), np.float32(np.nan)):
        tree = {"w": jnp.asarray(w, jnp.float32), "b": jnp.asarray(b)}
        self.assertEqual(bool(fast(tree)), bool(exact(tree)), tree)
        self.assertEqual(bool(fast(tree)), want and not np.isnan(b), tree)

  def test_no_warning_when_every_model_is_finite(self):
    x, y = helpers.binary_data()
    with warnings.catch_warnings():
      warnings.simplefilter("error", dpsgd.DivergenceWarning)
      out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((3, 24), bool),
                             helpers.small_config(), models.logistic_regression(4),
                             perf=helpers.QUIET)
    np.testing.assert_array_equal(out.finite, True)


class ProgramTest(absltest.TestCase):
  """program: the jitted chunk program and its arguments, compiled ahead of time."""

  def test_compiled_program_gives_train_many(self):
    x, y = helpers.binary_data()
    keep = jax.random.bernoulli(jax.random.key(1), 0.7, (3, 24))
    model, cfg = models.logistic_regression(4), helpers.small_config(num_steps=6)
    fn, args = dpsgd.program(jax.random.key(2), x, y, keep, cfg, model, perf=helpers.QUIET)
    params = fn.lower(*args).compile()(*args)[0]
    out = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model, perf=helpers.QUIET)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(out.params)):
      np.testing.assert_array_equal(a, b)
    # Chunks of 2 models: the first chunk's program and arguments.
    fn, args = dpsgd.program(jax.random.key(2), x, y, keep, cfg, model,
                             perf=dpsgd.PerformanceFlags(progress=False, max_chunk=2))
    self.assertEqual(args[0].shape, (2,))
    np.testing.assert_array_equal(fn(*args)[0]["w"], out.params["w"][:2])
    with self.assertRaisesRegex(ValueError, "keep_MxN"):
      dpsgd.program(jax.random.key(2), x, y, keep[:, :5], cfg, model)


if __name__ == "__main__":
  absltest.main()
