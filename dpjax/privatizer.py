"""The noise step of DP-SGD as optax gradient transformations.

The clipped gradient sum S (sensitivity C, `dpjax.clipping`) is privatised as

    update = (S + N(0, sigma^2 C^2 I)) / B,       B = q * n, a FIXED public constant,

never dividing by the realised batch size, which depends on who is in the data
(`dp_aggregate`; any optimiser after it is post-processing). A `Privatizer`'s
`transform` also receives the realised `batch_size=b`, which a correct one ignores;
`accounted = False` makes the engine warn that the epsilon does not hold.
`SecureGaussianPrivatizer` (with `clipping.grid.path`, `secure_components`) adds
exactly drawn integer noise to an int32 sum in grid units.

Warning: the noise of `GaussianPrivatizer` is float32, drawn by
`prng.standard_normal`, whose support ends at z = +-12.63 (`prng.normal_support()`;
an exact Gaussian leaves it with probability tau ~ 1.5e-36 per coordinate, which adds
(1 + e^eps) T d tau to delta: `dpjax.accounting.sampler_delta`, reported by
`privacy_statement(..., noise_draws_per_step=d)` and checked by the engine); the
accountants assume an exact Gaussian, and the exact float update
lives on a lattice that an observer of its bits can test (the secure one above
has neither problem).

Examples:
  >>> import jax, jax.numpy as jnp, optax
  >>> tx = optax.chain(dp_aggregate(0.0, 4.0, jax.random.key(0)), optax.sgd(1.0))
  >>> state = tx.init({"w": jnp.zeros(2)})
  >>> tx.update({"w": jnp.array([4.0, 8.0])}, state)[0]["w"]
  Array([-1., -2.], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate
from dpjax import prng


class GaussianPrivatizerState(NamedTuple):
  """State of `gaussian_privatizer`: the noise key and the number of updates so far."""
  key: jax.Array      # update t draws from prng.fold_in(key, t)
  count: jax.Array    # int32 scalar


def _static_zero(stddev) -> bool:
  return isinstance(stddev, (int, float)) and stddev == 0


def _check_stddev(stddev, name: str = "noise_stddev"):
  """A concrete std is validated; a traced one (inside the engine) was validated on the host."""
  if _validate.is_tracer(stddev):
    return stddev
  if isinstance(stddev, (int, float, complex, str, bytes)) or stddev is None:
    return _validate.check_nonnegative(stddev, name)
  v = jnp.asarray(stddev)
  if not (jnp.issubdtype(v.dtype, jnp.floating) or jnp.issubdtype(v.dtype, jnp.integer)):
    raise ValueError(f"{name} must be a real scalar >= 0, got dtype {v.dtype}")
  if v.shape != () or not bool(jnp.isfinite(v)) or not bool(v >= 0):
    raise ValueError(f"{name} must be a finite scalar >= 0, got {stddev!r}")
  return v


def gaussian_noise(key: jax.Array, count: jax.Array, leaves: list, stddev) -> list:
  """The noise `gaussian_privatizer(stddev, key)` adds at update `count`, one array per leaf.

  stddev * N(0, 1) per leaf from `prng.split(prng.fold_in(key, t), len(leaves))`; None
  everywhere when stddev is a static 0. A concrete stddev must keep every draw finite in
  each float leaf's dtype (|N(0, 1)| < 12.7, `prng.normal_support`): stddev <= max / 16
  (2.1e37 for float32), else ValueError; checked once, when the program is traced.
  """
  stddev = _check_stddev(stddev, "stddev")
  if _static_zero(stddev):
    return [None] * len(leaves)
  if not _validate.is_tracer(stddev):
    for l in leaves:
      dtype = jax.dtypes.canonicalize_dtype(l.dtype)
      if jnp.issubdtype(dtype, jnp.floating) and float(stddev) > float(jnp.finfo(dtype).max) / 16:
        raise ValueError(f"stddev = {float(stddev):g}: noise of this scale overflows {dtype} "
                         f"(stddev must be <= {float(jnp.finfo(dtype).max) / 16:.3g}); "
                         "rescale the updates")
  ks = prng.split(prng.fold_in(key, count), len(leaves))
  return [stddev * z.astype(l.dtype)
          for z, l in zip(prng.standard_normals(ks, [l.shape for l in leaves]), leaves)]


def gaussian_privatizer(stddev, key: jax.Array) -> optax.GradientTransformation:
  """Adds N(0, stddev^2 I) to every update: the Gaussian mechanism, multiplier stddev / C.

  stddev = sigma * C >= 0 (may be traced); update t adds `gaussian_noise(key, t, ...)`.
  """
  stddev = _check_stddev(stddev)

  def init_fn(params):
    del params
    return GaussianPrivatizerState(key, jnp.zeros((), jnp.int32))

  def update_fn(updates, state, params=None):
    del params
    leaves, treedef = jax.tree.flatten(updates)
    noise = gaussian_noise(state.key, state.count, leaves, stddev)
    out = [l if nz is None else l + nz for l, nz in zip(leaves, noise)]
    return (jax.tree.unflatten(treedef, out),
            GaussianPrivatizerState(state.key, state.count + 1))

  return optax.GradientTransformation(init_fn, update_fn)


def dp_aggregate(noise_stddev, expected_batch_size: float, key: jax.Array
                 ) -> optax.GradientTransformationExtraArgs:
  """Noise, then the fixed denominator: S -> (S + N(0, std^2 I)) / B, B = q * n public.

  `optax.chain(gaussian_privatizer(noise_stddev, key), optax.scale(1 / B))`; extra
  update arguments (`batch_size=`) are ignored.
  """
  b = _validate.check_positive(expected_batch_size, "expected_batch_size")
  return optax.chain(gaussian_privatizer(noise_stddev, key), optax.scale(1.0 / b))


class Privatizer(Protocol):
  """What the engine calls (see the module docstring)."""

  accounted: bool

  def noise_stddev(self, noise_multiplier: float, l2_clip_norm: float) -> float:
    """The std of the noise added to the clipped sum (host float)."""

  def transform(self, noise_stddev, expected_batch_size: float, key: jax.Array
                ) -> optax.GradientTransformationExtraArgs:
    """The transformation from the clipped sum to the update."""


@dataclasses.dataclass(frozen=True)
class GaussianPrivatizer:
  """The Gaussian mechanism DP-SGD's accountants analyse: std sigma * C, divide by B."""
  accounted: ClassVar[bool] = True

  def noise_stddev(self, noise_multiplier: float, l2_clip_norm: float) -> float:
    """sigma * C (0 without clipping, C = inf, where sigma must be 0)."""
    c = float(l2_clip_norm)
    return float(noise_multiplier) * (0.0 if math.isinf(c) else c)

  def transform(self, noise_stddev, expected_batch_size: float, key: jax.Array
                ) -> optax.GradientTransformationExtraArgs:
    return dp_aggregate(noise_stddev, expected_batch_size, key)


