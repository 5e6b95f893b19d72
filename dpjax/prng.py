"""Counter-based random numbers for DP-SGD: threefry2x32 bits, Bernoulli masks, normals.

threefry2x32 (20 rounds, Salmon et al. 2011), bit for bit jax.random's, in counter mode
(`random_bits`), feeds Bernoulli(q) masks (`poisson_mask`, never above q) and N(0, 1)
float32 noise (`standard_normal`: inverse CDF of a 23-bit uniform, exact tails to 2^-120,
support +-12.63). `fold_in` / `split` are bit-identical to jax.random's; other
generators fall back to `jax.random`. Why: BUILD_NOTES, "Random numbers".

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

from dpjax import _validate
from dpjax import _xla


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
  """The Threefry-2x32 block function (20 rounds), unrolled; bit for bit `threefry2x32_p`.

  Examples:
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
  """(k0, k1) of a threefry key (typed or raw uint32[2]), or None for other generators."""
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
  """fn() stored once, not recomputed by each consumer: computed in the taken branch of a
  lax.cond whose predicate is true for every runtime token k0 (an integer scalar).

  XLA:CPU fuses an elementwise producer into each of its consumers; a conditional is a
  fusion boundary (as `_xla.once`'s loop), and its branch writes the outputs directly,
  with no loop state to initialise or copy. The predicate is unbatched under vmap
  (`_xla.all_over_batch`), so the cond stays one branch. Values are fn()'s bit for bit.
  """
  token = jnp.asarray(k0)
  token = jax.lax.bitcast_convert_type(token, jnp.uint32) if token.dtype.itemsize == 4 \
      else token.astype(jnp.uint32)
  taken = _xla.all_over_batch(((token | jnp.uint32(1)) & jnp.uint32(1)) == jnp.uint32(1))
  shapes = jax.eval_shape(fn)
  return jax.lax.cond(taken, fn,
                      lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))


def _wrap_like(key, words_x2):
  return jax.random.wrap_key_data(words_x2, impl=jax.random.key_impl(key))


