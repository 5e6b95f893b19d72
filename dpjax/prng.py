"""Counter-based random numbers for DP-SGD: threefry2x32 bits, Bernoulli masks, normals.

Everything here is threefry2x32 (20 rounds, Salmon et al. 2011), the hash behind
jax.random's default keys, and reproduces jax's outputs bit for bit (tested), so
switching between the two changes no result. The samplers draw

* Bernoulli(q) inclusion masks (`poisson_mask`): raw uniform integers of w bits
  compared with floor(q 2^w), w = 16 for q >= 1/16 and 32 otherwise, so the
  realised inclusion probability is below q by less than 2^-w and never above it
  (the accountant's q is conservative);
* N(0, 1) float32 noise (`standard_normal`) by inverting the normal CDF of a 23-bit
  uniform, as `jax.random.normal`, except that the two extreme atoms (each standing
  for a tail of mass 2^-23) are redrawn from the exact tails down to a uniform of
  2^-120, so the support is +-12.63 (`normal_support`) instead of -5.42 .. +5.17
  and an exact Gaussian leaves it with probability ~1.5e-36 per draw
  (`normal_tail_mass`, the input of `dpjax.accounting.sampler_delta`);

both from one stream per key, `random_bits`: threefry2x32 in counter mode with both
output words of every block in the stream (the layout of
`jax.extend.random.threefry_2x32`). Keys are
derived per model and per step with `fold_in` / `split`, bit-identical to
`jax.random.fold_in` / `jax.random.split`, so a model's stream depends only on its
own key, never on how many models are trained together or how they are chunked.
Keys of other generators fall back to `jax.random`. (The "rbg" generator was
measured slower here and its vmap is not equal to a loop over keys, so it is not
used.)

Why not call jax.random inside the many-model scan:
  * the 20 rounds are written out as plain integer ops (`threefry2x32`), where
    jax's CPU lowering runs them as a rolled XLA while-loop of 5 trips that
    writes the state to memory after every 4 rounds;
  * every output element of a sampler computes its own block's hash and keeps the
    word it needs (`_stream_words`), one elementwise expression of the output index
    that XLA:CPU splits across threads (and, for the mask, fuses into the
    comparison). Storing both words of each hash once and unpacking them halves the
    hashing, but the unpacking is a concatenation, which XLA:CPU ran several times
    slower split across two threads than on one; the one-hash-per-element form is
    faster on the audit workload (BUILD_NOTES, "Random numbers").
  * XLA:CPU treats integer ops as free to duplicate, so the normal's words, read by
    both the tail count and the transform, would be hashed twice; `_once` stores
    them (a while loop that runs once, which XLA neither fuses across nor
    recomputes). The tail redraw runs in a while loop with one trip per extreme
    coordinate (probability 2^-22 each), whose count is reduced outside the loop;
    the transform fuses into the consumer (benchmarks/normal_tails.py).

Shape letters: N records.

Examples:
  >>> import jax
  >>> key = jax.random.key(0)
  >>> poisson_mask(fold_in(key, 0), 1.0, 3)
  Array([ True,  True,  True], dtype=bool)
  >>> standard_normal(split(key, 2)[1], (2, 3)).shape
  (2, 3)
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import random as jax_random_ext

from dpjax import _validate


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
  """The Threefry-2x32 block function (20 rounds), unrolled; uint32 in and out.

  Args:
    k0, k1: the two key words (uint32, broadcastable with x0 / x1).
    x0, x1: the two counter words of each block (uint32, same shape).
  Returns:
    (y0, y1): the two output words of each block; equal, bit for bit, to jax's
    `threefry2x32_p` on the same inputs.
  Examples:
    >>> import jax.numpy as jnp
    >>> u = jnp.uint32
    >>> [hex(int(v)) for v in threefry2x32(u(0), u(0), u(0), u(0))]  # Random123 KAT
    ['0x6b200159', '0x99ba4efe']
  """
  k0, k1, x0, x1 = (jnp.asarray(v, jnp.uint32) for v in (k0, k1, x0, x1))
  ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(_THREEFRY_PARITY))
  x0 = x0 + ks[0]
  x1 = x1 + ks[1]
  for i in range(5):
    for r in _THREEFRY_ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = (x1 << jnp.uint32(r)) | (x1 >> jnp.uint32(32 - r))
      x1 = x1 ^ x0
    x0 = x0 + ks[(i + 1) % 3]
    x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
  return x0, x1


def _threefry_words(key: jax.Array):
  """(k0, k1) of a threefry key (typed, or a legacy raw uint32[2]), or None for
  other generators (which the samplers hand to jax.random)."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    if str(jax.random.key_impl(key)) != "threefry2x32":
      return None
    data = jax.random.key_data(key)
  else:
    data = key
  if data.shape != (2,) or data.dtype != jnp.uint32:
    return None
  return data[0], data[1]


