"""Floating-point attacks: which inputs could have produced these exact output bits?

A float32 noise sampler maps random bits to a FINITE set of atoms, and the arithmetic
rounds. Output y is IMPOSSIBLE under input x' when no atom, pushed through the float
arithmetic from x', lands exactly on y; one such output proves the input was not x', so
the mechanism is not (eps, 0)-DP for any eps (Mironov 2012). The tests enumerate the
atoms and replay the rounding exactly (an output drawn under x' is never flagged):

* naive float Laplace y = fl(x + fl(b L)), L = `jax.random.laplace` (<= 2^23 atoms):
  `laplace_reachable`;
* DP-SGD's float32 Gaussian noise at a white-box canary coordinate,
  o = fl(beta * fl(s + fl(std * z))), beta = fl32(1 / B), std = fl32(sigma C), z from
  `prng.standard_normal` (2^23 - 2 body atoms; tails |z| > 5.17 never ruled out):
  `gaussian_update_reachable`, `lattice_canary_flags`; XLA may fuse s + std z into one
  FMA, and "either" rounding accepts both;
* the grid mechanisms of `dpjax.integer_noise` (every grid value reachable):
  `grid_reachable` flags only off-grid values or values beyond the noise table.

Shape letters: K outputs, M models, T steps; `...` any shape.

Examples:
  >>> import numpy as np
  >>> y = np.float32(0.3) + np.float32(1.0) * naive_laplace_atoms()[:4]   # outputs from x = 0.3
  >>> laplace_reachable(y, 0.3, 1.0).tolist()
  [True, True, True, True]
  >>> bool(gaussian_update_reachable(np.float32(0.0), 0.0, 1.0, 10.0))    # z = 0 is an atom
  True

References: Mironov, CCS 2012; Nasr et al. 2021 (white-box threat model); Jagielski,
Ullman & Oprea 2020 (canary audits).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import prng

__all__ = [
    "naive_laplace_noise", "naive_laplace_atoms", "naive_laplace_outputs",
    "laplace_reachable", "normal_body_atoms", "gaussian_update_reachable",
    "lattice_canary_flags", "grid_reachable",
]

# 23-bit mantissas: every float32 uniform of jax.random is one of 2^23 values.
_MANTISSAS = 1 << 23
# Grid outputs gamma * k are exact float32 values for |k| < 2^24 (`dpjax.integer_noise`).
_EXACT_RANGE = float(1 << 24)


def _float32_values(x, name: str) -> np.ndarray:
  """x as float32, refusing values that float32 would round: the attack reads exact bits."""
  arr = _validate.check_array(x, name)
  out = arr.astype(np.float32)
  if not np.array_equal(out.astype(np.float64), arr):
    raise ValueError(f"{name} must hold exact float32 values (the released bits); got a "
                     "value that float32 cannot represent")
  return out


# ----------------------------------------------------------------------------------
# The naive float Laplace mechanism (Mironov 2012).


@jax.jit
def naive_laplace_noise(bits: jax.Array) -> jax.Array:
  """`jax.random.laplace`'s float32 transform of uint32 words, operation by operation.

  u = max(minval, f (1 - minval) + minval), f = (bits >> 9) 2^-23, minval = -1 + 2^-24;
  L = sign(u) log1p(-|u|). Bit for bit `jax.random.laplace` on `jax.random.bits`.
  """
  bits = jnp.asarray(bits, jnp.uint32)
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = jnp.float32(-1.0 + float(np.finfo(np.float32).epsneg))
  hi = jnp.float32(1.0)
  u = jax.lax.max(lo, f * (hi - lo) + lo)
  return jax.lax.mul(jax.lax.sign(u), jax.lax.log1p(jax.lax.neg(jax.lax.abs(u))))


@functools.lru_cache(maxsize=1)
def naive_laplace_atoms() -> np.ndarray:
  """Every value `jax.random.laplace` can return in float32: float32[2^23] by mantissa; cached."""
  bits = jnp.arange(_MANTISSAS, dtype=jnp.uint32) << jnp.uint32(9)
  return np.asarray(naive_laplace_noise(bits))


@functools.lru_cache(maxsize=8)
def _laplace_outputs(value: np.float32, scale: np.float32) -> np.ndarray:
  out = np.unique(value + scale * naive_laplace_atoms())
  out.setflags(write=False)
  return out


@_validate.names_extreme_arguments
def naive_laplace_outputs(value: float, scale: float) -> np.ndarray:
  """All outputs fl(fl32(value) + fl(fl32(scale) L)) over the atoms L: sorted unique float32,
  read-only, cached per (value, scale).
  """
  v = np.float32(_validate.check_finite(value, "value"))
  b = np.float32(_validate.check_positive(scale, "scale"))
  return _laplace_outputs(v, b)


def laplace_reachable(outputs: jax.typing.ArrayLike, value: float, scale: float) -> np.ndarray:
  """bool[...]: whether each exact float32 output is in `naive_laplace_outputs(value, scale)`
  (False proves it did not come from `value`).
  """
  y = _float32_values(outputs, "outputs")
  image = naive_laplace_outputs(value, scale)
  i = np.minimum(np.searchsorted(image, y), image.size - 1)
  return image[i] == y


# ----------------------------------------------------------------------------------
# DP-SGD's float32 Gaussian noise (the lattice of prng.standard_normal).


@functools.lru_cache(maxsize=1)
def normal_body_atoms() -> np.ndarray:
  """Body atoms of `prng.standard_normal`, ascending: float32[2^23 - 2], by its own transform
  (m = 1 .. 2^23 - 2; the extreme atoms stand for the tails). Cached.
  """
  m = jnp.arange(1, _MANTISSAS - 1, dtype=jnp.uint32)
  z = np.asarray(jax.jit(prng.bits_to_normal)(m << jnp.uint32(9)))
  if not np.all(np.diff(z) >= 0):   # erfinv is increasing; its float32 rounding too
    z = np.sort(z)
  z.setflags(write=False)
  return z


def _fma32(a: np.float32, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """fl32(a b + c) with ONE rounding, exactly: a b is exact in float64, TwoSum gives t =
  fl64(a b + c) and its error e; at a float32 midpoint with e != 0 round toward e.
  """
  p = np.float64(a) * b.astype(np.float64)
  c64 = c.astype(np.float64)
  t = p + c64
  bp = t - c64
  err = (p - bp) + (c64 - (t - bp))
  r = t.astype(np.float32)
  d = t - r.astype(np.float64)
  toward = np.nextafter(r, np.where(d > 0, np.float32(np.inf), np.float32(-np.inf)))
  midpoint = (d != 0) & (r.astype(np.float64) + toward.astype(np.float64) == 2.0 * t)
  return np.where(midpoint & (err != 0) & ((err > 0) == (d > 0)), toward, r)


_ROUNDINGS = ("either", "separate", "fused")


def gaussian_update_reachable(observed: jax.typing.ArrayLike,
                              sum_without: jax.typing.ArrayLike, noise_stddev: float,
                              expected_batch_size: float,
                              rounding: str = "either") -> np.ndarray:
  """Whether each observed update coordinate o is possible from the clipped sum `sum_without`.

  z -> o is non-decreasing, so the atoms reaching o form one run, found by bisection.
  observed: exact float32[...] (after the division by B); noise_stddev sigma C >= 0 and
  beta = fl32(1 / expected_batch_size) as the engine computes them; rounding "separate",
  "fused" (one FMA) or "either". Returns bool[...]: False iff no body atom reaches o and o
  is within the body's range (a proof); with std = 0 the test is o == fl(beta * s).
  """
  _validate.check_choice(rounding, _ROUNDINGS, "rounding")
  if rounding == "either":
    return (gaussian_update_reachable(observed, sum_without, noise_stddev,
                                      expected_batch_size, "separate")
            | gaussian_update_reachable(observed, sum_without, noise_stddev,
                                        expected_batch_size, "fused"))
  o = _float32_values(observed, "observed")
  s = np.broadcast_to(_float32_values(sum_without, "sum_without"), o.shape)
  std = np.float32(_validate.check_nonnegative(noise_stddev, "noise_stddev"))
  beta = np.float32(1.0 / _validate.check_positive(expected_batch_size, "expected_batch_size"))
  if std == 0:
    return beta * (s + np.float32(0.0)) == o
  z = normal_body_atoms()
  n = z.size
  if rounding == "fused":
    forward = lambda idx: beta * _fma32(std, z[idx], s)
  else:
    forward = lambda idx: beta * (s + std * z[idx])
  lo = np.zeros(o.shape, np.int64)
  hi = np.full(o.shape, n, np.int64)
  while np.any(lo < hi):        # lo = the first atom with forward >= o
    active = lo < hi
    mid = (lo + hi) // 2
    below = forward(np.minimum(mid, n - 1)) < o
    lo = np.where(active & below, mid + 1, lo)
    hi = np.where(active & ~below, mid, hi)
  hit = forward(np.minimum(lo, n - 1)) == o
  beyond = (o < forward(np.zeros(o.shape, np.int64))) | (o > forward(np.full(o.shape, n - 1)))
  return hit | beyond


def lattice_canary_flags(observed_MxT: jax.typing.ArrayLike,
                         sum_without_MxT: jax.typing.ArrayLike, noise_stddev: float,
                         expected_batch_size: float) -> tuple[np.ndarray, np.ndarray]:
  """The white-box lattice attack on a gradient canary: (impossible_MxT, flagged_M).

  observed_MxT: the canary coordinate of each update (`audit.canary.observe_last_coordinate`);
  sum_without_MxT (broadcastable): the clipped sum there without the canary. A model is
  flagged when any step is impossible without the canary (never falsely: exact test).
  """
  obs = _validate.check_array(observed_MxT, "observed_MxT", ndim=2, min_size=1)
  s = _validate.check_array(sum_without_MxT, "sum_without_MxT")
  try:
    np.broadcast_to(s, obs.shape)
  except ValueError:
    raise ValueError(f"sum_without_MxT must broadcast to observed_MxT's shape {obs.shape}, "
                     f"got {s.shape}") from None
  impossible = ~gaussian_update_reachable(observed_MxT, sum_without_MxT, noise_stddev,
                                          expected_batch_size)
  return impossible, np.any(impossible, axis=1)


# ----------------------------------------------------------------------------------
# The defended mechanisms: outputs on a grid.


def grid_reachable(observed: jax.typing.ArrayLike, center_units: jax.typing.ArrayLike,
                   grid: float, *, max_abs: int | None = None,
                   expected_batch_size: float | None = None) -> np.ndarray:
  """bool[...]: whether each output of a grid mechanism can come from integer centre k.

  Releases fl32(gamma (k + X)) (exact for |k + X| < 2^24), |X| <= max_abs (None:
  unbounded), times beta = fl32(1 / B) for secure DP-SGD (expected_batch_size B). Every
  integer within 2 of o / (beta gamma) is replayed exactly.
  """
  o = _float32_values(observed, "observed").astype(np.float64)
  k = np.broadcast_to(_validate.check_array(center_units, "center_units", integer=True), o.shape)
  g = _validate.check_positive(grid, "grid")
  if max_abs is not None:
    max_abs = _validate.check_int(max_abs, "max_abs", minimum=0)
  beta = np.float32(1.0)
  if expected_batch_size is not None:
    beta = np.float32(1.0 / _validate.check_positive(expected_batch_size, "expected_batch_size"))
  base = np.rint(o / (float(beta) * g))
  ok = np.zeros(o.shape, bool)
  for d in (-2.0, -1.0, 0.0, 1.0, 2.0):
    j = base + d
    exact = np.abs(j) < _EXACT_RANGE
    value = np.float32(g) * j.astype(np.float32)
    out = value if expected_batch_size is None else beta * value
    match = exact & (out.astype(np.float64) == o)
    if max_abs is not None:
      match &= np.abs(j - k) <= max_abs
    ok |= match
  return ok
