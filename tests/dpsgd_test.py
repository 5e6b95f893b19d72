"""Tests for dpjax.dpsgd: the engine and the configuration the accountant is told.

vmap over models = one model at a time (with and without the unrolled scan), jit =
eager, chunking changes nothing, sweeps equal their configs one by one, per-model
keys, fixed-gradient records, components plugged in through train_many, the
epsilon reported, DpSgdConfig.calibrate and the PerformanceFlags checks. Clipping,
noise and sampling have their own test files.
"""

import dataclasses
import math
import re
from unittest import mock
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from absl.testing import parameterized
import pytest
from dpjax import dpsgd
from dpjax import models
from dpjax import privatizer
from dpjax.clipping import glm
from tests import helpers


_QUIET = dpsgd.PerformanceFlags(progress=False)


def _identity(u):
  return u["w"]


def _one_fixed(g, keep):
  """One fixed-gradient record g (a params-like pytree) with membership keep (bool[M]
  for train_many, a bool for train_one): the old single gradient canary."""
  keep = np.asarray(keep)
  return dpsgd.FixedGradients(jax.tree.map(lambda v: jnp.asarray(v)[None], g),
                              keep[:, None] if keep.ndim == 1 else keep[None])


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
                            observe_fn=None, per_example_stats=True, perf=_QUIET)
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
                                                          num_steps=7), model, perf=_QUIET)
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
                            models.logistic_regression(4), perf=_QUIET)
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


class VectorisationTest(parameterized.TestCase):

  def test_vmap_equals_single_model(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4, l2=0.01)
    keep = jax.random.bernoulli(jax.random.key(3), 0.6, (4, 24))
    cfg = helpers.small_config(num_steps=8, momentum=0.5)
    many = dpsgd.train_many(jax.random.key(9), x, y, keep, cfg, model,
                            observe_fn=_identity, per_example_stats=True, perf=_QUIET)
    keys = jax.random.split(jax.random.key(9), 4)
    for i in range(4):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model,
                            observe_fn=_identity, per_example_stats=True)
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
    many = dpsgd.train_many(jax.random.key(8), x, y, keep, cfg, model, observe_fn=_identity,
                            fixed_gradients=_one_fixed(canary, ck), perf=_QUIET)
    keys = jax.random.split(jax.random.key(8), m)
    for i in (0, 7, m - 1):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model, observe_fn=_identity,
                            fixed_gradients=_one_fixed(canary, bool(ck[i])))
      helpers.assert_trees_close(jax.tree.map(lambda a, i=i: a[i], many.params), one.params)
      np.testing.assert_allclose(many.observations[i], one.observations, rtol=1e-5, atol=1e-7)

  def test_chunking_does_not_change_results(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((5, 24), bool)
    cfg = helpers.small_config()
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=_QUIET)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                         perf=dpsgd.PerformanceFlags(max_chunk=2, progress=False))
    helpers.assert_trees_close(a.params, b.params)

  def test_memory_budget_chunks(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((5, 24), bool)
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(), model, perf=_QUIET)
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


class CanaryTest(parameterized.TestCase):

  def test_gradient_canary_added_clipped(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    cfg = helpers.small_config(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1, l2_clip_norm=1.0)
    canary = {"w": jnp.array([3.0, 0.0, 4.0, 0.0])}     # norm 5 -> clipped to 1
    keep = jnp.ones((2, 24), bool)
    out = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                           fixed_gradients=_one_fixed(canary, [True, False]),
                           observe_fn=_identity, perf=_QUIET)
    diff = (out.observations[0, 0] - out.observations[1, 0]) * cfg.expected_batch_size
    np.testing.assert_allclose(diff, [0.6, 0.0, 0.8, 0.0], atol=1e-5)

  def test_canary_sampled_at_rate_q(self):
    x = jnp.zeros((10, 2))
    y = jnp.zeros((10,), jnp.int32)
    cfg = dpsgd.DpSgdConfig(dataset_size=10, sampling_prob=0.3, num_steps=200,
                            noise_multiplier=0.0)
    out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((20, 10), bool), cfg,
                           models.logistic_regression(2),
                           fixed_gradients=_one_fixed({"w": jnp.array([1.0, 0.0])},
                                                      np.ones((20,), bool)),
                           observe_fn=_identity,
                           perf=_QUIET)
    rate = float(jnp.mean(out.observations[:, :, 0] > 0))
    self.assertAlmostEqual(rate, 0.3, delta=4 * math.sqrt(0.21 / 4000))

