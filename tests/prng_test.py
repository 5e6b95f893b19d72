"""Tests for dpjax.prng: threefry streams bit-identical to jax.random; Bernoulli and normal draws."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import prng


class RandomStreamTest(parameterized.TestCase):
  """The unrolled threefry samplers reproduce jax's streams bit for bit."""

  def test_threefry_known_answers(self):
    # Random123's known-answer vectors for Threefry-2x32-20.
    u = np.uint32
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for key, ctr, want in cases:
      got = prng.threefry2x32(u(key[0]), u(key[1]), u(ctr[0]), u(ctr[1]))
      self.assertEqual([int(v) for v in got], list(want))

  def test_threefry_equals_jax_primitive(self):
    k0, k1 = jax.random.key_data(jax.random.key(11))
    x = jax.random.bits(jax.random.key(12), (2, 1000), jnp.uint32)
    ours = prng.threefry2x32(k0, k1, x[0], x[1])
    ref = jax.extend.random.threefry_2x32((k0, k1), x.reshape(-1)).reshape(2, 1000)
    np.testing.assert_array_equal(np.stack(ours), ref)

  def test_fold_in_and_split_equal_jax(self):
    for seed in (0, 7):
      k = jax.random.key(seed)
      for t in (0, 1, 499, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1):
        np.testing.assert_array_equal(jax.random.key_data(prng.fold_in(k, t)),
                                      jax.random.key_data(jax.random.fold_in(k, t)))
        if t < 2 ** 31:
          f = jax.jit(lambda kk, tt: jax.random.key_data(prng.fold_in(kk, tt)))
          np.testing.assert_array_equal(f(k, jnp.int32(t)),
                                        jax.random.key_data(jax.random.fold_in(k, t)))
      with self.assertRaises(OverflowError):  # as jax.random.fold_in
        prng.fold_in(k, -1)
      for num in (1, 2, 5):
        np.testing.assert_array_equal(jax.random.key_data(prng.split(k, num)),
                                      jax.random.key_data(jax.random.split(k, num)))

  @parameterized.parameters(1, 2, 3, 56, 75, 150, 151)
  def test_samplers_consume_random_bits(self, n):
    keys = jax.random.split(jax.random.key(n), 3)
    for k in keys:
      bits = prng.random_bits(k, n)
      np.testing.assert_array_equal(
          bits, jax.extend.random.threefry_2x32(tuple(jax.random.key_data(k)),
                                                jnp.arange(n, dtype=jnp.uint32)))
      f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
      u = jnp.maximum(np.nextafter(np.float32(-1), np.float32(0)), 2.0 * f - 1.0)
      want = np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)
      np.testing.assert_array_equal(prng.standard_normal(k, (n,)), want)
      for q in (0.01, 0.2):
        w = prng.mask_bit_width(q)
        words = prng.random_bits(k, (n + 1) // 2 if w == 16 else n)
        if w == 16:
          words = jnp.concatenate([words >> 16, words & 0xFFFF])
        want_mask = words[:n] < prng.bernoulli_threshold(q, w)
        np.testing.assert_array_equal(prng.poisson_mask(k, q, n), want_mask)
    # Under jit + vmap (the engine's setting) too.
    vm = jax.jit(jax.vmap(lambda kk: (prng.poisson_mask(kk, 0.2, n),
                                      prng.standard_normal(kk, (n,)))))(keys)
    for i, k in enumerate(keys):
      np.testing.assert_array_equal(vm[0][i], prng.poisson_mask(k, 0.2, n))
      np.testing.assert_array_equal(vm[1][i], prng.standard_normal(k, (n,)))

  def test_normal_bits_survive_float_packing(self):
    # standard_normal carries raw words as float32 bit patterns (NaNs included:
    # ~1/256 of words); any canonicalisation would change the samples.
    k = jax.random.key(21)
    n = 100_001
    bits = prng.random_bits(k, n)
    self.assertGreater(int(jnp.sum(((bits >> 23) & 0xFF) == 0xFF)), 100)
    f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
    u = jnp.maximum(np.nextafter(np.float32(-1), np.float32(0)), 2.0 * f - 1.0)
    want = np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)
    got = jax.jit(jax.vmap(lambda kk: prng.standard_normal(kk, (n,))))(k[None])[0]
    np.testing.assert_array_equal(got, want)

  def test_normal_shape_and_non_threefry_keys(self):
    z = prng.standard_normal(jax.random.key(0), (3, 4))
    self.assertEqual(z.shape, (3, 4))
    np.testing.assert_array_equal(z.reshape(-1), prng.standard_normal(jax.random.key(0), (12,)))
    kr = jax.random.key(0, impl="rbg")
    self.assertEqual(prng.standard_normal(kr, (5,)).shape, (5,))
    self.assertEqual(prng.poisson_mask(kr, 0.3, 7).shape, (7,))
    self.assertEqual(prng.split(kr, 3).shape, (3,))
    self.assertEqual(prng.fold_in(kr, 2).shape, ())



class BernoulliMaskTest(parameterized.TestCase):

  def test_poisson_rate(self):
    masks = jax.vmap(lambda k: prng.poisson_mask(k, 0.3, 1000))(
        jax.random.split(jax.random.key(0), 200))
    rate = float(jnp.mean(masks))
    self.assertAlmostEqual(rate, 0.3, delta=4 * math.sqrt(0.3 * 0.7 / 200_000))
    # Independence across records: pairwise inclusion of neighbours ~ q^2.
    both = float(jnp.mean(masks[:, 1:] & masks[:, :-1]))
    self.assertAlmostEqual(both, 0.09, delta=4 * math.sqrt(0.09 * 0.91 / 199_800))

  def test_bernoulli_threshold_never_above_q(self):
    for q in (1e-6, 0.05, 0.2, 0.5, 0.999999):
      for w in (16, 32):
        thr = prng.bernoulli_threshold(q, w)
        self.assertLessEqual(thr / 2 ** w, q)
        self.assertLess(q - thr / 2 ** w, 2.0 ** -w)
      w = prng.mask_bit_width(q)
      # The rate's relative shortfall is at most 2^-12 whichever width is used.
      self.assertLess((q - prng.bernoulli_threshold(q, w) / 2 ** w) / q, 2 ** -12)

  @parameterized.named_parameters(("w32", 0.03), ("w16", 0.3))
  def test_poisson_rate_both_widths(self, q):
    masks = jax.vmap(lambda k: prng.poisson_mask(k, q, 999))(
        jax.random.split(jax.random.key(5), 200))
    self.assertEqual(masks.shape, (200, 999))
    rate = float(jnp.mean(masks))
    self.assertAlmostEqual(rate, q, delta=4 * math.sqrt(q * (1 - q) / masks.size))
    # No correlation between the two halves of a word (records i and i + 500).
    both = float(jnp.mean(masks[:, :499] & masks[:, 500:]))
    self.assertAlmostEqual(both, q * q, delta=4 * math.sqrt(q * q * (1 - q * q) / 99_800))


if __name__ == "__main__":
  absltest.main()
