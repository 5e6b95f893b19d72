"""Tests of dpjax/dpsgd/config.py: DpSgdConfig (what the accountant is told: epsilon, calibrate, validation), PerformanceFlags and the small-delta warning."""

import dataclasses
import math
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from dpjax import dpsgd
from dpjax import models
from tests import helpers


_F32_MAX = float(np.finfo(np.float32).max)


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
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=helpers.QUIET)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep,
                         dpsgd.DpSgdConfig(dataset_size=24, sampling_prob=0.5, num_steps=4,
                                           noise_multiplier=1.0, ema_decay=0.5), model,
                         perf=helpers.QUIET)
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
                             perf=helpers.QUIET)
    self.assertIsNone(plain.ema_params)
    ema = dpsgd.train_many(jax.random.key(3), x, y, keep, helpers.small_config(ema_decay=0.0),
                           model, perf=helpers.QUIET)
    # The EMA is post-processing: params unchanged; with d = 0 it is the last iterate.
    np.testing.assert_array_equal(plain.params["w"], ema.params["w"])
    np.testing.assert_allclose(ema.ema_params["w"], ema.params["w"], rtol=1e-6, atol=1e-7)
    with self.assertRaises(TypeError):   # no longer a train_many keyword
      dpsgd.train_many(jax.random.key(3), x, y, keep, helpers.small_config(), model,
                       ema_decay=0.9, perf=helpers.QUIET)

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
                       perf=helpers.QUIET)

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
                         per_example_stats=flag, perf=helpers.QUIET)

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
    init = jax.tree.map(lambda a: np.asarray(a) + 0j, model.init(jax.random.key(0)))
    with self.assertRaisesRegex(ValueError, "init_params must hold real numbers"):
      dpsgd.train_one(jax.random.key(0), x, y, jnp.ones(24, bool), helpers.small_config(),
                      model, init_params=init, perf=helpers.QUIET)

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
    ref = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model, perf=helpers.QUIET)
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
