"""Clipped per-example gradients rounded to an integer grid: the sum for secure DP-SGD.

`privatizer.SecureGaussianPrivatizer` adds integer noise to an INTEGER sum, so no float bit
pattern depends on membership (`dpjax.integer_noise`). With gamma a power of two and
c_i = min(1, C / ||g_i||) g_i:

    r_i = round(c_i / gamma)  (int32[P]),        S = sum_i w_i r_i  (int32, exact),
    ||r_i||_2 <= C / gamma + sqrt(P)/2 =: Delta  (`grid_sensitivity`),

ENFORCED in the integer domain: r_i is zeroed unless finite with float32 squared norm
<= `norm_threshold(Delta, P)`. int32 overflow only wraps (post-processing). weights_B is a
0/1 mask (read as > 1/2). Shape letters: B records, F features, P parameters.

Examples:
  >>> import jax.numpy as jnp
  >>> from dpjax import models
  >>> p = path(models.logistic_regression(2), 2.0 ** -4)
  >>> s, norms = p({"w": jnp.zeros(2)}, jnp.array([[3.0, 4.0]]), jnp.array([0]),
  ...              jnp.ones(1), 1.0)
  >>> s["w"].tolist(), float(norms[0])        # (0.6, 0.8) / 2^-4, rounded
  ([10, 13], 2.5)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import integer_noise
from dpjax import models as models_lib
from dpjax.clipping import ClippingPath
from dpjax.clipping import vmap as vmap_lib

PyTree = Any
_U = 2.0 ** -24            # float32 unit roundoff
_CLAMP = 2.0 ** 24         # |c / gamma| is clamped here before rounding (squares stay finite)
_FAST_LIMIT = 2.0 ** 22    # `_logistic_grid_sum` zeroes records with max |c / gamma| above


@dataclasses.dataclass(frozen=True, eq=False)
class GridClippingPath(ClippingPath):
  """A ClippingPath whose sum is the int32 grid sum on grid gamma = `grid`; the engine pairs
  it only with a privatizer of the same grid."""
  grid: float = 1.0

  def __post_init__(self):
    super().__post_init__()
    integer_noise.check_grid(self.grid, "grid")


def grid_sensitivity(l2_clip_norm: float, grid: float, num_params: int) -> float:
  """Delta = C / gamma + sqrt(P) / 2: the L2 sensitivity of the grid sum, in grid units.

  Examples:
    >>> grid_sensitivity(1.0, 2.0 ** -10, 16)
    1026.0
  """
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  g = integer_noise.check_grid(grid)
  p = _validate.check_int(num_params, "num_params")
  return c / g + math.sqrt(p) / 2.0


def norm_threshold(sensitivity_grid: float, num_params: int) -> np.float32:
  """float32 t: a float32 sum (any order) of P integer squares <= t proves the exact <= Delta^2.

  t = Delta^2 (1 - u)(1 - (P - 1)u / (1 - (P - 1)u)), u = 2^-24, rounded down.
  """
  delta = _validate.check_positive(sensitivity_grid, "sensitivity_grid")
  p = _validate.check_int(num_params, "num_params")
  if (p - 1) * _U >= 0.5:
    raise ValueError(f"num_params must be below 2^23 for the grid path, got {p}")
  gam = (p - 1) * _U / (1.0 - (p - 1) * _U)
  bound = delta * delta * (1.0 - _U) * (1.0 - gam) * (1.0 - 1e-12)
  t = np.float32(min(bound, float(np.finfo(np.float32).max)))   # Delta^2 beyond float32
  while float(t) > bound:
    t = np.nextafter(t, np.float32(0.0))
  return t


def round_clipped(clipped: PyTree, grid: float, l2_clip_norm: float) -> PyTree:
  """r_i = round(c_i / gamma) as int32 (leaves [B, ...]), zeroed unless finite and within
  `norm_threshold`, so ||r_i||_2 <= `grid_sensitivity(C, gamma, P)` for every i."""
  g = integer_noise.check_grid(grid)
  leaves, treedef = jax.tree.flatten(clipped)
  num_params = sum(math.prod(l.shape[1:]) for l in leaves)
  thr = norm_threshold(grid_sensitivity(l2_clip_norm, g, num_params), num_params)
  lim = jnp.float32(_CLAMP)
  scaled = [jnp.asarray(l, jnp.float32) / jnp.float32(g) for l in leaves]
  finite = functools.reduce(jnp.logical_and, [
      jnp.all(jnp.isfinite(s).reshape(s.shape[0], -1), axis=1) for s in scaled])
  rounded = [jnp.round(jnp.clip(jnp.where(jnp.isfinite(s), s, 0.0), -lim, lim))
             for s in scaled]
  sq = functools.reduce(jnp.add, [jnp.sum(jnp.square(r).reshape(r.shape[0], -1), axis=1)
                                  for r in rounded])
  ok = finite & (sq <= thr)
  out = [jnp.where(ok.reshape((-1,) + (1,) * (r.ndim - 1)), r, 0.0).astype(jnp.int32)
         for r in rounded]
  return jax.tree.unflatten(treedef, out)


def _per_example_grads(model: models_lib.Model, params, x_BxF, y_B):
  if model.kind == "logistic_regression":
    w = params["w"]
    z = jnp.einsum("d,bd->b", w, x_BxF)
    r = jax.nn.sigmoid(z) - y_B.astype(z.dtype)
    g = r[:, None] * x_BxF
    if model.l2 != 0.0:
      g = g + model.l2 * w[None, :]
    return {"w": g}
  return vmap_lib.per_example_grads(model, params, x_BxF, y_B)


def _logistic_grid_sum(grid, params, x_BxF, y_B, weights_B, c):
  """`grid_clipped_sum` of logistic regression without an L2 term, with c_i = (a_i r_i) x_i.

  With f_i = a_i r_i / gamma and s_id = f_i x_id, max_d |s_id| = |f_i| max_d |x_id| exactly
  (rounding is monotone), so a record with that bound above 2^22 has a rounded square above
  2^44 > t (checked statically) and is zeroed as `round_clipped` zeroes it; every other
  s_id is finite and below the clamp, so `round_clipped`'s integers are round(s_id). The
  sum runs in float32, exact when B sqrt(t) <= 2^24 (checked statically), one record per
  scan iteration.
  """
  num_p = x_BxF.shape[1]
  thr = norm_threshold(grid_sensitivity(c, grid, num_p), num_p)
  w = params["w"]
  z = jnp.einsum("d,bd->b", w, x_BxF)
  r = jax.nn.sigmoid(z) - y_B.astype(z.dtype)
  nx = vmap_lib.tree_norms([x_BxF])          # ||x_i||, overflow-safe
  norms = jnp.where(r == 0, 0.0, jnp.abs(r) * nx)
  norms = jnp.where(jnp.isnan(norms), jnp.inf, norms)
  f = (r * vmap_lib.clip_factor(norms, c)) / jnp.float32(grid)
  row_finite = jnp.all(jnp.isfinite(x_BxF), axis=1)
  x_safe = jnp.where(jnp.isfinite(x_BxF), x_BxF, 0.0)
  x_max = jnp.where(row_finite, jnp.max(jnp.abs(x_safe), axis=1), jnp.inf)
  pre = (jnp.asarray(weights_B) > 0.5) & (jnp.abs(f) * x_max <= jnp.float32(_FAST_LIMIT))
  f = jnp.where(pre, f, 0.0)
  # sum_d round(f x_d)^2 <= sum_d (|f| |x_d| (1 + u) + 1/2)^2 <= `bound` up to rounding.
  g = jnp.abs(f)
  bound = (g * g * jnp.sum(x_safe * x_safe, axis=1) + g * jnp.sum(jnp.abs(x_safe), axis=1)
           + jnp.float32(num_p / 4 + 1))
  s = _record_sum(float(thr), f, x_safe, bound)
  return {"w": s.astype(jnp.int32)}, norms


def _checked_record_sum(thr, f_B, x_BxP):
  """sum_i [sum_d v_id^2 <= thr] v_i, v_i = round(f_i x_i), float32, one record per scan
  iteration: its rounded gradient is checked and added while in cache."""
  def add_record(s_P, f_x):
    v = jnp.round(f_x[0] * f_x[1])
    return s_P + jnp.where(jnp.sum(jnp.square(v)) <= thr, v, 0.0), None
  s, _ = jax.lax.scan(add_record, jnp.zeros((x_BxP.shape[1],), jnp.float32), (f_B, x_BxP))
  return s


@jax.custom_batching.custom_vmap
def _record_sum_impl(thr, f_B, x_BxP, bound_B):
  del bound_B
  return _checked_record_sum(thr, f_B, x_BxP)


def _record_sum(thr: float, f_B, x_BxP, bound_B):
  """`_checked_record_sum`; vmapped over models (f, bound batched, x shared) it skips the
  norm checks when every record's bound (`_logistic_grid_sum`) passes them.

  Same result: when bound_i (1 + 4 (P + 16) u) <= thr for all i, the float32 sum of
  squares of each v_i, in any order, is <= thr (the bound's and the sum's rounding are
  below (2 P + 20) u relative), so every check passes. The skipping sum runs with the
  models on the minor axis, [P, M] per record. Otherwise (or under other batching) the
  checked sum runs for every model.
  """
  return _record_sum_impl(jnp.float32(thr), f_B, x_BxP, bound_B)


@_record_sum_impl.def_vmap
def _record_sum_vmap(axis_size, in_batched, thr, f_MxB, x, bound_MxB):
  thr_b, f_b, x_b, bound_b = in_batched
  checked = jax.vmap(_checked_record_sum, in_axes=(0 if thr_b else None, 0, 0 if x_b else None))
  if thr_b or x_b or not (f_b and bound_b):
    f = f_MxB if f_b else jnp.broadcast_to(f_MxB, (axis_size,) + f_MxB.shape)
    return checked(thr, f, x), True
  num_p = x.shape[1]
  factor = np.float32(1.0 + 4.0 * (num_p + 16) * 2.0 ** -24)
  ok = jnp.all(bound_MxB * factor <= thr)      # False for a NaN or infinite bound

  def unchecked(f, x):
    def add_record(s_PxM, f_x):
      return s_PxM + jnp.round(f_x[1][:, None] * f_x[0][None, :]), None
    s, _ = jax.lax.scan(add_record, jnp.zeros((num_p, axis_size), jnp.float32), (f.T, x))
    return s.T
  return jax.lax.cond(ok, unchecked, lambda f, x: checked(thr, f, x), f_MxB, x), True


def _logistic_fast(model, grid, c, x_BxF) -> bool:
  """Whether `_logistic_grid_sum` gives `grid_clipped_sum`'s integers (static shapes)."""
  if model.kind != "logistic_regression" or model.l2 != 0.0 or x_BxF.ndim != 2:
    return False
  num_b, num_p = x_BxF.shape
  thr = float(norm_threshold(grid_sensitivity(c, grid, num_p), num_p))
  return thr < _FAST_LIMIT ** 2 and num_b * math.sqrt(thr) <= 2.0 ** 24


