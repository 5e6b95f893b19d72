"""Releasing PATE's data-dependent privacy cost with smooth sensitivity.

`dpjax.pate` computes the data-dependent RDP f(D) of a PATE run, a function of the
private votes; this module publishes a noisy UPPER BOUND on it plus the cost of that
publication (Papernot et al. 2018, §4, App. B-C; Nissim, Raskhodnikova & Smith 2007).
At one order lambda, with the published answered mask,

    f(D) = sum over answered queries of beta_g(q_j)  +  sum over all queries of beta_t(v_j),

beta_g = `pate.gaussian_rdp_data_dependent` at q = `pate.gnmax_log_q`, beta_t =
`pate.threshold_rdp_data_dependent` of the top count v. A neighbour changes one teacher,
moving ONE vote in EVERY histogram.

Local sensitivity at distance d: A(d) <= sum_j A_j(d). Where beta is a function of v
(threshold; GNMax with C = 2), A_j(d) is exact (v moves by <= 1 per teacher). GNMax with
C >= 3: q = (C - 1) Phi(-z), a moved vote shifts z by <= s = sqrt(2) / sigma (App. B).
If beta_g is nondecreasing in q (C5 of App. B.4, checked on an 8x finer grid, relative
slack 1e-12), the cell [z_k, z_k + h], h = s / n, has local sensitivity at most

    u_k = max(b(z_k - s) - b(z_k + h), b(z_k) - b(z_k + h + s)),    b = beta_g o q,

and A_j(d) <= max u_k over the cells meeting [z0 - d s, z0 + d s] (plus one cell; beyond
z_K >= M / (sqrt 2 sigma), one cell bounded by b(z_K - s)). The bounds are nested
(A_D(d) <= A_D'(d + 1)), so SS_beta(D) = max_{d <= M} e^(-beta d) A(d) is a beta-smooth
upper bound (Nissim et al. 2007, Lemma 2.3).

Release ("GNSS", App. C): R = g(D) + c SS_beta(D) N(0, sigma_ss^2), g = f + k sigma_ss
SS_beta, c = 1 + k sigma_ss (e^beta - 1). c SS_beta bounds g's local sensitivity, so R
costs `gnss_rdp(beta, sigma_ss, lambda)` and is below f(D) with probability Phi(-k / c).
Labels, answered mask and R then cost at most R + gnss_rdp at lambda, except with that
probability.

(lambda, beta, sigma_ss, k) must not depend on the private votes; `plan_release` picks
them from PUBLIC proxy votes. Charging GNMax on answered queries only is `pate.pate_rdp`'s
ex-post accounting (its Warning); `answered_Q=None` charges both steps.

Warning: `release` draws a float32 `jax.random.normal` and rounds R UP to a multiple of
2^-16; it does not use the exact integer-noise tables, so an observer of the exact float
bits is outside its guarantee. Private fields of `PateRelease` are for analysis only.
LNMax is not supported.

Shape letters: Q queries, C classes, M teachers (rows sum to M), D distances 0..M.

Examples:
  >>> smooth_sensitivity([1.0, 2.0, 4.0], math.log(2.0))   # max(1, 2/2, 4/4)
  1.0

References: Papernot et al., "Scalable private learning with PATE", ICLR 2018 (§4, App.
B, C); Nissim, Raskhodnikova & Smith, "Smooth sensitivity and sampling in private data
analysis", STOC 2007.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import numpy as np
from scipy import special, stats

from dpjax import _validate
from dpjax import pate

__all__ = [
    "ReleaseParams", "PateRelease", "local_sensitivity_gnmax", "local_sensitivity_threshold",
    "smooth_sensitivity", "gnss_rdp", "plan_release", "release",
]

_CELLS_PER_SHIFT = 16     # grid step h = s / 16 in z for the GNMax cells
_CHECK_REFINE = 8         # the monotonicity check runs on a grid 8x finer than the cells
_MONO_RTOL = 1e-12        # rounding slack of the check, relative to lambda / sigma^2
_RELEASE_GRID = 2.0 ** -16
_PLAN_ORDERS = np.array([1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0,
                         20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 56.0, 64.0, 80.0, 96.0, 128.0,
                         160.0, 192.0, 256.0])


@dataclasses.dataclass(frozen=True)
class ReleaseParams:
  """Public parameters of a smooth-sensitivity release, fixed before the run.

  order lambda > 1; beta >= 0 with lambda (1 - e^(-2 beta)) < 1; sigma_ss > 0; num_stds
  k >= 0 (upward shift in units of sigma_ss SS_beta).
  """
  order: float
  beta: float
  sigma_ss: float
  num_stds: float

  def __post_init__(self):
    lam = _validate.check_range(self.order, "order", 1.0, open_low=True)
    b = _validate.check_nonnegative(self.beta, "beta")
    _validate.check_positive(self.sigma_ss, "sigma_ss")
    _validate.check_nonnegative(self.num_stds, "num_stds")
    if lam * -math.expm1(-2.0 * b) >= 1.0:
      raise ValueError(f"order must be < 1 / (1 - exp(-2 beta)) = "
                       f"{1.0 / -math.expm1(-2.0 * b):.6g}, got order={lam}")

  @property
  def noise_factor(self) -> float:
    """c = 1 + k sigma_ss (e^beta - 1)."""
    return 1.0 + self.num_stds * self.sigma_ss * math.expm1(self.beta)

  @property
  def probability_below(self) -> float:
    """Phi(-k / c): the probability that the released value is below f(D)."""
    return float(stats.norm.cdf(-self.num_stds / self.noise_factor))


class PateRelease(NamedTuple):
  """Result of `release`.

  Public: order, released_rdp R, release_rdp_cost (`gnss_rdp`), epsilon of R + cost,
  probability_below, data_independent_epsilon (over rdp.DEFAULT_ORDERS).
  PRIVATE, analysis only (never publish): data_dependent_rdp f(D), smooth_sensitivity,
  true_total_epsilon (of f(D) + cost).
  """
  order: float
  released_rdp: float
  release_rdp_cost: float
  epsilon: float
  probability_below: float
  data_independent_epsilon: float
  data_dependent_rdp: float
  smooth_sensitivity: float
  true_total_epsilon: float


# ----------------------------------------------------------------------------------
# validation and vectorised data-dependent RDP


def _check_votes(votes_QxC, name: str = "votes_QxC") -> tuple[np.ndarray, int]:
  """(float64[Q, C] integer counts, M): every row sums to the same M >= 1."""
  v = pate.check_votes(votes_QxC, name, ndim=2, integer=True)
  totals = v.sum(axis=1)
  m = totals[0]
  if not np.all(totals == m) or m < 1:
    raise ValueError(f"{name}: every row must sum to the same number of teachers M >= 1 "
                     f"(each teacher votes once), got row sums from {totals.min():g} to "
                     f"{totals.max():g}")
  m = _validate.check_size(m, f"{name} (number of teachers)", bytes_per_unit=8,
                           units=4 * v.shape[0])
  return v, m


def _check_run(votes_QxC, answered_Q, sigma, delta, threshold, sigma_threshold):
  """(votes, M, answered bool[Q] (None: all), sigma, delta, threshold, sigma_threshold)."""
  v, m = _check_votes(votes_QxC)
  ans = (np.ones(v.shape[0], bool) if answered_Q is None
         else _validate.check_binary(answered_Q, "answered_Q", shape=(v.shape[0],)))
  return (v, m, ans, _validate.check_positive(sigma, "sigma"), _validate.check_delta(delta),
          *pate.check_threshold(threshold, sigma_threshold))


def _beta(log_q: np.ndarray, sigma: float, order: float) -> np.ndarray:
  """`pate.gaussian_rdp_data_dependent` at one order, elementwise over log_q (<= 0)."""
  lq = np.asarray(log_q, np.float64)
  var = sigma * sigma
  indep = order / var
  with np.errstate(all="ignore"):
    mu2 = sigma * np.sqrt(-lq)
    mu1 = mu2 + 1.0
    eps1, eps2 = mu1 / var, mu2 / var
    cond = lq <= (mu2 - 1.0) * eps2 - mu2 * (np.log1p(1.0 / (mu1 - 1.0))
                                             + np.log1p(1.0 / (mu2 - 1.0)))
    ok = (mu2 > 1.0) & cond & (lq + eps2 < 0.0) & (order < mu1) & np.isfinite(lq)
    log_1mq = pate.log1mexp(lq)
    log_a = log_1mq - pate.log1mexp(np.where(ok, (lq + eps2) * (1.0 - 1.0 / mu2), -1.0))
    log_b = eps1 - lq / (mu1 - 1.0)
    log_s = np.logaddexp(log_1mq + (order - 1.0) * log_a, lq + (order - 1.0) * log_b)
    dep = np.where(ok, np.minimum(indep, log_s / (order - 1.0)), indep)
  return np.where(lq == -np.inf, 0.0, dep)


def _gnmax_log_q(v: np.ndarray, sigma: float) -> np.ndarray:
  """`pate.gnmax_log_q` row by row: float64[Q]."""
  q, c = v.shape
  top = np.argmax(v, axis=1)
  gaps = (v[np.arange(q), top][:, None] - v) / (math.sqrt(2.0) * sigma)
  terms = stats.norm.logsf(gaps)
  terms[np.arange(q), top] = -np.inf
  return np.minimum(special.logsumexp(terms, axis=1), math.log1p(-1.0 / c))


def _threshold_beta(v_top: np.ndarray, threshold: float, sigma_threshold: float,
                    order: float) -> np.ndarray:
  """`pate.threshold_rdp_data_dependent` at one order, elementwise over top counts."""
  lp = stats.norm.logsf((threshold - np.asarray(v_top, np.float64)) / sigma_threshold)
  lq = np.minimum(lp, pate.log1mexp(lp))
  return _beta(lq, math.sqrt(2.0) * sigma_threshold, order)


def _range_max(u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  """max(u[lo..hi]) elementwise (lo <= hi, inclusive) with a sparse table."""
  levels = [u]
  while 2 ** len(levels) <= u.size:
    p = len(levels)
    prev = levels[-1]
    levels.append(np.maximum(prev[:-2 ** (p - 1)], prev[2 ** (p - 1):]))
  table = np.full((len(levels), u.size), -np.inf)
  for p, row in enumerate(levels):
    table[p, : row.size] = row
  _, e = np.frexp(hi - lo + 1)
  p = (e - 1).astype(np.int64)          # floor(log2(length)), exact
  return np.maximum(table[p, lo], table[p, hi - (1 << p) + 1])


def _check_monotone(b: np.ndarray, tol: float, order: float, what: str) -> None:
  """Raises ValueError unless b (along increasing z) is nonincreasing within tol."""
  if np.any(np.diff(b) > tol) or np.any(b < 0.0):
    raise ValueError(
        f"order={order:g}: the data-dependent RDP of {what} is not nondecreasing in q "
        "on the check grid (condition C5 of Papernot et al. 2018, App. B.4), so its "
        "smooth sensitivity cannot be bounded here; use another order")


def _gnmax_cells(sigma: float, order: float, num_classes: int, num_teachers: int):
  """(z_cap, h, n, u[K + 1]): the cell bounds of the GNMax part (module docstring)."""
  c = num_classes
  log_cm1 = math.log(c - 1.0)
  log_cap = math.log1p(-1.0 / c)
  z_cap = float(-special.ndtri_exp(log_cap - log_cm1))
  s = math.sqrt(2.0) / sigma
  n = _CELLS_PER_SHIFT
  h = s / n
  z_top = num_teachers / (math.sqrt(2.0) * sigma) + s
  k_cells = int(math.ceil((z_top - z_cap) / h))
  tol = _MONO_RTOL * order / (sigma * sigma)

  def b_of_z(z):
    lq = np.minimum(log_cm1 + special.log_ndtr(-z), log_cap)
    return _beta(lq, sigma, order)

  fine = z_cap + h * np.arange(-n * _CHECK_REFINE, (k_cells + n + 1) * _CHECK_REFINE + 1) \
      / _CHECK_REFINE
  _check_monotone(b_of_z(fine), tol, order, "GNMax")
  j = np.arange(-n, k_cells + n + 2)           # grid indices -n .. K + n + 1
  b = b_of_z(z_cap + h * j)
  at = lambda idx: b[idx + n]                  # noqa: E731  b at grid index idx
  k = np.arange(k_cells)
  u = np.empty(k_cells + 1)
  u[:k_cells] = np.maximum(at(k - n) - at(k + 1), at(k) - at(k + 1 + n))
  u[k_cells] = at(k_cells - n)
  return z_cap, h, n, np.maximum(u, 0.0) + tol


def _top_count_ls(b: np.ndarray, v_top: np.ndarray, v_min: int, m: int) -> np.ndarray:
  """Exact A_j(d), float64[Q, M + 1], of a cost b[u - v_min] of the top count u in [v_min, M]."""
  ls = np.zeros(b.size)
  if b.size > 1:
    step = np.abs(np.diff(b))
    ls[:-1] = step
    ls[1:] = np.maximum(ls[1:], step)
  top = np.asarray(v_top).astype(np.int64) - v_min
  d = np.arange(m + 1, dtype=np.int64)
  lo = np.clip(top[:, None] - d[None, :], 0, b.size - 1)
  hi = np.clip(top[:, None] + d[None, :], 0, b.size - 1)
  return _range_max(ls, lo, hi)


@_validate.names_extreme_arguments
def local_sensitivity_gnmax(votes_QxC, *, sigma: float, order: float) -> np.ndarray:
  """Bound A_j(d), float64[Q, M + 1] (d = 0..M), on the local sensitivity of GNMax's
  data-dependent RDP at one order: exact for C = 2, nondecreasing in d, nested. ValueError
  when C5 fails at this order.
  """
  v, m = _check_votes(votes_QxC)
  s = _validate.check_positive(sigma, "sigma")
  lam = _validate.check_range(order, "order", 1.0, open_low=True)
  c = v.shape[1]
  if c == 2:  # q is a function of the top count u: exact
    v_min = int(math.ceil(m / 2))
    counts = np.arange(v_min, m + 1, dtype=np.float64)
    lq = np.minimum(stats.norm.logsf((2.0 * counts - m) / (math.sqrt(2.0) * s)), math.log(0.5))
    return _top_count_ls(_beta(lq, s, lam), v.max(axis=1), v_min, m)
  z_cap, h, n, u = _gnmax_cells(s, lam, c, m)
  k_top = u.size - 1
  lq = _gnmax_log_q(v, s)
  z0 = -special.ndtri_exp(np.minimum(lq - math.log(c - 1.0), 0.0))
  k0 = np.clip(np.floor((np.maximum(z0, z_cap) - z_cap) / h), 0, k_top).astype(np.int64)
  d = np.arange(m + 1, dtype=np.int64)
  lo = np.clip(k0[:, None] - n * d[None, :] - 1, 0, k_top)
  hi = np.clip(k0[:, None] + n * d[None, :] + 1, 0, k_top)
  return _range_max(u, lo, hi)


@_validate.names_extreme_arguments
def local_sensitivity_threshold(votes_QxC, *, threshold: float, sigma_threshold: float,
                                order: float) -> np.ndarray:
  """Exact local sensitivity at distance d of the threshold check's data-dependent RDP:
  float64[Q, M + 1], max over u in [v_j - d, v_j + d] of |beta_t(u +- 1) - beta_t(u)|.
  """
  v, m = _check_votes(votes_QxC)
  t, st = pate.check_threshold(threshold, sigma_threshold)
  if t is None:
    raise ValueError("threshold and sigma_threshold are required")
  lam = _validate.check_range(order, "order", 1.0, open_low=True)
  v_min = int(math.ceil(m / v.shape[1]))
  counts = np.arange(v_min, m + 1)
  return _top_count_ls(_threshold_beta(counts, t, st, lam), v.max(axis=1), v_min, m)


def smooth_sensitivity(ls_D, beta: float) -> float:
  """SS_beta = max_d e^(-beta d) ls_D[d], ls_D float[D] >= 0, the last entry bounding larger d:
  a beta-smooth upper bound when ls_D is nondecreasing and nested (Nissim et al. 2007).
  """
  ls = _validate.check_array(ls_D, "ls_D", ndim=1, min_size=1, low=0.0)
  b = _validate.check_nonnegative(beta, "beta")
  return float(np.max(np.exp(-b * np.arange(ls.size)) * ls))


def _max_beta(order: float) -> float:
  """The supremum of beta for which `gnss_rdp` is finite: lambda (1 - e^(-2 beta)) < 1."""
  return -0.5 * math.log1p(-1.0 / order)


@_validate.names_extreme_arguments
def gnss_rdp(beta: float, sigma_ss: float, order: float) -> float:
  """RDP at `order` of F(D) + S(D) N(0, sigma_ss^2), S a beta-smooth bound on F's sensitivity.

  With kappa = 1 - lambda (1 - e^(-2 beta)) > 0, the exact Gaussian divergence is at most
      max(-log(kappa) / (2 (lambda - 1)) + lambda e^(-2 beta) / (2 sigma_ss^2 kappa),
          lambda beta / (lambda - 1) + lambda / (2 sigma_ss^2)).
  Papernot et al. 2018, Thm 23 is below the exact divergence near 2 lambda beta = 1
  (lambda = 8, beta = 0.05, sigma_ss = 3: exact 1.73, Thm 23 1.15): not used.

  Examples:
    >>> gnss_rdp(0.0, 2.0, 4.0)            # beta = 0: the Gaussian lambda / (2 sigma_ss^2)
    0.5
  """
  b = _validate.check_nonnegative(beta, "beta")
  s = _validate.check_positive(sigma_ss, "sigma_ss")
  lam = _validate.check_range(order, "order", 1.0, open_low=True)
  kappa = 1.0 + lam * math.expm1(-2.0 * b)
  if kappa <= 0.0:
    raise ValueError(f"order must be < 1 / (1 - exp(-2 beta)) = "
                     f"{1.0 / -math.expm1(-2.0 * b):.6g}, got order={lam}")
  var = s * s
  shrink = -0.5 * math.log(kappa) / (lam - 1.0) + lam * math.exp(-2.0 * b) / (2.0 * var * kappa)
  grow = lam * b / (lam - 1.0) + lam / (2.0 * var)
  return max(shrink, grow)


# ----------------------------------------------------------------------------------
# the release and its planner


def _cost_and_ls(v, m, ans, sigma, t, st, order) -> tuple[float, np.ndarray]:
  """(f(D), summed local sensitivity bounds float64[M + 1]) at one order."""
  f = 0.0
  ls = np.zeros(m + 1)
  if ans.any():
    va = v[ans]
    f += float(_beta(_gnmax_log_q(va, sigma), sigma, order).sum())
    ls += local_sensitivity_gnmax(va, sigma=sigma, order=order).sum(axis=0)
  if t is not None:
    f += float(_threshold_beta(v.max(axis=1), t, st, order).sum())
    ls += local_sensitivity_threshold(v, threshold=t, sigma_threshold=st, order=order).sum(axis=0)
  return f, ls


def _data_independent_epsilon(num_queries, num_answered, sigma, st, delta) -> float:
  from dpjax.accounting import event_accounting, rdp  # local: keeps the import light
  orders = rdp.DEFAULT_ORDERS
  event = pate.aggregation_event(num_queries, num_answered, sigma=sigma, sigma_threshold=st)
  r = (np.zeros_like(orders) if event is None
       else event_accounting.rdp_curve(event, orders)[1])
  return rdp.rdp_to_epsilon(orders, r, delta)[0]


def _epsilon_at(order: float, rdp_value: float, delta: float) -> float:
  from dpjax.accounting import rdp  # local: keeps the import light
  return rdp.rdp_to_epsilon(np.array([order]), np.array([max(rdp_value, 0.0)]), delta)[0]


@_validate.names_extreme_arguments
def plan_release(votes_QxC, answered_Q=None, *, sigma: float, delta: float,
                 threshold: float | None = None, sigma_threshold: float | None = None,
                 orders=None, failure_prob: float = 0.01) -> ReleaseParams:
  """Chooses (order, beta, sigma_ss, num_stds) from PUBLIC proxy votes.

  Warning: the votes must carry no information about the private data (teachers trained
  on an independent public draw, or an already-published run); on the PRIVATE votes the
  parameters are unaccounted and the released epsilon is NOT a guarantee.

  Per order where C5 holds, over a (beta, sigma_ss) grid, k gives Phi(-k / c) =
  failure_prob in (0, 0.5] and the expected total f + k sigma_ss SS_beta + gnss_rdp is
  minimised; the order with the smallest eps wins. Other arguments as the release will
  pass them. ValueError when C5 fails at every order.
  """
  v, m, ans, s, dl, t, st = _check_run(votes_QxC, answered_Q, sigma, delta, threshold,
                                       sigma_threshold)
  lams = _PLAN_ORDERS if orders is None else _validate.check_orders(orders)
  p = _validate.check_range(failure_prob, "failure_prob", 0.0, 0.5, open_low=True)
  t_q = float(stats.norm.isf(p))
  best = None
  for lam in lams:
    try:
      f, ls = _cost_and_ls(v, m, ans, s, t, st, float(lam))
    except ValueError:
      continue
    betas = np.linspace(0.02, 0.98, 49) * _max_beta(float(lam))
    dist = np.arange(ls.size)
    ss = np.max(np.exp(-betas[:, None] * dist[None, :]) * ls[None, :], axis=1)  # [nb]
    sig = np.geomspace(1e-3, 1e5, 321)
    eb = np.expm1(betas)[:, None]
    denom = 1.0 - t_q * sig[None, :] * eb
    k = np.where(denom > 0, t_q / np.where(denom > 0, denom, 1.0), np.inf)
    kappa = (1.0 + lam * np.expm1(-2.0 * betas))[:, None]
    var = sig[None, :] ** 2
    cost = np.maximum(-0.5 * np.log(kappa) / (lam - 1.0) + lam * np.exp(-2.0 * betas)[:, None]
                      / (2.0 * var * kappa),
                      (lam * betas / (lam - 1.0))[:, None] + lam / (2.0 * var))
    with np.errstate(invalid="ignore"):
      total = f + k * sig[None, :] * ss[:, None] + cost
    total = np.where(np.isfinite(total), total, np.inf)
    i, j = np.unravel_index(np.argmin(total), total.shape)
    eps = _epsilon_at(float(lam), float(total[i, j]), dl)
    if best is None or eps < best[0]:
      best = (eps, ReleaseParams(float(lam), float(betas[i]), float(sig[j]), float(k[i, j])))
  if best is None:
    raise ValueError("orders: condition C5 fails at every candidate order; the "
                     "data-dependent RDP cannot be released at these orders")
  return best[1]


@_validate.names_extreme_arguments
def release(key: jax.Array, votes_QxC, answered_Q=None, *, sigma: float,
            params: ReleaseParams, delta: float, threshold: float | None = None,
            sigma_threshold: float | None = None) -> PateRelease:
  """Publishes a noisy upper bound on PATE's data-dependent RDP, and its epsilon.

  R = f(D) + k sigma_ss SS_beta(D) + c sigma_ss SS_beta(D) Z, Z ~ N(0, 1) from `key`,
  rounded up to a multiple of 2^-16, at least 0. votes_QxC: the PRIVATE votes of every
  query asked; answered_Q: the published mask (only those charged GNMax; None charges
  every query); params: fixed without these votes (`plan_release` on proxy votes).
  Returns a PateRelease; ValueError on bad input or when C5 fails at params.order.
  """
  v, m, ans, s, dl, t, st = _check_run(votes_QxC, answered_Q, sigma, delta, threshold,
                                       sigma_threshold)
  _validate.check_instance(params, ReleaseParams, "params")
  lam, b, sss, k = params.order, params.beta, params.sigma_ss, params.num_stds
  f, ls = _cost_and_ls(v, m, ans, s, t, st, lam)
  ss = smooth_sensitivity(ls, b)
  c = params.noise_factor
  z = float(jax.random.normal(key, ()))
  r = f + k * sss * ss + c * sss * ss * z
  r = max(0.0, math.ceil(r / _RELEASE_GRID) * _RELEASE_GRID)
  cost = gnss_rdp(b, sss, lam)
  return PateRelease(
      order=lam, released_rdp=r, release_rdp_cost=cost,
      epsilon=_epsilon_at(lam, r + cost, dl), probability_below=params.probability_below,
      data_independent_epsilon=_data_independent_epsilon(v.shape[0], int(ans.sum()), s, st,
                                                         dl),
      data_dependent_rdp=f, smooth_sensitivity=ss,
      true_total_epsilon=_epsilon_at(lam, f + cost, dl))
