"""DP-SGD: Poisson masks, per-example clipping, a Gaussian aggregate, many models at once.

One step of DP-SGD (Abadi et al. 2016) for a model with dataset size n:

  1. Poisson sampling: each record is in the batch independently with prob. q
     (a static-shape 0/1 mask over the records, `poisson_mask`);
  2. per-example gradients g_i, clipped to L2 norm <= C (`clipped_grad_sum`);
  3. G = sum_i mask_i * clip(g_i) + N(0, sigma^2 C^2 I);
  4. update = G / B with the FIXED expected batch size B = q * n (never the realised
     size, which depends on who is in the data), then any optax optimiser.

Steps 3-4 are `dp_aggregate`, an optax-style GradientTransformation (pure init /
update, the noise key carried in its state), so `optax.sgd`, `optax.adam`, ... chain
after it as post-processing. The accountant is told (q, sigma, T, delta) by
`DpSgdConfig.epsilon()`, built from the same fields that drive sampling and noise.

`train_many` trains M models in one jitted program: vmap over models, `lax.scan`
over the T steps; model i uses `jax.random.split(key, M)[i]` and its own membership
mask `keep_MxN[i]`, and equals `train_one` with that key. Logistic regression uses
a closed-form GLM path (per-example gradient = residual * features, so clipping is
a per-row scale and a step over M models is two matmuls); `models.mlp` and
`models.cnn` use ghost clipping (`dpjax.ghost`); any other model uses `vmap(grad)`
(`two_pass_clipped_grad_sum`, norms by `dpjax.sqnorm`); `clipped_sum_fn=` overrides
the choice.

Random numbers: every step draws its Bernoulli(q) mask as raw uniform integers of
w bits compared with the threshold floor(q * 2^w), w = 16 for q >= 1/16 and 32
otherwise (so the realised inclusion probability is below q by less than 2^-w,
never above it: the accountant's q is conservative), and Gaussian noise
by inverting the normal CDF of a uniform (`standard_normal`, as jax.random.normal),
both from threefry2x32 in counter mode using both output words of every hash
(`random_bits`; half the hashing of the default jax.random.bits), keyed per model
and per step (`fold_in(key, step)`), so a model's stream depends only on its own
key, never on M or the chunking. The samplers compute the hash with unrolled
integer ops (`threefry2x32`) and are tested bit-identical to jax's primitive; see
the "Random numbers" section below for why that is faster. (The "rbg" generator
was measured slower here and its vmap is not equal to a loop over keys, so it is
not used.)

Shape letters: M models, N records, D features, B batch, T steps.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import models
  >>> x = jax.random.normal(jax.random.key(0), (40, 3))
  >>> y = (x[:, 0] > 0).astype(jnp.int32)
  >>> cfg = DpSgdConfig(dataset_size=40, sampling_prob=0.25, num_steps=20,
  ...                   noise_multiplier=1.0)
  >>> out = train_many(jax.random.key(1), x, y, jnp.ones((4, 40), bool), cfg,
  ...                  models.logistic_regression(3), progress=False)
  >>> out.params["w"].shape
  (4, 3)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.extend import random as jax_random_ext

from dpjax import ghost
from dpjax import models as models_lib
from dpjax import sqnorm

PyTree = Any

_SAMPLERS = ("poisson", "shuffle")
# Steps per scan iteration when a chunk has at least _UNROLL_MIN_MODELS models of at
# most _UNROLL_MAX_PARAMS parameters and uses the GLM closed form (performance only:
# audit workload M = 2000, 0.43 -> 0.39 s; costs ~0.2 s of compile time, not worth it
# for small runs). Not for vmap(grad) clipping: there the unrolled body made XLA
# materialise the [N, M, P] broadcast of x once per step (two-pass generic path
# 1.24 s unrolled 1 vs 2.11 s unrolled 4, same workload).
_SCAN_UNROLL = 4
_UNROLL_MAX_PARAMS = 4096
_UNROLL_MIN_MODELS = 256
# Models per chunk unless max_chunk says otherwise: on the audit workload (d = 56,
# n = 150) chunks of 2000-4000 models ran ~30 % faster than one chunk of 20,000
# (cache locality), 1000 or fewer slower again. Performance only; results do not
# depend on chunking.
_DEFAULT_MAX_CHUNK = 4096
_ACCOUNTANTS = ("rdp", "pld")


class UnaccountedSamplingWarning(UserWarning):
  """Training uses a sampler the privacy accountant does not model."""


class FaultyDpSgdWarning(UserWarning):
  """A deliberately broken DP-SGD variant is in use; its epsilon is NOT valid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Faults:
  """Deliberately broken DP-SGD variants, for audits and tests only.

  All False (the default) is the correct algorithm. Any True voids the guarantee
  that `DpSgdConfig.epsilon()` reports (a FaultyDpSgdWarning says so).

  Attributes:
    clip_batch_mean: clip the batch-mean gradient instead of each example; the
      "sum" handed to the noise is realised_batch_size * clip(mean gradient, C),
      whose sensitivity is not C.
    realised_batch_denominator: divide by the realised batch size (at least 1)
      instead of the fixed q * n.
    noise_without_clip_norm: noise std sigma instead of sigma * C.
    noise_on_mean: noise N(0, sigma^2 C^2) added after dividing by B (to the mean).
  """
  clip_batch_mean: bool = False
  realised_batch_denominator: bool = False
  noise_without_clip_norm: bool = False
  noise_on_mean: bool = False

  def __post_init__(self):
    for f in dataclasses.fields(self):
      if not isinstance(getattr(self, f.name), bool):
        raise ValueError(f"Faults.{f.name} must be a bool, got {getattr(self, f.name)!r}")

  @property
  def any(self) -> bool:
    return any(getattr(self, f.name) for f in dataclasses.fields(self))


