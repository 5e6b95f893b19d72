"""Exact RDP of the Poisson-subsampled Gaussian mechanism (DP-SGD's step; add/remove-one).

Mironov, Talwar & Zhang 2019: with Y = exp((2z - 1) / (2 sigma^2)), z ~ N(0, sigma^2),
RDP(alpha) = log(A_alpha) / (alpha - 1), A_alpha = E[(1 - q + q Y)^alpha]. Integer alpha:
A_alpha - 1 = sum_{i>=2} C(alpha, i) q^i (1-q)^(alpha-i) (exp((i^2 - i) / (2 sigma^2)) - 1)
in log space. Fractional alpha: A_alpha - 1 = E[(1 + x)^alpha - 1 - alpha x], x = q (Y - 1),
by the trapezoid rule in log space, step set by the strip of analyticity (branch points at
pi sigma^2), relative error < ~1e-12. Orders [A]; host NumPy float64.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from dpjax import _validate

# Trapezoid settings for fractional orders (see `_log_a_minus_1_frac`).
_TAIL_SIGMAS = 12.0      # integrate over [-12 sigma, alpha + 12 sigma]
_POINTS_PER_STRIP = 48   # h = 2 pi d / 48 -> error ~ exp(-48 + 4.5) relative
_END_DROP = 45.0         # the integrand at the range ends must be e^-45 below its peak

# Work budget: fractional-order grid points grow as 1 / sigma^2. At most _GRID_CHUNK points
# at a time, _GRID_BUDGET per call on default ranges plus _GRID_BUDGET on widened ones; an
# order left over gets the upper bound `_log_a_frac_bound` (looser, never smaller).
_GRID_CHUNK = 2 ** 17
_GRID_BUDGET = 2 ** 22
# Integer orders above this get the Gaussian bound alpha / (2 sigma^2).
_MAX_EXACT_INT_ORDER = 2 ** 20


def _log_expm1(t: np.ndarray) -> np.ndarray:
  """log(exp(t) - 1) for t > 0, stable for tiny and huge t."""
  t = np.asarray(t, np.float64)
  big = t > 30.0
  out = np.empty_like(t)
  out[big] = t[big] + np.log1p(-np.exp(-t[big]))
  out[~big] = np.log(np.expm1(t[~big]))
  return out


def _log1p_exp(y: np.ndarray) -> np.ndarray:
  """log(1 + exp(y)), stable."""
  return np.logaddexp(0.0, y)


# log Gamma(n + 1) for n = 0..1024+: a table makes integer orders cheap.
_LGAMMA_TABLE = special.gammaln(np.arange(0, 2050, dtype=np.float64) + 1.0)


def _log_a_minus_1_int_block(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
  """log(A_alpha - 1) at integer alphas >= 2 (one block), shape [A]."""
  amax = int(alphas.max())
  i = np.arange(2, amax + 1)                                         # [I]
  fi = i.astype(np.float64)
  log_m = _log_expm1((fi * fi - fi) / (2.0 * sigma * sigma))         # [I]
  a = alphas.astype(np.int64)[:, None]                               # [A, 1]
  valid = i[None, :] <= a
  rest = np.where(valid, a - i[None, :], 0)
  if amax < _LGAMMA_TABLE.size:
    lg = _LGAMMA_TABLE
    log_comb = lg[a] - lg[i][None, :] - lg[rest]
  else:
    af = a.astype(np.float64)
    log_comb = (special.gammaln(af + 1) - special.gammaln(fi + 1)[None, :]
                - special.gammaln(rest + 1.0))
  terms = log_comb + fi[None, :] * math.log(q) + rest * math.log1p(-q) + log_m[None, :]
  terms = np.where(valid, terms, -np.inf)
  return special.logsumexp(terms, axis=1)


def _log_a_minus_1_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
  """log(A_alpha - 1) at integer alphas >= 2, shape [A]: the module docstring's positive-term
  sum, in blocks of similar order so the [A, alpha_max] term matrix stays small."""
  out = np.empty_like(alphas)
  order = np.argsort(alphas)
  edges = [0, 32, 128, 512, np.inf]
  sa = alphas[order]
  for lo, hi in zip(edges[:-1], edges[1:]):
    sel = np.flatnonzero((sa > lo) & (sa <= hi))
    if sel.size:
      # Rows in pieces: the [rows, alpha_max] term matrix stays within _GRID_CHUNK entries.
      rows = max(1, _GRID_CHUNK // int(sa[sel[-1]]))
      for k in range(0, sel.size, rows):
        part = sel[k:k + rows]
        out[order[part]] = _log_a_minus_1_int_block(q, sigma, sa[part])
  return out


def _log_f(x: np.ndarray, log1px: np.ndarray, alpha) -> np.ndarray:
  """log((1 + x)^alpha - 1 - alpha x) for x > -1, alpha > 1; x float64[P] may be +inf where
  1 + x overflows (then log1px, finite, is used); alpha a scalar or float64[P]."""
  alpha = np.broadcast_to(np.asarray(alpha, np.float64), x.shape)
  out = np.empty_like(log1px)
  small = (np.abs(x) < 0.5) & (alpha * np.minimum(np.abs(x), 1.0) < 0.5)
  # Series: f = sum_{k>=2} C(alpha, k) x^k with |terms| <= 0.5^k: 60 terms suffice.
  if np.any(small):
    xs, als = x[small], alpha[small]
    n_terms = 60
    coef = np.empty((n_terms + 1, xs.size))
    coef[0] = 1.0
    for k in range(1, n_terms + 1):
      coef[k] = coef[k - 1] * (als - k + 1) / k
    acc = np.zeros_like(xs)
    for k in range(n_terms, 1, -1):
      acc = acc * xs + coef[k]
    out[small] = np.log(acc) + 2.0 * np.log(np.abs(xs))
  neg = (~small) & (x < 0)
  if np.any(neg):
    # f = expm1(u) + alpha |x|, u = alpha log1p(x) <= 0; no severe cancellation here.
    u = alpha[neg] * log1px[neg]
    out[neg] = np.log(np.expm1(u) - alpha[neg] * x[neg])
  pos = (~small) & (x >= 0)
  if np.any(pos):
    # f = e^u - (1 + alpha x); log(1 + alpha x) computed from log x to avoid overflow.
    ap = alpha[pos]
    u = ap * log1px[pos]
    xp = x[pos]
    with np.errstate(over="ignore", divide="ignore"):
      log_x = np.where(np.isfinite(xp), np.log(xp), log1px[pos])
    log_lin = _log1p_exp(np.log(ap) + log_x)
    out[pos] = u + np.log(-np.expm1(log_lin - u))
  return out


def _frac_grid(sigma: float, alpha: float) -> tuple[float, float, float]:
  """(lo, hi, h) of the trapezoid grid for one order."""
  s2 = sigma * sigma
  # Strip of analyticity: branch points of (1 + x(z))^alpha sit at Im z = pi sigma^2;
  # keep the Gaussian's growth e^{d^2 / (2 sigma^2)} in the strip modest (d <= 3 sigma).
  d = min(0.9 * math.pi * s2, 3.0 * sigma)
  h = 2.0 * math.pi * d / _POINTS_PER_STRIP
  return -_TAIL_SIGMAS * sigma, alpha + _TAIL_SIGMAS * sigma, h


def _log_integrand(q: float, sigma: float, z: np.ndarray, alpha) -> np.ndarray:
  """log(phi_sigma(z) f(x(z))) without the normalising constant; alpha scalar or [P]."""
  s2 = sigma * sigma
  w = (2.0 * z - 1.0) / (2.0 * s2)
  with np.errstate(over="ignore"):
    x = q * np.expm1(w)
  log1px = np.logaddexp(math.log1p(-q), math.log(q) + w)
  return -0.5 * z * z / s2 + _log_f(x, log1px, alpha)


def _grid_log_sum(q: float, sigma: float, lo: float, h: float, n: int,
                  alpha: float) -> tuple[float, float, float, float]:
  """(logsumexp g, g[0], g[-1], max g) of g on z_j = lo + j h, j < n, in chunks."""
  if n <= _GRID_CHUNK:
    g = _log_integrand(q, sigma, lo + h * np.arange(n), alpha)
    return float(special.logsumexp(g)), float(g[0]), float(g[-1]), float(np.max(g))
  sums, first, last, top = [], 0.0, 0.0, -np.inf
  for j0 in range(0, n, _GRID_CHUNK):
    g = _log_integrand(q, sigma, lo + h * np.arange(j0, min(n, j0 + _GRID_CHUNK)), alpha)
    first = float(g[0]) if j0 == 0 else first
    last = float(g[-1])
    top = max(top, float(np.max(g)))
    sums.append(special.logsumexp(g))
  return float(special.logsumexp(sums)), first, last, top


def _log_a_minus_1_frac(q: float, sigma: float, alpha: float,
                        max_points: Optional[int] = None) -> Optional[float]:
  """log(A_alpha - 1) at one fractional alpha by the trapezoid rule, the range widened until
  negligible at both ends; None when that needs more than `max_points` (_GRID_BUDGET)."""
  budget = _GRID_BUDGET if max_points is None else max_points
  lo, hi, h = _frac_grid(sigma, alpha)
  work = 0
  for _ in range(8):
    n = int(math.ceil((hi - lo) / h)) + 1
    work += n
    if work > budget:
      return None
    total, g_first, g_last, g_max = _grid_log_sum(q, sigma, lo, h, n, alpha)
    # The integrand must be negligible at both ends; widen the range if not.
    ok_lo, ok_hi = g_first < g_max - _END_DROP, g_last < g_max - _END_DROP
    if ok_lo and ok_hi:
      break
    if not ok_lo:
      lo -= 4.0 * sigma + 0.5 * (hi - lo)
    if not ok_hi:
      hi += 4.0 * sigma + 0.5 * (hi - lo)
  else:
    raise ValueError(f"subsampled_gaussian_rdp: integration range failed to converge "
                     f"(q={q}, sigma={sigma}, alpha={alpha})")
  log_norm = -0.5 * math.log(2.0 * math.pi * sigma * sigma)
  return total + math.log(h) + log_norm


def _log_a_minus_1_frac_segments(q: float, sigma: float, alphas: np.ndarray, grids,
                                 counts: np.ndarray) -> np.ndarray:
  """Default-range quadrature of several orders on one concatenated grid: float64[A], NaN
  where the integrand is not negligible at the range ends."""
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
  seg = np.repeat(np.arange(alphas.size), counts)
  local = np.arange(counts.sum()) - starts[seg]
  lo = np.array([g[0] for g in grids])
  h = np.array([g[2] for g in grids])
  z = lo[seg] + h[seg] * local
  g = _log_integrand(q, sigma, z, alphas[seg])
  g_max = np.maximum.reduceat(g, starts)
  total = np.log(np.add.reduceat(np.exp(g - g_max[seg]), starts)) + g_max
  log_norm = -0.5 * math.log(2.0 * math.pi * sigma * sigma)
  out = total + np.log(h) + log_norm
  ends_ok = (g[starts] < g_max - _END_DROP) & (g[starts + counts - 1] < g_max - _END_DROP)
  return np.where(ends_ok, out, np.nan)


def _log_a_minus_1_frac_many(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
  """`_log_a_minus_1_frac` for many orders at once (concatenated grids), cheapest first
  within `_GRID_BUDGET`; an order beyond the budget is NaN, for the caller to bound."""
  grids = [_frac_grid(sigma, float(a)) for a in alphas]
  counts = np.array([int(math.ceil((hi - lo) / h)) + 1 for lo, hi, h in grids])
  by_cost = np.argsort(counts, kind="stable")
  affordable = by_cost[np.cumsum(counts[by_cost]) <= _GRID_BUDGET]
  out = np.full(alphas.size, np.nan)
  redo = [int(j) for j in affordable if counts[j] > _GRID_CHUNK]
  small = np.sort(affordable[counts[affordable] <= _GRID_CHUNK])
  # Consecutive pieces of at most _GRID_CHUNK points (one piece for ordinary sigma).
  piece_of = np.cumsum(counts[small]) // (_GRID_CHUNK + 1) if small.size else small
  for p in np.unique(piece_of):
    idx = small[piece_of == p]
    out[idx] = _log_a_minus_1_frac_segments(q, sigma, alphas[idx], [grids[j] for j in idx],
                                            counts[idx])
  redo += [int(j) for j in small if np.isnan(out[j])]
  left = _GRID_BUDGET
  for j in sorted(redo, key=lambda k: counts[k]):
    v = _log_a_minus_1_frac(q, sigma, float(alphas[j]), max_points=left)
    if v is None:
      break
    out[j] = v
    left -= int(counts[j])
  return out


def _log_a_from_log_a_minus_1(log_am1: np.ndarray) -> np.ndarray:
  """log A from log(A - 1), stable in both regimes."""
  return np.where(log_am1 > 0, log_am1 + np.log1p(np.exp(-np.abs(log_am1))),
                  np.log1p(np.exp(np.minimum(log_am1, 0.0))))


def _log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
  """log A_alpha at integer alphas >= 2: exact up to _MAX_EXACT_INT_ORDER, then the
  Gaussian bound alpha (alpha - 1) / (2 sigma^2) (subsampling never increases
  the Renyi divergence, which is jointly quasi-convex)."""
  out = alphas * (alphas - 1.0) / (2.0 * sigma * sigma)
  exact = alphas <= _MAX_EXACT_INT_ORDER
  if np.any(exact):
    out[exact] = _log_a_from_log_a_minus_1(_log_a_minus_1_int(q, sigma, alphas[exact]))
  return out


def _log_a_frac_bound(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
  """Upper bound on log A_alpha at fractional alphas: by convexity (Hoelder), log A_1 = 0,
  min((k + 1 - alpha) log A_k + (alpha - k) log A_{k+1}, alpha (alpha - 1) / (2 sigma^2))."""
  k = np.floor(alphas)
  ints = np.unique(np.concatenate([k[k >= 2], k + 1.0]))
  table = dict(zip(ints.tolist(), _log_a_int(q, sigma, ints).tolist()))
  table[1.0] = 0.0
  la_k = np.array([table[v] for v in k.tolist()])
  la_k1 = np.array([table[v] for v in (k + 1.0).tolist()])
  return np.minimum((k + 1.0 - alphas) * la_k + (alphas - k) * la_k1,
                    alphas * (alphas - 1.0) / (2.0 * sigma * sigma))


@_validate.names_extreme_arguments
def subsampled_gaussian_rdp(sampling_prob: float, noise_multiplier: float, orders) -> np.ndarray:
  """RDP float64[A] of ONE Poisson-subsampled Gaussian step (q in (0, 1], noise sigma C).

  Exact, except where work is bounded (sigma below ~0.02: unaffordable fractional orders
  get `_log_a_frac_bound`, integer orders above `_MAX_EXACT_INT_ORDER` alpha / (2 sigma^2)),
  which are upper bounds.

  Examples:
    >>> round(float(subsampled_gaussian_rdp(1.0, 2.0, [2])[0]), 6)   # q = 1: Gaussian
    0.25
  """
  q = _validate.check_sampling_prob(sampling_prob)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  a = _validate.check_orders(orders)
  if q == 1.0:
    return a / (2.0 * sigma * sigma)
  is_int = a == np.round(a)
  log_a = np.empty_like(a)
  if np.any(is_int):
    log_a[is_int] = _log_a_int(q, sigma, a[is_int])
  if np.any(~is_int):
    frac = np.flatnonzero(~is_int)
    la = _log_a_from_log_a_minus_1(_log_a_minus_1_frac_many(q, sigma, a[frac]))
    missing = np.isnan(la)
    if np.any(missing):
      la[missing] = _log_a_frac_bound(q, sigma, a[frac[missing]])
    log_a[frac] = la
  return log_a / (a - 1.0)
