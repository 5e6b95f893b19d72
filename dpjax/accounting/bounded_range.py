"""Exact RDP of an eps-bounded-range mechanism (the exponential mechanism's guarantee).

eps-BR (Durfee & Rogers 2019): the privacy loss lies in some [t - eps, t] for every pair of
neighbours (the exponential mechanism is eps-BR). By convexity the worst pair on
[t - eps, t] is two-point (Cesar & Rogers 2021), p = (e^eps - e^t) / (e^eps - 1), so

    rho(alpha) = max_{t in [0, eps]} log(p e^{(alpha-1) t} + (1-p) e^{(alpha-1)(t-eps)})
                                     / (alpha - 1),

one direction covering both (t -> eps - t); at alpha -> 1,
KL = eps / (e^eps - 1) - 1 + log((e^eps - 1) / eps). The max over t: a 2049-point grid,
refined by bounded Brent search (relative accuracy ~1e-12). Orders [A].
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize

from dpjax import _validate

_GRID = 2049


def bounded_range_kl(epsilon: float) -> float:
  """max KL(P || Q) over eps-bounded-range pairs: eps/(e^eps - 1) - 1 + log((e^eps - 1)/eps)
  (<= eps^2 / 8).

  Examples:
    >>> round(bounded_range_kl(1.0), 6)
    0.123302
  """
  e = _validate.check_epsilon(epsilon)
  if e > 700.0:   # e^eps overflows past 709.78: log(e^eps - 1) = eps + log1p(-e^-eps)
    log_em1 = e + math.log1p(-math.exp(-e))
    return e * math.exp(-log_em1) - 1.0 + log_em1 - math.log(e)
  em1 = math.expm1(e)
  return e / em1 - 1.0 + math.log(em1 / e)


def _log_moment(t: np.ndarray, e: float, a: float) -> np.ndarray:
  """log(p e^{(a-1) t} + (1-p) e^{(a-1)(t-e)}) at t [N] in [0, e]."""
  t = np.asarray(t, np.float64)
  with np.errstate(divide="ignore"):
    log_p = np.log(-np.expm1(t - e)) - np.log(-math.expm1(-e))      # (e^e - e^t)/(e^e - 1)
    log_1mp = t - e + np.log(-np.expm1(-t)) - np.log(-math.expm1(-e))
  return np.logaddexp(log_p + (a - 1.0) * t, log_1mp + (a - 1.0) * (t - e))


def bounded_range_rdp(epsilon: float, orders) -> np.ndarray:
  """RDP curve float64[A] of an eps-bounded-range mechanism (exact), below the eps-DP curve
  and alpha eps^2 / 8.

  Examples:
    >>> np.round(bounded_range_rdp(0.3, [2.0, 32.0]), 4).tolist()
    [0.0224, 0.2]
  """
  e = _validate.check_epsilon(epsilon)
  a = _validate.check_orders(orders)
  grid = np.linspace(0.0, e, _GRID)
  out = np.empty_like(a)
  for i, ai in enumerate(a.tolist()):
    vals = _log_moment(grid, e, ai)
    k = int(np.argmax(vals))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, _GRID - 1)]
    best = float(vals[k])
    if hi > lo:
      res = optimize.minimize_scalar(lambda t: -float(_log_moment(np.array([t]), e, ai)[0]),
                                     bounds=(lo, hi), method="bounded",
                                     options={"xatol": 1e-14 * max(e, 1.0)})
      best = max(best, -float(res.fun))
    out[i] = best / (ai - 1.0)
  return np.clip(out, 0.0, e)


__all__ = ["bounded_range_kl", "bounded_range_rdp"]
