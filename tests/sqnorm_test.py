"""Tests for dpjax.clipping.sqnorm: per-example squared norms with the outer-product identity
equal the plain vmap(grad) reduction, and the identity fires where it should."""

import functools
import math
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import models
from dpjax.clipping import sqnorm
from dpjax.clipping import vmap


def _seq_model(tokens=3, features=8, hidden=8):
  """Each record is `tokens` vectors; one dense layer on every token, relu, mean over
  tokens, dense to 2 logits. The first layer's per-record gradient sums `tokens`
  outer products (contracting size K = tokens > 1): the Gram form."""
  def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (features, hidden)) / math.sqrt(features),
            "w2": jax.random.normal(k2, (hidden, 2)) / math.sqrt(hidden)}

  def apply(params, x):
    h = jax.nn.relu(x.reshape(x.shape[0], tokens, features) @ params["w1"])
    return h.mean(axis=1) @ params["w2"]
  return models.Model(init, apply, 0.0, "custom", 2)


def _shared_weight_model(features=5):
  """One matrix used twice (x W and (x W) W^T W...): per-record gradients are sums of
  several products, which the identity must NOT be applied to."""
  def init(key):
    return {"w": jax.random.normal(key, (features, features)) / math.sqrt(features),
            "v": jnp.ones((features, 2))}

  def apply(params, x):
    h = jnp.tanh(x @ params["w"])
    return (h @ params["w"].T) @ params["v"]
  return models.Model(init, apply, 0.0, "custom", 2)


# (name, model, per-record input shape, number of classes, sums the identity computes)
_CASES = (
    ("logreg", models.logistic_regression(6), (6,), 2, 1),
    ("logreg_l2", models.logistic_regression(6, l2=0.3), (6,), 2, 0),
    ("mlp", models.mlp(5, (7, 6), 3), (5,), 3, 3),
    ("mlp_binary", models.mlp(5, (4,), 1), (5,), 2, 2),
    ("mlp_l2", models.mlp(5, (4,), 3, l2=0.1), (5,), 3, 0),
    ("cnn", models.cnn((6, 6, 2), (3,), 4), (72,), 4, 1),
    ("sequence_gram", _seq_model(), (24,), 2, 2),
    ("shared_weight", _shared_weight_model(), (5,), 2, 1),
)

_SLOW_CASES = ("mlp", "mlp_l2")


def _data(model, shape, classes, b=11, seed=0):
  kx, ky, kp = jax.random.split(jax.random.key(seed), 3)
  x = jax.random.normal(kx, (b,) + shape)
  y = jax.random.randint(ky, (b,), 0, classes)
  params = jax.tree.map(lambda p: p + 0.1, model.init(kp))   # non-zero biases
  return params, x, y


def _with_hits(fn):
  """(fn(), [whether the identity applied, per reduce_sum sqnorm looked at])."""
  hits = []
  real = sqnorm._gram_reduce

  def spy(*args):
    out = real(*args)
    hits.append(out is not None)
    return out
  with mock.patch.object(sqnorm, "_gram_reduce", spy):
    return fn(), hits