def _once(k0: jax.Array, fn: Callable[[], jax.Array]) -> jax.Array:
  """fn() computed in a while loop that runs exactly once, so its output is stored
  (not fused into, and recomputed by, each consumer). The trip count (k0 | 1) & 1
  is 1 for every uint32 k0 but is not a compile-time constant. Performance only:
  the value is fn() either way."""
  trips = (k0 | jnp.uint32(1)) & jnp.uint32(1)
  out = jax.eval_shape(fn)
  _, out = jax.lax.while_loop(lambda s: s[0] < trips, lambda s: (s[0] + jnp.uint32(1), fn()),
                              (jnp.uint32(0), jnp.zeros(out.shape, out.dtype)))
  return out


def _wrap_like(key, words_x2):
  return jax.random.wrap_key_data(words_x2, impl=jax.random.key_impl(key))


def fold_in(key: jax.Array, data) -> jax.Array:
  """`jax.random.fold_in(key, data)`, bit-identical, cheaper inside scans.

  For a threefry key the new key is threefry2x32(key, (0, data)); other key types
  fall back to jax.random.fold_in.

  Examples:
    >>> import jax
    >>> k = jax.random.key(3)
    >>> bool((jax.random.key_data(fold_in(k, 7))
    ...       == jax.random.key_data(jax.random.fold_in(k, 7))).all())
    True
  """
  words = _threefry_words(key)
  if words is None:
    return jax.random.fold_in(key, data)
  a, b = threefry2x32(*words, jnp.uint32(0), jnp.asarray(data, dtype=jnp.uint32))
  return _wrap_like(key, jnp.stack([a, b]))  # 2 hashes, fused into one kernel


def split(key: jax.Array, num: int) -> jax.Array:
  """`jax.random.split(key, num)`, bit-identical (key i = fold_in(key, i))."""
  num = _validate.check_size(num, "num", bytes_per_unit=8)
  words = _threefry_words(key)
  if words is None:
    return jax.random.split(key, num)
  a, b = threefry2x32(*words, jnp.zeros((num,), jnp.uint32),
                      jnp.arange(num, dtype=jnp.uint32))
  return _wrap_like(key, jnp.stack([a, b], axis=1))


def _stream_words(words, num_words: int, j: jax.Array) -> jax.Array:
  """Word j of `random_bits(key, num_words)` for each entry of j (uint32, < num_words).

  The stream's block i has counters (i, H + i), H = ceil(num_words / 2) (an odd count
  pads the last block's second counter with 0, as jax.extend.random.threefry_2x32);
  word i < H is its first output, word H + i its second. Each entry hashes its own
  block and keeps the word it needs: one elementwise kernel, which XLA:CPU splits
  across threads and fuses into a single consumer (the normal stores it, because two
  read it; module docstring).
  """
  h = (num_words + 1) // 2
  first = j < jnp.uint32(h)
  block = jnp.where(first, j, j - jnp.uint32(h))
  c1 = block + jnp.uint32(h)
  if num_words % 2:
    c1 = jnp.where(block == jnp.uint32(h - 1), jnp.uint32(0), c1)
  y0, y1 = threefry2x32(*words, block, c1)
  return jnp.where(first, y0, y1)


