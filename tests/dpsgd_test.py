"""Tests for dpjax.dpsgd: the DP-SGD contract checked piece by piece.

Clipping bounds (property test), noise std sigma*C (KS test that also rejects
2/3 and 3/2 of it), the fixed denominator q*n, Poisson rates, vmap = single model,
jit = eager, GLM fast path = vmap(grad), each Fault, and the epsilon reported.
"""

import functools
import math
from unittest import mock
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from absl.testing import parameterized
from scipy import stats

from dpjax import dpsgd
from dpjax import models


def _data(n=24, d=4, seed=0, scale=3.0):
  kx, ky = jax.random.split(jax.random.key(seed))
  x = scale * jax.random.normal(kx, (n, d))
  y = jax.random.bernoulli(ky, 0.5, (n,)).astype(jnp.int32)
  return x, y


def _cfg(**kw):
  base = dict(dataset_size=24, sampling_prob=0.3, num_steps=6, noise_multiplier=1.0,
              learning_rate=0.5)
  base.update(kw)
  return dpsgd.DpSgdConfig(**base)


def _assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


def _identity(u):
  return u["w"]


class ClippingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"seed{s}_{kind}_C{c}", s, kind, c)
      for s in range(2) for kind in ("glm", "generic", "mlp", "two_pass_lr", "two_pass_mlp")
      for c in (0.1, 5.0))
  def test_each_contribution_bounded_by_c(self, seed, kind, c):
    x, y = _data(n=16, d=5, seed=seed, scale=1.0 + 4.0 * seed)
    if kind == "mlp":
      model = models.mlp(5, hidden=(7,), num_classes=1, l2=0.1)
      fn = functools.partial(dpsgd.clipped_grad_sum, model)
    elif kind.startswith("two_pass"):
      # No L2 penalty, so the norms come from sqnorm's outer-product identity.
      model = (models.logistic_regression(5) if kind == "two_pass_lr"
               else models.mlp(5, hidden=(7,), num_classes=1))
      fn = functools.partial(dpsgd.two_pass_clipped_grad_sum, model)
    else:
      model = models.logistic_regression(5, l2=0.2)
      fn = (functools.partial(dpsgd.glm_clipped_grad_sum, 0.2) if kind == "glm"
            else functools.partial(dpsgd.clipped_grad_sum, model))
    params = model.init(jax.random.key(seed))
    params = jax.tree.map(
        lambda p: p + jax.random.normal(jax.random.key(seed + 7), p.shape), params)
    # One-hot weights: the sum is exactly example i's clipped contribution.
    sums, norms = jax.jit(jax.vmap(lambda w: fn(params, x, y, w, c)))(jnp.eye(16))
    contribution = np.sqrt(sum(np.sum(np.asarray(v).reshape(16, -1) ** 2, axis=1)
                               for v in jax.tree.leaves(sums)))
    self.assertTrue(np.all(contribution <= c * (1 + 1e-5)), contribution)
    # Examples under the bound keep their full gradient; the others are scaled to C.
    np.testing.assert_allclose(contribution, np.minimum(c, np.diag(np.asarray(norms))),
                               rtol=1e-4, atol=1e-6)
    if c < 1:
      self.assertGreater(np.sum(np.diag(np.asarray(norms)) > c), 0)

  def test_two_pass_equals_one_pass(self):
    model = models.mlp(4, hidden=(6,), num_classes=3, l2=0.05)
    params = model.init(jax.random.key(0))
    x, _ = _data()
    y = jax.random.randint(jax.random.key(2), (24,), 0, 3)
    wts = jax.random.bernoulli(jax.random.key(6), 0.5, (24,)).astype(jnp.float32)
    s1, n1 = dpsgd.clipped_grad_sum(model, params, x, y, wts, 0.5)
    s2, n2 = dpsgd.two_pass_clipped_grad_sum(model, params, x, y, wts, 0.5)
    _assert_trees_close(s1, s2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n1, n2, rtol=1e-6)

  def test_default_clipping_per_model_kind(self):
    # GLM closed form for logistic regression, ghost for MLP / CNN (tests/ghost_test.py
    # checks ghost = vmap(grad)), two-pass vmap(grad) for any other model.
    lr = models.logistic_regression(4, l2=0.3)
    f = dpsgd.default_clipped_sum_fn(lr)
    self.assertIs(f.func, dpsgd.glm_clipped_grad_sum)
    self.assertEqual(f.args, (0.3,))
    base = models.mlp(4, hidden=(6,), num_classes=3)
    custom = models.Model(base.init, base.apply, 0.05, "custom", 3)
    f = dpsgd.default_clipped_sum_fn(custom)
    self.assertIs(f.func, dpsgd.two_pass_clipped_grad_sum)
    params = custom.init(jax.random.key(0))
    x, _ = _data()
    y = jax.random.randint(jax.random.key(2), (24,), 0, 3)
    wts = jnp.ones((24,), jnp.float32)
    s1, n1 = f(params, x, y, wts, 0.5)
    s2, n2 = dpsgd.clipped_grad_sum(custom, params, x, y, wts, 0.5)
    _assert_trees_close(s1, s2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n1, n2, rtol=1e-6)

  def test_glm_equals_generic(self):
    for l2 in (0.0, 0.3):
      model = models.logistic_regression(4, l2=l2)
      x, y = _data()
      w = {"w": jax.random.normal(jax.random.key(5), (4,))}
      wts = jax.random.bernoulli(jax.random.key(6), 0.5, (24,)).astype(jnp.float32)
      s1, n1 = dpsgd.glm_clipped_grad_sum(l2, w, x, y, wts, 1.0)
      s2, n2 = dpsgd.clipped_grad_sum(model, w, x, y, wts, 1.0)
      _assert_trees_close(s1, s2, rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(n1, n2, rtol=1e-5, atol=1e-5)

  def test_glm_train_equals_generic_train(self):
    model = models.logistic_regression(4, l2=0.1)
    x, y = _data()
    keep = jnp.ones((3, 24), bool)
    cfg = _cfg(num_steps=10)
    fast = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, progress=False)
    gen = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, progress=False,
                           clipped_sum_fn=functools.partial(dpsgd.clipped_grad_sum, model))
    _assert_trees_close(fast.params, gen.params, rtol=1e-4, atol=1e-5)

  def test_no_clipping_when_c_infinite(self):
    model = models.logistic_regression(4)
    x, y = _data()
    w = {"w": jnp.ones((4,))}
    s, _ = dpsgd.clipped_grad_sum(model, w, x, y, jnp.ones((24,)), math.inf)
    g = dpsgd.per_example_grads(model, w, x, y)
    np.testing.assert_allclose(s["w"], jnp.sum(g["w"], axis=0), rtol=1e-5)


