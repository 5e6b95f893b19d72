"""Tests for dpjax.fitting: the Newton fits against closed forms, scipy.optimize and
scikit-learn; the gradient trainer against an eager Python loop."""

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from absl.testing import absltest, parameterized
from scipy import optimize, special
from sklearn import linear_model

from dpjax import fitting
from dpjax import models


def _data(n=400, d=4, seed=0):
  """Features [N, D] with an intercept column, labels from a logistic model."""
  rng = np.random.default_rng(seed)
  x = np.c_[np.ones(n), rng.normal(size=(n, d - 1))]
  w = np.linspace(-1.0, 1.0, d)
  y = (rng.random(n) < special.expit(x @ w)).astype(np.int32)
  return x, y


def _objective(w, x, y, l2):
  z = x @ w
  return np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * w @ w


def _gradient(w, x, y, l2):
  return x.T @ (special.expit(x @ w) - y) / x.shape[0] + l2 * w


class FitLogisticTest(parameterized.TestCase):

  def test_intercept_only_is_the_logit_of_the_mean(self):
    y = np.array([1, 1, 1, 0, 1, 0, 1, 1])
    w = fitting.fit_logistic(np.ones((8, 1)), y, l2=0.0, tol=1e-14)
    self.assertAlmostEqual(float(w[0]), np.log(6 / 2), places=13)

  def test_one_step_is_the_newton_step_from_zero(self):
    # At w = 0, p = 1/2: g = X^T (1/2 - y) / N and H = X^T X / (4N) + l2 I.
    x, y = _data()
    n, d = x.shape
    want = -np.linalg.solve(x.T @ x / (4 * n) + 0.1 * np.eye(d), x.T @ (0.5 - y) / n)
    np.testing.assert_allclose(fitting.fit_logistic(x, y, l2=0.1, num_iters=1), want,
                               rtol=1e-12)

  @parameterized.parameters(1e-4, 1e-2, 1.0)
  def test_matches_scipy_minimize(self, l2):
    x, y = _data()
    w = fitting.fit_logistic(x, y, l2=l2)
    np.testing.assert_array_less(np.abs(_gradient(w, x, y, l2)), 1e-12)
    ref = optimize.minimize(_objective, np.zeros(x.shape[1]), args=(x, y, l2), jac=_gradient,
                            method="BFGS", options={"gtol": 1e-11})
    np.testing.assert_allclose(w, ref.x, rtol=1e-6, atol=1e-8)
    self.assertLessEqual(_objective(w, x, y, l2), ref.fun + 1e-14)

  @parameterized.parameters(1e-3, 1e-1)
  def test_matches_sklearn(self, l2):
    # sklearn minimises C sum_i logloss_i + ||w||^2 / 2, i.e. ours with C = 1 / (l2 N).
    x, y = _data(seed=3)
    w = fitting.fit_logistic(x, y, l2=l2)
    clf = linear_model.LogisticRegression(C=1.0 / (l2 * x.shape[0]), fit_intercept=False,
                                          solver="newton-cg", tol=1e-12, max_iter=1000)
    np.testing.assert_allclose(w, clf.fit(x, y).coef_[0], rtol=1e-6, atol=1e-8)

  def test_tol_stops_early_at_the_same_optimum(self):
    x, y = _data()
    full = fitting.fit_logistic(x, y, l2=1e-4, num_iters=50)
    early = fitting.fit_logistic(x, y, l2=1e-4, num_iters=50, tol=1e-10)
    np.testing.assert_allclose(early, full, rtol=0, atol=1e-12)

  def test_inputs_are_converted_to_float64(self):
    x, y = _data()
    np.testing.assert_array_equal(
        fitting.fit_logistic(jnp.asarray(x, jnp.float32), jnp.asarray(y), l2=1e-2),
        fitting.fit_logistic(x.astype(np.float32).astype(np.float64), y.astype(bool), l2=1e-2))

  @parameterized.named_parameters(
      ("x_nan", lambda x, y: fitting.fit_logistic(np.where(x == 1, np.nan, x), y), "x_NxD"),
      ("x_rank", lambda x, y: fitting.fit_logistic(x[:, 0], y), "x_NxD"),
      ("y_values", lambda x, y: fitting.fit_logistic(x, 2 * y), "y_N"),
      ("y_shape", lambda x, y: fitting.fit_logistic(x, y[1:]), "y_N"),
      ("l2", lambda x, y: fitting.fit_logistic(x, y, l2=-1.0), "l2"),
      ("l2_bool", lambda x, y: fitting.fit_logistic(x, y, l2=True), "l2"),
      ("num_iters", lambda x, y: fitting.fit_logistic(x, y, num_iters=0), "num_iters"),
      ("tol", lambda x, y: fitting.fit_logistic(x, y, tol=0.0), "tol"),
  )
  def test_bad_input(self, fn, name):
    x, y = _data(n=20)
    with self.assertRaisesRegex(ValueError, name):
      fn(x, y)


class FitLogisticManyTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    x, y = _data(n=60, d=3, seed=1)
    self.x = jnp.asarray(x, jnp.float32)
    self.y = jnp.asarray(y)
    self.keep = np.random.default_rng(2).random((5, 60)) < 0.5

  @parameterized.parameters(None, 0.5)
  def test_vmap_equals_a_loop_over_models(self, max_step_norm):
    w = fitting.fit_logistic_many(self.x, self.y, jnp.asarray(self.keep), l2=1e-2,
                                  max_step_norm=max_step_norm)
    self.assertEqual(w.shape, (5, 3))
    self.assertEqual(w.dtype, jnp.float32)
    for m in range(5):
      one = fitting.fit_logistic_many(self.x, self.y, self.keep[m:m + 1], l2=1e-2,
                                      max_step_norm=max_step_norm)
      np.testing.assert_allclose(w[m], one[0], rtol=1e-5, atol=1e-6)

  @parameterized.parameters(1e-3, 1e-1)
  def test_each_model_matches_the_float64_fit_of_its_subset(self, l2):
    w = fitting.fit_logistic_many(self.x, self.y, self.keep, l2=l2)
    for m in range(5):
      rows = self.keep[m]
      want = fitting.fit_logistic(np.asarray(self.x)[rows], np.asarray(self.y)[rows], l2=l2)
      np.testing.assert_allclose(w[m], want, rtol=1e-4, atol=1e-4)

  def test_max_step_norm_caps_the_first_step(self):
    w1 = fitting.fit_logistic_many(self.x, self.y, self.keep, l2=1e-2, num_iters=1,
                                   max_step_norm=0.01)
    np.testing.assert_allclose(np.linalg.norm(w1, axis=1), 0.01, rtol=1e-5)
    free = fitting.fit_logistic_many(self.x, self.y, self.keep, l2=1e-2, num_iters=1)
    np.testing.assert_allclose(w1, 0.01 * free / np.linalg.norm(free, axis=1, keepdims=True),
                               rtol=1e-5)

  @parameterized.named_parameters(
      ("keep_shape", lambda s: fitting.fit_logistic_many(s.x, s.y, s.keep[:, 1:], l2=1.0),
       "keep_MxN"),
      ("keep_empty_row", lambda s: fitting.fit_logistic_many(
          s.x, s.y, np.zeros((2, 60), bool), l2=1.0), "keep_MxN"),
      ("keep_values", lambda s: fitting.fit_logistic_many(s.x, s.y, 2 * s.keep, l2=1.0),
       "keep_MxN"),
      ("x_inf", lambda s: fitting.fit_logistic_many(s.x.at[0, 0].set(jnp.inf), s.y, s.keep,
                                                    l2=1.0), "x_NxD"),
      ("l2", lambda s: fitting.fit_logistic_many(s.x, s.y, s.keep, l2=float("nan")), "l2"),
      ("max_step_norm", lambda s: fitting.fit_logistic_many(s.x, s.y, s.keep, l2=1.0,
                                                            max_step_norm=0.0),
       "max_step_norm"),
  )
  def test_bad_input(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn(self)


def _digits_like(n=12, f=9, k=3, seed=0):
  x = jax.random.uniform(jax.random.key(seed), (n, f))
  return x, jnp.arange(n) % k


def _flat(u):
  return ravel_pytree(u)[0]


class NonPrivateBaselineTest(absltest.TestCase):

  @pytest.mark.slow  # an eager reference loop
  def test_equals_a_python_loop_and_keeps_the_best_epoch(self):
    x, y = _digits_like(n=10)
    xv, yv = _digits_like(n=9, seed=1)
    model = models.mlp(9, (4,), 3)
    opt = optax.adam(0.1)
    out = fitting.train_nonprivate(jax.random.key(3), x, y, model, opt, batch_size=4,
                                   num_epochs=3, num_models=2, x_val_NxF=xv, y_val_N=yv)
    for m, key in enumerate(jax.random.split(jax.random.key(3), 2)):
      k_init, k_order = jax.random.split(key)
      p = model.init(k_init)
      s = opt.init(p)
      best, best_acc, curve = None, -1.0, []
      for ep in range(3):
        order = np.asarray(jax.random.permutation(jax.random.fold_in(k_order, ep), 10))
        for j in range(2):                    # floor(10 / 4) batches, 2 records skipped
          idx = order[4 * j: 4 * j + 4]
          g = jax.grad(lambda q: jnp.mean(models.per_example_loss(model, q, x[idx],  # noqa: B023
                                                                  y[idx])))(p)
          upd, s = opt.update(g, s, p)
          p = optax.apply_updates(p, upd)
        acc = float(jnp.mean(jnp.argmax(model.apply(p, xv), -1) == yv))
        curve.append(acc)
        if acc > best_acc:
          best, best_acc, best_ep = p, acc, ep
      np.testing.assert_allclose(out.val_accuracy_ME[m], curve, atol=1e-6)
      self.assertEqual(int(out.best_epoch_M[m]), best_ep)
      np.testing.assert_allclose(_flat(jax.tree.map(lambda a: a[m], out.params)), _flat(best),
                                 rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(models.accuracy(model, out.params, xv, yv),
                               np.max(np.asarray(out.val_accuracy_ME), axis=1), atol=1e-6)

  def test_bad_arguments(self):
    x, y = _digits_like()
    model = models.mlp(9, (), 3)
    opt = optax.sgd(0.1)
    for kw, exc, name in ((dict(batch_size=13), ValueError, "batch_size"),
                          (dict(num_epochs=0), ValueError, "num_epochs"),
                          (dict(num_models=0), ValueError, "num_models")):
      args = dict(batch_size=4, num_epochs=1)
      args.update(kw)
      with self.subTest(name), self.assertRaisesRegex(exc, name):
        fitting.train_nonprivate(jax.random.key(0), x, y, model, opt, **args)
    with self.assertRaisesRegex(TypeError, "optimizer"):
      fitting.train_nonprivate(jax.random.key(0), x, y, model, "adam", batch_size=4,
                               num_epochs=1)
    with self.assertRaisesRegex(ValueError, "x_val_NxF"):
      fitting.train_nonprivate(jax.random.key(0), x, y, model, opt, batch_size=4, num_epochs=1,
                               x_val_NxF=x[:, :4], y_val_N=y)


if __name__ == "__main__":
  absltest.main()
