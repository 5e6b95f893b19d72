"""Tests for dpjax.clipping: the clipped-sum contract for every back-end, and the registry."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import clipping
from dpjax import dpsgd
from dpjax import models
from dpjax.clipping import ghost
from dpjax.clipping import glm
from dpjax.clipping import vmap
from tests import helpers

_QUIET = dpsgd.PerformanceFlags(progress=False)


class ContractTest(parameterized.TestCase):
  """Each example's contribution to the clipped sum has norm min(C, ||g_i||) <= C."""

  @parameterized.named_parameters(
      (f"seed{s}_{kind}_C{c}", s, kind, c)
      for s in range(2) for kind in ("glm", "generic", "mlp", "ghost_mlp", "two_pass_lr", "two_pass_mlp")
      for c in (0.1, 5.0))
  def test_each_contribution_bounded_by_c(self, seed, kind, c):
    x, y = helpers.binary_data(n=16, d=5, seed=seed, scale=1.0 + 4.0 * seed)
    if kind in ("mlp", "ghost_mlp"):
      model = models.mlp(5, hidden=(7,), num_classes=1, l2=0.1)
      fn = (functools.partial(vmap.clipped_grad_sum, model) if kind == "mlp"
            else ghost.clipped_sum_fn(model))
    elif kind.startswith("two_pass"):
      # No L2 penalty, so the norms come from sqnorm's outer-product identity.
      model = (models.logistic_regression(5) if kind == "two_pass_lr"
               else models.mlp(5, hidden=(7,), num_classes=1))
      fn = functools.partial(vmap.two_pass_clipped_grad_sum, model)
    else:
      model = models.logistic_regression(5, l2=0.2)
      fn = (functools.partial(glm.clipped_grad_sum, 0.2) if kind == "glm"
            else functools.partial(vmap.clipped_grad_sum, model))
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



_F32_MAX = float(np.finfo(np.float32).max)


