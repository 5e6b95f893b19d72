"""Per-example clipping by vmap(grad): the definition every other clipping path matches.

    S = sum_i w_i min(1, C / ||g_i||) g_i,     g_i = grad loss(params; x_i, y_i).

`clipped_grad_sum` materialises the gradients; `two_pass_clipped_grad_sum` takes the norms
first (`sqnorm`), then one backward pass of sum_i a_i loss_i, a_i held constant.
Shape letters: B records, F features.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import models
  >>> model = models.logistic_regression(2)
  >>> s, norms = clipped_grad_sum(model, {"w": jnp.zeros(2)}, jnp.array([[3.0, 4.0]]),
  ...                             jnp.array([0]), jnp.ones(1), 1.0)
  >>> float(norms[0]), [round(float(v), 3) for v in s["w"]]
  (2.5, [0.6, 0.8])
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax import models as models_lib
from dpjax.clipping import sqnorm
from dpjax.clipping.sqnorm import safe_norm  # noqa: F401  (re-exported)

PyTree = Any

# Above this |feature| the two-pass path runs the one-pass definition (same sums).
_GUARD_FEATURE_ABS = 2.0 ** 20


def clip_factor(norms_B: jax.Array, l2_clip_norm: float) -> jax.Array:
  """min(1, C / norm) per example: 1 for norm 0 or C = inf, 0 for norm inf or NaN; NaN
  everywhere for a traced C that is NaN or <= 0 (`_validate.check_clip_norm`)."""
  _validate.check_array(norms_B, "norms_B", low=0.0, allow_inf=True)
  l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
  if _validate.is_tracer(l2_clip_norm):
    f = jnp.where(jnp.isinf(l2_clip_norm), 1.0,
                  l2_clip_norm / jnp.maximum(norms_B, l2_clip_norm))
    return jnp.where(jnp.isnan(norms_B), 0.0, f)
  if math.isinf(l2_clip_norm):
    return jnp.ones_like(norms_B)
  f = l2_clip_norm / jnp.maximum(norms_B, l2_clip_norm)
  return jnp.where(jnp.isnan(f), 0.0, f)


def combine_norms(norms: Sequence[jax.Array]) -> jax.Array:
  """sqrt(sum_k n_k^2) per example for part norms n_k float32[B] (`safe_norm` rules)."""
  norms = list(norms)
  if len(norms) == 1:
    return jnp.where(jnp.isnan(norms[0]), jnp.inf, norms[0])
  sq = sum(jnp.square(n) for n in norms)
  mx = functools.reduce(jnp.maximum, norms)
  return safe_norm(sq, mx, lambda unit: sum(jnp.square(unit(n)) for n in norms))


def tree_norms(grads: PyTree) -> jax.Array:
  """||g_i|| over all leaves [B, ...] of a per-example gradient pytree (`safe_norm`)."""
  leaves = [g.reshape(g.shape[0], -1) for g in jax.tree.leaves(grads)]
  sq = sqnorm.tree_sq_norm_per_example(grads)
  mx = functools.reduce(jnp.maximum, [jnp.max(jnp.abs(g), axis=1) for g in leaves])
  return safe_norm(sq, mx, lambda unit: sum(jnp.sum(jnp.square(unit(g)), axis=1)
                                            for g in leaves))


def example_loss(model: models_lib.Model, params: PyTree, x_F: jax.Array, y: jax.Array
                 ) -> jax.Array:
  """The loss of one record, a scalar (its vmap over records is the per-example loss)."""
  models_lib.check_model(model)
  _validate.check_array(x_F, "x_F", ndim=(1, 3), min_size=1)  # [F], or [H, W, C]
  return models_lib.per_example_loss(model, params, x_F[None], y[None])[0]


def per_example_grads(model: models_lib.Model, params: PyTree, x_BxF: jax.Array,
                      y_B: jax.Array) -> PyTree:
  """Per-example gradients by vmap(grad): a pytree like params with leaves [B, ...]."""
  models_lib.check_model(model)
  _validate.check_batch(x_BxF, y_B, num_outputs=model.num_outputs)
  return sqnorm.per_example_grads(functools.partial(example_loss, model), params, x_BxF, y_B)


def clipped_grad_sum(model: models_lib.Model, params: PyTree, x_BxF: jax.Array,
                     y_B: jax.Array, weights_B: jax.Array, l2_clip_norm: float
                     ) -> tuple[PyTree, jax.Array]:
  """sum_i weights_i * clip(g_i, C) by vmap(grad), and the norms float32[B] before clipping
  (a record with a non-finite gradient or norm adds 0)."""
  models_lib.check_model(model)
  _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=model.num_outputs)
  l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
  return sum_clipped_grads(per_example_grads(model, params, x_BxF, y_B), weights_B, l2_clip_norm)


def sum_clipped_grads(grads: PyTree, weights_B: jax.Array, l2_clip_norm: float
                      ) -> tuple[PyTree, jax.Array]:
  """sum_i w_i min(1, C / ||g_i||) g_i of per-example gradients (leaves [B, ...], C checked by
  the caller) and the norms float32[B]; a record with a non-finite norm or weight 0 adds 0."""
  norms = tree_norms(grads)
  keep = norms < jnp.inf
  a = jnp.where(keep, weights_B * clip_factor(norms, l2_clip_norm), 0.0)

  def weighted_sum(gl):
    # Dropped or unsampled examples contribute exactly zero (a plain 0 * inf would be NaN).
    gl = jnp.where((keep & (a != 0)).reshape((-1,) + (1,) * (gl.ndim - 1)), gl, 0.0)
    return jnp.tensordot(a, gl, axes=1)
  return jax.tree.map(weighted_sum, grads), norms


def two_pass_clipped_grad_sum(model: models_lib.Model, params: PyTree, x_BxF: jax.Array,
                              y_B: jax.Array, weights_B: jax.Array, l2_clip_norm: float,
                              *, rewrite_norms: bool = True
                              ) -> tuple[PyTree, jax.Array]:
  """Same result as `clipped_grad_sum` in two passes (rewrite_norms: the `sqnorm` identity);
  one pass when some |feature| > 2^20. Warning: pass 2 is one fused backward pass, so a
  custom loss overflowing on smaller inputs spreads NaN: use `clipped_grad_sum` for it."""
  models_lib.check_model(model)
  _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=model.num_outputs)
  rewrite_norms = _validate.check_bool(rewrite_norms, "rewrite_norms")
  l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
  x_BxF = jnp.asarray(x_BxF)
  # Huge records may overflow in the loss; the one-pass definition drops them exactly. The
  # switch reads the records only, so under the engine's vmap over models it stays a branch.
  huge = jnp.max(jnp.abs(x_BxF)) > _GUARD_FEATURE_ABS
  return jax.lax.cond(
      huge,
      lambda: clipped_grad_sum(model, params, x_BxF, y_B, weights_B, l2_clip_norm),
      lambda: _two_pass(model, params, x_BxF, y_B, weights_B, l2_clip_norm, rewrite_norms))


def _two_pass(model, params, x_BxF, y_B, weights_B, l2_clip_norm, rewrite_norms):
  sq = sqnorm.per_example_sq_norms(functools.partial(example_loss, model), params, x_BxF,
                                   y_B, rewrite=rewrite_norms)
  norms = jnp.sqrt(sq)
  norms = jnp.where(jnp.isnan(norms), jnp.inf, norms)
  a = jax.lax.stop_gradient(jnp.where(norms < jnp.inf,
                                      weights_B * clip_factor(norms, l2_clip_norm), 0.0))

  def weighted_loss(p):
    # vmap of the one-record loss: the same forward pass as pass 1's, computed once by XLA.
    losses = jax.vmap(functools.partial(example_loss, model), in_axes=(None, 0, 0))(
        p, x_BxF, y_B)
    return jnp.sum(a * losses)
  return jax.grad(weighted_loss)(params), norms
