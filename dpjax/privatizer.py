"""The noise step of DP-SGD as optax gradient transformations.

DP-SGD privatises the clipped gradient sum S (sensitivity C, `dpjax.clipping`) as

    update = (S + N(0, sigma^2 C^2 I)) / B,       B = q * n, a FIXED public constant,

never dividing by the realised batch size, which depends on who is in the data.
Here that is two optax transformations chained:

    dp_aggregate(std, B, key) = optax.chain(gaussian_privatizer(std, key), optax.scale(1 / B))

`gaussian_privatizer` adds the noise (its key and step count live in its state; the
noise of update t is drawn from `prng.fold_in(key, t)`, one `prng.split` key per
parameter leaf). Any optax optimiser chained after it is post-processing.

A `Privatizer` is what the engine (`dpsgd.train_many(..., privatizer=...)`) calls;
it has two parts, so that the noise std can be a traced input of the compiled
program (an epsilon sweep compiles once):

  * `noise_stddev(noise_multiplier, l2_clip_norm)`: on the host, the std it adds;
  * `transform(noise_stddev, expected_batch_size, key)`: the optax transformation;
    its update is called as `update(clipped_sum, state, params, batch_size=b)` with
    the realised batch size b as an extra argument (which a correct privatizer
    ignores);
  * `accounted`: False for a deliberately broken one (`dpjax.audit.variants`); the
    engine then warns that the accountant's epsilon does not hold.

`GaussianPrivatizer` is the one the accountants analyse. The engine runs exactly
`dp_aggregate` for it.

Warning: the noise is float32, drawn by `prng.standard_normal`, whose support ends
near z = -5.42 and +5.17 (see its docstring); the accountants assume an exact
Gaussian.

Examples:
  >>> import jax, jax.numpy as jnp, optax
  >>> tx = optax.chain(dp_aggregate(0.0, 4.0, jax.random.key(0)), optax.sgd(1.0))
  >>> state = tx.init({"w": jnp.zeros(2)})
  >>> tx.update({"w": jnp.array([4.0, 8.0])}, state)[0]["w"]
  Array([-1., -2.], dtype=float32)
"""

from __future__ import annotations

import dataclasses
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
  if isinstance(stddev, (int, float)):
    return _validate.check_nonnegative(stddev, name)
  v = jnp.asarray(stddev)
  if v.shape != () or not bool(jnp.isfinite(v)) or not bool(v >= 0):
    raise ValueError(f"{name} must be a finite scalar >= 0, got {stddev!r}")
  return v


def gaussian_noise(key: jax.Array, count: jax.Array, leaves: list, stddev) -> list:
  """The noise `gaussian_privatizer(stddev, key)` adds at update number `count`.

  Args:
    key: the privatizer's key.
    count: int32 scalar, the update number t.
    leaves: arrays (or shape structs) of the update's leaves, in tree order.
    stddev: std >= 0 (a float, or a traced float32 scalar).
  Returns:
    One array per leaf, stddev * N(0, 1) of its shape and dtype, from
    `prng.split(prng.fold_in(key, t), len(leaves))`; None everywhere when stddev is
    a static 0 (nothing is drawn).
  """
  if _static_zero(stddev):
    return [None] * len(leaves)
  ks = prng.split(prng.fold_in(key, count), len(leaves))
  return [stddev * prng.standard_normal(kk, l.shape).astype(l.dtype)
          for kk, l in zip(ks, leaves)]


def gaussian_privatizer(stddev, key: jax.Array) -> optax.GradientTransformation:
  """Adds N(0, stddev^2 I) to every update (the Gaussian mechanism on the clipped sum).

  Args:
    stddev: sigma * C >= 0; a traced scalar is allowed (the engine's sweeps).
    key: the noise key, carried in the state.
  Returns:
    An optax GradientTransformation; update t adds `gaussian_noise(key, t, ...)`.
  Privacy: (S + noise) with S of sensitivity C is the Gaussian mechanism with noise
    multiplier stddev / C.
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
  """Noise, then the fixed denominator: S -> (S + N(0, std^2 I)) / B.

  Args:
    noise_stddev: sigma * C >= 0 (a float, or a traced scalar inside the engine).
    expected_batch_size: B = q * n > 0, public.
    key: the noise key (update t uses prng.fold_in(key, t)).
  Returns:
    `optax.chain(gaussian_privatizer(noise_stddev, key), optax.scale(1 / B))`; extra
    update arguments (the engine's `batch_size=`) are accepted and ignored. Chain
    any optax optimiser after it: everything after the noise is post-processing.
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


def check_privatizer(privatizer) -> None:
  """Raises TypeError unless `privatizer` has the Privatizer members."""
  for attr in ("noise_stddev", "transform", "accounted"):
    if not hasattr(privatizer, attr):
      raise TypeError(f"privatizer must have a {attr!r} member (see dpjax.privatizer), "
                      f"got {type(privatizer).__name__}")