@functools.lru_cache(maxsize=256)
def _calibrated_sigma(target_epsilon, sampling_prob, num_steps, delta, accountant,
                      dataset_size):
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  return float(accounting.calibrate_noise(target_epsilon, sampling_prob, num_steps, delta,
                                          accountant=accountant, dataset_size=dataset_size))


@functools.lru_cache(maxsize=256)
def _epsilon(sigma, sampling_prob, num_steps, delta, accountant, dataset_size):
  # dataset_size lets the accountant warn when delta >= 1/n.
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  return float(accounting.dpsgd_epsilon(sigma, sampling_prob, num_steps, delta,
                                        accountant=accountant, dataset_size=dataset_size))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpSgdConfig:
  """What DP-SGD does, and therefore what the accountant is told.

  Attributes:
    dataset_size: n >= 1, public; the fixed denominator is B = q * n.
    sampling_prob: q in (0, 1].
    num_steps: T >= 1.
    l2_clip_norm: C > 0; math.inf disables clipping (non-private baseline; then
      noise_multiplier must be 0).
    noise_multiplier: sigma >= 0 (0 = the clipped-noiseless baseline), or None when
      target_epsilon is given.
    target_epsilon: eps > 0; sigma is then calibrated with
      `dpjax.accounting.calibrate_noise` at (q, T, delta). Give exactly one of
      noise_multiplier and target_epsilon.
    delta: in (0, 1).
    learning_rate: > 0 (used by the default optimiser, SGD).
    momentum: in [0, 1) (default optimiser only).
    sampler: "poisson" (what the accountants model) or "shuffle" (fixed-size batches
      of round(q * n) from a fresh shuffle each epoch; NOT covered by the RDP/PLD
      accountants; warns).
    faults: deliberately broken variants, for audits (default: none).
    accountant: "rdp" or "pld".
  """
  dataset_size: int
  sampling_prob: float
  num_steps: int
  l2_clip_norm: float = 1.0
  noise_multiplier: float | None = None
  target_epsilon: float | None = None
  delta: float = 1e-5
  learning_rate: float = 0.5
  momentum: float = 0.0
  sampler: str = "poisson"
  faults: Faults = Faults()
  accountant: str = "rdp"

  def __post_init__(self):
    n = self.dataset_size
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
      raise ValueError(f"dataset_size must be an integer >= 1, got {n!r}")
    q = self.sampling_prob
    if not (isinstance(q, (int, float, np.floating)) and 0.0 < q <= 1.0):
      raise ValueError(f"sampling_prob must be in (0, 1], got {q!r}")
    t = self.num_steps
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
      raise ValueError(f"num_steps must be an integer >= 1, got {t!r}")
    c = self.l2_clip_norm
    if not (isinstance(c, (int, float, np.floating)) and c > 0):
      raise ValueError(f"l2_clip_norm must be > 0 (math.inf = no clipping), got {c!r}")
    if (self.noise_multiplier is None) == (self.target_epsilon is None):
      raise ValueError("give exactly one of noise_multiplier (sigma >= 0) and "
                       f"target_epsilon (> 0); got noise_multiplier={self.noise_multiplier!r},"
                       f" target_epsilon={self.target_epsilon!r}")
    s = self.noise_multiplier
    if s is not None and not (isinstance(s, (int, float, np.floating)) and 0 <= s < math.inf):
      raise ValueError(f"noise_multiplier must be a finite number >= 0, got {s!r}")
    e = self.target_epsilon
    if e is not None and not (isinstance(e, (int, float, np.floating)) and 0 < e < math.inf):
      raise ValueError(f"target_epsilon must be a finite number > 0, got {e!r}")
    if math.isinf(c) and (s is None or s > 0):
      raise ValueError("l2_clip_norm = inf (no clipping) has unbounded sensitivity: "
                       "noise_multiplier must be 0 (the non-private baseline)")
    d = self.delta
    if not (isinstance(d, (int, float, np.floating)) and 0.0 < d < 1.0):
      raise ValueError(f"delta must be in (0, 1), got {d!r}")
    lr = self.learning_rate
    if not (isinstance(lr, (int, float, np.floating)) and 0 < lr < math.inf):
      raise ValueError(f"learning_rate must be a finite number > 0, got {lr!r}")
    m = self.momentum
    if not (isinstance(m, (int, float, np.floating)) and 0.0 <= m < 1.0):
      raise ValueError(f"momentum must be in [0, 1), got {m!r}")
    if self.sampler not in _SAMPLERS:
      raise ValueError(f"sampler must be one of {_SAMPLERS}, got {self.sampler!r}")
    if self.accountant not in _ACCOUNTANTS:
      raise ValueError(f"accountant must be one of {_ACCOUNTANTS}, got {self.accountant!r}")
    if not isinstance(self.faults, Faults):
      raise ValueError(f"faults must be a Faults instance, got {self.faults!r}")
    if self.sampler == "shuffle":
      warnings.warn(
          "DpSgdConfig(sampler='shuffle'): fixed-size shuffled batches are NOT what the "
          "RDP/PLD accountants model (they assume Poisson sampling); epsilon() is then "
          "not a valid guarantee (Chua et al. 2024).", UnaccountedSamplingWarning,
          stacklevel=3)
    if self.faults.any:
      warnings.warn(f"DpSgdConfig with {self.faults}: a deliberately broken DP-SGD; "
                    "epsilon() does not hold for it.", FaultyDpSgdWarning, stacklevel=3)

  @property
  def expected_batch_size(self) -> float:
    """B = q * n, the fixed public denominator."""
    return float(self.sampling_prob) * float(self.dataset_size)

  @property
  def sigma(self) -> float:
    """The noise multiplier actually used (calibrated if target_epsilon was given)."""
    if self.noise_multiplier is not None:
      return float(self.noise_multiplier)
    return _calibrated_sigma(float(self.target_epsilon), float(self.sampling_prob),
                             int(self.num_steps), float(self.delta), self.accountant,
                             int(self.dataset_size))

  @property
  def epochs(self) -> float:
    return self.num_steps * float(self.sampling_prob)

  def epsilon(self) -> float:
    """The epsilon spent at `delta`: accounting.dpsgd_epsilon(sigma, q, T, delta).

    math.inf when sigma == 0. Warns when the sampler or a fault is not what the
    accountant models (the number is then not a guarantee).
    """
    if self.sampler != "poisson":
      warnings.warn("epsilon() accounts for Poisson sampling, but sampler="
                    f"{self.sampler!r}: the value is not a guarantee.",
                    UnaccountedSamplingWarning, stacklevel=2)
    if self.faults.any:
      warnings.warn("epsilon() of a faulty DP-SGD is not a guarantee.", FaultyDpSgdWarning,
                    stacklevel=2)
    s = self.sigma
    if s == 0.0:
      return math.inf
    return _epsilon(s, float(self.sampling_prob), int(self.num_steps), float(self.delta),
                    self.accountant, int(self.dataset_size))


