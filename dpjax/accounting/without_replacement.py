"""RDP amplification by sampling without replacement (replace-one neighbours).

A mechanism M runs on m records drawn uniformly without replacement from a dataset of n
(gamma = m / n); neighbouring datasets have the same size and differ in one record
(replace-one). If M has RDP eps(j) at every integer order j >= 2 and pure eps_inf
(math.inf when it has none), then at every integer order alpha >= 2 (Wang, Balle &
Kasiviswanathan 2019, https://arxiv.org/abs/1808.00087, Theorem 9)

    eps'(alpha) <= 1/(alpha-1) log(1 + gamma^2 C(alpha, 2) min(4 (e^eps(2) - 1),
                   e^eps(2) min(2, (e^eps_inf - 1)^2))
                   + sum_{j=3}^alpha gamma^j C(alpha, j) e^{(j-1) eps(j)} min(2, (e^eps_inf - 1)^j)),

and eps'(alpha) <= eps(alpha) (the sampled pair is a mixture of M's replace-one pairs and of
identical ones). Fractional orders: (alpha - 1) eps'(alpha) = log E[(dP/dQ)^alpha] is convex
in alpha and 0 at alpha = 1, so linear interpolation of it between the neighbouring integer
orders (and between 1 and 2) is an upper bound. Sums in log space; orders [A], host NumPy.
Limits: for the Gaussian, dp_accounting uses the paper's Theorem 27 (forward differences of
e^{(j-1) eps(j)}, orders <= 256), which is tighter at larger fractions or sigma: the same eps
at gamma <= 0.03, sigma <= 1.1; 12 % above at gamma = 0.03, sigma = 3 and 79 % above at
gamma = 0.1, sigma = 5 (T = 100 - 1000, delta = 1e-5).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import special

from dpjax import _validate

# Largest integer order evaluated (the sum has alpha terms per order).
MAX_ORDER = 4096


def _log_min_2_pow(j: np.ndarray, pure_epsilon: float) -> np.ndarray:
  """log min(2, (e^eps_inf - 1)^j) for integer j [J]."""
  if not math.isfinite(pure_epsilon):
    return np.full(j.shape, math.log(2.0))
  with np.errstate(divide="ignore"):
    log_base = (pure_epsilon + math.log(-math.expm1(-pure_epsilon))) if pure_epsilon > 0 else -math.inf
  return np.minimum(math.log(2.0), j * log_base)


def _integer_bound(alpha: int, log_gamma: float, eps_int: np.ndarray, pure_epsilon: float
                   ) -> float:
  """The Theorem 9 bound at integer alpha >= 2; eps_int[j - 2] = eps(j), j = 2..alpha."""
  e2 = float(eps_int[0])
  log_c2 = math.log(alpha * (alpha - 1) / 2.0)
  log_a = math.log(4.0) + (e2 + math.log(-math.expm1(-e2)) if e2 > 0 else -math.inf)
  log_b = e2 + float(_log_min_2_pow(np.array([2.0]), pure_epsilon)[0])
  terms = [0.0, 2.0 * log_gamma + log_c2 + min(log_a, log_b)]
  if alpha >= 3:
    j = np.arange(3, alpha + 1, dtype=np.float64)
    log_binom = (special.gammaln(alpha + 1.0) - special.gammaln(j + 1.0)
                 - special.gammaln(alpha - j + 1.0))
    terms.extend((j * log_gamma + log_binom + (j - 1.0) * eps_int[1:alpha - 1]
                  + _log_min_2_pow(j, pure_epsilon)).tolist())
  return float(special.logsumexp(terms)) / (alpha - 1.0)


def sampled_without_replacement_rdp(sample_fraction: float, inner_rdp: Callable,
                                    orders, pure_epsilon: float = math.inf) -> np.ndarray:
  """RDP upper bound (float64[A]) of M on a uniform sample without replacement of a fraction
  gamma = sample_fraction in (0, 1] of the dataset, replace-one neighbours.

  inner_rdp(orders float64[J]) -> float64[J] is M's replace-one RDP curve (called at integer
  orders 2..ceil(max order) and at `orders`); pure_epsilon >= 0 its pure eps (math.inf if
  none). Orders above MAX_ORDER are refused by name.

  Examples:
    >>> import numpy as np
    >>> g = lambda a: a / (2 * 4.0 ** 2)           # Gaussian, sigma = 4 (replace-one)
    >>> r = sampled_without_replacement_rdp(0.01, g, [2.0, 8.0])
    >>> bool(np.all(r < g(np.array([2.0, 8.0])) / 100))
    True
  """
  gamma = _validate.check_range(sample_fraction, "sample_fraction", 0.0, 1.0, open_low=True)
  _validate.check_callable(inner_rdp, "inner_rdp")
  a = _validate.check_orders(orders)
  if a.max() > MAX_ORDER:
    raise ValueError(f"orders must be <= {MAX_ORDER} for sampling without replacement, got "
                     f"{a.max():g}")
  eps_inf = _validate.check_range(pure_epsilon, "pure_epsilon", 0.0, allow_inf=True)
  top = max(2, int(math.ceil(a.max())))
  ints = np.arange(2, top + 1, dtype=np.float64)
  eps_int = np.asarray(inner_rdp(ints), np.float64)
  direct = np.asarray(inner_rdp(a), np.float64)
  if eps_int.shape != ints.shape or direct.shape != a.shape:
    raise ValueError("inner_rdp must return one value per order")
  if np.any(np.isnan(eps_int)) or np.any(eps_int < 0):
    raise ValueError("inner_rdp must return RDP values >= 0 (inf allowed)")
  if gamma == 1.0:
    return direct
  log_gamma = math.log(gamma)
  # scaled[j - 2] = (j - 1) eps'(j): the cumulant at integer orders
  scaled = np.array([(j - 1.0) * min(_integer_bound(int(j), log_gamma, eps_int, eps_inf),
                                     float(eps_int[int(j) - 2])) for j in ints])
  out = np.empty_like(a)
  for i, x in enumerate(a):
    lo = math.floor(x)
    if lo == x:
      out[i] = scaled[lo - 2] / (x - 1.0)
    elif lo < 2:   # between alpha = 1 (cumulant 0) and 2
      out[i] = scaled[0]
    else:
      t = x - lo
      out[i] = ((1.0 - t) * scaled[lo - 2] + t * scaled[lo - 1]) / (x - 1.0)
  return np.minimum(out, direct)


__all__ = ["MAX_ORDER", "sampled_without_replacement_rdp"]
