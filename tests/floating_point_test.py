"""dpjax.attacks.floating_point: exact reachability tests against the real samplers.

The attacks are exact, so the properties checked are exact too: an output drawn
under an input is never flagged under that input (0 false positives over every
draw), the bisection agrees with brute force over all 2^23 atoms, and outputs of the
other hypothesis are flagged at the rate the lattice implies.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import dpsgd, mechanisms, models, prng
from dpjax import privatizer as privatizer_lib
from dpjax.attacks import floating_point as fp
from dpjax.audit import canary

_QUIET = dpsgd.PerformanceFlags(progress=False)


def _naive_laplace(key, value, epsilon, k):
  keys = jax.random.split(key, k)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return np.asarray(jax.vmap(
        lambda kk: mechanisms.laplace_mechanism(kk, value, epsilon, secure=False))(keys))


class NaiveLaplaceTest(parameterized.TestCase):

  @parameterized.named_parameters(("key0", 0), ("key7", 7))
  def test_noise_is_jax_random_laplace_bit_for_bit(self, seed):
    key = jax.random.key(seed)
    bits = jax.random.bits(key, (1 << 14,), jnp.uint32)
    ours = np.asarray(fp.naive_laplace_noise(bits))
    theirs = np.asarray(jax.random.laplace(key, (1 << 14,), jnp.float32))
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))

  def test_atoms_cover_every_draw(self):
    atoms = np.unique(fp.naive_laplace_atoms())
    draws = np.asarray(jax.random.laplace(jax.random.key(3), (1 << 14,), jnp.float32))
    self.assertTrue(np.isin(draws, atoms).all())
    self.assertEqual(fp.naive_laplace_atoms().shape, (1 << 23,))

  @parameterized.named_parameters(
      ("count_eps1", 0.0, 1.0, 1.0, 0.5, 1.0), ("count_eps05", 5.0, 0.5, 6.0, 0.5, 1.0),
      ("fraction", 0.3, 2.0, 0.7, 0.5, 1.0),
      # ulp(1000) = 6.1e-5 is coarser than the atoms' spacing there: few gaps left.
      ("large", 1000.0, 1.0, 1001.0, 1e-4, 0.05))
  def test_no_false_positive_and_neighbour_flagged(self, x, eps, x_neighbour, low, high):
    b = mechanisms.laplace_scale(eps)
    y = _naive_laplace(jax.random.key(11), x, eps, 4000)
    # Exactness: every release of x is reachable from x (0 false positives in 4000).
    self.assertTrue(fp.laplace_reachable(y, x, b).all())
    # Mironov: releases of x impossible from the neighbour. Measured ~0.9 near 0 and
    # 0.0035 at x = 1000 (4000 draws, this key).
    flagged = np.mean(~fp.laplace_reachable(y, x_neighbour, b))
    self.assertBetween(flagged, low, high)

  def test_crafted_output_off_the_image_is_flagged(self):
    image = fp.naive_laplace_outputs(1.0, 1.0)
    # A float32 strictly between two consecutive reachable outputs is impossible.
    gaps = np.nonzero(np.nextafter(image[:-1], np.float32(np.inf)) < image[1:])[0]
    self.assertGreater(gaps.size, 0)
    y = np.nextafter(image[gaps[:50]], np.float32(np.inf))
    self.assertFalse(fp.laplace_reachable(y, 1.0, 1.0).any())
    self.assertTrue(fp.laplace_reachable(image[gaps[:50]], 1.0, 1.0).all())

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "^outputs"):
      fp.laplace_reachable([0.1], 0.0, 1.0)           # 0.1 is no float32 value
    with self.assertRaisesRegex(ValueError, "^outputs"):
      fp.laplace_reachable(np.array([np.nan], np.float32), 0.0, 1.0)
    with self.assertRaisesRegex(ValueError, "^scale"):
      fp.naive_laplace_outputs(0.0, 0.0)
    with self.assertRaisesRegex(ValueError, "^value"):
      fp.naive_laplace_outputs(np.inf, 1.0)


class GaussianLatticeTest(parameterized.TestCase):

  def test_atoms_cover_every_body_draw(self):
    z = np.asarray(prng.standard_normal(jax.random.key(5), (1 << 15,)))
    atoms = fp.normal_body_atoms()
    self.assertEqual(atoms.size, (1 << 23) - 2)
    self.assertTrue(np.all(np.diff(atoms) >= 0))
    body = (z >= atoms[0]) & (z <= atoms[-1])
    self.assertTrue(np.isin(z[body], atoms).all())

  @parameterized.named_parameters(("sigma1_B8", 1.0, 8.0, "separate"),
                                  ("sigma1.3_B6.2", 1.3, 6.2, "separate"),
                                  ("sigma4_B30.2_fused", 4.0, 30.2, "fused"))
  def test_bisection_equals_brute_force(self, std, b, rounding):
    """Every atom's output is found; the flagged ones are absent from the full image."""
    atoms = fp.normal_body_atoms()
    beta, s32 = np.float32(1.0 / b), np.float32(std)
    rng = np.random.default_rng(0)
    z = atoms[rng.integers(0, atoms.size, 400)]
    one = np.full(z.shape, np.float32(1.0))
    o_without = beta * (np.float32(0.0) + s32 * z)
    o_with = beta * (fp._fma32(s32, z, one) if rounding == "fused" else one + s32 * z)
    self.assertTrue(fp.gaussian_update_reachable(o_without, 0.0, std, b, rounding).all())
    self.assertTrue(fp.gaussian_update_reachable(o_with, 1.0, std, b, rounding).all())
    reach = fp.gaussian_update_reachable(o_with, 0.0, std, b, rounding)
    image = np.unique(beta * (np.float32(0.0) + s32 * atoms))
    in_range = (o_with >= image[0]) & (o_with <= image[-1])
    np.testing.assert_array_equal(reach[in_range], np.isin(o_with[in_range], image))
    self.assertGreater(np.mean(~reach), 0.5)    # the lattice: most are impossible

  @parameterized.named_parameters(("constant_std", False), ("traced_std", True))
  def test_privatizer_updates_are_reachable_from_their_sum(self, traced):
    """The real dp_aggregate (jitted, vmapped) on nonzero sums: the rounding model holds.

    With a compile-time std, XLA:CPU fuses s + std z into an FMA (the "separate"
    model alone misses about a quarter of these updates); "either" covers both.
    """
    std, b = 1.7, 12.3
    rng = np.random.default_rng(1)
    s = rng.normal(size=(64, 8)).astype(np.float32)

    @jax.jit
    def update(key, s_row, std_arg):
      tx = privatizer_lib.dp_aggregate(std_arg if traced else jnp.float32(std), b, key)
      return tx.update({"w": s_row}, tx.init({"w": s_row}))[0]["w"]
    keys = jax.random.split(jax.random.key(2), 64)
    o = np.asarray(jax.vmap(update, in_axes=(0, 0, None))(keys, jnp.asarray(s),
                                                         jnp.float32(std)))
    self.assertTrue(fp.gaussian_update_reachable(o, s, std, b).all())
    self.assertGreater(np.mean(~fp.gaussian_update_reachable(o, s + 1.0, std, b)), 0.5)

  def test_fused_multiply_add_is_exact(self):
    # A double-rounding case: a b + c = 2^30 + 2^6 + 2^-40, just above the midpoint
    # of 2^30 and 2^30 + 2^7; float64 rounds it onto the midpoint (then to 2^30).
    a, b, c = np.float32(-64.0 * (1 + 2.0 ** -23)), np.float32(1 - 2.0 ** -23), np.float32(
        2.0 ** 30 + 2.0 ** 7)
    self.assertEqual(float(fp._fma32(a, np.array([b]), np.array([c]))[0]), 2.0 ** 30 + 2.0 ** 7)
    self.assertEqual(float(np.float32(np.float64(a) * np.float64(b) + np.float64(c))), 2.0 ** 30)
    from fractions import Fraction   # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    a = np.float32(1.3)
    bb = rng.normal(size=300).astype(np.float32)
    cc = (rng.normal(size=300) * 10.0 ** rng.integers(-8, 8, 300)).astype(np.float32)
    got = fp._fma32(a, bb, cc)
    for g, b1, c1 in zip(got, bb, cc):
      exact = Fraction(float(a)) * Fraction(float(b1)) + Fraction(float(c1))
      lo = np.float32(float(exact))                       # within an ulp; pick the nearest
      cands = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
      best = min(cands, key=lambda v: (abs(Fraction(float(v)) - exact),
                                       int(np.asarray(v).view(np.uint32)) & 1))
      self.assertEqual(g, best)

  def test_engine_canary_never_flagged_out_and_flagged_in(self):
    """DP-SGD models without the gradient canary: 0 flagged; with it: most flagged."""
    n, d, m, q, t = 12, 3, 24, 0.5, 10
    x = jnp.concatenate([jax.random.normal(jax.random.key(0), (n, d - 1)),
                         jnp.zeros((n, 1))], axis=1)
    y = (x[:, 0] > 0).astype(jnp.int32)
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=q, num_steps=t, noise_multiplier=1.1)
    canary_in = np.arange(m) % 2 == 0
    out = dpsgd.train_many(jax.random.key(4), x, y, jnp.ones((m, n), bool), cfg,
                           models.logistic_regression(d),
                           observe_fn=canary.observe_last_coordinate(),
                           fixed_gradients=dpsgd.FixedGradients(
                               canary.gradient_canaries(d, 1, 1.0),
                               jnp.asarray(canary_in)[:, None]),
                           perf=_QUIET)
    obs = np.asarray(out.observations)
    impossible, flagged = fp.lattice_canary_flags(obs, 0.0, 1.1, cfg.expected_batch_size)
    self.assertEqual(impossible.shape, (m, t))
    self.assertFalse(flagged[~canary_in].any())
    self.assertFalse(impossible[~canary_in].any())
    # P(a model escapes) = (1 - q p)^T with p ~ 0.85 impossible per sampled step: ~6e-4.
    self.assertGreaterEqual(flagged[canary_in].mean(), 0.9)

  def test_tails_are_never_ruled_out_and_zero_noise(self):
    atoms = fp.normal_body_atoms()
    beyond = np.float32(1.0) * (np.float32(0.0) + np.float32(1.0) * np.float32(atoms[-1] + 1.0))
    self.assertTrue(fp.gaussian_update_reachable(beyond, 0.0, 1.0, 1.0))
    self.assertTrue(fp.gaussian_update_reachable(np.float32(0.25), 1.0, 0.0, 4.0))
    self.assertFalse(fp.gaussian_update_reachable(np.float32(0.5), 1.0, 0.0, 4.0))

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "^observed"):
      fp.gaussian_update_reachable([0.1], 0.0, 1.0, 2.0)
    with self.assertRaisesRegex(ValueError, "^noise_stddev"):
      fp.gaussian_update_reachable(np.float32(0.5), 0.0, -1.0, 2.0)
    with self.assertRaisesRegex(ValueError, "^expected_batch_size"):
      fp.gaussian_update_reachable(np.float32(0.5), 0.0, 1.0, 0.0)
    with self.assertRaisesRegex(ValueError, "^rounding"):
      fp.gaussian_update_reachable(np.float32(0.5), 0.0, 1.0, 2.0, rounding="exact")
    with self.assertRaisesRegex(ValueError, "^observed_MxT"):
      fp.lattice_canary_flags(np.zeros(3, np.float32), 0.0, 1.0, 2.0)


