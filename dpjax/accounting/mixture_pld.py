"""PLD of the mixture-of-Gaussians mechanism: a Gaussian whose sensitivity is random.

A query whose change under one record is a random shift C (with a known finite law
P[C = c_i] = p_i, c_i >= 0, along one fixed direction) gets N(0, sigma^2) noise. Under
add/remove neighbours the output pair is

    P = sum_i p_i N(c_i, sigma^2)   against   Q = N(0, sigma^2)

(remove; add swaps the two). This covers Poisson sampling (C in {0, 1}), capped user
contributions (C = the number of a user's records that are sampled, at most the cap) and
balls-in-bins / random-allocation shifts (Choquette-Choo et al. 2023,
https://arxiv.org/abs/2310.15526). In units of sigma (mu_i = c_i / sigma) the remove loss

    L(x) = log sum_i p_i exp(mu_i x - mu_i^2 / 2)

is increasing and convex in x, so {L <= l} = {X <= x(l)}: the PLD is read off the two
Gaussian-mixture CDFs at x(l) (found by bisection to float64 resolution) and
discretised pessimistically ("connect the dots", `pld_pmfs.discretise`); mass outside
the grid moves up or to +inf. Host NumPy float64.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy import special

from dpjax import _validate
from dpjax.accounting import pld
from dpjax.accounting import pld_grid, pld_pmfs

_BISECTIONS = 120


def check_mixture(sensitivities, probs) -> tuple[np.ndarray, np.ndarray]:
  """(c [K], p [K]) with c_i >= 0 finite, some c_i > 0, p_i > 0 summing to 1 (rtol 1e-9).

  Zero-probability entries are dropped; p is renormalised to sum to exactly 1.
  """
  c = _validate.check_array(sensitivities, "sensitivities", ndim=1, low=0.0, min_size=1)
  p = _validate.check_array(probs, "probs", ndim=1, low=0.0, high=1.0, min_size=1)
  if p.shape != c.shape:
    raise ValueError(f"probs must have the shape of sensitivities {c.shape}, got {p.shape}")
  if abs(float(p.sum()) - 1.0) > 1e-9:
    raise ValueError(f"probs must sum to 1, got {float(p.sum())!r}")
  keep = p > 0
  c, p = c[keep], p[keep]
  if not np.any(c > 0):
    raise ValueError("sensitivities must have a positive entry with positive probability "
                     "(an all-zero shift releases nothing about the record)")
  return c, p / p.sum()


def _mixture_loss(log_p: np.ndarray, mu: np.ndarray):
  """The remove loss x -> L(x) = log sum_i p_i exp(mu_i x - mu_i^2 / 2), increasing in x."""
  return lambda x: special.logsumexp(
      log_p + np.multiply.outer(np.asarray(x, np.float64), mu) - mu * mu / 2, axis=-1)


def _mixture_pmfs(mu: np.ndarray, p: np.ndarray, h: float, tail: float
                  ) -> tuple[pld_grid.LossPmf, pld_grid.LossPmf]:
  """(remove, add) loss pmfs for shifts mu [K] (units of sigma) with weights p [K]."""
  log_p = np.log(p)
  mu_max = float(mu.max())
  loss = _mixture_loss(log_p, mu)
  x_far = -60.0 - mu_max
  floor = float(loss(x_far))

  def x_of(l):   # x with L(x) = l; -inf where l is below L's range on [x_far, inf)
    l = np.asarray(l, np.float64)
    m = mu_max
    top = log_p[int(np.argmax(mu))]
    lo = np.full(l.shape, x_far)
    hi = np.maximum((l - top + m * m / 2) / m, x_far) + 1.0   # L(x) >= top + m x - m^2/2
    for _ in range(_BISECTIONS):
      mid = 0.5 * (lo + hi)
      below = loss(mid) < l
      lo = np.where(below, mid, lo)
      hi = np.where(below, hi, mid)
    return np.where(l <= floor, -np.inf, hi)

  def mix_sf(x):
    return special.logsumexp(log_p + special.log_ndtr(mu - x[..., None]), axis=-1)

  def mix_cdf(x):
    return special.logsumexp(log_p + special.log_ndtr(x[..., None] - mu), axis=-1)

  def tails_remove(l):
    x = x_of(l)
    return mix_sf(x), mix_cdf(x), special.log_ndtr(-x), special.log_ndtr(x)

  def tails_add(l):
    x = x_of(-l)   # {L_add > l} = {X < x(-l)}
    return special.log_ndtr(x), special.log_ndtr(-x), mix_cdf(x), mix_sf(x)

  z = -float(special.ndtri(tail / 2))
  rem = pld_pmfs.discretise(tails_remove, float(loss(-z)), float(loss(mu_max + z)), h)
  add = pld_pmfs.discretise(tails_add, -float(loss(z)), -float(loss(-z)), h)
  return rem, add


@_validate.names_extreme_arguments
def mixture_of_gaussians_pld(noise_multiplier: float, sensitivities, probs,
                             value_discretization: Optional[float] = None,
                             tail_mass: float = pld.DEFAULT_TAIL_MASS
                             ) -> pld.PrivacyLossDistribution:
  """PLD of N(0, sigma^2) noise on a query whose shift is c_i with probability p_i.

  Args:
    noise_multiplier: sigma > 0, in the units of the shifts.
    sensitivities: c [K], entries >= 0, one > 0 (the shifts along one direction).
    probs: p [K], >= 0, summing to 1.
    value_discretization: grid spacing h > 0 (default 1e-4).
    tail_mass: P-mass per direction left outside the grid, in (0, 1e-3].

  Returns:
    A discretised add/remove PLD (both directions held; answers are upper bounds).

  Examples:
    >>> d = mixture_of_gaussians_pld(1.0, [0.0, 1.0], [0.9, 0.1])   # Poisson q = 0.1
    >>> round(d.epsilon(1e-5), 3)
    1.685
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  c, p = check_mixture(sensitivities, probs)
  h = pld.DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else (
      _validate.check_positive(value_discretization, "value_discretization"))
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  return pld.PrivacyLossDistribution(pmfs=_mixture_pmfs(c / sigma, p, h, tail),
                                     value_discretization=h)