class ModelKeysTest(absltest.TestCase):

  def test_a_batch_of_keys_is_used_as_given(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((3, 24), bool)
    keys = jax.random.split(jax.random.key(4), 3)
    a = dpsgd.train_many(jax.random.key(4), x, y, keep, helpers.small_config(), model, perf=_QUIET)
    b = dpsgd.train_many(keys, x, y, keep, helpers.small_config(), model, perf=_QUIET)
    np.testing.assert_array_equal(a.params["w"], b.params["w"])
    raw = jax.random.key_data(keys)               # legacy uint32[M, 2] keys
    c = dpsgd.train_many(raw, x, y, keep, helpers.small_config(), model, perf=_QUIET)
    np.testing.assert_array_equal(a.params["w"], c.params["w"])
    with self.assertRaisesRegex(ValueError, "model keys"):
      dpsgd.train_many(keys[:2], x, y, keep, helpers.small_config(), model, perf=_QUIET)
    with self.assertRaises(TypeError):
      dpsgd.train_many(jnp.zeros((3, 2), jnp.float32), x, y, keep, helpers.small_config(), model,
                       perf=_QUIET)


class ComponentsTest(absltest.TestCase):
  """Samplers, clipping and privatizers enter through train_many's keywords."""

  def test_default_components_spelled_out_give_the_same_models(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((2, 24), bool)
    cfg = helpers.small_config()
    a = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model, perf=_QUIET)
    with warnings.catch_warnings():
      warnings.simplefilter("error")        # the accounted components do not warn
      b = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model, perf=_QUIET,
                           sampler=cfg.sampler(), privatizer=privatizer.GaussianPrivatizer())
    np.testing.assert_array_equal(a.params["w"], b.params["w"])

  def test_a_user_privatizer_plugs_in(self):
    # Twice the noise: still accounted (more noise than claimed is still private).
    class DoubleNoise(privatizer.GaussianPrivatizer):
      def noise_stddev(self, noise_multiplier, l2_clip_norm):
        return 2.0 * super().noise_stddev(noise_multiplier, l2_clip_norm)

    x, y = jnp.zeros((24, 4)), jnp.zeros((24,), jnp.int32)
    cfg = helpers.small_config(noise_multiplier=1.0, num_steps=2)
    keep = jnp.ones((200, 24), bool)
    model = models.logistic_regression(4)
    obs = {}
    for name, p in (("plain", None), ("double", DoubleNoise())):
      obs[name] = np.asarray(dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                                              privatizer=p, observe_fn=_identity,
                                              perf=_QUIET).observations)
    np.testing.assert_allclose(obs["double"], 2.0 * obs["plain"], rtol=1e-6)

  def test_the_engine_holds_no_fault_or_model_kind_logic(self):
    # Broken variants and model kinds live in dpjax.audit.variants / dpjax.clipping.
    import inspect  # pylint: disable=g-import-not-at-top
    import pkgutil  # pylint: disable=g-import-not-at-top
    import importlib  # pylint: disable=g-import-not-at-top
    names = [m.name for m in pkgutil.iter_modules(dpsgd.__path__)]
    self.assertContainsSubset({"config", "engine", "step", "layout", "components"}, names)
    for name in [None] + names:   # the package and every module of it
      mod = dpsgd if name is None else importlib.import_module(f"dpjax.dpsgd.{name}")
      source = inspect.getsource(mod)
      for pattern in (r"\bfaults?\b", r"\.kind\b", r'"logistic_regression"', r'"mlp"',
                      r"from dpjax\.audit", r"import audit"):
        self.assertIsNone(re.search(pattern, source, re.IGNORECASE), (name, pattern))


