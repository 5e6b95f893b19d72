"""Tests for dpjax.clipping.vmap: one pass = two passes; C = inf sums the raw gradients."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from dpjax import models
from dpjax.clipping import vmap
from tests import helpers


class VmapClippingTest(absltest.TestCase):

  def test_two_pass_equals_one_pass(self):
    model = models.mlp(4, hidden=(6,), num_classes=3, l2=0.05)
    params = model.init(jax.random.key(0))
    x, _ = helpers.binary_data()
    y = jax.random.randint(jax.random.key(2), (24,), 0, 3)
    wts = jax.random.bernoulli(jax.random.key(6), 0.5, (24,)).astype(jnp.float32)
    s1, n1 = vmap.clipped_grad_sum(model, params, x, y, wts, 0.5)
    s2, n2 = vmap.two_pass_clipped_grad_sum(model, params, x, y, wts, 0.5)
    helpers.assert_trees_close(s1, s2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n1, n2, rtol=1e-6)

  def test_no_clipping_when_c_infinite(self):
    model = models.logistic_regression(4)
    x, y = helpers.binary_data()
    w = {"w": jnp.ones((4,))}
    s, _ = vmap.clipped_grad_sum(model, w, x, y, jnp.ones((24,)), math.inf)
    g = vmap.per_example_grads(model, w, x, y)
    np.testing.assert_allclose(s["w"], jnp.sum(g["w"], axis=0), rtol=1e-5)

  def test_clip_factor(self):
    np.testing.assert_allclose(vmap.clip_factor(jnp.array([0.0, 0.5, 2.0, 4.0]), 1.0),
                               [1.0, 1.0, 0.5, 0.25])
    np.testing.assert_array_equal(vmap.clip_factor(jnp.array([0.0, 1e30]), math.inf),
                                  [1.0, 1.0])

  def test_example_loss_is_one_row_of_per_example_loss(self):
    model = models.mlp(4, hidden=(3,), num_classes=3)
    params = model.init(jax.random.key(0))
    x, _ = helpers.binary_data(n=5)
    y = jnp.array([0, 1, 2, 0, 1])
    want = models.per_example_loss(model, params, x, y)
    got = jnp.stack([vmap.example_loss(model, params, x[i], y[i]) for i in range(5)])
    np.testing.assert_allclose(got, want, rtol=1e-6)


class VmapFloatLimitsTest(absltest.TestCase):

  def test_non_finite_gradient_contributes_exactly_zero(self):
    # exp(x_0) overflows for x_0 = 3e6: that record's gradient is inf / NaN. Sampled or
    # not, it adds exactly zero (norm inf), on the one-pass path and on the two-pass
    # path (which, for a feature above 2^20, runs the one-pass definition).
    def apply(params, x):
      return (jnp.exp(x[:, 0]) * params["a"] + x[:, 1:] @ params["w"])[:, None]
    model = models.Model(lambda k: {"a": jnp.ones(()), "w": jnp.ones(2)}, apply, 0.0, "custom")
    params = {"a": jnp.asarray(0.5), "w": jnp.array([0.3, -0.2])}
    x = jnp.array([[0.1, 1.0, 2.0], [3e6, 1.0, 1.0], [-0.5, 0.0, 1.0]])
    y = jnp.array([1, 0, 0])
    for wts in (jnp.ones(3), jnp.array([1.0, 0.0, 1.0])):
      keep = jnp.array([1.0, 0.0, 1.0])
      want, _ = vmap.clipped_grad_sum(model, params, x.at[1].set(0.0), y, keep, 0.5)
      for fn in (vmap.clipped_grad_sum, vmap.two_pass_clipped_grad_sum):
        s, norms = fn(model, params, x, y, wts, 0.5)
        self.assertEqual(float(norms[1]), np.inf)
        helpers.assert_trees_close(s, want, rtol=1e-6, atol=1e-7)

  def test_two_pass_switches_to_the_definition_for_huge_features(self):
    model = models.mlp(3, hidden=(4,), num_classes=2)
    params = model.init(jax.random.key(0))
    x = jnp.array([[0.1, 2e6, -1.0], [1.0, 2.0, 3.0]])      # above 2^20: one-pass branch
    y = jnp.array([0, 1])
    s1, n1 = vmap.clipped_grad_sum(model, params, x, y, jnp.ones(2), 1.0)
    s2, n2 = vmap.two_pass_clipped_grad_sum(model, params, x, y, jnp.ones(2), 1.0)
    helpers.assert_trees_close(s1, s2, rtol=0, atol=0)       # the same computation
    np.testing.assert_array_equal(n1, n2)


if __name__ == "__main__":
  absltest.main()