def random_bits(key: jax.Array, num_words: int) -> jax.Array:
  """uint32[num_words] from threefry2x32 in counter mode, two words per hash.

  JAX's default ("partitionable") `jax.random.bits` spends one threefry2x32
  evaluation per 32-bit word and XORs its two outputs; here both outputs are used
  (the layout of `jax.extend.random.threefry_2x32` over arange(num_words): word i
  and word H + i come from one block), which halves the hashing. Same hash, same
  statistical quality; the stream is fixed by the key alone. Non-threefry keys fall
  back to `jax.random.bits`. `poisson_mask` and `standard_normal` consume exactly
  this stream (tested) without materialising it.

  Examples:
    >>> import jax
    >>> random_bits(jax.random.key(0), 3).dtype
    dtype('uint32')
  """
  n = _validate.check_size(num_words, "num_words")
  words = _threefry_words(key)
  if words is None:
    return jax.random.bits(key, (n,), jnp.uint32)
  return jax_random_ext.threefry_2x32(words, jnp.arange(n, dtype=jnp.uint32))


def bits_to_normal(bits):
  """float32 normals of uint32 words: the top 23 bits as a uniform u in (-1, 1),
  sqrt(2) erfinv(u) (the body of `standard_normal`; traceable, shape of bits)."""
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
  u = jnp.maximum(lo, 2.0 * f - 1.0)
  return np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)


# The normal's tails. A 32-bit word's top 23 bits m pick the atom; the two extreme
# atoms (m = 0 and m = 2^23 - 1) each stand for a tail of mass 2^-23 and are redrawn
# from that tail with extra words (see `standard_normal`).
_ATOM_TOP = (1 << 23) - 1
# First counter word of the tail stream's blocks (and D - 1): above every first
# counter word the body stream (at most 2^31), fold_in and split (0) use.
_TAIL_DOMAIN = 0xFFFFFFFF
# Level k of the tail uniform v in (0, 2^-23): v = (w_k + 1/2) * scale_k when words
# w_1 .. w_{k-1} are all 0; the last level's w_3 = 0 gives v = 2^-120.
_TAIL_SCALES = (2.0 ** -55, 2.0 ** -87, 2.0 ** -119)
_TAIL_V_MIN = 2.0 ** -120
# Cap on a tail draw's |z|: the float32 below Phi^-1(1 - 2^-120) by ~2^-20 relative,
# more than float32 ndtri's error there, so the draw at v = 2^-120 is exactly the cap
# (`normal_support` measures it) and no tail draw exceeds it (NaN-safe).
_TAIL_Z_CAP = np.float32(-statistics.NormalDist().inv_cdf(_TAIL_V_MIN) * (1.0 - 2.0 ** -20))


def _tail_magnitude(w1, w2, w3):
  """|z| = -Phi^-1(v) of a tail draw, v in [2^-120, 2^-23) from three uint32 words.

  v = 2^-23 (w1 + 1/2) 2^-32 if w1 != 0; else 2^-55 (w2 + 1/2) 2^-32 if w2 != 0;
  else 2^-87 (w3 + 1/2) 2^-32: a uniform on (0, 2^-23) at resolution 2^-55, then
  2^-87 below 2^-55, then 2^-119 below 2^-87 (each level's cell represented by its
  midpoint, in float32), all normal float32 numbers. The result is capped at
  `_TAIL_Z_CAP` (reached at v = 2^-120 only).
  """
  f = lambda w, scale: (w.astype(jnp.float32) + np.float32(0.5)) * np.float32(scale)
  v = jnp.where(w1 != 0, f(w1, _TAIL_SCALES[0]),
                jnp.where(w2 != 0, f(w2, _TAIL_SCALES[1]), f(w3, _TAIL_SCALES[2])))
  mag = -jax.scipy.special.ndtri(v)
  return jnp.where(mag < _TAIL_Z_CAP, mag, _TAIL_Z_CAP)  # NaN would become the cap