class ConfigTest(parameterized.TestCase):

  def test_epsilon_is_accountant_of_what_was_used(self):
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    cfg = helpers.small_config(dataset_size=500, sampling_prob=0.1, num_steps=200, noise_multiplier=1.3,
               delta=1e-5)
    self.assertEqual(cfg.epsilon(), accounting.dpsgd_epsilon(1.3, 0.1, 200, 1e-5,
                                                             accountant="rdp"))

  def test_epsilon_passes_fields_to_accountant(self):
    cfg = helpers.small_config(dataset_size=500, sampling_prob=0.07, num_steps=123, noise_multiplier=0.9,
               delta=3e-6, accountant="pld")
    dpsgd.config._epsilon.cache_clear()
    with mock.patch("dpjax.accounting.dpsgd_epsilon", return_value=4.2) as m:
      self.assertEqual(cfg.epsilon(), 4.2)
    m.assert_called_once_with(0.9, 0.07, 123, 3e-6, accountant="pld", dataset_size=500)
    dpsgd.config._epsilon.cache_clear()

  def test_calibrate_sets_the_accountants_sigma(self):
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    for accountant in ("rdp", "pld"):
      base = helpers.small_config(dataset_size=500, sampling_prob=0.1, num_steps=200,
                                  noise_multiplier=0.25, momentum=0.5, ema_decay=0.9,
                                  accountant=accountant)
      cfg = base.calibrate(1.0)
      self.assertIsInstance(cfg, dpsgd.DpSgdConfig)
      self.assertIsInstance(cfg.noise_multiplier, float)
      # Exactly the accountant's float, told the config's n.
      self.assertEqual(cfg.noise_multiplier,
                       accounting.calibrate_noise(1.0, 0.1, 200, 1e-5, accountant=accountant,
                                                  dataset_size=500))
      # Every other field is the original's; the original is unchanged.
      self.assertEqual(dataclasses.replace(cfg, noise_multiplier=0.25), base)
      self.assertEqual(base.noise_multiplier, 0.25)
      self.assertLessEqual(cfg.epsilon(), 1.0 + 1e-9)
      self.assertGreater(cfg.epsilon(), 0.99)

  @parameterized.named_parameters(
      ("negative", -1.0), ("zero", 0.0), ("nan", float("nan")), ("inf", math.inf),
      ("string", "1.0"), ("none", None))
  def test_calibrate_refuses_a_bad_target(self, eps):
    with self.assertRaisesRegex(ValueError, "target_epsilon"):
      helpers.small_config().calibrate(eps)

  def test_numpy_scalars_are_stored_as_python_numbers(self):
    cfg = dpsgd.DpSgdConfig(dataset_size=np.int64(24), sampling_prob=np.array(0.5),
                            num_steps=np.int32(4), l2_clip_norm=np.float32(1.0),
                            noise_multiplier=np.array(1.0), delta=np.array(1e-5),
                            ema_decay=np.array(0.5))
    for name, want in (("dataset_size", int), ("num_steps", int), ("sampling_prob", float),
                       ("l2_clip_norm", float), ("noise_multiplier", float),
                       ("delta", float), ("ema_decay", float)):
      self.assertIs(type(getattr(cfg, name)), want, name)
    self.assertEqual(cfg.sampling_prob, 0.5)
    hash(cfg)   # a static argument of the compiled program
    self.assertEqual(cfg, dpsgd.DpSgdConfig(dataset_size=24, sampling_prob=0.5, num_steps=4,
                                            noise_multiplier=1.0, ema_decay=0.5))
    # ... and it trains, to the models of the plain-float config.
    x, y = helpers.binary_data()
    keep = jnp.ones((2, 24), bool)
    model = models.logistic_regression(4)
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=_QUIET)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep,
                         dpsgd.DpSgdConfig(dataset_size=24, sampling_prob=0.5, num_steps=4,
                                           noise_multiplier=1.0, ema_decay=0.5), model,
                         perf=_QUIET)
    np.testing.assert_array_equal(a.params["w"], b.params["w"])
    np.testing.assert_array_equal(a.ema_params["w"], b.ema_params["w"])
    self.assertTrue(np.all(np.isfinite(np.asarray(a.params["w"]))))

  def test_default_noise_multiplier_is_one(self):
    cfg = dpsgd.DpSgdConfig(dataset_size=24, sampling_prob=0.3, num_steps=6)
    self.assertEqual(cfg.noise_multiplier, 1.0)

  def test_sigma_zero_is_infinite_epsilon(self):
    self.assertEqual(helpers.small_config(noise_multiplier=0.0).epsilon(), math.inf)

  def test_expected_batch_size(self):
    self.assertAlmostEqual(helpers.small_config(dataset_size=150, sampling_prob=0.2).expected_batch_size, 30.0)

  @parameterized.named_parameters(
      ("n", dict(dataset_size=0)),
      ("q_zero", dict(sampling_prob=0.0)),
      ("q_big", dict(sampling_prob=1.5)),
      ("steps", dict(num_steps=0)),
      ("clip", dict(l2_clip_norm=0.0)),
      ("sigma_neg", dict(noise_multiplier=-1.0)),
      ("sigma_none", dict(noise_multiplier=None)),
      ("sigma_inf", dict(noise_multiplier=math.inf)),
      ("sigma_nan", dict(noise_multiplier=float("nan"))),
      ("inf_clip_noise", dict(l2_clip_norm=math.inf, noise_multiplier=1.0)),
      ("delta", dict(delta=1.0)),
      ("lr", dict(learning_rate=0.0)),
      ("momentum", dict(momentum=1.0)),
      ("n_float", dict(dataset_size=24.0)),
      ("q_bool", dict(sampling_prob=True)),
      ("clip_str", dict(l2_clip_norm="1")),
      ("accountant", dict(accountant="moments")),
      ("ema_one", dict(ema_decay=1.0)),
      ("ema_negative", dict(ema_decay=-0.1)),
      ("ema_nan", dict(ema_decay=float("nan"))),
      ("ema_str", dict(ema_decay="0.9")),
      ("ema_bool", dict(ema_decay=True)),
  )
  def test_bad_config_raises(self, kw):
    with self.assertRaises(ValueError):
      helpers.small_config(**kw)

  def test_target_epsilon_is_not_a_field(self):
    # sigma is a plain field: a target is met by calibrate(), never stored.
    with self.assertRaises(TypeError):
      helpers.small_config(target_epsilon=1.0)
    self.assertNotIn("target_epsilon", [f.name for f in dataclasses.fields(dpsgd.DpSgdConfig)])

  def test_ema_decay_is_a_config_field(self):
    x, y = helpers.binary_data()
    keep = jnp.ones((2, 24), bool)
    model = models.logistic_regression(4)
    plain = dpsgd.train_many(jax.random.key(3), x, y, keep, helpers.small_config(), model,
                             perf=_QUIET)
    self.assertIsNone(plain.ema_params)
    ema = dpsgd.train_many(jax.random.key(3), x, y, keep, helpers.small_config(ema_decay=0.0),
                           model, perf=_QUIET)
    # The EMA is post-processing: params unchanged; with d = 0 it is the last iterate.
    np.testing.assert_array_equal(plain.params["w"], ema.params["w"])
    np.testing.assert_allclose(ema.ema_params["w"], ema.params["w"], rtol=1e-6, atol=1e-7)
    with self.assertRaises(TypeError):   # no longer a train_many keyword
      dpsgd.train_many(jax.random.key(3), x, y, keep, helpers.small_config(), model,
                       ema_decay=0.9, perf=_QUIET)

  def test_fixed_gradients_keep_must_be_bool(self):
    # A truthy non-bool ("False", "no", NaN, 2) used to put the canary IN, so an
    # audit's IN / OUT labels were wrong: the keep mask must have dtype bool.
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    g = {"w": jnp.ones((1, 4))}
    for flag in ("False", "no", float("nan"), 2, 1.0, 0):
      with self.assertRaisesRegex(ValueError, r"fixed_gradients\.keep_MxK must be bool"):
        dpsgd.train_one(jax.random.key(0), x, y, jnp.ones(24, bool), helpers.small_config(),
                        model, fixed_gradients=dpsgd.FixedGradients(g, np.array([flag])))
      with self.assertRaisesRegex(ValueError, r"fixed_gradients\.keep_MxK must be bool"):
        dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool),
                         helpers.small_config(), model,
                         fixed_gradients=dpsgd.FixedGradients(g, np.array([[flag], [flag]])))

  @parameterized.named_parameters(
      ("keep_flat", lambda g: dpsgd.FixedGradients(g, np.ones(2, bool)),
       ValueError, r"keep_MxK must be bool\[2, 1\]"),
      ("keep_wrong_k", lambda g: dpsgd.FixedGradients(g, np.ones((2, 3), bool)),
       ValueError, r"keep_MxK must be bool\[2, 1\]"),
      ("keep_wrong_m", lambda g: dpsgd.FixedGradients(g, np.ones((3, 1), bool)),
       ValueError, r"keep_MxK must be bool\[2, 1\]"),
      ("no_leading_axis", lambda g: dpsgd.FixedGradients({"w": g["w"][0]}, np.ones((2, 1), bool)),
       ValueError, r"gradients_K leaves must have the params' shapes"),
      ("wrong_leaf_shape", lambda g: dpsgd.FixedGradients({"w": jnp.ones((1, 5))},
                                                          np.ones((2, 1), bool)),
       ValueError, r"gradients_K leaves must have the params' shapes"),
      ("wrong_structure", lambda g: dpsgd.FixedGradients({"v": g["w"]}, np.ones((2, 1), bool)),
       ValueError, r"gradients_K must have the structure"),
      ("zero_records", lambda g: dpsgd.FixedGradients({"w": jnp.ones((0, 4))},
                                                      np.ones((2, 0), bool)),
       ValueError, r"gradients_K must hold K >= 1"),
      ("nan", lambda g: dpsgd.FixedGradients({"w": g["w"].at[0, 1].set(jnp.nan)},
                                             np.ones((2, 1), bool)),
       ValueError, r"gradients_K must be finite"),
      ("inf", lambda g: dpsgd.FixedGradients({"w": g["w"].at[0, 2].set(-jnp.inf)},
                                             np.ones((2, 1), bool)),
       ValueError, r"gradients_K must be finite"),
      ("complex", lambda g: dpsgd.FixedGradients({"w": np.ones((1, 4)) + 0j},
                                                 np.ones((2, 1), bool)),
       ValueError, r"gradients_K must hold real numbers"),
      ("tuple", lambda g: (g, np.ones((2, 1), bool)), TypeError,
       r"fixed_gradients must be a FixedGradients"),
      ("dict", lambda g: {"gradients_K": g, "keep_MxK": np.ones((2, 1), bool)}, TypeError,
       r"fixed_gradients must be a FixedGradients"),
      ("bare_gradients", lambda g: g, TypeError, r"fixed_gradients must be a FixedGradients"),
  )
  def test_bad_fixed_gradients_refused(self, make, error, pattern):
    x, y = helpers.binary_data()
    with self.assertRaisesRegex(error, pattern):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), helpers.small_config(),
                       models.logistic_regression(4), fixed_gradients=make({"w": jnp.ones((1, 4))}),
                       perf=_QUIET)

  def test_removed_keywords_are_refused(self):
    # The old spellings must fail loudly, not be silently ignored.
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((2, 24), bool)
    for kw in (dict(gradient_canary={"w": jnp.ones(4)}, canary_keep_M=np.ones(2, bool)),
               dict(gradient_canaries={"w": jnp.ones((1, 4))},
                    canary_keep_MxK=np.ones((2, 1), bool)),
               dict(progress=False), dict(max_chunk=2), dict(memory_budget_bytes=2 ** 20),
               dict(batch_capacity=None), dict(model_sharding=None), dict(ema_decay=0.5),
               dict(user_ids_N=np.arange(24))):
      with self.assertRaises(TypeError, msg=str(kw)):
        dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(), model, **kw)
    with self.assertRaises(TypeError):
      dpsgd.train_one(jax.random.key(0), x, y, keep[0], helpers.small_config(), model,
                      canary_keep=True)

  def test_per_example_stats_must_be_a_bool(self):
    x, y = helpers.binary_data()
    for flag in ("yes", 1, None):
      with self.assertRaises(TypeError):
        dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((1, 24), bool),
                         helpers.small_config(), models.logistic_regression(4),
                         per_example_stats=flag, perf=_QUIET)

  def test_int64_labels_are_checked_before_narrowing(self):
    # 2**32 and 2**32 + 1 wrap to 0 and 1 in an int32 cast; they must be refused.
    x, _ = helpers.binary_data()
    bad = np.zeros(24, np.int64)
    bad[3] = 2**32 + 1
    for model in (models.logistic_regression(4), models.mlp(4, hidden=(3,), num_classes=3)):
      with self.assertRaisesRegex(ValueError, r"y_N\[3\]"):
        dpsgd.train_many(jax.random.key(0), x, bad, jnp.ones((1, 24), bool),
                         helpers.small_config(), model)

  def test_complex_records_are_refused(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    for xx, yy, name in ((np.asarray(x) + 0j, y, "x_NxF"), (x, np.asarray(y) + 0j, "y_N")):
      with self.assertRaisesRegex(ValueError, name + " must hold real numbers"):
        dpsgd.train_many(jax.random.key(0), xx, yy, jnp.ones((1, 24), bool),
                         helpers.small_config(), model)

  def test_bad_train_inputs_raise(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    with self.assertRaisesRegex(ValueError, "keep_MxN"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 23), bool), helpers.small_config(), model)
    with self.assertRaisesRegex(ValueError, "y_N"):
      dpsgd.train_many(jax.random.key(0), x, y[:3], jnp.ones((2, 24), bool), helpers.small_config(), model)
    with self.assertRaisesRegex(ValueError, "NaN"):
      dpsgd.train_many(jax.random.key(0), x.at[0, 0].set(jnp.nan), y,
                       jnp.ones((2, 24), bool), helpers.small_config(), model)
    with self.assertRaisesRegex(ValueError, "fixed_gradients.keep_MxK"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), helpers.small_config(), model,
                       fixed_gradients=dpsgd.FixedGradients({"w": jnp.ones((1, 4))},
                                                            np.ones(2, bool)))



