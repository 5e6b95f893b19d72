"""Dinur-Nissim reconstruction: recover secret bits from noisy random-subset counts.

answers_Q = queries_QxN @ secret_N + noise_Q, each person in each subset with probability
1/2. Decoding fits a real x (least squares, or the LP min sum_j |answers_j - (Q x)_j| over
0 <= x <= 1) and rounds it. Per-answer error o(sqrt(N)) with Q = poly(N) recovers almost
every bit; under a FIXED total budget the noise grows with Q and the attack stays at
guessing.

Noise kinds (magnitude E = `scale`): "rademacher" +-E; "uniform" on [-E, E];
"rounded_uniform" integers in [-floor(E), floor(E)]; "gaussian" N(0, E^2); "laplace"
scale E (E = Q / eps is the eps-DP release of Q counts, `dp_laplace_scale`).

Shape letters: Q queries, N people, K trials.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> secret = (jax.random.uniform(jax.random.key(1), (30,)) < 0.5).astype(jnp.float32)
  >>> frac = reconstruction_trials(jax.random.key(2), secret, num_queries=300,
  ...                              num_trials=2, noise="rademacher", scale=1.0)
  >>> frac.shape, bool(frac.min() > 0.9)
  ((2,), True)

References: Dinur & Nissim, PODS 2003; Dwork & Roth 2014, §8.1.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, stats

from dpjax import _validate

NOISE_KINDS = ("rademacher", "uniform", "rounded_uniform", "gaussian", "laplace")


def _check_noise(noise: str, scale: float) -> None:
  """A noise kind of NOISE_KINDS and its magnitude >= 0."""
  _validate.check_choice(noise, NOISE_KINDS, "noise")
  _validate.check_nonnegative(scale, "scale")


def _check_secret(secret_N) -> jax.Array:
  """The secret bits as float32[N], N >= 1."""
  _validate.check_binary(secret_N, "secret_N", ndim=1)
  s = jnp.asarray(secret_N, jnp.float32)
  if s.shape[0] < 1:
    raise ValueError(f"secret_N must be a non-empty vector [N], got shape {s.shape}")
  return s


def _check_queries(queries_QxN) -> jax.Array:
  """0/1 subset queries as float32[Q, N] (shape-only check for a traced value)."""
  q = _validate.check_binary(queries_QxN, "queries_QxN", ndim=2)
  if not _validate.is_tracer(q) and q.size == 0:
    raise ValueError(f"queries_QxN must be non-empty, got shape {q.shape}")
  return jnp.asarray(q, jnp.float32)


def noise_std(noise: str, scale: float) -> float:
  """Standard deviation of one answer's noise for `noise` kind and magnitude `scale`."""
  _check_noise(noise, scale)
  if noise == "rademacher":
    return float(scale)
  if noise == "uniform":
    return float(scale) / math.sqrt(3.0)
  if noise == "rounded_uniform":
    e = math.floor(scale)
    return math.sqrt(e * (e + 1) / 3.0)
  if noise == "gaussian":
    return float(scale)
  return math.sqrt(2.0) * float(scale)  # laplace


@_validate.names_extreme_arguments
def dp_laplace_scale(total_epsilon: float, num_queries: int) -> float:
  """Laplace scale b = Q / epsilon: Q counts of sensitivity 1 compose to epsilon-DP."""
  _validate.check_epsilon(total_epsilon, "total_epsilon")
  q = _validate.check_int(num_queries, "num_queries")
  return q / float(total_epsilon)


def random_subset_queries(key: jax.Array, num_queries: int, num_people: int) -> jax.Array:
  """Random subsets, each person in each with probability 1/2: float32[Q, N] of 0/1."""
  n = _validate.check_size(num_people, "num_people")
  q = _validate.check_size(num_queries, "num_queries", units=n, units_name="num_people")
  return jax.random.bernoulli(key, 0.5, (q, n)).astype(jnp.float32)


def _noise(key: jax.Array, shape, noise: str, scale: float) -> jax.Array:
  if noise == "rademacher":
    return scale * (2.0 * jax.random.bernoulli(key, 0.5, shape).astype(jnp.float32) - 1.0)
  if noise == "uniform":
    return jax.random.uniform(key, shape, jnp.float32, -scale, scale)
  if noise == "rounded_uniform":
    e = int(math.floor(scale))
    return jax.random.randint(key, shape, -e, e + 1).astype(jnp.float32)
  if noise == "gaussian":
    return scale * jax.random.normal(key, shape, jnp.float32)
  return scale * jax.random.laplace(key, shape, jnp.float32)


@_validate.names_extreme_arguments
def noisy_counts(key: jax.Array, queries_QxN: jax.Array, secret_N: jax.Array,
                 noise: str, scale: float) -> jax.Array:
  """queries_QxN @ secret_N + noise: float32[Q] (`noise` of NOISE_KINDS, magnitude E >= 0)."""
  _check_noise(noise, scale)
  s = _check_secret(secret_N)
  qm = _check_queries(queries_QxN)
  if qm.ndim != 2 or s.ndim != 1 or qm.shape[1] != s.shape[0]:
    raise ValueError(f"queries_QxN [Q, N] and secret_N [N] disagree: {qm.shape}, {s.shape}")
  return qm @ s + _noise(key, (qm.shape[0],), noise, float(scale))


