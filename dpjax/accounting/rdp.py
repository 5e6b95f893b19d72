"""Rényi differential privacy (Mironov 2017): curves, composition, conversion.

M is (alpha, rho)-RDP when D_alpha(M(D) || M(D')) <= rho for all neighbours. Curves
(float64[A], one value per order) compose by adding order by order and convert to
(eps, delta)-DP with `rdp_to_epsilon`. Gaussian, Laplace (Mironov 2017, Prop. 6) and
randomized-response curves are exact. `subsampled_gaussian_rdp` is the Poisson-subsampled
Gaussian of DP-SGD (Mironov, Talwar & Zhang 2019; add/remove-one): with
Y = exp((2z - 1) / (2 sigma^2)), z ~ N(0, sigma^2), the RDP at order alpha is
log(A_alpha) / (alpha - 1) where

    A_alpha = E[(1 - q + q Y)^alpha].

At integer alpha, A_alpha - 1 = sum_{i>=2} C(alpha, i) q^i (1-q)^(alpha-i)
(exp((i^2 - i) / (2 sigma^2)) - 1), positive terms summed in log space. At fractional
alpha, A_alpha - 1 = E[f(q (Y - 1))] with f(x) = (1 + x)^alpha - 1 - alpha x >= 0, by the
trapezoid rule in log space on a grid set from the strip of analyticity (branch points
at distance pi sigma^2), relative error below ~1e-12: the exact value, not a series
bound, and no order is dropped. Host NumPy float64; no overflow for orders up to 1024,
q down to 1e-6 and sigma in [0.3, 1000].

Examples:
  >>> orders = DEFAULT_ORDERS
  >>> rho = 10_000 * subsampled_gaussian_rdp(0.01, 1.0, orders)
  >>> eps, order = rdp_to_epsilon(orders, rho, 1e-5)
  >>> round(eps, 2)   # lecture (integer orders): 6.72
  6.71
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy import special

from dpjax import _validate

# The default grid of orders: fine near 1 (where small-eps / large-q settings
# put the optimum), every integer from 11 to 128 (no hole between 64 and 128,
# which e.g. q = 0.01, sigma = 8, T = 1000 needs), then a geometric tail to 1024.
DEFAULT_ORDERS = np.unique(np.array(
    [1.01, 1.02, 1.03, 1.04, 1.05, 1.075]
    + [1.0 + x / 10.0 for x in range(1, 100)]        # 1.1, 1.2, ..., 10.9
    + [11.5] + list(range(11, 129))                  # every integer 11..128
    + [144, 160, 176, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024],
    dtype=np.float64))

# Trapezoid settings for fractional orders (see `_log_a_minus_1_frac`).
_TAIL_SIGMAS = 12.0      # integrate over [-12 sigma, alpha + 12 sigma]
_POINTS_PER_STRIP = 48   # h = 2 pi d / 48 -> error ~ exp(-48 + 4.5) relative
_END_DROP = 45.0         # the integrand at the range ends must be e^-45 below its peak

# Work budget of `subsampled_gaussian_rdp`. The fractional-order grid spacing
# scales as sigma^2 (`_frac_grid`), so its points grow as 1 / sigma^2: about 4e6
# for the default orders at sigma = 0.02, 1.5e9 (tens of GiB) at sigma = 1e-3.
# The integrand is evaluated at most _GRID_CHUNK points at a time (about 100 MB of
# temporaries), and one call spends at most _GRID_BUDGET points on the default
# ranges (cheapest orders first) plus _GRID_BUDGET on widened ranges (about 2 s
# each). An order left over gets a proven upper bound from the exact integer
# orders around it (`_log_a_frac_bound`): a tiny sigma costs a looser eps, never a
# smaller one.
_GRID_CHUNK = 2 ** 17
_GRID_BUDGET = 2 ** 22
# Integer orders above this get the Gaussian bound alpha / (2 sigma^2) (the exact
# sum has alpha - 1 terms).
_MAX_EXACT_INT_ORDER = 2 ** 20

# The RDP -> (eps, delta) conversions.
_METHODS = ("balle2020", "classic")


# ----------------------------------------------------------------------------
# simple mechanisms


@_validate.names_extreme_arguments
def gaussian_rdp(noise_multiplier: float, orders) -> np.ndarray:
  """RDP of the Gaussian mechanism with noise std = noise_multiplier * sensitivity.

  float64[A]: alpha / (2 sigma^2) (exact).

  Examples:
    >>> gaussian_rdp(2.0, [2, 8]).tolist()
    [0.25, 1.0]
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  a = _validate.check_orders(orders)
  return a / (2.0 * sigma * sigma)


