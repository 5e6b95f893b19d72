"""Tests for the DP-SGD recipe: optimisers and EMA as post-processing, augmentation
multiplicity, group norm under per-example clipping, sigma at fixed epsilon across
batch sizes (dpjax.recipe, dpsgd.DpSgdConfig(ema_decay=), models.cnn(groups=))."""

import dataclasses
import functools
import math

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
import pytest
from dpjax import accounting
from dpjax import clipping
from dpjax import dpsgd
from dpjax import models
from dpjax import recipe
from dpjax.clipping import vmap as vmap_clipping

_IMG = (3, 3, 1)
_QUIET = dpsgd.PerformanceFlags(progress=False)


def _data(n=12, f=9, k=3, seed=0):
  x = jax.random.uniform(jax.random.key(seed), (n, f))
  y = jnp.arange(n) % k
  return x, y


def _flat(u):
  return ravel_pytree(u)[0]


class OptimiserAndEmaPostProcessingTest(absltest.TestCase):
  """The optimiser's state and the EMA only ever see released values."""

  def test_replaying_the_privatized_gradients_gives_params_and_ema_adam(self):
    self._check_replay("adam")

  @pytest.mark.slow  # one more compiled program
  def test_replaying_the_privatized_gradients_gives_params_and_ema_momentum(self):
    self._check_replay("momentum")

  def _check_replay(self, name):
    # The engine's optimiser receives the privatized update (observe_fn records the
    # same value each step). Replaying optax on those recorded updates alone, from
    # the same start, must reproduce the trained parameters, and the EMA must be
    # sum_t d^(T-t) (1 - d) p_t / (1 - d^T) of the replayed iterates p_t. Noise is
    # on (sigma = 1), so the privatized updates differ from any clean gradient.
    x, y = _data(k=2)
    model = models.logistic_regression(9)      # closed-form clipping: a cheap program
    p0 = {"w": jnp.linspace(-0.5, 0.5, 9)}
    opt = optax.adam(0.05) if name == "adam" else optax.sgd(0.3, momentum=0.9)
    d, steps = 0.7, 5
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.5, num_steps=steps,
                            noise_multiplier=1.0, l2_clip_norm=0.5, ema_decay=d)
    out = dpsgd.train_many(jax.random.key(1), x, y, jnp.ones((2, 12), bool), cfg, model,
                           init_params=p0, optimizer=opt, observe_fn=_flat, perf=_QUIET)
    _, unravel = ravel_pytree(p0)

    @jax.jit
    def replay(p, s, u):
      upd, s = opt.update(unravel(u), s, p)
      return optax.apply_updates(p, upd), s

    for m in range(2):
      p, s = p0, opt.init(p0)
      ema = jnp.zeros_like(_flat(p0))
      for t in range(steps):
        p, s = replay(p, s, out.observations[m, t])
        ema = ema + d ** (steps - 1 - t) * (1 - d) * _flat(p)
      np.testing.assert_allclose(_flat(jax.tree.map(lambda a: a[m], out.params)), _flat(p),
                                 rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(_flat(jax.tree.map(lambda a: a[m], out.ema_params)),
                                 ema / (1 - d ** steps), rtol=1e-5, atol=1e-6)

  @pytest.mark.slow  # two more compiled programs
  def test_noiseless_unclipped_full_batch_equals_plain_optax(self):
    # sigma = 0, C = inf, q = 1: the privatized update is sum_i g_i / n, the mean
    # gradient, so DP-SGD with Adam is ordinary full-batch Adam.
    x, y = _data()
    model = models.mlp(9, (4,), 3)
    p0 = model.init(jax.random.key(5))
    opt = optax.adam(0.05)
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=1.0, num_steps=4,
                            noise_multiplier=0.0, l2_clip_norm=math.inf)
    out = dpsgd.train_many(jax.random.key(1), x, y, jnp.ones((1, 12), bool), cfg, model,
                           init_params=p0, optimizer=opt, perf=_QUIET)
    p, s = p0, opt.init(p0)
    loss = lambda q: jnp.mean(models.per_example_loss(model, q, x, y))  # noqa: E731
    for _ in range(4):
      upd, s = opt.update(jax.grad(loss)(p), s, p)
      p = optax.apply_updates(p, upd)
    np.testing.assert_allclose(_flat(jax.tree.map(lambda a: a[0], out.params)), _flat(p),
                               rtol=1e-5, atol=1e-6)


