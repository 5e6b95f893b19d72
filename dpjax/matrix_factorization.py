"""Correlated noise by matrix factorization: strategies, their noise, sensitivity, error.

A strategy is a lower-triangular T x T matrix C with a positive diagonal. The mechanism
adds, to the clipped gradient sum x_t of step t, the correlated noise

    w_t = sigma * l2_clip_norm * (C^-1 Z)_t,      Z in R^{T x P} i.i.d. N(0, 1),

which is post-processing of the Gaussian mechanism C x + sigma * l2_clip_norm * Z: its
privacy is that of a Gaussian mechanism with noise multiplier sigma / sens(C), where
sens(C) is the L2 sensitivity of x -> C x for one record's clipped gradients (norm <= 1)
under its participation pattern (`sensitivity`). Because C is lower triangular, the
equivalence holds for adaptively chosen gradients (Denisov et al. 2022). Strategies:

* `banded_toeplitz(coefs, T)`: C[i, j] = coefs[i - j] for 0 <= i - j < b; b = 1 with
  coefs = (1,) is DP-SGD's independent noise (Choquette-Choo et al. 2023; McKenna 2024).
* `tree_aggregation(T)`: the binary tree over T steps with the online (bottom-up)
  Honaker estimator (Kairouz et al. 2021); C is the lower-triangular matrix with
  C^-1 C^-T = the covariance of the gradient-space noise the tree adds, so sens(C) is the
  exact sensitivity of what training sees (at most that of the tree of node sums).
* any lower-triangular C (`check_strategy`).

Each has a stream (`toeplitz_stream`, `tree_stream`, `matrix_stream`): pure functions
`init(shape) -> state` and `next(state, key, t) -> (noise_t, state)` that run inside
`lax.scan` and `vmap` and keep only what they need (the last b - 1 outputs of a banded
Toeplitz strategy; one refined node value per tree level; all past outputs for a general
C). `key` is step t's key (the caller derives it, e.g. `prng.fold_in(key, t)`); noise
is in units of sigma * l2_clip_norm.

    stream = toeplitz_stream([1.0, 0.5, 0.25])
    state = stream.init((P,))
    noise_t, state = stream.next(state, prng.fold_in(key, t), t)

Shapes: T steps, b bands, L tree levels, P the shape of one noise draw.
References: Denisov, McMahan, Rush, Smith, Thakurta 2022 (arXiv 2202.08312); Choquette-Choo
et al. 2023 (arXiv 2306.08153); McKenna 2024 (arXiv 2405.15913); Kairouz et al. 2021
(arXiv 2103.00039); Honaker 2015.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import prng

# The most participation patterns `sensitivity` enumerates exactly.
MAX_PATTERNS = 2_000_000
# The largest T the dense helpers build a T x T matrix for.
MAX_DENSE_STEPS = 4096
# Leaves of at least this many entries combine a Toeplitz stream's past draws by a dot.
_DOT_MIN_SIZE = 4096


# ----------------------------------------------------------------------------------
# strategies


def _check_steps(num_steps, name: str = "num_steps") -> int:
  return _validate.check_int(num_steps, name, 1, MAX_DENSE_STEPS)


def _check_coefs(coefs, name: str = "coefs") -> np.ndarray:
  c = _validate.check_array(coefs, name, ndim=1, min_size=1)
  if c[0] <= 0:
    raise ValueError(f"{name}[0] must be > 0 (C must be invertible), got {c[0]!r}")
  return c


def check_strategy(strategy_TxT: Any, name: str = "strategy_TxT") -> np.ndarray:
  """strategy_TxT as float64[T, T] if it is square, finite, lower triangular, with a
  positive diagonal (so C^-1 exists and the stream is causal); ValueError otherwise."""
  c = _validate.check_array(strategy_TxT, name, ndim=2, min_size=1)
  if c.shape[0] != c.shape[1]:
    raise ValueError(f"{name} must be square, got shape {c.shape}")
  _check_steps(c.shape[0], f"{name}.shape[0]")
  if np.any(np.triu(c, 1) != 0):
    raise ValueError(f"{name} must be lower triangular (the noise of step t may depend "
                     "only on draws up to t)")
  if np.any(np.diag(c) <= 0):
    raise ValueError(f"{name} must have a positive diagonal, got minimum {np.diag(c).min():g}")
  return c


def banded_toeplitz(coefs: Any, num_steps: int) -> np.ndarray:
  """float64[T, T] with C[i, j] = coefs[i - j] for 0 <= i - j < b (b = len(coefs), coefs[0]
  > 0; bands beyond T are dropped)."""
  c = _check_coefs(coefs)
  t = _check_steps(num_steps)
  i, j = np.indices((t, t))
  d = i - j
  return np.where((d >= 0) & (d < c.size), c[np.clip(d, 0, c.size - 1)], 0.0)


def _tree_levels(num_steps: int) -> int:
  """L: levels 0 (leaves) .. L - 1, with 2^(L - 1) >= T."""
  return max(1, math.ceil(math.log2(num_steps)) + 1) if num_steps > 1 else 1


def _honaker_variances(levels: int, honaker: bool) -> np.ndarray:
  """v_l: the variance of a refined node value at level l (unit-variance node draws)."""
  v = np.ones(levels)
  if honaker:
    for l in range(1, levels):
      v[l] = 1.0 / (1.0 + 1.0 / (2.0 * v[l - 1]))
  return v


def tree_noise_weights(num_steps: int, honaker: bool = True) -> np.ndarray:
  """float64[T, T, L]: the gradient-space tree noise is w_t = sum_{s, l} W[t, s, l] Y[s, l].

  Y[s, l] is the unit-variance draw of the level-l node that ends at step s (unused where
  none does). With the online Honaker estimator a level-l node's refined value is
  v_l sum_{m <= l} 2^(m - l) (sum of the draws of its level-m descendants), v_l from
  v_0 = 1, v_l = 1 / (1 + 1 / (2 v_{l-1})); without it, its own draw. The prefix noise
  n_s sums the refined values of the dyadic nodes of [0, s], and w_t = n_t - n_{t-1}.
  """
  t = _check_steps(num_steps)
  honaker = _validate.check_bool(honaker, "honaker")
  levels = _tree_levels(t)
  v = _honaker_variances(levels, honaker)
  prefix = np.zeros((t, t, levels))
  for s in range(1, t + 1):            # prefix [1, s] (1-indexed)
    start = 0
    for l in reversed(range(levels)):
      if not (s >> l) & 1:
        continue
      lo, hi = start, start + 2 ** l   # node covers leaves lo .. hi - 1 (0-indexed)
      for m in (range(l + 1) if honaker else (l,)):
        weight = v[l] * 2.0 ** (m - l) if honaker else 1.0
        for end in range(lo + 2 ** m - 1, hi, 2 ** m):
          prefix[s - 1, end, m] += weight
      start = hi
  out = prefix.copy()
  out[1:] -= prefix[:-1]
  return out


def tree_aggregation(num_steps: int, honaker: bool = True) -> np.ndarray:
  """float64[T, T]: the lower-triangular C with C^-1 C^-T = Cov(tree noise) (unit draws).

  C = chol(K)^-1, K = W W^T from `tree_noise_weights`. The tree's noise w and C^-1 Z have
  the same distribution, so x + w has exactly the privacy of C x + Z.
  """
  w = tree_noise_weights(num_steps, honaker)
  wf = w.reshape(w.shape[0], -1)
  chol = np.linalg.cholesky(wf @ wf.T)
  return np.tril(np.linalg.solve(chol, np.eye(chol.shape[0])))


# ----------------------------------------------------------------------------------
# streams


class NoiseStream(NamedTuple):
  """A strategy's noise, one step at a time (pure; usable in lax.scan and vmap).

  init(shape) -> state; next(state, key, t) -> (noise_t float32[shape], state), where key
  is step t's key and t (0-indexed, may be traced) counts calls since init; a tree or
  general stream returns NaN for t >= T (never silently wrong noise). strategy: the
  float64[T, T] C whose C^-1 Z the stream draws in distribution; for Toeplitz and general
  C exactly (row t of C^-1 Z, Z[t] = prng.standard_normal(key_t, shape)). from_draw:
  None, or from_draw(state, z, t) -> (noise_t, state) with next(state, key, t) ==
  from_draw(state, prng.standard_normal(key, shape), t), so a caller can draw the z of
  many leaves at once (`prng.standard_normals`).
  """
  init: Callable
  next: Callable
  strategy: np.ndarray
  from_draw: Callable | None = None


def toeplitz_stream(coefs: Any, num_steps: int) -> NoiseStream:
  """The banded Toeplitz strategy's noise: c_0 w_t = z_t - sum_{j=1}^{b-1} c_j w_{t-j}.

  State: the last b - 1 outputs as a ring (float32[b - 1, *shape]; w_s in slot s mod
  (b - 1), written in place, so a step reads the ring once and writes one slot). With
  coefs = (1,), w_t is the plain draw `prng.standard_normal(key_t, shape)`.
  """
  c = _check_coefs(coefs)
  strategy = banded_toeplitz(c, num_steps)
  c32 = jnp.asarray(c, jnp.float32)
  b = c.size

  def init(shape):
    shape = _validate.check_sizes(shape, "shape", minimum=0)
    return jnp.zeros((b - 1,) + shape, jnp.float32)

  def from_draw(state, z, t):
    if b == 1:
      return (z if c[0] == 1 else z / c32[0]), state
    t = jnp.asarray(t, jnp.int32)
    slot = jnp.arange(b - 1, dtype=jnp.int32)              # slot r holds w_{t-j}, j below
    j = (t - slot - 1) % (b - 1) + 1
    if math.prod(state.shape[1:]) >= _DOT_MIN_SIZE:     # XLA:CPU: a matvec for large
      past = jnp.tensordot(c32[j], state, axes=1)        # leaves, a fused sum for small
    else:                                                # ones (many models under vmap)
      past = jnp.sum(c32[j].reshape((b - 1,) + (1,) * (state.ndim - 1)) * state, axis=0)
    w = (z - past) / c32[0]
    return w, jax.lax.dynamic_update_index_in_dim(state, w, t % (b - 1), 0)

  def next_fn(state, key, t):
    return from_draw(state, prng.standard_normal(key, state.shape[1:]), t)

  return NoiseStream(init, next_fn, strategy, from_draw)


def matrix_stream(strategy_TxT: Any) -> NoiseStream:
  """Any lower-triangular C: w_t = (z_t - sum_{s<t} C[t, s] w_s) / C[t, t].

  State: (all past outputs float32[T, *shape]); row t of C^-1 Z exactly.
  """
  c = check_strategy(strategy_TxT)
  c32 = jnp.asarray(c, jnp.float32)
  t_max = c.shape[0]

  def init(shape):
    shape = _validate.check_sizes(shape, "shape", minimum=0)
    return jnp.zeros((t_max,) + shape, jnp.float32)

  def from_draw(state, z, t):
    row = jnp.where(jnp.arange(t_max) < t, c32[t], 0.0)
    w = (z - jnp.tensordot(row, state, axes=1)) / c32[t, t]
    return jnp.where(t < t_max, w, jnp.nan), state.at[t].set(w)

  def next_fn(state, key, t):
    return from_draw(state, prng.standard_normal(key, state.shape[1:]), t)

  return NoiseStream(init, next_fn, c, from_draw)


def tree_stream(num_steps: int, honaker: bool = True) -> NoiseStream:
  """Tree aggregation's noise, the difference of consecutive prefix-noise estimates.

  Step t draws Y[t] = prng.standard_normal(key_t, (L, *shape)); Y[t, l] is the draw of
  the level-l node ending at step t, if any (t + 1 divisible by 2^l). State: the latest
  refined value per level (float32[L, *shape]) and the last prefix noise. Equals
  `tree_noise_weights` applied to the same Y.
  """
  t_max = _check_steps(num_steps)
  honaker = _validate.check_bool(honaker, "honaker")
  levels = _tree_levels(t_max)
  v = _honaker_variances(levels, honaker)
  strategy = tree_aggregation(t_max, honaker)

  def init(shape):
    shape = _validate.check_sizes(shape, "shape", minimum=0)
    return (jnp.zeros((levels,) + shape, jnp.float32), jnp.zeros(shape, jnp.float32))

  def next_fn(state, key, t):
    stored, prev = state
    y = prng.standard_normal(key, (levels,) + stored.shape[1:])
    s = jnp.asarray(t, jnp.int32) + 1
    values = [y[0]]
    for l in range(1, levels):
      if honaker:
        val = float(v[l]) * (y[l] + (stored[l - 1] + values[l - 1]) / float(2 * v[l - 1]))
      else:
        val = y[l]
      values.append(jnp.where(s % (2 ** l) == 0, val, stored[l]))
    new = jnp.stack(values)
    bits = ((s >> jnp.arange(levels)) & 1).astype(jnp.float32)
    prefix = jnp.tensordot(bits, new, axes=1)
    return jnp.where(s <= t_max, prefix - prev, jnp.nan), (new, prefix)

  return NoiseStream(init, next_fn, strategy)


def stream_noise(stream: NoiseStream, key: jax.Array, num_steps: int, shape: Any
                 ) -> jax.Array:
  """float32[T, *shape]: the stream's noise for steps 0 .. T-1, step t keyed by
  `prng.fold_in(key, t)` (a lax.scan; vmap over keys for many models)."""
  _validate.check_instance(stream, NoiseStream, "stream")
  _validate.check_key(key)
  t = _validate.check_int(num_steps, "num_steps", 1, stream.strategy.shape[0])

  def body(state, i):
    w, state = stream.next(state, prng.fold_in(key, i), i)
    return state, w

  return jax.lax.scan(body, stream.init(shape), jnp.arange(t))[1]


# ----------------------------------------------------------------------------------
# sensitivity


def _patterns(num_steps: int, k: int, sep: int):
  """Every set of 1..k steps in [0, T) with consecutive steps >= sep apart, as tuples."""
  stack = [((), 0)]
  while stack:
    cur, start = stack.pop()
    if cur:
      yield cur
    if len(cur) < k:
      for i in range(start, num_steps):
        stack.append((cur + (i,), i + sep))


def _count_patterns(num_steps: int, k: int, sep: int) -> int:
  """The number of non-empty patterns `_patterns` yields (dynamic programme)."""
  # ways[j][i]: patterns of size j whose last step is i.
  ways = np.zeros((k + 1, num_steps), dtype=object)
  ways[1, :] = 1
  for j in range(2, k + 1):
    csum = np.cumsum(ways[j - 1])
    for i in range(sep, num_steps):
      ways[j, i] = csum[i - sep]
  return int(ways[1:].sum())


def _check_participation(num_steps, num_participations, min_separation):
  k = _validate.check_int(num_participations, "num_participations", 1, num_steps)
  sep = _validate.check_int(min_separation, "min_separation", 1, num_steps)
  return k, sep


def sensitivity(strategy_TxT: Any, num_participations: int = 1, min_separation: int = 1
                ) -> float:
  """max over participation patterns of the L2 sensitivity of x -> C x (clip norm 1).

  A pattern is a set of at most k = num_participations steps, consecutive ones at least
  min_separation apart (k = 1: a single epoch, one step anywhere). For a pattern pi it is
  sup ||sum_{i in pi} C[:, i] g_i^T||_F over ||g_i|| <= 1, bounded by
  sqrt(sum_{i, j in pi} |X_ij|), X = C^T C, with equality when X >= 0 on pi (all g_i
  equal); k = 1 is exact for any C. Enumerates every pattern (at most MAX_PATTERNS,
  ValueError beyond; `toeplitz_sensitivity` has the closed form).
  """
  c = check_strategy(strategy_TxT)
  t = c.shape[0]
  k, sep = _check_participation(t, num_participations, min_separation)
  x = np.abs(c.T @ c)
  if k == 1:
    return float(np.sqrt(np.max(np.diag(x))))
  count = _count_patterns(t, k, sep)
  if count > MAX_PATTERNS:
    raise ValueError(f"num_participations={k}, min_separation={sep} at T={t} give {count} "
                     f"patterns, more than {MAX_PATTERNS} (use toeplitz_sensitivity for a "
                     "banded Toeplitz strategy)")
  best = 0.0
  for p in _patterns(t, k, sep):
    idx = list(p)
    best = max(best, float(x[np.ix_(idx, idx)].sum()))
  return math.sqrt(best)


def cyclic_sensitivity(strategy_TxT: Any, steps_per_epoch: int) -> float:
  """max over j in [0, E) of the sensitivity of x -> C x for a record at steps j, j + E, ...

  The participation of `sampling.CyclicSampler` (fixed batches in a fixed cycle of E
  steps): sqrt(sum_{a, b in pi_j} |X_ab|), X = C^T C, pi_j = {j, j + E, ...} < T; exact
  when X >= 0 on pi_j (for a banded Toeplitz C with coefs >= 0 and for the tree), an
  upper bound otherwise, and never above `sensitivity(C, ceil(T / E), E)`, whose
  patterns include these.
  """
  c = check_strategy(strategy_TxT)
  t = c.shape[0]
  e = min(_validate.check_int(steps_per_epoch, "steps_per_epoch"), t)   # E >= T: one step each
  x = np.abs(c.T @ c)
  best = 0.0
  for j in range(min(e, t)):
    idx = np.arange(j, t, e)
    best = max(best, float(x[np.ix_(idx, idx)].sum()))
  return math.sqrt(best)


def toeplitz_sensitivity(coefs: Any, num_steps: int, num_participations: int = 1,
                         min_separation: int = 1) -> float:
  """Closed-form sensitivity of `banded_toeplitz(coefs, T)` for coefs >= 0, non-increasing.

  The worst pattern participates at steps 0, sep, 2 sep, ... (min(k, floor((T - 1) / sep)
  + 1) times): sens = ||C u||, u its indicator (McKenna 2024; checked against
  `sensitivity`'s enumeration). When b <= sep the columns do not overlap and sens =
  sqrt(k) ||coefs|| while (k - 1) sep + b <= T. ValueError for other coefficients.
  """
  c = _check_coefs(coefs)
  if np.any(c < 0) or np.any(np.diff(c) > 0):
    raise ValueError("coefs must be >= 0 and non-increasing for the closed form "
                     f"(use sensitivity(banded_toeplitz(coefs, T), ...)), got {c}")
  t = _check_steps(num_steps)
  k, sep = _check_participation(t, num_participations, min_separation)
  k = min(k, (t - 1) // sep + 1)
  u = np.zeros(t)
  u[np.arange(k) * sep] = 1.0
  return float(np.linalg.norm(banded_toeplitz(c, t) @ u))


# ----------------------------------------------------------------------------------
# error and accounting


def prefix_workload(num_steps: int) -> np.ndarray:
  """float64[T, T] lower-triangular ones: row t sums gradients 0 .. t (SGD's iterates)."""
  return np.tril(np.ones((_check_steps(num_steps),) * 2))


def momentum_workload(num_steps: int, momentum: float,
                      learning_rates: Any = None) -> np.ndarray:
  """float64[T, T]: W[t, r] = sum_{s=r}^{t} eta_s beta^(s - r), the map from gradients to
  the iterates of SGD with momentum beta in [0, 1) and step sizes eta (default 1)."""
  t = _check_steps(num_steps)
  beta = _validate.check_probability(momentum, "momentum", open_high=True)
  eta = (np.ones(t) if learning_rates is None else
         _validate.check_array(learning_rates, "learning_rates", shape=(t,), low=0.0))
  s, r = np.indices((t, t))
  decay = np.where(s >= r, beta ** np.clip(s - r, 0, None), 0.0)  # decay[s, r] = beta^(s-r)
  return np.tril(np.ones((t, t))) @ (eta[:, None] * decay)


def expected_error(strategy_TxT: Any, workload_TxT: Any = None, num_participations: int = 1,
                   min_separation: int = 1) -> float:
  """sens(C)^2 ||W C^-1||_F^2 / T: the mean squared error per workload query at an
  effective noise multiplier of 1 (sigma = sens(C)), per coordinate. W defaults to
  prefix sums; for C = I (DP-SGD), single epoch, that is (T + 1) / 2."""
  c = check_strategy(strategy_TxT)
  t = c.shape[0]
  w = prefix_workload(t) if workload_TxT is None else _validate.check_array(
      workload_TxT, "workload_TxT", shape=(t, t))
  sens = sensitivity(c, num_participations, min_separation)
  b = np.linalg.solve(c.T, w.T).T                      # W C^-1
  return float(sens ** 2 * np.sum(b * b) / t)


def _toeplitz_loss(theta, workload):
  """||c||^2 ||W C^-1||_F^2 / T for c = (1, theta): the single-epoch expected error."""
  t = workload.shape[0]
  c = jnp.concatenate([jnp.ones((1,), theta.dtype), theta])
  d = jnp.arange(t)[:, None] - jnp.arange(t)[None, :]
  cmat = jnp.where((d >= 0) & (d < c.size), c[jnp.clip(d, 0, c.size - 1)], 0.0)
  c_inv = jax.scipy.linalg.solve_triangular(cmat, jnp.eye(t, dtype=theta.dtype), lower=True)
  b = workload @ c_inv
  return jnp.sum(c * c) * jnp.sum(b * b) / t


def sqrt_toeplitz_coefs(num_bands: int) -> np.ndarray:
  """float64[b]: the first b coefficients of (1 - x)^(-1/2), r_j = binom(2j, j) / 4^j, the
  square-root factorization of prefix sums (Fichtenberger et al. 2023), truncated."""
  b = _validate.check_int(num_bands, "num_bands", 1, MAX_DENSE_STEPS)
  r = np.ones(b)
  for j in range(1, b):
    r[j] = r[j - 1] * (2 * j - 1) / (2 * j)
  return r


def optimize_toeplitz(num_steps: int, num_bands: int, workload_TxT: Any = None,
                      num_iterations: int = 200) -> np.ndarray:
  """float64[b]: banded Toeplitz coefficients (coefs[0] = 1) minimising the expected error.

  Minimises ||c||^2 ||W C^-1||_F^2 (the error of `expected_error` when sens(C) = ||c||,
  i.e. a single epoch, or sens = sqrt(k) ||c|| when b <= min_separation) by optax's
  L-BFGS in float32 from `sqrt_toeplitz_coefs(b)`, for num_iterations steps, and returns
  the better of the start and the result. W defaults to prefix sums. The coefficients
  may be negative or increasing: use `sensitivity`, not `toeplitz_sensitivity`, then.
  """
  import optax  # pylint: disable=g-import-not-at-top
  t = _check_steps(num_steps)
  b = _validate.check_int(num_bands, "num_bands", 1, t)
  iters = _validate.check_int(num_iterations, "num_iterations", 0, 100_000)
  w = prefix_workload(t) if workload_TxT is None else _validate.check_array(
      workload_TxT, "workload_TxT", shape=(t, t))
  start = sqrt_toeplitz_coefs(b)
  if b == 1 or iters == 0:
    return start
  w32 = jnp.asarray(w, jnp.float32)
  loss = jax.tree_util.Partial(_toeplitz_loss, workload=w32)
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(loss)

  @jax.jit
  def run(theta):
    def body(_, carry):
      theta, state = carry
      value, grad = value_and_grad(theta, state=state)
      updates, state = opt.update(grad, state, theta, value=value, grad=grad, value_fn=loss)
      return optax.apply_updates(theta, updates), state
    return jax.lax.fori_loop(0, iters, body, (theta, opt.init(theta)))[0]

  theta = np.asarray(run(jnp.asarray(start[1:], jnp.float32)), np.float64)
  found = np.concatenate([[1.0], theta])
  if not np.all(np.isfinite(found)):
    return start

  def exact(c):
    cmat = banded_toeplitz(c, t)
    m = np.linalg.solve(cmat.T, w.T)
    return float(np.sum(c * c) * np.sum(m * m))

  return found if exact(found) < exact(start) else start


@_validate.names_extreme_arguments
def gaussian_event(noise_multiplier: float, sensitivity_value: float):
  """The accounting event: `events.GaussianEvent(noise_multiplier / sensitivity_value)`.

  Noise sigma * C on C x (sensitivity sens * C under add/remove of one record with clip
  norm C) is the Gaussian mechanism with multiplier sigma / sens. No amplification by
  sampling: the participation pattern is what `sensitivity` was told.
  """
  from dpjax.accounting import events  # pylint: disable=g-import-not-at-top
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  sens = _validate.check_positive(sensitivity_value, "sensitivity_value")
  return events.GaussianEvent(sigma / sens)


@_validate.names_extreme_arguments
def epsilon(noise_multiplier: float, sensitivity_value: float, delta: float) -> float:
  """eps at delta of the whole run (add/remove neighbours), by the PLD accountant of
  `accounting.event_accounting` on `gaussian_event`."""
  from dpjax.accounting import event_accounting  # pylint: disable=g-import-not-at-top
  return event_accounting.epsilon(gaussian_event(noise_multiplier, sensitivity_value),
                                  _validate.check_delta(delta), accountant="pld")



def num_bands(strategy_TxT: Any) -> int:
  """b: 1 + the largest i - j with C[i, j] != 0 (1 for a diagonal C)."""
  c = check_strategy(strategy_TxT)
  i, j = np.nonzero(c)
  return int(np.max(i - j)) + 1


def amplified_event(strategy_TxT: Any, noise_multiplier: float, bin_prob: float,
                    cycle_length: int):
  """The event of C x + sigma Z under cyclic Poisson sampling (amplified BandMF).

  A record belongs to one residue class j mod s (s = cycle_length, fixed independently of
  the data) and takes part at each step t = j (mod s) independently with probability p =
  bin_prob (`sampling.CyclicPoissonSampler`). When C has at most s bands, its
  participation at step t moves only rows t .. t + s - 1 of C x, disjoint from the rows
  its other participations move, so the run (adaptive gradients included) is the
  composition of one Poisson-subsampled Gaussian per participation, the m-th with shift
  ||C[:, j + m s]|| (Choquette-Choo et al. 2023, https://arxiv.org/abs/2306.08153,
  Thm 4). Pessimistic over j: the m-th of k = ceil(T / s) components gets
  a_m = max_j ||C[:, j + m s]|| and is the mixture-of-Gaussians pair
  (1 - p) N(0, sigma^2) + p N(a_m, sigma^2) against N(0, sigma^2)
  (`events.MixtureOfGaussiansEvent`, add/remove); equal a_m are merged by
  `events.SelfComposedEvent`. For C = I, s = 1 it is DP-SGD's Poisson-subsampled Gaussian.

  Raises ValueError when C has more than s bands (participations would overlap in the
  rows of C x; use `cyclic_sensitivity` and `epsilon`, which do not amplify).
  """
  from dpjax.accounting import events  # pylint: disable=g-import-not-at-top
  c = check_strategy(strategy_TxT)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  p = _validate.check_sampling_prob(bin_prob, "bin_prob")
  t = c.shape[0]
  s = _validate.check_int(cycle_length, "cycle_length")
  bands = num_bands(c)
  if bands > s:
    raise ValueError(f"the strategy has {bands} bands but cycle_length = {s}: amplification "
                     "needs at most cycle_length bands (participations must move disjoint "
                     "rows of C x); account without amplification (cyclic_sensitivity)")
  s = min(s, t)                                          # s >= T: one participation
  norms = np.array([math.sqrt(float(np.sum(c[r:r + s, r] ** 2))) for r in range(t)])
  k = -(-t // s)
  padded = np.zeros(k * s)
  padded[:t] = norms
  shifts = padded.reshape(k, s).max(axis=1)              # a_m, m = 0 .. k - 1
  values, counts = np.unique(shifts, return_counts=True)
  parts = [events.SelfComposedEvent(events.MixtureOfGaussiansEvent(
      sigma, (0.0, float(a)), (1.0 - p, p)), int(n)) for a, n in zip(values, counts) if a > 0]
  return parts[0] if len(parts) == 1 else events.ComposedEvent(tuple(parts))


def amplified_epsilon(strategy_TxT: Any, noise_multiplier: float, bin_prob: float,
                      cycle_length: int, delta: float,
                      value_discretization: float | None = None) -> float:
  """eps at delta of `amplified_event` by the PLD accountant (add/remove neighbours), on
  a loss grid of spacing value_discretization (default 1e-4; coarser is faster and
  still an upper bound). ValueError naming delta and value_discretization where the
  discretised PLD gives no finite bound: delta below its mass at infinite loss (the tails
  it leaves out), or a grid too coarse for the float64 losses."""
  from dpjax.accounting import event_accounting  # pylint: disable=g-import-not-at-top
  d = _validate.check_delta(delta)
  eps = event_accounting.epsilon(
      amplified_event(strategy_TxT, noise_multiplier, bin_prob, cycle_length),
      d, accountant="pld", value_discretization=value_discretization)
  if not math.isfinite(eps):
    raise ValueError(f"delta = {d!r} at value_discretization = {value_discretization!r}: "
                     "the discretised PLD gives no finite epsilon (delta must exceed its mass "
                     "at infinite loss, and the grid must resolve the losses); raise delta or "
                     "refine value_discretization")
  return eps

__all__ = [
    "MAX_DENSE_STEPS", "MAX_PATTERNS", "NoiseStream", "amplified_epsilon", "amplified_event",
    "banded_toeplitz", "check_strategy", "cyclic_sensitivity", "epsilon", "expected_error",
    "gaussian_event", "matrix_stream", "momentum_workload", "num_bands", "optimize_toeplitz",
    "prefix_workload", "sqrt_toeplitz_coefs", "sensitivity", "stream_noise",
    "toeplitz_sensitivity", "toeplitz_stream", "tree_aggregation", "tree_noise_weights",
    "tree_stream",
]