@_validate.names_extreme_arguments
def laplace_rdp(scale: float, orders, sensitivity: float = 1.0) -> np.ndarray:
  """RDP of the Laplace mechanism with noise scale b and L1 sensitivity Delta (exact).

  With eps0 = Delta / b (Mironov 2017, Prop. 6), float64[A]:
  rho(alpha) = eps0 + log1p((alpha-1)/(2 alpha-1) * expm1(-(2 alpha-1) eps0)) / (alpha-1).

  Examples:
    >>> round(float(laplace_rdp(1.0, [1e6])[0]), 4)   # -> eps0 as alpha -> inf
    1.0
  """
  b = _validate.check_positive(scale, "scale")
  d = _validate.check_positive(sensitivity, "sensitivity")
  a = _validate.check_orders(orders)
  e = d / b
  c = (a - 1.0) / (2.0 * a - 1.0) * np.expm1(-(2.0 * a - 1.0) * e)
  return e + np.log1p(c) / (a - 1.0)


@_validate.names_extreme_arguments
def randomized_response_rdp(epsilon: float, orders, num_buckets: int = 2) -> np.ndarray:
  """RDP of k-ary randomized response with pure-DP parameter `epsilon` (exact).

  The true value is reported with probability e^eps / (e^eps + k - 1), each other with
  1 / (e^eps + k - 1); neighbours replace one record. float64[A], increasing to `epsilon`.

  Examples:
    >>> round(float(randomized_response_rdp(1.0, [2])[0]), 6)
    0.735326
  """
  e = _validate.check_epsilon(epsilon)
  k = _validate.check_int(num_buckets, "num_buckets", minimum=2)
  a = _validate.check_orders(orders)
  log_norm = np.logaddexp(e, math.log(k - 1))          # log(e^eps + k - 1)
  lp1, lp2 = e - log_norm, -log_norm                   # log p_true, log p_other
  terms = [a * lp1 + (1 - a) * lp2, a * lp2 + (1 - a) * lp1]
  if k > 2:
    terms.append(np.full_like(a, math.log(k - 2) + lp2))
  return special.logsumexp(np.stack(terms), axis=0) / (a - 1.0)


# ----------------------------------------------------------------------------
# Poisson-subsampled Gaussian


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
      # Rows in pieces so that the [rows, alpha_max] term matrix stays within
      # _GRID_CHUNK entries (one row can reach _MAX_EXACT_INT_ORDER).
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
  """Upper bounds on log A_alpha at fractional alphas, from the integer orders around.

  log A_alpha is convex in alpha (Hoelder) and log A_1 = 0, so for k < alpha < k + 1

      log A_alpha <= (k + 1 - alpha) log A_k + (alpha - k) log A_{k + 1}.

  Returns the smaller of this and the Gaussian bound alpha (alpha - 1) / (2 sigma^2).
  """
  k = np.floor(alphas)
  ints = np.unique(np.concatenate([k[k >= 2], k + 1.0]))
  table = dict(zip(ints.tolist(), _log_a_int(q, sigma, ints).tolist()))
  table[1.0] = 0.0
  la_k = np.array([table[v] for v in k.tolist()])
  la_k1 = np.array([table[v] for v in (k + 1.0).tolist()])
  return np.minimum((k + 1.0 - alphas) * la_k + (alphas - k) * la_k1,
                    alphas * (alphas - 1.0) / (2.0 * sigma * sigma))