class EmaTest(absltest.TestCase):

  @pytest.mark.slow  # two compiled programs
  def test_ema_is_the_debiased_average_of_the_iterates_and_changes_nothing_else(self):
    # With plain SGD the iterates are p_t = p_(t-1) - lr * u_t for the recorded
    # privatized updates u_t, so the EMA's closed form can be rebuilt from what the
    # engine released alone: sum_t d^(T-t) (1 - d) p_t / (1 - d^T).
    x, y = _data()
    model = models.mlp(9, (4,), 3)
    p0 = model.init(jax.random.key(5))
    opt, lr, d, steps = optax.sgd(0.4), 0.4, 0.7, 6
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.5, num_steps=steps,
                            noise_multiplier=1.0, learning_rate=lr)
    keep = jnp.ones((2, 12), bool)
    kw = dict(init_params=p0, optimizer=opt, observe_fn=_flat, perf=_QUIET)
    plain = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model, **kw)
    out = dpsgd.train_many(jax.random.key(1), x, y, keep, dataclasses.replace(cfg, ema_decay=d),
                           model, **kw)
    self.assertIsNone(plain.ema_params)
    # The average is post-processing: the trained parameters are bit for bit the same.
    for a, b in zip(jax.tree.leaves(plain.params), jax.tree.leaves(out.params)):
      np.testing.assert_array_equal(a, b)
    for m in range(2):
      p = _flat(p0)
      want = jnp.zeros_like(p)
      for t in range(steps):
        p = p - lr * out.observations[m, t]
        want = want + d ** (steps - 1 - t) * (1 - d) * p
      want = want / (1 - d ** steps)
      np.testing.assert_allclose(_flat(jax.tree.map(lambda a: a[m], out.ema_params)), want,
                                 rtol=2e-5, atol=2e-6)
      np.testing.assert_allclose(_flat(jax.tree.map(lambda a: a[m], out.params)), p,
                                 rtol=2e-5, atol=2e-6)

  def test_bad_decay(self):
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.5, num_steps=1,
                            noise_multiplier=1.0)
    for bad in (1.0, -0.1, float("nan"), math.inf, True, "0.5"):
      with self.assertRaisesRegex(ValueError, "ema_decay"):
        dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.5, num_steps=1,
                          noise_multiplier=1.0, ema_decay=bad)
      with self.assertRaisesRegex(ValueError, "ema_decay"):   # nor through replace
        dataclasses.replace(cfg, ema_decay=bad)

  def test_ema_decay_zero_is_the_last_iterate(self):
    # d = 0: the average is p_T itself (one compiled program, the closed-form path).
    x, y = _data(k=2)
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.5, num_steps=3,
                            noise_multiplier=1.0, ema_decay=0.0)
    out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 12), bool), cfg,
                           models.logistic_regression(9), perf=_QUIET)
    np.testing.assert_allclose(out.ema_params["w"], out.params["w"], rtol=1e-6, atol=1e-7)