class CorrelatedPrivatizerState(NamedTuple):
  """State of `correlated_privatizer`: the noise key, the update count, and one noise
  stream state per leaf (what the strategy keeps: past outputs, tree levels)."""
  key: jax.Array
  count: jax.Array
  streams: tuple


def correlated_privatizer(stream, stddev, key: jax.Array) -> optax.GradientTransformation:
  """Adds stddev * (C^-1 Z)_t to update t: matrix-factorization noise, one stream per leaf.

  stream: a `matrix_factorization.NoiseStream`; stddev = sigma * C >= 0. Leaf i of update
  t gets stream.next(state_i, k_i, t) with k_i = prng.split(prng.fold_in(key, t), L)[i],
  the keys of `gaussian_noise`: with `toeplitz_stream([1.0], T)` this is
  `gaussian_privatizer(stddev, key)` bit for bit.
  """
  from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  _validate.check_instance(stream, mf.NoiseStream, "stream")
  stddev = _check_stddev(stddev)

  def init_fn(params):
    leaves = jax.tree.leaves(params)
    return CorrelatedPrivatizerState(
        key, jnp.zeros((), jnp.int32),
        tuple(stream.init(tuple(jnp.shape(l))) for l in leaves))

  def update_fn(updates, state, params=None):
    del params
    leaves, treedef = jax.tree.flatten(updates)
    if _static_zero(stddev):
      return updates, CorrelatedPrivatizerState(state.key, state.count + 1, state.streams)
    ks = prng.split(prng.fold_in(state.key, state.count), len(leaves))
    if stream.from_draw is not None:   # one sampler for every leaf, the same bits
      zs = prng.standard_normals(ks, [jnp.shape(l) for l in leaves])
      steps = [stream.from_draw(st, z, state.count) for z, st in zip(zs, state.streams)]
    else:
      steps = [stream.next(st, kk, state.count) for kk, st in zip(ks, state.streams)]
    out, new = [], []
    for l, (w, st) in zip(leaves, steps):
      out.append(l + stddev * w.astype(l.dtype))
      new.append(st)
    return (jax.tree.unflatten(treedef, out),
            CorrelatedPrivatizerState(state.key, state.count + 1, tuple(new)))

  return optax.GradientTransformation(init_fn, update_fn)


