"""Non-private reference fits: the one gradient trainer; Newton for logistic regression.

For baselines, PATE teachers and students, public pre-training and exact target models;
nothing here is private. `train_nonprivate` trains M models of any `models.Model` with
an optax optimizer. The Newton fitters minimise, for y_i in {0, 1} (intercept penalised),

    L(w) = (1/N) sum_i [log(1 + exp(x_i . w)) - y_i x_i . w] + (l2 / 2) ||w||^2

from w = 0, p_i = sigmoid(x_i . w):
g = X^T (p - y) / N + l2 w,  H = X^T diag(p (1 - p)) X / N + l2 I,  w <- w - H^{-1} g.

Shape letters: N records, D features (F for any model's input), M models, P records
per model (padded), E epochs.

Examples:
  >>> import numpy as np
  >>> x = np.array([[1.0, -1.0], [1.0, 0.5], [1.0, 1.0], [1.0, -0.5]])
  >>> y = np.array([0, 1, 1, 1])
  >>> w = fit_logistic(x, y, l2=0.1)
  >>> bool(np.abs(x.T @ (1 / (1 + np.exp(-x @ w)) - y) / 4 + 0.1 * w).max() < 1e-12)
  True
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import models as models_lib

PyTree = Any


def _check_data(x_NxD, y_N) -> tuple[np.ndarray, np.ndarray]:
  """Features float64[N, D] (finite) and labels bool[N]."""
  x = _validate.check_array(x_NxD, "x_NxD", ndim=2, min_size=1)
  y = _validate.check_binary(y_N, "y_N", shape=(x.shape[0],))
  return x, y


def fit_logistic(x_NxD: np.typing.ArrayLike, y_N: np.typing.ArrayLike, *, l2: float = 1e-4,
                 num_iters: int = 50, tol: Optional[float] = None) -> np.ndarray:
  """Regularised logistic regression w float64[D] by Newton's method, on the host.

  At most num_iters <= 10^6 steps (`_validate.MAX_ITERATIONS`); with tol > 0, stop after
  the first step with max |step| < tol.

  Examples:
    >>> # Intercept only, no ridge: w = logit(mean of y) = log(3).
    >>> w = fit_logistic(np.ones((4, 1)), [1, 1, 1, 0], l2=0.0, tol=1e-12)
    >>> round(float(w[0]), 6), round(float(np.log(3.0)), 6)
    (1.098612, 1.098612)
  """
  x, y = _check_data(x_NxD, y_N)
  y = y.astype(np.float64)
  l2 = _validate.check_nonnegative(l2, "l2")
  num_iters = _validate.check_iterations(num_iters, "num_iters")
  if tol is not None:
    tol = _validate.check_positive(tol, "tol")
  n, d = x.shape
  w = np.zeros(d)
  for _ in range(num_iters):
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    grad = x.T @ (p - y) / n + l2 * w
    hess = (x.T * (p * (1 - p))) @ x / n + l2 * np.eye(d)
    step = np.linalg.solve(hess, grad)
    w = w - step
    if tol is not None and np.max(np.abs(step)) < tol:
      break
  return w


@_validate.names_extreme_arguments
def fit_logistic_many(x_NxD: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                      keep_MxN: jax.typing.ArrayLike, *, l2: float, num_iters: int = 40,
                      max_step_norm: Optional[float] = None) -> jax.Array:
  """M logistic regressions w float32[M, D], model m on keep_MxN[m]'s records.

  `num_iters` (at most 10^6) Newton steps each (float32, vmapped); steps longer than max_step_norm (if
  given) are scaled to it.

  Examples:
    >>> x = jnp.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    >>> keep = jnp.array([[True, True, True, True], [True, True, False, True]])
    >>> w = fit_logistic_many(x, jnp.array([0, 1, 0, 1]), keep, l2=1.0)
    >>> w.shape
    (2, 2)
    >>> np.allclose(w[0], fit_logistic(x, [0, 1, 0, 1], l2=1.0), atol=1e-5)
    True
  """
  _check_data(x_NxD, y_N)
  keep = _validate.check_binary(keep_MxN, "keep_MxN", ndim=2)
  if (keep.shape[0] < 1 or keep.shape[1] != np.shape(x_NxD)[0]
      or not np.all(keep.any(axis=1))):
    raise ValueError(f"keep_MxN must have shape [M, {np.shape(x_NxD)[0]}] with at least one "
                     f"True per row, got shape {keep.shape}")
  l2 = _validate.check_nonnegative(l2, "l2")
  num_iters = _validate.check_iterations(num_iters, "num_iters")
  if max_step_norm is not None:
    max_step_norm = _validate.check_positive(max_step_norm, "max_step_norm")
  x = jnp.asarray(x_NxD, jnp.float32)
  yf = jnp.asarray(y_N).astype(jnp.float32)
  d = x.shape[1]

  def fit(keep_N):
    kf = keep_N.astype(jnp.float32)
    n = jnp.sum(kf)

    def body(w, _):
      p = jax.nn.sigmoid(x @ w)
      g = x.T @ (kf * (p - yf)) / n + l2 * w
      h = (x * (kf * p * (1 - p))[:, None]).T @ x / n + l2 * jnp.eye(d)
      step = jnp.linalg.solve(h, g)
      if max_step_norm is not None:
        nrm = jnp.linalg.norm(step)
        step = step * jnp.minimum(1.0, max_step_norm / jnp.maximum(nrm, 1e-12))
      return w - step, None

    w, _ = jax.lax.scan(body, jnp.zeros((d,), jnp.float32), None, length=num_iters)
    return w

  return jax.jit(jax.vmap(fit))(jnp.asarray(keep_MxN))


class NonPrivateResult(NamedTuple):
  """Output of `train_nonprivate`: params (leaves [M, ...], at the best validation epoch or
  the last), val_accuracy_ME float32[M, E] and best_epoch_M int32[M] (None without
  validation data).
  """
  params: PyTree
  val_accuracy_ME: Optional[jax.Array]
  best_epoch_M: Optional[jax.Array]


def train_nonprivate(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                     model: models_lib.Model, optimizer: optax.GradientTransformation, *,
                     num_epochs: int, batch_size: Optional[int] = None,
                     keep_MxN: Optional[jax.typing.ArrayLike] = None, num_models: int = 1,
                     init_params: Optional[PyTree] = None, pad_to: Optional[int] = None,
                     x_val_NxF: Optional[jax.typing.ArrayLike] = None,
                     y_val_N: Optional[jax.typing.ArrayLike] = None) -> NonPrivateResult:
  """Ordinary (non-private) training of M models at once: vmap over models, scan over steps.

  Model m sees the records with keep_MxN[m] (default all, M = num_models), padded to P =
  pad_to (default the largest subset; equal P shares one program) with weight-0 slots, and
  minimises sum_b w_b l_b / max(sum_b w_b, 1) of `models.per_example_loss`. An epoch is one
  full-batch step (batch_size None) or floor(P / batch_size) minibatches of a fresh order.
  Keys: k_m = split(key, M)[m] is k_init in full batch, else (k_init, k_order) = split(k_m);
  init from model.init(k_init) or init_params[m]; epoch e's order permutation(fold_in(
  k_order, e), P). With validation data (PUBLIC or held out) the first best epoch is kept.
  Pass the same optimizer object to reuse the compiled program.

  Examples:
    >>> x = jax.random.normal(jax.random.key(0), (40, 2))
    >>> y = (x[:, 0] > 0).astype(jnp.int32)
    >>> out = train_nonprivate(jax.random.key(1), x, y, models_lib.logistic_regression(2),
    ...                        optax.sgd(1.0), num_epochs=3, batch_size=10, x_val_NxF=x,
    ...                        y_val_N=y)
    >>> out.val_accuracy_ME.shape, bool(out.val_accuracy_ME.max() > 0.9)
    ((1, 3), True)
  """
  models_lib.check_model(model)
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32, ndim=(2, 4), min_size=1))
  n = x.shape[0]
  y = jnp.asarray(_validate.check_labels(y_N, "y_N", model.num_outputs, shape=(n,)))
  if not isinstance(optimizer, optax.GradientTransformation):
    raise TypeError(f"optimizer must be an optax.GradientTransformation, got {optimizer!r:.80}")
  # Epochs are indexed by int32 (jnp.arange, fold_in); the index and the validation curve
  # take 8 bytes per epoch, refused here when they cannot fit.
  e = _validate.check_size(_validate.check_int(num_epochs, "num_epochs", 1, 2**31 - 1),
                           "num_epochs", bytes_per_unit=8)
  if keep_MxN is None:
    keep = np.ones((_validate.check_size(num_models, "num_models", units=n, bytes_per_unit=9), n),
                   bool)   # the mask, then int32 indices and float32 weights per slot
  else:
    keep = _validate.check_binary(keep_MxN, "keep_MxN", shape=(None, n))
    if keep.shape[0] < 1 or not np.all(keep.any(axis=1)):
      raise ValueError(f"keep_MxN must have at least one row, each selecting a record, got "
                       f"shape {keep.shape}")
  sizes = keep.sum(axis=1)
  p = int(sizes.max())
  if pad_to is not None:
    if _validate.check_int(pad_to, "pad_to") < p:
      raise ValueError(f"pad_to must be >= the largest subset ({p}), got {pad_to}")
    # Per model: indices and weights (8 bytes) and the gathered records per slot.
    _validate.check_size(pad_to, "pad_to", units=keep.shape[0], units_name="num_models",
                         bytes_per_unit=8 + 4 * int(np.prod(x.shape[1:])))
    p = int(pad_to)
  b = None
  if batch_size is not None:
    b = _validate.check_int(batch_size, "batch_size")
    if b > p:
      raise ValueError(f"batch_size must be in [1, P = {p}], got {b}")
  val = None
  if (x_val_NxF is None) != (y_val_N is None):
    raise ValueError("give both x_val_NxF and y_val_N, or neither")
  if x_val_NxF is not None:
    xv = jnp.asarray(_validate.check_array(x_val_NxF, "x_val_NxF", np.float32, ndim=x.ndim,
                                           min_size=1))
    if xv.shape[1:] != x.shape[1:]:
      raise ValueError(f"x_val_NxF rows must have the shape of x_NxF's {x.shape[1:]}, got "
                       f"{xv.shape[1:]}")
    val = (xv, jnp.asarray(_validate.check_labels(y_val_N, "y_val_N", model.num_outputs,
                                                  shape=(xv.shape[0],))))
  idx, w = _padded_indices(keep, p)
  keys = jax.random.split(key, keep.shape[0])
  program = _program(model, optimizer, b, e, init_params is not None, val is not None)
  params, curve, best = program(keys, init_params, x, y, idx, w, val)
  return NonPrivateResult(params, curve, best)


def _padded_indices(keep_MxN: np.ndarray, p: int) -> tuple[jax.Array, jax.Array]:
  """Each model's record indices int32[M, P] and weights float32[M, P] (0 on padding)."""
  idx = np.zeros((keep_MxN.shape[0], p), np.int32)
  w = np.zeros(idx.shape, np.float32)
  for i, row in enumerate(keep_MxN):
    members = np.flatnonzero(row)
    idx[i, : members.size] = members
    w[i, : members.size] = 1.0
  return jnp.asarray(idx), jnp.asarray(w)