class NoiseAndDenominatorTest(parameterized.TestCase):

  def _noise_samples(self, cfg, num_models=200, n=24):
    # Zero features => zero gradients, so the privatized update is pure noise / B.
    x = jnp.zeros((n, 3))
    y = jnp.zeros((n,), jnp.int32)
    out = dpsgd.train_many(jax.random.key(11), x, y, jnp.ones((num_models, n), bool), cfg,
                           models.logistic_regression(3), observe_fn=_identity,
                           progress=False)
    return np.asarray(out.observations).ravel()

  def test_noise_std_is_sigma_c_over_b(self):
    cfg = _cfg(noise_multiplier=1.7, l2_clip_norm=2.5, num_steps=5)
    z = self._noise_samples(cfg)       # 200 models x 5 steps x 3 coordinates
    std = 1.7 * 2.5 / cfg.expected_batch_size
    self.assertGreater(stats.kstest(z / std, "norm").pvalue, 1e-3)
    for wrong in (2 / 3, 3 / 2):
      self.assertLess(stats.kstest(z / (wrong * std), "norm").pvalue, 1e-6)

  def test_dp_aggregate_ks(self):
    tx = dpsgd.dp_aggregate(2.0, 4.0, jax.random.key(0))
    state = tx.init({"w": jnp.zeros(500)})
    upd, state = tx.update({"w": jnp.zeros(500)}, state)
    upd2, _ = tx.update({"w": jnp.zeros(500)}, state)
    z = np.concatenate([upd["w"], upd2["w"]]) / 0.5
    self.assertGreater(stats.kstest(z, "norm").pvalue, 1e-3)
    self.assertLess(stats.kstest(z * 1.5, "norm").pvalue, 1e-6)
    self.assertLess(stats.kstest(z / 1.5, "norm").pvalue, 1e-6)
    # Fresh noise each step.
    self.assertFalse(np.allclose(upd["w"], upd2["w"]))

  def test_denominator_is_q_times_n(self):
    # q = 1, sigma = 0: every kept record is in; half the pool is kept, so the
    # realised batch (12) differs from the fixed B = q * n = 24.
    x, y = _data()
    model = models.logistic_regression(4)
    keep = jnp.arange(24)[None, :] < 12
    cfg = _cfg(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1)
    out = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, observe_fn=_identity,
                           progress=False)
    s, _ = dpsgd.clipped_grad_sum(model, {"w": jnp.zeros(4)}, x, y,
                                  keep[0].astype(jnp.float32), 1.0)
    np.testing.assert_allclose(out.observations[0, 0], s["w"] / 24.0, rtol=1e-5)
    np.testing.assert_allclose(out.params["w"][0], -0.5 * s["w"] / 24.0, rtol=1e-5)

  def test_poisson_rate(self):
    masks = jax.vmap(lambda k: dpsgd.poisson_mask(k, 0.3, 1000))(
        jax.random.split(jax.random.key(0), 200))
    rate = float(jnp.mean(masks))
    self.assertAlmostEqual(rate, 0.3, delta=4 * math.sqrt(0.3 * 0.7 / 200_000))
    # Independence across records: pairwise inclusion of neighbours ~ q^2.
    both = float(jnp.mean(masks[:, 1:] & masks[:, :-1]))
    self.assertAlmostEqual(both, 0.09, delta=4 * math.sqrt(0.09 * 0.91 / 199_800))

  def test_training_inclusion_rate_and_keep(self):
    x, y = _data()
    keep = jax.random.bernoulli(jax.random.key(2), 0.5, (50, 24))
    cfg = _cfg(sampling_prob=0.25, num_steps=40)
    out = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, models.logistic_regression(4),
                           per_example_stats=True, progress=False)
    sampled = np.asarray(out.stats["times_sampled"])
    kept = np.asarray(keep)
    self.assertEqual(sampled[~kept].sum(), 0.0)
    rate = sampled[kept].sum() / (kept.sum() * 40)
    self.assertAlmostEqual(rate, 0.25, delta=4 * math.sqrt(0.25 * 0.75 / (kept.sum() * 40)))

  def test_bernoulli_threshold_never_above_q(self):
    for q in (1e-6, 0.05, 0.2, 0.5, 0.999999):
      for w in (16, 32):
        thr = dpsgd.bernoulli_threshold(q, w)
        self.assertLessEqual(thr / 2 ** w, q)
        self.assertLess(q - thr / 2 ** w, 2.0 ** -w)
      w = dpsgd.mask_bit_width(q)
      # The rate's relative shortfall is at most 2^-12 whichever width is used.
      self.assertLess((q - dpsgd.bernoulli_threshold(q, w) / 2 ** w) / q, 2 ** -12)

  @parameterized.named_parameters(("w32", 0.03), ("w16", 0.3))
  def test_poisson_rate_both_widths(self, q):
    masks = jax.vmap(lambda k: dpsgd.poisson_mask(k, q, 999))(
        jax.random.split(jax.random.key(5), 200))
    self.assertEqual(masks.shape, (200, 999))
    rate = float(jnp.mean(masks))
    self.assertAlmostEqual(rate, q, delta=4 * math.sqrt(q * (1 - q) / masks.size))
    # No correlation between the two halves of a word (records i and i + 500).
    both = float(jnp.mean(masks[:, :499] & masks[:, 500:]))
    self.assertAlmostEqual(both, q * q, delta=4 * math.sqrt(q * q * (1 - q * q) / 99_800))