def _tail_words(key: jax.Array, i: jax.Array):
  """The three tail words of coordinate i, a function of (key, i) only (not of the
  shape drawn). Threefry keys: (w1, w2) = threefry2x32(key, (D, i)) and w3 = the
  first word of threefry2x32(key, (D - 1, i)), D = `_TAIL_DOMAIN`: counter blocks
  whose first word (>= 2^32 - 2) no other stream of the key uses (the body's is at
  most 2^31, fold_in's and split's is 0). Other keys: jax.random.bits(
  jax.random.fold_in(jax.random.fold_in(key, D), i), (3,))."""
  words = _threefry_words(key)
  i = jnp.asarray(i).astype(jnp.uint32)
  if words is None:
    w = jax.random.bits(jax.random.fold_in(jax.random.fold_in(key, _TAIL_DOMAIN), i), (3,),
                        jnp.uint32)
    return w[0], w[1], w[2]
  w1, w2 = threefry2x32(*words, jnp.uint32(_TAIL_DOMAIN), i)
  w3, _ = threefry2x32(*words, jnp.uint32(_TAIL_DOMAIN - 1), i)
  return w1, w2, w3


def _tail_fill(key: jax.Array, bits: jax.Array) -> jax.Array:
  """float32[S]: the tail magnitude of each coordinate whose word is at an extreme
  atom, 0 elsewhere.

  A while loop with one trip per extreme coordinate (first to last), so the tail's
  hashes and ndtri run only when needed: a coordinate is extreme with probability
  2^-22, and under vmap the batched loop runs as many trips as the model with most
  extreme coordinates (usually none).
  """
  if bits.shape[0] == 0:
    return jnp.zeros(bits.shape, jnp.float32)
  extreme = lambda: ((bits >> 9) == 0) | ((bits >> 9) == _ATOM_TOP)
  idx = jnp.arange(bits.shape[0], dtype=jnp.int32)
  # The count is reduced outside the loop, so the loop's condition is a scalar
  # compare (XLA:CPU runs a loop's kernels on one thread).
  count = jnp.sum(extreme(), dtype=jnp.int32)

  def body(state):
    trip, last, t = state
    i = jnp.argmax(extreme() & (idx > last)).astype(jnp.int32)
    mag = _tail_magnitude(*_tail_words(key, i))
    return trip + 1, i, jnp.where(idx == i, mag, t)
  _, _, t = jax.lax.while_loop(lambda s: s[0] < count, body,
                               (jnp.int32(0), jnp.int32(-1),
                                jnp.zeros(bits.shape, jnp.float32)))
  return t


def _assemble_normal(bits: jax.Array, tail: jax.Array) -> jax.Array:
  """The sample of each word: -tail at atom 0, +tail at atom 2^23 - 1, else the body
  sqrt(2) erfinv(2 m 2^-23 - 1) of the 23-bit mantissa m."""
  m = bits >> 9
  return jnp.where(m == 0, -tail, jnp.where(m == _ATOM_TOP, tail, bits_to_normal(bits)))


@functools.lru_cache(maxsize=None)
def normal_support() -> tuple[float, float]:
  """(z_min, z_max): the smallest and largest value `standard_normal` can return.

  Measured from the code path, not assumed: `_assemble_normal` (the function
  `standard_normal` ends with) is evaluated, jitted, at every one of the 2^23 atoms,
  the extreme atoms with the tail words (0, 0, 0), i.e. v = 2^-120. No other tail
  draw is larger in magnitude (the cap), and the body values do not depend on the
  word's low 9 bits, so these are the extremes of every output. Cached.

  Examples:
    >>> z_min, z_max = normal_support()
    >>> z_min == -z_max and 12.6 < z_max < 12.7
    True
  """
  bits = jnp.arange(_ATOM_TOP + 1, dtype=jnp.uint32) << jnp.uint32(9)
  zero = jnp.zeros((), jnp.uint32)
  mag = jax.jit(_tail_magnitude)(zero, zero, zero)
  z = jax.jit(_assemble_normal)(bits, jnp.broadcast_to(mag, bits.shape))
  if not bool(jnp.all(jnp.isfinite(z))):
    raise RuntimeError("standard_normal produced a non-finite value")
  return float(jnp.min(z)), float(jnp.max(z))