# ----------------------------------------------------------------------------------
# Random numbers.
#
# Everything here is threefry2x32 (20 rounds, Salmon et al. 2011), the hash behind
# jax.random's default keys, and reproduces jax's outputs bit for bit (tested), so
# switching between the two changes no result. Inside the many-model scan it is
# cheaper than calling jax.random because:
#   * the 20 rounds are written out as plain integer ops (`threefry2x32`), where
#     jax's CPU lowering runs them as a rolled XLA while-loop of 5 trips that
#     writes the state to memory after every 4 rounds;
#   * XLA:CPU fuses each output of an elementwise graph separately and treats
#     integer ops as free to duplicate, so a consumer of several words of one hash
#     (4 mask bits, or both output words) would recompute the hash per word, and a
#     hash fused into erfinv ran 2x slower than the two apart. `_once` therefore
#     computes what a sampler needs from each hash in a one-trip while loop (XLA
#     cannot see that it runs once, and does not fuse across it), packed into one
#     element per hash: 4 (or 2) mask bits in a uint32, or both words in a
#     complex64 (bit patterns carried as floats; tested bit-exact, NaN patterns
#     included). The unpacking and the normal transform fuse into the consumer.
#     Measured on the audit workload (M = 2000): 0.46 s -> 0.36 s, same outputs.

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


def _shuffle_mask(key, step, keep_N, batch_size, steps_per_epoch):
  """Fixed-size batches: batch (step mod steps_per_epoch) of a per-epoch shuffle of
  the kept records (NOT Poisson; see UnaccountedSamplingWarning)."""
  epoch = step // steps_per_epoch
  j = step % steps_per_epoch
  u = jax.random.uniform(jax.random.fold_in(key, epoch), keep_N.shape)
  u = jnp.where(keep_N, u, 2.0)
  rank = jnp.argsort(jnp.argsort(u))
  return (rank >= j * batch_size) & (rank < (j + 1) * batch_size) & keep_N


# ----------------------------------------------------------------------------------
# Clipping.


def clip_factor(norms_B: jax.Array, l2_clip_norm: float) -> jax.Array:
  """min(1, C / norm) per example (1 for norm 0; 1 everywhere when C = inf)."""
  if math.isinf(l2_clip_norm):
    return jnp.ones_like(norms_B)
  return l2_clip_norm / jnp.maximum(norms_B, l2_clip_norm)


def _loss_one(model, params, x_F, y):
  """The loss of one record (its vmap over records is the per-example loss)."""
  return models_lib.per_example_loss(model, params, x_F[None], y[None])[0]


def per_example_grads(model: models_lib.Model, params: PyTree, x_BxF: jax.Array,
                      y_B: jax.Array) -> PyTree:
  """Per-example gradients by vmap(grad): a pytree like params with leaves [B, ...]."""
  return sqnorm.per_example_grads(functools.partial(_loss_one, model), params, x_BxF, y_B)


def clipped_grad_sum(model: models_lib.Model, params: PyTree, x_BxF: jax.Array,
                     y_B: jax.Array, weights_B: jax.Array, l2_clip_norm: float
                     ) -> tuple[PyTree, jax.Array]:
  """sum_i weights_i * clip(g_i, C) by vmap(grad), and the norms before clipping.

  Args:
    model, params: the model and its (unbatched) parameters.
    x_BxF, y_B: the records.
    weights_B: float32[B] (the 0/1 Poisson mask).
    l2_clip_norm: C > 0 (inf: no clipping).
  Returns:
    (sum pytree like params, norms float32[B]).
  Privacy: with 0/1 weights, adding or removing one record changes the sum by a
    vector of L2 norm <= C.
  """
  g = per_example_grads(model, params, x_BxF, y_B)
  norms = jnp.sqrt(sqnorm.tree_sq_norm_per_example(g))
  a = weights_B * clip_factor(norms, l2_clip_norm)
  s = jax.tree.map(lambda gl: jnp.tensordot(a, gl, axes=1), g)
  return s, norms