def _cycle(sampler) -> int:
  """The cycle of a sampler with a participation bound (ValueError for any other)."""
  from dpjax import sampling  # pylint: disable=g-import-not-at-top
  if type(sampler) is sampling.CyclicSampler:
    return sampler.steps_per_epoch
  if type(sampler) is sampling.CyclicPoissonSampler:
    return sampler.cycle_length
  raise ValueError(f"no participation bound for sampler {type(sampler).__name__}: the "
                   "correlated-noise epsilon is derived for sampling.CyclicSampler and "
                   "sampling.CyclicPoissonSampler only (use matrix_factorization.sensitivity "
                   "with the pattern your sampler guarantees)")


@functools.lru_cache(maxsize=256)
def _correlated_epsilon(priv, sigma: float, num_steps: int, delta: float, sampler) -> float:
  """`CorrelatedNoisePrivatizer.epsilon` for sigma > 0, memoised (the engine states it on
  every training call, and the amplified PLD takes seconds)."""
  from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  from dpjax import sampling  # pylint: disable=g-import-not-at-top
  eps = mf.epsilon(sigma, priv.sensitivity(sampler, num_steps), delta)
  c = priv.stream.strategy[:num_steps, :num_steps]
  if type(sampler) is sampling.CyclicPoissonSampler and mf.num_bands(c) <= sampler.cycle_length:
    eps = min(eps, mf.amplified_epsilon(c, sigma, sampler.bin_prob, sampler.cycle_length,
                                        delta))
  return eps


@dataclasses.dataclass(frozen=True, eq=False)
class CorrelatedNoisePrivatizer:
  """DP-MF / DP-FTRL noise through the privatizer door: std sigma * C on (C^-1 Z)_t, / B.

  stream: a `matrix_factorization.NoiseStream` over at least cfg.num_steps steps (a tree
  or general strategy yields NaN past its T, which the engine reports as non-finite).
  Instances compare by identity (one compiled program per instance).
  Privacy: NOT the DP-SGD accountant's (`accounted` is False, so the engine warns): the
  run is the Gaussian mechanism with multiplier sigma / sens, sens =
  `matrix_factorization.sensitivity(stream.strategy, k, sep)` for the participation the
  sampler guarantees (at most k = epochs participations for a shuffle, sep >= 1), eps by
  `matrix_factorization.epsilon`, without amplification by sampling. With
  `sampling.CyclicSampler`, or `sampling.CyclicPoissonSampler` (amplified when the
  strategy has at most cycle_length bands), the engine states the eps of `epsilon`.
  """
  stream: object
  accounted: ClassVar[bool] = False

  def __post_init__(self):
    from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
    _validate.check_instance(self.stream, mf.NoiseStream, "stream")

  def sensitivity(self, sampler, num_steps: int) -> float:
    """sens of the first T steps' strategy under `sampler`'s participation.

    Only `sampling.CyclicSampler` and `sampling.CyclicPoissonSampler` have a
    participation bound here: `matrix_factorization.cyclic_sensitivity(C[:T, :T], E)`
    with E = steps_per_epoch, or cycle_length (every step of a record's residue class,
    the worst case of its Poisson draws). ValueError for any other sampler (Poisson or
    shuffled batches do not bound the gap between participations), or T beyond the
    stream's.
    """
    from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
    t = _validate.check_int(num_steps, "num_steps", 1, self.stream.strategy.shape[0])
    return mf.cyclic_sensitivity(self.stream.strategy[:t, :t], _cycle(sampler))

  def epsilon(self, noise_multiplier: float, num_steps: int, delta: float, sampler) -> float:
    """eps at delta of T steps with this noise on `sampler`'s cyclic batches.

    `matrix_factorization.epsilon(sigma, self.sensitivity(sampler, T), delta)`: the
    Gaussian mechanism C x + sigma Z with multiplier sigma / sens, add/remove of one
    record, no amplification; math.inf at sigma = 0. For a `sampling.CyclicPoissonSampler`
    whose cycle_length is at least the bands of C[:T, :T], the smaller of that and
    `matrix_factorization.amplified_epsilon` (both are upper bounds).
    """
    sigma = _validate.check_nonnegative(noise_multiplier, "noise_multiplier")
    self.sensitivity(sampler, num_steps)   # validates sampler and T
    if sigma == 0:
      return math.inf
    return _correlated_epsilon(self, sigma, int(num_steps), _validate.check_delta(delta),
                               sampler)

  def noise_stddev(self, noise_multiplier: float, l2_clip_norm: float) -> float:
    """sigma * C, as `GaussianPrivatizer`."""
    return GaussianPrivatizer().noise_stddev(noise_multiplier, l2_clip_norm)

  def transform(self, noise_stddev, expected_batch_size: float, key: jax.Array
                ) -> optax.GradientTransformationExtraArgs:
    """`correlated_privatizer` then optax.scale(1 / B)."""
    b = _validate.check_positive(expected_batch_size, "expected_batch_size")
    return optax.chain(correlated_privatizer(self.stream, noise_stddev, key),
                       optax.scale(1.0 / b))


