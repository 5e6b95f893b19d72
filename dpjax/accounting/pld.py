"""Privacy loss distributions (PLD): numerical composition by FFT, pessimistic.

For output distributions (P, Q) of a mechanism on neighbours, the privacy loss is
L(o) = log(P(o) / Q(o)) with o ~ P, and the privacy profile is

    delta(eps) = P[L = inf] + E_P[(1 - exp(eps - L))_+].

T-fold composition is the T-fold convolution of one step's PLD (Koskela, Jalko & Honkela
2020; Meiser & Mohammadi 2018; Doroshenko et al. 2022), done here by FFT on a grid of
spacing h (`value_discretization`).

Discretisation is pessimistic ("connect the dots"): the P- and Q-mass of each loss
interval (l_{i-1}, l_i] moves to its end points, l_i getting P-mass
(dP - e^{l_{i-1}} dQ) / (1 - e^{-h}). The two-point pair dominates the interval's, so
every delta(eps), composed or not, is an upper bound, exact at grid points (error O(h^2)
between). Mass outside the grid or the FFT window (bounded by Chernoff) moves to the
bottom point, the top point or +inf, never lower.

`dpsgd_epsilon` halves h from 1e-2 until the estimated error (eps(2h) - eps(h)) /
(2^p - 1), order p in [1, 2] from three consecutive grids, is at most rtol * eps. It is
an estimate, not a bound: the truth lies in [eps - error, eps] whenever it holds.

Rounding caveat: an FFT power leaves an absolute float64 noise floor of about
k * 1e-16 * max(pmf) per grid point, which swamps delta below ~1e-12, so a plain
composition can then be off in either direction (`epsilon` / `delta` warn).
`dpsgd_epsilon` also composes the PLD exponentially tilted to the previous grid's answer
and untilts it exactly, keeping the noise near eps at ~1e-16 relative.

Plain Gaussians (q = 1) compose in closed form (mu = sqrt(sum mu_i^2); `gdp`). Neighbours
are add/remove-one: a Poisson-subsampled Gaussian has a remove PLD (P = (1-q) N(0, s^2)
+ q N(1, s^2) against Q = N(0, s^2)) and an add PLD (swapped); both are composed and
every answer is the worse of the two. Runs on the host in NumPy float64.

Examples:
  >>> round(dpsgd_epsilon(1.0, 0.01, 1000, 1e-5), 3)
  1.828
  >>> pld = gaussian_pld(2.0).self_compose(100)   # exact: mu = 5
  >>> round(pld.epsilon(1e-5), 4)
  33.1037
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, Optional

import numpy as np
from scipy import fft as sp_fft
from scipy import signal, special

from dpjax import _validate
from dpjax.accounting import gdp

# Default grid spacing of `gaussian_pld` / `laplace_pld` when none is given.
DEFAULT_VALUE_DISCRETIZATION = 1e-4
# Default P-mass left outside the per-step loss range (moved pessimistically).
DEFAULT_TAIL_MASS = 1e-20
# Chernoff tail mass allowed outside the FFT window of a self-composition.
_WINDOW_TAIL_MASS = 1e-22
# Largest grid (points) we allocate: 2^23 float64 is 64 MiB.
_MAX_POINTS = 1 << 23

_LAMBDAS = np.geomspace(1e-3, 1e4, 36)


class _GridTooLarge(ValueError):
  """A grid would need more than _MAX_POINTS points."""


# ----------------------------------------------------------------------------
# one discretised direction


@dataclasses.dataclass(frozen=True)
class _Pmf:
  """P-side PLD on the grid: mass probs[j] at loss (offset + j) * h, plus +inf.

  `noise` estimates the absolute float64 FFT rounding error per grid point (0 when fresh).
  """
  h: float
  offset: int
  probs: np.ndarray
  infinity_mass: float
  noise: float = 0.0

  def noise_in_delta(self, epsilon: float) -> float:
    """Rough rounding error of delta(epsilon): noise per point times points above eps."""
    if self.noise == 0.0:
      return 0.0
    # Clamped in float before the int conversion: eps / h is inf for eps near 1.8e308.
    index = min(float(self.probs.size), max(0.0, math.floor(min(epsilon / self.h, 2.0 ** 62))
                                              - float(self.offset)))
    above = self.probs.size - int(index)
    if above == 0:       # no grid point above eps: delta is the exact infinity mass
      return 0.0
    return self.noise * math.sqrt(max(above, 1))

  @property
  def losses(self) -> np.ndarray:
    return (self.offset + np.arange(self.probs.size)) * self.h

  def _tails(self):
    """(S_P[i], log S_Q[i]) = sums over j > i of p_j and of p_j e^{-l_j}."""
    p = self.probs
    l = self.losses
    sp = np.concatenate([np.cumsum(p[::-1])[::-1][1:], [0.0]])
    if l[-1] - l[0] < 600:   # plain cumulative sums, scaled by e^{l_max}
      with np.errstate(divide="ignore"):
        sq = np.cumsum((p * np.exp(l[-1] - l))[::-1])[::-1]
        lq = np.concatenate([np.log(sq[1:]) - l[-1], [-np.inf]])
    else:   # wide range: log space
      with np.errstate(divide="ignore"):
        logq = np.log(p) - l
      lq = np.concatenate([np.logaddexp.accumulate(logq[::-1])[::-1][1:], [-np.inf]])
    return sp, lq

  def delta(self, epsilon: float) -> float:
    l = self.losses
    above = l > epsilon
    with np.errstate(over="ignore"):
      terms = self.probs[above] * -np.expm1(epsilon - l[above])
    return float(min(1.0, self.infinity_mass + terms.sum()))

  def epsilon(self, delta: float) -> float:
    if self.infinity_mass > delta:
      return math.inf
    # Losses below 0 never contribute to delta(eps) at eps >= 0: drop them.
    j0 = max(0, min(self.probs.size - 1, -self.offset))
    if j0 > 0:
      return _Pmf(self.h, self.offset + j0, self.probs[j0:], self.infinity_mass,
                  self.noise).epsilon(delta)
    l = self.losses
    sp, lq = self._tails()
    with np.errstate(over="ignore", invalid="ignore"):
      d = self.infinity_mass + sp - np.exp(l + lq)   # delta at each grid point
    ok = np.flatnonzero(d <= delta)
    if ok.size == 0:   # cannot happen: d[-1] = infinity_mass <= delta
      return math.inf
    i = int(ok[0])
    if i == 0:
      # delta(eps) for eps <= l_0 is (1 - inf - ... ) linear in e^eps; solve it.
      s_p, l_q = self.infinity_mass + self.probs.sum(), _logsumexp(np.log(
          np.maximum(self.probs, 1e-300)) - l)
    else:
      s_p, l_q = self.infinity_mass + sp[i - 1], lq[i - 1]
    # On (l_{i-1}, l_i]: delta(eps) = s_p - e^eps * S_Q  =>  eps = log((s_p - delta) / S_Q).
    num = s_p - delta
    if num <= 0 or not np.isfinite(l_q):
      eps = l[i]
    else:
      eps = min(math.log(num) - l_q, l[i])
    return max(0.0, float(eps))


def _logsumexp(x: np.ndarray) -> float:
  m = np.max(x)
  if not np.isfinite(m):
    return float(m)
  return float(m + np.log(np.sum(np.exp(x - m))))


def _log_diff(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
  """log(e^la - e^lb), clipped at -inf when lb >= la."""
  with np.errstate(invalid="ignore", divide="ignore"):
    d = np.minimum(lb - la, 0.0)
    out = la + np.log(-np.expm1(d))
  return np.where(np.isfinite(la) & (lb < la), out, -np.inf)


def _discretise(tails: Callable, lo: float, hi: float, h: float) -> _Pmf:
  """Connect-the-dots discretisation of one (P, Q) pair with monotone losses.

  Args:
    tails: maps losses l [L] to (log P(L > l), log P(L <= l), log Q(L > l),
      log Q(L <= l)), each [L], accurate in both tails.
    lo, hi: loss range to grid; mass below lo moves up to the bottom grid point,
      mass above hi is split between the top grid point and +inf.
    h: grid spacing.
  """
  i_lo, i_hi = math.floor(lo / h), math.ceil(hi / h)
  if i_hi <= i_lo:
    i_hi = i_lo + 1
  n = i_hi - i_lo + 1
  if n > _MAX_POINTS:
    raise _GridTooLarge(
        f"value_discretization={h} needs {n} grid points for losses in "
        f"[{lo:.3g}, {hi:.3g}] (more than {_MAX_POINTS}); use a larger value_discretization")
  l = (i_lo + np.arange(n)) * h
  gp, hp, gq, hq = tails(l)
  # Interval masses (l_{j-1}, l_j], j = 1..n-1: difference of whichever tail is smaller.
  use_g = gp[:-1] <= math.log(0.5)
  log_dp = np.where(use_g, _log_diff(gp[:-1], gp[1:]), _log_diff(hp[1:], hp[:-1]))
  use_gq = gq[:-1] <= math.log(0.5)
  log_dq = np.where(use_gq, _log_diff(gq[:-1], gq[1:]), _log_diff(hq[1:], hq[:-1]))
  dp = np.exp(log_dp)
  with np.errstate(over="ignore", invalid="ignore"):
    up = (dp - np.exp(l[:-1] + log_dq)) / -math.expm1(-h)
  up = np.clip(np.nan_to_num(up, nan=0.0, posinf=0.0), 0.0, dp)
  probs = np.zeros(n)
  probs[1:] += up
  probs[:-1] += dp - up
  probs[0] += math.exp(hp[0])                       # lower tail moves up to l_0
  with np.errstate(over="ignore"):
    top = min(math.exp(gp[-1]), math.exp(min(l[-1] + gq[-1], 700.0)))
  probs[-1] += top                                  # upper tail: ratio e^{l_n} part
  inf_mass = max(0.0, math.exp(gp[-1]) - top)       # the rest goes to +inf
  return _trim(_Pmf(h, i_lo, probs, inf_mass))


def _trim(pmf: _Pmf, tail: float = 0.0) -> _Pmf:
  """Drops end entries pessimistically: bottom mass moves up, top mass to +inf."""
  p = pmf.probs
  c_lo = np.cumsum(p)
  c_hi = np.cumsum(p[::-1])
  a = int(np.searchsorted(c_lo, tail, side="right"))
  b = p.size - int(np.searchsorted(c_hi, tail, side="right"))
  if a >= b:   # keep at least one point
    a, b = min(a, p.size - 1), min(a, p.size - 1) + 1
  q = p[a:b].copy()
  q[0] += c_lo[a - 1] if a > 0 else 0.0
  extra = c_hi[p.size - b - 1] if b < p.size else 0.0
  return _Pmf(pmf.h, pmf.offset + a, q, min(1.0, pmf.infinity_mass + extra), pmf.noise)


def _compose_pair(a: _Pmf, b: _Pmf) -> _Pmf:
  if a.h != b.h:
    raise ValueError(f"value_discretization differs: {a.h} vs {b.h}")
  if a.probs.size * b.probs.size < 1 << 16:
    c = np.convolve(a.probs, b.probs)
  else:
    c = signal.fftconvolve(a.probs, b.probs)
  c = np.maximum(c, 0.0)
  inf = 1.0 - (1.0 - a.infinity_mass) * (1.0 - b.infinity_mass)
  noise = a.noise + b.noise + 2.2e-16 * float(c.max()) * math.log2(max(c.size, 2))
  return _trim(_Pmf(a.h, a.offset + b.offset, c, inf, noise), _WINDOW_TAIL_MASS)


def _log_mgf(pmf: _Pmf, lambdas: np.ndarray) -> np.ndarray:
  """log sum_j p_j e^{lambda l_j} for each lambda, [K], exact in log space (k-fold
  composition multiplies any per-step slack by k)."""
  keep = pmf.probs > 0
  lp = np.log(pmf.probs[keep])
  l = pmf.losses[keep]
  x = lp[None, :] + lambdas[:, None] * l[None, :]
  m = x.max(axis=1)
  return m + np.log(np.exp(x - m[:, None]).sum(axis=1))


def _coarsen(pmf: _Pmf, factor: int) -> _Pmf:
  """The same PLD on the nested grid of spacing factor * h, by connect-the-dots.

  Each atom at l in [c, c + H) is split between c and c + H keeping its P- and Q-mass, so
  the coarse pair dominates: E_P[e^{lambda L}] is at least as large for every lambda > 0.
  """
  if factor <= 1:
    return pmf
  big_h = pmf.h * factor
  idx = pmf.offset + np.arange(pmf.probs.size)
  ci = np.floor_divide(idx, factor)
  r = (idx - ci * factor) * pmf.h
  up = pmf.probs * (-np.expm1(-r)) / -math.expm1(-big_h)
  base = int(ci.min())
  size = int(ci.max()) - base + 2
  probs = (np.bincount(ci - base, weights=pmf.probs - up, minlength=size)
           + np.bincount(ci - base + 1, weights=up, minlength=size))
  return _Pmf(big_h, base, probs, pmf.infinity_mass)


def _int_power(f: np.ndarray, k: int) -> np.ndarray:
  """f ** k for complex f and integer k >= 1 by repeated squaring (fast, ~log2 k roundings)."""
  out = None
  base = f
  while True:
    if k & 1:
      out = base.copy() if out is None else out * base
    k >>= 1
    if not k:
      return out
    base = base * base


def _tilt_theta(coarse: _Pmf, k: int, target: float) -> float:
  """theta > 0 whose exponential tilt centres the k-fold sum at `target` (0 if none)."""
  keep = coarse.probs > 0
  lp, l = np.log(coarse.probs[keep]), coarse.losses[keep]

  def mean(theta):
    w = lp + theta * l
    e = np.exp(w - w.max())
    return float((e * l).sum() / e.sum())

  if k * mean(0.0) >= target or k * l.max() <= target:
    return 0.0
  lo, hi = 0.0, 1.0
  while k * mean(hi) < target and hi < 1e4:
    lo, hi = hi, hi * 2
  for _ in range(40):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if k * mean(mid) < target else (lo, mid)
  return 0.5 * (lo + hi)


def _cyclic_power(probs: np.ndarray, k: int, n_fft: int, shift: int, width: int) -> np.ndarray:
  """k-fold cyclic self-convolution (size n_fft) rolled by `shift`, first `width` entries, >= 0."""
  p = probs
  if p.size > n_fft:   # fold modulo n_fft: the cyclic convolution is unchanged
    p = np.bincount(np.arange(p.size) % n_fft, weights=p, minlength=n_fft)
  r = sp_fft.irfft(_int_power(sp_fft.rfft(p, n_fft), k), n_fft)
  return np.maximum(np.roll(r, -shift)[:width], 0.0)


def _self_compose(pmf: _Pmf, k: int, tail_mass: float = _WINDOW_TAIL_MASS,
                  tilt_at: Optional[float] = None, noise_tolerance: float = 0.0) -> _Pmf:
  """k-fold convolution by one FFT power on a Chernoff-sized window.

  The window holds all but `tail_mass` (Chernoff bound) of each tail. Mass above it goes
  to +inf; mass below wraps to the top of the window. Both are pessimistic, so delta(eps)
  grows by at most 2 * tail_mass. With `tilt_at`, the pmf tilted to
  p_j e^{theta l_j - K(theta)} (centred at tilt_at) is also composed and untilted exactly
  (times e^{k K(theta) - theta l}); each grid point takes the one with the lower noise
  floor. The tilt is skipped when the plain floor, summed over the window, is below
  `noise_tolerance`.
  """
  if k == 1:
    return pmf
  h = pmf.h
  l = pmf.losses
  lo_triv, hi_triv = k * l[0], k * l[-1]
  log_tail = math.log(tail_mass)
  # Chernoff: P(S >= u) <= exp(k K(lam) - lam u); P(S <= u) <= exp(k K(-lam) + lam u).
  # K is computed on a coarser nested grid (an upper bound for lam > 0, see
  # `_coarsen`; the lower side needs no rigour: mass below the window wraps to
  # higher losses). The coarsening keeps k * H^2 small so the window stays tight.
  factor = int(max(1, min(256, (0.1 / math.sqrt(k)) / h)))
  coarse = _coarsen(pmf, factor)
  with np.errstate(over="ignore", invalid="ignore"):
    kp = k * _log_mgf(coarse, _LAMBDAS)
    km = k * _log_mgf(coarse, -_LAMBDAS)
  hi_u = float(np.nanmin((kp - log_tail) / _LAMBDAS))
  lo_u = float(np.nanmax((log_tail - km) / _LAMBDAS))
  theta = 0.0 if tilt_at is None else _tilt_theta(coarse, k, tilt_at)
  if theta > 0:
    # The tilted sum has a heavier upper tail: widen the window to hold it too.
    with np.errstate(over="ignore", invalid="ignore"):
      kt = k * (_log_mgf(coarse, theta + _LAMBDAS) - _log_mgf(coarse, np.array([theta]))[0])
    hi_u = max(hi_u, float(np.nanmin((kt - log_tail) / _LAMBDAS)))
  hi = min(hi_triv, hi_u)
  lo = max(lo_triv, lo_u)
  tail_hi = 0.0 if hi >= hi_triv else float(np.exp(np.nanmin(kp - _LAMBDAS * hi)))
  i_lo, i_hi = math.floor(lo / h), math.ceil(hi / h)
  width = i_hi - i_lo + 1
  if width > _MAX_POINTS:
    raise _GridTooLarge(
        f"composing {k} times at value_discretization={h} needs {width} grid points "
        f"(more than {_MAX_POINTS}); use a larger value_discretization")
  n_fft = sp_fft.next_fast_len(width, real=True)
  # entry (j_true mod n_fft) of the cyclic result holds loss (k * offset + j_true) h.
  shift = (i_lo - k * pmf.offset) % n_fft
  out = _cyclic_power(pmf.probs, k, n_fft, shift, width)
  floor = k * 2.2e-16 * float(out.max()) * math.sqrt(width)
  noise = k * 2.2e-16 * float(out.max()) + k * pmf.noise
  if theta > 0 and floor > noise_tolerance:
    with np.errstate(divide="ignore"):
      w = np.log(pmf.probs) + theta * l
    log_k = _logsumexp(w)   # K(theta) on the finite part, exact
    tilted = _cyclic_power(np.exp(w - log_k), k, n_fft, shift, width)
    log_factor = k * log_k - theta * (i_lo + np.arange(width)) * h
    peak_t, peak = tilted.max(), out.max()
    if peak_t > 0 and peak > 0:
      use = log_factor + math.log(peak_t) < math.log(peak)
      out = np.where(use, tilted * np.exp(np.minimum(log_factor, 700.0)), out)
      # the floor that matters now is the tilted one at tilt_at
      at = k * log_k - theta * tilt_at
      noise = min(noise, k * 2.2e-16 * float(peak_t) * math.exp(min(at, 700.0)) + k * pmf.noise)
  inf = -math.expm1(k * math.log1p(-pmf.infinity_mass)) if pmf.infinity_mass < 1 else 1.0
  return _trim(_Pmf(h, i_lo, out, min(1.0, inf + tail_hi), noise),
               min(tail_mass, _WINDOW_TAIL_MASS))


# ----------------------------------------------------------------------------
# mechanisms


def _ndtri_c(p: float) -> float:
  """z with Phi(-z) = p."""
  return -float(special.ndtri(p))


def _subsampled_gaussian_pmfs(mu: float, q: float, h: float, tail: float
                              ) -> tuple[_Pmf, ...]:
  """Remove and add PLDs of the Poisson-subsampled Gaussian, in units of sigma.

  Remove: P = (1-q) N(0,1) + q N(mu,1), Q = N(0,1); L(x) = log(1 - q + q e^{mu x - mu^2/2}).
  Add: P = N(0,1), Q = the mixture; the loss is -L(x).
  """
  log_q = math.log(q)
  log_1mq = math.log1p(-q) if q < 1 else -math.inf

  def loss(x):   # remove-direction loss at x, increasing
    return np.logaddexp(log_1mq, log_q + mu * x - mu * mu / 2)

  def x_of(l):   # inverse of `loss`; -inf at or below log(1-q)
    l = np.asarray(l, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
      if q < 1:
        t = np.log(np.maximum(np.expm1(l) + q, 0.0)) - log_q
        t = np.where(l > 30, l + np.log1p(-(1 - q) * np.exp(-np.minimum(l, 700))) - log_q, t)
      else:
        t = l
    return (t + mu * mu / 2) / mu

  def mix_sf(x):   # log P_mix(X > x)
    return np.logaddexp(log_1mq + special.log_ndtr(-x), log_q + special.log_ndtr(mu - x))

  def mix_cdf(x):
    return np.logaddexp(log_1mq + special.log_ndtr(x), log_q + special.log_ndtr(x - mu))

  def tails_remove(l):
    x = x_of(l)
    return mix_sf(x), mix_cdf(x), special.log_ndtr(-x), special.log_ndtr(x)

  def tails_add(l):
    x = x_of(-l)   # {L_add > l} = {X < x}
    return special.log_ndtr(x), special.log_ndtr(-x), mix_cdf(x), mix_sf(x)

  z = _ndtri_c(tail / 2)
  x_hi = max(mu + _ndtri_c(min(0.5, tail / (2 * q))), z)
  rem = _discretise(tails_remove, float(loss(-z)), float(loss(x_hi)), h)
  if q == 1.0:
    return (rem,)
  add = _discretise(tails_add, -float(loss(z)), -log_1mq, h)
  return (rem, add)


def _laplace_pmf(eps0: float, h: float) -> _Pmf:
  """PLD of Lap(0, 1) against Lap(eps0, 1) (symmetric in the two directions)."""

  def log_cdf(y):   # standard Laplace
    y = np.asarray(y, np.float64)
    with np.errstate(divide="ignore", over="ignore"):
      return np.where(y < 0, y - math.log(2), np.log1p(-0.5 * np.exp(-np.abs(y))))

  def tails(l):
    y = (eps0 - l) / 2   # {L > l} = {X < y} for -eps0 <= l < eps0
    gp, hp = log_cdf(y), log_cdf(-y)
    gq, hq = log_cdf(y - eps0), log_cdf(eps0 - y)
    above, below = l >= eps0, l < -eps0
    gp = np.where(above, -np.inf, np.where(below, 0.0, gp))
    gq = np.where(above, -np.inf, np.where(below, 0.0, gq))
    hp = np.where(above, 0.0, np.where(below, -np.inf, hp))
    hq = np.where(above, 0.0, np.where(below, -np.inf, hq))
    return gp, hp, gq, hq

  return _discretise(tails, -eps0, eps0, h)


def _atoms_pmf(losses: np.ndarray, p_masses: np.ndarray, h: float) -> _Pmf:
  """PLD of a finite-output mechanism: P-mass p_masses[i] at loss losses[i] (finite)."""
  q_masses = p_masses * np.exp(-losses)

  def tails(l):
    above = losses[None, :] > l[:, None]
    with np.errstate(divide="ignore"):
      gp = np.log(np.where(above, p_masses[None, :], 0.0).sum(axis=1))
      hp = np.log(np.where(~above, p_masses[None, :], 0.0).sum(axis=1))
      gq = np.log(np.where(above, q_masses[None, :], 0.0).sum(axis=1))
      hq = np.log(np.where(~above, q_masses[None, :], 0.0).sum(axis=1))
    return gp, hp, gq, hq

  return _discretise(tails, float(losses.min()), float(losses.max()), h)


# ----------------------------------------------------------------------------
# the public object


class PrivacyLossDistribution:
  """A PLD for add/remove-one neighbours: exact (Gaussian) or discretised.

  Build with `gaussian_pld` or `laplace_pld`, combine with `compose` / `self_compose`,
  read `epsilon(delta)` or `delta(epsilon)`. Discretised answers are upper bounds (up to
  float64 FFT rounding, ~1e-16 per grid point).
  """

  def __init__(self, *, mu: Optional[float] = None,
               pmfs: Optional[tuple[_Pmf, ...]] = None,
               value_discretization: float = DEFAULT_VALUE_DISCRETIZATION):
    if (mu is None) == (pmfs is None):
      raise ValueError("exactly one of mu (exact Gaussian) and pmfs must be given")
    if mu is not None:
      mu = _validate.check_positive(mu, "mu")
    value_discretization = _validate.check_positive(value_discretization,
                                                    "value_discretization")
    self._mu = mu
    self._pmfs = pmfs
    self._h = float(value_discretization)

  @property
  def is_exact(self) -> bool:
    """True when the PLD is a composition of Gaussians kept in closed form."""
    return self._mu is not None

  @property
  def mu(self) -> Optional[float]:
    """mu-GDP parameter when exact, else None."""
    return self._mu

  @property
  def value_discretization(self) -> float:
    return self._h

  @property
  def num_points(self) -> int:
    """Grid points held (0 when exact)."""
    return 0 if self._pmfs is None else sum(p.probs.size for p in self._pmfs)

  def loss_pmf(self, direction: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """(losses float64[J], probs float64[J], mass at +inf) of one direction of a
    discretised PLD (0: the first neighbour's side, 1: the other's, where held).

    Raises ValueError for an exact (Gaussian, closed-form) PLD: `discretise()` first.
    """
    if self._pmfs is None:
      raise ValueError("loss_pmf needs a discretised PLD: call discretise() first")
    direction = _validate.check_int(direction, "direction", 0, len(self._pmfs) - 1)
    p = self._pmfs[direction]
    return p.losses, p.probs.copy(), float(p.infinity_mass)

  def _discretised(self, h: float) -> tuple[_Pmf, ...]:
    if self._pmfs is not None:
      return self._pmfs
    return _subsampled_gaussian_pmfs(self._mu, 1.0, h, DEFAULT_TAIL_MASS)

  def discretise(self, value_discretization: Optional[float] = None
                 ) -> "PrivacyLossDistribution":
    """This PLD on a grid of spacing h (default its own); a no-op unless exact."""
    h = self._h if value_discretization is None else _validate.check_positive(
        value_discretization, "value_discretization")
    if not self.is_exact:
      if h != self._h:
        raise ValueError(f"value_discretization of a discretised PLD is fixed ({self._h}), got {h}")
      return self
    return PrivacyLossDistribution(pmfs=self._discretised(h), value_discretization=h)

  def compose(self, other: "PrivacyLossDistribution") -> "PrivacyLossDistribution":
    """PLD of running this mechanism and then `other` (adaptively) on the same data."""
    if not isinstance(other, PrivacyLossDistribution):
      raise ValueError(f"other must be a PrivacyLossDistribution, got {type(other)}")
    if self.is_exact and other.is_exact:
      return PrivacyLossDistribution(mu=math.hypot(self._mu, other._mu),
                                     value_discretization=self._h)
    if not self.is_exact and not other.is_exact and self._h != other._h:
      raise ValueError(f"value_discretization must match: {self._h} vs {other._h}")
    h = other._h if self.is_exact else self._h
    a, b = self._discretised(h), other._discretised(h)
    if len(a) != len(b):   # a symmetric PLD serves both directions
      a = a * 2 if len(a) == 1 else a
      b = b * 2 if len(b) == 1 else b
    return PrivacyLossDistribution(
        pmfs=tuple(_compose_pair(x, y) for x, y in zip(a, b)), value_discretization=h)

  def self_compose(self, k: int) -> "PrivacyLossDistribution":
    """PLD of k adaptive runs of this mechanism; k an integer >= 1."""
    k = _validate.check_int(k, "k")
    if self.is_exact:
      return PrivacyLossDistribution(mu=self._mu * math.sqrt(k), value_discretization=self._h)
    return PrivacyLossDistribution(pmfs=tuple(_self_compose(p, k) for p in self._pmfs),
                                   value_discretization=self._h)

  def epsilon(self, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= delta (an upper bound when discretised)."""
    delta = _validate.check_delta(delta)
    if self.is_exact:
      return gdp.gaussian_epsilon(delta, self._mu)
    eps = max(p.epsilon(delta) for p in self._pmfs)
    self._warn_noise(delta, eps)
    return eps

  def delta(self, epsilon: float) -> float:
    """delta(eps) = sup over events of P(S) - e^eps Q(S), the worse direction."""
    e = _validate.check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    if self.is_exact:
      return 0.0 if math.isinf(e) else gdp.gaussian_delta(e, self._mu)
    d = max(p.delta(e) for p in self._pmfs)
    self._warn_noise(d, e)
    return d

  def rounding_noise(self, epsilon: float) -> float:
    """Estimated float64 rounding error of delta(epsilon) (0 when exact or freshly gridded)."""
    if self.is_exact or not math.isfinite(epsilon):
      return 0.0
    return max(p.noise_in_delta(epsilon) for p in self._pmfs)

  def _warn_noise(self, delta: float, epsilon: float) -> None:
    noise = self.rounding_noise(epsilon)
    if noise > 1e-3 * delta:
      warnings.warn(
          f"delta = {delta:.3g} is within the FFT rounding noise (~{noise:.2g}) of this "
          "composed PLD, so the answer may be off in either direction; use "
          "pld.dpsgd_epsilon (which tilts the FFT towards the answer) or a larger delta",
          RuntimeWarning, stacklevel=3)

  def __repr__(self) -> str:
    if self.is_exact:
      return f"PrivacyLossDistribution(exact Gaussian, mu={self._mu:.6g})"
    return (f"PrivacyLossDistribution(discretised, h={self._h:g}, "
            f"directions={len(self._pmfs)}, points={self.num_points})")