class GridTest(absltest.TestCase):

  def test_defended_laplace_reachable_from_both_inputs(self):
    eps = 1.0
    gamma = mechanisms.laplace_grid(eps)
    keys = jax.random.split(jax.random.key(9), 2000)
    y = np.asarray(jax.vmap(lambda k: mechanisms.laplace_mechanism(k, 0.0, eps))(keys))
    for x in (0.0, 1.0):
      self.assertTrue(fp.grid_reachable(y, round(x / gamma), gamma).all())

  def test_crafted_grid_values(self):
    g = 2.0 ** -10
    on = np.float32(g) * np.arange(-5, 6, dtype=np.float32)
    self.assertTrue(fp.grid_reachable(on, 0, g, max_abs=5).all())
    self.assertFalse(fp.grid_reachable(on + np.float32(g / 2), 0, g).any())   # off the grid
    np.testing.assert_array_equal(fp.grid_reachable(on, 0, g, max_abs=4),
                                  np.abs(np.arange(-5, 6)) <= 4)              # beyond support
    beta = np.float32(1.0 / 7.3)
    k = np.arange(-3000, 3000, 7, dtype=np.float32)
    o = beta * (np.float32(g) * k)
    self.assertTrue(fp.grid_reachable(o, 0, g, expected_batch_size=7.3).all())
    self.assertFalse(fp.grid_reachable(o, 10_000, g, max_abs=1000,
                                       expected_batch_size=7.3).any())

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "^center_units"):
      fp.grid_reachable(np.float32(0.0), 0.5, 1.0)
    with self.assertRaisesRegex(ValueError, "^grid"):
      fp.grid_reachable(np.float32(0.0), 0, -1.0)
    with self.assertRaisesRegex(ValueError, "^max_abs"):
      fp.grid_reachable(np.float32(0.0), 0, 1.0, max_abs=-1)


if __name__ == "__main__":
  absltest.main()
