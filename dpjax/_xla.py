"""Compile-time helpers: values XLA stores once instead of recomputing in every consumer."""

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
  trips = (token | jnp.uint32(1)) & jnp.uint32(1)
  shapes = jax.eval_shape(fn)
  init = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  _, out = jax.lax.while_loop(lambda s: s[0] < trips,
                              lambda s: (s[0] + jnp.uint32(1), fn()),
                              (jnp.uint32(0), init))
  return out
