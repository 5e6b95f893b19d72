"""Non-private reference fitters: L2-regularised logistic regression by Newton's method.

Baselines and exact target models; nothing here is private. Both minimise, for
labels y_i in {0, 1} (an intercept column is penalised like any weight),

    L(w) = (1/N) sum_i [log(1 + exp(x_i . w)) - y_i x_i . w] + (l2 / 2) ||w||^2

from w = 0 with p_i = sigmoid(x_i . w):

    g = X^T (p - y) / N + l2 w,   H = X^T diag(p (1 - p)) X / N + l2 I,   w <- w - H^{-1} g.

Shape letters: N records, D features, M models.

Examples:
  >>> import numpy as np
  >>> x = np.array([[1.0, -1.0], [1.0, 0.5], [1.0, 1.0], [1.0, -0.5]])
  >>> y = np.array([0, 1, 1, 1])
  >>> w = fit_logistic(x, y, l2=0.1)
  >>> bool(np.abs(x.T @ (1 / (1 + np.exp(-x @ w)) - y) / 4 + 0.1 * w).max() < 1e-12)
  True
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate


def _check_data(x_NxD, y_N) -> tuple[np.ndarray, np.ndarray]:
  """Features float64[N, D] (finite) and labels bool[N]."""
  x = _validate.check_array(x_NxD, "x_NxD", ndim=2, min_size=1)
  y = _validate.check_binary(y_N, "y_N", shape=(x.shape[0],))
  return x, y


def fit_logistic(x_NxD: np.typing.ArrayLike, y_N: np.typing.ArrayLike, *, l2: float = 1e-4,
                 num_iters: int = 50, tol: Optional[float] = None) -> np.ndarray:
  """Regularised logistic regression w float64[D] by Newton's method, on the host.

  At most num_iters steps; with tol (> 0), stop after the first step whose largest
  |coordinate| < tol.

  Examples:
    >>> # Intercept only, no ridge: w = logit(mean of y) = log(3).
    >>> w = fit_logistic(np.ones((4, 1)), [1, 1, 1, 0], l2=0.0, tol=1e-12)
    >>> round(float(w[0]), 6), round(float(np.log(3.0)), 6)
    (1.098612, 1.098612)
  """
  x, y = _check_data(x_NxD, y_N)
  y = y.astype(np.float64)
  l2 = _validate.check_nonnegative(l2, "l2")
  num_iters = _validate.check_int(num_iters, "num_iters")
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


def fit_logistic_many(x_NxD: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                      keep_MxN: jax.typing.ArrayLike, *, l2: float, num_iters: int = 40,
                      max_step_norm: Optional[float] = None) -> jax.Array:
  """M regularised logistic regressions w float32[M, D], model m on keep_MxN[m]'s records.

  Every model takes `num_iters` Newton steps (float32, vmapped); each row of keep_MxN
  keeps a record; with max_step_norm (> 0), longer steps are scaled to that L2 norm.

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
  num_iters = _validate.check_int(num_iters, "num_iters")
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
