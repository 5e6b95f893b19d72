"""Closed-form per-example clipping for logistic regression (a generalised linear model).

Params {"w": [D]}, loss logloss(x_i . w, y_i) + (l2/2)||w||^2: g_i = r_i x_i + l2 w with
r_i = sigmoid(x_i . w) - y_i, so (two matrix-vector products per step)

    ||g_i||^2 = r_i^2 ||x_i||^2 + 2 l2 r_i (x_i . w) + l2^2 ||w||^2,
    sum_i a_i g_i = X^T (a * r) + l2 (sum_i a_i) w,   a_i = w_i min(1, C / ||g_i||).

Shape letters: B records, D features.

Examples:
  >>> import jax.numpy as jnp
  >>> s, norms = clipped_grad_sum(0.0, {"w": jnp.zeros(2)}, jnp.array([[3.0, 4.0]]),
  ...                             jnp.array([0]), jnp.ones(1), 1.0)
  >>> float(norms[0]), [round(float(v), 3) for v in s["w"]]
  (2.5, [0.6, 0.8])
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.clipping.vmap import safe_norm

PyTree = Any


@_validate.names_extreme_arguments
def clipped_grad_sum(l2: float, params: PyTree, x_BxD: jax.Array, y_B: jax.Array,
                     weights_B: jax.Array, l2_clip_norm: float) -> tuple[PyTree, jax.Array]:
  """The clipped-sum contract (`dpjax.clipping`) for logistic regression, in closed form."""
  if not _validate.is_tracer(l2):
    _validate.check_nonnegative(l2, "l2")
  _validate.check_batch(x_BxD, y_B, weights_B, x_name="x_BxD")
  l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
  w = params["w"]
  # w . x_i: under vmap the logits come out [M, B] (x @ w gives [B, M], a transposed read).
  z = jnp.einsum("d,bd->b", w, x_BxD)
  r = jax.nn.sigmoid(z) - y_B.astype(z.dtype)
  # ||x_i||, overflow-safe; parameter-free, so computed once under a vmap over models.
  sq = jnp.sum(jnp.square(x_BxD), axis=1)
  nx = safe_norm(sq, jnp.max(jnp.abs(x_BxD), axis=1),
                 lambda unit: jnp.sum(jnp.square(unit(x_BxD)), axis=1))
  if l2 == 0.0:
    norms = jnp.abs(r) * nx
  else:
    n2 = jnp.square(r) * sq + 2.0 * l2 * r * z + l2 * l2 * jnp.sum(jnp.square(w))
    # Out of float32 range: the triangle bound |r_i| ||x_i|| + l2 ||w|| (never below the norm).
    big = jnp.where(r == 0, 0.0, jnp.abs(r) * nx) + l2 * jnp.sqrt(jnp.sum(jnp.square(w)))
    norms = jnp.where(n2 < jnp.inf, jnp.sqrt(jnp.maximum(n2, 0.0)), big)
  # A NaN or inf norm drops the record: its coefficient is exactly 0 (`vmap.safe_norm`'s rule).
  keep = norms < jnp.inf
  # min(1, C / norm) inline (`clip_factor` without its NaN select: `keep` covers it).
  a = weights_B if math.isinf(l2_clip_norm) else (
      weights_B * (l2_clip_norm / jnp.maximum(norms, l2_clip_norm)))
  s = jnp.where(keep, a * r, 0.0) @ x_BxD
  if l2 != 0.0:
    s = s + l2 * jnp.sum(jnp.where(keep, a, 0.0)) * w
  # Reported norms: inf (not NaN) when dropped; 0 when r_i = 0, as vmap(grad) reports it.
  norms = jnp.where(keep, norms, jnp.inf)
  if l2 == 0.0:
    norms = jnp.where(r == 0, 0.0, norms)
  return {"w": s}, norms
