"""Tests for dpjax.audit.crafting: canaries, crafted initialisations and scores."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest, parameterized
from scipy import special, stats as sp_stats

from dpjax import accounting, dpsgd, models
from dpjax.accounting import gdp
from dpjax.audit import crafting, last_iterate
from dpjax.audit import final_model as fm
from dpjax.data import digits


def _per_example_grads(model, params, x, y):
  g = jax.vmap(lambda xi, yi: jax.grad(lambda p: models.per_example_loss(
      model, p, xi[None], yi[None])[0])(params))(x, y)
  return g


class CanariesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    d = digits.load(jax.random.key(0))
    self.x, self.y = d.x_train_NxF[:100], d.y_train_N[:100]
    self.model = models.mlp(64, (6,), 10)
    self.params = self.model.init(jax.random.key(3))

  def test_unused_weights_are_untouched_by_records(self):
    unused = crafting.unused_features(self.x)
    self.assertGreaterEqual(unused.size, 3)
    self.assertTrue(np.all(np.asarray(self.x)[:, unused] == 0))
    g = crafting.input_weight_canaries(self.model, self.params, unused, 2.0, skip_units=(1,))
    w = np.asarray(g["layers"][0]["w"])
    self.assertEqual(w.shape[0], unused.size * 5)
    np.testing.assert_allclose(np.sqrt((w ** 2).sum(axis=(1, 2))), 2.0)
    self.assertTrue(np.all(w[:, :, 1] == 0))
    # every record's gradient is exactly 0 on every canary coordinate (N = 100)
    grads = _per_example_grads(self.model, self.params, self.x, self.y)
    gw = np.asarray(grads["layers"][0]["w"])              # [N, 64, 6]
    self.assertEqual(float(np.abs(np.einsum("nfh,kfh->nk", gw, w)).max()), 0.0)
    self.assertGreater(float(np.abs(gw).max()), 0.0)

  def test_worst_case_init(self):
    unused = crafting.unused_features(self.x)
    p, (xt, yt) = crafting.worst_case_init(self.model, self.params, int(unused[0]), 3, unit=2)
    w1, b1 = np.asarray(p["layers"][0]["w"]), np.asarray(p["layers"][0]["b"])
    pre = np.asarray(self.x) @ w1 + b1[None]
    self.assertTrue(np.all(pre[:, 2] <= -2.0 + 1e-6))          # no record activates it
    grads = _per_example_grads(self.model, p, self.x, self.y)
    for leaf in (grads["layers"][0]["w"][:, :, 2], grads["layers"][0]["b"][:, 2],
                 grads["layers"][1]["w"][:, 2, :]):
      self.assertEqual(float(jnp.abs(leaf).max()), 0.0)
    d = crafting.gradient_direction(self.model, p, xt, yt)
    private = (float(d["layers"][0]["w"][0, int(unused[0]), 2]) ** 2
               + float(d["layers"][0]["b"][0, 2]) ** 2)
    self.assertGreater(math.sqrt(private), 0.99)   # cos with the untouched block
    g = jax.grad(lambda q: models.per_example_loss(self.model, q, xt[None],
                                                   jnp.array([yt]))[0])(p)
    norm = math.sqrt(sum(float((l ** 2).sum()) for l in jax.tree.leaves(g)))
    self.assertGreater(norm, 10.0)                 # far above C = 1: clipped to C

  def test_input_canary_label_maximises_loss(self):
    unused = crafting.unused_features(self.x)
    xc, yc = crafting.input_canary(self.model, self.params, unused)
    self.assertTrue(np.all(xc[unused] == 0) and np.sum(xc == 1.0) == 64 - unused.size)
    losses = models.per_example_loss(self.model, self.params, jnp.asarray(np.tile(xc, (10, 1))),
                                     jnp.arange(10))
    self.assertEqual(yc, int(np.argmax(np.asarray(losses))))

  def test_pretrain_lowers_the_loss(self):
    p = crafting.pretrain(self.model, self.params, self.x, self.y, num_steps=50, learning_rate=0.5)
    before = float(jnp.mean(models.per_example_loss(self.model, self.params, self.x, self.y)))
    after = float(jnp.mean(models.per_example_loss(self.model, p, self.x, self.y)))
    self.assertLess(after, 0.7 * before)


if __name__ == "__main__":
  absltest.main()
