"""Tests for dpjax.privatizer: noise sigma * C (KS both ways), fixed denominator, the engine's path."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import optax
from absl.testing import absltest
from absl.testing import parameterized
from scipy import stats

from dpjax import dpsgd
from dpjax import integer_noise
from dpjax import models
from dpjax import prng
from dpjax import privatizer
from dpjax.clipping import grid as grid_lib
from dpjax.clipping import vmap
from tests import helpers


_QUIET = dpsgd.PerformanceFlags(progress=False)


def _identity(u):
  return u["w"]


class DpAggregateTest(parameterized.TestCase):

  def test_noise_ks_accepts_std_and_rejects_two_thirds_and_three_halves(self):
    tx = privatizer.dp_aggregate(2.0, 4.0, jax.random.key(0))
    state = tx.init({"w": jnp.zeros(500)})
    upd, state = tx.update({"w": jnp.zeros(500)}, state)
    upd2, _ = tx.update({"w": jnp.zeros(500)}, state)
    z = np.concatenate([upd["w"], upd2["w"]]) / 0.5      # std / B = 2 / 4
    self.assertGreater(stats.kstest(z, "norm").pvalue, 1e-3)
    self.assertLess(stats.kstest(z * 1.5, "norm").pvalue, 1e-6)
    self.assertLess(stats.kstest(z / 1.5, "norm").pvalue, 1e-6)
    self.assertFalse(np.allclose(upd["w"], upd2["w"]))   # fresh noise each step

  @pytest.mark.slow  # about 25 s; fresh noise per step is checked above

  def test_update_t_uses_fold_in_of_the_key(self):
    key = jax.random.key(3)
    g = {"a": jnp.ones(3), "b": jnp.zeros((2, 2))}
    tx = privatizer.gaussian_privatizer(1.5, key)
    state = tx.init(g)
    for t in range(3):
      out, state = tx.update(g, state)
      ka, kb = prng.split(prng.fold_in(key, t), 2)
      np.testing.assert_array_equal(out["a"], 1.0 + 1.5 * prng.standard_normal(ka, (3,)))
      np.testing.assert_array_equal(out["b"], 1.5 * prng.standard_normal(kb, (2, 2)))

  def test_static_zero_adds_nothing_and_divides_by_b(self):
    tx = optax.chain(privatizer.dp_aggregate(0.0, 4.0, jax.random.key(0)), optax.sgd(1.0))
    state = tx.init({"w": jnp.zeros(2)})
    out, _ = tx.update({"w": jnp.array([4.0, 8.0])}, state)
    np.testing.assert_array_equal(out["w"], [-1.0, -2.0])

  def test_traced_std_under_jit_equals_concrete(self):
    key = jax.random.key(1)
    g = {"w": jnp.ones(5)}

    def step(std):
      tx = privatizer.dp_aggregate(std, 3.0, key)
      return tx.update(g, tx.init(g), batch_size=jnp.float32(7.0))[0]["w"]
    np.testing.assert_array_equal(jax.jit(step)(jnp.float32(0.7)), step(0.7))

  @parameterized.named_parameters(
      ("neg_std", dict(noise_stddev=-1.0, expected_batch_size=2.0), "noise_stddev"),
      ("nan_std", dict(noise_stddev=math.nan, expected_batch_size=2.0), "noise_stddev"),
      ("bool_std", dict(noise_stddev=True, expected_batch_size=2.0), "noise_stddev"),
      ("zero_b", dict(noise_stddev=1.0, expected_batch_size=0.0), "expected_batch_size"),
      ("inf_b", dict(noise_stddev=1.0, expected_batch_size=math.inf), "expected_batch_size"),
  )
  def test_bad_inputs(self, kw, name):
    with self.assertRaisesRegex(ValueError, name):
      privatizer.dp_aggregate(key=jax.random.key(0), **kw)


class EnginePrivatizerTest(absltest.TestCase):

  def _noise_samples(self, cfg, num_models=200, n=24):
    # Zero features => zero gradients, so the privatized update is pure noise / B.
    x = jnp.zeros((n, 3))
    y = jnp.zeros((n,), jnp.int32)
    out = dpsgd.train_many(jax.random.key(11), x, y, jnp.ones((num_models, n), bool), cfg,
                           models.logistic_regression(3), observe_fn=_identity,
                           perf=_QUIET)
    return np.asarray(out.observations).ravel()

  def test_noise_std_is_sigma_c_over_b(self):
    cfg = helpers.small_config(noise_multiplier=1.7, l2_clip_norm=2.5, num_steps=5)
    z = self._noise_samples(cfg)       # 200 models x 5 steps x 3 coordinates
    std = 1.7 * 2.5 / cfg.expected_batch_size
    self.assertGreater(stats.kstest(z / std, "norm").pvalue, 1e-3)
    for wrong in (2 / 3, 3 / 2):
      self.assertLess(stats.kstest(z / (wrong * std), "norm").pvalue, 1e-6)

  def test_engine_noise_is_dp_aggregate(self):
    # Model 0's update at step t equals dp_aggregate(sigma C, B, k_noise) applied to the
    # clipped sum, with k_noise the third of split(model key, 4).
    x = jax.random.normal(jax.random.key(0), (24, 3))
    y = (x[:, 0] > 0).astype(jnp.int32)
    cfg = helpers.small_config(sampling_prob=1.0, noise_multiplier=1.3, num_steps=1, l2_clip_norm=0.8)
    model = models.logistic_regression(3)
    key = jax.random.key(5)
    out = dpsgd.train_one(key, x, y, jnp.ones(24, bool), cfg, model, observe_fn=_identity)
    k_noise = jax.random.split(key, 4)[2]
    s, _ = vmap.clipped_grad_sum(model, {"w": jnp.zeros(3)}, x, y, jnp.ones(24), 0.8)
    tx = privatizer.dp_aggregate(np.float32(1.3 * 0.8), cfg.expected_batch_size, k_noise)
    want, _ = tx.update(s, tx.init(s))
    np.testing.assert_allclose(out.observations[0], want["w"], rtol=1e-5, atol=1e-7)

  def test_denominator_is_q_times_n(self):
    # q = 1, sigma = 0: every kept record is in; half the pool is kept, so the
    # realised batch (12) differs from the fixed B = q * n = 24.
    kx, ky = jax.random.split(jax.random.key(0))
    x = 3.0 * jax.random.normal(kx, (24, 4))
    y = jax.random.bernoulli(ky, 0.5, (24,)).astype(jnp.int32)
    model = models.logistic_regression(4)
    keep = jnp.arange(24)[None, :] < 12
    cfg = helpers.small_config(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1, learning_rate=0.5)
    out = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, observe_fn=_identity,
                           perf=_QUIET)
    s, _ = vmap.clipped_grad_sum(model, {"w": jnp.zeros(4)}, x, y,
                                 keep[0].astype(jnp.float32), 1.0)
    np.testing.assert_allclose(out.observations[0, 0], s["w"] / 24.0, rtol=1e-5)
    np.testing.assert_allclose(out.params["w"][0], -0.5 * s["w"] / 24.0, rtol=1e-5)

  def test_gaussian_privatizer_declares_sigma_c(self):
    p = privatizer.GaussianPrivatizer()
    self.assertTrue(p.accounted)
    self.assertEqual(p.noise_stddev(1.5, 2.0), 3.0)
    self.assertEqual(p.noise_stddev(0.0, math.inf), 0.0)

  def test_interface_is_checked(self):
    with self.assertRaisesRegex(TypeError, "noise_stddev"):
      privatizer.check_privatizer(object())


class SecurePrivatizerTest(parameterized.TestCase):
  """Secure DP-SGD: grid clipping + integer Gaussian noise, through the engine."""

  def test_noise_is_integer_rounded_gaussian_with_inflated_sensitivity(self):
    # sigma_grid = sigma (C / gamma + sqrt(P) / 2); 2 updates of P = 3000 draws: the
    # sd of (out / gamma) is sqrt(s^2 + 1/12) within 4% (SE of an sd from 6000
    # draws: 0.9%); every output is an exact multiple of gamma.
    sigma, c, gamma, p = 1.0, 1.0, 2.0 ** -4, 3000
    tx = privatizer.secure_gaussian_privatizer(sigma, c, gamma, jax.random.key(0))
    state = tx.init({"w": jnp.zeros(p)})
    s_int = {"w": jnp.arange(p, dtype=jnp.int32) - 1500}
    u1, state = tx.update(s_int, state)
    u2, _ = tx.update(s_int, state)
    z = np.concatenate([np.asarray(u["w"], np.float64) / gamma - np.asarray(s_int["w"])
                        for u in (u1, u2)])
    np.testing.assert_array_equal(z, np.round(z))
    s = sigma * (c / gamma + math.sqrt(p) / 2)
    self.assertAlmostEqual(z.std() / math.sqrt(s * s + 1 / 12), 1.0, delta=0.04)
    self.assertFalse(np.array_equal(u1["w"], u2["w"]))
    with self.assertRaisesRegex(TypeError, "integer grid sum"):
      tx.update({"w": jnp.zeros(p)}, state)

  def _data(self):
    x, y = helpers.binary_data(n=32, d=4)
    cfg = helpers.small_config(dataset_size=32, sampling_prob=0.25)   # B = 8
    return x, y, cfg, models.logistic_regression(4)

  def test_updates_are_exact_multiples_of_gamma_over_b_with_a_canary(self):
    x, y, cfg, model = self._data()
    path, priv = privatizer.secure_components(cfg.noise_multiplier, cfg.l2_clip_norm, model)
    keep = jnp.ones((4, 32), bool)
    canary = {"w": jnp.array([3.0, -1.0, 0.5, 2.0])}
    out = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model, clipping=path,
                           privatizer=priv, observe_fn=_identity, perf=_QUIET,
                           fixed_gradients=dpsgd.FixedGradients(
                               jax.tree.map(lambda v: v[None], canary),
                               np.array([[True], [False], [True], [False]])))
    units = np.asarray(out.observations, np.float64) * cfg.expected_batch_size / priv.grid
    np.testing.assert_array_equal(units, np.round(units))
    self.assertEqual(priv.grid, 2.0 ** -10)

  def test_same_expected_update_as_float_mode(self):
    # lr = 0 keeps params at 0, so each of the T steps of each model is an
    # independent draw of the privatised update; E[update] = q sum_i clip(g_i) / B in
    # both modes (the grid's rounding moves it by <= n gamma / (2 B) = 2e-3 per
    # coordinate, below the tolerance). Per-coordinate sd: sqrt(sigma^2 C'^2 +
    # q (1-q) sum_i c_ij^2) / B, C' = C + gamma sqrt(P)/2 for the secure mode;
    # means over M T = 1200 draws must be within 5 SE of the exact expectation.
    x, y, cfg, model = self._data()
    m = 200
    keep = jnp.ones((m, 32), bool)
    init = {"w": jnp.zeros(4)}
    path, priv = privatizer.secure_components(cfg.noise_multiplier, cfg.l2_clip_norm, model)
    common = dict(init_params=init, observe_fn=_identity, perf=_QUIET,
                  optimizer=optax.sgd(0.0))
    sec = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model, clipping=path,
                           privatizer=priv, **common).observations
    flt = dpsgd.train_many(jax.random.key(3), x, y, keep, cfg, model, **common).observations
    g = vmap.per_example_grads(model, init, x, y)["w"]
    c = np.asarray(g, np.float64) * np.minimum(1.0, 1.0 / np.linalg.norm(g, axis=1))[:, None]
    b, q = cfg.expected_batch_size, cfg.sampling_prob
    want = q * c.sum(axis=0) / b
    for obs, cc in ((sec, 1.0 + priv.grid), (flt, 1.0)):
      sd = np.sqrt(cfg.noise_multiplier ** 2 * cc ** 2 + q * (1 - q) * np.sum(c ** 2, axis=0)) / b
      mean = np.asarray(obs, np.float64).reshape(-1, 4).mean(axis=0)
      se = sd / math.sqrt(m * cfg.num_steps)
      np.testing.assert_array_less(np.abs(mean - want), 5 * se)
    self.assertGreater(np.abs(want).max(), 10 * se.max())   # the check has power

  @pytest.mark.slow  # about 15 s; the engine's vmap == single-model test stays

  def test_models_vmapped_equal_models_alone(self):
    x, y, cfg, model = self._data()
    path, priv = privatizer.secure_components(cfg.noise_multiplier, cfg.l2_clip_norm, model)
    keys = jax.random.split(jax.random.key(4), 3)
    keep = jax.random.bernoulli(jax.random.key(5), 0.7, (3, 32))
    run = lambda k, kp: dpsgd.train_many(k, x, y, kp, cfg, model, clipping=path,
                                         privatizer=priv, perf=_QUIET).params["w"]
    together = run(keys, keep)
    for i in range(3):
      np.testing.assert_array_equal(together[i], run(keys[i:i + 1], keep[i:i + 1])[0])

  def test_engine_refuses_mismatched_pairs(self):
    x, y, cfg, model = self._data()
    path, priv = privatizer.secure_components(cfg.noise_multiplier, cfg.l2_clip_norm, model)
    keep = jnp.ones((1, 32), bool)
    other = grid_lib.path(model, priv.grid * 2)
    for kwargs in (dict(privatizer=priv), dict(clipping=path), dict(clipping=other,
                                                                    privatizer=priv)):
      with self.assertRaisesRegex(ValueError, "do not match"):
        dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=_QUIET, **kwargs)
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      dpsgd.train_many(jax.random.key(0), x, y, keep, helpers.small_config(
          dataset_size=32, sampling_prob=0.25, noise_multiplier=2.0), model, clipping=path,
                       privatizer=priv, perf=_QUIET)
    cfgs = [cfg, helpers.small_config(dataset_size=32, sampling_prob=0.25, noise_multiplier=3.0)]
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      dpsgd.train_sweep(jax.random.key(0), x, y, jnp.ones((2, 32), bool), cfgs, [0, 1], model,
                        clipping=path, privatizer=priv, perf=_QUIET)

  def test_sampler_delta(self):
    priv = privatizer.SecureGaussianPrivatizer(1.0, 1.0)
    s = 1.0 * (1.0 / priv.grid + math.sqrt(4) / 2)
    tv = integer_noise.rounded_gaussian(s).tv
    self.assertAlmostEqual(priv.sampler_delta(2.0, 100, 4) / ((1 + math.exp(2.0)) * 400 * tv),
                           1.0, places=12)
    self.assertLess(priv.sampler_delta(2.0, 100, 4), 1e-15)

  @parameterized.named_parameters(
      ("sigma", lambda: privatizer.SecureGaussianPrivatizer(-1.0, 1.0), "noise_multiplier"),
      ("clip", lambda: privatizer.SecureGaussianPrivatizer(1.0, 0.0), "l2_clip_norm"),
      ("grid", lambda: privatizer.SecureGaussianPrivatizer(1.0, 1.0, grid=0.3), "grid"),
      ("clip_mismatch", lambda: privatizer.SecureGaussianPrivatizer(1.0, 1.0).noise_stddev(
          1.0, 2.0), "l2_clip_norm"),
      ("default_grid", lambda: privatizer.default_grid(math.inf), "l2_clip_norm"))
  def test_bad_input_names_parameter(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


if __name__ == "__main__":
  absltest.main()
