"""Fine-tuning part of a model: body_features, split_head, join_head, reset_head, frozen_body.

What is checked: the body / head split reproduces model.apply exactly (mlp with and
without hidden layers, cnn); the features are a record-wise function (row i of a
batch equals the features of record i alone: the premise of the privacy argument);
the frozen model's loss gradient is the full model's last-layer gradient; DP-SGD
through `frozen_body` (features computed every step, generic clipping) trains the
same models as DP-SGD of `split_head`'s head on precomputed features (ghost clipping),
with the same key and noise; the body is never modified; bad inputs are refused by
name.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest

from dpjax import clipping, dpsgd, models

_QUIET = dpsgd.PerformanceFlags(progress=False)


def _params(model, seed):
  """Random parameters of model's structure, drawn with numpy (no per-shape jax compiles)."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(model.init, jax.random.key(0))
  return jax.tree.map(lambda s: (0.7 * rng.standard_normal(s.shape)).astype(np.float32), shapes)


def _normal(seed, shape, scale=1.0):
  return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _mlp():
  model = models.mlp(6, hidden=(7, 5), num_classes=3)
  return model, _params(model, 0)


class SplitTest(absltest.TestCase):

  def test_body_then_head_is_the_model(self):
    x = _normal(1, (9, 64))
    for model, h in ((models.mlp(64, (7, 5), 3), 5), (models.cnn((8, 8, 1), (2,), 3), 32)):
      with self.subTest(model.kind, h=h):
        params = _params(model, 2)
        head, head_params = models.split_head(model, params)
        self.assertEqual(head.kind, "mlp")
        self.assertEqual(head.num_outputs, model.num_outputs)
        self.assertEqual(jax.tree.leaves(head_params)[1].shape, (h, model.num_outputs))

        @jax.jit
        def both(params, x, model=model, head=head):
          phi = models.body_features(model, params, x)
          return phi, head.apply(models.split_head(model, params)[1], phi), model.apply(params, x)
        phi, via_head, direct = both(params, x)
        self.assertEqual(phi.shape, (9, h))
        np.testing.assert_allclose(via_head, direct, rtol=1e-6, atol=1e-6)
    linear = models.mlp(64, (), 4)  # no hidden layer: the features are the inputs
    np.testing.assert_array_equal(
        models.body_features(linear, _params(linear, 3), x), x)

  def test_features_are_record_wise(self):
    # phi(batch)[i] == phi(record i alone): no statistic across records enters the
    # features, so neighbouring data sets map to neighbouring feature sets.
    model, params = _mlp()
    x = _normal(4, (6, 6))
    phi = np.asarray(models.body_features(model, params, x))
    one = jax.jit(lambda xi: models.body_features(model, params, xi[None])[0])
    for i in range(6):
      np.testing.assert_allclose(phi[i], one(x[i]), rtol=1e-6, atol=1e-6)

  def test_join_and_reset_keep_the_body(self):
    model, params = _mlp()
    _, head_params = models.split_head(model, params)
    joined = models.join_head(model, params, head_params)
    for a, b in zip(jax.tree.leaves(joined), jax.tree.leaves(params)):
      np.testing.assert_array_equal(a, b)
    zero = models.reset_head(model, params)
    fresh = models.reset_head(model, params, jax.random.key(5))
    for p in (zero, fresh):
      for a, b in zip(p["layers"][:-1], params["layers"][:-1]):
        np.testing.assert_array_equal(a["w"], b["w"])
        np.testing.assert_array_equal(a["b"], b["b"])
    self.assertEqual(float(jnp.abs(zero["layers"][-1]["w"]).sum()), 0.0)
    np.testing.assert_array_equal(fresh["layers"][-1]["b"], np.zeros(3))
    w = np.asarray(fresh["layers"][-1]["w"])
    self.assertEqual(w.shape, (5, 3))
    self.assertGreater(np.abs(w).min(), 0.0)
    self.assertFalse(np.array_equal(w, np.asarray(params["layers"][-1]["w"])))

  def test_frozen_gradient_is_the_last_layer_gradient(self):
    model, params = _mlp()
    model = models.mlp(6, hidden=(7, 5), num_classes=3, l2=0.3)
    frozen = models.frozen_body(model, params)
    x = _normal(6, (4, 6))
    y = jnp.array([0, 2, 1, 2])
    head0 = frozen.init(jax.random.key(7))
    np.testing.assert_array_equal(head0["layers"][0]["w"], params["layers"][-1]["w"])
    g_head = jax.jit(jax.grad(lambda h: models.per_example_loss(frozen, h, x, y).sum()))(head0)
    g_full = jax.jit(jax.grad(lambda p: models.per_example_loss(model, p, x, y).sum()))(params)
    for k in ("w", "b"):
      np.testing.assert_allclose(g_head["layers"][0][k], g_full["layers"][-1][k], rtol=1e-5,
                                 atol=1e-6)

  def _setup(self):
    model, params = _mlp()
    start = models.reset_head(model, params, jax.random.key(8))
    x = _normal(9, (24, 6), 2.0)
    y = np.arange(24) % 3
    return model, start, x, y

  def test_frozen_body_clipped_sum_equals_head_on_features(self):
    # One DP-SGD step draws its batch mask and noise from the key, n and the head's
    # shapes alone, so the two routes agree iff their clipped sums and norms agree.
    model, start, x, y = self._setup()
    frozen = models.frozen_body(model, start)
    head, head0 = models.split_head(model, start)
    phi = models.body_features(model, start, x)
    w = (jnp.arange(24) % 3 != 0).astype(jnp.float32)
    c = 1.5
    fa, fb = clipping.path_for(frozen).fn, clipping.path_for(head).fn
    sa, na = jax.jit(lambda p, x, y, w: fa(p, x, y, w, c))(head0, x, y, w)
    sb, nb = jax.jit(lambda p, x, y, w: fb(p, x, y, w, c))(head0, phi, y, w)
    np.testing.assert_allclose(na, nb, rtol=2e-5)
    for la, lb in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)):
      np.testing.assert_allclose(la, lb, rtol=2e-5, atol=1e-5)
    # Both clipped and unclipped sampled records, so both branches are compared.
    sampled = np.asarray(na)[np.asarray(w) > 0]
    self.assertTrue(np.any(sampled > c) and np.any(sampled < c), sampled)

  @pytest.mark.slow  # two DP-SGD compiles, about 20 s
  def test_frozen_body_dpsgd_equals_head_on_features(self):
    model, start, x, y = self._setup()
    keep = jnp.ones((2, 24), bool).at[1, :5].set(False)
    cfg = dpsgd.DpSgdConfig(dataset_size=24, sampling_prob=0.5, num_steps=6,
                            noise_multiplier=0.8, l2_clip_norm=0.5, learning_rate=0.3)
    frozen = models.frozen_body(model, start)
    a = dpsgd.train_many(jax.random.key(11), x, y, keep, cfg, frozen, perf=_QUIET)
    head, head0 = models.split_head(model, start)
    phi = models.body_features(model, start, x)
    b = dpsgd.train_many(jax.random.key(11), phi, y, keep, cfg, head, init_params=head0,
                         perf=_QUIET)
    moved = np.abs(np.asarray(a.params["layers"][0]["w"]) - np.asarray(head0["layers"][0]["w"]))
    self.assertGreater(moved.max(), 1e-2)  # training did something
    for la, lb in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
      np.testing.assert_allclose(la, lb, rtol=2e-5, atol=2e-6)
    # The trained head in the full model: the body is the pre-trained one, bit for bit.
    trained = jax.tree.map(lambda v: v[1], a.params)
    full = models.join_head(model, start, trained)
    np.testing.assert_array_equal(full["layers"][0]["w"], start["layers"][0]["w"])
    np.testing.assert_allclose(model.apply(full, x), frozen.apply(trained, x), rtol=1e-6,
                               atol=1e-6)

  def test_bad_inputs_are_named(self):
    model, params = _mlp()
    lr = models.logistic_regression(3)
    with self.assertRaisesRegex(ValueError, "model.kind"):
      models.split_head(lr, {"w": np.zeros(3, np.float32)})
    with self.assertRaisesRegex(ValueError, "params"):
      models.body_features(model, {"layers": params["layers"][:-1]}, jnp.ones((2, 6)))
    bad = jax.tree.map(np.array, params)
    bad["layers"][0]["w"][0, 0] = np.nan
    with self.assertRaisesRegex(ValueError, "params"):
      models.frozen_body(model, bad)
    with self.assertRaisesRegex(ValueError, "x_BxF"):
      models.body_features(model, params, np.ones((2, 5)))
    with self.assertRaisesRegex(ValueError, "head_params"):
      models.join_head(model, params, {"layers": [{"w": np.ones((4, 3)), "b": np.ones(3)}]})
    with self.assertRaisesRegex(TypeError, "model"):
      models.reset_head("mlp", params)


if __name__ == "__main__":
  absltest.main()
