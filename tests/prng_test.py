"""Tests for dpjax.prng: threefry streams bit-identical to jax.random; Bernoulli and normal draws."""

import math

import jax
import jax.extend.random  # threefry_2x32, the reference stream
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import prng


def _normal_of_words(bits):
  """The documented body map sqrt(2) erfinv(2 m 2^-23 - 1) of each word's top 23 bits."""
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  u = jnp.maximum(np.nextafter(np.float32(-1), np.float32(0)), 2.0 * f - 1.0)
  return np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)


def _mask_of_stream(key, q, n):
  """The documented mask: w-bit integers of `random_bits` (for w = 16 the high halves,
  then the low halves) compared with floor(q 2^w)."""
  w = prng.mask_bit_width(q)
  words = prng.random_bits(key, (n + 1) // 2 if w == 16 else n)
  if w == 16:
    words = jnp.concatenate([words >> 16, words & 0xFFFF])
  return words[:n] < prng.bernoulli_threshold(q, w)


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

  def test_random_bits_equal_jax_counter_mode(self):
    # random_bits hashes its blocks elementwise; the words must be the primitive's layout
    # on counters 0 .. n-1, odd counts (the last block's second counter 0) and raw keys too.
    for key in (jax.random.key(4), jax.random.key_data(jax.random.key(5))):
      data = jax.random.key_data(key) if key.dtype != jnp.uint32 else key
      for n in (1, 2, 3, 7, 168, 1001):
        ref = jax.extend.random.threefry_2x32((data[0], data[1]), jnp.arange(n, dtype=jnp.uint32))
        np.testing.assert_array_equal(prng.random_bits(key, n), ref)
        np.testing.assert_array_equal(jax.jit(prng.random_bits, static_argnums=1)(key, n), ref)

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

  # n = 1, 2 (even) and 151 (odd, the 16-bit mask's packing of (n + 1) // 2 words)
  # by default; the other lengths under -m slow.
  @parameterized.parameters(1, 2, 151)
  def test_samplers_consume_random_bits(self, n):
    self._check_samplers_consume_random_bits(n)

  @parameterized.parameters(3, 56, 75, 150)
  @pytest.mark.slow
  def test_samplers_consume_random_bits_more_lengths(self, n):
    self._check_samplers_consume_random_bits(n)

  def _check_samplers_consume_random_bits(self, n):
    keys = jax.random.split(jax.random.key(n), 3)
    for k in keys:
      bits = prng.random_bits(k, n)
      np.testing.assert_array_equal(
          bits, jax.extend.random.threefry_2x32(tuple(jax.random.key_data(k)),
                                                jnp.arange(n, dtype=jnp.uint32)))
      np.testing.assert_array_equal(prng.standard_normal(k, (n,)), _normal_of_words(bits))
      for q in (0.01, 0.2):
        np.testing.assert_array_equal(prng.poisson_mask(k, q, n), _mask_of_stream(k, q, n))
    # Under jit + vmap (the engine's setting) too.
    vm = jax.jit(jax.vmap(lambda kk: (prng.poisson_mask(kk, 0.2, n),
                                      prng.standard_normal(kk, (n,)))))(keys)
    for i, k in enumerate(keys):
      np.testing.assert_array_equal(vm[0][i], prng.poisson_mask(k, 0.2, n))
      np.testing.assert_array_equal(vm[1][i], prng.standard_normal(k, (n,)))

  def test_samplers_consume_random_bits_at_a_large_odd_length(self):
    # 100,001 draws under jit + vmap (the engine's setting): every output element
    # selects its word of its own block (`_stream_words`), so the word layout, the
    # odd count's padded block and the 16-bit mask's two halves are all exercised
    # far from the start of the stream.
    k = jax.random.key(21)
    n = 100_001
    got = jax.jit(jax.vmap(lambda kk: prng.standard_normal(kk, (n,))))(k[None])[0]
    np.testing.assert_array_equal(got, _normal_of_words(prng.random_bits(k, n)))
    for q in (0.004, 0.2):
      got_mask = jax.jit(jax.vmap(lambda kk, q=q: prng.poisson_mask(kk, q, n)))(k[None])[0]
      np.testing.assert_array_equal(got_mask, _mask_of_stream(k, q, n))

  def test_normal_shape_and_non_threefry_keys(self):
    z = prng.standard_normal(jax.random.key(0), (3, 4))
    self.assertEqual(z.shape, (3, 4))
    np.testing.assert_array_equal(z.reshape(-1), prng.standard_normal(jax.random.key(0), (12,)))
    kr = jax.random.key(0, impl="rbg")
    self.assertEqual(prng.standard_normal(kr, (5,)).shape, (5,))
    self.assertEqual(prng.poisson_mask(kr, 0.3, 7).shape, (7,))
    self.assertEqual(prng.split(kr, 3).shape, (3,))
    self.assertEqual(prng.fold_in(kr, 2).shape, ())



def _old_normal(bits):
  """The 23-bit inverse-CDF map without tails, re-implemented independently."""
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  u = jnp.maximum(np.nextafter(np.float32(-1), np.float32(0)), 2.0 * f - 1.0)
  return np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)


