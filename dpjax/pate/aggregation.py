"""PATE's learning side (JAX): teachers on disjoint partitions, their vote histograms,
the noisy argmax (LNMax, GNMax, Confident-GNMax) and the students.

Shape letters: M teachers, N private records, Q queries, C classes, F features,
P records per partition, G students.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import fitting
from dpjax import models as models_lib
from dpjax.pate.accounting import check_votes

PyTree = Any


def vote_histogram(teacher_preds_MxQ: jax.typing.ArrayLike, num_classes: int) -> jax.Array:
  """Counts the teachers' votes: int32[Q, C] from predicted labels int[M, Q]."""
  c = _validate.check_int(num_classes, "num_classes", 2)
  preds = _validate.check_array(teacher_preds_MxQ, "teacher_preds_MxQ", np.int32, ndim=2,
                                min_size=1, low=0, high=c - 1, integer=True)
  _validate.check_size(c, "num_classes", units=int(np.prod(np.shape(preds))))
  p = jnp.asarray(preds)
  onehot = jax.nn.one_hot(p, c, dtype=jnp.int32)  # [M, Q, C]
  return onehot.sum(axis=0)


def _votes_jax(votes_QxC) -> jax.Array:
  if not _validate.is_tracer(votes_QxC):
    votes_QxC = check_votes(votes_QxC, "votes_QxC", ndim=2)
  v = jnp.asarray(votes_QxC, jnp.float32)
  if v.ndim != 2 or v.shape[1] < 2:
    raise ValueError(f"votes_QxC must have shape [Q, C] with C >= 2, got {v.shape}")
  return v


def lnmax(key: jax.Array, votes_QxC: jax.typing.ArrayLike, laplace_scale: float) -> jax.Array:
  """LNMax: argmax of the votes plus i.i.d. Laplace(laplace_scale) noise: int32[Q].

  Privacy: (2 / laplace_scale)-DP per query (`lnmax_epsilon`).
  """
  b = _validate.check_positive(laplace_scale, "laplace_scale")
  v = _votes_jax(votes_QxC)
  return jnp.argmax(v + b * jax.random.laplace(key, v.shape), axis=1).astype(jnp.int32)


def gnmax(key: jax.Array, votes_QxC: jax.typing.ArrayLike, sigma: float) -> jax.Array:
  """GNMax: argmax of the votes plus i.i.d. N(0, sigma^2) noise: int32[Q].

  Privacy: (alpha, alpha / sigma^2)-RDP per query (`gnmax_rdp_data_independent`).
  """
  s = _validate.check_positive(sigma, "sigma")
  v = _votes_jax(votes_QxC)
  return jnp.argmax(v + s * jax.random.normal(key, v.shape), axis=1).astype(jnp.int32)


def confident_gnmax(key: jax.Array, votes_QxC: jax.typing.ArrayLike, *, threshold: float,
                    sigma_threshold: float, sigma: float) -> tuple[jax.Array, jax.Array]:
  """Confident-GNMax (Papernot et al. 2018, Alg. 1): answer only confident queries.

  Answered when max_c n_c + N(0, sigma_threshold^2) >= threshold. Returns (labels int32[Q],
  GNMax on every query: use only where answered; answered bool[Q]). Every query pays the
  check, answered ones also GNMax (`pate_rdp`).
  """
  t = _validate.check_finite(threshold, "threshold")
  st = _validate.check_positive(sigma_threshold, "sigma_threshold")
  v = _votes_jax(votes_QxC)
  k_t, k_a = jax.random.split(key)
  answered = v.max(axis=1) + st * jax.random.normal(k_t, (v.shape[0],)) >= t
  return gnmax(k_a, v, sigma), answered




def partition(key: jax.Array, num_records: int, num_teachers: int) -> jax.Array:
  """Random disjoint partition of N records among M teachers, sizes within 1: bool[M, N]."""
  m = _validate.check_size(num_teachers, "num_teachers", bytes_per_unit=1)
  # owner and the bool[M, N] mask, built by XLA in int32 and bool
  n = _validate.check_size(num_records, "num_records", units=m, bytes_per_unit=9,
                           units_name="num_teachers")
  if m > n:
    raise ValueError(f"num_teachers must be <= num_records ({n}), got {m}")
  owner = jnp.arange(n) % m
  owner = jax.random.permutation(key, owner)
  return owner[None, :] == jnp.arange(m)[:, None]


@functools.lru_cache(maxsize=None)
def _adam(learning_rate: float) -> optax.GradientTransformation:
  return optax.adam(learning_rate)   # one object per rate: fitting caches its program on it