def two_pass_clipped_grad_sum(model: models_lib.Model, params: PyTree, x_BxF: jax.Array,
                              y_B: jax.Array, weights_B: jax.Array, l2_clip_norm: float,
                              *, rewrite_norms: bool = True
                              ) -> tuple[PyTree, jax.Array]:
  """Same result as `clipped_grad_sum`, computed in two passes.

  Pass 1: per-example norms of the vmap(grad) gradients, `sqnorm.per_example_sq_norms`
  (with rewrite_norms, the squared norm of every per-example matmul gradient is
  taken as ||input||^2 ||output grad||^2 found in the jaxpr, an exact identity, so
  those [B, P] gradients are never formed; False: the plain reduction); pass 2: one
  ordinary backward pass of sum_i a_i loss_i with the clip weights a_i = weights_i *
  min(1, C / norm_i) held constant, which equals sum_i a_i g_i. The engine's default
  for models it has no special path for (benchmarks/dpsgd.py measures it).
  """
  sq = sqnorm.per_example_sq_norms(functools.partial(_loss_one, model), params, x_BxF, y_B,
                                   rewrite=rewrite_norms)
  norms = jnp.sqrt(sq)
  a = jax.lax.stop_gradient(weights_B * clip_factor(norms, l2_clip_norm))

  def weighted_loss(p):
    # vmap of the one-record loss (not the batched loss): its forward pass is then the
    # same computation as pass 1's and XLA computes it once (3 matmul kernels per step
    # instead of 4 in the compiled audit workload; 0.82 vs 0.86 s at M = 2000).
    losses = jax.vmap(functools.partial(_loss_one, model), in_axes=(None, 0, 0))(
        p, x_BxF, y_B)
    return jnp.sum(a * losses)
  return jax.grad(weighted_loss)(params), norms


def glm_clipped_grad_sum(l2: float, params: PyTree, x_BxD: jax.Array, y_B: jax.Array,
                         weights_B: jax.Array, l2_clip_norm: float
                         ) -> tuple[PyTree, jax.Array]:
  """Closed-form clipped sum for logistic regression with params {"w": [D]}.

  g_i = r_i x_i + l2 w with r_i = sigmoid(x_i . w) - y_i, so
  ||g_i||^2 = r_i^2 ||x_i||^2 + 2 l2 r_i (x_i . w) + l2^2 ||w||^2, and
  sum_i a_i g_i = X^T (a * r) + l2 (sum_i a_i) w: two matvecs (two matmuls over M
  models under vmap). Same outputs as `clipped_grad_sum` to float tolerance.
  """
  w = params["w"]
  # Written w . x_i so that under vmap the logits come out [M, B], the layout the
  # elementwise step reads (x @ w gave [B, M] and a transposed read: 0.36 -> 0.32 s).
  z = jnp.einsum("d,bd->b", w, x_BxD)
  r = jax.nn.sigmoid(z) - y_B.astype(z.dtype)
  sq = jnp.sum(jnp.square(x_BxD), axis=1)
  if l2 == 0.0:
    norms = jnp.abs(r) * jnp.sqrt(sq)
  else:
    n2 = jnp.square(r) * sq + 2.0 * l2 * r * z + l2 * l2 * jnp.sum(jnp.square(w))
    norms = jnp.sqrt(jnp.maximum(n2, 0.0))
  a = weights_B * clip_factor(norms, l2_clip_norm)
  s = (a * r) @ x_BxD
  if l2 != 0.0:
    s = s + l2 * jnp.sum(a) * w
  return {"w": s}, norms


@functools.lru_cache(maxsize=64)
def default_clipped_sum_fn(model: models_lib.Model) -> Callable:
  """The clipped-sum function train_many uses for `model` when none is given.

  logistic regression: the GLM closed form (`glm_clipped_grad_sum`); `models.mlp` /
  `models.cnn`: ghost clipping (`dpjax.ghost.clipped_sum_fn`, no per-example
  gradients for dense layers); any other model: vmap(grad) in two passes
  (`two_pass_clipped_grad_sum`). All give the same clipped sum to float tolerance
  (tests/dpsgd_test.py, tests/ghost_test.py, tests/sqnorm_test.py); they differ in
  speed only. DP-SGD steps measured by benchmarks/dpsgd_deep.py (batch 256): MLP
  64-256-256-10 ghost 383k ex/s, two-pass vmap(grad) 267k, one-pass vmap(grad) 6.5k;
  CNN 8x8 ghost 180k, two-pass vmap(grad) 73k (its convolutions get no shortcut).
  """
  if model.kind == "logistic_regression":
    return functools.partial(glm_clipped_grad_sum, model.l2)
  if model.kind in ("mlp", "cnn"):
    return ghost.clipped_sum_fn(model)
  return functools.partial(two_pass_clipped_grad_sum, model)


# ----------------------------------------------------------------------------------
# The DP aggregate as an optax GradientTransformation.


class DpAggregateState(NamedTuple):
  key: jax.Array      # noise key; step t uses fold_in(key, count)
  count: jax.Array    # int32 scalar, number of updates so far


def _aggregate_noise(key, count, leaves, noise_stddev):
  """The noise `dp_aggregate(noise_stddev, ., key)` adds at update number `count`:
  a list like `leaves` (arrays or shape structs), None everywhere when std is 0."""
  if isinstance(noise_stddev, (int, float)) and noise_stddev == 0:
    return [None] * len(leaves)   # a static 0 (a traced std always draws)
  ks = split(fold_in(key, count), len(leaves))
  return [noise_stddev * standard_normal(kk, l.shape).astype(l.dtype)
          for kk, l in zip(ks, leaves)]


def _privatize(leaves, noise, inv_b, faults, batch_size):
  """(clipped sum + noise) / B for each leaf, or the faulty variants' arithmetic."""
  if faults.realised_batch_denominator:
    if batch_size is None:
      raise ValueError("faults.realised_batch_denominator needs update(..., batch_size=)")
    denom = 1.0 / jnp.maximum(batch_size.astype(jnp.float32), 1.0)
  else:
    denom = inv_b
  out = []
  for l, nz in zip(leaves, noise):
    if nz is None:
      out.append(l * denom)
    elif faults.noise_on_mean:
      out.append(l * denom + nz)
    else:
      out.append((l + nz) * denom)
  return out