class AugmentationMultiplicityTest(absltest.TestCase):

  def test_shift_images_matches_a_loop(self):
    x = jax.random.uniform(jax.random.key(0), (2, 12))
    img = np.asarray(x).reshape(2, 3, 4, 1)
    for dy, dx in ((0, 0), (1, 0), (-1, 2), (2, -3), (-2, -1)):
      want = np.zeros_like(img)
      for i in range(3):
        for j in range(4):
          if 0 <= i - dy < 3 and 0 <= j - dx < 4:
            want[:, i, j] = img[:, i - dy, j - dx]
      np.testing.assert_array_equal(recipe.shift_images(x, (dy, dx), (3, 4, 1)),
                                    want.reshape(2, 12))

  def test_views_averaged_then_clipped_once(self):
    # Reference: per-example gradients of each shifted copy by vmap(grad), averaged
    # over the K views, then clipped; and each record's clipped contribution <= C.
    x, y = _data()
    model = models.mlp(9, (5,), 3)
    params = model.init(jax.random.key(2))
    shifts = ((0, 0), (1, 0), (0, -1), (-1, 1))
    path = jax.jit(functools.partial(recipe.augmented_clipping(model, shifts, _IMG),
                                     l2_clip_norm=0.05))
    c = 0.05
    w = (jnp.arange(12) % 3 != 1).astype(jnp.float32)
    got, norms = path(params, x, y, w)
    @jax.jit
    def reference(params, x, y):
      views = [vmap_clipping.per_example_grads(model, params,
                                               recipe.shift_images(x, s, _IMG), y)
               for s in shifts]
      g = jax.tree.map(lambda *v: sum(v) / len(v), *views)
      return jax.vmap(_flat)(g)
    g_flat = reference(params, x, y)
    want_norms = np.linalg.norm(np.asarray(g_flat, np.float64), axis=1)
    np.testing.assert_allclose(norms, want_norms, rtol=1e-5)
    factor = np.minimum(1.0, c / want_norms) * np.asarray(w)
    np.testing.assert_allclose(_flat(got), factor @ np.asarray(g_flat, np.float64),
                               rtol=1e-4, atol=1e-7)
    # One record at a time: its whole contribution is at most C (here, exactly C: all
    # of these norms exceed C), however many views it has.
    self.assertTrue(np.all(want_norms > c))
    for i in range(12):
      one, _ = path(params, x, y, jnp.zeros(12).at[i].set(1.0))
      self.assertAlmostEqual(float(jnp.linalg.norm(_flat(one))), c, delta=1e-6)

  @pytest.mark.slow  # two compiled programs
  def test_identity_view_is_bit_identical_to_the_plain_vmap_path(self):
    x, y = _data()
    model = models.mlp(9, (4,), 3)
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.5, num_steps=3,
                            noise_multiplier=1.0, l2_clip_norm=0.3, learning_rate=0.5)
    keep = jnp.ones((2, 12), bool)
    a = dpsgd.train_many(jax.random.key(4), x, y, keep, cfg, model,
                         clipping=functools.partial(vmap_clipping.clipped_grad_sum, model),
                         perf=_QUIET)
    b = dpsgd.train_many(jax.random.key(4), x, y, keep, cfg, model,
                         clipping=recipe.augmented_clipping(model, ((0, 0),), _IMG),
                         perf=_QUIET)
    for u, v in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
      np.testing.assert_array_equal(u, v)

  def test_bad_arguments(self):
    model = models.mlp(9, (), 3)
    with self.assertRaisesRegex(ValueError, "shifts"):
      recipe.augmented_clipping(model, (), _IMG)
    with self.assertRaisesRegex(ValueError, "shifts"):
      recipe.augmented_clipping(model, ((3, 0),), _IMG)
    with self.assertRaisesRegex(ValueError, "shifts"):
      recipe.augmented_clipping(model, ((0,),), _IMG)
    with self.assertRaisesRegex(TypeError, "shifts"):
      recipe.augmented_clipping(model, "up", _IMG)
    with self.assertRaisesRegex(ValueError, "image_shape"):
      recipe.augmented_clipping(model, ((0, 0),), (3, 3))
    with self.assertRaisesRegex(ValueError, "x_BxF"):
      recipe.augmented_clipping(model, ((0, 0),), (2, 2, 1))(
          model.init(jax.random.key(0)), jnp.ones((2, 9)), jnp.zeros(2, int), jnp.ones(2), 1.0)


class GroupNormTest(absltest.TestCase):

  def test_group_norm_matches_numpy_and_is_per_example(self):
    a = np.asarray(jax.random.normal(jax.random.key(0), (3, 2, 2, 6)) * 3 + 1, np.float64)
    gamma = np.linspace(0.5, 2.0, 6)
    beta = np.linspace(-1.0, 1.0, 6)
    got = models.group_norm(a.astype(np.float32), gamma.astype(np.float32),
                            beta.astype(np.float32), 3)
    g = a.reshape(3, 2, 2, 3, 2)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    want = ((g - mean) / np.sqrt(var + 1e-5)).reshape(3, 2, 2, 6) * gamma + beta
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # Example 0's output does not depend on the other examples (unlike batch norm).
    other = a.copy()
    other[1:] *= 10.0
    np.testing.assert_array_equal(
        models.group_norm(other.astype(np.float32), gamma.astype(np.float32),
                          beta.astype(np.float32), 3)[0], got[0])

  def test_default_path_clips_group_norm_cnn_correctly(self):
    # A group-norm CNN is not ghost-clipped (ghost knows dense and conv layers
    # only); its default path must equal per-example clipping done one record at
    # a time with jax.grad.
    net = models.cnn((4, 4, 1), (4,), 3, groups=2)
    self.assertEqual(net.kind, "custom")
    path = clipping.path_for(net)
    self.assertEqual(path.name, "vmap_two_pass")
    x = jax.random.uniform(jax.random.key(1), (6, 16))
    y = jnp.arange(6) % 3
    params = net.init(jax.random.key(3))
    params["conv"][0]["gamma"] = params["conv"][0]["gamma"] * 1.5   # not the identity
    w = jnp.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    c = 0.2
    got, norms = jax.jit(path.fn, static_argnums=4)(params, x, y, w, c)
    grad_one = jax.jit(jax.grad(lambda p, xi, yi: models.per_example_loss(net, p, xi, yi)[0]))
    want = 0.0
    for i in range(6):
      gi = _flat(grad_one(params, x[i:i + 1], y[i:i + 1]))
      ni = float(jnp.linalg.norm(gi))
      self.assertAlmostEqual(float(norms[i]), ni, delta=1e-4 * ni)
      want = want + float(w[i]) * min(1.0, c / ni) * gi
    np.testing.assert_allclose(_flat(got), want, rtol=1e-4, atol=1e-6)

  def test_plain_cnn_unchanged_and_bad_groups(self):
    self.assertIs(models.cnn((8, 8, 1), (8, 16)), models.cnn((8, 8, 1), (8, 16), groups=None))
    self.assertEqual(models.cnn((8, 8, 1), (8, 16)).kind, "cnn")
    with self.assertRaisesRegex(ValueError, "groups"):
      models.cnn((8, 8, 1), (8, 6), groups=4)
    with self.assertRaisesRegex(ValueError, "groups"):
      models.cnn((8, 8, 1), (8,), groups=0)
    with self.assertRaisesRegex(ValueError, "groups"):
      models.group_norm(jnp.ones((1, 2, 2, 3)), jnp.ones(3), jnp.ones(3), 2)