def finite_output_pld(log_probs_in_K, log_probs_out_K,
                      value_discretization: float = DEFAULT_VALUE_DISCRETIZATION
                      ) -> PrivacyLossDistribution:
  """The PLD (both directions) of a mechanism with K outputs.

  Output k has probability exp(log_probs_in_K[k]) on one neighbour and
  exp(log_probs_out_K[k]) on the other (float[K], finite, <= 0); the losses
  log P_in / P_out and their negatives are gridded pessimistically at spacing h.

  Examples:
    >>> import math
    >>> lp = [math.log(0.75), math.log(0.25)]          # randomized response at ln 3
    >>> d = finite_output_pld(lp, lp[::-1], 1e-4).delta(1.0)
    >>> round(d, 4), round(0.75 - math.e * 0.25, 4)     # exact: 3/4 - e/4
    (0.0704, 0.0704)
  """
  a = _validate.check_array(log_probs_in_K, "log_probs_in_K", ndim=1, min_size=1, high=0.0)
  b = _validate.check_array(log_probs_out_K, "log_probs_out_K", shape=a.shape, high=0.0)
  h = _validate.check_positive(value_discretization, "value_discretization")
  return PrivacyLossDistribution(pmfs=(_atoms_pmf(a - b, np.exp(a), h),
                                       _atoms_pmf(b - a, np.exp(b), h)),
                                 value_discretization=h)