def fold_in(key: jax.Array, data) -> jax.Array:
  """`jax.random.fold_in(key, data)`, bit-identical: threefry2x32(key, (0, data)).

  Examples:
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
  a, b = threefry2x32(*words, jnp.zeros((num,), jnp.uint32), jnp.arange(num, dtype=jnp.uint32))
  return _wrap_like(key, jnp.stack([a, b], axis=1))


def _stream_words(words, num_words: int, j: jax.Array) -> jax.Array:
  """Word j of `random_bits(key, num_words)`: block i has counters (i, H + i), H =
  ceil(num_words / 2); word i < H is its first output, H + i its second.
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

  Words i and H + i come from one block (`jax.extend.random.threefry_2x32`'s layout, bit
  for bit): H = ceil(num_words / 2) blocks with counters (i, H + i), the last one's second
  counter 0 when num_words is odd, hashed elementwise (XLA fuses the hash into its
  consumers, faster on the CPU than the primitive). Non-threefry keys use `jax.random.bits`.

  Examples:
    >>> import jax
    >>> random_bits(jax.random.key(0), 3).dtype
    dtype('uint32')
  """
  n = _validate.check_size(num_words, "num_words", bytes_per_unit=12)   # counters, 2 halves
  words = _threefry_words(key)
  if words is None:
    return jax.random.bits(key, (n,), jnp.uint32)
  h = (n + 1) // 2
  i = jnp.arange(h, dtype=jnp.uint32)
  c1 = i + jnp.uint32(h)
  if n % 2:
    c1 = jnp.where(i == h - 1, jnp.uint32(0), c1)
  y0, y1 = threefry2x32(words[0], words[1], i, c1)
  return jnp.concatenate([y0, y1])[:n]


def bits_to_normal(bits):
  """float32 sqrt(2) erfinv(u), u in (-1, 1) from the top 23 bits of each uint32 word."""
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
  u = jnp.maximum(lo, 2.0 * f - 1.0)
  return np.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)


# The top 23 bits m pick the atom; atoms 0 and 2^23 - 1 (tails of mass 2^-23) are redrawn.
_ATOM_TOP = (1 << 23) - 1
# First counter word of the tail blocks (and D - 1): above the body stream's (< 2^31).
_TAIL_DOMAIN = 0xFFFFFFFF
# Level k of the tail uniform: v = (w_k + 1/2) * scale_k when w_1 .. w_{k-1} are 0.
_TAIL_SCALES = (2.0 ** -55, 2.0 ** -87, 2.0 ** -119)
_TAIL_V_MIN = 2.0 ** -120
# Cap on |z|: Phi^-1(1 - 2^-120) less 2^-20 relative (> ndtri's float32 error), so the
# draw at v = 2^-120 is exactly the cap and none exceeds it.
_TAIL_Z_CAP = np.float32(-statistics.NormalDist().inv_cdf(_TAIL_V_MIN) * (1.0 - 2.0 ** -20))


def _tail_magnitude(w1, w2, w3):
  """|z| = -Phi^-1(v), v in [2^-120, 2^-23): v = 2^-23 (w1 + 1/2) 2^-32 if w1 != 0, else
  2^-55 (w2 + 1/2) 2^-32 if w2 != 0, else 2^-87 (w3 + 1/2) 2^-32; capped at `_TAIL_Z_CAP`.
  """
  f = lambda w, scale: (w.astype(jnp.float32) + np.float32(0.5)) * np.float32(scale)
  v = jnp.where(w1 != 0, f(w1, _TAIL_SCALES[0]),
                jnp.where(w2 != 0, f(w2, _TAIL_SCALES[1]), f(w3, _TAIL_SCALES[2])))
  mag = -jax.scipy.special.ndtri(v)
  return jnp.where(mag < _TAIL_Z_CAP, mag, _TAIL_Z_CAP)  # NaN would become the cap


def _tail_words(key: jax.Array, i: jax.Array):
  """The three tail words of coordinate i, from counters (D, i) and (D - 1, i), D =
  `_TAIL_DOMAIN`, used by no other stream of the key.
  """
  words = _threefry_words(key)
  i = jnp.asarray(i).astype(jnp.uint32)
  if words is None:
    w = jax.random.bits(jax.random.fold_in(jax.random.fold_in(key, _TAIL_DOMAIN), i), (3,),
                        jnp.uint32)
    return w[0], w[1], w[2]
  return _tail_blocks(*words, i)


def _tail_blocks(k0, k1, i):
  """(w1, w2, w3): blocks (D, i) and (D - 1, i) hashed as one pair (one copy in the program)."""
  y0, y1 = threefry2x32(k0, k1, jnp.array([_TAIL_DOMAIN, _TAIL_DOMAIN - 1], jnp.uint32),
                        jnp.stack([i, i]))
  return y0[0], y1[0], y0[1]


def _next_extreme(bits: jax.Array, after: jax.Array):
  """(found, i): the first index i > after whose word is an extreme atom (found False,
  i = S when none), as one min-reduction over the words.
  """
  m = bits >> 9
  idx = jax.lax.iota(jnp.int32, bits.shape[0])
  ext = ((m == 0) | (m == _ATOM_TOP)) & (idx > after)
  i = jnp.min(jnp.where(ext, idx, bits.shape[0]))
  return i < bits.shape[0], i


def _tail_fill(key: jax.Array, bits: jax.Array, tail_words=None) -> jax.Array:
  """float32[S]: the tail magnitude (`_tail_magnitude`) at extreme atoms, 0 elsewhere.

  tail_words(i) (default `_tail_words(key, i)`) gives the tail words of index i. A loop of
  one trip per extreme atom (usually none: each word is one with probability 2^-22) writes
  one element in place per trip, so the program holds one small copy of the tail path; its
  condition is a plain OR over the words, and only a trip searches for the next atom (from
  the words: the loop carries no [S] array but the result). Under vmap one loop serves the
  batch (`_xla.any_over_batch`): a finished member (none left) writes its own value back.
  The result is combined with the body elementwise (`_assemble_normal`), so the transform
  fuses into the draw's consumers.
  """
  tail_words = tail_words or functools.partial(_tail_words, key)
  s = bits.shape[0]
  t = jnp.zeros(bits.shape, jnp.float32)
  if s == 0:
    return t

  def body(state):
    _, i, t = state       # i: the last atom redrawn (-1 before the first)
    _, i = _next_extreme(bits, i)        # S when none is left (a finished member)
    at = jnp.clip(i, 0, s - 1)
    old = jax.lax.dynamic_index_in_dim(t, at, keepdims=False)
    val = jnp.where(i < s, _tail_magnitude(*tail_words(at)), old)
    t = jax.lax.dynamic_update_index_in_dim(t, val, at, 0)
    return _next_extreme(bits, i)[0], i, t
  m = bits >> 9
  _, _, t = jax.lax.while_loop(lambda st: _xla.any_over_batch(st[0]), body,
                               (jnp.any((m == 0) | (m == _ATOM_TOP)), jnp.int32(-1), t))
  return t


def _assemble_normal(bits: jax.Array, tail: jax.Array) -> jax.Array:
  """Each word's sample: -tail at atom 0, +tail at atom 2^23 - 1, else the body."""
  m = bits >> 9
  return jnp.where(m == 0, -tail, jnp.where(m == _ATOM_TOP, tail, bits_to_normal(bits)))


