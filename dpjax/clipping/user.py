"""User-level clipping: each user's summed gradient is one contribution, clipped to C.

Record i of user u(i), 0/1 weights w_i (`sampling.UserPoissonSampler`; McMahan et al. 2018):

    G_u = sum_{i : u(i) = u} w_i g_i,          S = sum_u min(1, C / ||G_u||) G_u,

so one user (ALL their records) moves S by at most C. `user_level_path` returns a
`ClippingPath` (privacy_unit "user") with norms[i] = ||G_{u(i)}||. Non-finite record
gradients are left out; a user with a non-finite summed norm contributes 0.
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
import numpy as np

from dpjax import _validate
from dpjax import models as models_lib
from dpjax import sampling as sampling_lib
from dpjax.clipping import vmap as vmap_lib

PyTree = Any


def user_clipped_grad_sum(model: models_lib.Model, user_ids_N: jax.Array, num_users: int,
                          params: PyTree, x_NxF: jax.Array, y_N: jax.Array,
                          weights_N: jax.Array, l2_clip_norm: float
                          ) -> tuple[PyTree, jax.Array]:
  """sum_u min(1, C / ||G_u||) G_u, G_u = sum_{u(i) = u} weights_i g_i, and norms ||G_{u(i)}||;
  user_ids_N int32[N] in [0, U) (may be traced), num_users static."""
  models_lib.check_model(model)
  num_users = _validate.check_int(num_users, "num_users")
  # segment_sum holds one sum of the gradient per user: U x (parameters) float32, twice
  num_params = sum(int(np.prod(jnp.shape(leaf))) for leaf in jax.tree.leaves(params))
  _validate.check_size(num_users, "num_users", units=num_params, bytes_per_unit=8)
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
  """The user-level clipping path ("user_vmap") for `model` over records grouped by
  `user_ids_N` int[N] in [0, num_users); both are attached (read-only) for the engine."""
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