@_validate.names_extreme_arguments
def default_grid(l2_clip_norm: float) -> float:
  """Default grid of secure DP-SGD: the largest power of two <= C / 2^10.

  Rounding adds sqrt(P)/2 to the sensitivity C / gamma > 2^10 (+0.2% noise for P = 16
  parameters, +5% for P = 10^4).

  Examples:
    >>> default_grid(1.0) == 2.0 ** -10
    True
  """
  from dpjax import integer_noise  # pylint: disable=g-import-not-at-top
  return integer_noise.pow2_floor(_validate.check_positive(l2_clip_norm, "l2_clip_norm")
                                  / 2.0 ** 10)


class SecureGaussianPrivatizerState(NamedTuple):
  """State of `secure_gaussian_privatizer`: the noise key and the update count."""
  key: jax.Array
  count: jax.Array


def secure_gaussian_privatizer(noise_multiplier: float, l2_clip_norm: float, grid: float,
                               key: jax.Array) -> optax.GradientTransformationExtraArgs:
  """Integer sum S (grid units) -> gamma (S + X), X = round(sigma Delta Z) drawn exactly.

  S must be `clipping.grid`'s int32 sum (float leaves raise TypeError); Delta = C /
  gamma + sqrt(P) / 2 (`clipping.grid.grid_sensitivity`), P parameters.

  Privacy: S + X is a post-processing of S + N(0, (sigma Delta)^2 I) with S of L2
    sensitivity Delta, the Gaussian mechanism with noise multiplier sigma, so the
    DP-SGD accountants' epsilon for (q, sigma, T, delta) holds, with delta
    increased by `accounting.sampler_delta(eps, T P, tail_mass=noise.tv)`.
  """
  from dpjax import integer_noise  # pylint: disable=g-import-not-at-top
  from dpjax.clipping import grid as grid_lib  # pylint: disable=g-import-not-at-top
  sigma = _validate.check_nonnegative(noise_multiplier, "noise_multiplier")
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  gamma = integer_noise.check_grid(grid)

  def init_fn(params):
    del params
    return SecureGaussianPrivatizerState(key, jnp.zeros((), jnp.int32))

  def update_fn(updates, state, params=None, **extra_args):
    del params, extra_args
    leaves, treedef = jax.tree.flatten(updates)
    for l in leaves:
      if not jnp.issubdtype(jnp.asarray(l).dtype, jnp.integer):
        raise TypeError(
            "SecureGaussianPrivatizer needs the integer grid sum of clipping.grid.path, got "
            f"a {jnp.asarray(l).dtype} leaf (a float sum would make the noise's rounding "
            "depend on the data)")
    num = sum(math.prod(jnp.shape(l)) for l in leaves)
    out = [jnp.asarray(l, jnp.int32) for l in leaves]
    if sigma > 0:
      noise = integer_noise.rounded_gaussian(sigma * grid_lib.grid_sensitivity(c, gamma, num))
      ks = prng.split(prng.fold_in(state.key, state.count), len(leaves))
      out = [l + integer_noise.sample(kk, noise, jnp.shape(l)) for kk, l in zip(ks, out)]
    out = [jnp.float32(gamma) * l.astype(jnp.float32) for l in out]
    return (jax.tree.unflatten(treedef, out),
            SecureGaussianPrivatizerState(state.key, state.count + 1))

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