class SweepTest(absltest.TestCase):
  """train_sweep: configs that differ only in noise share one program."""

  def _cfgs(self, **kw):
    return [_cfg(noise_multiplier=0.0, **kw), _cfg(noise_multiplier=0.8, **kw),
            _cfg(noise_multiplier=None, target_epsilon=3.0, **kw)]

  def test_each_model_equals_train_one_with_its_config(self):
    x, y = _data()
    keep = jax.random.bernoulli(jax.random.key(1), 0.7, (6, 24))
    idx = np.array([0, 1, 2, 2, 1, 0])
    for model in (models.logistic_regression(4, l2=0.01),
                  models.mlp(4, hidden=(5,), num_classes=2)):
      cfgs = self._cfgs(l2_clip_norm=0.7)
      out = dpsgd.train_sweep(jax.random.key(2), x, y, keep, cfgs, idx, model,
                              observe_fn=None, per_example_stats=True, progress=False)
      keys = jax.random.split(jax.random.key(2), 6)
      for i in range(6):
        one = dpsgd.train_one(keys[i], x, y, keep[i], cfgs[idx[i]], model,
                              per_example_stats=True)
        _assert_trees_close(jax.tree.map(lambda a, i=i: a[i], out.params), one.params)
        np.testing.assert_array_equal(out.stats["times_sampled"][i],
                                      one.stats["times_sampled"])

  def test_a_sigma_sweep_compiles_once(self):
    x, y = _data()
    keep = jnp.ones((3, 24), bool)
    model = models.logistic_regression(4)
    before = dpsgd._compiled.cache_info().misses
    for sigma in (0.3, 0.9, 2.7):   # all > 0: the same program
      dpsgd.train_many(jax.random.key(0), x, y, keep, _cfg(noise_multiplier=sigma,
                                                          num_steps=7), model, progress=False)
    self.assertEqual(dpsgd._compiled.cache_info().misses - before, 1)

  def test_noise_std_scales_with_sigma(self):
    # One step from w = 0 on records x = 0 (every gradient is 0): the update is
    # lr * noise / B, so sigma = 0 models stay at exactly 0 and sigma = 2 models
    # spread with std lr * sigma * C / B per coordinate.
    x = jnp.zeros((24, 4))
    y = jnp.zeros((24,), jnp.int32)
    m = 4000
    cfgs = [_cfg(noise_multiplier=s, num_steps=1, sampling_prob=1.0, l2_clip_norm=0.5)
            for s in (0.0, 2.0)]
    idx = np.repeat([0, 1], m // 2)
    out = dpsgd.train_sweep(jax.random.key(5), x, y, jnp.ones((m, 24), bool), cfgs, idx,
                            models.logistic_regression(4), progress=False)
    w = np.asarray(out.params["w"])
    np.testing.assert_array_equal(w[: m // 2], 0.0)
    want = 0.5 * 2.0 * 0.5 / 24.0           # lr * sigma * C / B
    sd = w[m // 2:].std()
    # 8000 draws: the sample sd is within 4 % of the truth with prob > 0.999.
    self.assertAlmostEqual(sd / want, 1.0, delta=0.04)

  def test_bad_inputs(self):
    x, y = _data()
    keep = jnp.ones((2, 24), bool)
    model = models.logistic_regression(4)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep,
                        [_cfg(), _cfg(sampling_prob=0.5)], [0, 1], model)
    with self.assertRaisesRegex(ValueError, "config_index_M"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep, [_cfg()], [0], model)
    with self.assertRaisesRegex(ValueError, "config_index_M"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep, [_cfg()], [0, 1], model)
    with self.assertRaisesRegex(ValueError, "DpSgdConfig"):
      dpsgd.train_sweep(jax.random.key(0), x, y, keep, [], [0, 0], model)


class RandomStreamTest(parameterized.TestCase):
  """The unrolled threefry samplers reproduce jax's streams bit for bit."""

  def test_threefry_known_answers(self):
    # Random123's known-answer vectors for Threefry-2x32-20.
    u = np.uint32
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for key, ctr, want in cases:
      got = dpsgd.threefry2x32(u(key[0]), u(key[1]), u(ctr[0]), u(ctr[1]))
      self.assertEqual([int(v) for v in got], list(want))

  def test_threefry_equals_jax_primitive(self):
    k0, k1 = jax.random.key_data(jax.random.key(11))
    x = jax.random.bits(jax.random.key(12), (2, 1000), jnp.uint32)
    ours = dpsgd.threefry2x32(k0, k1, x[0], x[1])
    ref = jax.extend.random.threefry_2x32((k0, k1), x.reshape(-1)).reshape(2, 1000)
    np.testing.assert_array_equal(np.stack(ours), ref)

  def test_fold_in_and_split_equal_jax(self):
    for seed in (0, 7):
      k = jax.random.key(seed)
      for t in (0, 1, 499, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1):
        np.testing.assert_array_equal(jax.random.key_data(dpsgd.fold_in(k, t)),
                                      jax.random.key_data(jax.random.fold_in(k, t)))
        if t < 2 ** 31:
          f = jax.jit(lambda kk, tt: jax.random.key_data(dpsgd.fold_in(kk, tt)))
          np.testing.assert_array_equal(f(k, jnp.int32(t)),
                                        jax.random.key_data(jax.random.fold_in(k, t)))
      with self.assertRaises(OverflowError):  # as jax.random.fold_in
        dpsgd.fold_in(k, -1)
      for num in (1, 2, 5):
        np.testing.assert_array_equal(jax.random.key_data(dpsgd.split(k, num)),
                                      jax.random.key_data(jax.random.split(k, num)))

  @parameterized.parameters(1, 2, 3, 56, 75, 150, 151)
  def test_samplers_consume_random_bits(self, n):
    keys = jax.random.split(jax.random.key(n), 3)
    for k in keys:
      bits = dpsgd.random_bits(k, n)
      np.testing.assert_array_equal(
          bits, jax.extend.random.threefry_2x32(tuple(jax.random.key_data(k)),
                                                jnp.arange(n, dtype=jnp.uint32)))
      f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
      u = jnp.maximum(np.nextafter(np.float32(-1), np.float32(0)), 2.0 * f - 1.0)
      want = np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)
      np.testing.assert_array_equal(dpsgd.standard_normal(k, (n,)), want)
      for q in (0.01, 0.2):
        w = dpsgd.mask_bit_width(q)
        words = dpsgd.random_bits(k, (n + 1) // 2 if w == 16 else n)
        if w == 16:
          words = jnp.concatenate([words >> 16, words & 0xFFFF])
        want_mask = words[:n] < dpsgd.bernoulli_threshold(q, w)
        np.testing.assert_array_equal(dpsgd.poisson_mask(k, q, n), want_mask)
    # Under jit + vmap (the engine's setting) too.
    vm = jax.jit(jax.vmap(lambda kk: (dpsgd.poisson_mask(kk, 0.2, n),
                                      dpsgd.standard_normal(kk, (n,)))))(keys)
    for i, k in enumerate(keys):
      np.testing.assert_array_equal(vm[0][i], dpsgd.poisson_mask(k, 0.2, n))
      np.testing.assert_array_equal(vm[1][i], dpsgd.standard_normal(k, (n,)))

  def test_normal_bits_survive_float_packing(self):
    # standard_normal carries raw words as float32 bit patterns (NaNs included:
    # ~1/256 of words); any canonicalisation would change the samples.
    k = jax.random.key(21)
    n = 100_001
    bits = dpsgd.random_bits(k, n)
    self.assertGreater(int(jnp.sum(((bits >> 23) & 0xFF) == 0xFF)), 100)
    f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
    u = jnp.maximum(np.nextafter(np.float32(-1), np.float32(0)), 2.0 * f - 1.0)
    want = np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)
    got = jax.jit(jax.vmap(lambda kk: dpsgd.standard_normal(kk, (n,))))(k[None])[0]
    np.testing.assert_array_equal(got, want)

  def test_normal_shape_and_non_threefry_keys(self):
    z = dpsgd.standard_normal(jax.random.key(0), (3, 4))
    self.assertEqual(z.shape, (3, 4))
    np.testing.assert_array_equal(z.reshape(-1), dpsgd.standard_normal(jax.random.key(0), (12,)))
    kr = jax.random.key(0, impl="rbg")
    self.assertEqual(dpsgd.standard_normal(kr, (5,)).shape, (5,))
    self.assertEqual(dpsgd.poisson_mask(kr, 0.3, 7).shape, (7,))
    self.assertEqual(dpsgd.split(kr, 3).shape, (3,))
    self.assertEqual(dpsgd.fold_in(kr, 2).shape, ())


class VectorisationTest(parameterized.TestCase):

  def test_vmap_equals_single_model(self):
    x, y = _data()
    model = models.logistic_regression(4, l2=0.01)
    keep = jax.random.bernoulli(jax.random.key(3), 0.6, (4, 24))
    cfg = _cfg(num_steps=8, momentum=0.5)
    many = dpsgd.train_many(jax.random.key(9), x, y, keep, cfg, model,
                            observe_fn=_identity, per_example_stats=True, progress=False)
    keys = jax.random.split(jax.random.key(9), 4)
    for i in range(4):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model,
                            observe_fn=_identity, per_example_stats=True)
      _assert_trees_close(jax.tree.map(lambda a, i=i: a[i], many.params), one.params)
      np.testing.assert_allclose(many.observations[i], one.observations, rtol=1e-5, atol=1e-7)
      np.testing.assert_array_equal(many.stats["times_sampled"][i], one.stats["times_sampled"])

  def test_large_chunk_unrolled_scan_equals_single_model(self):
    # Chunks of >= 256 small models run the scan unrolled (a performance knob);
    # model i must still equal model i trained alone (no unrolling), canary included.
    x, y = _data()
    model = models.logistic_regression(4)
    m = dpsgd._UNROLL_MIN_MODELS + 1
    keep = jax.random.bernoulli(jax.random.key(4), 0.6, (m, 24))
    ck = jax.random.bernoulli(jax.random.key(5), 0.5, (m,))
    cfg = _cfg(num_steps=10)  # not a multiple of the unroll factor
    canary = {"w": jnp.array([0.0, 0.0, 0.0, 3.0])}
    many = dpsgd.train_many(jax.random.key(8), x, y, keep, cfg, model, observe_fn=_identity,
                            gradient_canary=canary, canary_keep_M=ck, progress=False)
    keys = jax.random.split(jax.random.key(8), m)
    for i in (0, 7, m - 1):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model, observe_fn=_identity,
                            gradient_canary=canary, canary_keep=bool(ck[i]))
      _assert_trees_close(jax.tree.map(lambda a, i=i: a[i], many.params), one.params)
      np.testing.assert_allclose(many.observations[i], one.observations, rtol=1e-5, atol=1e-7)

  def test_chunking_does_not_change_results(self):
    x, y = _data()
    model = models.logistic_regression(4)
    keep = jnp.ones((5, 24), bool)
    cfg = _cfg()
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, progress=False)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, max_chunk=2,
                         progress=False)
    _assert_trees_close(a.params, b.params)

  def test_memory_budget_chunks(self):
    x, y = _data()
    model = models.logistic_regression(4)
    keep = jnp.ones((5, 24), bool)
    a = dpsgd.train_many(jax.random.key(0), x, y, keep, _cfg(), model, progress=False)
    b = dpsgd.train_many(jax.random.key(0), x, y, keep, _cfg(), model, progress=False,
                         memory_budget_bytes=1)   # forces one model per chunk
    _assert_trees_close(a.params, b.params)

  def test_jit_equals_eager(self):
    x, y = _data()
    model = models.mlp(4, hidden=(3,), num_classes=1)
    cfg = _cfg(num_steps=2)
    keep = jnp.ones((24,), bool)
    jitted = dpsgd.train_one(jax.random.key(4), x, y, keep, cfg, model)
    with jax.disable_jit():
      eager = dpsgd.train_one(jax.random.key(4), x, y, keep, cfg, model)
    _assert_trees_close(jitted.params, eager.params, rtol=1e-4, atol=1e-5)

  def test_optax_optimiser_composes(self):
    x, y = _data()
    model = models.logistic_regression(4)
    cfg = _cfg(noise_multiplier=0.0, sampling_prob=1.0, num_steps=1)
    adam = optax.adam(0.1)
    out = dpsgd.train_one(jax.random.key(0), x, y, jnp.ones((24,), bool), cfg, model,
                          optimizer=adam)
    s, _ = dpsgd.glm_clipped_grad_sum(0.0, {"w": jnp.zeros(4)}, x, y, jnp.ones(24), 1.0)
    # Adam's first step is -lr * sign(g) (up to eps).
    np.testing.assert_allclose(out.params["w"], -0.1 * np.sign(s["w"]), rtol=1e-4)


