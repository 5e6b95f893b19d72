"""Private selection: the exponential mechanism and report noisy max.

Each releases the index of one of C candidates by utilities u[..., C] of sensitivity
Delta_u (the most one added or removed record changes any utility). Randomness is
float32: the sampler's deviation from the ideal probabilities (~2^-23 per candidate) is
a delta not accounted for.

Examples:
  >>> import jax
  >>> int(exponential_mechanism(jax.random.key(0), jnp.array([0.0, 5.0, 1.0]), epsilon=100.0))
  1
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = ["exponential_probs", "exponential_mechanism", "report_noisy_max"]


def _check_utilities(utilities) -> jax.Array:
  # Sizes first: the checks below copy the array to float64.
  _validate.check_size(math.prod(np.shape(utilities)), "utilities.size", 0, bytes_per_unit=8)
  _validate.check_array(utilities, "utilities")
  u = jnp.asarray(utilities, jnp.float32)
  if u.ndim == 0 or u.shape[-1] == 0:
    raise ValueError("utilities must have at least one candidate on the last axis "
                     f"(shape [..., C], C >= 1), got shape {u.shape}")
  return u


def _selection_scale(epsilon, sensitivity, monotonic) -> float:
  # Utility differences between neighbours can move in opposite directions for two
  # candidates (2 Delta_u), unless every utility moves the same way (monotonic).
  eps = _validate.check_epsilon(epsilon)
  du = _validate.check_positive(sensitivity, "sensitivity")
  monotonic = _validate.check_bool(monotonic, "monotonic")
  return (1.0 if monotonic else 2.0) * du / eps


@_validate.names_extreme_arguments
def exponential_probs(utilities: jax.typing.ArrayLike, epsilon: float,
                      sensitivity: float = 1.0, monotonic: bool = False) -> jax.Array:
  """Exponential-mechanism probabilities float32[..., C], prop. to exp(eps u / (2 Delta_u)).

  monotonic (all utilities move the same way between neighbours, e.g. counts): exp(eps u /
  Delta_u). eps-DP (McSherry & Talwar 2007).

  Examples:
    >>> exponential_probs(jnp.array([0.0, 0.0]), 1.0).tolist()
    [0.5, 0.5]
  """
  u = _check_utilities(utilities)
  scale = _selection_scale(epsilon, sensitivity, monotonic)
  return jax.nn.softmax(u / scale, axis=-1)


def exponential_mechanism(key: jax.Array, utilities: jax.typing.ArrayLike,
                          epsilon: float, sensitivity: float = 1.0,
                          monotonic: bool = False,
                          shape: tuple[int, ...] | None = None) -> jax.Array:
  """Samples an index int32[...] with probability `exponential_probs(...)`: eps-DP each.

  shape: optional output shape ending with the batch shape, e.g. (K,) + u.shape[:-1].
  Gumbel-max on float32 uniforms (the module's unaccounted ~2^-23 delta).
  """
  u = _check_utilities(utilities)
  scale = _selection_scale(epsilon, sensitivity, monotonic)
  if shape is not None:
    # categorical draws float32 Gumbel noise of shape + (C,): size it before XLA does
    # (an allocation that large aborts the process).
    out = _validate.check_sizes(shape, "shape", 0)
    _validate.check_size(math.prod(out), "prod(shape)", 0, bytes_per_unit=4, units=u.shape[-1])
  return jax.random.categorical(key, u / scale, axis=-1, shape=shape).astype(jnp.int32)


def report_noisy_max(key: jax.Array, utilities: jax.typing.ArrayLike, epsilon: float,
                     sensitivity: float = 1.0, monotonic: bool = False) -> jax.Array:
  """argmax of u + Laplace(2 Delta_u / eps) (Delta_u / eps if monotonic): int32[...], eps-DP.

  Only the index is released (Dwork & Roth 2014, Claim 3.9); float32 Laplace (|L| < 17)
  gives the module's unaccounted ~2^-23 delta.
  """
  u = _check_utilities(utilities)
  scale = _selection_scale(epsilon, sensitivity, monotonic)
  noise = jax.random.laplace(key, u.shape, jnp.float32)
  return jnp.argmax(u + scale * noise, axis=-1).astype(jnp.int32)