def grid_clipped_sum(model: models_lib.Model, grid: float, params: PyTree, x_BxF: jax.Array,
                     y_B: jax.Array, weights_B: jax.Array, l2_clip_norm: float
                     ) -> tuple[PyTree, jax.Array]:
  """(S = sum_i w_i round(clip(g_i, C) / gamma) int32, norms ||g_i||); C finite. One record
  moves S by at most `grid_sensitivity(C, gamma, P)` in L2.

  Logistic regression without L2 term takes `_logistic_grid_sum` (norms |r_i| ||x_i||,
  c_i = (a_i r_i) x_i); every other model rounds its materialised per-example gradients
  with `round_clipped`.
  """
  models_lib.check_model(model)
  _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=model.num_outputs)
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  if not math.isfinite(c) or c <= 0:
    raise ValueError(f"l2_clip_norm must be finite and > 0 for the grid path, got {c}")
  x_BxF = jnp.asarray(x_BxF)
  if _logistic_fast(model, grid, c, x_BxF):
    return _logistic_grid_sum(grid, params, x_BxF, y_B, weights_B, c)
  g = _per_example_grads(model, params, x_BxF, y_B)
  norms = vmap_lib.tree_norms(g)     # overflow-safe: finite for every finite gradient
  a = vmap_lib.clip_factor(norms, c)
  clipped = jax.tree.map(lambda v: v * a.reshape((-1,) + (1,) * (v.ndim - 1)), g)
  r = round_clipped(clipped, grid, c)
  w = (jnp.asarray(weights_B) > 0.5).astype(jnp.int32)
  s = jax.tree.map(lambda v: jnp.sum(v * w.reshape((-1,) + (1,) * (v.ndim - 1)), axis=0), r)
  return s, norms


def path(model: models_lib.Model, grid: float) -> GridClippingPath:
  """The grid clipping path for `model` (memoised); grid a power of two (e.g.
  `privatizer.default_grid(C)`)."""
  if not isinstance(model, models_lib.Model):
    raise TypeError(
        f"model must be a models.Model, got {type(model).__name__}: the grid path rounds "
        "each per-example gradient, which other clipping paths (ghost) never form")
  return _path(model, integer_noise.check_grid(grid))


@functools.lru_cache(maxsize=64)
def _path(model, grid):
  return GridClippingPath(functools.partial(grid_clipped_sum, model, grid), "grid",
                          per_example_grad_memory=True, grid=grid)
