"""Composition theorems for (eps, delta)-DP mechanisms (host NumPy/SciPy, float64).

Basic (Dwork et al. 2006), advanced (Dwork, Rothblum & Vadhan 2010) and optimal (Kairouz,
Oh & Viswanath 2015) composition of k (eps0, delta0)-DP mechanisms; `pure_dp_rdp` (eps-DP
as an RDP curve) and `group_privacy` (a group of k records).

Examples:
  >>> round(advanced_composition(0.1, 0.0, 100, 1e-5)[0], 3)
  5.85
  >>> round(optimal_composition_epsilon(0.1, 0.0, 100, 1e-5), 3)
  4.307
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from dpjax import _validate
from dpjax.accounting import rdp


def _check_mechanisms(epsilon0, delta0, k) -> tuple[float, float, int]:
  """(eps0 >= 0, delta0 in [0, 1), k >= 1): k mechanisms, each (eps0, delta0)-DP."""
  return (_validate.check_epsilon(epsilon0, "epsilon0", allow_zero=True),
          _validate.check_delta(delta0, "delta0", allow_zero=True),
          _validate.check_int(k, "k"))


@_validate.names_extreme_arguments
def basic_composition(epsilon0: float, delta0: float, k: int) -> tuple[float, float]:
  """(k eps0, min(1, k delta0)): basic composition of k (eps0, delta0)-DP mechanisms."""
  e, d, k = _check_mechanisms(epsilon0, delta0, k)
  return k * e, min(1.0, k * d)


@_validate.names_extreme_arguments
def advanced_composition(epsilon0: float, delta0: float, k: int, delta_slack: float
                         ) -> tuple[float, float]:
  """(sqrt(2k ln(1/delta')) eps0 + k eps0 expm1(eps0), k delta0 + delta'): advanced
  composition (Dwork, Rothblum & Vadhan 2010, Thm III.3), slack delta' in (0, 1)."""
  e, d, k = _check_mechanisms(epsilon0, delta0, k)
  ds = _validate.check_delta(delta_slack, "delta_slack")
  eps = math.sqrt(2.0 * k * math.log(1.0 / ds)) * e + k * e * math.expm1(e)
  return eps, min(1.0, k * d + ds)


def _log_delta_rr(epsilon0: float, k: int, epsilon: np.ndarray) -> np.ndarray:
  """log delta_RR(eps) of k-fold binary randomized response with parameter eps0 > 0, for
  eps float64[E] >= 0; float64[E], -inf where delta_RR = 0."""
  l = np.arange(k + 1, dtype=np.float64)                              # [L]
  log_comb = special.gammaln(k + 1.0) - special.gammaln(l + 1) - special.gammaln(k - l + 1)
  log_norm = k * np.logaddexp(0.0, epsilon0)
  gap = (k - 2.0 * l) * epsilon0                                      # log(P/Q) per outcome
  e = np.asarray(epsilon, np.float64)[:, None]                        # [E, 1]
  with np.errstate(divide="ignore", invalid="ignore"):
    # P - e^eps Q = P (1 - e^{eps - gap}); positive only where gap > eps.
    log_term = (log_comb + (k - l) * epsilon0 - log_norm)[None, :] + np.log(
        -np.expm1(np.minimum(e - gap[None, :], 0.0)))
  log_term = np.where(gap[None, :] > e, log_term, -np.inf)
  return special.logsumexp(log_term, axis=1)


@_validate.names_extreme_arguments
def optimal_composition_delta(epsilon0: float, delta0: float, k: int, epsilon):
  """Exact delta(eps) of k adaptive (eps0, delta0)-DP mechanisms (KOV 2015, Thm 3.3):

      delta(eps) = 1 - (1 - delta0)^k (1 - delta_RR(eps)),
      delta_RR(eps) = sum_l C(k, l) [e^{(k-l) eps0} - e^eps e^{l eps0}]_+ / (1 + e^eps0)^k,

  in log space; epsilon a scalar or float64[E] >= 0, returned alike.
  """
  e0, d0, k = _check_mechanisms(epsilon0, delta0, k)
  _validate.check_size(k + 1, "k", bytes_per_unit=8, units=4)   # the sum over l = 0..k
  eps = np.atleast_1d(_validate.check_array(epsilon, "epsilon", low=0.0, allow_inf=True,
                                            ndim=(0, 1)))
  if e0 == 0.0:
    d_rr = np.zeros_like(eps)
  else:
    d_rr = np.exp(_log_delta_rr(e0, k, eps))
  # 1 - (1 - d0)^k (1 - d_rr), computed without cancellation for tiny d0.
  log_keep = k * math.log1p(-d0)
  with np.errstate(divide="ignore"):
    out = -np.expm1(log_keep + np.log1p(-np.minimum(d_rr, 1.0)))
  out = np.clip(out, 0.0, 1.0)
  return float(out[0]) if np.ndim(epsilon) == 0 else out


@_validate.names_extreme_arguments
def optimal_composition_epsilon(epsilon0: float, delta0: float, k: int, delta: float) -> float:
  """Smallest eps (<= k eps0) with delta(eps) <= delta for k (eps0, delta0)-DP mechanisms
  (exact); ValueError if delta <= 1 - (1 - delta0)^k."""
  e0, d0, k = _check_mechanisms(epsilon0, delta0, k)
  d = _validate.check_delta(delta)
  floor = -math.expm1(k * math.log1p(-d0))
  if d <= floor:
    raise ValueError(f"delta must exceed 1 - (1 - delta0)^k = {floor:g} (the delta at "
                     f"eps = k eps0), got {d:g}")
  f = lambda e: optimal_composition_delta(e0, d0, k, e) - d
  if f(0.0) <= 0:
    return 0.0
  return float(optimize.brentq(f, 0.0, k * e0, xtol=1e-12, rtol=1e-12))


def pure_dp_rdp(epsilon: float, orders, *, bounded_range: bool = False) -> np.ndarray:
  """RDP curve float64[A] (<= eps) implied by eps-DP, or eps-bounded range.

  eps-DP is post-processed binary randomized response (Kairouz, Oh & Viswanath 2015):
      rho(alpha) <= log((e^{alpha eps} + e^{(1 - alpha) eps}) / (1 + e^eps)) / (alpha - 1).
  `bounded_range=True` (e.g. the exponential mechanism; Durfee & Rogers 2019) also takes the
  minimum with alpha eps^2 / 8 (eps-BR implies eps^2/8-zCDP, Cesar & Rogers 2021).

  Examples:
    >>> a = np.array([2.0, 32.0])
    >>> np.round(pure_dp_rdp(0.3, a), 4).tolist()
    [0.0868, 0.2821]
    >>> np.round(pure_dp_rdp(0.3, a, bounded_range=True), 4).tolist()
    [0.0225, 0.2821]
  """
  e = _validate.check_epsilon(epsilon)
  a = _validate.check_orders(orders)
  if not isinstance(bounded_range, (bool, np.bool_)):
    raise TypeError(f"bounded_range must be a bool, got {bounded_range!r}")
  rho = rdp.randomized_response_rdp(e, a, num_buckets=2)
  if bounded_range:
    rho = np.minimum(rho, a * e * e / 8.0)
  return rho


@_validate.names_extreme_arguments
def group_privacy(epsilon: float, delta: float, k: int) -> tuple[float, float]:
  """(k eps, min(1, k e^{(k-1) eps} delta)): the guarantee for a group of k records (Dwork
  & Roth 2014, Thm 2.2), e.g. a person with k records under record-level DP.

  Examples:
    >>> group_privacy(1.0, 0.0, 5)
    (5.0, 0.0)
    >>> eps, d = group_privacy(3.0, 1e-5, 5)
    >>> eps, round(d, 3)                         # delta > 1: nothing is promised
    (15.0, 1.0)
  """
  e = _validate.check_epsilon(epsilon, allow_zero=True)
  d = _validate.check_delta(delta, allow_zero=True)
  k = _validate.check_int(k, "k")
  if d == 0.0:
    return k * e, 0.0
  log_d = math.log(k) + (k - 1) * e + math.log(d)
  return k * e, min(1.0, math.exp(min(log_d, 0.0)))
