"""Tests for dpjax.clipping.glm: the closed form equals vmap(grad) and its own formula."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from dpjax import models
from dpjax.clipping import glm
from dpjax.clipping import vmap
from tests import helpers


class GlmTest(absltest.TestCase):

  def test_glm_equals_generic(self):
    for l2 in (0.0, 0.3):
      model = models.logistic_regression(4, l2=l2)
      x, y = helpers.binary_data()
      w = {"w": jax.random.normal(jax.random.key(5), (4,))}
      wts = jax.random.bernoulli(jax.random.key(6), 0.5, (24,)).astype(jnp.float32)
      s1, n1 = glm.clipped_grad_sum(l2, w, x, y, wts, 1.0)
      s2, n2 = vmap.clipped_grad_sum(model, w, x, y, wts, 1.0)
      helpers.assert_trees_close(s1, s2, rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(n1, n2, rtol=1e-5, atol=1e-5)

  def test_norm_formula_in_float64(self):
    # ||r x + l2 w|| computed directly in float64.
    x, y = helpers.binary_data(n=8)
    w = np.asarray(jax.random.normal(jax.random.key(5), (4,)), np.float64)
    _, norms = glm.clipped_grad_sum(0.3, {"w": jnp.asarray(w, jnp.float32)}, x, y,
                                    jnp.ones(8), 1.0)
    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    r = 1.0 / (1.0 + np.exp(-(xs @ w))) - ys
    want = np.linalg.norm(r[:, None] * xs + 0.3 * w[None, :], axis=1)
    np.testing.assert_allclose(norms, want, rtol=1e-5)


class GlmFloatLimitsTest(absltest.TestCase):

  def test_huge_record_with_zero_residual_gives_no_nan(self):
    # A record with a feature of 3e19 that the model classifies with certainty has
    # r = sigmoid(z) - y = 0 exactly: its gradient is 0, but ||x||^2 overflows, and
    # |r| * sqrt(inf) = 0 * inf would be NaN. Its norm is 0 and the sum stays finite.
    x = jnp.array([[3e19, 0.0, 1.0], [0.5, -1.0, 2.0], [-1e30, 1.0, 0.0]])
    y = jnp.array([1, 0, 0])
    w = {"w": jnp.array([1.0, 0.5, -0.2])}
    for l2 in (0.0, 0.25):
      model = models.logistic_regression(3, l2=l2)
      for wts in (jnp.ones(3), jnp.array([0.0, 1.0, 0.0])):
        s, norms = glm.clipped_grad_sum(l2, w, x, y, wts, 1.0)
        s_ref, norms_ref = vmap.clipped_grad_sum(model, w, x, y, wts, 1.0)
        self.assertTrue(np.all(np.isfinite(s["w"])))
        np.testing.assert_allclose(norms, norms_ref, rtol=1e-6)
        np.testing.assert_allclose(s["w"], s_ref["w"], rtol=1e-5, atol=1e-7)
      self.assertEqual(float(norms[0]), l2 * float(jnp.linalg.norm(w["w"])))


if __name__ == "__main__":
  absltest.main()