@functools.lru_cache(maxsize=None)
def normal_tail_mass() -> float:
  """tau = Phi(z_min) + 1 - Phi(z_max): the N(0, 1) mass beyond `normal_support()`.

  Computed in float64 from the realised support (erfc, relative error ~1e-14 here),
  rounded up by a relative 1e-9. About 1.5e-36. This is the per-draw term of
  `dpjax.accounting.sampler_delta`: see `standard_normal` for the argument.

  Examples:
    >>> 1e-37 < normal_tail_mass() < 1e-35
    True
  """
  z_min, z_max = normal_support()
  tau = 0.5 * math.erfc(-z_min / math.sqrt(2.0)) + 0.5 * math.erfc(z_max / math.sqrt(2.0))
  return tau * (1.0 + 1e-9)


def standard_normal(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """N(0, 1) float32 samples: inverse-CDF of a 23-bit uniform, with exact tails.

  Let b_i = `random_bits(key, S)[i]` (S = prod(shape), row-major over `shape`) and
  m_i = b_i >> 9 its top 23 bits. For 1 <= m_i <= 2^23 - 2 (the body) sample i is
  sqrt(2) erfinv(2 m_i 2^-23 - 1) = Phi^-1(m_i 2^-23), as `jax.random.normal` (bit
  for bit). Each atom stands for the uniform's cell [m 2^-23, (m + 1) 2^-23) of mass
  2^-23; the two extreme atoms stand for the tails Phi(z) < 2^-23 and
  Phi(z) > 1 - 2^-23 (|z| > 5.1666), and are redrawn from them: sample i is
  -t_i (m_i = 0) or +t_i (m_i = 2^23 - 1) with t_i = -Phi^-1(v_i), v_i uniform on
  (0, 2^-23) at resolution 2^-55, refined to 2^-87 and 2^-119 below 2^-55 and
  2^-87 (`_tail_magnitude`), from three words of two threefry blocks of `key` with
  counters (2^32 - 1, i) and (2^32 - 2, i), which no other stream of the key uses
  (`_tail_words`). So the whole sample is the normal inverse-CDF of a uniform
  whose cell near 0 and 1 has width 2^-119 instead of 2^-23, and the substituted
  tail carries exactly the atom's mass 2^-23. The support is `normal_support()`,
  +-12.6267 (jax.random.normal's ends at -5.42 and +5.17), and the N(0, 1) mass
  beyond it is tau = `normal_tail_mass()` ~ 1.5e-36 per draw.

  The extra words are drawn only for extreme coordinates (probability 2^-22 each),
  in a while loop with one trip per extreme coordinate (`_tail_fill`); under vmap
  the loop runs while any model still has one. Non-threefry keys draw the body from
  `jax.random.bits` and the tails in the same way.

  Privacy (support, not lattice): model the sampler as Z' = clip(Z, z_min, z_max)
  with Z ~ N(0, 1) exact (`normal_support()`; values inside the support taken
  exactly). Coupled on the same Z, Z' != Z with probability tau. A mechanism
  drawing K = T d such coordinates (T steps, d noise coordinates per step),
  everything else (sampling, data) shared, then has real and ideal outputs equal
  outside an event of probability eta <= K tau (union bound), whatever the data.
  If the ideal mechanism is (eps, delta)-DP, for neighbours D, D' and any event E:
  P_real[D](E) <= P_ideal[D](E) + eta <= e^eps P_ideal[D'](E) + delta + eta
  <= e^eps (P_real[D'](E) + eta) + delta + eta, so the real one is
  (eps, delta + (1 + e^eps) K tau)-DP (`dpjax.accounting.sampler_delta`). This
  bounds the effect of the support only. The values inside it lie on a float32
  grid (Phi^-1 of a 2^-23 grid in the body, float32 rounding of erfinv and of the
  scaling by the noise std): that lattice effect (Mironov 2012) is NOT covered
  here, and epsilon is that of the idealised mechanism with respect to it.

  Args:
    key: a jax.random key.
    shape: the output shape; at most 2^31 - 1 elements.
  Returns:
    float32[shape].
  """
  shape = _validate.check_sizes(shape, "shape", minimum=0)
  size = math.prod(shape)
  num = max(1, size)
  if num >= 2 ** 31:
    raise ValueError(f"shape must have fewer than 2^31 elements, got {shape}")
  words = _threefry_words(key)
  if words is None:
    bits = jax.random.bits(key, (num,), jnp.uint32)
    return _assemble_normal(bits, _tail_fill(key, bits))[:size].reshape(shape)
  # Stored once: the tail count and the transform both read every word.
  bits = _once(words[0], lambda: _stream_words(words, num, jnp.arange(num, dtype=jnp.uint32)))
  bits = bits[:size]
  return _assemble_normal(bits, _tail_fill(key, bits)).reshape(shape)


def bernoulli_threshold(sampling_prob: float, bit_width: int = 32) -> int:
  """floor(q * 2^w): a w-bit uniform integer u is "in" iff u < threshold.

  P(in) = floor(q 2^w) / 2^w is in (q - 2^-w, q], never above q (poisson_mask
  handles q = 1 separately).
  """
  sampling_prob = _validate.check_sampling_prob(sampling_prob)
  if isinstance(bit_width, (bool, np.bool_)) or bit_width not in (16, 32):
    raise ValueError(f"bit_width must be 16 or 32, got {bit_width}")
  return min(int(math.floor(float(sampling_prob) * 2.0 ** bit_width)), 2 ** bit_width - 1)


def poisson_mask(key: jax.Array, sampling_prob: float, num_records: int) -> jax.Array:
  """Independent Bernoulli(q) inclusion bits: bool[N].

  Args:
    key: a jax.random key.
    sampling_prob: q in (0, 1].
    num_records: N >= 1.
  Returns:
    bool[N]; record i is in iff a uniform integer of `mask_bit_width(q)` = w bits
    is < floor(q 2^w), so each is True independently with probability
    floor(q 2^w) / 2^w, in (q - 2^-w, q] (exactly q when q = 1 or q 2^w is an
    integer). Never above q, so the accountant's q is conservative. The integers
    are, for w = 32, `random_bits(key, N)`; for w = 16, the high halves of
    `random_bits(key, ceil(N / 2))` followed by their low halves (tested).
  Examples:
    >>> import jax
    >>> poisson_mask(jax.random.key(0), 1.0, 3)
    Array([ True,  True,  True], dtype=bool)
  """
  num_records = _validate.check_size(num_records, "num_records")
  sampling_prob = _validate.check_sampling_prob(sampling_prob)
  if sampling_prob >= 1.0:
    if sampling_prob > 1.0:
      raise ValueError(f"sampling_prob must be in (0, 1], got {sampling_prob}")
    return jnp.ones((num_records,), bool)
  n = int(num_records)
  w = mask_bit_width(sampling_prob)
  thr = jnp.uint32(bernoulli_threshold(sampling_prob, w))
  num_words = (n + 1) // 2 if w == 16 else n
  words = _threefry_words(key)
  if words is None:
    bits = jax.random.bits(key, (num_words,), jnp.uint32)
    if w == 16:
      bits = jnp.concatenate([bits >> 16, bits & jnp.uint32(0xFFFF)])
    return bits[:n] < thr
  # Integer j of the stream: for w = 32, word j; for w = 16, the high half of word j
  # (j < W) or the low half of word j - W, W = num_words.
  j = jnp.arange(n, dtype=jnp.uint32)
  if w == 16:
    high = j < jnp.uint32(num_words)
    word = _stream_words(words, num_words, jnp.where(high, j, j - jnp.uint32(num_words)))
    ints = jnp.where(high, word >> 16, word & jnp.uint32(0xFFFF))
  else:
    ints = _stream_words(words, num_words, j)
  return ints < thr


def mask_bit_width(sampling_prob: float) -> int:
  """Bits per Bernoulli draw in `poisson_mask`: 16 when q >= 1/16 (the rate is then
  below q by less than 2^-16, a relative 2^-12 at most), else 32."""
  sampling_prob = _validate.check_sampling_prob(sampling_prob)
  return 16 if sampling_prob >= 1.0 / 16.0 else 32