def huge_batch(d, seed=0, n=8):
  """n records of d float32 features, N(0, 1) except rows 1-5: 3e19, 1e30, 3.4e38 and
  -3.4e38 in single features, all features 3e19, all +-3.4e38 (alternating signs)."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  x[1, 0], x[2, 1 % d], x[3, 0], x[3, d - 1] = 3e19, 1e30, _F32_MAX, -_F32_MAX
  x[4, :] = 3e19
  x[5, :] = _F32_MAX * np.where(np.arange(d) % 2, 1.0, -1.0)
  return jnp.asarray(x)


def one_hot_sums(fn, params, x, y, c):
  """(per-record clipped contributions [B, P] float64, norms [B]) from one-hot weights."""
  b = x.shape[0]
  sums, norms = jax.jit(jax.vmap(lambda w: fn(params, x, y, w, c)))(jnp.eye(b))
  flat = np.concatenate([np.asarray(v, np.float64).reshape(b, -1)
                         for v in jax.tree.leaves(sums)], axis=1)
  return flat, np.diag(np.asarray(norms))


def _paths(kind):
  """(model, labels at the edges of their range, {name: clipped-sum fn}) per model kind."""
  if kind.startswith("lr"):
    l2 = 0.3 if kind == "lr_l2" else 0.0
    model = models.logistic_regression(5, l2=l2)
    y = jnp.arange(8) % 2
    fns = {"glm": functools.partial(glm.clipped_grad_sum, l2)}
  elif kind.startswith("mlp"):
    model = models.mlp(5, hidden=(6,), num_classes=3, l2=0.1 if kind == "mlp_l2" else 0.0)
    y = jnp.where(jnp.arange(8) % 2 == 0, 0, 2)          # classes 0 and K - 1
    fns = {"ghost": ghost.clipped_sum_fn(model)}
  else:
    model = models.cnn((4, 4, 1), (2,), num_classes=3)
    y = jnp.where(jnp.arange(8) % 2 == 0, 0, 2)
    fns = {f"ghost_{m}": ghost.clipped_sum_fn(model, conv_mode=m)
           for m in ("materialise", "gram")}
  fns["two_pass"] = functools.partial(vmap.two_pass_clipped_grad_sum, model)
  return model, y, fns


class FloatLimitsTest(parameterized.TestCase):
  """Records with features up to +-3.4e38 (finite float32) on every clipping path:
  each contribution is finite with norm <= C, the full clipped sum is finite (also with
  those records unsampled), and every path equals the vmap(grad) definition."""

  @parameterized.named_parameters(
      (f"{kind}_C{c}", kind, c) for kind in ("lr", "lr_l2", "mlp", "mlp_l2", "cnn")
      for c in (0.5,))
  def test_huge_records(self, kind, c):
    self._check_huge_records(kind, c)

  @parameterized.named_parameters(
      (f"{kind}_C{c}", kind, c) for kind in ("lr", "lr_l2", "mlp", "mlp_l2", "cnn")
      for c in (4.0,))
  @pytest.mark.slow   # a clip norm above the records' norms, every path again
  def test_huge_records_large_clip(self, kind, c):
    self._check_huge_records(kind, c)

  def _check_huge_records(self, kind, c):
    model, y, fns = _paths(kind)
    x = huge_batch(16 if kind == "cnn" else 5)
    params = jax.tree.map(lambda p: p + 0.5 * jax.random.normal(jax.random.key(3), p.shape),
                          model.init(jax.random.key(1)))
    want, want_norms = one_hot_sums(functools.partial(vmap.clipped_grad_sum, model),
                                    params, x, y, c)
    for name, fn in {"vmap": None, **fns}.items():
      with self.subTest(path=name):
        got, norms = (want, want_norms) if fn is None else one_hot_sums(fn, params, x, y, c)
        self.assertTrue(np.all(np.isfinite(got)))
        self.assertFalse(np.any(np.isnan(norms)))
        contribution = np.sqrt(np.sum(got ** 2, axis=1))
        self.assertTrue(np.all(contribution <= c * (1 + 1e-5)), contribution)
        # Agreement with the definition. The Gram form of ghost clipping bounds an
        # out-of-range kernel norm from above: there, only in-range records are compared.
        rows = want_norms < 1e19 if name == "ghost_gram" else np.ones(8, bool)
        # The full sum, and the sum with the huge records unsampled (weights 0).
        for w in (np.ones(8), np.array([1, 0, 0, 0, 0, 0, 1, 1])):
          s, _ = jax.jit(lambda w: (fn or functools.partial(vmap.clipped_grad_sum, model))(
              params, x, y, w, c))(jnp.asarray(w, jnp.float32))
          flat = np.concatenate([np.asarray(v, np.float64).ravel() for v in jax.tree.leaves(s)])
          self.assertTrue(np.all(np.isfinite(flat)))
          if np.all(rows[w > 0]):
            np.testing.assert_allclose(flat, w @ want, rtol=1e-4, atol=1e-5 * c)
        np.testing.assert_allclose(got[rows], want[rows], rtol=1e-4, atol=1e-5 * c)
        np.testing.assert_allclose(norms[rows], want_norms[rows], rtol=1e-5)
    # The batch really reaches the float32 limits: some norm overflows its square.
    self.assertTrue(np.any(want_norms > 1.9e19) or np.any(np.isinf(want_norms)))

  def test_norm_overflowing_float32_contributes_zero_on_every_path(self):
    # ||g|| = |r| ||x|| = 1/2 * 4 * 3.4e38 > 3.4e38: norm inf, contribution exactly
    # zero (never NaN).
    x = jnp.full((2, 16), _F32_MAX).at[1].set(1.0)
    y = jnp.array([0, 1])
    model = models.logistic_regression(16)
    params = {"w": jnp.zeros(16)}                         # r = +-1/2
    for fn in (functools.partial(glm.clipped_grad_sum, 0.0),
               functools.partial(vmap.clipped_grad_sum, model),
               functools.partial(vmap.two_pass_clipped_grad_sum, model)):
      s, norms = fn(params, x, y, jnp.ones(2), 1.0)
      self.assertEqual(float(norms[0]), np.inf)
      np.testing.assert_allclose(s["w"], -0.25 * np.ones(16), rtol=1e-6)   # record 1, clipped

  def test_safe_norm_agrees_with_float64(self):
    rng = np.random.default_rng(0)
    v = rng.normal(size=(6, 7)) * np.array([1e-3, 1.0, 1e19, 1e30, 1e37, 3e38])[:, None]
    v = np.clip(v, -_F32_MAX, _F32_MAX).astype(np.float32)
    got = vmap.tree_norms({"a": jnp.asarray(v[:, :3]), "b": jnp.asarray(v[:, 3:])})
    want = np.linalg.norm(v.astype(np.float64), axis=1)
    ok = want < _F32_MAX
    np.testing.assert_allclose(np.asarray(got)[ok], want[ok], rtol=1e-6)
    self.assertTrue(np.all(np.isinf(np.asarray(got)[~ok])))
    bad = jnp.asarray(v).at[0, 2].set(jnp.nan).at[1, 0].set(jnp.inf)
    self.assertTrue(np.all(np.isinf(np.asarray(vmap.tree_norms({"a": bad}))[:2])))
    # Ordinary vectors: bit for bit sqrt of the plain sum of squares.
    np.testing.assert_array_equal(
        vmap.tree_norms({"a": jnp.asarray(v[:2])}),
        jnp.sqrt(jnp.sum(jnp.square(jnp.asarray(v[:2])), axis=1)))


class RegistryTest(absltest.TestCase):

  def test_default_path_per_model_kind(self):
    lr = models.logistic_regression(4, l2=0.3)
    p = clipping.path_for(lr)
    self.assertEqual((p.name, p.scan_unroll), ("glm", 4))
    self.assertIs(p.fn.func, glm.clipped_grad_sum)
    self.assertEqual(p.fn.args, (0.3,))
    for model in (models.mlp(16, (8,), 10), models.cnn((4, 4, 1), (3,))):
      self.assertEqual(clipping.path_for(model).name, "ghost")
      self.assertIs(clipping.path_for(model).fn, ghost.clipped_sum_fn(model))
    base = models.mlp(4, hidden=(6,), num_classes=3)
    custom = models.Model(base.init, base.apply, 0.05, "custom", 3)
    p = clipping.path_for(custom)
    self.assertEqual(p.name, "vmap_two_pass")
    self.assertTrue(p.per_example_grad_memory)
    self.assertIs(clipping.path_for(custom), p)          # memoised: one compiled program
    params = custom.init(jax.random.key(0))
    x, _ = helpers.binary_data()
    y = jax.random.randint(jax.random.key(2), (24,), 0, 3)
    wts = jnp.ones((24,), jnp.float32)
    s1, n1 = p(params, x, y, wts, 0.5)
    s2, n2 = vmap.clipped_grad_sum(custom, params, x, y, wts, 0.5)
    for u, v in zip(jax.tree.leaves(s1), jax.tree.leaves(s2)):
      np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n1, n2, rtol=1e-6)

  def test_register_a_new_kind(self):
    base = models.mlp(4, hidden=(6,), num_classes=3)
    model = models.Model(base.init, base.apply, 0.0, "my_kind", 3)
    path = clipping.ClippingPath(functools.partial(vmap.clipped_grad_sum, model), "one_pass")
    try:
      clipping.register("my_kind", lambda m: path)
      self.assertIs(clipping.path_for(model), path)
    finally:
      clipping._FACTORIES.pop("my_kind")
      clipping.path_for.cache_clear()
    self.assertEqual(clipping.path_for(model).name, "vmap_two_pass")
    with self.assertRaises(TypeError):
      clipping.register("", lambda m: path)
    with self.assertRaises(TypeError):
      clipping.register("k", "not callable")

  def test_as_path(self):
    fn = functools.partial(glm.clipped_grad_sum, 0.0)
    p = clipping.as_path(fn)
    self.assertEqual((p.name, p.accounted, p.scan_unroll), ("custom", True, 1))
    self.assertIs(clipping.as_path(fn), p)
    self.assertIs(clipping.as_path(p), p)
    with self.assertRaises(TypeError):
      clipping.as_path(3)
    with self.assertRaises(TypeError):
      clipping.path_for("logistic_regression")

  def test_engine_uses_the_path_given(self):
    # A user's clipping enters through train_many(clipping=...): the one-pass vmap path
    # gives the same models as the default GLM path.
    model = models.logistic_regression(4, l2=0.1)
    x, y = helpers.binary_data()
    keep = jnp.ones((3, 24), bool)
    cfg = dpsgd.DpSgdConfig(dataset_size=24, sampling_prob=0.3, num_steps=10,
                            noise_multiplier=1.0)
    fast = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=_QUIET)
    gen = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=_QUIET,
                           clipping=functools.partial(vmap.clipped_grad_sum, model))
    for u, v in zip(jax.tree.leaves(fast.params), jax.tree.leaves(gen.params)):
      np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
