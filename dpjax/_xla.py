"""Compile-time helpers: values XLA stores once instead of recomputing in every consumer, and
loop conditions that stay unbatched under vmap (one loop for the batch, no per-trip selects)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp


def once(fn: Callable[[], Any], token: jax.Array) -> Any:
  """fn() computed in a loop of exactly one trip, so XLA stores its outputs once.

  XLA:CPU fuses an elementwise producer into each of its consumers, duplicating its code
  in every kernel (compile time grows with the copies; `jax.lax.optimization_barrier` is
  removed before fusion on the CPU). A while loop is a fusion boundary. Its trip count
  depends on `token` (any runtime integer scalar, e.g. a label or a step counter), so XLA
  cannot unroll it away; the values are fn()'s bit for bit. Performance only.
  """
  token = jnp.asarray(token)
  token = jax.lax.bitcast_convert_type(token, jnp.uint32) if token.dtype.itemsize == 4 \
      else token.astype(jnp.uint32)
  trips = (_first_over_batch(token) | jnp.uint32(1)) & jnp.uint32(1)
  shapes = jax.eval_shape(fn)
  init = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  _, out = jax.lax.while_loop(lambda s: s[0] < trips,
                              lambda s: (s[0] + jnp.uint32(1), fn()),
                              (jnp.uint32(0), init))
  return out


@jax.custom_batching.custom_vmap
def _first_over_batch(x: jax.Array) -> jax.Array:
  """x; under vmap, the first member's value, unbatched (for `once`'s trip count, 1 for any
  value: a batched count would make vmap guard the loop with a reduction and selects)."""
  return x


@_first_over_batch.def_vmap
def _first_over_batch_rule(axis_size, in_batched, x):
  if not in_batched[0]:
    return x, False
  return (x[0] if axis_size else jnp.zeros(x.shape[1:], x.dtype)), False


@jax.custom_batching.custom_vmap
def any_over_batch(pred: jax.Array) -> jax.Array:
  """pred (a bool scalar); under vmap, the OR over the mapped axis, unbatched.

  As a while loop's condition, the batch runs one loop until no member needs another trip,
  without vmap's per-trip selects of the loop state: the body must leave a finished member's
  state unchanged. Performance only.
  """
  return pred


@any_over_batch.def_vmap
def _any_over_batch_rule(axis_size, in_batched, pred):
  del axis_size
  return (jnp.any(pred) if in_batched[0] else pred), False


@jax.custom_batching.custom_vmap
def all_over_batch(pred: jax.Array) -> jax.Array:
  """pred (a bool scalar); under vmap, the AND over the mapped axis, unbatched, so that a
  lax.cond on it stays one branch instead of becoming a select that runs both."""
  return pred


@all_over_batch.def_vmap
def _all_over_batch_rule(axis_size, in_batched, pred):
  del axis_size
  return (jnp.all(pred) if in_batched[0] else pred), False
