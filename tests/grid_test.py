"""Tests for dpjax.clipping.grid: the int32 grid sum, its sensitivity bound, its guards."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from dpjax import clipping
from dpjax import models
from dpjax.clipping import grid as grid_lib
from dpjax.clipping import vmap
from tests import helpers


class GridSumTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("logreg", models.logistic_regression(4, l2=0.1), 2.0 ** -6),
      ("mlp", models.mlp(4, hidden=(3,), num_classes=2), 2.0 ** -8))
  def test_sum_equals_rounded_vmap_clipped_gradients(self, model, gamma):
    # By hand: per-example gradients by vmap(grad), clipped to C, divided by gamma,
    # rounded, summed over the mask in int64 (NumPy): equal to the path's int32 sum.
    x, y = helpers.binary_data(n=12, d=4)
    params = model.init(jax.random.key(1))
    w = (jnp.arange(12) % 3 != 0).astype(jnp.float32)
    c = 0.7
    s, norms = grid_lib.path(model, gamma)(params, x, y, w, c)
    g = vmap.per_example_grads(model, params, x, y)
    leaves = jax.tree.leaves(g)
    n = np.sqrt(sum(np.sum(np.asarray(l, np.float64).reshape(12, -1) ** 2, axis=1)
                    for l in leaves))
    np.testing.assert_allclose(norms, n, rtol=1e-4)
    a = np.minimum(1.0, c / n)
    for got, l in zip(jax.tree.leaves(s), leaves):
      self.assertEqual(got.dtype, jnp.int32)
      r = np.round(np.asarray(l, np.float64) * a.reshape((-1,) + (1,) * (l.ndim - 1)) / gamma)
      want = np.tensordot(np.asarray(w, np.float64), r, axes=1)
      # float32 vs float64 rounding of values within 1e-6 of a half: at most 1 unit.
      self.assertLessEqual(np.abs(np.asarray(got) - want).max(), 1)
      self.assertGreater(np.abs(want).max(), 10)   # not trivially zero

  def test_logistic_fast_path_equals_round_clipped(self):
    # Logistic regression without L2 term never forms the [B, P] gradients; its sum must
    # equal round_clipped of c_i = (a_i r_i) x_i summed over the mask, for features from
    # 1e-3 to 1e21 (norms beyond float32 squares) and with inf / NaN features (under jit,
    # where inputs are not validated).
    model = models.logistic_regression(7)
    rng = np.random.default_rng(0)
    for gamma, c in ((2.0 ** -10, 1.0), (2.0 ** -3, 0.5), (1.0, 3.0)):
      fast = jax.jit(lambda w, x, y, m, g=gamma, c=c: grid_lib.grid_clipped_sum(
          model, g, {"w": w}, x, y, m, c))

      def by_definition(w, x, y, m, gamma=gamma, c=c):
        r = jax.nn.sigmoid(x @ w) - y
        norms = jnp.where(r == 0, 0.0, jnp.abs(r) * vmap.tree_norms([x]))
        a = vmap.clip_factor(jnp.where(jnp.isnan(norms), jnp.inf, norms), c)
        v = grid_lib.round_clipped({"w": (r * a)[:, None] * x}, gamma, c)["w"]
        return np.sum(np.asarray(v, np.int64) * (np.asarray(m) > 0.5)[:, None], axis=0)
      for trial in range(12):
        x = rng.standard_normal((9, 7)).astype(np.float32) * 10.0 ** rng.uniform(-3, 21)
        if trial % 3 == 0:
          x[rng.integers(9), rng.integers(7)] = rng.choice([np.inf, -np.inf, np.nan])
        y = rng.integers(0, 2, 9).astype(np.int32)
        w = (rng.standard_normal(7) * 10.0 ** rng.uniform(-3, 1)).astype(np.float32)
        m = (rng.random(9) < 0.6).astype(np.float32)
        self.assertTrue(grid_lib._logistic_fast(model, gamma, c, jnp.asarray(x)))
        s, _ = fast(w, x, y, m)
        np.testing.assert_array_equal(s["w"], by_definition(w, x, y, m))
    # Grids fine enough for squares beyond 2^44 take the general path.
    self.assertFalse(grid_lib._logistic_fast(model, 2.0 ** -30, 1.0, jnp.ones((9, 7))))

  def test_each_example_within_sensitivity(self):
    # ||r_i||_2 <= C / gamma + sqrt(P) / 2 for every record, also for gradients
    # far beyond the clip norm (x scaled by 1e4) and with a coarse grid.
    model = models.logistic_regression(6)
    x, y = helpers.binary_data(n=40, d=6, scale=1e4)
    params = model.init(jax.random.key(2))
    for gamma in (2.0 ** -3, 2.0 ** -10):
      fn = jax.jit(lambda w, p=grid_lib.path(model, gamma): p(params, x, y, w, 1.0))
      for i in range(40):
        s, _ = fn(jnp.zeros(40).at[i].set(1.0))
        r = np.asarray(s["w"], np.float64)
        self.assertLessEqual(np.linalg.norm(r), grid_lib.grid_sensitivity(1.0, gamma, 6))
        # Honest records are kept: ||r_i|| >= ||c_i|| / gamma - sqrt(P)/2 (clipped, ~C).
        self.assertGreater(np.linalg.norm(r), 0.999 / gamma - math.sqrt(6) / 2)

  def test_finite_gradients_beyond_float32_squares_are_clipped_not_dropped(self):
    # Features of 1e20: ||g_i||^2 overflows float32, but the norm is taken
    # overflow-safely, so each record is clipped to C and kept.
    model = models.logistic_regression(3)
    x, y = helpers.binary_data(n=6, d=3, scale=1e20)
    p = grid_lib.path(model, 2.0 ** -6)
    for i in range(6):
      s, norms = p({"w": jnp.zeros(3)}, x, y, jnp.zeros(6).at[i].set(1.0), 1.0)
      self.assertTrue(np.isfinite(float(norms[i])))
      r = np.linalg.norm(np.asarray(s["w"], np.float64))
      self.assertLessEqual(r, grid_lib.grid_sensitivity(1.0, 2.0 ** -6, 3))
      self.assertGreater(r, 64 - math.sqrt(3) / 2)

  def test_norm_threshold_rejects_what_may_exceed(self):
    # A vector whose exact squared norm exceeds Delta^2 is zeroed; one well inside
    # is kept; non-finite entries zero the example.
    gamma, c = 1.0, 10.0
    delta = grid_lib.grid_sensitivity(c, gamma, 4)            # 10 + 1 = 11
    inside = jnp.array([[5.0, 5.0, 5.0, 4.0]])                  # norm 9.5
    outside = jnp.array([[11.0, 1.0, 0.0, 0.0]])                # norm 11.05 > 11
    bad = jnp.array([[jnp.nan, 0.0, 0.0, 0.0]])
    out = grid_lib.round_clipped({"w": jnp.concatenate([inside, outside, bad])}, gamma, c)
    np.testing.assert_array_equal(out["w"], [[5, 5, 5, 4], [0, 0, 0, 0], [0, 0, 0, 0]])
    self.assertLessEqual(float(grid_lib.norm_threshold(delta, 4)), delta ** 2)
    self.assertGreater(float(grid_lib.norm_threshold(delta, 4)), delta ** 2 * (1 - 1e-6))

  def test_vmap_over_models_equals_loop(self):
    model = models.logistic_regression(3)
    x, y = helpers.binary_data(n=8, d=3)
    p = grid_lib.path(model, 2.0 ** -5)
    ws = jnp.stack([jax.random.normal(k, (3,)) for k in jax.random.split(jax.random.key(3), 3)])
    mask = jnp.ones(8)
    batched = jax.vmap(lambda w: p({"w": w}, x, y, mask, 1.0)[0]["w"])(ws)
    looped = np.stack([np.asarray(p({"w": w}, x, y, mask, 1.0)[0]["w"]) for w in ws])
    np.testing.assert_array_equal(batched, looped)

  def test_logistic_fast_path_vmapped_equals_definition_with_and_without_rejections(self):
    # Under vmap the sum skips the per-record norm checks when a bound proves them all
    # passing; benign features take that branch, and flat records whose rounding reaches
    # Delta exactly (gamma = 1, C = 3, x_d = +-3, w = 0: v = (+-2, ...), |v|^2 = 16 = Delta^2
    # > the float threshold) force the checked one. Both must equal the definition.
    model = models.logistic_regression(4)
    rng = np.random.default_rng(5)
    gamma, c = 1.0, 3.0
    benign = (rng.standard_normal((12, 4)) * 2.0).astype(np.float32)
    flat = np.where(rng.random((4, 4)) < 0.5, -3.0, 3.0).astype(np.float32)
    y = rng.integers(0, 2, 16).astype(np.int32)
    ws = np.concatenate([np.zeros((1, 4)), rng.standard_normal((4, 4)) * 0.1]).astype(np.float32)
    masks = (rng.random((5, 16)) < 0.7).astype(np.float32)
    masks[0] = 1.0
    sum_fn = lambda w, x, yy, m: grid_lib.grid_clipped_sum(model, gamma, {"w": w}, x, yy, m, c)
    batched = jax.jit(jax.vmap(sum_fn, in_axes=(0, None, None, 0)))
    rejected = 0
    for x, yy in ((benign, y[:12]), (np.concatenate([benign, flat]), y)):
      n = x.shape[0]
      got, _ = batched(ws, x, yy, masks[:, :n])
      for i in range(5):
        r = jax.nn.sigmoid(x @ ws[i]) - yy
        a = vmap.clip_factor(jnp.abs(r) * vmap.tree_norms([jnp.asarray(x)]), c)
        v = np.asarray(grid_lib.round_clipped({"w": (r * a)[:, None] * x}, gamma, c)["w"])
        want = np.sum(v * (masks[i, :n] > 0.5)[:, None], axis=0)
        np.testing.assert_array_equal(got["w"][i], want)
        rejected += int(np.sum(~np.any(v != 0, axis=1) & (np.abs(np.asarray(r)) > 0)))
    self.assertGreater(rejected, 0)   # the flat records were zeroed by the check

  def test_path_is_memoised_and_a_clipping_path(self):
    model = models.logistic_regression(3)
    p = grid_lib.path(model, 2.0 ** -5)
    self.assertIs(p, grid_lib.path(model, 2.0 ** -5))
    self.assertIsInstance(p, clipping.ClippingPath)
    self.assertEqual((p.name, p.grid, p.per_example_grad_memory), ("grid", 2.0 ** -5, True))

  @parameterized.named_parameters(
      ("ghost_path", lambda: grid_lib.path(clipping.path_for(models.mlp(3, hidden=(2,))), 0.5),
       TypeError, "ghost"),
      ("grid", lambda: grid_lib.path(models.logistic_regression(2), 0.3), ValueError, "grid"),
      ("clip_inf", lambda: grid_lib.path(models.logistic_regression(2), 0.5)(
          {"w": jnp.zeros(2)}, jnp.ones((1, 2)), jnp.zeros(1, jnp.int32), jnp.ones(1),
          math.inf), ValueError, "l2_clip_norm"),
      ("num_params", lambda: grid_lib.grid_sensitivity(1.0, 0.5, 0), ValueError, "num_params"))
  def test_bad_input(self, fn, err, name):
    with self.assertRaisesRegex(err, name):
      fn()


if __name__ == "__main__":
  absltest.main()