_F32_MAX = float(np.finfo(np.float32).max)


class RecordChecksTest(parameterized.TestCase):
  """Non-finite features or labels, and labels outside the model's range, are refused
  with the parameter and the first offending index named; huge finite values pass."""

  @parameterized.named_parameters(
      ("x_nan", "x", (3, 1), np.nan, 1, r"x_NxF\[3, 1\]"),
      ("x_inf", "x", (5, 0), -np.inf, 1, r"x_NxF\[5, 0\]"),
      ("y_nan", "y", 2, np.nan, 1, r"y_N must be finite.*y_N\[2\]"),
      ("y_inf", "y", 4, np.inf, 1, r"y_N must be finite.*y_N\[4\]"),
      ("y_binary_2", "y", 7, 2, 1, r"y_N.*\{0, 1\}.*y_N\[7\]"),
      ("y_binary_half", "y", 1, 0.5, 1, r"y_N.*\{0, 1\}.*y_N\[1\]"),
      ("y_binary_negative", "y", 0, -1, 1, r"y_N.*y_N\[0\]"),
      ("y_class_k", "y", 6, 3, 3, r"y_N.*\[0, 3\).*y_N\[6\]"),
      ("y_class_negative", "y", 9, -1, 3, r"y_N.*y_N\[9\]"),
      ("y_class_fraction", "y", 2, 1.5, 3, r"y_N.*y_N\[2\]"))
  def test_bad_records_refused(self, which, index, value, num_classes, pattern):
    x, y = helpers.binary_data()
    x, y = np.array(x), np.array(y, np.float32)
    if which == "x":
      x[index] = value
    else:
      y[index] = value
    model = (models.logistic_regression(4) if num_classes == 1
             else models.mlp(4, hidden=(), num_classes=num_classes))
    with self.assertRaisesRegex(ValueError, pattern):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool),
                       helpers.small_config(), model)
    with self.assertRaisesRegex(ValueError, pattern):
      dpsgd.train_one(jax.random.key(0), x, y, jnp.ones((24,), bool),
                      helpers.small_config(), model)

  def test_non_finite_canary_or_init_refused(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    with self.assertRaisesRegex(ValueError, r"fixed_gradients\.gradients_K must be finite"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), helpers.small_config(),
                       model, fixed_gradients=_one_fixed({"w": jnp.ones(4).at[1].set(jnp.inf)},
                                                         np.ones(2, bool)))
    with self.assertRaisesRegex(ValueError, "init_params"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), helpers.small_config(),
                       model, init_params={"w": jnp.full(4, jnp.nan)})