@functools.lru_cache(maxsize=32)
def _program(model, optimizer, batch_size, num_epochs, has_init, has_val):
  def one(key, init, x, y, idx_P, w_P, val):
    # A key is split only when it has two uses (the init and the minibatch order).
    k_init, k_order = (key, None) if batch_size is None else jax.random.split(key)
    params = init if has_init else model.init(k_init)
    p = idx_P.shape[0]
    x_P, y_P = x[idx_P], y[idx_P]

    def loss(q, slots):
      xb, yb, wb = (x_P, y_P, w_P) if slots is None else (x_P[slots], y_P[slots], w_P[slots])
      l = models_lib.per_example_loss(model, q, xb, yb)
      return jnp.sum(wb * l) / jnp.maximum(jnp.sum(wb), 1.0)

    def step(carry, slots):
      q, s = carry
      upd, s = optimizer.update(jax.grad(loss)(q, slots), s, q)
      return (optax.apply_updates(q, upd), s), None

    def epoch(carry, ep):
      params, opt_state, best_params, best_acc, best_ep = carry
      if batch_size is None:
        (params, opt_state), _ = step((params, opt_state), None)
      else:
        order = jax.random.permutation(jax.random.fold_in(k_order, ep), p)
        batches = order[: (p // batch_size) * batch_size].reshape(-1, batch_size)
        (params, opt_state), _ = jax.lax.scan(step, (params, opt_state), batches)
      if not has_val:
        return (params, opt_state, best_params, best_acc, best_ep), None
      acc = jnp.mean((models_lib.predict(model, params, val[0]) == val[1].astype(jnp.int32)
                      ).astype(jnp.float32))
      better = acc > best_acc
      best_params = jax.tree.map(lambda new, old: jnp.where(better, new, old), params, best_params)
      return (params, opt_state, best_params, jnp.where(better, acc, best_acc),
              jnp.where(better, ep, best_ep)), acc

    carry0 = (params, optimizer.init(params), params, jnp.float32(-1.0), jnp.int32(-1))
    (last, _, best_params, _, best_ep), curve = jax.lax.scan(
        epoch, carry0, jnp.arange(num_epochs, dtype=jnp.int32))
    return (best_params, curve, best_ep) if has_val else (last, None, None)

  return jax.jit(jax.vmap(one, in_axes=(0, 0 if has_init else None, None, None, 0, 0, None)))