@dataclasses.dataclass(frozen=True)
class SecureGaussianPrivatizer:
  """DP-SGD noise that is private against an observer of the exact float update.

  With `clipping.grid.path(model, grid)` only, the update gamma (S + X) / B is an exact
  multiple of gamma / B; the accountants' epsilon holds with delta increased by
  `sampler_delta(epsilon, num_steps, num_params)`. The table is static, so sigma
  (noise_multiplier >= 0) and C (l2_clip_norm > 0) must equal the config's, and a
  `train_sweep` over sigma needs one privatizer per sigma. grid: gamma, a power of
  two (`default_grid(C)` if None).
  """
  noise_multiplier: float
  l2_clip_norm: float
  grid: float | None = None
  accounted: ClassVar[bool] = True

  def __post_init__(self):
    from dpjax import integer_noise  # pylint: disable=g-import-not-at-top
    sigma = _validate.check_nonnegative(self.noise_multiplier, "noise_multiplier")
    c = _validate.check_positive(self.l2_clip_norm, "l2_clip_norm")
    g = default_grid(c) if self.grid is None else integer_noise.check_grid(self.grid)
    object.__setattr__(self, "noise_multiplier", sigma)
    object.__setattr__(self, "l2_clip_norm", c)
    object.__setattr__(self, "grid", g)

  def noise_stddev(self, noise_multiplier: float, l2_clip_norm: float) -> float:
    """sigma * C, after checking that the config's sigma and C are this privatizer's."""
    for name, got, mine in (("noise_multiplier", noise_multiplier, self.noise_multiplier),
                            ("l2_clip_norm", l2_clip_norm, self.l2_clip_norm)):
      if not math.isclose(float(got), mine, rel_tol=1e-12, abs_tol=0.0):
        raise ValueError(f"{name} of the training config ({float(got)!r}) differs from the "
                         f"SecureGaussianPrivatizer's ({mine!r}); its noise table is built "
                         "for its own value")
    return self.noise_multiplier * self.l2_clip_norm

  def transform(self, noise_stddev, expected_batch_size: float, key: jax.Array
                ) -> optax.GradientTransformationExtraArgs:
    """`secure_gaussian_privatizer` then optax.scale(1 / B), from the static fields."""
    del noise_stddev
    b = _validate.check_positive(expected_batch_size, "expected_batch_size")
    return optax.chain(secure_gaussian_privatizer(self.noise_multiplier, self.l2_clip_norm,
                                                  self.grid, key),
                       optax.scale(1.0 / b))

  def sampler_delta(self, epsilon: float, num_steps: int, num_params: int) -> float:
    """Delta to add to the accountant's: `accounting.sampler_delta(eps, T P, tail_mass=tv)`."""
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    from dpjax import integer_noise  # pylint: disable=g-import-not-at-top
    from dpjax.clipping import grid as grid_lib  # pylint: disable=g-import-not-at-top
    if self.noise_multiplier == 0:
      return 0.0
    p = _validate.check_int(num_params, "num_params")
    t = _validate.check_int(num_steps, "num_steps")
    noise = integer_noise.rounded_gaussian(
        self.noise_multiplier * grid_lib.grid_sensitivity(self.l2_clip_norm, self.grid, p))
    return accounting.sampler_delta(epsilon, t * p, tail_mass=noise.tv)


def secure_components(noise_multiplier: float, l2_clip_norm: float, model,
                      grid: float | None = None):
  """Matched (`clipping.grid.path(model, gamma)`, `SecureGaussianPrivatizer(sigma, C, gamma)`).

  Pass the config's sigma and C; grid defaults to `default_grid(C)`.
  """
  from dpjax.clipping import grid as grid_lib  # pylint: disable=g-import-not-at-top
  priv = SecureGaussianPrivatizer(noise_multiplier, l2_clip_norm, grid)
  return grid_lib.path(model, priv.grid), priv


def check_matching_grid(path, privatizer) -> None:
  """Raises ValueError unless the clipping path and the privatizer agree on the grid
  (otherwise the noise has the wrong scale, or float noise follows float sums).
  """
  pg, qg = getattr(path, "grid", None), getattr(privatizer, "grid", None)
  if pg is None and qg is None:
    return
  if pg is None or qg is None or float(pg) != float(qg):
    raise ValueError(
        f"clipping path {getattr(path, 'name', path)!r} (grid {pg}) and privatizer "
        f"{type(privatizer).__name__} (grid {qg}) do not match: secure DP-SGD needs "
        "clipping.grid.path(model, grid) with SecureGaussianPrivatizer(..., grid=grid) "
        "(privatizer.secure_components builds the pair)")


def check_privatizer(privatizer) -> None:
  """Raises TypeError unless `privatizer` has the Privatizer members."""
  for attr in ("noise_stddev", "transform", "accounted"):
    if not hasattr(privatizer, attr):
      raise TypeError(f"privatizer must have a {attr!r} member (see dpjax.privatizer), "
                      f"got {type(privatizer).__name__}")