class FloatLimitsTest(parameterized.TestCase):
  """The acceptance test: no record of finite float32 values (features up to +-3.4e38,
  labels at the edges of their range) makes any model's parameters non-finite, on the
  GLM, ghost (MLP, CNN) and two-pass vmap paths."""

  def test_fraction_of_non_finite_models_is_zero_with_and_without_huge_records(self):
    self._check_non_finite_fraction("lr")

  @parameterized.named_parameters(("ghost_cnn", "cnn"), ("ghost_mlp", "mlp"),
                                  ("vmap_two_pass", "custom"))
  @pytest.mark.slow   # the other paths, 20-50 s each (ghost float limits: ghost_test)
  def test_fraction_of_non_finite_models_is_zero_other_paths(self, kind):
    self._check_non_finite_fraction(kind)

  def _check_non_finite_fraction(self, kind):
    n, m = 30, 400
    d = 16 if kind == "cnn" else 5
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 0], x[3, d - 1] = 3e19, 1e30, _F32_MAX, -_F32_MAX
    x[4, :] = _F32_MAX * np.where(np.arange(d) % 2, 1.0, -1.0)
    if kind == "lr":
      model, y = models.logistic_regression(d), np.arange(n) % 2
    elif kind == "cnn":
      model, y = models.cnn((4, 4, 1), (2,), num_classes=3), np.where(np.arange(n) % 2, 2, 0)
    else:
      base = models.mlp(d, hidden=(8,), num_classes=3)
      model = base if kind == "mlp" else models.Model(base.init, base.apply, 0.0, "custom", 3)
      y = np.where(np.arange(n) % 2, 2, 0)              # classes 0 and K - 1
    keep = np.ones((m, n), bool)
    keep[m // 2:, :5] = False                           # models 200..399 never see them
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=0.2, num_steps=25,
                            noise_multiplier=1.0, learning_rate=0.5)
    out = dpsgd.train_many(jax.random.key(1), x, y, jnp.asarray(keep), cfg, model,
                           per_example_stats=True, perf=_QUIET)
    finite = np.all([np.all(np.isfinite(np.asarray(l).reshape(m, -1)), axis=1)
                     for l in jax.tree.leaves(out.params)], axis=0)
    self.assertEqual(1.0 - finite[: m // 2].mean(), 0.0)       # with the records
    self.assertEqual(1.0 - finite[m // 2:].mean(), 0.0)        # without them
    np.testing.assert_array_equal(out.finite, finite)
    np.testing.assert_array_equal(out.first_nonfinite_step, -1)
    # The huge records were sampled (about q T = 5 times per model), and the
    # per-example statistics hold no NaN.
    self.assertGreater(np.asarray(out.stats["times_sampled"])[: m // 2, :5].mean(), 3.0)
    self.assertFalse(np.any(np.isnan(np.asarray(out.stats["norm_sum"]))))


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
                              [1, 0, 1, 0, 1, 0], model, perf=_QUIET)
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

  def test_no_warning_when_every_model_is_finite(self):
    x, y = helpers.binary_data()
    with warnings.catch_warnings():
      warnings.simplefilter("error", dpsgd.DivergenceWarning)
      out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((3, 24), bool),
                             helpers.small_config(), models.logistic_regression(4),
                             perf=_QUIET)
    np.testing.assert_array_equal(out.finite, True)


class PerformanceFlagsTest(parameterized.TestCase):
  """The layout knobs: one checked argument, none of which changes a model."""

  def test_defaults(self):
    p = dpsgd.PerformanceFlags()
    self.assertEqual((p.memory_budget_bytes, p.max_chunk, p.model_sharding, p.batch_capacity,
                      p.progress), (2 * 2 ** 30, None, None, "auto", True))
    hash(p)

  @parameterized.named_parameters(
      ("budget_bool", dict(memory_budget_bytes=True), ValueError, "memory_budget_bytes"),
      ("budget_float", dict(memory_budget_bytes=1e9), ValueError, "memory_budget_bytes"),
      ("budget_integral_float", dict(memory_budget_bytes=2.0 ** 30), ValueError,
       "memory_budget_bytes"),
      ("budget_zero", dict(memory_budget_bytes=0), ValueError, "memory_budget_bytes"),
      ("budget_negative", dict(memory_budget_bytes=-5), ValueError, "memory_budget_bytes"),
      ("budget_str", dict(memory_budget_bytes="1GB"), ValueError, "memory_budget_bytes"),
      ("progress_str", dict(progress="no"), TypeError, "progress"),
      ("progress_int", dict(progress=1), TypeError, "progress"),
      ("progress_none", dict(progress=None), TypeError, "progress"),
      ("capacity_str", dict(batch_capacity="big"), ValueError, "batch_capacity"),
      ("capacity_zero", dict(batch_capacity=0), ValueError, "batch_capacity"),
      ("capacity_fraction", dict(batch_capacity=2.5), ValueError, "batch_capacity"),
      ("max_chunk_zero", dict(max_chunk=0), ValueError, "max_chunk"),
      ("max_chunk_fraction", dict(max_chunk=2.5), ValueError, "max_chunk"),
  )
  def test_bad_flags_refused(self, kw, error, name):
    with self.assertRaisesRegex(error, name):
      dpsgd.PerformanceFlags(**kw)

  def test_good_flags_accepted(self):
    for kw in (dict(memory_budget_bytes=1), dict(progress=np.bool_(False)),
               dict(batch_capacity=None), dict(batch_capacity=8), dict(batch_capacity="auto"),
               dict(max_chunk=3)):
      dpsgd.PerformanceFlags(**kw)

  def test_perf_must_be_performance_flags(self):
    x, y = helpers.binary_data()
    for bad in (dict(progress=False), False, None):
      with self.assertRaisesRegex(TypeError, "perf"):
        dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((1, 24), bool),
                         helpers.small_config(), models.logistic_regression(4), perf=bad)

  def test_layout_flags_do_not_change_models(self):
    x, y = helpers.binary_data()
    keep = jax.random.bernoulli(jax.random.key(6), 0.7, (5, 24))
    model = models.logistic_regression(4)
    cfg = helpers.small_config()
    ref = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model, perf=_QUIET)
    for perf in (dpsgd.PerformanceFlags(max_chunk=2, progress=False),
                 dpsgd.PerformanceFlags(memory_budget_bytes=1, progress=True),
                 dpsgd.PerformanceFlags(batch_capacity=None, progress=False),
                 dpsgd.PerformanceFlags(batch_capacity=6, progress=False)):
      got = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model, perf=perf)
      helpers.assert_trees_close(ref.params, got.params)

  def test_progress_bar_only_when_asked(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((3, 24), bool)
    with mock.patch("tqdm.tqdm", side_effect=lambda it, **kw: it) as bar:
      dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(), model,
                       perf=dpsgd.PerformanceFlags(max_chunk=1, progress=False))
      bar.assert_not_called()
      dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(), model,
                       perf=dpsgd.PerformanceFlags(max_chunk=1))     # 3 chunks, default on
      bar.assert_called_once()

  def test_train_one_defaults_to_no_progress_bar(self):
    x, y = helpers.binary_data()
    with mock.patch("dpjax.dpsgd.engine.train_many", wraps=dpsgd.engine.train_many) as tm:
      dpsgd.train_one(jax.random.key(0), x, y, jnp.ones(24, bool), helpers.small_config(),
                      models.logistic_regression(4))
    self.assertEqual(tm.call_args.kwargs["perf"], dpsgd.PerformanceFlags(progress=False))


class SmallDeltaWarningTest(absltest.TestCase):

  def test_epsilon_warns_when_delta_not_below_one_over_n(self):
    cfg = dpsgd.DpSgdConfig(dataset_size=50, sampling_prob=0.2, num_steps=10,
                            noise_multiplier=1.0, delta=0.1)
    with self.assertWarnsRegex(UserWarning, "1/dataset_size"):
      cfg.epsilon()


if __name__ == "__main__":
  absltest.main()