class SqNormTest(parameterized.TestCase):

  @parameterized.named_parameters(*(c for c in _CASES if c[0] not in _SLOW_CASES))
  def test_equals_plain_reduction(self, model, shape, classes, fired):
    self._check_equals_plain_reduction(model, shape, classes, fired)

  @parameterized.named_parameters(*(c for c in _CASES if c[0] in _SLOW_CASES))
  @pytest.mark.slow   # structures the default cases already cover (l2; dense layers)
  def test_equals_plain_reduction_more(self, model, shape, classes, fired):
    self._check_equals_plain_reduction(model, shape, classes, fired)

  def _check_equals_plain_reduction(self, model, shape, classes, fired):
    params, x, y = _data(model, shape, classes)
    loss_one = functools.partial(vmap.example_loss, model)
    want = sqnorm.per_example_sq_norms(loss_one, params, x, y, rewrite=False)
    got, hits = _with_hits(lambda: sqnorm.per_example_sq_norms(loss_one, params, x, y))
    np.testing.assert_allclose(got, want, rtol=2e-6)
    self.assertEqual(sum(hits), fired)   # where the identity applied (0: plain)
    # And the plain reduction equals the definition, one record at a time.
    for i in (0, 5):
      g = jax.grad(loss_one)(params, x[i], y[i])
      np.testing.assert_allclose(
          want[i], sum(float(jnp.sum(jnp.square(l))) for l in jax.tree.leaves(g)), rtol=1e-5)

  def test_vmap_over_models_and_jit(self):
    model = models.mlp(5, (7,), 3)
    _, x, y = _data(model, (5,), 3)
    params_M = jax.vmap(model.init)(jax.random.split(jax.random.key(3), 4))
    loss_one = functools.partial(vmap.example_loss, model)
    f = jax.jit(jax.vmap(lambda p: sqnorm.per_example_sq_norms(loss_one, p, x, y)))
    got = f(params_M)
    for i in range(4):
      p_i = jax.tree.map(lambda a, i=i: a[i], params_M)
      np.testing.assert_allclose(
          got[i], sqnorm.per_example_sq_norms(loss_one, p_i, x, y, rewrite=False), rtol=2e-6)

  @parameterized.named_parameters(
      # (lhs shape, rhs shape, ((lhs contracting, rhs contracting), (lhs batch, rhs batch)))
      ("k1_batch_first", (4, 1, 3), (4, 1, 5), (((1,), (1,)), ((0,), (0,)))),
      ("k1_batch_last", (3, 1, 4), (5, 4, 1), (((1,), (2,)), ((2,), (1,)))),
      ("two_batch_axes_reversed", (2, 1, 4, 6), (4, 5, 2, 1), (((1,), (3,)), ((0, 2), (2, 0)))),
      ("gram_two_contracting", (4, 3, 20, 2), (2, 30, 4, 3), (((1, 3), (3, 0)), ((0,), (2,)))),
  )
  def test_dot_general_layouts(self, lhs, rhs, dims):
    # sum over all non-batch axes of square(dot_general(A, B)) for awkward dimension
    # numbers, through sqnorm's evaluator, equals the plain computation.
    a = jax.random.normal(jax.random.key(0), lhs)
    b = jax.random.normal(jax.random.key(1), rhs)
    nb = len(dims[1][0])

    def f(a, b):
      d = jax.lax.dot_general(a, b, dims)
      return jnp.sum(jnp.square(d), axis=tuple(range(nb, d.ndim)))
    closed = jax.make_jaxpr(f)(a, b)
    (got,), hits = _with_hits(lambda: sqnorm._eval(closed.jaxpr, closed.consts, [a, b]))
    np.testing.assert_allclose(got, f(a, b), rtol=1e-5)
    self.assertEqual(hits, [True])

  def test_mismatched_records_raise(self):
    model = models.logistic_regression(3)
    loss_one = functools.partial(vmap.example_loss, model)
    with self.assertRaisesRegex(ValueError, "leading size"):
      sqnorm.per_example_sq_norms(loss_one, model.init(jax.random.key(0)), jnp.ones((4, 3)),
                                  jnp.ones((5,), jnp.int32))

  def test_engine_generic_path_uses_it(self):
    # two_pass_clipped_grad_sum with and without the identity: same clipped sum.
    model = models.mlp(5, (7,), 3)
    params, x, y = _data(model, (5,), 3)
    w = jnp.asarray([1.0, 0.0] * 5 + [1.0])
    a = vmap.two_pass_clipped_grad_sum(model, params, x, y, w, 0.5)
    b = vmap.two_pass_clipped_grad_sum(model, params, x, y, w, 0.5, rewrite_norms=False)
    c = vmap.clipped_grad_sum(model, params, x, y, w, 0.5)
    for u, v in ((a, b), (a, c)):
      np.testing.assert_allclose(u[1], v[1], rtol=2e-6)
      for l1, l2 in zip(jax.tree.leaves(u[0]), jax.tree.leaves(v[0])):
        np.testing.assert_allclose(l1, l2, rtol=1e-5, atol=1e-7)


class SqNormFloatLimitsTest(absltest.TestCase):

  def test_identity_equals_plain_reduction_at_float32_limits(self):
    # ||x_i||^2 r_i^2 with ||x_i||^2 overflowing: 0 (not 0 * inf = NaN) where r_i = 0,
    # inf where the square overflows, and finite where only the factor ||x_i||^2
    # overflows (||x|| = 3e20 times |r| ~ 1e-10).
    f32_max = float(np.finfo(np.float32).max)
    x = jnp.array([[3e19, 0.0, 0.0], [0.0, 0.0, -f32_max], [1e30, 1.0, 0.0],
                   [-0.46, 0.0, 3e20], [1.0, 2.0, 3.0]])   # z_3 = -23: r_3 ~ 1e-10
    y = jnp.array([1, 0, 0, 0, 1])
    loss_one = functools.partial(vmap.example_loss, models.logistic_regression(3))
    w = {"w": jnp.array([50.0, 0.0, 0.0])}
    got = sqnorm.per_example_sq_norms(loss_one, w, x, y)
    want = sqnorm.per_example_sq_norms(loss_one, w, x, y, rewrite=False)
    self.assertFalse(np.any(np.isnan(got)))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    self.assertEqual(float(got[0]), 0.0)
    self.assertEqual(float(got[1]), np.inf)
    self.assertTrue(0 < float(got[3]) < np.inf)


if __name__ == "__main__":
  absltest.main()
