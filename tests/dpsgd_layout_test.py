"""Tests of dpjax/dpsgd/layout.py and engine.py's per-model keys: chunking, memory budget, unrolled scan and model keys change no model."""


import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from absl.testing import parameterized
import pytest
from dpjax import dpsgd
from dpjax import models
from dpjax.clipping import glm
from tests import helpers


class VectorisationTest(parameterized.TestCase):

  def test_vmap_equals_single_model(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4, l2=0.01)
    keep = jax.random.bernoulli(jax.random.key(3), 0.6, (4, 24))
    cfg = helpers.small_config(num_steps=8, momentum=0.5)
    many = dpsgd.train_many(jax.random.key(9), x, y, keep, cfg, model,
                            observe_fn=helpers.identity, per_example_stats=True, perf=helpers.QUIET)
    keys = jax.random.split(jax.random.key(9), 4)
    for i in range(4):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model,
                            observe_fn=helpers.identity, per_example_stats=True)
      helpers.assert_trees_close(jax.tree.map(lambda a, i=i: a[i], many.params), one.params)
      np.testing.assert_allclose(many.observations[i], one.observations, rtol=1e-5, atol=1e-7)
      np.testing.assert_array_equal(many.stats["times_sampled"][i], one.stats["times_sampled"])

  @pytest.mark.slow  # about 20 s; test_chunking_does_not_change_results and test_vmap_equals_single_model stay
  def test_large_chunk_unrolled_scan_equals_single_model(self):
    # Chunks of >= 256 small models run the scan unrolled (a performance knob);
    # model i must still equal model i trained alone (no unrolling), canary included.
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    m = dpsgd.engine._UNROLL_MIN_MODELS + 1
    keep = jax.random.bernoulli(jax.random.key(4), 0.6, (m, 24))
    ck = jax.random.bernoulli(jax.random.key(5), 0.5, (m,))
    cfg = helpers.small_config(num_steps=10)  # not a multiple of the unroll factor
    canary = {"w": jnp.array([0.0, 0.0, 0.0, 3.0])}
    many = dpsgd.train_many(jax.random.key(8), x, y, keep, cfg, model, observe_fn=helpers.identity,
                            fixed_gradients=helpers.one_fixed(canary, ck), perf=helpers.QUIET)
    keys = jax.random.split(jax.random.key(8), m)
    for i in (0, 7, m - 1):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model, observe_fn=helpers.identity,
                            fixed_gradients=helpers.one_fixed(canary, bool(ck[i])))
      helpers.assert_trees_close(jax.tree.map(lambda a, i=i: a[i], many.params), one.params)
      np.testing.assert_allclose(many.observations[i], one.observations, rtol=1e-5, atol=1e-7)

  def test_chunking_does_not_change_results(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((5, 24), bool)
    cfg = helpers.small_config()
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=helpers.QUIET)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                         perf=dpsgd.PerformanceFlags(max_chunk=2, progress=False))
    helpers.assert_trees_close(a.params, b.params)

  def test_memory_budget_chunks(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((5, 24), bool)
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(), model, perf=helpers.QUIET)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(), model,
                         perf=dpsgd.PerformanceFlags(memory_budget_bytes=1,  # one model per chunk
                                                     progress=False))
    helpers.assert_trees_close(a.params, b.params)

  @pytest.mark.slow   # eager execution of every op: about a minute
  def test_jit_equals_eager(self):
    x, y = helpers.binary_data()
    model = models.mlp(4, hidden=(3,), num_classes=1)
    cfg = helpers.small_config(num_steps=2)
    keep = jnp.ones((24,), bool)
    jitted = dpsgd.train_one(jax.random.key(4), x, y, keep, cfg, model)
    with jax.disable_jit():
      eager = dpsgd.train_one(jax.random.key(4), x, y, keep, cfg, model)
    helpers.assert_trees_close(jitted.params, eager.params, rtol=1e-4, atol=1e-5)

  def test_optax_optimiser_composes(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    cfg = helpers.small_config(noise_multiplier=0.0, sampling_prob=1.0, num_steps=1)
    adam = optax.adam(0.1)
    out = dpsgd.train_one(jax.random.key(0), x, y, jnp.ones((24,), bool), cfg, model,
                          optimizer=adam)
    s, _ = glm.clipped_grad_sum(0.0, {"w": jnp.zeros(4)}, x, y, jnp.ones(24), 1.0)
    # Adam's first step is -lr * sign(g) (up to eps).
    np.testing.assert_allclose(out.params["w"], -0.1 * np.sign(s["w"]), rtol=1e-4)


class ModelKeysTest(absltest.TestCase):

  def test_a_batch_of_keys_is_used_as_given(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((3, 24), bool)
    keys = jax.random.split(jax.random.key(4), 3)
    a = dpsgd.train_many(jax.random.key(4), x, y, keep, helpers.small_config(), model, perf=helpers.QUIET)
    b = dpsgd.train_many(keys, x, y, keep, helpers.small_config(), model, perf=helpers.QUIET)
    np.testing.assert_array_equal(a.params["w"], b.params["w"])
    raw = jax.random.key_data(keys)               # legacy uint32[M, 2] keys
    c = dpsgd.train_many(raw, x, y, keep, helpers.small_config(), model, perf=helpers.QUIET)
    np.testing.assert_array_equal(a.params["w"], c.params["w"])
    with self.assertRaisesRegex(ValueError, "model keys"):
      dpsgd.train_many(keys[:2], x, y, keep, helpers.small_config(), model, perf=helpers.QUIET)
    with self.assertRaises(TypeError):
      dpsgd.train_many(jnp.zeros((3, 2), jnp.float32), x, y, keep, helpers.small_config(), model,
                       perf=helpers.QUIET)


if __name__ == "__main__":
  absltest.main()
