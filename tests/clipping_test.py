"""Tests for dpjax.clipping: the clipped-sum contract for every back-end, and the registry."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import clipping
from dpjax import dpsgd
from dpjax import models
from dpjax.clipping import ghost
from dpjax.clipping import glm
from dpjax.clipping import vmap
from tests import helpers


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
    fast = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, progress=False)
    gen = dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, progress=False,
                           clipping=functools.partial(vmap.clipped_grad_sum, model))
    for u, v in zip(jax.tree.leaves(fast.params), jax.tree.leaves(gen.params)):
      np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
