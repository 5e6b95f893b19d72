"""Crafting final-model adversaries of DP-SGD: canaries, initialisations, scores of theta_T.

The adversary sees only theta_T and the public theta_0 (which it may choose): input canaries,
gradient canaries g_j = C e_j seen only through theta_T (Cebere, Bellet & Papernot 2025), or a
worst-case initialisation (after Annamalai & De Cristofaro 2024). Canaries and directions are
pytrees like the parameters with leading axis K; scores are jax-traceable
fn(theta_T, theta_0) -> float[K], higher = IN.
Shape letters: K canaries, N records, F features, U unused features, P parameters.

References: Annamalai & De Cristofaro 2024 (arXiv:2405.14106); Cebere, Bellet & Papernot 2025
(arXiv:2405.14457).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
import jax.flatten_util  # noqa: F401  (ravel_pytree)
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, models

# Canaries and initialisations.


def unused_features(x_NxF) -> np.ndarray:
  """Indices of the features 0 in every record (x_NxF flattened to [N, F]): int64[U], ascending.

  Examples:
    >>> unused_features([[0.0, 1.0, 0.0], [0.0, 0.5, 2.0]]).tolist()
    [0]
  """
  x = _validate.check_array(x_NxF, "x_NxF", min_size=1)
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  x = x.reshape(x.shape[0], -1)
  return np.flatnonzero(np.all(x == 0.0, axis=0)).astype(np.int64)


def _check_record(model, params, x_c, y_c):
  f = _num_features(model, params)
  x = _validate.check_array(x_c, "x_c", np.float32, shape=(f,))
  y = _validate.check_labels(np.asarray(y_c).reshape(1) if np.ndim(y_c) == 0 else y_c, "y_c",
                             model.num_outputs, shape=(1,))
  return jnp.asarray(x)[None], jnp.asarray(y)


def _check_mlp(model, params, name="model"):
  models.check_model(model, name)
  if model.kind != "mlp":
    raise ValueError(f"{name} must be a dpjax.models.mlp with >= 1 hidden layer "
                     f"(kind {model.kind!r})")
  models.check_params(model, params)
  if len(params["layers"]) < 2:
    raise ValueError(f"{name} must be a dpjax.models.mlp with >= 1 hidden layer")


@_validate.names_extreme_arguments
def input_weight_canaries(model, params, features, l2_clip_norm: float, skip_units=()) -> dict:
  """Dirac gradient canaries C e_(f, h) on the MLP's first-layer weights of `features`.

  For unused features (SGD, no weight decay) weight (f, h) ends at theta_0 - lr/B sum_t
  (b_t C + sigma C z_t): exactly linear, independent canaries (`last_iterate.last_iterate_roc`).
  Returns a pytree like params with leading axis K = U (H - |skip_units|).

  Examples:
    >>> from dpjax import models
    >>> m = models.mlp(3, (2,), 2)
    >>> g = input_weight_canaries(m, m.init(jax.random.key(0)), [0], 1.0)
    >>> g["layers"][0]["w"].shape, float(g["layers"][0]["w"].sum())
    ((2, 3, 2), 2.0)
  """
  _check_mlp(model, params)
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  w0 = params["layers"][0]["w"]
  f_in, h = int(w0.shape[0]), int(w0.shape[1])
  feats = _validate.check_array(features, "features", np.int64, ndim=1, min_size=1,
                                low=0, high=f_in - 1)
  skip = set(int(u) for u in _validate.check_array(np.asarray(skip_units, np.int64).reshape(-1),
                                                   "skip_units", np.int64, low=0,
                                                   high=h - 1).tolist())
  units = [u for u in range(h) if u not in skip]
  if not units:
    raise ValueError("skip_units leaves no first-layer unit for the canaries")
  pairs = [(int(f), u) for f in feats.tolist() for u in units]
  k = len(pairs)
  out = jax.tree.map(lambda l: jnp.zeros((k,) + tuple(l.shape), jnp.float32), params)
  w = np.zeros((k, f_in, h), np.float32)
  for j, (f, u) in enumerate(pairs):
    w[j, f, u] = c
  out["layers"][0]["w"] = jnp.asarray(w)
  return out


def _flat_grads(model, params, x, y, l2_clip_norm):
  """Sum over records of |clipped per-example gradient|, flattened: float64[P]."""
  flat, unravel = jax.flatten_util.ravel_pytree(params)

  def one(xi, yi):
    g = jax.grad(lambda p: models.per_example_loss(model, unravel(p), xi[None],
                                                   yi[None])[0])(flat)
    return jnp.abs(g) * jnp.minimum(1.0, l2_clip_norm / (jnp.linalg.norm(g) + 1e-30))
  total = jax.jit(lambda xs, ys: jax.vmap(one)(xs, ys).sum(axis=0))(x, y)
  return np.asarray(total, np.float64), unravel


@_validate.names_extreme_arguments
def quiet_coordinate_canary(model, params, x_NxF, y_N, l2_clip_norm: float) -> dict:
  """One Dirac canary C e_i, i = argmin_i sum_n |clip(grad loss_n(theta_0))_i| (K = 1).

  With shared weights the records still move e_i: only approximately linear, so its score does
  NOT have exactly the law of `last_iterate.last_iterate_roc`.

  Examples:
    >>> from dpjax import models
    >>> m = models.mlp(2, (2,), 2)
    >>> g = quiet_coordinate_canary(m, m.init(jax.random.key(0)), np.array([[0., 1.]]),
    ...                             np.array([1]), 1.0)
    >>> float(sum(float(abs(l).sum()) for l in jax.tree.leaves(g)))
    1.0
  """
  x, y = _check_data(model, params, x_NxF, y_N)
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  mass, unravel = _flat_grads(model, params, x, y, c)
  e = np.zeros_like(mass, dtype=np.float32)
  e[int(np.argmin(mass))] = c
  return jax.tree.map(lambda l: l[None], unravel(jnp.asarray(e)))


@_validate.names_extreme_arguments
def input_canary(model, params, exclude_features=(), value: float = 1.0) -> tuple[np.ndarray, int]:
  """An out-of-distribution record (x_c float32[F]: `value`, 0 on `exclude_features`) and its label
  argmax_y loss(theta_0; x_c, y) (>= 2 classes).

  Examples:
    >>> from dpjax import models
    >>> m = models.mlp(4, (3,), 3)
    >>> x, y = input_canary(m, m.init(jax.random.key(0)), [0])
    >>> x.tolist(), 0 <= y < 3
    ([0.0, 1.0, 1.0, 1.0], True)
  """
  models.check_params(model, params)
  value = _validate.check_finite(value, "value")
  if model.num_outputs < 2:
    raise ValueError("input_canary needs a multi-class model (num_outputs >= 2)")
  f = _num_features(model, params)
  x = np.full((f,), value, np.float32)
  excl = _validate.check_array(np.asarray(exclude_features, np.int64).reshape(-1),
                               "exclude_features", np.int64, low=0, high=f - 1)
  x[excl] = 0.0
  logits = np.asarray(model.apply(params, jnp.asarray(x)[None]))[0]
  return x, int(np.argmin(logits))          # largest cross-entropy = smallest logit


def _check_data(model, params, x_NxF, y_N):
  """(x float32[N, F], y) as jax arrays, after checking model and params (first)."""
  models.check_params(model, params)
  f = _num_features(model, params)
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, ndim=2, min_size=1)
  if x.shape[1] != f:
    raise ValueError(f"x_NxF must have shape [N, {f}], got {x.shape}")
  y = _validate.check_labels(y_N, "y_N", model.num_outputs, shape=(x.shape[0],))
  return jnp.asarray(x), jnp.asarray(y)


def _num_features(model, params=None) -> int:
  """F, the flattened input size of `model` (from input_shape or the first weights)."""
  if model.input_shape is not None:
    return int(np.prod(model.input_shape))
  ref = jax.eval_shape(model.init, jax.random.key(0)) if params is None else params
  if isinstance(ref, dict) and "layers" in ref:
    return int(ref["layers"][0]["w"].shape[0])
  if isinstance(ref, dict) and "w" in ref and len(ref["w"].shape) == 1:
    return int(ref["w"].shape[0])
  raise ValueError("cannot tell the model's input size (no input_shape, not an MLP or a "
                   "logistic regression)")


@_validate.names_extreme_arguments
def pretrain(model, params, x_NxF, y_N, *, num_steps: int, learning_rate: float):
  """Non-private full-batch gradient descent on PUBLIC data (never the private records).

  num_steps in [1, 10^6] (`_validate.MAX_ITERATIONS`: a longer loop is refused, not run).

  Examples:
    >>> from dpjax import models
    >>> m = models.mlp(2, (4,), 2)
    >>> x = np.array([[1., 0.], [0., 1.]], np.float32); y = np.array([0, 1])
    >>> p = pretrain(m, m.init(jax.random.key(0)), x, y, num_steps=200, learning_rate=0.5)
    >>> np.asarray(m.apply(p, x)).argmax(1).tolist()
    [0, 1]
  """
  x, y = _check_data(model, params, x_NxF, y_N)
  t = _validate.check_iterations(num_steps, "num_steps")   # a scan length
  lr = _validate.check_positive(learning_rate, "learning_rate")
  return _pretrain(model, t)(params, x, y, jnp.float32(lr))


@functools.lru_cache(maxsize=16)
def _pretrain(model, t):
  def loss(p, x, y):
    return jnp.mean(models.per_example_loss(model, p, x, y))

  @jax.jit
  def run(p, x, y, lr):
    def step(p, _):
      g = jax.grad(loss)(p, x, y)
      return jax.tree.map(lambda a, b: a - lr * b, p, g), None
    return jax.lax.scan(step, p, None, length=t)[0]
  return run


@_validate.names_extreme_arguments
def worst_case_init(model, params, feature: int, label: int, *, bias: float = 2.0,
                    gain: float = 10.0, unit: int = 0) -> tuple[dict, tuple[np.ndarray, int]]:
  """Crafted MLP theta_0: a first-layer unit u that only the target x_c = e_feature activates.

  W1[:, u] = 0, W1[feature, u] = 1 + bias, b1[u] = -bias, W1[feature, v] = 0 (v != u),
  W2[u, :] = 0 except W2[u, label] = -gain; the target's gradient then has norm about
  gain sqrt(2) >> C. Returns (theta_0, (x_c float32[F], label)); the rest of params is kept.

  Examples:
    >>> from dpjax import models
    >>> m = models.mlp(3, (2,), 2)
    >>> p, (x, y) = worst_case_init(m, m.init(jax.random.key(0)), 0, 1)
    >>> x.tolist(), y, bool(np.asarray(m.apply(p, x[None]))[0, 1] < -9)
    ([1.0, 0.0, 0.0], 1, True)
  """
  _check_mlp(model, params)
  w1 = np.array(params["layers"][0]["w"], np.float32)
  b1 = np.array(params["layers"][0]["b"], np.float32)
  w2 = np.array(params["layers"][1]["w"], np.float32)
  f_in, h = w1.shape
  feature = _validate.check_int(feature, "feature", minimum=0)
  unit = _validate.check_int(unit, "unit", minimum=0)
  label = _validate.check_int(label, "label", minimum=0)
  if feature >= f_in:
    raise ValueError(f"feature must be < {f_in}, got {feature}")
  if unit >= h:
    raise ValueError(f"unit must be < {h}, got {unit}")
  if label >= w2.shape[1]:
    raise ValueError(f"label must be < {w2.shape[1]}, got {label}")
  bias = _validate.check_positive(bias, "bias")
  gain = _validate.check_positive(gain, "gain")
  w1[:, unit] = 0.0
  w1[feature, :] = 0.0
  w1[feature, unit] = 1.0 + bias
  b1[unit] = -bias
  w2[unit, :] = 0.0
  w2[unit, label] = -gain
  out = jax.tree.map(lambda a: a, params)
  out["layers"] = [dict(l) for l in params["layers"]]
  out["layers"][0] = {"w": jnp.asarray(w1), "b": jnp.asarray(b1)}
  out["layers"][1] = dict(out["layers"][1], w=jnp.asarray(w2))
  x = np.zeros((f_in,), np.float32)
  x[feature] = 1.0
  return out, (x, label)


def audit_inits(key, model, x_priv_NxF, x_pub_NxF, y_pub_N, *, pretrain_steps: int,
                learning_rate: float = 0.5) -> tuple:
  """(average theta_0 = model.init(key), worst-case theta_0, pre-trained theta_0, unused features
  int64[U], target feature or None). Worst case: `pretrain` on the PUBLIC records, then for an MLP
  `worst_case_init` with the first unused feature and its least-logit label.
  """
  models.check_model(model)
  unused = unused_features(x_priv_NxF)
  avg0 = model.init(_validate.check_key(key))
  worst0 = avg0
  if _validate.check_int(pretrain_steps, "pretrain_steps", minimum=0):
    worst0 = pretrain(model, avg0, x_pub_NxF, y_pub_N, num_steps=pretrain_steps,
                      learning_rate=learning_rate)
  pre0, target = worst0, None
  if model.kind == "mlp":
    if unused.size < 2:
      raise ValueError("x_priv_NxF: the MLP's canaries need >= 2 features no private "
                       "record uses")
    target = int(unused[0])
    xt = np.zeros((1, np.shape(x_priv_NxF)[1]), np.float32)
    xt[0, target] = 1.0
    label = int(np.argmin(np.asarray(model.apply(worst0, xt))[0]))
    worst0, _ = worst_case_init(model, worst0, target, label)
  return avg0, worst0, pre0, unused, target


def gradient_direction(model, params, x_c, y_c) -> Any:
  """Unit vector of the record's loss gradient at `params`, K = 1 (ValueError if 0 or not finite).

  Examples:
    >>> from dpjax import models
    >>> m = models.logistic_regression(2)
    >>> d = gradient_direction(m, m.init(jax.random.key(0)), np.array([3., 4.]), 1)
    >>> round(float(sum(float((l ** 2).sum()) for l in jax.tree.leaves(d))), 6)
    1.0
  """
  models.check_params(model, params)            # checks the model first
  x, y = _check_record(model, params, x_c, y_c)
  g = jax.grad(lambda p: models.per_example_loss(model, p, x, y)[0])(params)
  n = float(jnp.sqrt(sum(jnp.sum(l * l) for l in jax.tree.leaves(g))))
  if not n > 0 or not math.isfinite(n):
    raise ValueError(f"the record's gradient norm is {n}: no direction to project on")
  return jax.tree.map(lambda l: (l / n)[None].astype(jnp.float32), g)


# Scores of the final model.


def projections(directions, tree) -> jax.Array:
  """<tree, d_j> for K directions (leaves with a leading axis K): float[K]; no input check.

  Examples:
    >>> projections({"w": jnp.array([[1.0, 0.0], [0.0, 2.0]])}, {"w": jnp.array([3.0, 4.0])}
    ...             ).tolist()
    [3.0, 8.0]
  """
  return sum(jnp.tensordot(d.reshape(d.shape[0], -1), l.reshape(-1), axes=1)
             for d, l in zip(jax.tree.leaves(directions), jax.tree.leaves(tree)))


def projection_score(directions) -> Callable:
  """Score fn(theta_T, theta_0) = -<theta_T - theta_0, d_j>: float[K]; for a Dirac canary under SGD,
  (lr C / B) X with X the statistic of `dpjax.audit.last_iterate`.

  Examples:
    >>> fn = projection_score({"w": jnp.array([[1.0, 0.0], [0.0, 2.0]])})
    >>> fn({"w": jnp.array([-1.0, 1.0])}, {"w": jnp.zeros(2)}).tolist()
    [1.0, -2.0]
  """
  leaves = jax.tree.leaves(directions)
  for l in leaves:
    a = np.asarray(l) if not isinstance(l, jax.Array) else l
    if not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)):
      raise TypeError(f"directions must hold real arrays, got dtype {a.dtype}")
    if not np.all(np.isfinite(np.asarray(a, np.float64))):
      raise ValueError("directions must be finite")
  if not leaves or any(jnp.ndim(l) < 1 for l in leaves):
    raise ValueError("directions must be a pytree whose leaves have a leading axis K")
  k = {int(jnp.shape(l)[0]) for l in leaves}
  if len(k) != 1:
    raise ValueError(f"directions' leaves disagree on K: {sorted(k)}")
  directions = jax.tree.map(lambda l: jnp.asarray(l, jnp.float32), directions)

  def score(final, init):
    return -projections(directions, jax.tree.map(lambda a, b: a - b, final, init))
  return score


def loss_score(model, x_c, y_c) -> Callable:
  """Score fn(theta_T, theta_0) = [-loss(theta_T; x_c, y_c)]: float[1] (training on it lowers it).

  Examples:
    >>> from dpjax import models
    >>> m = models.logistic_regression(1)
    >>> fn = loss_score(m, np.array([1.0]), 1)
    >>> p = m.init(jax.random.key(0))
    >>> round(float(fn(p, p)[0]), 4)                 # -log 2 at zero weights
    -0.6931
  """
  models.check_model(model)
  x, y = _check_record(model, None, x_c, y_c)

  def score(final, init):
    del init
    return -models.per_example_loss(model, final, x, y)
  return score
