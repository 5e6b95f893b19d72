"""Dirac canaries as records on a parameter leaf the model never reads.

`models.with_canary_leaf` adds params["canary"] float32[K]; `canary_leaf_path` clips the records
on params["model"] and gives each sampled IN canary record the gradient C e_k on that leaf (norm
C, untouched by clipping), so K canaries cost O(K) work per step and are sampled, counted in the
batch size and noised like every record. `llr_accumulating_sgd` turns the leaf's update into the
adversary's claimed per-step likelihood ratio, summed over the training scan. Used by
`dpjax.audit.run.leaf_canary_training` (K > 1 final-model audit) and
`dpjax.audit.per_step_run.step_observations` (per-step audit).

Shape letters: N rows (records, then the K canaries), K canaries.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate
from dpjax import clipping as clipping_lib


@functools.lru_cache(maxsize=32)
def canary_leaf_path(path, num_canaries: int):
  """`path` on the first N - K rows and params["model"]; the last K rows (the canaries) add
  C w_k e_k to params["canary"] (w_k: their sampled-and-kept weight), their norms C.

  A full-mask clipped sum (`dpjax.clipping` contract) for `models.with_canary_leaf`: a
  Dirac canary is a record whose clipped gradient has norm exactly C. Cached per
  (path, K), so one program per path.
  """
  k = _validate.check_int(num_canaries, "num_canaries")
  path = clipping_lib.as_path(path)

  def fn(params, x, y, w, c):
    if x.shape[0] <= k:
      raise ValueError(f"the canary path needs the full-mask step over N > K = {k} rows, "
                       f"got {x.shape[0]} (batch_capacity must be None)")
    n = x.shape[0] - k
    g, norms = path(params["model"], x[:n], y[:n], w[:n], c)
    return ({"model": g, "canary": c * w[n:].astype(jnp.float32)},
            jnp.concatenate([norms, jnp.full((k,), c, norms.dtype)]))
  return clipping_lib.ClippingPath(fn, f"{path.name}+canary_leaf",
                                   per_example_grad_memory=path.per_example_grad_memory,
                                   scan_unroll=path.scan_unroll, accounted=path.accounted)


# Above this x = (2 o - 1) / (2 sigma^2), log(1 - q + q e^x) = x + log q to float32 precision.
_LLR_LINEAR_FROM = 40.0


def _step_llr_f32(o, sampling_prob: float, noise_multiplier: float):
  """`canary.step_llr` in float32 without overflow: log(1 - q + q exp(x)) with x capped at
  _LLR_LINEAR_FROM and the linear tail added; noise_multiplier 0: 1.0 where o > 1/2.

  The exp and the log are kept in separate XLA fusions (an optimization barrier): fused
  together inside the training scan, XLA:CPU ran them several times slower.
  """
  if noise_multiplier == 0:
    return (o > 0.5).astype(jnp.float32)
  x = (2.0 * o - 1.0) / (2.0 * noise_multiplier * noise_multiplier)
  if sampling_prob >= 1.0:
    return x
  capped = jnp.minimum(x, _LLR_LINEAR_FROM)
  mix = jax.lax.optimization_barrier((1.0 - sampling_prob) + sampling_prob * jnp.exp(capped))
  return jnp.log(mix) + (x - capped)


@functools.lru_cache(maxsize=64)
def llr_accumulating_sgd(learning_rate: float, momentum: float, scale: float,
                         sampling_prob: float, noise_multiplier: float):
  """The engine's default optimizer (`dpsgd.train_many`: optax.sgd(learning_rate,
  momentum=momentum or None)) on params["model"]; on params["canary"] the update is
  `_step_llr_f32(update * scale)` (`dpjax.audit.run.leaf_canary_training`). One object per argument
  tuple, so each claim's program compiles once."""
  inner = optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None)

  def init_fn(params):
    return inner.init(params["model"])

  def update_fn(updates, state, params=None):
    upd, state = inner.update(updates["model"], state,
                              None if params is None else params["model"])
    return ({"model": upd, "canary": _step_llr_f32(updates["canary"] * scale, sampling_prob,
                                                   noise_multiplier)}, state)
  return optax.GradientTransformation(init_fn, update_fn)
