"""Clipped per-example gradients rounded to an integer grid: the sum for secure DP-SGD.

Secure DP-SGD (`dpjax.privatizer.SecureGaussianPrivatizer`) adds integer noise to an
INTEGER sum, so that the release is a post-processing of the continuous Gaussian
mechanism (`dpjax.integer_noise`) and no float bit pattern depends on membership.
This path computes that sum: with gamma a power of two, each record's clipped
gradient c_i = min(1, C / ||g_i||) g_i is rounded coordinatewise,

    r_i = round(c_i / gamma)  (int32[P]),        S = sum_i w_i r_i  (int32, exact),

and returned in grid units. Rounding moves each of the P coordinates by at most
1/2, so ||r_i||_2 <= ||c_i||_2 / gamma + sqrt(P)/2 <= C / gamma + sqrt(P)/2 =: Delta,
the L2 sensitivity of S for add/remove-one neighbours (`grid_sensitivity`). The
bound is also ENFORCED in the integer domain, so float32 error in the clipping (a
norm computed slightly low) cannot break it: the squared norm of r_i is summed
in float32 and r_i is kept only if that sum is <= `norm_threshold(Delta, P)`,
Delta^2 shrunk by the worst-case relative error of a float32 sum of P squares in
any order ((1 - u)(1 - (P - 1)u / (1 - (P - 1)u)), u = 2^-24); otherwise (and for
a non-finite gradient) r_i = 0. Either way one record moves S by at most Delta.
Honest records are never dropped: ||r_i|| is at most C / gamma + sqrt(P)/2 in
exact arithmetic and typically near sqrt((C/gamma)^2 + P/12).

Per-example gradients must be materialised: logistic regression uses its closed
form (g_i = (sigmoid(x_i.w) - y_i) x_i + l2 w), any other model `vmap(grad)`
(`clipping.vmap.per_example_grads`). The ghost path cannot round per-example
gradients it never forms, so there is no ghost variant; MLPs and CNNs go through
vmap here (memory [B, P] per model).

The path returns the clipped-sum contract with int32 leaves:

  fn(params, x_BxF, y_B, weights_B, l2_clip_norm)
      -> (int32 sum pytree like params, norms float32[B])

weights_B must be a 0/1 mask (it is read as weights > 1/2). Overflow of int32 (a
coordinate sum beyond 2^31) only wraps, which is still a function of S + noise
(privacy is unaffected); the update loses its meaning long before, once
|S + X| > 2^24 leaves float32's exact range of the grid.

Shape letters: B records, F features, P parameters.

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


@dataclasses.dataclass(frozen=True, eq=False)
class GridClippingPath(ClippingPath):
  """A ClippingPath whose sum is the int32 grid sum of this module.

  Attributes:
    grid: gamma, the power-of-two grid the per-example gradients are rounded to.
  The engine accepts it only together with a privatizer of the same grid
  (`privatizer.SecureGaussianPrivatizer`), and vice versa.
  """
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
  """float32 t such that a float32 sum (any order) of P float32 squares of integers
  that comes out <= t proves the exact squared norm is <= Delta^2 (module docstring)."""
  delta = _validate.check_positive(sensitivity_grid, "sensitivity_grid")
  p = _validate.check_int(num_params, "num_params")
  if (p - 1) * _U >= 0.5:
    raise ValueError(f"num_params must be below 2^23 for the grid path, got {p}")
  gam = (p - 1) * _U / (1.0 - (p - 1) * _U)
  bound = delta * delta * (1.0 - _U) * (1.0 - gam) * (1.0 - 1e-12)
  t = np.float32(bound)
  while float(t) > bound:
    t = np.nextafter(t, np.float32(0.0))
  return t


def round_clipped(clipped: PyTree, grid: float, l2_clip_norm: float) -> PyTree:
  """r_i = round(c_i / gamma) as int32, zeroed where ||r_i|| may exceed Delta.

  Args:
    clipped: pytree of float leaves [B, ...], the clipped per-example gradients.
    grid: gamma (power of two).
    l2_clip_norm: C, the clip norm the c_i were clipped to.
  Returns:
    int32 pytree like `clipped`: example i is its rounded gradient if its squared
    norm passes `norm_threshold(grid_sensitivity(C, gamma, P), P)` and all its
    entries are finite, else all zeros. So ||r_i||_2 <= Delta for every i.
  """
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


def grid_clipped_sum(model: models_lib.Model, grid: float, params: PyTree, x_BxF: jax.Array,
                     y_B: jax.Array, weights_B: jax.Array, l2_clip_norm: float
                     ) -> tuple[PyTree, jax.Array]:
  """S = sum_i w_i round(clip(g_i, C) / gamma) in int32, and the norms ||g_i||.

  Args:
    model, grid: the model and gamma (bound by `path`).
    params, x_BxF, y_B: as in `vmap.clipped_grad_sum`.
    weights_B: the 0/1 batch mask (read as weights > 1/2).
    l2_clip_norm: C > 0, finite.
  Returns:
    (int32 sum pytree like params, in grid units; norms float32[B] before clipping).
  Privacy: one record moves S by at most `grid_sensitivity(C, gamma, P)` in L2.
  """
  models_lib.check_model(model)
  _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=model.num_outputs)
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  if not math.isfinite(c) or c <= 0:
    raise ValueError(f"l2_clip_norm must be finite and > 0 for the grid path, got {c}")
  g = _per_example_grads(model, params, x_BxF, y_B)
  norms = vmap_lib.tree_norms(g)     # overflow-safe: finite for every finite gradient
  a = vmap_lib.clip_factor(norms, c)
  clipped = jax.tree.map(lambda v: v * a.reshape((-1,) + (1,) * (v.ndim - 1)), g)
  r = round_clipped(clipped, grid, c)
  w = (jnp.asarray(weights_B) > 0.5).astype(jnp.int32)
  s = jax.tree.map(lambda v: jnp.sum(v * w.reshape((-1,) + (1,) * (v.ndim - 1)), axis=0), r)
  return s, norms


def path(model: models_lib.Model, grid: float) -> GridClippingPath:
  """The grid clipping path for `model` (pass as `dpsgd.train_many(..., clipping=)`).

  Args:
    model: a `models.Model` (logistic regression: closed form; any other kind:
      vmap(grad), with [B, P] per-example gradients per model).
    grid: gamma, a power of two (e.g. `privatizer.default_grid(C)`).
  Returns:
    A GridClippingPath named "grid" (memoised per (model, grid), so one compiled
    program is reused).
  Raises:
    TypeError: if `model` is not a models.Model (e.g. a ClippingPath such as the
      ghost path, which never forms the per-example gradients this path rounds).
    ValueError: naming `grid` if it is not a power of two.
  """
  if not isinstance(model, models_lib.Model):
    raise TypeError(
        f"model must be a models.Model, got {type(model).__name__}: the grid path rounds "
        "each per-example gradient, which other clipping paths (ghost) never form")
  return _path(model, integer_noise.check_grid(grid))


@functools.lru_cache(maxsize=64)
def _path(model, grid):
  return GridClippingPath(functools.partial(grid_clipped_sum, model, grid), "grid",
                          per_example_grad_memory=True, grid=grid)
