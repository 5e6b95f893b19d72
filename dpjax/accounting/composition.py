"""Composition theorems for (eps, delta)-DP mechanisms.

* `basic_composition`: k mechanisms, each (eps_i, delta_i)-DP, are
  (sum eps_i, sum delta_i)-DP (Dwork et al. 2006).
* `advanced_composition`: k adaptive (eps0, delta0)-DP mechanisms are
  (sqrt(2k ln(1/delta')) eps0 + k eps0 (e^eps0 - 1), k delta0 + delta')-DP
  (Dwork, Rothblum & Vadhan 2010).
* `optimal_composition_delta` / `optimal_composition_epsilon`: the exact
  (tightest possible) privacy profile of k adaptive (eps0, delta0)-DP mechanisms
  (Kairouz, Oh & Viswanath 2015, Thm 3.3). The worst case is k-fold binary
  randomized response augmented by a delta0 "leak", so for every eps

      delta(eps) = 1 - (1 - delta0)^k (1 - delta_RR(eps)),
      delta_RR(eps) = sum_l C(k, l) [e^{(k-l) eps0} - e^eps e^{l eps0}]_+ / (1 + e^eps0)^k,

  which at eps = (k - 2i) eps0 reproduces KOV's breakpoints. Evaluated in log
  space, so k = 1e5 is fine.
* `pure_dp_rdp`: the RDP curve of any eps-DP mechanism (and the smaller one of an
  eps-bounded-range mechanism such as the exponential mechanism), so that pure-DP
  releases compose with DP-SGD in one RDP account.
* `group_privacy`: (eps, delta)-DP for one record becomes
  (k eps, k e^{(k-1) eps} delta)-DP for a group of k records.

All functions are host NumPy/SciPy in float64.

Examples:
  >>> basic_composition(0.25, 1e-6, 4)
  (1.0, 4e-06)
  >>> eps, d = advanced_composition(0.1, 0.0, 100, 1e-5)
  >>> round(eps, 3)
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


def basic_composition(epsilon0: float, delta0: float, k: int) -> tuple[float, float]:
  """(k eps0, k delta0): basic composition of k (eps0, delta0)-DP mechanisms.

  Args:
    epsilon0: eps0 >= 0 of each mechanism.
    delta0: delta0 in [0, 1) of each mechanism.
    k: number of mechanisms, >= 1.
  Returns:
    (epsilon, delta); delta is capped at 1.
  """
  e, d, k = _check_mechanisms(epsilon0, delta0, k)
  return k * e, min(1.0, k * d)


def advanced_composition(epsilon0: float, delta0: float, k: int,
                         delta_slack: float) -> tuple[float, float]:
  """Advanced composition (Dwork, Rothblum & Vadhan 2010, Thm III.3).

  Args:
    epsilon0: eps0 >= 0 of each mechanism.
    delta0: delta0 in [0, 1) of each mechanism.
    k: number of (adaptively chosen) mechanisms, >= 1.
    delta_slack: delta' in (0, 1), the extra failure probability.
  Returns:
    (epsilon, delta) = (sqrt(2k ln(1/delta')) eps0 + k eps0 expm1(eps0), k delta0 + delta').
  """
  e, d, k = _check_mechanisms(epsilon0, delta0, k)
  ds = _validate.check_delta(delta_slack, "delta_slack")
  eps = math.sqrt(2.0 * k * math.log(1.0 / ds)) * e + k * e * math.expm1(e)
  return eps, min(1.0, k * d + ds)


def _log_delta_rr(epsilon0: float, k: int, epsilon: np.ndarray) -> np.ndarray:
  """log delta_RR(eps) of k-fold binary randomized response with parameter eps0.

  Args:
    epsilon0: > 0.
    k: >= 1.
    epsilon: float64[E], eps >= 0.
  Returns:
    float64[E] (-inf where delta_RR = 0).
  """
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


def optimal_composition_delta(epsilon0: float, delta0: float, k: int, epsilon):
  """Exact delta(eps) of k adaptive (eps0, delta0)-DP mechanisms (KOV 2015).

  Args:
    epsilon0: eps0 >= 0.
    delta0: delta0 in [0, 1).
    k: >= 1.
    epsilon: eps >= 0, scalar or float64[E].
  Returns:
    delta, a float or float64[E].
  """
  e0, d0, k = _check_mechanisms(epsilon0, delta0, k)
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


def optimal_composition_epsilon(epsilon0: float, delta0: float, k: int,
                                delta: float) -> float:
  """Smallest eps with delta(eps) <= delta for k (eps0, delta0)-DP mechanisms (exact).

  Args:
    epsilon0: eps0 >= 0.
    delta0: delta0 in [0, 1).
    k: >= 1.
    delta: target total delta in (0, 1); must exceed 1 - (1 - delta0)^k.
  Returns:
    eps (float), at most k * eps0.
  Raises:
    ValueError: if delta <= 1 - (1 - delta0)^k (no eps reaches it).
  """
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
  """RDP curve implied by eps-DP (or by eps-bounded range), for composing in RDP.

  Every eps-DP pair of output distributions is a post-processing of binary
  randomized response with parameter eps (Kairouz, Oh & Viswanath 2015, the
  dominating pair of (eps, 0)-DP, https://arxiv.org/abs/1311.0776), so by the
  data-processing inequality of the Renyi divergence

      rho(alpha) <= log((e^{alpha eps} + e^{(1 - alpha) eps}) / (1 + e^eps)) / (alpha - 1),

  the RDP of binary randomized response, attained by it (tight).

  With `bounded_range=True` the mechanism is assumed eps-bounded-range (its privacy
  loss log(P(y)/Q(y)) varies by at most eps over outputs y; Durfee & Rogers 2019,
  https://arxiv.org/abs/1905.04273). The exponential mechanism
  exp(eps u / (2 Delta_u)) is eps-BR (and so is the monotonic exp(eps u / Delta_u)),
  and eps-BR implies (eps^2 / 8)-zCDP (Cesar & Rogers 2021,
  https://arxiv.org/abs/2004.07223; Hoeffding's lemma on the bounded privacy
  loss), so rho(alpha) <= alpha eps^2 / 8 as well; the minimum of the two curves
  is returned. The constant 1/8 is tight as eps -> 0
  (two outputs whose loss is +-eps/2 with probability 1/2 each).

  Args:
    epsilon: eps > 0.
    orders: orders alpha > 1, shape [A].
    bounded_range: also use the eps-BR bound alpha eps^2 / 8.
  Returns:
    float64[A] rho(alpha), at most eps.

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


def group_privacy(epsilon: float, delta: float, k: int) -> tuple[float, float]:
  """(k eps, k e^{(k-1) eps} delta): an (eps, delta)-DP guarantee for a group of k records.

  Neighbours that differ in k records are joined by a chain of k single-record
  steps; applying (eps, delta)-DP along the chain gives
  P[M(D) in S] <= e^{k eps} P[M(D') in S] + delta sum_{j<k} e^{j eps}, and
  sum_{j<k} e^{j eps} <= k e^{(k-1) eps} (Dwork & Roth 2014, Thm 2.2 and the remark
  after it; https://www.cis.upenn.edu/~aaroth/Papers/privacybook.pdf). For a person
  holding k records under record-level DP this is their guarantee; for pure DP
  (delta = 0) the k eps is tight (Laplace on a count).

  Args:
    epsilon: eps >= 0 of the record-level guarantee.
    delta: delta in [0, 1) of the record-level guarantee.
    k: group size >= 1.
  Returns:
    (epsilon, delta) for the group; delta is capped at 1 (then the guarantee is
    vacuous).

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