class CanaryAndFaultsTest(parameterized.TestCase):

  def test_gradient_canary_added_clipped(self):
    x, y = _data()
    model = models.logistic_regression(4)
    cfg = _cfg(sampling_prob=1.0, noise_multiplier=0.0, num_steps=1, l2_clip_norm=1.0)
    canary = {"w": jnp.array([3.0, 0.0, 4.0, 0.0])}     # norm 5 -> clipped to 1
    keep = jnp.ones((2, 24), bool)
    out = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                           gradient_canary=canary, canary_keep_M=jnp.array([True, False]),
                           observe_fn=_identity, progress=False)
    diff = (out.observations[0, 0] - out.observations[1, 0]) * cfg.expected_batch_size
    np.testing.assert_allclose(diff, [0.6, 0.0, 0.8, 0.0], atol=1e-5)

  def test_canary_sampled_at_rate_q(self):
    x = jnp.zeros((10, 2))
    y = jnp.zeros((10,), jnp.int32)
    cfg = dpsgd.DpSgdConfig(dataset_size=10, sampling_prob=0.3, num_steps=200,
                            noise_multiplier=0.0)
    out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((20, 10), bool), cfg,
                           models.logistic_regression(2),
                           gradient_canary={"w": jnp.array([1.0, 0.0])},
                           canary_keep_M=jnp.ones((20,), bool), observe_fn=_identity,
                           progress=False)
    rate = float(jnp.mean(out.observations[:, :, 0] > 0))
    self.assertAlmostEqual(rate, 0.3, delta=4 * math.sqrt(0.21 / 4000))

  def _one_step(self, faults, sigma=0.0, c=1.0, keep_n=12):
    x, y = _data()
    model = models.logistic_regression(4)
    keep = jnp.arange(24)[None, :] < keep_n
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.FaultyDpSgdWarning)
      cfg = _cfg(sampling_prob=1.0, noise_multiplier=sigma, num_steps=1, l2_clip_norm=c,
                 faults=faults)
    out = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, observe_fn=_identity,
                           progress=False)
    wts = keep[0].astype(jnp.float32)
    return np.asarray(out.observations[0, 0]), x, y, wts, model

  def test_fault_realised_denominator(self):
    got, x, y, wts, model = self._one_step(dpsgd.Faults(realised_batch_denominator=True))
    s, _ = dpsgd.clipped_grad_sum(model, {"w": jnp.zeros(4)}, x, y, wts, 1.0)
    np.testing.assert_allclose(got, s["w"] / 12.0, rtol=1e-5)

  def test_fault_clip_batch_mean(self):
    got, x, y, wts, model = self._one_step(dpsgd.Faults(clip_batch_mean=True), c=0.05)
    s, _ = dpsgd.clipped_grad_sum(model, {"w": jnp.zeros(4)}, x, y, wts, math.inf)
    mean = np.asarray(s["w"]) / 12.0
    want = 12.0 * mean * min(1.0, 0.05 / np.linalg.norm(mean)) / 24.0
    np.testing.assert_allclose(got, want, rtol=1e-5)
    correct, *_ = self._one_step(dpsgd.Faults(), c=0.05)
    self.assertGreater(np.abs(got - correct).max(), 1e-4)

  @parameterized.named_parameters(
      ("correct", dpsgd.Faults(), 2.0 * 4.0 / 7.2),
      ("noise_without_clip_norm", dpsgd.Faults(noise_without_clip_norm=True), 2.0 / 7.2),
      ("noise_on_mean", dpsgd.Faults(noise_on_mean=True), 2.0 * 4.0),
  )
  def test_noise_faults(self, faults, want_std):
    x = jnp.zeros((24, 3))
    y = jnp.zeros((24,), jnp.int32)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.FaultyDpSgdWarning)
      cfg = _cfg(noise_multiplier=2.0, l2_clip_norm=4.0, num_steps=4, faults=faults)
    out = dpsgd.train_many(jax.random.key(1), x, y, jnp.ones((100, 24), bool), cfg,
                           models.logistic_regression(3), observe_fn=_identity,
                           progress=False)
    self.assertAlmostEqual(cfg.expected_batch_size, 7.2)
    z = np.asarray(out.observations).ravel() / want_std
    self.assertGreater(stats.kstest(z, "norm").pvalue, 1e-3)

  def test_faults_warn(self):
    with self.assertWarns(dpsgd.FaultyDpSgdWarning):
      _cfg(faults=dpsgd.Faults(noise_on_mean=True))