class NoiseForBatchSizesTest(absltest.TestCase):

  def test_sigma_spends_epsilon_and_the_total_noise_is_nearly_constant(self):
    n, eps, delta, epochs = 1000, 1.0, 1e-5, 20
    sizes = [125, 250, 500, 1000]
    rows = recipe.noise_for_batch_sizes(eps, delta, epochs, n, sizes)
    for r, b in zip(rows, sizes):
      self.assertEqual(r.num_steps, round(epochs * n / b))
      self.assertAlmostEqual(r.sampling_prob, b / n)
      self.assertAlmostEqual(r.noise_per_example, r.noise_multiplier / b)
      got = accounting.dpsgd_epsilon(r.noise_multiplier, b / n, r.num_steps, delta)
      self.assertLessEqual(got, eps * (1 + 1e-6))
      self.assertGreater(got, eps * 0.99)
    # sigma is large here (> 5), where epsilon depends on eta = sigma / (q sqrt(T))
    # alone to first order in q^2 / sigma^2 (module docstring): eta varies by a few
    # percent across an 8-fold range of B, while sigma / B halves for each 4-fold
    # increase of B (sigma ~ sqrt(B)).
    etas = np.array([r.total_amount_of_noise for r in rows])
    self.assertLess(etas.max() / etas.min(), 1.1)
    ratio = rows[0].noise_per_example / rows[2].noise_per_example
    self.assertAlmostEqual(ratio, 2.0, delta=0.2)

  def test_bad_arguments(self):
    for kw, name in ((dict(target_epsilon=0.0), "target_epsilon"), (dict(delta=1.0), "delta"),
                     (dict(epochs=0.0), "epochs"), (dict(dataset_size=0), "dataset_size"),
                     (dict(batch_sizes=[2000]), "batch_sizes"),
                     (dict(batch_sizes=[]), "batch_sizes")):
      args = dict(target_epsilon=1.0, delta=1e-5, epochs=1.0, dataset_size=100,
                  batch_sizes=[10])
      args.update(kw)
      with self.subTest(name), self.assertRaisesRegex(ValueError, name):
        recipe.noise_for_batch_sizes(**args)


class CenterOnPublicTest(absltest.TestCase):

  def test_public_mean_removed_and_each_row_depends_on_itself_only(self):
    rng = np.random.default_rng(0)
    pub = rng.uniform(size=(7, 5)).astype(np.float32)
    x = rng.uniform(size=(9, 5)).astype(np.float32)
    out = np.asarray(recipe.center_on_public(pub, x))
    np.testing.assert_allclose(out, x - pub.astype(np.float64).mean(0), atol=1e-6)
    np.testing.assert_allclose(np.asarray(recipe.center_on_public(pub, pub)).mean(0), 0.0,
                               atol=1e-6)
    # Privacy contract: replacing one private record changes only its own row.
    x2 = x.copy()
    x2[3] = 100.0
    out2 = np.asarray(recipe.center_on_public(pub, x2))
    np.testing.assert_array_equal(np.delete(out2, 3, 0), np.delete(out, 3, 0))
    # Images keep their shape.
    img = rng.uniform(size=(4, 2, 2, 1)).astype(np.float32)
    self.assertEqual(recipe.center_on_public(img, img[:2]).shape, (2, 2, 2, 1))

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "x_NxF has rows of shape"):
      recipe.center_on_public(np.ones((3, 4)), np.ones((2, 5)))
    with self.assertRaisesRegex(ValueError, "x_public_PxF"):
      recipe.center_on_public(np.zeros((0, 4)), np.ones((2, 4)))
    with self.assertRaisesRegex(ValueError, "x_NxF"):
      recipe.center_on_public(np.ones((3, 4)), np.full((2, 4), np.nan))


if __name__ == "__main__":
  absltest.main()