def dp_aggregate(noise_stddev: float, expected_batch_size: float, key: jax.Array, *,
                 faults: Faults = Faults()) -> optax.GradientTransformationExtraArgs:
  """Noise + fixed denominator: clipped_sum -> (clipped_sum + N(0, std^2 I)) / B.

  Args:
    noise_stddev: sigma * C >= 0.
    expected_batch_size: B = q * n > 0.
    key: the noise key (carried in the state; step t uses fold_in(key, t)).
    faults: `noise_on_mean` adds the noise after dividing by B;
      `realised_batch_denominator` divides by max(1, batch_size) (extra arg of
      update). (`noise_without_clip_norm` is the caller's choice of noise_stddev.)
  Returns:
    An optax GradientTransformationExtraArgs; update(clipped_sum, state, params=None,
    *, batch_size=None) returns (privatized update, new state). Chain any optax
    optimiser after it: everything after the noise is post-processing.
  Examples:
    >>> import jax, jax.numpy as jnp, optax
    >>> tx = optax.chain(dp_aggregate(0.0, 4.0, jax.random.key(0)), optax.sgd(1.0))
    >>> state = tx.init({"w": jnp.zeros(2)})
    >>> tx.update({"w": jnp.array([4.0, 8.0])}, state)[0]["w"]
    Array([-1., -2.], dtype=float32)
  """
  noise_stddev = float(noise_stddev)
  if not (noise_stddev >= 0 and math.isfinite(noise_stddev)):
    raise ValueError(f"noise_stddev must be a finite number >= 0, got {noise_stddev}")
  if not (expected_batch_size > 0 and math.isfinite(expected_batch_size)):
    raise ValueError(f"expected_batch_size must be finite and > 0, got {expected_batch_size}")
  inv_b = 1.0 / float(expected_batch_size)

  def init_fn(params):
    del params
    return DpAggregateState(key, jnp.zeros((), jnp.int32))

  def update_fn(updates, state, params=None, *, batch_size=None, **extra):
    del params, extra
    leaves, treedef = jax.tree.flatten(updates)
    noise = _aggregate_noise(state.key, state.count, leaves, noise_stddev)
    out = _privatize(leaves, noise, inv_b, faults, batch_size)
    return jax.tree.unflatten(treedef, out), DpAggregateState(state.key, state.count + 1)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------------
# Training.


class TrainResult(NamedTuple):
  """Output of train_many / train_one.

  Attributes:
    params: pytree with leaves [M, ...] (train_one: unbatched).
    observations: [M, T, ...] outputs of observe_fn, or None.
    stats: None, or {"times_sampled", "times_clipped", "norm_sum"}: float32[M, N]
      (over steps where the record was sampled: how often, how often its norm
      exceeded C, and the sum of its pre-clipping norms).
  """
  params: PyTree
  observations: jax.Array | None
  stats: dict | None


def _noise_std(cfg: DpSgdConfig) -> float:
  """The Gaussian noise std the engine adds to the clipped sum: sigma * C (sigma
  alone under faults.noise_without_clip_norm; 0 without clipping, where sigma = 0)."""
  sigma, c = cfg.sigma, float(cfg.l2_clip_norm)
  if cfg.faults.noise_without_clip_norm:
    return sigma
  return sigma * (0.0 if math.isinf(c) else c)


def _noise_free(cfg: DpSgdConfig) -> DpSgdConfig:
  """cfg with its noise fields blanked: what the compiled program depends on (the
  noise std is an input, so a sweep over sigma or epsilon compiles once)."""
  with warnings.catch_warnings():  # cfg already warned at construction
    warnings.simplefilter("ignore", UnaccountedSamplingWarning)
    warnings.simplefilter("ignore", FaultyDpSgdWarning)
    return dataclasses.replace(cfg, noise_multiplier=0.0, target_epsilon=None)