def _normal_from_bits(key: jax.Array, bits: jax.Array, tail_words=None) -> jax.Array:
  """float32[S]: `bits_to_normal` of each word, the extreme atoms redrawn from the tails
  (`_tail_fill`, `_assemble_normal`)."""
  return _assemble_normal(bits, _tail_fill(key, bits, tail_words))


@functools.lru_cache(maxsize=None)
def normal_support() -> tuple[float, float]:
  """(z_min, z_max) of `standard_normal`, evaluated from its code path at every atom; cached.

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
  """tau = Phi(z_min) + 1 - Phi(z_max) ~ 1.5e-36, rounded up: the per-draw term of
  `dpjax.accounting.sampler_delta`.

  Examples:
    >>> 1e-37 < normal_tail_mass() < 1e-35
    True
  """
  z_min, z_max = normal_support()
  tau = 0.5 * math.erfc(-z_min / math.sqrt(2.0)) + 0.5 * math.erfc(z_max / math.sqrt(2.0))
  return tau * (1.0 + 1e-9)


def standard_normal(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """N(0, 1) float32[shape] samples: inverse-CDF of a 23-bit uniform, with exact tails.

  With m_i the top 23 bits of `random_bits(key, S)[i]` (S < 2^31), sample i is
  Phi^-1(m_i 2^-23) for 1 <= m_i <= 2^23 - 2, as `jax.random.normal`; the two extreme
  atoms (mass 2^-23 each, |z| > 5.1666) are redrawn as -+Phi^-1(v_i), v_i uniform on
  (0, 2^-23) down to 2^-119. Support `normal_support()` = +-12.6267.

  Privacy (support, not lattice): Z' = clip(Z, z_min, z_max), so K draws differ from ideal
  ones with probability <= K tau (tau = `normal_tail_mass()`), and an (eps, delta)-DP ideal
  mechanism is (eps, delta + (1 + e^eps) K tau)-DP (`dpjax.accounting.sampler_delta`). The
  float32 lattice effect (Mironov 2012) is NOT covered here.
  """
  shape = _validate.check_sizes(shape, "shape", minimum=0)
  size = math.prod(shape)
  num = max(1, size)
  if num >= 2 ** 31:
    raise ValueError(f"shape must have fewer than 2^31 elements, got {shape}")
  words = _threefry_words(key)
  if words is None:
    bits = jax.random.bits(key, (num,), jnp.uint32)
    return _normal_from_bits(key, bits)[:size].reshape(shape)
  # Stored once: the tail count and the transform both read every word.
  bits = _once(words[0], lambda: _stream_words(words, num, jnp.arange(num, dtype=jnp.uint32)))
  bits = bits[:size]
  return _normal_from_bits(key, bits).reshape(shape)


def standard_normals(keys: jax.Array, shapes) -> list[jax.Array]:
  """[standard_normal(keys[l], shapes[l]) for l], bit for bit, drawn as one stream.

  For threefry keys the L streams are hashed, tail-filled and transformed together, so
  the program holds one copy of the sampler whatever L (flat compile time in the number
  of parameter leaves).
  """
  shapes = [_validate.check_sizes(s, "shape", minimum=0) for s in shapes]
  if keys.shape[:1] != (len(shapes),):
    raise ValueError(f"keys must hold one key per shape ({len(shapes)}), got shape "
                     f"{keys.shape}")
  sizes = [math.prod(s) for s in shapes]
  if any(n >= 2 ** 31 for n in sizes):
    raise ValueError(f"each shape must have fewer than 2^31 elements, got {shapes}")
  typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
  threefry = (str(jax.random.key_impl(keys)) == "threefry2x32" if typed
              else keys.dtype == jnp.uint32 and keys.shape[1:] == (2,))
  live = [l for l, n in enumerate(sizes) if n > 0]
  if not threefry or len(live) < 2:
    return [standard_normal(keys[l], s) for l, s in enumerate(shapes)]
  data = jax.random.key_data(keys) if typed else keys
  starts = np.cumsum([0] + [sizes[l] for l in live])

  def per_word(e, values):
    """values[l] for the draw word e belongs to (selects that fuse into the hash)."""
    out = values[0]
    for l in range(1, len(live)):
      out = jnp.where(e >= jnp.uint32(starts[l]), values[l], out)
    return out

  def key_and_index(e):
    """(k0, k1, j): the key words of word e's draw and e's index j within that draw."""
    return (per_word(e, [data[l, 0] for l in live]), per_word(e, [data[l, 1] for l in live]),
            e - per_word(e, [jnp.uint32(starts[i]) for i in range(len(live))]))

  def stream():
    e = jnp.arange(int(starts[-1]), dtype=jnp.uint32)
    k0, k1, j = key_and_index(e)
    h = per_word(e, [jnp.uint32((sizes[l] + 1) // 2) for l in live])  # `_stream_words`
    odd = per_word(e, [jnp.bool_(sizes[l] % 2 == 1) for l in live])
    first = j < h
    block = jnp.where(first, j, j - h)
    c1 = jnp.where(odd & (block == h - jnp.uint32(1)), jnp.uint32(0), block + h)
    y0, y1 = threefry2x32(k0, k1, block, c1)
    return jnp.where(first, y0, y1)
  bits = _once(data[live[0], 0], stream)
  z = _normal_from_bits(None, bits,
                        lambda i: _tail_blocks(*key_and_index(i.astype(jnp.uint32))))
  out, start = [], 0
  for l, s in enumerate(shapes):
    out.append(z[start:start + sizes[l]].reshape(s) if sizes[l] else jnp.zeros(s, jnp.float32))
    start += sizes[l]
  return out


def bernoulli_threshold(sampling_prob: float, bit_width: int = 32) -> int:
  """floor(q * 2^w): a w-bit uniform u is "in" iff u < threshold; P(in) in (q - 2^-w, q]."""
  sampling_prob = _validate.check_sampling_prob(sampling_prob)
  if isinstance(bit_width, (bool, np.bool_)) or bit_width not in (16, 32):
    raise ValueError(f"bit_width must be 16 or 32, got {bit_width}")
  return min(int(math.floor(float(sampling_prob) * 2.0 ** bit_width)), 2 ** bit_width - 1)


def poisson_mask(key: jax.Array, sampling_prob: float, num_records: int) -> jax.Array:
  """Independent Bernoulli(q) inclusion bits: bool[N].

  Record i is in iff a w-bit uniform integer (w = `mask_bit_width(q)`) is < floor(q 2^w):
  probability in (q - 2^-w, q]. The integers are `random_bits(key, N)` (w = 32), or the
  high then low halves of `random_bits(key, ceil(N / 2))` (w = 16).

  Examples:
    >>> import jax
    >>> poisson_mask(jax.random.key(0), 1.0, 3)
    Array([ True,  True,  True], dtype=bool)
  """
  # The uint32 index, word and integer of each record, and its bool: 13 bytes a record.
  num_records = _validate.check_size(num_records, "num_records", bytes_per_unit=13)
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
  """Bits per Bernoulli draw in `poisson_mask`: 16 when q >= 1/16, else 32."""
  sampling_prob = _validate.check_sampling_prob(sampling_prob)
  return 16 if sampling_prob >= 1.0 / 16.0 else 32