def _tail_reference(key, i):
  """float64 |z| of the tail draw of coordinate i, from the documented construction:
  (w1, w2) = threefry(key, (2^32 - 1, i)), w3 = threefry(key, (2^32 - 2, i))[0] for a
  threefry key (jax's own threefry primitive), else jax.random.bits of
  fold_in(fold_in(key, 2^32 - 1), i)."""
  if jax.random.key_impl(key) == jax.random.key_impl(jax.random.key(0)):
    kd = tuple(jax.random.key_data(key))
    ctr = jnp.array([0xFFFFFFFF, 0xFFFFFFFE, i, i], jnp.uint32)  # blocks (c0[j], c1[j])
    y = [int(v) for v in jax.extend.random.threefry_2x32(kd, ctr)]
    w = [y[0], y[2], y[1]]
  else:
    k = jax.random.fold_in(jax.random.fold_in(key, 0xFFFFFFFF), int(i))
    w = [int(v) for v in jax.random.bits(k, (3,), jnp.uint32)]
  level = next((j for j in range(2) if w[j] != 0), 2)
  v = (w[level] + 0.5) * 2.0 ** -(55 + 32 * level)
  return -scipy.special.ndtri(v)


class NormalTailTest(parameterized.TestCase):
  """standard_normal: the body is the old map bit for bit; the two extreme atoms are
  redrawn from the exact tails; the support and tail mass are what is claimed."""

  # Seeds whose 4096 words include a lower (498) and an upper (815) extreme atom
  # (checked below, not assumed).
  @parameterized.parameters(498, 815)
  def test_body_bit_identical_and_tails_exact(self, seed):
    n = 4096
    k = jax.random.key(seed)
    bits = prng.random_bits(k, n)
    m = np.asarray(bits >> 9)
    ext = np.flatnonzero((m == 0) | (m == 2 ** 23 - 1))
    self.assertNotEmpty(ext)
    z = np.asarray(prng.standard_normal(k, (n,)))
    old = np.asarray(_old_normal(bits))
    body = np.ones(n, bool)
    body[ext] = False
    np.testing.assert_array_equal(z[body], old[body])
    for i in ext:
      t = _tail_reference(k, i)
      sign = -1.0 if m[i] == 0 else 1.0
      np.testing.assert_allclose(z[i], sign * t, rtol=1e-6)
      self.assertGreater(abs(z[i]), -scipy.special.ndtri(2.0 ** -23))   # in the tail
    # The same under jit + vmap over keys, and equal to a loop over keys.
    keys = jnp.stack([k, jax.random.key(seed + 100)])
    vm = jax.jit(jax.vmap(lambda kk: prng.standard_normal(kk, (n,))))(keys)
    np.testing.assert_array_equal(vm[0], z)
    np.testing.assert_array_equal(vm[1], prng.standard_normal(keys[1], (n,)))

  def test_standard_normals_equal_one_draw_per_shape(self):
    # Keys 36611, 86721, 278201 of split(key(0), 400000) draw a tail atom in one of
    # their two shapes (checked below, not assumed); empty, scalar and odd shapes too.
    keys = jax.random.split(jax.random.key(0), 400000)[np.array([36611, 86721, 278201])]
    shapes = [(40,), (3, 8)]
    many = jax.jit(jax.vmap(lambda k: prng.standard_normals(prng.split(k, 2), shapes)))(keys)
    tails = 0
    for j in range(3):
      ks = prng.split(keys[j], 2)
      for l, s in enumerate(shapes):
        one = prng.standard_normal(ks[l], s)
        np.testing.assert_array_equal(np.asarray(many[l][j]).view(np.uint32),
                                      np.asarray(one).view(np.uint32))
        tails += int(np.sum(np.abs(np.asarray(one)) > 5.1666))
    self.assertGreater(tails, 0)
    odd = [(0,), (), (5,), (2, 0), (7,)]
    ks = prng.split(jax.random.key(9), len(odd))
    for z, kk, s in zip(prng.standard_normals(ks, odd), ks, odd):
      self.assertEqual(z.shape, s)
      np.testing.assert_array_equal(z, prng.standard_normal(kk, s))
    kr = jax.random.split(jax.random.key(0, impl="rbg"), 2)   # other generators: one by one
    for z, kk in zip(prng.standard_normals(kr, [(3,), (4,)]), kr):
      np.testing.assert_array_equal(z, prng.standard_normal(kk, z.shape))
    with self.assertRaisesRegex(ValueError, "one key per shape"):
      prng.standard_normals(ks, [(3,)])

  # A CNN's leaves (the digits CNN: conv 1 -> 8 -> 16, dense 64 -> 10).
  _CNN_SHAPES = [(8,), (3, 3, 1, 8), (16,), (3, 3, 8, 16), (10,), (64, 10)]

  def _cnn_draw(self, k):
    return prng.standard_normals(prng.split(k, len(self._CNN_SHAPES)), self._CNN_SHAPES)

  @pytest.mark.slow  # about 15 s on a busy machine
  def test_cnn_shapes_vmapped_draws_equal_per_leaf_draws(self):
    # Keys 17176, 1612, 9421, 1710 of split(key(0), 20000) draw a tail atom in leaves
    # 0, 2, 3, 5 (checked below, not assumed), key 0 none: one vmapped batch with tails
    # in different members and leaves equals one unvmapped draw per leaf, bit for bit.
    keys = jax.random.split(jax.random.key(0), 20000)[np.array([17176, 1612, 9421, 1710, 0])]
    many = jax.jit(jax.vmap(self._cnn_draw))(keys)
    per_leaf = jax.jit(lambda k: [prng.standard_normal(kl, s) for kl, s in
                                  zip(prng.split(k, len(self._CNN_SHAPES)), self._CNN_SHAPES)])
    tail_leaves = set()
    for j in range(len(keys)):
      for l, one in enumerate(per_leaf(keys[j])):
        one = np.asarray(one)
        np.testing.assert_array_equal(np.asarray(many[l][j]).view(np.uint32),
                                      one.view(np.uint32))
        if np.any(np.abs(one) > 5.1666):
          tail_leaves.add(l)
    self.assertEqual(tail_leaves, {0, 2, 3, 5})

  @parameterized.named_parameters(
      ("int_zero", jnp.int32(0)), ("int_negative", jnp.int32(-5)),
      ("uint_max", jnp.uint32(2**32 - 1)), ("uint_even", jnp.uint32(6)))
  def test_stored_words_are_the_stream_for_any_token(self, token):
    # `_once` stores fn()'s values through an always-taken cond branch, whatever the token.
    x = jnp.arange(41, dtype=jnp.uint32)
    fn = lambda x: prng.threefry2x32(jnp.uint32(7), jnp.uint32(9), x, x + jnp.uint32(1))
    got = jax.jit(lambda t, x: prng._once(t, lambda: fn(x)))(token, x)
    for a, b in zip(got, jax.jit(fn)(x)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rows = x[:40].reshape(4, 10)
    vm = jax.jit(jax.vmap(lambda r, t: prng._once(t, lambda: fn(r))))(
        rows, jnp.array([0, 3, 2**31 - 1, 8], jnp.int32))
    np.testing.assert_array_equal(np.asarray(vm[0]), np.asarray(jax.vmap(fn)(rows)[0]))

  def test_stored_words_are_written_once(self):
    # The noise words are hashed straight into their buffer: no one-trip loop whose state
    # holds a zero-initialised copy of them, no copy of the words, and the tail loop
    # carries no [S] index array (MLP 784-256-256-10 shapes, S = 269,322 words).
    shapes = [(784, 256), (256,), (256, 256), (256,), (256, 10), (10,)]
    s = sum(math.prod(v) for v in shapes)
    hlo = jax.jit(lambda k: prng.standard_normals(prng.split(k, 6), shapes)).lower(
        jax.random.key(0)).compile().as_text()
    entry = hlo[hlo.index("\nENTRY "):].splitlines()
    copies = [l for l in entry if f"u32[{s}]" in l and " copy(" in l]
    self.assertEqual(copies, [])
    loops = [l.split(" while(")[0] for l in entry if " while(" in l]
    self.assertEqual(len(loops), 1)    # the tail loop; it carries no [S] word or index array
    self.assertNotIn(f"u32[{s}]", loops[0])
    self.assertNotIn(f"s32[{s}]", loops[0])
    z = jax.jit(lambda k: prng.standard_normals(prng.split(k, 6), shapes))(jax.random.key(0))
    for l, zl in enumerate(z):
      np.testing.assert_array_equal(np.asarray(zl), np.asarray(
          prng.standard_normal(prng.split(jax.random.key(0), 6)[l], shapes[l])))

  def test_body_transform_comes_after_the_loops(self):
    # The body transform (erf_inv) follows every loop (the stored words, the tail fill):
    # the draw stays elementwise, so XLA fuses it into each consumer and a program that
    # consumes the noise (a DP-SGD step) keeps its update's arithmetic and rounding.
    # Writing the normals inside the tail loop leaves every draw unchanged but moves
    # trained CNNs' parameters in the last bits. Traced at the CNN's shapes.
    keys = jax.random.split(jax.random.key(0), 3)
    for fn, arg in ((jax.vmap(self._cnn_draw), keys), (self._cnn_draw, keys[0]),
                    (lambda k: prng.standard_normal(k, (64, 10)), keys[0]),
                    (jax.vmap(lambda k: prng.standard_normal(k, (64, 10))), keys)):
      names = [e.primitive.name for e in jax.make_jaxpr(fn)(arg).jaxpr.eqns]
      last_loop = max(i for i, n in enumerate(names) if n == "while")
      self.assertGreater(names.index("erf_inv"), last_loop)

  @pytest.mark.slow  # about 20 s; vmap == loop without forced tails stays

  def test_vmap_equals_loop_with_forced_tails(self):
    # Crafted words with extreme atoms at different places per key: the batched
    # while loop must give each key its own tail draws.
    n = 64
    keys = jax.random.split(jax.random.key(3), 4)
    bits = jax.random.bits(jax.random.key(4), (4, n), jnp.uint32)
    bits = bits.at[0, 5].set(0).at[0, 9].set(0xFFFFFFFF).at[2, 63].set(7).at[3, 0].set(
        (2 ** 23 - 1) << 9)
    fill = prng._normal_from_bits
    vm = jax.jit(jax.vmap(fill))(keys, bits)
    for j in range(4):
      np.testing.assert_array_equal(vm[j], fill(keys[j], bits[j]))
      b = np.asarray(bits[j])
      for i in range(n):
        if (b[i] >> 9) in (0, 2 ** 23 - 1):
          t = _tail_reference(keys[j], i) * (-1.0 if b[i] >> 9 == 0 else 1.0)
          np.testing.assert_allclose(vm[j, i], t, rtol=1e-6)
        else:
          self.assertEqual(vm[j, i], _old_normal(bits[j, i]))
    # Non-threefry keys take the same tail path.
    kr = jax.random.key(0, impl="rbg")
    zr = fill(kr, bits[0])
    for i, sign in ((5, -1.0), (9, 1.0)):
      np.testing.assert_allclose(zr[i], sign * _tail_reference(kr, i), rtol=1e-6)

  def test_forced_tail_distribution(self):
    # The tail draw given an extreme atom must be |Z| conditioned on |Z| > z0,
    # Phi(-z0) = 2^-23: P(t > z | tail) = Phi(-z) 2^23. 2^18 forced draws; each
    # frequency within 5 binomial standard deviations.
    n = 2 ** 18
    w = jax.random.bits(jax.random.key(7), (3, n), jnp.uint32)
    t = np.asarray(jax.jit(prng._tail_magnitude)(w[0], w[1], w[2]), np.float64)
    z0 = -scipy.special.ndtri(2.0 ** -23)
    self.assertGreater(t.min(), z0 * (1 - 1e-6))
    for z in (5.3, 5.5, 6.0, 6.5):
      p = scipy.special.ndtr(-z) * 2.0 ** 23
      got = np.mean(t > z)
      self.assertAlmostEqual(got, p, delta=5 * math.sqrt(p * (1 - p) / n) + 1e-12, msg=z)
    # Whole conditional law: Phi(-t) 2^23 is uniform on (0, 1) (KS), and not at
    # a neighbouring scale.
    u = scipy.special.ndtr(-t) * 2.0 ** 23
    self.assertGreater(scipy.stats.kstest(u, "uniform").pvalue, 1e-3)
    u_wrong = scipy.special.ndtr(-t * 1.001) * 2.0 ** 23
    self.assertLess(scipy.stats.kstest(u_wrong, "uniform").pvalue, 1e-6)

  def test_deep_levels_against_float64(self):
    # Levels 2 and 3 (w1 = 0, then w2 = 0) reach v down to 2^-120; float32 ndtri
    # must agree with float64 there.
    w = jax.random.bits(jax.random.key(8), (1000,), jnp.uint32)
    zero = jnp.zeros_like(w)
    f = jax.jit(prng._tail_magnitude)
    for level, args in ((2, (zero, w, w)), (3, (zero, zero, w))):
      v = (np.asarray(w, np.float64) + 0.5) * 2.0 ** -(55 + 32 * (level - 1))
      np.testing.assert_allclose(f(*args), -scipy.special.ndtri(v), rtol=3e-7)

  def test_support_and_tail_mass(self):
    z_min, z_max = prng.normal_support()
    top = (2 ** 23 - 1) << 9
    bits = jnp.array([0, top, 1 << 9, (2 ** 23 - 2) << 9, 0x1FF, top | 0x1FF], jnp.uint32)
    zero = jnp.zeros((), jnp.uint32)
    z = np.asarray(prng._normal_from_bits(None, bits, lambda i: (zero, zero, zero)))
    self.assertEqual(z[0], z_min)
    self.assertEqual(z[1], z_max)
    self.assertEqual(z[4], z_min)
    self.assertEqual(z[5], z_max)
    self.assertEqual(z_min, -z_max)
    # The old map's extremes are inside; the new support is at Phi^-1(2^-120),
    # capped just below it.
    self.assertLess(z_min, float(_old_normal(jnp.uint32(0))))
    self.assertGreater(z_max, float(_old_normal(jnp.uint32(top))))
    q = -scipy.special.ndtri(2.0 ** -120)
    self.assertLessEqual(z_max, q)
    self.assertGreater(z_max, q * (1 - 2e-6))
    # No tail draw exceeds the support, whatever its words (cap), NaN-free.
    w = jax.random.bits(jax.random.key(9), (3, 100_000), jnp.uint32)
    for args in ((w[0], w[1], w[2]), (w[0] * 0, w[1], w[2]), (w[0] * 0, w[1] * 0, w[2])):
      t = np.asarray(prng._tail_magnitude(*args))
      self.assertTrue(np.all(np.isfinite(t)))
      self.assertLessEqual(t.max(), z_max)
    # tau = Phi(z_min) + Phi(-z_max), in float64, at least the ideal 2 * 2^-120.
    tau = prng.normal_tail_mass()
    np.testing.assert_allclose(tau, scipy.stats.norm.cdf(z_min) + scipy.stats.norm.sf(z_max),
                               rtol=1e-8)
    self.assertGreaterEqual(tau, 2 * 2.0 ** -120)
    self.assertLess(tau, 2 * 2.0 ** -120 * 1.001)

  def test_real_sampler_extreme_frequency(self):
    # 2^22 real draws: the fraction beyond the body (|z| > Phi^-1(1 - 2^-23)) is
    # 2 * 2^-23 (expected 1); all draws inside the support.
    keys = jax.random.split(jax.random.key(11), 4)
    f = jax.jit(jax.vmap(lambda kk: prng.standard_normal(kk, (2 ** 20,))))
    z = np.asarray(f(keys))
    z_min, z_max = prng.normal_support()
    self.assertGreaterEqual(z.min(), z_min)
    self.assertLessEqual(z.max(), z_max)
    z0 = -scipy.special.ndtri(2.0 ** -23)
    count = int(np.sum(np.abs(z) > z0 * (1 + 1e-6)))
    lam = z.size * 2 * 2.0 ** -23
    self.assertLessEqual(count, scipy.stats.poisson.ppf(1 - 1e-6, lam))

  @pytest.mark.slow
  def test_real_sampler_tail_mass_monte_carlo(self):
    # 2^27 (1.3e8) real draws in chunks: P(|z| > a) against 2 Phi(-a) for a = 5, 5.3,
    # 5.5 (the last beyond the old support), within the two-sided Poisson 1e-6
    # quantiles.
    f = jax.jit(jax.vmap(lambda kk: prng.standard_normal(kk, (2 ** 20,))))
    counts = {5.0: 0, 5.3: 0, 5.5: 0}
    total = 0
    for c in range(8):
      z = np.abs(np.asarray(f(jax.random.split(jax.random.key(100 + c), 16))))
      total += z.size
      for a in counts:
        counts[a] += int(np.sum(z > a))
    for a, cnt in counts.items():
      lam = total * 2 * scipy.special.ndtr(-a)
      self.assertGreaterEqual(cnt, scipy.stats.poisson.ppf(1e-6, lam), msg=a)
      self.assertLessEqual(cnt, scipy.stats.poisson.ppf(1 - 1e-6, lam), msg=a)


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