def _train_single(key, keep_N, canary_keep, noise_std, init_params, x, y, *,
                  cfg: DpSgdConfig, model, observe_fn, per_example_stats, gradient_canary,
                  clipped_sum_fn, optimizer, unroll=1):
  """Trains one model (vmapped by train_many). Pure; traced under jit.

  `noise_std` is this model's float32 scalar `_noise_std(its config)`, an input of
  the program (cfg here has its noise fields blanked). Step t's random draws (mask,
  noise, canary bit) depend only on the model's keys and t, never on the parameters
  (`draws`), so XLA can compute them alongside the gradient arithmetic. The noise is
  exactly what `dp_aggregate(noise_std, B, k_noise)` adds at update t (the same
  helpers; a zero std adds exact zeros).
  """
  n_rec = x.shape[0]
  q = float(cfg.sampling_prob)
  c = float(cfg.l2_clip_norm)
  k_init, k_sample, k_noise, k_canary = jax.random.split(key, 4)
  params = model.init(k_init) if init_params is None else init_params
  inv_b = 1.0 / float(cfg.expected_batch_size)
  opt_state = optimizer.init(params)
  keep_f = keep_N.astype(jnp.float32)
  if gradient_canary is not None:
    g_c = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), gradient_canary)
    norm_c = jnp.sqrt(sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(g_c)))
    g_c_clipped = jax.tree.map(lambda v: v * clip_factor(norm_c, c), g_c)
  b_fixed = max(1, int(round(cfg.expected_batch_size)))
  steps_per_epoch = max(1, int(cfg.dataset_size) // b_fixed)
  leaves_like, treedef = jax.tree.flatten(params)

  def draws(t):
    if q >= 1.0:
      wts = keep_f
    elif cfg.sampler == "poisson":
      wts = (poisson_mask(fold_in(k_sample, t), q, n_rec) & keep_N).astype(jnp.float32)
    else:
      wts = _shuffle_mask(k_sample, t, keep_N, b_fixed, steps_per_epoch).astype(jnp.float32)
    noise = _aggregate_noise(k_noise, t, leaves_like, noise_std)
    bit = None
    if gradient_canary is not None:
      if q >= 1.0:
        bit = jnp.ones((), jnp.float32)
      else:
        bit = poisson_mask(fold_in(k_canary, t), q, 1)[0].astype(jnp.float32)
      bit = bit * canary_keep.astype(jnp.float32)
    return wts, noise, bit

  def step(carry, t):
    params, opt_state, st = carry
    wts, noise, bit = draws(t)
    if cfg.faults.clip_batch_mean:
      gsum, norms = clipped_sum_fn(params, x, y, wts, math.inf)
      cnt = jnp.maximum(jnp.sum(wts), 1.0)
      mean = jax.tree.map(lambda v: v / cnt, gsum)
      mnorm = jnp.sqrt(sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(mean)))
      gsum = jax.tree.map(lambda v: v * (clip_factor(mnorm, c) * jnp.sum(wts)), mean)
    else:
      gsum, norms = clipped_sum_fn(params, x, y, wts, c)
    bsize = jnp.sum(wts)
    if gradient_canary is not None:
      gsum = jax.tree.map(lambda s, v: s + bit * v, gsum, g_c_clipped)
      bsize = bsize + bit
    priv = jax.tree.unflatten(
        treedef, _privatize(treedef.flatten_up_to(gsum), noise, inv_b, cfg.faults, bsize))
    obs = observe_fn(priv) if observe_fn is not None else None
    upd, opt_state = optimizer.update(priv, opt_state, params)
    params = optax.apply_updates(params, upd)
    if per_example_stats:
      clipped = (norms > c).astype(jnp.float32) * wts
      st = (st[0] + wts, st[1] + clipped, st[2] + wts * norms)
    return (params, opt_state, st), obs

  if per_example_stats:
    z = jnp.zeros((n_rec,), jnp.float32)
    st0 = (z, z, z)
  else:
    st0 = ()
  (params, _, st), obs = jax.lax.scan(
      step, (params, opt_state, st0), jnp.arange(cfg.num_steps, dtype=jnp.int32),
      unroll=unroll if sum(l.size for l in leaves_like) <= _UNROLL_MAX_PARAMS else 1)
  stats = None
  if per_example_stats:
    stats = {"times_sampled": st[0], "times_clipped": st[1], "norm_sum": st[2]}
  return params, obs, stats


@functools.lru_cache(maxsize=64)
def _compiled(cfg, model, observe_fn, per_example_stats, has_canary, clipped_sum_fn,
              optimizer, has_init, has_noise):
  def batched(key, keep, canary_keep, noise_std, init_params, canary, x, y):
    glm = (isinstance(clipped_sum_fn, functools.partial)
           and clipped_sum_fn.func is glm_clipped_grad_sum)
    unroll = _SCAN_UNROLL if glm and key.shape[0] >= _UNROLL_MIN_MODELS else 1

    def one(key, keep, canary_keep, noise_std):
      return _train_single(
          key, keep, canary_keep, noise_std if has_noise else 0.0, init_params, x, y,
          cfg=cfg, model=model,
          observe_fn=observe_fn, per_example_stats=per_example_stats,
          gradient_canary=canary if has_canary else None,
          clipped_sum_fn=clipped_sum_fn, optimizer=optimizer, unroll=unroll)
    return jax.vmap(one)(key, keep, canary_keep, noise_std)
  return jax.jit(batched)


def _bytes_per_model(x, model, init_params, cfg, per_example_stats, observe_fn,
                     clipped_sum_fn, params_shape):
  n, f = x.shape[0], int(np.prod(x.shape[1:]))
  p = sum(int(np.prod(l.shape)) for l in jax.tree.leaves(params_shape))
  per = 4 * (8 * p + 6 * n + f)          # params, optimiser state, noise, masks, logits
  if clipped_sum_fn is None and model.kind not in ("logistic_regression", "mlp", "cnn"):
    per += 4 * 3 * n * p                 # default vmap(grad): per-example gradients
  if per_example_stats:
    per += 4 * 3 * n
  return per