class ConfigTest(parameterized.TestCase):

  def test_epsilon_is_accountant_of_what_was_used(self):
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    cfg = _cfg(dataset_size=500, sampling_prob=0.1, num_steps=200, noise_multiplier=1.3,
               delta=1e-5)
    self.assertEqual(cfg.epsilon(), accounting.dpsgd_epsilon(1.3, 0.1, 200, 1e-5,
                                                             accountant="rdp"))

  def test_epsilon_passes_fields_to_accountant(self):
    cfg = _cfg(dataset_size=500, sampling_prob=0.07, num_steps=123, noise_multiplier=0.9,
               delta=3e-6, accountant="pld")
    dpsgd._epsilon.cache_clear()
    with mock.patch("dpjax.accounting.dpsgd_epsilon", return_value=4.2) as m:
      self.assertEqual(cfg.epsilon(), 4.2)
    m.assert_called_once_with(0.9, 0.07, 123, 3e-6, accountant="pld", dataset_size=500)
    dpsgd._epsilon.cache_clear()

  def test_target_epsilon_calibrates(self):
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    cfg = _cfg(dataset_size=500, sampling_prob=0.1, num_steps=200, noise_multiplier=None,
               target_epsilon=1.0)
    self.assertEqual(cfg.sigma, accounting.calibrate_noise(1.0, 0.1, 200, 1e-5,
                                                           accountant="rdp"))
    self.assertLessEqual(cfg.epsilon(), 1.0 + 1e-9)
    self.assertGreater(cfg.epsilon(), 0.99)

  def test_sigma_zero_is_infinite_epsilon(self):
    self.assertEqual(_cfg(noise_multiplier=0.0).epsilon(), math.inf)

  def test_expected_batch_size(self):
    self.assertAlmostEqual(_cfg(dataset_size=150, sampling_prob=0.2).expected_batch_size, 30.0)

  def test_shuffle_warns(self):
    with self.assertWarns(dpsgd.UnaccountedSamplingWarning):
      cfg = _cfg(sampler="shuffle")
    with self.assertWarns(dpsgd.UnaccountedSamplingWarning):
      cfg.epsilon()

  def test_shuffle_fixed_batches(self):
    x, y = _data()
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.UnaccountedSamplingWarning)
      cfg = _cfg(sampler="shuffle", sampling_prob=0.25, num_steps=8)
    out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((3, 24), bool), cfg,
                           models.logistic_regression(4), per_example_stats=True,
                           progress=False)
    # 4 batches of 6 per epoch, 2 epochs: every record exactly twice.
    np.testing.assert_array_equal(out.stats["times_sampled"], 2.0 * np.ones((3, 24)))

  @parameterized.named_parameters(
      ("n", dict(dataset_size=0)),
      ("q_zero", dict(sampling_prob=0.0)),
      ("q_big", dict(sampling_prob=1.5)),
      ("steps", dict(num_steps=0)),
      ("clip", dict(l2_clip_norm=0.0)),
      ("sigma_neg", dict(noise_multiplier=-1.0)),
      ("both", dict(noise_multiplier=1.0, target_epsilon=1.0)),
      ("neither", dict(noise_multiplier=None)),
      ("eps", dict(noise_multiplier=None, target_epsilon=-1.0)),
      ("inf_clip_noise", dict(l2_clip_norm=math.inf, noise_multiplier=1.0)),
      ("delta", dict(delta=1.0)),
      ("lr", dict(learning_rate=0.0)),
      ("momentum", dict(momentum=1.0)),
      ("sampler", dict(sampler="fixed")),
      ("accountant", dict(accountant="moments")),
  )
  def test_bad_config_raises(self, kw):
    with self.assertRaises(ValueError):
      _cfg(**kw)

  def test_bad_train_inputs_raise(self):
    x, y = _data()
    model = models.logistic_regression(4)
    with self.assertRaisesRegex(ValueError, "keep_MxN"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 23), bool), _cfg(), model)
    with self.assertRaisesRegex(ValueError, "y_N"):
      dpsgd.train_many(jax.random.key(0), x, y[:3], jnp.ones((2, 24), bool), _cfg(), model)
    with self.assertRaisesRegex(ValueError, "NaN"):
      dpsgd.train_many(jax.random.key(0), x.at[0, 0].set(jnp.nan), y,
                       jnp.ones((2, 24), bool), _cfg(), model)
    with self.assertRaisesRegex(ValueError, "canary_keep_M"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), _cfg(), model,
                       gradient_canary={"w": jnp.ones(4)})



class SmallDeltaWarningTest(absltest.TestCase):

  def test_epsilon_warns_when_delta_not_below_one_over_n(self):
    cfg = dpsgd.DpSgdConfig(dataset_size=50, sampling_prob=0.2, num_steps=10,
                            noise_multiplier=1.0, delta=0.1)
    with self.assertWarnsRegex(UserWarning, "1/dataset_size"):
      cfg.epsilon()


if __name__ == "__main__":
  absltest.main()
