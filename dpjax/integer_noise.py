"""Integer noise drawn exactly from a table: rounded Gaussian and rounded Laplace.

A float32 sampler's output lies on a lattice whose exact bits can rule out inputs
(Mironov 2012). For integer mu, round(mu + s Z) = mu + round(s Z): releasing mu + X,
X = round(s Z), is post-processing of mu + s Z (sensitivity in grid units).

Sampler: with F(k) = P(|X| <= k), the host computes (mpmath, 112-bit) T_k =
floor(2^95 F(k)), k < K, T_K = 2^95, K the smallest integer with P(|X| > K) < 2^-100.
A draw takes 95 uniform bits U and a sign bit from `prng.random_bits`; |X| is the
smallest k with U < T_k, found by exact 96-bit comparisons among the few candidates a
host-built guide (indexed by the binade of 2^95 - 1 - U) leaves. The realised Q is
exactly symmetric and

    TV(Q, P) <= tv := (K + 2) 2^-95 + P(|X| > K)        (`IntegerNoise.tv`),

so an (eps, delta)-DP mechanism with noise P is (eps, delta + (1 + e^eps) n tv)-DP with
n draws from Q (`accounting.sampler_delta(eps, n, tail_mass=tv)`). Tables are cached and
capped at 2^22 entries; gamma * k is exact in float32 for |k| < 2^24.

Shape letters: K the table's largest |X|.

Examples:
  >>> import jax
  >>> noise = rounded_gaussian(3.0)
  >>> x = sample(jax.random.key(0), noise, (4,))
  >>> x.dtype, x.shape
  (dtype('int32'), (4,))
  >>> noise.tv < 1e-25
  True
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np

from dpjax import _validate
from dpjax import prng

__all__ = ["IntegerNoise", "rounded_gaussian", "rounded_laplace", "sample", "table_pmf",
           "check_grid", "pow2_floor", "MAX_TABLE_SIZE", "EXACT_RANGE"]

MAX_TABLE_SIZE = 2 ** 22   # entries K + 1 of one table
EXACT_RANGE = 2 ** 24      # |k| < 2^24: gamma * k is exact in float32
_UNIFORM_BITS = 95
_TAIL_LOG2 = -100          # P(|X| > K) < 2^-100
_PREC = 112                # mpmath working precision (bits)
_M32 = (1 << 32) - 1
_GUIDE_BITS = 10           # log2 cells per binade of 2^95 - 1 - U in `_guide`


@dataclasses.dataclass(frozen=True, eq=False)
class IntegerNoise:
  """A symmetric integer noise X = round(scale * Z) and its sampling table.

  table: (hi, mid, lo) uint32[K + 1] words of T_k; tv: bound on one draw's TV distance
  from the ideal; tail: ideal P(|X| > K). Compared by identity (static arguments).
  """
  name: str
  scale: float
  table: tuple[np.ndarray, np.ndarray, np.ndarray]
  tv: float
  tail: float

  @property
  def max_abs(self) -> int:
    """K, the largest |X| the sampler outputs."""
    return int(self.table[0].shape[0]) - 1


def _tail_gaussian(s, k):
  """P(|round(s Z)| > k) = erfc((k + 1/2) / (s sqrt 2))."""
  x = (mpmath.mpf(k) + mpmath.mpf(0.5)) / (s * mpmath.sqrt(2))
  if x > 1e8:      # erfc(x) = e^-x^2 / (x sqrt(pi)) (1 - O(1/x^2)); mpmath's erfc overflows
    return mpmath.exp(-x * x) / (x * mpmath.sqrt(mpmath.pi))
  return mpmath.erfc(x)


def _tail_laplace(b, k):
  """P(|round(b L)| > k) = exp(-(k + 1/2) / b)."""
  return mpmath.exp(-(mpmath.mpf(k) + mpmath.mpf(0.5)) / b)


def _build(name: str, scale: float, tail_fn, k_guess: float, thresholds_fn=None,
           param: str = "scale") -> IntegerNoise:
  """Table of `name` at `scale` from tail(k) = P(|X| > k) (module docstring)."""
  with mpmath.workprec(_PREC):
    s = mpmath.mpf(scale)
    limit = mpmath.mpf(2) ** _TAIL_LOG2
    k_max = max(0, int(math.ceil(k_guess)))
    if k_max + 1 > MAX_TABLE_SIZE:
      raise ValueError(
          f"{name} with {param} = {scale:g} grid units needs a table of about {k_max + 1} "
          f"entries, more than {MAX_TABLE_SIZE}; use a coarser grid (a larger power of "
          "two) so that the noise scale in grid units is smaller")
    while tail_fn(s, k_max) >= limit:
      k_max += 1
    while k_max > 0 and tail_fn(s, k_max - 1) < limit:
      k_max -= 1
    if k_max + 1 > MAX_TABLE_SIZE:
      raise ValueError(f"{name} with {param} = {scale:g} grid units needs {k_max + 1} table "
                       f"entries, more than {MAX_TABLE_SIZE}; use a coarser grid")
    one = mpmath.mpf(2) ** _UNIFORM_BITS
    if thresholds_fn is not None:
      thresholds = thresholds_fn(s, k_max)
    else:
      thresholds = [int(mpmath.floor(one * (1 - tail_fn(s, k)))) for k in range(k_max)]
    thresholds.append(1 << _UNIFORM_BITS)
    tail = float(tail_fn(s, k_max))
  t = np.array([[v >> 64, (v >> 32) & _M32, v & _M32] for v in thresholds],
               dtype=np.uint64).astype(np.uint32)
  table = tuple(np.ascontiguousarray(t[:, j]) for j in range(3))
  for a in table:
    a.setflags(write=False)
  tv = (k_max + 2) * 2.0 ** -_UNIFORM_BITS + tail
  return IntegerNoise(name, float(scale), table, tv, tail)


def _laplace_thresholds(b, k_max):
  # floor(2^95 (1 - exp(-(k + 1/2)/b))), k < k_max, in 160-bit fixed point by repeated
  # multiplication with exp(-1/b): tails low by < 2^-137, each within one unit (`tv` slack).
  frac = 160
  r = int(mpmath.floor(mpmath.exp(-1 / b) * mpmath.mpf(2) ** frac))
  t = int(mpmath.floor(mpmath.exp(-mpmath.mpf(0.5) / b) * mpmath.mpf(2) ** frac))
  one, shift = 1 << _UNIFORM_BITS, frac - _UNIFORM_BITS
  out = []
  for _ in range(k_max):
    out.append(one - ((t + (1 << shift) - 1) >> shift))
    t = (t * r) >> frac
  return out


@functools.lru_cache(maxsize=32)
def rounded_gaussian(sigma_grid: float) -> IntegerNoise:
  """X = round(s Z), Z ~ N(0, 1): P(X = k) = Phi((k + 1/2)/s) - Phi((k - 1/2)/s); K ~ 11.7 s.

  Cached; ValueError naming `sigma_grid` if not finite positive or the table exceeds
  MAX_TABLE_SIZE. For L2 sensitivity Delta (grid units), mu + X is (Delta / s)-GDP up to `tv`.

  Examples:
    >>> rounded_gaussian(1.0).max_abs
    12
  """
  s = _validate.check_positive(sigma_grid, "sigma_grid")
  return _build("rounded_gaussian", s, _tail_gaussian, 11.7 * s, param="sigma_grid")


@functools.lru_cache(maxsize=32)
def rounded_laplace(b_grid: float) -> IntegerNoise:
  """X = round(b L), L standard Laplace: P(|X| > k) = exp(-(k + 1/2) / b); K ~ 69.3 b.

  Cached; ValueError as `rounded_gaussian`. For L1 sensitivity Delta (grid units), mu + X
  is (Delta / b)-DP up to `tv`.

  Examples:
    >>> rounded_laplace(1.0).max_abs
    69
  """
  b = _validate.check_positive(b_grid, "b_grid")
  return _build("rounded_laplace", b, _tail_laplace, 100 * math.log(2) * b - 0.5,
                thresholds_fn=_laplace_thresholds, param="b_grid")


def table_pmf(noise: IntegerNoise) -> np.ndarray:
  """The realised Q(|X| = k), k = 0..K, as float64 (exact up to float64 rounding)."""
  _validate.check_instance(noise, IntegerNoise, "noise")
  t = _thresholds(noise)
  prev = [0] + t[:-1]
  return np.array([(a - b) / 2.0 ** _UNIFORM_BITS for a, b in zip(t, prev)], np.float64)


def _less96(u, t):
  """u < t for 96-bit integers given as (hi, mid, lo) uint32 word triples."""
  return (u[0] < t[0]) | ((u[0] == t[0]) & ((u[1] < t[1]) | ((u[1] == t[1]) & (u[2] < t[2]))))


def _thresholds(noise: IntegerNoise) -> list[int]:
  """T_0..T_K as Python integers."""
  hi, mid, lo = (a.astype(object) for a in noise.table)
  return [int(h) << 64 | int(m) << 32 | int(l) for h, m, l in zip(hi, mid, lo)]


@functools.lru_cache(maxsize=32)
def _guide(noise: IntegerNoise) -> tuple[np.ndarray, int]:
  """(first, width): for the cell c(U) of `_cell`, |X| lies in [first[c], first[c] + width].

  The cell of U is its complement V = 2^95 - 1 - U in floating point: (leading zeros z of
  V as 96 bits, 1..96; the _GUIDE_BITS bits after its leading one), so cells are fine where
  the mass is and in the far tail alike. first[c] = k(min U in c), k(U) = #{j: T_j <= U};
  width = max over cells of k(max U) - k(min U).
  """
  t = _thresholds(noise)
  b = _GUIDE_BITS
  top = (1 << _UNIFORM_BITS) - 1
  first = np.zeros((97, 1 << b), np.int64)
  width = 0
  for z in range(1, 97):
    p = 95 - z                       # bit of V's leading one (z = 96: V = 0)
    for m in range(1 << b):
      if z == 96:
        v_lo = v_hi = 0
      elif p >= b:
        v_lo = (1 << p) + (m << (p - b))
        v_hi = v_lo + (1 << (p - b)) - 1
      else:
        v_lo = v_hi = (1 << p) + (m >> (b - p))
      k_lo = bisect.bisect_right(t, top - v_hi)
      k_hi = bisect.bisect_right(t, top - v_lo)
      first[z, m] = k_lo
      width = max(width, k_hi - k_lo)
  return first.reshape(-1).astype(np.int32), width


def _cell(u):
  """The `_guide` cell of U = (u0, u1, u2), u0 < 2^31: int32 index z * 2^b + m."""
  v0 = ~u[0] & jnp.uint32(0x7FFFFFFF)
  v1, v2 = ~u[1], ~u[2]
  n0, n1, n2 = (jax.lax.clz(v) for v in (v0, v1, v2))

  def top(a, b_, n):   # (a, b_) shifted left by n in [0, 32): the leading 32 bits
    right = jnp.where(n == 0, jnp.uint32(0), b_ >> (jnp.uint32(32) - jnp.maximum(n, 1)))
    return (a << n) | right
  in0, in1 = v0 != 0, v1 != 0
  z = jnp.where(in0, n0, jnp.where(in1, 32 + n1, 64 + n2))
  word = jnp.where(in0, top(v0, v1, jnp.minimum(n0, 31)),
                   jnp.where(in1, top(v1, v2, jnp.minimum(n1, 31)),
                             v2 << jnp.minimum(n2, 31)))
  m = (word << jnp.uint32(1)) >> jnp.uint32(32 - _GUIDE_BITS)
  return (z.astype(jnp.int32) << _GUIDE_BITS) | m.astype(jnp.int32)


def _search(noise: IntegerNoise, u) -> jax.Array:
  """|X| = the smallest k with U < T_k, for U = (u0, u1, u2) uint32[n] words, u0 < 2^31:
  the `_guide` cell narrows k to width + 1 candidates, then a binary search of
  ceil(log2(width + 1)) exact 96-bit comparisons."""
  first, width = _guide(noise)
  t = tuple(jnp.asarray(a) for a in noise.table)
  lo = jnp.asarray(first)[_cell(u)]
  hi = jnp.minimum(lo + width, noise.max_abs)
  steps = int(math.ceil(math.log2(width + 1))) if width > 0 else 0

  # Unrolled (a few steps): one fused pass over the draws instead of a loop of kernels.
  for _ in range(steps):
    mid = (lo + hi) >> 1
    less = _less96(u, tuple(a[mid] for a in t))
    lo, hi = jnp.where(less, lo, mid + 1), jnp.where(less, mid, hi)
  return lo


def sample(key: jax.Array, noise: IntegerNoise, shape: tuple[int, ...]) -> jax.Array:
  """Independent draws int32[shape] of `noise`; draw i uses words i, n + i, 2n + i of
  `prng.random_bits(key, 3 n)`, n = prod(shape).

  Examples:
    >>> sample(jax.random.key(1), rounded_laplace(0.01), (3,)).tolist()
    [0, 0, 0]
  """
  _validate.check_instance(noise, IntegerNoise, "noise")
  shape = _validate.check_sizes(shape, "shape", minimum=0)
  _validate.check_size(math.prod(shape), "shape", minimum=0, bytes_per_unit=16)
  if math.prod(shape) == 0:
    return jnp.zeros(shape, jnp.int32)
  return _sample(key, noise, shape)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _sample(key, noise, shape):
  # Compiled once per (noise table, shape): the tables are constants of the program.
  n = math.prod(shape)
  words = prng.random_bits(key, 3 * n).reshape(3, n)
  sign = (words[0] >> 31) == 1
  k = _search(noise, (words[0] & jnp.uint32(0x7FFFFFFF), words[1], words[2]))
  return jnp.where(sign, -k, k).reshape(shape)


def check_grid(grid, name: str = "grid") -> float:
  """grid as a float: a power of two in [2^-100, 2^100] (grid * k exact in float32, |k| < 2^24).

  Examples:
    >>> check_grid(0.25)
    0.25
  """
  g = _validate.check_positive(grid, name)
  if math.frexp(g)[0] != 0.5 or not 2.0 ** -100 <= g <= 2.0 ** 100:
    raise ValueError(f"{name} must be a power of two (e.g. 2**-10), got {grid!r}")
  return g


def pow2_floor(x: float) -> float:
  """The largest power of two <= x (x > 0)."""
  v = _validate.check_positive(x, "x")
  _, e = math.frexp(v)
  return math.ldexp(1.0, e - 1)