def gaussian_pld(noise_multiplier: float, sampling_prob: float = 1.0,
                 sensitivity: float = 1.0,
                 value_discretization: Optional[float] = None,
                 tail_mass: float = DEFAULT_TAIL_MASS) -> PrivacyLossDistribution:
  """PLD of one (Poisson-subsampled) Gaussian mechanism, add/remove-one neighbours.

  Noise N(0, sigma^2), sigma = noise_multiplier > 0, on a query of L2 sensitivity
  `sensitivity` (mu = sensitivity / sigma); sampling_prob q in (0, 1], q < 1 being Poisson
  sampling. value_discretization h > 0 (default 1e-4) is ignored for q = 1, which stays
  exact until composed with a discretised PLD. tail_mass in (0, 1e-3] is the P-mass per
  direction left outside the grid (moved pessimistically).

  Examples:
    >>> round(gaussian_pld(1.0).epsilon(1e-5), 4)
    4.3772
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  s = _validate.check_positive(sensitivity, "sensitivity")
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  mu = s / sigma
  if q == 1.0:
    return PrivacyLossDistribution(mu=mu, value_discretization=h)
  return PrivacyLossDistribution(pmfs=_subsampled_gaussian_pmfs(mu, q, h, tail),
                                 value_discretization=h)


def laplace_pld(scale: float, sensitivity: float = 1.0,
                value_discretization: Optional[float] = None) -> PrivacyLossDistribution:
  """PLD of the Laplace mechanism Lap(scale) on a query of L1 sensitivity `sensitivity`.

  The loss lies in [-eps0, eps0], eps0 = sensitivity / scale (atoms at both ends), so no
  tail is cut; add and remove give the same PLD. Grid spacing h defaults to 1e-4.

  Examples:
    >>> round(laplace_pld(1.0).epsilon(1e-9), 4)   # pure 1-DP
    1.0
  """
  b = _validate.check_positive(scale, "scale")
  s = _validate.check_positive(sensitivity, "sensitivity")
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  return PrivacyLossDistribution(pmfs=(_laplace_pmf(s / b, h),), value_discretization=h)


def randomized_response_pld(epsilon: float, num_buckets: int = 2,
                            value_discretization: Optional[float] = None
                            ) -> PrivacyLossDistribution:
  """PLD of k-ary randomized response that is exactly epsilon-DP (replace-one).

  The true value is reported with probability e^eps / (e^eps + k - 1), each other value
  with 1 / (e^eps + k - 1). The loss is +eps, -eps or 0 (three atoms, both directions),
  so the PLD is exact when eps is a multiple of h (default 1e-4).

  Examples:
    >>> round(randomized_response_pld(1.0).epsilon(1e-6), 4)
    1.0
  """
  e = _validate.check_epsilon(epsilon)
  k = _validate.check_int(num_buckets, "num_buckets", minimum=2)
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  z = math.exp(e) + k - 1
  losses = np.array([e, -e, 0.0])
  masses = np.array([math.exp(e) / z, 1.0 / z, (k - 2) / z])
  keep = masses > 0
  return PrivacyLossDistribution(pmfs=(_atoms_pmf(losses[keep], masses[keep], h),),
                                 value_discretization=h)


# ----------------------------------------------------------------------------
# DP-SGD with an adaptive grid


@dataclasses.dataclass(frozen=True)
class PldResult:
  """An adaptive PLD answer.

  Attributes:
    value: the upper bound (eps for `dpsgd_epsilon_bound`, delta for `dpsgd_delta_bound`).
    error: estimated discretisation error, value(2h) - value(h) >= value - truth
      (0 when exact).
    value_discretization: the grid spacing h used (0 when exact).
    exact: True when computed in closed form (q = 1).
  """
  value: float
  error: float
  value_discretization: float
  exact: bool


def _adaptive(value_at_h: Callable[[float], float], rtol: float, atol: float,
              h_start: float = 1e-2, h_min: float = 1e-9) -> tuple[float, float, float]:
  """Refines nested grids h_start / 2^m until the estimated discretisation error is small.

  The error of v(h) is estimated as (v(2h) - v(h)) / (2^p - 1), with order p in [1, 2]
  from the last three grids (p = 1 before that). Stops when it is <= max(rtol * v, atol),
  at h_min, or when a finer grid would not fit in memory. Far from the target it jumps
  several halvings at once, to where an (optimistic) h^2 rate would meet it.

  Returns:
    (value at the finest h, error estimate, h).
  """
  h = h_start
  while True:   # coarsen until the first grid fits
    try:
      vals = {h: value_at_h(h)}
      break
    except _GridTooLarge:
      h *= 4
  p = 1.0
  err = math.inf
  while True:
    h_next = h / 2
    try:
      if h_next not in vals:
        vals[h_next] = value_at_h(h_next)
    except _GridTooLarge:
      warnings.warn(f"PLD grid limited by memory at h={h:g}; estimated error {err:.3g}",
                    RuntimeWarning, stacklevel=3)
      return vals[h], err, h
    v, diff = vals[h_next], abs(vals[h] - vals[h_next])
    if not math.isfinite(v):
      return v, 0.0, h_next
    if 2 * h in vals:
      prev = abs(vals[2 * h] - vals[h])
      if diff > 0 and prev > diff:
        p = float(np.clip(math.log2(prev / diff), 1.0, 2.0))
    err = diff / (2.0 ** p - 1.0)
    target = max(rtol * abs(v), atol)
    if err <= target or h_next <= h_min:
      return v, err, h_next
    # Halvings needed if the error falls like h^2 (the fine-grid rate; an
    # optimistic guess, so a jump never overshoots); jump when more than one.
    m = min(8, math.ceil(math.log2(err / target) / 2.0)) if err > 0 else 1
    if m >= 2 and 2 * h in vals:
      h = h_next / 2 ** (m - 1)   # next pair: (h, h / 2) with h = h_next / 2^(m-1)
      try:
        vals[h] = value_at_h(h)
      except _GridTooLarge:
        h = h_next
    else:
      h = h_next


def _dpsgd_pmfs(sigma: float, q: float, h: float, tail: float) -> tuple[_Pmf, ...]:
  return _subsampled_gaussian_pmfs(1.0 / sigma, q, h, tail)


def dpsgd_epsilon_bound(noise_multiplier: float, sampling_prob: float, num_steps: int,
                        delta: float, rtol: float = 1e-5) -> PldResult:
  """eps of DP-SGD (Poisson sampling, add/remove-one) with its discretisation error.

  sigma = noise_multiplier > 0 (noise std / clip norm), q = sampling_prob in (0, 1],
  T = num_steps >= 1, delta in (0, 1), rtol in (0, 0.1]. h is halved from 1e-2 until the
  estimated error is at most max(rtol * eps, 1e-9). Per-step tails are cut at P-mass
  1e-6 * delta / T and the FFT window drops Chernoff tails of 1e-6 * delta each (moved
  pessimistically), so the answer is the eps of a delta at most ~3e-6 * delta smaller
  than asked.

  Returns:
    PldResult: value = eps (an upper bound), error = estimated eps - eps_true.
    q = 1 is a Gaussian with mu = sqrt(T) / sigma, answered exactly.

  Examples:
    >>> r = dpsgd_epsilon_bound(1.0, 0.01, 1000, 1e-5)
    >>> round(r.value, 4), r.error < 1e-4
    (1.8283, True)
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  delta = _validate.check_delta(delta)
  rtol = _validate.check_range(rtol, "rtol", 0.0, 0.1, open_low=True)
  if q == 1.0:
    return PldResult(gdp.gaussian_epsilon(delta, math.sqrt(t) / sigma), 0.0, 0.0, True)
  tail = min(DEFAULT_TAIL_MASS * 1e5, 1e-6 * delta / t)

  # FFT window: tails of 1e-6 * delta each (pessimistic, see `_self_compose`);
  # FFT rounding noise is kept below ~1e-4 * delta by tilting when needed.
  window_tail = min(_WINDOW_TAIL_MASS * 1e6, 1e-6 * delta)

  last = []   # the previous grid's eps: where the next grid tilts its FFT

  def eps_at(h):
    tilt = last[-1] if last and math.isfinite(last[-1]) and last[-1] > 0 else None
    eps = max(_self_compose(p, t, window_tail, tilt, 1e-4 * delta).epsilon(delta)
              for p in _dpsgd_pmfs(sigma, q, h, tail))
    last.append(eps)
    return eps

  eps, err, h = _adaptive(eps_at, rtol, 1e-9)
  return PldResult(eps, err, h, False)


