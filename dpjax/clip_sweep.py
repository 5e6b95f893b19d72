"""A grid of clip norms and learning rates of logistic regression in few DP-SGD programs.

Without an l2 penalty, logits x @ w are unchanged by v = C w on inputs x / C, whose gradient is
g / C: clipping it to 1 and adding N(0, sigma^2) is clipping g to C and adding N(0, (sigma C)^2),
over C, and v -= r (.)/B is w -= (r / C^2) (.)/B. So (C, lr = r / C^2) trains as (1, r) on x / C:
one `dpsgd.train_sweep` per scaled rate r holds every C (copy j of the records is x / C_j, each
model keeps only its copy) and every sigma. Shape letters: M models, N records, F features.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from dpjax import _validate
from dpjax import dpsgd
from dpjax import models as models_lib


def train_clip_sweep(key: jax.Array, x_NxF, y_N, model: models_lib.Model,
                     base: dpsgd.DpSgdConfig, noise_multipliers, l2_clip_norms,
                     scaled_learning_rates, grid_Mx3, *, user_N=None) -> np.ndarray:
  """float64[M, F]: model m, (i, j, k) = grid_Mx3[m], trained as `base` with noise
  multiplier noise_multipliers[i], clip norm C = l2_clip_norms[j], learning rate
  scaled_learning_rates[k] / C^2.

  Rate k is one `train_sweep` keyed fold_in(key, k), its models in grid order; model: a
  `models.logistic_regression` with l2 = 0; user_N: user ids for privacy_unit "user".
  Privacy: model m has the guarantee of `base` with noise_multipliers[i].

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import models
    >>> base = dpsgd.DpSgdConfig(dataset_size=8, sampling_prob=0.5, num_steps=2)
    >>> w = train_clip_sweep(jax.random.key(0), jnp.ones((8, 2)), jnp.ones((8,), int),
    ...                      models.logistic_regression(2), base, [1.0], [0.5, 2.0], [1.0],
    ...                      [[0, 0, 0], [0, 1, 0]])
    >>> w.shape, w.dtype
    ((2, 2), dtype('float64'))
  """
  _validate.check_instance(base, dpsgd.DpSgdConfig, "base")
  if not isinstance(model, models_lib.Model) or model.kind != "logistic_regression" or model.l2:
    raise ValueError("model must be a models.logistic_regression with l2 = 0 (rescaling "
                     f"the inputs is exact only then), got {model!r:.80}")
  sigmas, clips, rates = (_validate.check_array(a, name, ndim=1, low=0.0, open_low=open_low,
                                                min_size=1) for a, name, open_low in (
      (noise_multipliers, "noise_multipliers", False), (l2_clip_norms, "l2_clip_norms", True),
      (scaled_learning_rates, "scaled_learning_rates", True)))
  grid = _validate.check_array(grid_Mx3, "grid_Mx3", np.int64, shape=(None, 3), low=0,
                               integer=True, min_size=3)
  for col, size in enumerate((sigmas.size, clips.size, rates.size)):
    if grid[:, col].max() >= size:
      raise ValueError(f"grid_Mx3[:, {col}] must be < {size}, the length of what it indexes")
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, ndim=2, min_size=1)
  n, clips = x.shape[0], [float(c) for c in clips]
  _validate.check_labels(y_N, "y_N", 2, shape=(n,))
  if user_N is not None:
    _validate.check_array(user_N, "user_N", np.int64, shape=(n,), low=0, integer=True)
  x_all = np.concatenate([x / c for c in clips]).astype(np.float32)
  y_all = np.tile(np.asarray(y_N), len(clips))
  users = None if user_N is None else np.tile(np.asarray(user_N), len(clips))
  out = np.zeros((grid.shape[0], x.shape[1]), np.float64)
  for k, rate in enumerate(rates):
    rows = np.flatnonzero(grid[:, 2] == k)
    if rows.size:
      cfgs = [dataclasses.replace(base, l2_clip_norm=1.0, learning_rate=float(rate),
                                  noise_multiplier=float(s)) for s in sigmas]
      keep = np.arange(n * len(clips))[None, :] // n == grid[rows, 1][:, None]
      res = dpsgd.train_sweep(jax.random.fold_in(key, k), x_all, y_all, keep, cfgs,
                              grid[rows, 0], model, sampler=cfgs[0].sampler(users),
                              perf=dpsgd.PerformanceFlags(progress=False))
      out[rows] = np.asarray(res.params["w"], np.float64) / np.asarray(
          [clips[j] for j in grid[rows, 1]])[:, None]
  return out
