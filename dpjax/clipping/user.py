"""User-level clipping: each user's summed gradient is one contribution, clipped to C.

With records grouped by user (record i belongs to user u(i)) and 0/1 batch weights
w_i (the user-level Poisson mask of `dpjax.sampling.UserPoissonSampler`), user-level
DP-SGD (McMahan et al. 2018, "Learning differentially private recurrent language
models", https://arxiv.org/abs/1710.06963) replaces the per-example clipped sum by

    G_u = sum_{i : u(i) = u} w_i g_i,          g_i = grad loss(params; x_i, y_i),
    S   = sum_u min(1, C / ||G_u||) G_u.

Each term of S has L2 norm <= C and depends on user u's records only, so adding or
removing one user (with ALL of their records, however many) moves S by at most C:
the Gaussian noise sigma * C and the accountant's (q, sigma, T) then give
(eps, delta)-DP with the user as the privacy unit. Per-example clipping followed by
a sum over a user's k records would instead move S by up to k C.

`user_level_path(model, user_ids_N, num_users)` returns a `ClippingPath` with the
clipped-sum contract of `dpjax.clipping` over the engine's N records

  fn(params, x_NxF, y_N, weights_N, l2_clip_norm) -> (S, norms float32[N])

where norms[i] = ||G_{u(i)}||, the norm of record i's user's sum before clipping
(0 for a user with no sampled record), and `privacy_unit = "user"`. Per-example
gradients come from vmap(grad) ([N, P] floats, then [U, P] after the segment sum).
A record whose own gradient is non-finite (or whose norm exceeds float32) is left
out of its user's sum, as the example-level paths drop it; a user whose summed
norm is not finite contributes exactly 0.

Shape letters: N records, U users, F features, P parameters.

Examples:
  >>> import jax.numpy as jnp
  >>> from dpjax import models
  >>> path = user_level_path(models.logistic_regression(2), [0, 0, 1], 2)
  >>> s, norms = path({"w": jnp.zeros(2)}, jnp.array([[3.0, 4.0], [3.0, 4.0], [0.0, 1.0]]),
  ...                 jnp.array([0, 0, 0]), jnp.ones(3), 1.0)
  >>> [round(float(v), 3) for v in norms]       # user 0: ||2 * (1.5, 2)|| = 5
  [5.0, 5.0, 0.5]
  >>> [round(float(v), 3) for v in s["w"]]      # (0.6, 0.8) + (0, 0.5)
  [0.6, 1.3]
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax import models as models_lib
from dpjax import sampling as sampling_lib
from dpjax.clipping import vmap as vmap_lib

PyTree = Any


def user_clipped_grad_sum(model: models_lib.Model, user_ids_N: jax.Array, num_users: int,
                          params: PyTree, x_NxF: jax.Array, y_N: jax.Array,
                          weights_N: jax.Array, l2_clip_norm: float
                          ) -> tuple[PyTree, jax.Array]:
  """sum_u min(1, C / ||G_u||) G_u with G_u = sum_{u(i) = u} weights_i g_i (module docstring).

  Args:
    model, params: the model and its (unbatched) parameters.
    user_ids_N: int32[N], record i's user in [0, num_users) (validated by
      `user_level_path`; here it may be traced).
    num_users: U >= 1, static.
    x_NxF, y_N: the records.
    weights_N: float32[N], the 0/1 batch mask.
    l2_clip_norm: C > 0 (inf: no clipping).
  Returns:
    (sum pytree like params, norms float32[N]: ||G_{u(i)}|| for record i).
  Privacy: with 0/1 weights, adding or removing one user (all of their records)
    changes the sum by a vector of L2 norm <= C.
  """
  models_lib.check_model(model)
  num_users = _validate.check_int(num_users, "num_users")
  _validate.check_batch(x_NxF, y_N, weights_N, num_outputs=model.num_outputs,
                        x_name="x_NxF", y_name="y_N", weights_name="weights_N")
  l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
  n = jnp.shape(x_NxF)[0]
  if _validate.is_tracer(user_ids_N):
    if jnp.shape(user_ids_N) != (n,):
      raise ValueError(f"user_ids_N must have shape ({n},) (one id per record), got "
                       f"{jnp.shape(user_ids_N)}")
  else:
    # segment_sum would silently drop an id outside [0, U): refuse it here.
    sampling_lib.check_user_ids(user_ids_N, num_users, num_records=n)
  user_ids_N = jnp.asarray(user_ids_N, jnp.int32)
  g = vmap_lib.per_example_grads(model, params, x_NxF, y_N)
  rec_norms = vmap_lib.tree_norms(g)
  # A sampled record with a finite gradient enters its user's sum; every other record
  # contributes exactly 0 (where, not 0 * g: g may hold inf or NaN).
  take = (rec_norms < jnp.inf) & (weights_N != 0)

  def user_sum(gl):
    mask = take.reshape((-1,) + (1,) * (gl.ndim - 1))
    wl = weights_N.astype(gl.dtype).reshape(mask.shape)
    return jax.ops.segment_sum(jnp.where(mask, wl * gl, 0.0), user_ids_N,
                               num_segments=num_users)
  g_u = jax.tree.map(user_sum, g)
  norms_u = vmap_lib.tree_norms(g_u)
  keep_u = norms_u < jnp.inf
  a_u = jnp.where(keep_u, vmap_lib.clip_factor(norms_u, l2_clip_norm), 0.0)

  def clipped_total(gl):
    ok = (keep_u & (a_u != 0)).reshape((-1,) + (1,) * (gl.ndim - 1))
    return jnp.tensordot(a_u.astype(gl.dtype), jnp.where(ok, gl, 0.0), axes=1)
  return jax.tree.map(clipped_total, g_u), norms_u[user_ids_N]


def user_level_path(model: models_lib.Model, user_ids_N: jax.typing.ArrayLike,
                    num_users: int):
  """The user-level clipping path for `model` over records grouped by `user_ids_N`.

  Args:
    model: a models.Model (its per-example gradients are taken by vmap(grad)).
    user_ids_N: int[N], the user of each of the engine's N records, in
      [0, num_users); N must be the number of rows of the training data.
    num_users: U >= 1 (the configuration's dataset_size under privacy_unit "user").
  Returns:
    a `ClippingPath` (name "user_vmap", privacy_unit "user", holding [N, P]
    per-example gradients) whose fn has the clipped-sum contract over the N records
    and clips each user's summed gradient to C; its `user_ids_N` (int32[N], read
    only) and `num_users` are attached for the engine's checks.
  Raises:
    TypeError: if model is not a models.Model.
    ValueError: naming user_ids_N for a wrong rank, non-integer or out-of-range id,
      naming num_users for a count < 1.
  """
  from dpjax import clipping as clipping_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model)
  u = _validate.check_int(num_users, "num_users")
  ids = sampling_lib.check_user_ids(user_ids_N, u)
  ids.setflags(write=False)
  fn = functools.partial(user_clipped_grad_sum, model, jnp.asarray(ids), u)
  path = clipping_lib.ClippingPath(fn, "user_vmap", per_example_grad_memory=True,
                                   privacy_unit="user")
  # Frozen dataclass: attach the grouping for the engine's consistency checks.
  object.__setattr__(path, "user_ids_N", ids)
  object.__setattr__(path, "num_users", u)
  return path