def dpsgd_epsilon(noise_multiplier: float, sampling_prob: float, num_steps: int,
                  delta: float, rtol: float = 1e-5) -> float:
  """eps (an upper bound) of T steps of DP-SGD by the PLD accountant.

  See `dpsgd_epsilon_bound` for the arguments and the error estimate.

  Examples:
    >>> round(dpsgd_epsilon(1.1, 256 / 60000, 14063, 1e-5), 3)
    2.382
  """
  return dpsgd_epsilon_bound(noise_multiplier, sampling_prob, num_steps, delta, rtol).value


def dpsgd_delta_bound(noise_multiplier: float, sampling_prob: float, num_steps: int,
                      epsilon: float, rtol: float = 1e-5) -> PldResult:
  """delta(eps) of DP-SGD by the PLD accountant, with its discretisation error.

  Arguments as in `dpsgd_epsilon_bound`; epsilon >= 0 finite, rtol the target relative
  error of delta in (0, 0.1]. Returns a PldResult with value = delta(eps) (an upper bound).
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  e = _validate.check_epsilon(epsilon, allow_zero=True)
  rtol = _validate.check_range(rtol, "rtol", 0.0, 0.1, open_low=True)
  if q == 1.0:
    return PldResult(gdp.gaussian_delta(e, math.sqrt(t) / sigma), 0.0, 0.0, True)

  def delta_at(h):
    return max(_self_compose(p, t).delta(e)
               for p in _dpsgd_pmfs(sigma, q, h, DEFAULT_TAIL_MASS))

  d, err, h = _adaptive(delta_at, rtol, 1e-300)
  return PldResult(d, err, h, False)


def dpsgd_delta(noise_multiplier: float, sampling_prob: float, num_steps: int,
                epsilon: float, rtol: float = 1e-5) -> float:
  """delta(eps) (an upper bound) of T steps of DP-SGD by the PLD accountant.

  Examples:
    >>> dpsgd_delta(1.0, 0.01, 1000, 1.83) < 1e-5
    True
  """
  return dpsgd_delta_bound(noise_multiplier, sampling_prob, num_steps, epsilon, rtol).value
