"""Tests for dpjax.clipping.ghost: ghost clipping equals the generic vmap(grad) clipped sum."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import dpsgd
from dpjax import models
from dpjax.clipping import ghost
from dpjax.clipping import vmap

_B = 9
_WEIGHTS = np.array([1, 0, 1, 1, 1, 0, 1, 1, 1], np.float32)

# (name, model, input shape per example, ghost kwargs)
_CASES = (
    ("mlp", models.mlp(12, (16, 8), 10), (12,), {}),
    ("mlp_binary_l2", models.mlp(5, (7,), 1, l2=0.3), (5,), {}),
    ("mlp_no_hidden", models.mlp(6, (), 4), (6,), {}),
    ("cnn_digits", models.cnn((8, 8, 1)), (64,), {}),
    ("cnn_gram", models.cnn((8, 8, 1), (4, 6)), (64,), {"conv_mode": "gram"}),
    ("cnn_materialise", models.cnn((8, 8, 1), (4, 6)), (64,), {"conv_mode": "materialise"}),
)
# Under -m slow (about 20 s each; the CNN cases above keep the default equality check).
_SLOW_CASES = (
    ("cnn_nhwc_l2_rect", models.cnn((6, 4, 2), (3, 5), 3, l2=0.2), (6, 4, 2),
     {"input_shape": (6, 4, 2)}),
    ("cnn_binary_nhwc", models.cnn((4, 4, 3), (2,), 1), (4, 4, 3), {}),
)


def _data(model, shape, seed=0):
  kx, ky, kp = jax.random.split(jax.random.key(seed), 3)
  x = jax.random.uniform(kx, (_B,) + shape, jnp.float32, -1.0, 2.0)
  y = jax.random.randint(ky, (_B,), 0, max(2, model.num_outputs))
  params = model.init(kp)
  # Non-zero biases, so that the bias terms of the norms are exercised.
  params = jax.tree.map(lambda p: p + 0.05 * jnp.arange(p.size, dtype=p.dtype).reshape(p.shape)
                        / p.size, params)
  return params, x, y


def _assert_trees_close(test, a, b, rtol, atol):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    test.assertEqual(u.shape, v.shape)
    np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


class GhostTest(parameterized.TestCase):

  @parameterized.named_parameters((name, model, shape, kw) for name, model, shape, kw in _CASES)
  def test_equals_vmap_grad(self, model, shape, kw):
    self._check_equals_vmap_grad(model, shape, kw)

  @parameterized.named_parameters(
      (name, model, shape, kw) for name, model, shape, kw in _SLOW_CASES)
  @pytest.mark.slow
  def test_equals_vmap_grad_more_layouts(self, model, shape, kw):
    self._check_equals_vmap_grad(model, shape, kw)

  def _check_equals_vmap_grad(self, model, shape, kw):
    params, x, y = _data(model, shape)
    # Oracle: the engine's generic per-example gradients, vmap(grad), clipped by hand.
    g_B = jax.jit(vmap.per_example_grads, static_argnums=0)(model, params, x, y)
    want_norms = np.sqrt(sum(np.sum(np.square(np.asarray(v, np.float64)).reshape(_B, -1), axis=1)
                             for v in jax.tree.leaves(g_B)))
    fn = jax.jit(ghost.clipped_sum_fn(model, **kw))
    for clip in (0.05, 1.0, math.inf):
      got, norms = fn(params, x, y, _WEIGHTS, jnp.float32(clip))  # C traced: one compile
      np.testing.assert_allclose(norms, want_norms, rtol=2e-5)
      factor = _WEIGHTS * np.minimum(1.0, clip / want_norms)
      want = jax.tree.map(lambda v: np.tensordot(factor, np.asarray(v, np.float64), axes=1), g_B)
      scale = max(float(np.max(np.abs(v))) for v in jax.tree.leaves(want))
      _assert_trees_close(self, got, want, rtol=1e-4, atol=1e-5 * scale)

  def test_matches_engine_generic_clipped_sum(self):
    model = models.cnn((8, 8, 1), (4, 6))
    params, x, y = _data(model, (64,), seed=4)
    want, want_norms = jax.jit(vmap.clipped_grad_sum, static_argnums=(0, 5))(
        model, params, x, y, _WEIGHTS, 0.3)
    got, norms = jax.jit(ghost.clipped_sum_fn(model), static_argnums=4)(
        params, x, y, _WEIGHTS, 0.3)
    np.testing.assert_allclose(norms, want_norms, rtol=2e-5)
    _assert_trees_close(self, got, want, rtol=1e-4, atol=1e-6)

  def test_clipping_bounds_each_contribution(self):
    # Property: with a one-hot weight vector the sum is one clipped gradient, norm <= C.
    model = models.cnn((8, 8, 1), (4, 6))
    params, x, y = _data(model, (64,), seed=1)
    fn = jax.jit(ghost.clipped_sum_fn(model))
    _, norms = fn(params, x, y, np.ones(_B, np.float32), jnp.float32(math.inf))
    clip = float(np.median(norms))  # about half the examples get clipped
    for b in range(_B):
      g, _ = fn(params, x, y, np.eye(_B, dtype=np.float32)[b], jnp.float32(clip))
      n = math.sqrt(sum(float(jnp.sum(v * v)) for v in jax.tree.leaves(g)))
      self.assertLessEqual(n, clip * (1 + 1e-5))
      np.testing.assert_allclose(n, min(clip, float(norms[b])), rtol=1e-4)

  def test_vmap_over_models_equals_loop(self):
    model = models.mlp(12, (16, 8), 10)
    _, x, y = _data(model, (12,))
    params_M = jax.vmap(model.init)(jax.random.split(jax.random.key(5), 3))
    fn = ghost.clipped_sum_fn(model)
    got, norms = jax.jit(jax.vmap(fn, in_axes=(0, None, None, None, None)))(
        params_M, x, y, _WEIGHTS, 0.5)
    jfn = jax.jit(fn)
    for i in range(3):
      p_i = jax.tree.map(lambda a: a[i], params_M)
      want, want_n = jfn(p_i, x, y, _WEIGHTS, 0.5)
      np.testing.assert_allclose(norms[i], want_n, rtol=1e-5)
      _assert_trees_close(self, jax.tree.map(lambda a: a[i], got), want, rtol=1e-5, atol=1e-7)

  @pytest.mark.slow  # an engine compile (~30 s); ghost equals vmap(grad) above, and the
  # engine's generic path is checked against the same oracle in sqnorm_test
  def test_train_one_with_ghost_equals_vmap_grad_mlp(self):
    self._check_train_one(models.mlp(16, (8,), 10))

  @pytest.mark.slow  # one more engine compile (~10 s); CNN equality is covered above
  def test_train_one_with_ghost_equals_vmap_grad_cnn(self):
    self._check_train_one(models.cnn((4, 4, 1), (3,)))

  @pytest.mark.slow  # about 20 s; the CNN equalities above stay
  def test_cnn_input_shape_comes_from_the_model(self):
    # A non-square CNN with flat inputs: the shape is the model's, not a square guess.
    model = models.cnn((6, 4, 2), (3,), 3)
    self.assertEqual(model.input_shape, (6, 4, 2))
    params, x, y = _data(model, (48,))
    got, got_n = ghost.clipped_sum_fn(model)(params, x, y, _WEIGHTS, 0.5)
    want, want_n = vmap.clipped_grad_sum(model, params, x, y, _WEIGHTS, 0.5)
    np.testing.assert_allclose(got_n, want_n, rtol=1e-5)
    _assert_trees_close(self, got, want, rtol=1e-5, atol=1e-7)

  def _check_train_one(self, model):
    kx, ky = jax.random.split(jax.random.key(2))
    x = jax.random.uniform(kx, (20, 16))
    y = jax.random.randint(ky, (20,), 0, 10)
    cfg = dpsgd.DpSgdConfig(dataset_size=20, sampling_prob=0.25, num_steps=4,
                            noise_multiplier=1.0, l2_clip_norm=0.5, learning_rate=0.3)
    keep = jnp.ones((20,), bool)
    want = dpsgd.train_one(jax.random.key(3), x, y, keep, cfg, model, per_example_stats=True,
                           clipping=functools.partial(vmap.clipped_grad_sum, model))
    got = dpsgd.train_one(jax.random.key(3), x, y, keep, cfg, model, per_example_stats=True,
                          clipping=ghost.clipped_sum_fn(model))
    _assert_trees_close(self, got.params, want.params, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.stats["norm_sum"], want.stats["norm_sum"], rtol=1e-4)
    np.testing.assert_array_equal(got.stats["times_sampled"], want.stats["times_sampled"])

  def test_memoised(self):
    m = models.cnn((8, 8, 1))
    self.assertIs(ghost.clipped_sum_fn(m), ghost.clipped_sum_fn(m))
    self.assertIs(ghost.clipped_sum_fn(m, [8, 8, 1]), ghost.clipped_sum_fn(m, (8, 8, 1)))
    self.assertIsNot(ghost.clipped_sum_fn(m), ghost.clipped_sum_fn(m, conv_mode="gram"))

  def test_auto_mode_picks_the_cheaper_formula(self):
    # 8x8 digits, 3x3 conv 1 -> 16: P*K*O = 64*9*16 < P^2*(K+O) = 64^2*25.
    self.assertEqual(ghost._conv_mode("auto", 64, 9, 16), "materialise")
    # A long "sequence" of tiny patches with wide channels: the Gram form is cheaper.
    self.assertEqual(ghost._conv_mode("auto", 4, 512, 512), "gram")

  def test_bad_inputs(self):
    model = models.mlp(4, (3,), 2)
    params = model.init(jax.random.key(0))
    x, y, w = jnp.ones((3, 4)), jnp.zeros((3,), jnp.int32), jnp.ones((3,))
    with self.assertRaisesRegex(ValueError, "model.kind"):
      ghost.clipped_sum_fn(models.logistic_regression(3))
    with self.assertRaisesRegex(ValueError, "l2_clip_norm"):
      ghost.mlp_clipped_sum(params, x, y, w, 0.0)
    with self.assertRaisesRegex(ValueError, "weights_B"):
      ghost.mlp_clipped_sum(params, x, y, jnp.ones((2,)), 1.0)
    with self.assertRaisesRegex(ValueError, "l2"):
      ghost.mlp_clipped_sum(params, x, y, w, 1.0, l2=-1.0)
    with self.assertRaisesRegex(ValueError, "conv_mode"):
      ghost.cnn_clipped_sum_fn((8, 8, 1), conv_mode="fast")
    with self.assertRaisesRegex(ValueError, "input_shape"):
      ghost.cnn_clipped_sum_fn((8, 8))
    cnn = models.cnn((6, 4, 1), (2,))
    cparams = cnn.init(jax.random.key(0))
    # A "cnn" Model that does not record its input shape: the square guess fails.
    bare = models.Model(cnn.init, cnn.apply, 0.0, "cnn", 2)
    with self.assertRaisesRegex(ValueError, "input_shape"):
      ghost.clipped_sum_fn(bare)(cparams, jnp.ones((3, 24)), y, w, 1.0)  # 24 is not square
    with self.assertRaisesRegex(ValueError, "x_BxF"):
      ghost.cnn_clipped_sum_fn((6, 4, 1))(cparams, jnp.ones((3, 23)), y, w, 1.0)


class GhostBranchTest(parameterized.TestCase):
  """branch=True (the padded step's buffers) against the one-program guarded pass."""

  @parameterized.named_parameters((name, model, shape, kw) for name, model, shape, kw in _CASES
                                  if name in ("mlp", "mlp_binary_l2", "cnn_gram",
                                              "cnn_materialise"))
  def test_branch_equals_guarded_pass(self, model, shape, kw):
    params, x, y = _data(model, shape, seed=2)
    guarded = jax.jit(ghost.clipped_sum_fn(model, **kw))
    branched = jax.jit(ghost.clipped_sum_fn(model, branch=True, **kw))
    for clip in (0.05, math.inf):
      want, want_n = guarded(params, x, y, _WEIGHTS, jnp.float32(clip))
      got, got_n = branched(params, x, y, _WEIGHTS, jnp.float32(clip))
      np.testing.assert_allclose(got_n, want_n, rtol=1e-6)
      _assert_trees_close(self, got, want, rtol=1e-5, atol=1e-7)

  def test_one_models_overflow_takes_the_guarded_branch_for_the_batch(self):
    # Model 1 sees a record with a norm beyond float32 (1e30 feature): the whole vmapped
    # batch runs the guarded sum, and each model still equals its own unbatched result.
    model = models.mlp(12, (16, 8), 10)
    params, x, y = _data(model, (12,))
    x_M = np.stack([np.asarray(x)] * 3)
    x_M[1, 2, 0] = 1e30
    fn = ghost.clipped_sum_fn(model, branch=True)
    vfn = jax.jit(jax.vmap(fn, in_axes=(None, 0, None, None, None)))
    self.assertIn("cond[", str(jax.make_jaxpr(vfn)(params, x_M, y, _WEIGHTS, 0.5)))
    got, norms = vfn(params, x_M, y, _WEIGHTS, 0.5)
    self.assertTrue(1e29 < float(norms[1, 2]) < np.inf)
    for i in range(3):
      want, want_n = jax.jit(ghost.clipped_sum_fn(model))(params, x_M[i], y, _WEIGHTS, 0.5)
      np.testing.assert_allclose(norms[i], want_n, rtol=1e-6)
      _assert_trees_close(self, jax.tree.map(lambda a: a[i], got), want, rtol=1e-5, atol=1e-7)


class GhostFloatLimitsTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_overflowing_activations_are_dropped_not_nan(self, branch):
    # 3.4e38 inputs overflow the hidden activations to inf: that record's gradient is
    # not finite, its norm is inf, and it adds exactly zero, sampled or not; a record
    # whose norm is finite but beyond 1.8e19 (1e30 input) is clipped to C.
    model = models.mlp(3, hidden=(5,), num_classes=3)
    params = model.init(jax.random.key(4))
    f32_max = float(np.finfo(np.float32).max)
    x = jnp.array([[f32_max, f32_max, f32_max], [0.3, 1e30, -0.1], [1.0, -2.0, 0.5],
                   [0.2, 0.1, 0.0]])
    y = jnp.array([0, 2, 1, 2])
    fn = ghost.clipped_sum_fn(model, branch=branch)
    for wts in (jnp.ones(4), jnp.array([0.0, 1.0, 1.0, 1.0])):
      s, norms = fn(params, x, y, wts, 1.0)
      s_ref, norms_ref = vmap.clipped_grad_sum(model, params, x, y, wts, 1.0)
      self.assertTrue(all(np.all(np.isfinite(v)) for v in jax.tree.leaves(s)))
      np.testing.assert_allclose(norms, norms_ref, rtol=1e-5)
      for u, v in zip(jax.tree.leaves(s), jax.tree.leaves(s_ref)):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-6)
    self.assertEqual(float(norms[0]), np.inf)
    self.assertTrue(1e29 < float(norms[1]) < np.inf)


if __name__ == "__main__":
  absltest.main()