def least_squares_decode(queries_QxN: jax.Array, answers_Q: jax.Array) -> jax.Array:
  """Least-squares estimate of the bits, rounded at 1/2: float32[N] of 0/1; traceable.

  Cholesky on the normal equations, no box constraint. Needs Q >= N; near Q = N it is
  unreliable in float32 (cond ~ N (1 + sqrt(N/Q))^2 / (1 - sqrt(N/Q))^2).
  """
  q = _check_queries(queries_QxN)
  a = _validate.check_array(answers_Q, "answers_Q", np.float32, shape=(q.shape[0],))
  a = a if _validate.is_tracer(a) else jnp.asarray(a)
  if q.ndim != 2 or a.shape != (q.shape[0],):
    raise ValueError(f"queries_QxN [Q, N] and answers_Q [Q] disagree: {q.shape}, {a.shape}")
  if q.shape[0] < q.shape[1]:
    raise ValueError(f"queries_QxN needs at least as many queries as people (Q >= N), "
                     f"got {q.shape}")
  gram = q.T @ q
  x = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(gram), q.T @ a)
  return (x > 0.5).astype(jnp.float32)


def lp_decode(queries_QxN, answers_Q) -> np.ndarray:
  """Dinur-Nissim LP decoding (scipy HiGHS), rounded at 1/2: float64[N] of 0/1.

  min_{x, t} sum_j t_j s.t. -t <= answers - Q x <= t, 0 <= x <= 1. Host-side.
  """
  a = np.asarray(_check_queries(queries_QxN), np.float64)
  b = _validate.check_array(answers_Q, "answers_Q", shape=(a.shape[0],))
  q, n = a.shape
  eye = np.eye(q)
  # Variables z = [x (n), t (q)]; A_ub z <= b_ub encodes Qx - t <= b and -Qx - t <= -b.
  a_ub = np.block([[a, -eye], [-a, -eye]])
  b_ub = np.concatenate([b, -b])
  c = np.concatenate([np.zeros(n), np.ones(q)])
  bounds = [(0.0, 1.0)] * n + [(0.0, None)] * q
  res = optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
  if res.status != 0:
    raise RuntimeError(f"linprog failed: {res.message}")
  return (res.x[:n] > 0.5).astype(np.float64)


@functools.partial(jax.jit, static_argnames=("num_queries", "num_trials", "noise"))
def _trials(key, secret_N, scale, *, num_queries, num_trials, noise):
  n = secret_N.shape[0]

  def one(k):
    kq, kn = jax.random.split(k)
    queries = jax.random.bernoulli(kq, 0.5, (num_queries, n)).astype(jnp.float32)
    answers = queries @ secret_N + _noise(kn, (num_queries,), noise, scale)
    return jnp.mean(least_squares_decode(queries, answers) == secret_N)

  return jax.vmap(one)(jax.random.split(key, num_trials))


def reconstruction_trials(key: jax.Array, secret_N: jax.Array, *, num_queries: int,
                          num_trials: int, noise: str, scale: float) -> jax.Array:
  """Fraction of bits recovered by least squares in K independent attacks: float32[K].

  Fresh queries (Q >= N) and noise per trial, one vmapped program; trial k uses
  split(key, K)[k].
  """
  s = _check_secret(secret_N)
  q = _validate.check_size(num_queries, "num_queries", s.shape[0], units=s.shape[0])
  k = _validate.check_size(num_trials, "num_trials", units=q * s.shape[0],
                           units_name="num_queries x N")
  _check_noise(noise, scale)
  return _trials(key, s, jnp.float32(scale), num_queries=q, num_trials=k, noise=noise)


def majority_baseline(secret_N) -> float:
  """Accuracy of guessing the majority value for everyone (uses no answers)."""
  s = np.asarray(_check_secret(secret_N))
  m = float(s.mean())
  return max(m, 1.0 - m)


@_validate.names_extreme_arguments
def predicted_recovery(num_queries: int, num_people: int, std: float) -> float:
  """Gaussian approximation to the expected fraction recovered by least squares (Q > N + 1).

  Per-coordinate error variance ~ 4 std^2 / (Q - N - 1) (inverse-Wishart mean); P(wrong)
  ~ Phi(-(1/2) / sqrt(that)). Slightly optimistic near Q = N.
  """
  q = _validate.check_int(num_queries, "num_queries")
  n = _validate.check_int(num_people, "num_people")
  if q <= n + 1:
    raise ValueError(f"num_queries must exceed num_people + 1, got {q} <= {n + 1}")
  _validate.check_nonnegative(std, "std")
  if std == 0:
    return 1.0
  sd = math.sqrt(4.0 * std ** 2 / (q - n - 1))
  return float(stats.norm.cdf(0.5 / sd))