def fit_non_private(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                    keep_MxN: jax.typing.ArrayLike, model: models_lib.Model, *,
                    num_steps: int = 300, learning_rate: float = 0.05,
                    pad_to: int | None = None) -> PyTree:
  """Full-batch Adam on M subsets at once (`fitting.train_nonprivate`): params [M, ...].

  NOT private: for PATE teachers (privacy comes from the aggregator) and the student
  (public inputs, private labels). Model i starts from model.init(split(key, M)[i]) and
  sees the records with keep_MxN[i]; pad_to (P >= the largest subset) shares one program.
  learning_rate in (0, 3.4e38] (float32); ValueError naming it if the iterates leave the
  float32 range (NaN or inf parameters are never returned).
  """
  x, y = _check_data(model, x_NxF, y_N)
  keep = _validate.check_binary(keep_MxN, "keep_MxN", shape=(None, x.shape[0]))
  # One epoch of train_nonprivate per step: int32-indexed, 8 bytes each (see there).
  steps = _validate.check_size(_validate.check_int(num_steps, "num_steps", 1, 2**31 - 1),
                               "num_steps", bytes_per_unit=8)
  lr = _validate.check_range(learning_rate, "learning_rate", 0.0, float(np.finfo(np.float32).max),
                             open_low=True)
  params = fitting.train_nonprivate(key, x, y, model, _adam(lr), num_epochs=steps,
                                    keep_MxN=keep, pad_to=pad_to).params
  if not all(bool(jnp.all(jnp.isfinite(l))) for l in jax.tree.leaves(params)):
    raise ValueError(f"learning_rate = {lr:g}: Adam diverged (parameters left the float32 "
                     "range); lower learning_rate")
  return params


@_validate.names_extreme_arguments
def fit_students(key: jax.Array, x_QxF: jax.typing.ArrayLike, labels_GxQ: jax.typing.ArrayLike,
                 answered_GxQ: jax.typing.ArrayLike, model: models_lib.Model, *,
                 num_steps: int = 300, learning_rate: float = 0.05) -> tuple[PyTree, np.ndarray]:
  """G students at once on one public pool: student g fits labels_GxQ[g] on the queries it
  answered (answered_GxQ[g]); returns (params [G, ...], empty_G bool[G]).

  One `fit_non_private` program on the pool tiled G times (student g sees copy g). A student
  with no answered query is fit to one placeholder row and flagged in empty_G.
  """
  models_lib.check_model(model)
  x = _validate.check_array(x_QxF, "x_QxF", np.float32, ndim=(2, 4), min_size=1)
  q = x.shape[0]
  labels = _validate.check_array(labels_GxQ, "labels_GxQ", np.int32, shape=(None, q), min_size=1,
                                 low=0, high=max(model.num_outputs, 2) - 1, integer=True)
  answered = _validate.check_binary(answered_GxQ, "answered_GxQ", shape=labels.shape)
  g = _validate.check_size(labels.shape[0], "labels_GxQ.shape[0]",   # the bool[G, G Q] mask
                           units=labels.shape[0] * q, bytes_per_unit=1)
  keep = np.zeros((g, g * q), bool)
  for i in range(g):
    keep[i, i * q:(i + 1) * q] = answered[i]
  empty = ~keep.any(axis=1)
  keep[empty, np.flatnonzero(empty) * q] = True
  params = fit_non_private(key, jnp.tile(jnp.asarray(x), (g,) + (1,) * (x.ndim - 1)),
                           labels.reshape(-1), keep, model, num_steps=num_steps,
                           learning_rate=learning_rate, pad_to=q)
  return params, empty


@_validate.names_extreme_arguments
def train_teachers(key: jax.Array, x_NxF, y_N, num_teachers: int, model: models_lib.Model,
                   *, num_steps: int = 300, learning_rate: float = 0.05
                   ) -> tuple[PyTree, jax.Array]:
  """Partitions the records and trains one teacher per partition: (params [M, ...], keep_MxN)."""
  x, _ = _check_data(model, x_NxF, y_N)
  k_part, k_fit = jax.random.split(key)
  n = x.shape[0]
  keep = partition(k_part, n, num_teachers)
  params = fit_non_private(k_fit, x_NxF, y_N, keep, model, num_steps=num_steps,
                           learning_rate=learning_rate)
  return params, keep


def teacher_votes(model: models_lib.Model, params_M: PyTree, x_QxF: jax.typing.ArrayLike,
                  num_classes: int) -> jax.Array:
  """Vote histogram int32[Q, C] of M teachers' `models.predict` labels (one output: C = 2)."""
  models_lib.check_model(model)
  x = jnp.asarray(_validate.check_array(x_QxF, "x_QxF", np.float32, ndim=(2, 4), min_size=1))
  c = _validate.check_int(num_classes, "num_classes", 2)
  m = len(jax.tree.leaves(params_M)[0]) if jax.tree.leaves(params_M) else 1
  _validate.check_size(c, "num_classes", units=m * x.shape[0])
  preds = jax.vmap(lambda p: models_lib.predict(model, p, x))(params_M)  # [M, Q]
  return vote_histogram(preds, num_classes)


def _check_data(model, x_NxF, y_N) -> tuple[jax.Array, jax.Array]:
  """(x float32[N, ...], y int32[N]) after checking the model, finiteness and labels."""
  models_lib.check_model(model)
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, ndim=(2, 4), min_size=1)
  y = _validate.check_array(y_N, "y_N", np.int32, shape=(x.shape[0],), low=0,
                            high=max(model.num_outputs, 2) - 1, integer=True)
  return jnp.asarray(x), jnp.asarray(y)
