"""The checks of `train_many`'s inputs: records, labels, fixed-gradient records.
Shape letters: M models, N records, K fixed-gradient records.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import models as models_lib

PyTree = Any


class FixedGradients(NamedTuple):
  """K extra records with fixed per-example gradients: gradients_K (pytree like params,
  leaves [K, ...], finite) and keep_MxK bool[M, K] (record j in model i's dataset)."""
  gradients_K: PyTree
  keep_MxK: Any


def check_numeric(name, value) -> None:
  """ValueError naming `name` unless value's dtype is real (bool, integer or floating)."""
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    dtype = np.asarray(value).dtype
  if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
    raise ValueError(f"{name} must be an array of numbers, got dtype {dtype}")
  if np.issubdtype(dtype, np.complexfloating):
    raise ValueError(f"{name} must hold real numbers, got dtype {dtype}")


def fixed_records(m, params_shape, fixed_gradients):
  """(gradients [K, ...] or None, keep bool[M, K]) from `fixed_gradients`, validated."""
  if fixed_gradients is None:
    return None, jnp.zeros((m, 0), bool)
  _validate.check_instance(fixed_gradients, FixedGradients, "fixed_gradients")
  g, keep = fixed_gradients
  k = _check_fixed_leaves(g, params_shape)
  ck = np.asarray(keep)
  if ck.shape != (m, k) or ck.dtype != np.bool_:
    raise ValueError(f"fixed_gradients.keep_MxK must be bool[{m}, {k}] (models x fixed "
                     f"records), got {ck.dtype}{list(ck.shape)}")
  return jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), g), jnp.asarray(ck)


def _check_fixed_leaves(gradients, params_shape) -> int:
  """Checks fixed gradients (leaves [K, ...]) against params; returns K."""
  name = "fixed_gradients.gradients_K"
  if jax.tree.structure(gradients) != jax.tree.structure(params_shape):
    raise ValueError(f"{name} must have the structure of the model's params")
  leaves = jax.tree.leaves(gradients)
  for v in leaves:
    check_numeric(name, v)
  shapes = [tuple(np.shape(v)) for v in leaves]
  want = [tuple(l.shape) for l in jax.tree.leaves(params_shape)]
  if any(len(s) != len(w) + 1 for s, w in zip(shapes, want)) or any(
      s[1:] != w for s, w in zip(shapes, want)) or len({s[0] for s in shapes}) != 1:
    raise ValueError(f"{name} leaves must have the params' shapes with one common leading "
                     f"axis K, got {shapes} for params {want}")
  k = shapes[0][0]
  if k < 1:
    raise ValueError(f"{name} must hold K >= 1 records, got K = {k}")
  _validate.check_size(k, f"{name} (K)", units=sum(math.prod(w) for w in want))
  if not all(bool(np.all(np.isfinite(np.asarray(v, np.float32)))) for v in leaves):
    raise ValueError(f"{name} must be finite (no NaN or inf)")
  return k


def _first_bad_index(bad: np.ndarray) -> tuple[int, ...]:
  return tuple(int(i) for i in np.argwhere(bad)[0])


@jax.jit
def _all_finite(x: jax.Array) -> jax.Array:
  """Whether every value of x is finite: one fused pass, no [N, F] mask on the host."""
  return jnp.all(jnp.isfinite(x))


@jax.jit
def _sum_finite(x: jax.Array) -> jax.Array:
  """Whether sum(x) is finite, which implies every value of x is: an inf or NaN term makes
  any IEEE sum containing it inf or NaN, whatever the order. Not the converse (finite values
  can overflow the sum). A float sum vectorises on XLA:CPU, a boolean all-reduce does not:
  about 4x faster than `_all_finite` on [60000, 784]."""
  return jnp.isfinite(jnp.sum(x))


def check_records(x: jax.Array, y: jax.Array, model: models_lib.Model) -> None:
  """ValueError naming `x_NxF` or `y_N` for non-finite or complex values, or labels outside
  {0, 1} (one output) or [0, K) (checked before any int32 cast).

  x: one pass over x when its sum is finite (every value then is), the exact element-wise
  check only when it is not (an inf or NaN, or finite values whose sum overflows)."""
  if not bool(_sum_finite(x)) and not bool(_all_finite(x)):
    idx = _first_bad_index(~np.asarray(jnp.isfinite(x)))
    raise ValueError(f"x_NxF must be finite (no NaN or inf): x_NxF{list(idx)} = "
                     f"{float(x[idx])}")
  y_np = np.asarray(y)   # as given (int64 stays int64: compared exactly in float64)
  if not (np.issubdtype(y_np.dtype, np.number) or y_np.dtype == np.bool_) or np.issubdtype(
      y_np.dtype, np.complexfloating):
    raise ValueError(f"y_N must be real numeric labels, got dtype {y_np.dtype}")
  yf = y_np.astype(np.float64)
  bad_y = ~np.isfinite(yf)
  if bad_y.any():
    i = _first_bad_index(bad_y)[0]
    raise ValueError(f"y_N must be finite (no NaN or inf): y_N[{i}] = {yf[i]}")
  k = int(model.num_outputs)
  if k == 1:
    bad_y, allowed = (yf != 0) & (yf != 1), "in {0, 1} (one output: logistic loss)"
  else:
    bad_y = (yf != np.floor(yf)) | (yf < 0) | (yf >= k)
    allowed = f"class indices in [0, {k}) (integers)"
  if bad_y.any():
    i = _first_bad_index(bad_y)[0]
    raise ValueError(f"y_N must be {allowed}, got y_N[{i}] = {y_np[i]!r}")