def _replace_one_pmf(m: float, q: float, h: float, tail: float) -> pld_grid.LossPmf:
  """Loss pmf of P = (1-q) N(0,1) + q N(m,1) against Q = (1-q) N(0,1) + q N(-m,1), q < 1.

  With k = 1 - q, c = q e^{-m^2/2}: L(x) = log(k + c e^{mx}) - log(k + c e^{-mx}),
  increasing; u = e^{m x(l)} is the positive root of c u^2 + k (1 - e^l) u - c e^l = 0.
  Q is P mirrored, so this one pmf is both directions.
  """
  log_k, log_q = math.log1p(-q), math.log(q)
  log_c = log_q - m * m / 2

  def loss(x):
    x = np.asarray(x, np.float64)
    return np.logaddexp(log_k, log_c + m * x) - np.logaddexp(log_k, log_c - m * x)

  def x_of(l):
    l = np.asarray(l, np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
      lc = np.minimum(l, 700.0)
      a = np.exp(lc)
      k, c = math.exp(log_k), math.exp(log_c)
      root = np.sqrt((k * (a - 1.0)) ** 2 + 4.0 * c * c * a)
      up = np.log(k * (a - 1.0) + root) - math.log(2.0 * c)          # a >= 1: no cancellation
      down = math.log(2.0 * c) + lc - np.log(k * (1.0 - a) + root)    # a < 1 (roots' product -a)
      log_u = np.where(l >= 0, up, down)
      log_u = np.where(l > 700.0, l + log_k - log_c, log_u)
    return log_u / m

  def tails(l):
    x = x_of(l)
    return (np.logaddexp(log_k + special.log_ndtr(-x), log_q + special.log_ndtr(m - x)),
            np.logaddexp(log_k + special.log_ndtr(x), log_q + special.log_ndtr(x - m)),
            np.logaddexp(log_k + special.log_ndtr(-x), log_q + special.log_ndtr(-m - x)),
            np.logaddexp(log_k + special.log_ndtr(x), log_q + special.log_ndtr(x + m)))

  z = -float(special.ndtri(tail / 2))
  return pld_pmfs.discretise(tails, float(loss(-z)), float(loss(m + z)), h)


@_validate.names_extreme_arguments
def replace_one_subsampled_gaussian_pld(noise_multiplier: float, sampling_prob: float,
                                        value_discretization: Optional[float] = None,
                                        tail_mass: float = pld.DEFAULT_TAIL_MASS
                                        ) -> pld.PrivacyLossDistribution:
  """PLD of the Poisson-subsampled Gaussian when neighbours replace one record.

  Each record is sampled with probability q; the replaced record contributes a or b,
  ||a||, ||b|| <= C, to the noised sum. noise_multiplier sigma is relative to the
  replace-one sensitivity 2C (noise std 2 sigma C), as for `events.GaussianEvent` under
  replace-one, so q = 1 is the Gaussian with mu = 1 / sigma. The worst case is a = -b
  along one direction: in units of the noise std, with m = 1 / (2 sigma),

      P = (1-q) N(0, 1) + q N(m, 1)   against   Q = (1-q) N(0, 1) + q N(-m, 1),

  the pair dp_accounting uses for REPLACE_ONE (`privacy_loss_mechanism`, adjacency
  REPLACE; Zhu, Dong & Wang 2022, https://arxiv.org/abs/2106.08567). The loss is
  increasing and inverted in closed form; the pair is symmetric, so one pmf serves both
  directions. Discretised pessimistically on a grid of spacing h (default 1e-4).

  Examples:
    >>> d = replace_one_subsampled_gaussian_pld(0.5, 0.1)
    >>> round(d.epsilon(1e-5), 3)
    1.789
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  h = pld.DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else (
      _validate.check_positive(value_discretization, "value_discretization"))
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  if q == 1.0:
    return pld.PrivacyLossDistribution(mu=1.0 / sigma, value_discretization=h)
  return pld.PrivacyLossDistribution(pmfs=(_replace_one_pmf(0.5 / sigma, q, h, tail),),
                                     value_discretization=h)


# ---- RDP of the same pairs, from their loss laws.
# Orders in blocks (1, 2], (2, 4], ...: each block on its own grid of _RDP_POINTS points in the
# output coordinate, reaching _RDP_MARGIN noise units past the block's integrand peak (beyond
# it, rigorous bounds whose slack is ~e^{-_RDP_MARGIN^2 / 2}).
_RDP_POINTS = 2 ** 15
_RDP_MARGIN = 12.0


def _log_sub(la, lb) -> np.ndarray:
  """log(e^la - e^lb), -inf where la <= lb (elementwise)."""
  la, lb = np.asarray(la, np.float64), np.asarray(lb, np.float64)
  with np.errstate(invalid="ignore", divide="ignore"):
    out = la + np.log(-np.expm1(np.minimum(lb - la, 0.0)))
  return np.where(np.isfinite(la) & (lb < la), out, -np.inf)


def _lse_rows(x: np.ndarray) -> np.ndarray:
  """logsumexp over the last axis of a [A, J] array (rows of -inf give -inf)."""
  top = np.max(x, axis=-1)
  safe = np.where(np.isfinite(top), top, 0.0)
  with np.errstate(divide="ignore"):
    return np.log(np.exp(x - safe[..., None]).sum(axis=-1)) + safe


def _log_mix(log_w: np.ndarray, t: np.ndarray, y: np.ndarray, upper: bool) -> np.ndarray:
  """log P(Y > y) (upper) or log P(Y <= y) of Y ~ sum_k e^{log_w_k} N(t_k, 1), [J]."""
  z = (t[None, :] - y[:, None]) if upper else (y[:, None] - t[None, :])
  return _lse_rows(log_w[None, :] + special.log_ndtr(z))


def _log_moments(loss, p_law, q_law, slope: float, log_amp, orders: np.ndarray) -> np.ndarray:
  """Upper bounds on log E_P[e^{(a-1) L}], [A], for one ordered pair (P, Q) of Gaussian
  mixtures in a coordinate y (p_law, q_law: (log weights [K], means [K]), unit variance) whose
  loss L = loss(y) = log dP/dQ increases; for y >= Y, L(y) <= log_amp(Y) + slope (y - Y).

  On a grid y_0 < ... < y_J (losses l_j), each interval's P- and Q-mass moves to its end
  losses keeping both masses (connect-the-dots on a non-uniform loss grid): e^{(a-1) l} is
  convex in e^{-l}, so this never lowers the moment; P-mass below y_0 moves up to l_0. Above
  y_J the linear bound integrates in closed form. All in log space (masses far below 1e-308
  still count at large orders).
  """
  (lwp, tp), (lwq, tq) = p_law, q_law
  out = np.empty_like(orders)
  block = np.ceil(np.log2(np.maximum(orders, 1.0 + 1e-12))).astype(int)
  for b in np.unique(block):
    sel = block == b
    a = orders[sel]
    y_top = float(a.max() - 1.0) * slope + float(tp.max()) + _RDP_MARGIN
    y = np.linspace(float(tp.min()) - _RDP_MARGIN, y_top, _RDP_POINTS)
    l = np.asarray(loss(y), np.float64)
    masses = []
    for lw, t in ((lwp, tp), (lwq, tq)):
      sf, cdf = _log_mix(lw, t, y, True), _log_mix(lw, t, y, False)
      use_sf = sf[:-1] <= math.log(0.5)
      masses.append(np.where(use_sf, _log_sub(sf[:-1], sf[1:]), _log_sub(cdf[1:], cdf[:-1])))
    log_dp, log_dq = masses
    dl = np.maximum(np.diff(l), 1e-300)
    log_up = np.minimum(_log_sub(log_dp, l[:-1] + log_dq) - np.log(-np.expm1(-dl)), log_dp)
    log_lo = _log_sub(log_dp, log_up)
    atom_l = np.concatenate([l[1:], l[:-1], l[:1]])
    atom_m = np.concatenate([log_up, log_lo, _log_mix(lwp, tp, y[:1], False)])
    keep = np.isfinite(atom_m)
    atom_m, atom_l = atom_m[keep], atom_l[keep]
    main = _lse_rows(atom_m[None, :] + (a - 1.0)[:, None] * atom_l[None, :])
    lam = (a - 1.0) * slope
    tail = (a - 1.0) * float(log_amp(y_top)) + _lse_rows(
        lwp[None, :] + lam[:, None] * (tp[None, :] - y_top) + lam[:, None] ** 2 / 2
        + special.log_ndtr(tp[None, :] + lam[:, None] - y_top))
    # Small moments: log1p(sum_j m_j expm1((a-1) l_j) + tail) keeps their digits (the atoms
    # hold at most the P-mass 1, so dropping the missing mass only raises the bound).
    small = main < 1e-2
    if np.any(small):
      e = (a[small] - 1.0)[:, None] * atom_l[None, :]
      with np.errstate(over="ignore"):
        s = np.where(e > 1.0, np.exp(np.minimum(atom_m[None, :] + e, 700.0))
                     - np.exp(atom_m)[None, :],
                     np.exp(atom_m)[None, :] * np.expm1(np.minimum(e, 1.0))).sum(axis=1)
      main = main.copy()
      main[small] = np.log1p(np.maximum(s + np.exp(tail[small]), -0.5))
      tail = np.where(small, -np.inf, tail)
    out[sel] = np.logaddexp(main, tail)
  return out


@_validate.names_extreme_arguments
def mixture_of_gaussians_rdp(noise_multiplier: float, sensitivities, probs,
                             orders) -> np.ndarray:
  """RDP upper bound float64[A] of the mixture-of-Gaussians mechanism, add/remove neighbours.

  The module's pair (sigma = noise_multiplier), both orders (remove, add). Each direction's
  moment E[e^{(alpha-1) L}] is bounded by connect-the-dots on a grid of its loss
  plus a closed-form tail (`_log_moments`): upper bounds, within ~(alpha - 1) dl^2 / 8 of
  exact (dl the loss step, ~ slope * 1e-3). Never above alpha max_i c_i^2 / (2 sigma^2)
  (Renyi divergence is quasi-convex). (c, p) = ((0, 1), (1 - q, q)) is the Poisson-subsampled
  Gaussian (`subsampled_rdp`, exact). Orders (> 1) [A].

  Examples:
    >>> r = mixture_of_gaussians_rdp(2.0, [0.0, 1.0, 2.0], [0.5, 0.3, 0.2], [2.0, 8.0])
    >>> bool(np.all(r < np.array([2.0, 8.0]) * 4 / 8))   # below the unsampled alpha c^2/2s^2
    True
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  c, p = check_mixture(sensitivities, probs)
  a = _validate.check_orders(orders)
  mu = c / sigma
  log_p = np.log(p)
  zero = (np.zeros(1), np.zeros(1))
  loss = _mixture_loss(log_p, mu)
  remove = _log_moments(loss, (log_p, mu), zero, float(mu.max()),
                        lambda y: float(loss(np.array([y]))[0]), a)
  # add: y = -x; P = N(0, 1), Q = sum_i p_i N(-mu_i, 1); the loss -L(-y) is at most
  # -log p0 + mu0^2 / 2 + mu0 y (L(x) >= log p0 + mu0 x - mu0^2 / 2, mu0 the smallest shift).
  mu0 = float(mu.min())
  log_p0 = float(special.logsumexp(log_p[mu == mu0]))
  add = _log_moments(lambda y: -loss(-y), zero, (log_p, -mu), mu0,
                     lambda y: -log_p0 + mu0 * mu0 / 2 + mu0 * y, a)
  with np.errstate(over="ignore"):
    cap = a * float(mu.max()) ** 2 / 2
  return np.minimum(np.maximum(np.maximum(remove, add), 0.0) / (a - 1.0), cap)


@_validate.names_extreme_arguments
def replace_one_subsampled_gaussian_rdp(noise_multiplier: float, sampling_prob: float,
                                        orders) -> np.ndarray:
  """RDP upper bound float64[A] of the Poisson-subsampled Gaussian under replace-one.

  The mechanism and the symmetric pair of `replace_one_subsampled_gaussian_pld` (sigma
  relative to the replace-one sensitivity 2C, m = 1 / (2 sigma)); its moment is bounded as in
  `mixture_of_gaussians_rdp`. Never above the unsampled alpha / (2 sigma^2) (q = 1, exact).
  (dp_accounting 0.6's RDP accountant refuses Poisson sampling under replace-one.)

  Examples:
    >>> r = replace_one_subsampled_gaussian_rdp(1.0, 0.01, [2.0, 32.0])
    >>> bool(np.all(r < np.array([2.0, 32.0]) / 2 * 0.01))   # far below the q = 1 value
    True
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  a = _validate.check_orders(orders)
  with np.errstate(over="ignore"):
    cap = a / (2.0 * sigma * sigma)
  if q == 1.0:
    return cap
  m = 0.5 / sigma
  log_k, log_q = math.log1p(-q), math.log(q)

  def loss(x):
    return (np.logaddexp(log_k, log_q + m * x - m * m / 2)
            - np.logaddexp(log_k, log_q - m * x - m * m / 2))

  # For x >= Y: k + q e^{mx - m^2/2} <= e^{m (x - Y)} (k + q e^{mY - m^2/2}); denominator >= k.
  amp = lambda y: float(np.logaddexp(log_k, log_q + m * y - m * m / 2)) - log_k
  weights = np.array([log_k, log_q])
  moments = _log_moments(loss, (weights, np.array([0.0, m])), (weights, np.array([0.0, -m])),
                         m, amp, a)
  return np.minimum(np.maximum(moments, 0.0) / (a - 1.0), cap)


__all__ = ["check_mixture", "mixture_of_gaussians_pld", "mixture_of_gaussians_rdp",
           "replace_one_subsampled_gaussian_pld", "replace_one_subsampled_gaussian_rdp"]
