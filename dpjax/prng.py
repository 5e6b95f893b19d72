"""Counter-based random numbers for DP-SGD: threefry2x32 bits, Bernoulli masks, normals.

Everything here is threefry2x32 (20 rounds, Salmon et al. 2011), the hash behind
jax.random's default keys, and reproduces jax's outputs bit for bit (tested), so
switching between the two changes no result. The samplers draw

* Bernoulli(q) inclusion masks (`poisson_mask`): raw uniform integers of w bits
  compared with floor(q 2^w), w = 16 for q >= 1/16 and 32 otherwise, so the
  realised inclusion probability is below q by less than 2^-w and never above it
  (the accountant's q is conservative);
* N(0, 1) float32 noise (`standard_normal`) by inverting the normal CDF of a 23-bit
  uniform, as `jax.random.normal`;

both from threefry2x32 in counter mode using both output words of every hash
(`random_bits`; half the hashing of the default `jax.random.bits`). Keys are
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
  * XLA:CPU fuses each output of an elementwise graph separately and treats
    integer ops as free to duplicate, so a consumer of several words of one hash
    (4 mask bits, or both output words) would recompute the hash per word, and a
    hash fused into erfinv ran 2x slower than the two apart. `_once` therefore
    computes what a sampler needs from each hash in a one-trip while loop (XLA
    cannot see that it runs once, and does not fuse across it), packed into one
    element per hash: 4 (or 2) mask bits in a uint32, or both words in a
    complex64 (bit patterns carried as floats; tested bit-exact, NaN patterns
    included). The unpacking and the normal transform fuse into the consumer.
    The effect on the audit workload is measured by benchmarks/dpsgd.py.

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

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import random as jax_random_ext


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
  num = int(num)
  words = _threefry_words(key)
  if words is None:
    return jax.random.split(key, num)
  a, b = threefry2x32(*words, jnp.zeros((num,), jnp.uint32),
                      jnp.arange(num, dtype=jnp.uint32))
  return _wrap_like(key, jnp.stack([a, b], axis=1))


def _counter_blocks(num_words: int):
  """Counter words of the blocks behind `random_bits(key, num_words)`: word i < H is
  y0 of block i, word H + i is y1 of block i (H = ceil(num_words / 2); an odd count
  pads the last block's second counter with 0, as jax.extend.random.threefry_2x32)."""
  h = (num_words + 1) // 2
  c = jnp.arange(2 * h, dtype=jnp.uint32)
  if num_words % 2:
    c = c.at[-1].set(0)
  return h, c[:h], c[h:]


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
  n = int(num_words)
  if n != num_words or n < 1:
    raise ValueError(f"num_words must be a positive integer, got {num_words}")
  words = _threefry_words(key)
  if words is None:
    return jax.random.bits(key, (n,), jnp.uint32)
  return jax_random_ext.threefry_2x32(words, jnp.arange(n, dtype=jnp.uint32))


def _bits_to_normal(bits):
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
  u = jnp.maximum(lo, 2.0 * f - 1.0)
  return np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)


def standard_normal(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """N(0, 1) float32 samples: inverse-CDF of a 23-bit uniform, as jax.random.normal.

  Sample i is sqrt(2) erfinv(u_i), u_i = 2 (mantissa_i / 2^23) - 1 clamped to
  (-1, 1), mantissa_i = the top 23 bits of `random_bits(key, size)[i]` (row-major
  over `shape`).

  Warning: like `jax.random.normal` (and the float samplers of other DP-SGD
  libraries), this is a discretised Gaussian on a 2^-23 grid of u whose support
  ends at z = -5.42 and +5.17. The accountants model an exact Gaussian; outputs
  beyond the support of one neighbour's noise (probability ~1e-7 per coordinate
  per step) carry unbounded privacy loss that no accountant here counts
  (Mironov 2012 on floating-point noise). Treat epsilon as the guarantee of the
  idealised mechanism.
  """
  shape = tuple(int(d) for d in shape)
  size = math.prod(shape)
  words = _threefry_words(key)
  if words is None:
    return _bits_to_normal(jax.random.bits(key, (max(1, size),), jnp.uint32))[:size].reshape(shape)
  num = max(1, size)
  h, c0, c1 = _counter_blocks(num)

  def pair_fn():  # both words of block i in one complex64 element (bit patterns as floats)
    y0, y1 = threefry2x32(*words, c0, c1)
    f32 = lambda v: jax.lax.bitcast_convert_type(v, jnp.float32)
    return jax.lax.complex(f32(y0), f32(y1))
  z = _once(words[0], pair_fn)
  u32 = lambda v: jax.lax.bitcast_convert_type(v, jnp.uint32)
  bits = jnp.stack([u32(jnp.real(z)), u32(jnp.imag(z))]).reshape(2 * h)[:size]
  return _bits_to_normal(bits).reshape(shape)


def bernoulli_threshold(sampling_prob: float, bit_width: int = 32) -> int:
  """floor(q * 2^w): a w-bit uniform integer u is "in" iff u < threshold.

  P(in) = floor(q 2^w) / 2^w is in (q - 2^-w, q], never above q (poisson_mask
  handles q = 1 separately).
  """
  if not 0.0 < sampling_prob <= 1.0:
    raise ValueError(f"sampling_prob must be in (0, 1], got {sampling_prob}")
  if bit_width not in (16, 32):
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
  if int(num_records) != num_records or num_records < 1:
    raise ValueError(f"num_records must be a positive integer, got {num_records}")
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
  h, c0, c1 = _counter_blocks(num_words)
  lo16 = jnp.uint32(0xFFFF)

  def packed_fn():  # the comparisons of one block packed in one uint32: bit k = part k
    y0, y1 = threefry2x32(*words, c0, c1)
    if w == 16:
      parts = (y0 >> 16, y1 >> 16, y0 & lo16, y1 & lo16)
    else:
      parts = (y0, y1)
    return sum((p < thr).astype(jnp.uint32) << k for k, p in enumerate(parts))
  packed = _once(words[0], packed_fn)
  # Stream order: for w = 32, [y0 < thr, y1 < thr]; for w = 16, the high halves of
  # [y0, y1], then their low halves. An odd word count drops the padded block's y1.
  r = num_words - h
  bit = [(packed >> k) & jnp.uint32(1) for k in range(4 if w == 16 else 2)]
  if w == 16:
    pieces = [bit[0], bit[1][:r], bit[2], bit[3][:r]]
  else:
    pieces = [bit[0], bit[1][:r]]
  return jnp.concatenate(pieces)[:n] == 1


def mask_bit_width(sampling_prob: float) -> int:
  """Bits per Bernoulli draw in `poisson_mask`: 16 when q >= 1/16 (the rate is then
  below q by less than 2^-16, a relative 2^-12 at most), else 32."""
  return 16 if sampling_prob >= 1.0 / 16.0 else 32


