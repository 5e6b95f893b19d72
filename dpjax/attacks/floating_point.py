"""Floating-point attacks: which inputs could have produced these exact output bits?

A float32 noise sampler does not draw from the continuous distribution the privacy
proof assumes: it maps a few random bits to a FINITE set of float32 atoms, and the
mechanism's arithmetic rounds. An observer of the exact float32 output can then
rule out an input: output y is IMPOSSIBLE under input x' when no atom of the
sampler, pushed through the mechanism's float arithmetic from x', lands exactly on
y. One such output proves that the input was not x', whatever the noise scale, so
the mechanism is not (eps, 0)-DP for any eps (Mironov 2012). Every test here is
EXACT: it enumerates the sampler's atoms and replays the rounding operation by
operation, so an output drawn under x' is never flagged (no false positives; the
tests check it on fresh draws from the real samplers).

Three targets:

* the naive float Laplace mechanism y = fl(x + fl(b L)), L = `jax.random.laplace`
  (float32), as `dpjax.mechanisms.laplace_mechanism(..., secure=False)` computes it.
  L is sign(u) log1p(-|u|) of a uniform u built from the top 23 bits of a 32-bit
  word, so it takes at most 2^23 values (`naive_laplace_atoms`); the outputs
  reachable from x' are those atoms scaled and shifted in float32
  (`naive_laplace_outputs`) and `laplace_reachable` looks y up among them.
* DP-SGD's float32 Gaussian noise, seen by the white-box adversary of the canary
  audit (`dpjax.audit.canary`): per step, one coordinate of the privatized update

      o = fl(beta * fl(s + fl(std * z))),   beta = fl32(1 / B),  std = fl32(sigma C),

  with s the clipped sum in that coordinate and z from `dpjax.prng.standard_normal`.
  Its body is sqrt(2) erfinv(2 m 2^-23 - 1) for 23-bit m: 2^23 - 2 atoms
  (`normal_body_atoms`); its two extreme atoms stand for the tails |z| > 5.17.
  The adversary knows everything but the canary's inclusion, hence s without the
  canary (`sum_without`); `gaussian_update_reachable` decides whether o is
  reachable from it. A step that is not is a proof that the canary was in the
  batch, and `lattice_canary_flags` calls a model IN if any of its steps is.
* the defended mechanisms (`dpjax.integer_noise`): their output is an exact grid
  value gamma (k + X) (times fl32(1 / B) for DP-SGD) with integer noise X of full
  support, so every grid value is reachable from every input; `grid_reachable`
  is the same exact test adapted to them (it only flags an off-grid value or,
  given the table's largest |X|, one beyond the noise's support).

Rounding model: every float32 operation is rounded separately, as NumPy does and
as the eager mechanisms run, except that XLA may fuse s + std z into one
fused multiply-add (one rounding) when it compiles DP-SGD's update; which it does
depends on the fusion, so `gaussian_update_reachable` accepts an output reachable
under either rounding by default (checked against real outputs in
tests/floating_point_test.py). In the canary coordinate s = 0 without the canary,
where both give fl(std z), so the audit's test does not depend on the choice.

Shape letters: K outputs, M models, T steps; `...` any shape.

Examples:
  >>> import numpy as np
  >>> y = np.float32(0.3) + np.float32(1.0) * naive_laplace_atoms()[:4]   # outputs from x = 0.3
  >>> laplace_reachable(y, 0.3, 1.0).tolist()
  [True, True, True, True]
  >>> bool(gaussian_update_reachable(np.float32(0.0), 0.0, 1.0, 10.0))    # z = 0 is an atom
  True

References: Mironov, "On significance of the least significant bits for
differential privacy", CCS 2012; Nasr et al. 2021 (the white-box threat model);
Jagielski, Ullman & Oprea 2020 (canary audits).
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
  """`jax.random.laplace`'s float32 transform of 32-bit words, operation by operation.

  u = max(minval, f (1 - minval) + minval) with f = (bits >> 9) 2^-23 (the uniform of
  `jax.random.uniform`, minval = -1 + 2^-24), then L = sign(u) log1p(-|u|).

  Args:
    bits: uint32[...] random words.
  Returns:
    float32[...]; `naive_laplace_noise(jax.random.bits(key, shape, jnp.uint32))`
    equals `jax.random.laplace(key, shape, jnp.float32)` bit for bit (tested).
  """
  bits = jnp.asarray(bits, jnp.uint32)
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = jnp.float32(-1.0 + float(np.finfo(np.float32).epsneg))
  hi = jnp.float32(1.0)
  u = jax.lax.max(lo, f * (hi - lo) + lo)
  return jax.lax.mul(jax.lax.sign(u), jax.lax.log1p(jax.lax.neg(jax.lax.abs(u))))


@functools.lru_cache(maxsize=1)
def naive_laplace_atoms() -> np.ndarray:
  """Every value `jax.random.laplace` can return in float32: float32[2^23] (by mantissa).

  Entry m is the noise of every word whose top 23 bits are m (the low 9 bits are
  discarded), so these 2^23 values, some repeated, are the sampler's whole image.
  Cached (32 MB).
  """
  bits = jnp.arange(_MANTISSAS, dtype=jnp.uint32) << jnp.uint32(9)
  return np.asarray(naive_laplace_noise(bits))


@functools.lru_cache(maxsize=8)
def _laplace_outputs(value: np.float32, scale: np.float32) -> np.ndarray:
  out = np.unique(value + scale * naive_laplace_atoms())
  out.setflags(write=False)
  return out


def naive_laplace_outputs(value: float, scale: float) -> np.ndarray:
  """Every output of the naive Laplace mechanism on `value`: sorted unique float32[<= 2^23].

  The mechanism computes fl(v + fl(b L)) with v = fl32(value), b = fl32(scale) and L
  an atom of `naive_laplace_atoms` (`value + scale * jax.random.laplace(...)` in
  float32, each operation rounded). Cached per (value, scale).

  Args:
    value: the input x (rounded to float32, as the mechanism does).
    scale: the Laplace scale b > 0 (rounded to float32, likewise).
  Returns:
    read-only float32[U], U <= 2^23, ascending.
  """
  v = np.float32(_validate.check_finite(value, "value"))
  b = np.float32(_validate.check_positive(scale, "scale"))
  return _laplace_outputs(v, b)


def laplace_reachable(outputs: jax.typing.ArrayLike, value: float, scale: float) -> np.ndarray:
  """Whether each output of the naive Laplace mechanism can come from input `value`.

  Args:
    outputs: float32[...] exact released values.
    value: the candidate input x' (rounded to float32).
    scale: the Laplace scale b > 0.
  Returns:
    bool[...]: True iff the output is in `naive_laplace_outputs(value, scale)`. An
    output with False could not have been produced from x': Mironov's attack calls
    such an output "not x'" and is never wrong.
  """
  y = _float32_values(outputs, "outputs")
  image = naive_laplace_outputs(value, scale)
  i = np.minimum(np.searchsorted(image, y), image.size - 1)
  return image[i] == y


# ----------------------------------------------------------------------------------
# DP-SGD's float32 Gaussian noise (the lattice of prng.standard_normal).


@functools.lru_cache(maxsize=1)
def normal_body_atoms() -> np.ndarray:
  """The body atoms of `prng.standard_normal`, ascending: float32[2^23 - 2].

  sqrt(2) erfinv(2 m 2^-23 - 1) for m = 1 .. 2^23 - 2, computed by the sampler's own
  transform (the words m << 9 through `dpjax.prng`). The extreme atoms m = 0 and
  2^23 - 1 are left out: they stand for the tails |z| > 5.17, which
  `gaussian_update_reachable` never rules out. Cached (32 MB).
  """
  m = jnp.arange(1, _MANTISSAS - 1, dtype=jnp.uint32)
  z = np.asarray(jax.jit(prng.bits_to_normal)(m << jnp.uint32(9)))
  if not np.all(np.diff(z) >= 0):   # erfinv is increasing; its float32 rounding too
    z = np.sort(z)
  z.setflags(write=False)
  return z


def _fma32(a: np.float32, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """fl32(a b + c) with ONE rounding (a fused multiply-add), exactly.

  a b is exact in float64 (24 + 24 bits); t = fl64(a b + c) and its exact error e
  come from TwoSum. Rounding t to float32 is then correct unless t lies exactly
  halfway between two float32 values and e != 0 (double rounding); there the
  result is the neighbour on the side of e.
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
  """Whether each observed update coordinate is possible from the given clipped sum.

  The engine computes o = fl(beta * fl(s + fl(std * z))) (module docstring), or
  o = fl(beta * fma(std, z, s)) where XLA fuses the multiply-add (observed on CPU
  when std is a compile-time constant). For std > 0 and beta > 0, z -> o is
  non-decreasing under either rounding (each rounding is monotone), so the atoms
  that reach o form one run of the sorted atoms, found exactly by a bisection over
  all observations at once (24 rounds of the float32 formula). At s = 0 the two
  roundings agree (fma(std, z, 0) = fl(std z)).

  Args:
    observed: float32[...] observed coordinates of privatized updates (after the
      division by B), exact bits.
    sum_without: float32, broadcastable to `observed`: the clipped sum s in that
      coordinate under the hypothesis tested (the canary audit's coordinate: 0
      without the canary).
    noise_stddev: sigma * C >= 0 (rounded to float32, as the engine does).
    expected_batch_size: B > 0 (beta = fl32(1 / B), as `optax.scale(1 / B)`).
    rounding: "separate" (each operation rounded), "fused" (one FMA), or
      "either" (reachable under at least one of them: exact whatever the
      compiler chose, the default).
  Returns:
    bool[...]: False iff no body atom reaches o and o is not beyond the body's
    range (the tails, which are never ruled out): a proof that s was not the sum.
    With std = 0 the test is o == fl(beta * s).
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
  beta = np.float32(1.0 / _validate.check_positive(expected_batch_size,
                                                    "expected_batch_size"))
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
  """The white-box lattice attack on a gradient canary: models whose updates prove it IN.

  Args:
    observed_MxT: float32[M, T] the canary coordinate of each model's privatized
      update at each step (`dpjax.audit.canary.observe_last_coordinate`).
    sum_without_MxT: float32, broadcastable to [M, T]: the clipped sum in that
      coordinate without the canary (0 in the audit's unused coordinate).
    noise_stddev, expected_batch_size: as in `gaussian_update_reachable`.
  Returns:
    (impossible_MxT, flagged_M): bool arrays; step (m, t) is impossible without
    the canary, and model m is flagged IN when any of its steps is. A model
    trained without the canary is never flagged (the test is exact).
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
  """Whether each output of a grid mechanism can come from the given integer centre.

  A defended mechanism releases fl32(gamma (k + X)) (exact for |k + X| < 2^24), with
  k = `center_units` in grid units and X integer noise with |X| <= max_abs; secure
  DP-SGD then multiplies by beta = fl32(1 / B). The test tries every integer j
  within 2 of o / (beta gamma) (a float32 product of an integer below 2^24 is
  within one unit of it) and replays the float32 arithmetic exactly.

  Args:
    observed: float32[...] exact released values.
    center_units: int, broadcastable: the centre k under the hypothesis tested.
    grid: gamma > 0 (a power of two for the defended mechanisms).
    max_abs: the noise table's largest |X|, or None for unbounded support.
    expected_batch_size: B > 0 for DP-SGD's updates, or None (no division).
  Returns:
    bool[...]: True iff some j with |j - k| <= max_abs gives exactly the observed
    value.
  """
  o = _float32_values(observed, "observed").astype(np.float64)
  k = np.broadcast_to(_validate.check_array(center_units, "center_units", integer=True),
                      o.shape)
  g = _validate.check_positive(grid, "grid")
  if max_abs is not None:
    max_abs = _validate.check_int(max_abs, "max_abs", minimum=0)
  beta = np.float32(1.0)
  if expected_batch_size is not None:
    beta = np.float32(1.0 / _validate.check_positive(expected_batch_size,
                                                     "expected_batch_size"))
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
