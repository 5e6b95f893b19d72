"""Tests for dpjax.models: shapes, losses against closed forms, validation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import models


class ModelsTest(parameterized.TestCase):

  def test_logistic_regression_loss_closed_form(self):
    model = models.logistic_regression(4, l2=0.3)
    w = jnp.array([0.5, -1.0, 2.0, 0.1])
    x = jax.random.normal(jax.random.key(0), (6, 4))
    y = jnp.array([0, 1, 1, 0, 1, 0])
    got = models.per_example_loss(model, {"w": w}, x, y)
    z = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    p = 1.0 / (1.0 + np.exp(-z))
    want = -(np.asarray(y) * np.log(p) + (1 - np.asarray(y)) * np.log(1 - p))
    want = want + 0.5 * 0.3 * np.sum(np.asarray(w, np.float64) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-5)

  def test_logistic_loss_derivatives_are_exact(self):
    # Value, dz, dy and d2z of the custom-JVP logistic loss against float64 closed
    # forms, including |z| where a naive log(1 + exp(z)) overflows.
    z = jnp.array([-120.0, -20.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0, 120.0], jnp.float32)
    y = jnp.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0], jnp.float32)
    z64, y64 = np.asarray(z, np.float64), np.asarray(y, np.float64)
    sig = 0.5 * (1.0 + np.tanh(0.5 * z64))
    value = np.logaddexp(0.0, z64) - y64 * z64
    np.testing.assert_allclose(models.logistic_loss(z, y), value, rtol=1e-6, atol=1e-6)
    dz = jax.vmap(jax.grad(models.logistic_loss, argnums=0))(z, y)
    np.testing.assert_allclose(dz, sig - y64, rtol=1e-6, atol=1e-7)
    dy = jax.vmap(jax.grad(models.logistic_loss, argnums=1))(z, y)
    np.testing.assert_allclose(dy, -z64, rtol=1e-6)
    d2 = jax.vmap(jax.grad(jax.grad(models.logistic_loss)))(z, y)
    np.testing.assert_allclose(d2, sig * (1.0 - sig), rtol=1e-5, atol=1e-12)
    self.assertTrue(np.all(np.isfinite(dz)) and np.all(np.isfinite(d2)))

  def test_logistic_loss_grad_at_least_as_accurate_as_softplus_autodiff(self):
    # Against the float64 derivative sigmoid(z) - y, the custom rule's error is no
    # larger than that of autodiff through softplus(z) - y z (what jax derives
    # without it; measured: 8e-8 vs 5e-7 max absolute error here).
    z = jax.random.normal(jax.random.key(2), (1000,)) * 6.0
    y = jax.random.bernoulli(jax.random.key(3), 0.5, (1000,)).astype(jnp.float32)
    ours = jax.grad(lambda u: jnp.sum(models.logistic_loss(u, y)))(z)
    plain = jax.grad(lambda u: jnp.sum(jax.nn.softplus(u) - y * u))(z)
    z64 = np.asarray(z, np.float64)
    truth = 0.5 * (1.0 + np.tanh(0.5 * z64)) - np.asarray(y, np.float64)
    err_ours = np.max(np.abs(np.asarray(ours, np.float64) - truth))
    err_plain = np.max(np.abs(np.asarray(plain, np.float64) - truth))
    self.assertLessEqual(err_ours, 1.2e-7)
    self.assertLessEqual(err_ours, err_plain)

  def test_logistic_regression_zero_init(self):
    params = models.logistic_regression(7).init(jax.random.key(3))
    np.testing.assert_array_equal(params["w"], np.zeros(7))

  def test_softmax_cross_entropy(self):
    model = models.mlp(5, hidden=(8,), num_classes=3)
    params = model.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (4, 5))
    y = jnp.array([0, 2, 1, 2])
    logits = np.asarray(model.apply(params, x), np.float64)
    lse = np.log(np.sum(np.exp(logits), axis=1))
    want = lse - logits[np.arange(4), np.asarray(y)]
    np.testing.assert_allclose(models.per_example_loss(model, params, x, y), want, rtol=1e-5)

  def test_mlp_shapes(self):
    model = models.mlp(64, hidden=(32, 16), num_classes=10)
    params = model.init(jax.random.key(0))
    self.assertEqual([l["w"].shape for l in params["layers"]], [(64, 32), (32, 16), (16, 10)])
    self.assertEqual(model.apply(params, jnp.ones((3, 64))).shape, (3, 10))

  def test_cnn_flat_equals_nhwc(self):
    model = models.cnn((8, 8, 1), channels=(4, 8), num_classes=10)
    params = model.init(jax.random.key(0))
    self.assertEqual(params["conv"][1]["w"].shape, (3, 3, 4, 8))
    self.assertEqual(params["dense"][0]["w"].shape, (2 * 2 * 8, 10))
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 1))
    np.testing.assert_allclose(model.apply(params, x), model.apply(params, x.reshape(2, 64)),
                               rtol=1e-6)
    self.assertEqual(model.apply(params, x).shape, (2, 10))

  def test_factories_are_memoised(self):
    self.assertIs(models.logistic_regression(5), models.logistic_regression(5))
    self.assertIsNot(models.logistic_regression(5), models.logistic_regression(6))

  def test_l2_penalty(self):
    model = models.mlp(3, hidden=(2,), num_classes=2, l2=0.5)
    params = model.init(jax.random.key(0))
    sq = sum(float(jnp.sum(p ** 2)) for p in jax.tree.leaves(params))
    self.assertAlmostEqual(float(models.l2_penalty(model, params)), 0.25 * sq, places=5)

  @parameterized.named_parameters(
      ("lr_features", lambda: models.logistic_regression(0)),
      ("lr_l2", lambda: models.logistic_regression(3, l2=-1.0)),
      ("lr_l2_nan", lambda: models.logistic_regression(3, l2=math.nan)),
      ("mlp_hidden", lambda: models.mlp(3, hidden=(0,))),
      ("mlp_classes", lambda: models.mlp(3, num_classes=0)),
      ("cnn_shape", lambda: models.cnn((8, 8))),
      ("cnn_too_small", lambda: models.cnn((2, 2, 1), channels=(4, 4))),
  )
  def test_bad_arguments_raise(self, make):
    with self.assertRaises(ValueError):
      make()

  def test_loss_shape_mismatch_raises(self):
    model = models.logistic_regression(2)
    with self.assertRaisesRegex(ValueError, "y_B"):
      models.per_example_loss(model, model.init(jax.random.key(0)), jnp.ones((3, 2)),
                              jnp.ones((2,)))

  def test_canary_leaf_is_never_read_and_has_zero_gradient_from_the_loss(self):
    model = models.mlp(4, hidden=(8,), num_classes=3)
    leafy = models.with_canary_leaf(model, 5)
    self.assertIs(leafy, models.with_canary_leaf(model, 5))   # one program per (model, K)
    params = leafy.init(jax.random.key(0))
    np.testing.assert_array_equal(params["canary"], np.zeros(5, np.float32))
    x, y = jnp.ones((2, 4)), jnp.array([0, 2])
    np.testing.assert_array_equal(leafy.apply(params, x), model.apply(params["model"], x))
    g = jax.grad(lambda p: models.per_example_loss(leafy, p, x, y).sum())(params)
    np.testing.assert_array_equal(g["canary"], np.zeros(5, np.float32))
    with self.assertRaisesRegex(ValueError, "size"):
      models.with_canary_leaf(model, 0)

  def test_check_params(self):
    model = models.mlp(3, hidden=(4,), num_classes=2)
    params = model.init(jax.random.key(0))
    self.assertIs(models.check_params(model, params), params)
    wrong_shape = jax.tree.map(lambda v: np.zeros(np.shape(v) + (1,)), params)
    no_leaf = {k: v for k, v in params.items() if k != "layers"} or {"other": 1.0}
    nan_leaf = jax.tree.map(lambda v: np.full(np.shape(v), np.nan), params)
    for bad, pattern in ((wrong_shape, "init_params .*shape"), (no_leaf, "structure"),
                         (nan_leaf, "finite")):
      with self.assertRaisesRegex(ValueError, pattern):
        models.check_params(model, bad, "init_params")
    with self.assertRaises(TypeError):
      models.check_params("mlp", params)


class AccuracyTest(absltest.TestCase):

  def test_correct_predictions_match_numpy_in_both_precisions(self):
    x = np.asarray(jax.random.normal(jax.random.key(1), (50, 3)), np.float32)
    y = (x[:, 0] > 0.1).astype(np.int32)
    w = np.asarray(jax.random.normal(jax.random.key(2), (4, 3)), np.float32)
    model = models.logistic_regression(3)
    want = (x.astype(np.float64) @ w.T.astype(np.float64)).T > 0
    ok64 = models.correct_predictions(model, {"w": w}, x, y, float64=True)
    np.testing.assert_array_equal(ok64, want == (y == 1)[None, :])
    acc64 = models.accuracy(model, {"w": w}, x, y, float64=True)
    self.assertEqual(acc64.dtype, np.float64)
    np.testing.assert_array_equal(acc64, (want == (y == 1)).sum(1) / 50)
    acc32 = models.accuracy(model, {"w": jnp.asarray(w)}, x, y)
    self.assertEqual(acc32.dtype, np.float32)
    np.testing.assert_allclose(acc32, acc64, atol=0.021)   # a float32 sign flip at most

  def test_multiclass_argmax_and_bad_arguments(self):
    model = models.mlp(2, (), 3)
    params = {"layers": [{"w": jnp.eye(2, 3)[None].repeat(2, 0),
                          "b": jnp.array([[0.0, 0.0, 0.5], [0.0, 0.0, -0.5]])}]}
    x = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(models.accuracy(model, params, x, jnp.array([0, 1, 2])),
                               [1.0, 2 / 3], rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "logistic regression"):
      models.accuracy(model, params, x, jnp.array([0, 1, 2]), float64=True)
    with self.assertRaisesRegex(ValueError, "y_N"):
      models.accuracy(model, params, x, jnp.array([0, 1, 3]))


class InitDrawsTest(absltest.TestCase):
  """Weights are drawn flat (faster to compile): bit for bit jax.random.normal(key, shape)."""

  def test_mlp_and_cnn_weights_are_the_shaped_normal_draws(self):
    key = jax.random.key(11)
    mlp = models.mlp(20, (16,), 10)
    keys = jax.random.split(key, 2)
    for k, layer, (a, b) in zip(keys, mlp.init(key)["layers"], ((20, 16), (16, 10))):
      want = jax.random.normal(k, (a, b), jnp.float32) * math.sqrt(2.0 / a)
      np.testing.assert_array_equal(np.asarray(layer["w"]), np.asarray(want))
    cnn = models.cnn((8, 8, 1), (4,), 10)
    k_conv, k_dense = jax.random.split(key, 2)
    params = cnn.init(key)
    want = jax.random.normal(k_conv, (3, 3, 1, 4), jnp.float32) * math.sqrt(2.0 / 9)
    np.testing.assert_array_equal(np.asarray(params["conv"][0]["w"]), np.asarray(want))
    want = jax.random.normal(k_dense, (64, 10), jnp.float32) * math.sqrt(2.0 / 64)
    np.testing.assert_array_equal(np.asarray(params["dense"][0]["w"]), np.asarray(want))


if __name__ == "__main__":
  absltest.main()