@_validate.names_extreme_arguments
def subsampled_gaussian_rdp(sampling_prob: float, noise_multiplier: float,
                            orders) -> np.ndarray:
  """Exact RDP of one step of the Poisson-subsampled Gaussian mechanism.

  Each record is included with probability q in (0, 1]; the sum has L2 sensitivity 1
  (clip norm C) and gets N(0, sigma^2 C^2) noise; neighbours add or remove one record.
  Work is bounded: for sigma below about 0.02, fractional orders the quadrature cannot
  afford get the upper bound of `_log_a_frac_bound`, and integer orders above
  `_MAX_EXACT_INT_ORDER` get alpha / (2 sigma^2). Every value is exact or an upper bound.

  Returns:
    float64[A] RDP of ONE step at orders [A] (multiply by T for T steps).

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


# ----------------------------------------------------------------------------
# conversion


def _check_rdp_curve(orders, rdp_values) -> tuple[np.ndarray, np.ndarray]:
  """(orders [A], rdp_values [A]): orders > 1; rdp_values >= 0, inf allowed."""
  a = _validate.check_orders(orders)
  r = _validate.check_array(np.atleast_1d(rdp_values), "rdp_values", shape=a.shape, low=0.0,
                            allow_inf=True)
  return a, r


@_validate.names_extreme_arguments(finite=False)
def rdp_to_epsilon(orders, rdp_values, delta: float,
                   method: str = "balle2020") -> tuple[float, float]:
  """Converts an RDP curve into the smallest eps with (eps, delta)-DP.

  classic (Mironov 2017, Prop. 3): eps = min_a rho(a) + log(1/delta) / (a - 1).
  balle2020 (Balle et al. 2020, Thm 21; default, never larger than classic):
      eps = min_a rho(a) + log1p(-1/a) - (log delta + log a) / (a - 1).
  Both use eps = 0 when delta >= sqrt(1 - exp(-rho(a))) (Pinsker/KL bound; rho is
  nondecreasing in a and bounds the KL divergence). orders [A] > 1, composed rdp_values
  [A] (inf allowed), delta in (0, 1). Returns (epsilon, optimal_order); epsilon is inf
  when every order is inf.

  Examples:
    >>> orders = np.arange(2, 65)
    >>> eps, a = rdp_to_epsilon(orders, orders / 2.0, 1e-5, method="classic")
    >>> round(eps, 3), int(a)   # min_a a/2 + ln(1e5)/(a-1), lecture exercise 3(b)
    (5.303, 6)
  """
  a, r = _check_rdp_curve(orders, rdp_values)
  delta = _validate.check_delta(delta)
  _validate.check_choice(method, _METHODS, "method")
  log_delta = math.log(delta)
  with np.errstate(invalid="ignore", over="ignore"):
    if method == "classic":
      eps = r - log_delta / (a - 1.0)
    else:
      eps = r + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
    kl_zero = np.isfinite(r) & (delta * delta + np.expm1(-r) > 0)
  eps = np.where(kl_zero, 0.0, eps)
  eps = np.where(np.isnan(eps), np.inf, eps)
  k = int(np.argmin(eps))
  return max(0.0, float(eps[k])), float(a[k])


@_validate.names_extreme_arguments(finite=False)
def rdp_to_delta(orders, rdp_values, epsilon: float,
                 method: str = "balle2020") -> tuple[float, float]:
  """Converts an RDP curve into the smallest delta with (epsilon, delta)-DP.

  classic: log delta = (a - 1)(rho(a) - eps).
  balle2020 (default): log delta = (a - 1)(rho(a) - eps + log1p(-1/a)) - log a.
  Both also use delta <= sqrt(1 - exp(-rho(a))). Orders [A], rho [A], eps >= 0.
  Returns (delta, optimal_order), delta at most 1.

  Examples:
    >>> orders = np.arange(2, 65)
    >>> d, _ = rdp_to_delta(orders, orders / 2.0, 5.31, method="classic")
    >>> d < 1e-5
    True
  """
  a, r = _check_rdp_curve(orders, rdp_values)
  e = _validate.check_epsilon(epsilon, allow_zero=True)
  _validate.check_choice(method, _METHODS, "method")
  with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
    if method == "classic":
      log_d = (a - 1.0) * (r - e)
    else:
      log_d = (a - 1.0) * (r - e + np.log1p(-1.0 / a)) - np.log(a)
    log_kl = 0.5 * np.log1p(-np.exp(-r))
  log_d = np.minimum(np.where(np.isnan(log_d), np.inf, log_d), log_kl)
  k = int(np.argmin(log_d))
  return float(min(1.0, math.exp(min(float(log_d[k]), 0.0)))), float(a[k])


@_validate.names_extreme_arguments
def dpsgd_rdp(noise_multiplier: float, sampling_prob: float, num_steps: int,
              orders=None) -> tuple[np.ndarray, np.ndarray]:
  """Composed RDP curve of T steps of DP-SGD (Poisson sampling).

  Returns:
    (orders [A], rdp [A]).
  """
  steps = _validate.check_int(num_steps, "num_steps")
  orders = DEFAULT_ORDERS if orders is None else _validate.check_orders(orders)
  return orders, steps * subsampled_gaussian_rdp(sampling_prob, noise_multiplier, orders)


# ----------------------------------------------------------------------------
# repeat and select (private hyperparameter tuning)


def repeat_shape(shape) -> float:
  """The shape parameter as eta in [0, inf]; inf (or "poisson") is the Poisson law."""
  if isinstance(shape, str) and shape == "poisson":
    return math.inf
  return _validate.check_range(shape, "shape", 0.0, allow_inf=True)


def _tnb_mean_from_log_gamma(log_gamma: float, eta: float) -> float:
  """E[K] of the truncated negative binomial with log(gamma) = L < 0 and shape eta:
  eta (1/gamma - 1) / (1 - gamma^eta), or (1/gamma - 1) / log(1/gamma) at eta = 0."""
  el = -log_gamma
  if eta == 0.0:
    return math.expm1(el) / el
  return eta * math.expm1(el) / -math.expm1(-eta * el)


@_validate.names_extreme_arguments
def truncated_negative_binomial_log_gamma(mean_runs: float, shape: float) -> float:
  """log(gamma) <= 0 of the truncated negative binomial with shape eta and E[K] = mean_runs.

  The law (Papernot & Steinke 2022, Definition 1) on k = 1, 2, ... is
  P[K = k] = (1 - gamma)^k / (gamma^-eta - 1) * prod_{l<k} (l + eta) / (l + 1) for
  eta > 0 and P[K = k] = (1 - gamma)^k / (k log(1/gamma)) for eta = 0 (logarithmic);
  eta = 1 is geometric with gamma = 1 / mean. mean_runs >= 1 (1 gives gamma = 1), eta >= 0
  finite. Bisection returns the bracket end with E[K] >= mean_runs (the larger bound).

  Examples:
    >>> round(math.exp(truncated_negative_binomial_log_gamma(10.0, 1.0)), 12)
    0.1
  """
  mu = _validate.check_range(mean_runs, "mean_runs", 1.0)
  eta = _validate.check_range(shape, "shape", 0.0)
  if mu == 1.0:
    return 0.0
  if eta == 1.0:
    return -math.log(mu)
  # gamma <= 2 (eta + 1) / mu since E[K] <= 2 (eta + 1) / gamma; the lower end
  # is pushed down until E[K] >= mu there. `lo` only ever holds points with
  # E[K] >= mu, so the answer errs on the conservative side.
  lo = -math.log1p(mu)
  while _tnb_mean_from_log_gamma(lo, eta) < mu:
    lo *= 2.0
  hi = min(0.0, math.log(2.0 * (eta + 1.0) / mu))
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if mid <= lo or mid >= hi:
      break
    if _tnb_mean_from_log_gamma(mid, eta) >= mu:
      lo = mid
    else:
      hi = mid
  return lo


@_validate.names_extreme_arguments(finite=False)
def repeat_and_select_rdp(orders, rdp_values, *, mean_runs: float, shape) -> np.ndarray:
  """RDP of running a mechanism Q a random number K of times and releasing only the best run.

  Papernot & Steinke, "Hyperparameter Tuning with Renyi Differential Privacy", ICLR 2022,
  https://arxiv.org/abs/2110.03620. A draws K, runs Q K times on the same data (each run
  with its own hyperparameters and randomness) and outputs the best-scoring run (nothing if
  K = 0). Q's whole output, the candidate AND its score, must satisfy the RDP curve
  `rdp_values`; a score computed without privacy on private data is not covered.

  * Truncated negative binomial K, shape eta >= 0 (0 logarithmic, 1 geometric), gamma from
    E[K] = mean_runs (`truncated_negative_binomial_log_gamma`). Theorem 2: if Q is
    (lambda, eps)-RDP and (lambdahat, epshat)-RDP, A is (lambda, eps')-RDP with

        eps' = eps + (1 + eta) (1 - 1/lambdahat) epshat
                   + (1 + eta) log(1/gamma) / lambdahat + log(E[K]) / (lambda - 1),

    minimised over lambdahat in the given orders.
  * Poisson K with mean mu (shape = "poisson" or math.inf). Theorem 6: if Q is
    (lambda, eps)-RDP and (epshat, deltahat)-DP with epshat = log(1 + 1/(lambda - 1)),
    A is (lambda, eps + mu deltahat + log(mu) / (lambda - 1))-RDP; deltahat comes from
    Q's curve by `rdp_to_delta`.

  The result is replaced by its envelope out(a) = min_{b >= a} out(b) (Renyi divergence is
  nondecreasing in the order). mean_runs must be >= 1; mean_runs == 1 with a truncated law
  means K = 1 (the input curve's envelope is returned). Orders [A] > 1 serve as both lambda
  and lambdahat; an order whose input is inf gives inf. Returns float64[A], an RDP curve
  of A.

  Examples:
    >>> orders = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    >>> out = repeat_and_select_rdp(orders, gaussian_rdp(4.0, orders), mean_runs=10, shape=1)
    >>> bool(np.all(out >= gaussian_rdp(4.0, orders)))
    True
  """
  a, r = _check_rdp_curve(orders, rdp_values)
  eta = repeat_shape(shape)
  mu = _validate.check_range(mean_runs, "mean_runs", 1.0)
  with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
    if math.isinf(eta):
      eps_hat = np.log1p(1.0 / (a - 1.0))                        # [A] one per lambda
      log_d = ((a[None, :] - 1.0) * (r[None, :] - eps_hat[:, None]
                                     + np.log1p(-1.0 / a[None, :])) - np.log(a[None, :]))
      log_d = np.where(np.isnan(log_d), np.inf, log_d)
      log_kl = 0.5 * np.log1p(-np.exp(-r))                        # [A]
      log_d = np.minimum(log_d, log_kl[None, :])
      delta_hat = np.minimum(1.0, np.exp(np.minimum(log_d.min(axis=1), 0.0)))
      out = r + mu * delta_hat + math.log(mu) / (a - 1.0)
    elif mu == 1.0:
      out = r.copy()
    else:
      log_inv_gamma = -truncated_negative_binomial_log_gamma(mu, eta)
      c = (1.0 + eta) * np.min((1.0 - 1.0 / a) * r + log_inv_gamma / a)
      out = r + math.log(mu) / (a - 1.0) + c
  out = np.where(np.isnan(out), np.inf, out)
  order = np.argsort(a, kind="stable")
  env = np.minimum.accumulate(out[order][::-1])[::-1]
  result = np.empty_like(out)
  result[order] = env
  return result
