"""Exact RDP of an eps-bounded-range mechanism (the exponential mechanism's guarantee).

M is eps-bounded-range (eps-BR; Durfee & Rogers 2019, https://arxiv.org/abs/1905.04273)
when, for every pair of neighbours, its privacy loss L(o) = log(P(o) / Q(o)) lies in an
interval [t - eps, t] of width eps. The exponential mechanism exp(eps u / (2 Delta_u))
and its monotone form exp(eps u / Delta_u) are eps-BR (and eps-DP).

For a fixed t in [0, eps], E_Q[e^L] = 1 and E_P[e^{(alpha-1) L}] = E_Q[e^{alpha L}] is
the mean of a convex function of e^L, so among loss distributions on [t - eps, t] the
largest is the two-point one on the ends (Cesar & Rogers 2021,
https://arxiv.org/abs/2004.07223): P_t = (p, 1 - p), Q_t = (p e^{-t}, (1-p) e^{eps-t}),
p = (e^eps - e^t) / (e^eps - 1). The RDP curve of eps-BR is therefore

    rho(alpha) = max_{t in [0, eps]} log(p e^{(alpha-1) t} + (1-p) e^{(alpha-1)(t-eps)})
                                     / (alpha - 1),

and the family is closed under swapping P and Q (t -> eps - t), so one direction covers
both. At alpha -> 1 the maximum is in closed form (`bounded_range_kl`):

    KL = eps / (e^eps - 1) - 1 + log((e^eps - 1) / eps).

The maximum over t is taken on a grid of 2049 points and refined by bounded Brent search
around the best point (smooth, one-peaked in t); relative accuracy ~1e-12. Orders [A].
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize

from dpjax import _validate

_GRID = 2049


def bounded_range_kl(epsilon: float) -> float:
  """max KL(P || Q) over eps-bounded-range pairs: eps/(e^eps - 1) - 1 + log((e^eps - 1)/eps).

  epsilon > 0 finite. At most eps^2 / 8 (Cesar & Rogers 2021, Thm 3).

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
  """RDP curve of an eps-bounded-range mechanism, the maximum over two-point pairs (exact).

  epsilon > 0 finite; orders [A] > 1. Returns float64[A], below both the eps-DP curve
  (`composition.pure_dp_rdp`) and alpha eps^2 / 8; tends to `bounded_range_kl` as
  alpha -> 1 and to eps as alpha -> inf.

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