def train_many(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
               keep_MxN: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model, *,
               init_params: PyTree | None = None,
               observe_fn: Callable[[PyTree], jax.Array] | None = None,
               per_example_stats: bool = False,
               gradient_canary: PyTree | None = None,
               canary_keep_M: jax.typing.ArrayLike | None = None,
               clipped_sum_fn: Callable | None = None,
               optimizer: optax.GradientTransformation | None = None,
               memory_budget_bytes: int = 2 * 2 ** 30,
               max_chunk: int | None = None,
               model_sharding: jax.sharding.Sharding | None = None,
               progress: bool = True,
               _noise_std_M: np.ndarray | None = None) -> TrainResult:
  """Trains M models with DP-SGD in one jitted program per memory-sized chunk.

  Args:
    key: a jax.random key; model i uses jax.random.split(key, M)[i].
    x_NxF: float32[N, ...] records (all models share the pool).
    y_N: labels [N] ({0, 1} for binary models, ints for multi-class).
    keep_MxN: bool[M, N]; model i's private dataset is {j : keep_MxN[i, j]}.
    cfg: the DP-SGD configuration (dataset_size = the nominal size of each model's
      dataset, which fixes B = q * n).
    model: a models.Model.
    init_params: optional unbatched params shared by all models (default: model.init
      with each model's own init key).
    observe_fn: optional f(privatized update pytree) -> array, evaluated each step
      inside the scan; outputs stacked to [M, T, ...].
    per_example_stats: also return per-record clip statistics [M, N]. Warning:
      these are exact functions of the private data, NOT covered by the epsilon
      of the trained parameters; they are for analysis (disparate impact, audits)
      and must not be released as if private.
    gradient_canary: optional pytree like params: a Nasr-style gradient canary, an
      extra record whose per-example gradient is this fixed vector (clipped to C,
      Poisson-sampled with its own bit, counted in the realised batch size).
    canary_keep_M: bool[M], whether the canary is in model i's dataset (required
      with gradient_canary).
    clipped_sum_fn: f(params, x_BxF, y_B, weights_B, l2_clip_norm) -> (sum pytree,
      norms_B); default: `default_clipped_sum_fn(model)` (GLM closed form for
      logistic regression, ghost clipping for MLP / CNN, two-pass vmap(grad)
      otherwise).
    optimizer: optax transformation applied after the DP aggregate (default
      optax.sgd(cfg.learning_rate, momentum=cfg.momentum or None)). Pass the same
      object across calls to reuse the compiled program.
    memory_budget_bytes: rough cap on the working set; the model axis is chunked
      to stay under it (a tqdm bar over chunks).
    max_chunk: optional cap on models per chunk (default 4096, a measured
      cache-friendly size; chunks are balanced to minimise padding).
    model_sharding: optional sharding of the leading model axis (see
      `dpjax.parallel`); each chunk is then a multiple of the device count.
    progress: show a progress bar when there is more than one chunk.
    _noise_std_M: internal (`train_sweep`): per-model noise std instead of cfg's.
  Returns:
    TrainResult(params [M, ...], observations [M, T, ...] or None, stats or None).
  Raises:
    ValueError on shape mismatches, non-finite data, bad budgets.
  """
  x = jnp.asarray(x_NxF, jnp.float32)
  y = jnp.asarray(y_N)
  keep = jnp.asarray(keep_MxN)
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  n = x.shape[0]
  if y.shape != (n,):
    raise ValueError(f"y_N must have shape ({n},), got {y.shape}")
  if keep.ndim != 2 or keep.shape[1] != n:
    raise ValueError(f"keep_MxN must have shape [M, {n}], got {keep.shape}")
  if keep.dtype != jnp.bool_:
    raise ValueError(f"keep_MxN must be boolean, got {keep.dtype}")
  if keep.shape[0] < 1:
    raise ValueError("keep_MxN must have at least one row (M >= 1)")
  if not bool(jnp.all(jnp.isfinite(x))):
    raise ValueError("x_NxF contains NaN or inf")
  if not isinstance(cfg, DpSgdConfig):
    raise ValueError(f"cfg must be a DpSgdConfig, got {type(cfg)}")
  if not isinstance(model, models_lib.Model):
    raise ValueError(f"model must be a models.Model, got {type(model)}")
  if not (memory_budget_bytes > 0):
    raise ValueError(f"memory_budget_bytes must be > 0, got {memory_budget_bytes}")
  if max_chunk is not None and (int(max_chunk) != max_chunk or max_chunk < 1):
    raise ValueError(f"max_chunk must be a positive integer, got {max_chunk}")
  m = keep.shape[0]
  has_canary = gradient_canary is not None
  if has_canary:
    if canary_keep_M is None:
      raise ValueError("canary_keep_M (bool[M]) is required with gradient_canary")
    ck = jnp.asarray(canary_keep_M)
    if ck.shape != (m,) or ck.dtype != jnp.bool_:
      raise ValueError(f"canary_keep_M must be bool[{m}], got {ck.dtype}{list(ck.shape)}")
  else:
    if canary_keep_M is not None:
      raise ValueError("canary_keep_M given without gradient_canary")
    ck = jnp.zeros((m,), bool)
  params_shape = jax.eval_shape(model.init, jax.random.key(0))
  if init_params is not None:
    if jax.tree.structure(init_params) != jax.tree.structure(params_shape) or any(
        tuple(a.shape) != tuple(b.shape) for a, b in
        zip(jax.tree.leaves(init_params), jax.tree.leaves(params_shape))):
      raise ValueError("init_params must match the structure and shapes of model.init")
  if has_canary:
    if jax.tree.structure(gradient_canary) != jax.tree.structure(params_shape):
      raise ValueError("gradient_canary must have the structure of the model's params")
  if optimizer is None:
    optimizer = _default_optimizer(float(cfg.learning_rate), float(cfg.momentum))
  csf = clipped_sum_fn if clipped_sum_fn is not None else default_clipped_sum_fn(model)
  if _noise_std_M is None:
    # cfg.sigma resolves (and validates) target_epsilon on the host, before tracing.
    std = np.full((m,), _noise_std(cfg), np.float32)
  else:
    std = np.asarray(_noise_std_M, np.float32)
    if std.shape != (m,) or not np.all(np.isfinite(std) & (std >= 0)):
      raise ValueError(f"_noise_std_M must be {m} finite numbers >= 0")
  has_noise = bool(np.any(std > 0))
  fn = _compiled(_noise_free(cfg), model, observe_fn, bool(per_example_stats), has_canary,
                 csf, optimizer, init_params is not None, has_noise)

  per = _bytes_per_model(x, model, init_params, cfg, per_example_stats, observe_fn,
                         clipped_sum_fn, params_shape)
  if observe_fn is not None:
    per += 4 * cfg.num_steps * 8
  chunk = max(1, int(memory_budget_bytes // per))
  chunk = min(chunk, int(max_chunk) if max_chunk is not None else _DEFAULT_MAX_CHUNK)
  chunk = min(chunk, m)
  chunk = -(-m // -(-m // chunk))      # balance: the same number of chunks, less padding
  if model_sharding is not None:
    ndev = len(model_sharding.device_set)
    chunk = -(-chunk // ndev) * ndev   # whole models per device (padding repeats models)
  num_chunks = -(-m // chunk)
  if isinstance(key, _PresplitKeys):
    keys = key.keys
    if keys.shape[0] != m:
      raise ValueError(f"got {keys.shape[0]} model keys for M = {m} models")
  else:
    keys = jax.random.split(key, m)
  canary = gradient_canary if has_canary else None
  outs = []
  it = range(num_chunks)
  if progress and num_chunks > 1:
    import tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm.tqdm(it, desc=f"DP-SGD {m} models", unit="chunk")
  for ci in it:
    lo, hi = ci * chunk, min(m, (ci + 1) * chunk)
    idx = np.arange(lo, lo + chunk) % m if hi - lo < chunk else np.arange(lo, hi)
    args = (keys[idx], keep[idx], ck[idx], jnp.asarray(std[idx]))
    if model_sharding is not None:
      args = tuple(jax.device_put(a, model_sharding) for a in args)
    out = fn(*args, init_params, canary, x, y)
    if hi - lo < chunk:
      out = jax.tree.map(lambda a: a[: hi - lo], out)
    outs.append(out)
  if len(outs) == 1:
    params, obs, stats = outs[0]
  else:
    params, obs, stats = jax.tree.map(lambda *a: jnp.concatenate(a, axis=0), *outs)
  return TrainResult(params, obs, stats)


@functools.lru_cache(maxsize=64)
def _default_optimizer(learning_rate, momentum):
  return optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None)


def train_one(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
              keep_N: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model,
              *, canary_keep: bool | None = None, **kwargs) -> TrainResult:
  """Trains one model; equals model i of train_many when given that model's key.

  Args:
    key: the model's key (train_many's split(key, M)[i]).
    keep_N: bool[N] membership.
    canary_keep: with gradient_canary, whether the canary is in the dataset.
    Other arguments as in train_many.
  Returns:
    TrainResult without the leading model axis.
  """
  keep = jnp.asarray(keep_N)
  if keep.ndim != 1:
    raise ValueError(f"keep_N must have rank 1, got shape {keep.shape}")
  if canary_keep is not None:
    kwargs["canary_keep_M"] = jnp.asarray([bool(canary_keep)])
  kwargs.setdefault("progress", False)
  # train_many splits its key into M model keys; wrap so that model 0 gets `key`.
  out = _train_with_model_keys(key[None], keep[None], cfg, model, x_NxF, y_N, **kwargs)
  return jax.tree.map(lambda a: a[0], out)


def train_sweep(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                keep_MxN: jax.typing.ArrayLike, cfgs: Sequence[DpSgdConfig],
                config_index_M: jax.typing.ArrayLike, model: models_lib.Model,
                **kwargs) -> TrainResult:
  """Trains M models whose configs differ only in their noise, as ONE program.

  For an epsilon (or sigma) sweep: the noise std is an input of the compiled
  program, not part of it, so every config of the sweep shares one compile and one
  vmapped run. Model i is trained exactly as `train_many` trains model i with
  config cfgs[config_index_M[i]] and the same key (tested), so its guarantee is that
  config's `epsilon()`.

  Args:
    key: a jax.random key; model i uses jax.random.split(key, M)[i].
    x_NxF, y_N, keep_MxN, model: as in `train_many`.
    cfgs: one or more DpSgdConfig equal in every field except noise_multiplier /
      target_epsilon (e.g. one per epsilon, plus sigma = 0 for the noiseless baseline).
    config_index_M: int[M], model i's config is cfgs[config_index_M[i]].
    **kwargs: any other `train_many` keyword.
  Returns:
    TrainResult with leaves [M, ...], as `train_many`.
  Raises:
    ValueError: if the configs differ in anything but their noise, or an index is
      out of range.
  Example:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax import models
    >>> cfgs = [DpSgdConfig(dataset_size=8, sampling_prob=0.5, num_steps=3,
    ...                     noise_multiplier=s) for s in (0.0, 1.0, 4.0)]
    >>> out = train_sweep(jax.random.key(0), jnp.ones((8, 2)), jnp.ones((8,), int),
    ...                   jnp.ones((6, 8), bool), cfgs, [0, 0, 1, 1, 2, 2],
    ...                   models.logistic_regression(2), progress=False)
    >>> out.params["w"].shape
    (6, 2)
  """
  cfgs = tuple(cfgs)
  if not cfgs or not all(isinstance(c, DpSgdConfig) for c in cfgs):
    raise ValueError("cfgs must be a non-empty sequence of DpSgdConfig")
  base = _noise_free(cfgs[0])
  for j, c in enumerate(cfgs[1:], 1):
    if _noise_free(c) != base:
      diff = [f.name for f in dataclasses.fields(DpSgdConfig)
              if getattr(_noise_free(c), f.name) != getattr(base, f.name)]
      raise ValueError(f"cfgs[{j}] differs from cfgs[0] in {diff}; train_sweep configs may "
                       "differ only in noise_multiplier / target_epsilon")
  idx = np.asarray(config_index_M)
  m = np.shape(keep_MxN)[0] if np.ndim(keep_MxN) >= 1 else -1
  if idx.shape != (m,) or not np.issubdtype(idx.dtype, np.integer):
    raise ValueError(f"config_index_M must be int[{m}] (one config per model), got "
                     f"{idx.dtype}{list(idx.shape)}")
  if np.any((idx < 0) | (idx >= len(cfgs))):
    raise ValueError(f"config_index_M values must be in [0, {len(cfgs)})")
  stds = np.array([_noise_std(c) for c in cfgs], np.float64)
  return train_many(key, x_NxF, y_N, keep_MxN, cfgs[0], model,
                    _noise_std_M=stds[idx].astype(np.float32), **kwargs)


def _train_with_model_keys(keys_M, keep_MxN, cfg, model, x_NxF, y_N, **kwargs):
  """train_many with explicit per-model keys (no split)."""
  return train_many(_PresplitKeys(keys_M), x_NxF, y_N, keep_MxN, cfg, model, **kwargs)


class _PresplitKeys:
  """Marker: keys already split per model (used by train_one and dpjax.parallel)."""

  def __init__(self, keys):
    self.keys = keys
