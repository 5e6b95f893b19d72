"""Discretised privacy loss distributions: the grid value type and its operations.

A `LossPmf` is one direction of a PLD: P-mass probs[j] at privacy loss (offset + j) h, plus
mass at +inf; delta(eps) = P[L = inf] + E_P[(1 - exp(eps - L))_+], L = log(P(o) / Q(o)).
Mechanisms' pmfs are gridded pessimistically by `pld_pmfs` ("connect the dots": an interval's
P- and Q-mass moves to its ends, l_i gets (dP - e^{l_{i-1}} dQ) / (1 - e^{-h})), so delta(eps)
is an upper bound, exact at grid points; mass cut off moves up. k-fold self-composition is one FFT power
on a Chernoff-sized window, optionally tilted and untilted exactly (Koskela, Jalko & Honkela
2020; Doroshenko et al. 2022); float64 noise ~k 1e-16 max(pmf) per point (`LossPmf.noise`).
Shapes: J grid points, L query losses. Host NumPy float64.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
from scipy import fft as sp_fft
from scipy import signal

DEFAULT_VALUE_DISCRETIZATION = 1e-4
# Default P-mass left outside the per-step loss range (moved pessimistically).
DEFAULT_TAIL_MASS = 1e-20
# Chernoff tail mass allowed outside the FFT window of a self-composition.
WINDOW_TAIL_MASS = 1e-22
# Largest grid (points) we allocate: 2^23 float64 is 64 MiB.
MAX_POINTS = 1 << 23
# Work budget of one k-fold self-composition, window points x log2(k) (the squarings): what
# MAX_POINTS points cost at k = 2^20. Checked before any FFT; past it GridTooLarge.
MAX_WORK = 20 * MAX_POINTS

_LAMBDAS = np.geomspace(1e-3, 1e4, 36)


class GridTooLarge(ValueError):
  """A grid would need more than MAX_POINTS points (`limit` "memory") or a composition more
  than MAX_WORK (`limit` "work budget")."""

  def __init__(self, message: str, limit: str = "memory"):
    super().__init__(message)
    self.limit = limit


@dataclasses.dataclass(frozen=True)
class LossPmf:
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
    index = min(float(self.probs.size),
                max(0.0, math.floor(min(epsilon / self.h, 2.0 ** 62)) - float(self.offset)))
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

  def grid_deltas(self) -> np.ndarray:
    """delta(l_j) at every grid loss l_j (float[J], exact for this pmf, O(J))."""
    sp, lq = self._tails()
    with np.errstate(over="ignore", invalid="ignore"):
      d = self.infinity_mass + sp - np.exp(self.losses + lq)
    return np.clip(np.nan_to_num(d, nan=0.0), 0.0, 1.0)

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
      return LossPmf(self.h, self.offset + j0, self.probs[j0:], self.infinity_mass, self.noise
                     ).epsilon(delta)
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
      s_p, l_q = self.infinity_mass + self.probs.sum(), _logsumexp(
          np.log(np.maximum(self.probs, 1e-300)) - l)
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


def trim(pmf: LossPmf, tail: float = 0.0) -> LossPmf:
  """Drops end entries pessimistically: bottom mass moves up, top mass to +inf."""
  p = pmf.probs
  # Only the ends can go (entries are >= 0): partial sums up to the first entry past tail.
  big = p > tail
  first = int(np.argmax(big)) if big.any() else p.size - 1
  last = p.size - 1 - int(np.argmax(big[::-1])) if big.any() else 0
  c_lo = np.cumsum(p[:first + 1])
  c_hi = np.cumsum(p[last:][::-1])
  a = int(np.searchsorted(c_lo, tail, side="right"))
  b = p.size - int(np.searchsorted(c_hi, tail, side="right"))
  if a >= b:   # keep at least one point
    a, b = min(a, p.size - 1), min(a, p.size - 1) + 1
  q = p[a:b].copy()
  q[0] += c_lo[a - 1] if a > 0 else 0.0
  extra = c_hi[p.size - b - 1] if b < p.size else 0.0
  return LossPmf(pmf.h, pmf.offset + a, q, min(1.0, pmf.infinity_mass + extra), pmf.noise)


def compose_pmfs(a: LossPmf, b: LossPmf) -> LossPmf:
  """The pmf of the sum of independent losses (a then b, same h), by direct or FFT
  convolution; +inf mass 1 - (1 - inf_a)(1 - inf_b); trimmed by WINDOW_TAIL_MASS."""
  if a.h != b.h:
    raise ValueError(f"value_discretization differs: {a.h} vs {b.h}")
  if a.probs.size * b.probs.size < 1 << 16:
    c = np.convolve(a.probs, b.probs)
  else:
    c = signal.fftconvolve(a.probs, b.probs)
  c = np.maximum(c, 0.0)
  inf = 1.0 - (1.0 - a.infinity_mass) * (1.0 - b.infinity_mass)
  noise = a.noise + b.noise + 2.2e-16 * float(c.max()) * math.log2(max(c.size, 2))
  return trim(LossPmf(a.h, a.offset + b.offset, c, inf, noise), WINDOW_TAIL_MASS)


def _log_mgf(pmf: LossPmf, lambdas: np.ndarray) -> np.ndarray:
  """log sum_j p_j e^{lambda l_j} for each lambda, [K], exact in log space."""
  keep = pmf.probs > 0
  lp = np.log(pmf.probs[keep])
  l = pmf.losses[keep]
  x = lp[None, :] + lambdas[:, None] * l[None, :]
  m = x.max(axis=1)
  return m + np.log(np.exp(x - m[:, None]).sum(axis=1))


def _coarsen(pmf: LossPmf, factor: int) -> LossPmf:
  """The same PLD on the grid of spacing factor * h, by connect-the-dots (dominating, so
  E_P[e^{lambda L}] does not shrink for lambda > 0)."""
  if factor <= 1:
    return pmf
  big_h = pmf.h * factor
  base = pmf.offset // factor
  lead = pmf.offset - base * factor          # the first point's place in its coarse cell
  cells = -(-(lead + pmf.probs.size) // factor)
  p = np.zeros(cells * factor)
  p[lead:lead + pmf.probs.size] = pmf.probs
  p = p.reshape(cells, factor)
  # a point r h above its cell's floor sends the share (1 - e^{-r h}) / (1 - e^{-f h}) up
  w = -np.expm1(-np.arange(factor) * pmf.h) / -math.expm1(-big_h)
  up = p @ w
  probs = np.zeros(cells + 1)
  probs[:-1] = p @ (1.0 - w)
  probs[1:] += up
  return LossPmf(big_h, base, probs, pmf.infinity_mass, pmf.noise * 2 * factor)


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


def _tilt_theta(coarse: LossPmf, k: int, target: float) -> float:
  """theta > 0 whose exponential tilt centres the k-fold sum at `target` (0 if none): the
  bracket [2^(j-1), 2^j] (j <= 14) holding it, then 2^-16 of it by grid searches (the mean
  is increasing in theta; any theta untilts exactly, it only needs to be near)."""
  keep = coarse.probs > 0
  lp, l = np.log(coarse.probs[keep]), coarse.losses[keep]

  def means(thetas):   # k E_theta[L] for each theta
    w = lp[None, :] + thetas[:, None] * l[None, :]
    e = np.exp(w - w.max(axis=1, keepdims=True))
    return k * (e @ l) / e.sum(axis=1)

  if means(np.zeros(1))[0] >= target or k * l.max() <= target:
    return 0.0
  his = 2.0 ** np.arange(15)
  j = min(int(np.count_nonzero(means(his) < target)), 14)   # hi = 2^j: 1, 2, ..., 16384
  lo, hi = (0.0 if j == 0 else his[j - 1]), his[j]
  n = 256 if l.size <= 4096 else 16
  for _ in range(round(16 / math.log2(n))):
    step = (hi - lo) / n
    c = int(np.count_nonzero(means(lo + step * np.arange(1, n)) < target))
    lo, hi = lo + c * step, lo + (c + 1) * step
  return 0.5 * (lo + hi)


def _cyclic_power(probs: np.ndarray, k: int, n_fft: int, shift: int, width: int) -> np.ndarray:
  """k-fold cyclic self-convolution (size n_fft) rolled by `shift`, first `width` entries, >= 0."""
  p = probs
  if p.size > n_fft:   # fold modulo n_fft: the cyclic convolution is unchanged
    p = np.bincount(np.arange(p.size) % n_fft, weights=p, minlength=n_fft)
  f = sp_fft.rfft(p, n_fft)
  # Frequencies whose k-th power is below 1e-300 (|f| <= 1) contribute nothing: zeroed
  # first, the squarings never meet subnormal numbers (which are slow).
  f[np.abs(f) < math.exp(-690.0 / k)] = 0.0
  r = sp_fft.irfft(_int_power(f, k), n_fft)
  end = shift + width
  r = r[shift:end] if end <= n_fft else np.concatenate([r[shift:], r[:end - n_fft]])
  return np.maximum(r, 0.0)


def _chernoff_window(pmf: LossPmf, k: int, tail_mass: float
                     ) -> tuple[LossPmf, np.ndarray, float, float]:
  """(coarse, k K(lambdas), lo, hi): the k-fold sum lies in [lo, hi] but for tail_mass per
  side, by Chernoff, P(S >= u) <= exp(k K(lam) - lam u) and P(S <= u) <= exp(k K(-lam) + lam u),
  K on a coarser grid (an upper bound for lam > 0; the lower side wraps upwards in the FFT,
  needing no rigour). lo and hi are not clipped to k times the pmf's range."""
  log_tail = math.log(tail_mass)
  factor = int(max(1, min(256, (0.1 / math.sqrt(k)) / pmf.h)))
  coarse = _coarsen(pmf, factor)
  with np.errstate(over="ignore", invalid="ignore"):
    kp = k * _log_mgf(coarse, _LAMBDAS)
    km = k * _log_mgf(coarse, -_LAMBDAS)
  hi_u = float(np.nanmin((kp - log_tail) / _LAMBDAS))
  lo_u = float(np.nanmax((log_tail - km) / _LAMBDAS))
  return coarse, kp, lo_u, hi_u


def _window_width(pmf: LossPmf, k: int, tail_mass: float) -> float:
  """Loss span of `self_compose`'s untilted window for k compositions."""
  if k <= 1:
    return pmf.probs.size * pmf.h
  _, _, lo_u, hi_u = _chernoff_window(pmf, k, tail_mass)
  l0, l1 = pmf.offset * pmf.h, (pmf.offset + pmf.probs.size - 1) * pmf.h
  return max(pmf.h, min(k * l1, hi_u) - max(k * l0, lo_u))


def blocking_factor(pmf: LossPmf, k: int, tail_mass: float = WINDOW_TAIL_MASS,
                    noise_tolerance: float = math.inf) -> int:
  """The coarsening factor f (a power of 2 near k^(1/4), or 1: one level) that makes
  `blocked_self_compose` of k steps (gridded at h / sqrt(2)) cheapest against `self_compose`
  at h (the same error). Cost: FFT points of the Chernoff windows (block, steps left over,
  the k-fold window on the grid f h / sqrt(2), twice where `_plain_floor`'s estimate passes
  noise_tolerance, as the tilt adds a power); two levels must cost 30% less than one."""
  h = pmf.h
  single = _window_width(pmf, k, tail_mass) / h
  p, l = pmf.probs / pmf.probs.sum(), pmf.losses
  var = max(float(p @ l ** 2) - float(p @ l) ** 2, h * h / 4)   # one step's
  best, best_cost = 1, single if single <= MAX_POINTS else math.inf
  centre = round(math.log2(max(k, 1)) / 4)
  for f in sorted({2 ** max(1, centre - 1), 2 ** max(1, centre), 2 ** max(1, centre + 1)}):
    if f > 64:   # before `_block_size`: its divisor search is O(f^2)
      continue
    m = _block_size(k, f)
    a, r = divmod(k, m)
    if a < 2:
      continue
    outer = math.sqrt(2) * single / f
    peak = min(1.0, f * h / math.sqrt(4 * math.pi * k * var))   # the outer's, grid f h / sqrt 2
    tilted = a * 2.2e-16 * peak * outer > noise_tolerance
    points = (math.sqrt(2) * (_window_width(pmf, m, tail_mass / a)
                              + _window_width(pmf, r, tail_mass)) / h + (1 + tilted) * outer)
    if points < (0.7 if best == 1 else 1.0) * best_cost:
      best, best_cost = f, points
  return best


def _plain_floor(coarse: LossPmf, k: int, h: float, lo_triv: float, lo_u: float,
                 hi_triv: float, hi_u: float) -> float:
  """Predicted float64 error of delta from a plain k-fold FFT power: k 2.2e-16 max(pmf) per
  point (each squaring rounds the low frequencies, |f| ~ 1), summed coherently over the
  window, max(pmf) from the Gaussian of the k-fold sum's variance."""
  p, l = coarse.probs, coarse.losses
  mass = float(p.sum())
  if mass <= 0:
    return 0.0
  mean = float(p @ l) / mass
  var = max(float(p @ (l - mean) ** 2) / mass, coarse.h ** 2 / 4)
  peak = min(1.0, h / math.sqrt(2 * math.pi * k * var))
  width = (min(hi_triv, hi_u) - max(lo_triv, lo_u)) / h + 1
  return k * 2.2e-16 * peak * width


def self_compose(pmf: LossPmf, k: int, tail_mass: float = WINDOW_TAIL_MASS,
                  tilt_at: Optional[float] = None, noise_tolerance: float = 0.0) -> LossPmf:
  """k-fold convolution by one FFT power on a window holding all but `tail_mass` (Chernoff)
  of each tail: mass above goes to +inf, mass below wraps to the top (delta grows <= 2
  tail_mass). With `tilt_at`, unless the plain power's predicted error (`_plain_floor`) is
  within `noise_tolerance`, the tilted pmf p_j e^{theta l_j - K(theta)} is composed (on a
  window widened for its heavier upper tail) and untilted exactly; the plain power too unless
  the tilted one is no noisier as read at the tilt, each point then taking the lower noise
  floor. GridTooLarge, before any FFT, past MAX_POINTS window points or MAX_WORK."""
  if k == 1:
    return pmf
  h = pmf.h
  l = pmf.losses
  lo_triv, hi_triv = k * l[0], k * l[-1]
  log_tail = math.log(tail_mass)
  coarse, kp, lo_u, hi_u = _chernoff_window(pmf, k, tail_mass)
  theta = 0.0
  if tilt_at is not None and _plain_floor(coarse, k, h, lo_triv, lo_u, hi_triv,
                                          hi_u) > noise_tolerance:
    theta = _tilt_theta(coarse, k, tilt_at)
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
  if width > MAX_POINTS:
    raise GridTooLarge(
        f"composing {k} times at value_discretization={h} needs {width} grid points "
        f"(more than {MAX_POINTS}); use a larger value_discretization")
  if width * math.log2(k) > MAX_WORK:
    raise GridTooLarge(
        f"composing {k} times at value_discretization={h} needs {width} grid points x "
        f"log2({k}) = {width * math.log2(k):.3g} (more than the work budget {MAX_WORK}); "
        "use a larger value_discretization", limit="work budget")
  inf = -math.expm1(k * math.log1p(-pmf.infinity_mass)) if pmf.infinity_mass < 1 else 1.0
  n_fft = sp_fft.next_fast_len(width, real=True)
  # entry (j_true mod n_fft) of the cyclic result holds loss (k * offset + j_true) h.
  shift = (i_lo - k * pmf.offset) % n_fft
  if theta > 0:
    with np.errstate(divide="ignore"):
      w = np.log(pmf.probs) + theta * l
    log_k = _logsumexp(w)   # K(theta) on the finite part, exact
    tilted = _cyclic_power(np.exp(w - log_k), k, n_fft, shift, width)
    log_factor = k * log_k - theta * (i_lo + np.arange(width)) * h
    peak_t = tilted.max()
    at = k * log_k - theta * tilt_at
    if peak_t > 0 and float(log_factor[0]) <= 700.0:
      # Read at the tilt point, directly or after composing further at this tilt, an error
      # e_j at loss l_j weighs ~e^{theta l_j}: the tilted power's noise (~k 2.2e-16 peak_t
      # e^{log_factor}) then sums to width peak_t e^{k K(theta)}, the plain one's (k 2.2e-16
      # max(pmf) per point) to max(pmf) sum_j e^{theta l_j}. When the tilted is no worse,
      # the plain power is skipped; its maximum is read off the untilted result.
      untilted = tilted * np.exp(log_factor)
      peak = float(untilted.max())
      c = theta * h   # log sum_j e^{theta l_j}, a geometric sum over the window
      log_weights = (c * (i_lo + width - 1) + math.log(-math.expm1(-c * width))
                     - math.log(-math.expm1(-c)))
      if peak > 0 and math.log(width * peak_t) + k * log_k <= math.log(peak) + log_weights:
        noise = k * 2.2e-16 * float(peak_t) * math.exp(min(at, 700.0)) + k * pmf.noise
        return trim(LossPmf(h, i_lo, untilted, min(1.0, inf + tail_hi), noise),
                     min(tail_mass, WINDOW_TAIL_MASS))
  out = _cyclic_power(pmf.probs, k, n_fft, shift, width)
  noise = k * 2.2e-16 * float(out.max()) + k * pmf.noise
  if theta > 0:
    peak = out.max()
    if peak_t > 0 and peak > 0:
      use = log_factor + math.log(peak_t) < math.log(peak)
      out = np.where(use, tilted * np.exp(np.minimum(log_factor, 700.0)), out)
      # the floor that matters now is the tilted one at tilt_at
      noise = min(noise, k * 2.2e-16 * float(peak_t) * math.exp(min(at, 700.0)) + k * pmf.noise)
  return trim(LossPmf(h, i_lo, out, min(1.0, inf + tail_hi), noise),
               min(tail_mass, WINDOW_TAIL_MASS))


def _block_size(k: int, factor: int) -> int:
  """Steps per block: the divisor of k in [7/8, 5/4] factor^2 nearest factor^2 in ratio
  (no steps left over, whose composition and convolution cost about a block), else
  factor^2. A block m < factor^2 adds at most 8/7 of the outer level's planned variance."""
  m = factor * factor
  if m < 2 or k % m == 0 or m > 1 << 16:   # the search costs O(m): only for small blocks
    return max(m, 1)
  cands = [d for d in range(-(-7 * m // 8), 5 * m // 4 + 1) if k % d == 0]
  return min(cands, key=lambda d: abs(math.log(d / m)), default=m)


def blocked_self_compose(pmf: LossPmf, k: int, factor: int, tail_mass: float = WINDOW_TAIL_MASS,
                         tilt_at: Optional[float] = None, noise_tolerance: float = 0.0) -> LossPmf:
  """k-fold composition in two levels: blocks of m ~ factor^2 compositions (`_block_size`: a
  divisor of k where one is near) on the pmf's grid h, each moved to the grid factor * h by
  connect-the-dots (which dominates it), composed k // m times there; the k mod m steps left
  over are composed, coarsened and convolved in. Why: connect-the-dots adds P-variance
  <= h^2 / 4 per gridded law, so one level adds ~k h^2; here k h^2 + (k / m)(factor h)^2
  ~ 2 k h^2, on a final window factor times shorter; every
  step is pessimistic. Window tails: tail_mass / (k // m) per block, tail_mass for the rest;
  each level tilts at its share of `tilt_at`. factor <= 1 or k < 2 m: `self_compose`."""
  m = _block_size(k, factor)
  a, r = divmod(k, m)
  if factor <= 1 or a < 2:
    return self_compose(pmf, k, tail_mass, tilt_at, noise_tolerance)
  share = lambda j: None if tilt_at is None else tilt_at * j / k
  block = _coarsen(self_compose(pmf, m, tail_mass / a, share(m), noise_tolerance / a), factor)
  out = self_compose(block, a, tail_mass, share(a * m), noise_tolerance)
  if r:
    rest = _coarsen(self_compose(pmf, r, tail_mass, share(r), noise_tolerance), factor)
    out = compose_pmfs(out, rest)
  return out


def atoms_to_grid(losses: np.ndarray, p_masses: np.ndarray, h: float,
                  infinity_mass: float = 0.0) -> LossPmf:
  """Connect-the-dots gridding of atoms (finite losses [K], P-masses [K] >= 0): an atom at l
  in [j h, (j+1) h) gives (j+1) h the share (1 - e^{-(l - j h)}) / (1 - e^{-h}), keeping its
  P- and Q-mass; `infinity_mass` is added at +inf unchanged."""
  j = np.floor(losses / h)
  r = np.maximum(losses - j * h, 0.0)
  up = np.clip(p_masses * -np.expm1(-r) / -math.expm1(-h), 0.0, p_masses)
  base = int(j.min())
  idx = (j - base).astype(np.int64)
  size = int(idx.max()) + 2
  if size > MAX_POINTS:
    raise GridTooLarge(f"value_discretization={h} needs {size} grid points for losses in "
                       f"[{losses.min():.3g}, {losses.max():.3g}] (more than {MAX_POINTS})")
  probs = (np.bincount(idx, weights=p_masses - up, minlength=size)
           + np.bincount(idx + 1, weights=up, minlength=size))
  return trim(LossPmf(h, base, probs, min(1.0, float(infinity_mass))))


__all__ = [
    "DEFAULT_TAIL_MASS", "DEFAULT_VALUE_DISCRETIZATION", "GridTooLarge", "LossPmf", "MAX_POINTS",
    "MAX_WORK", "WINDOW_TAIL_MASS", "atoms_to_grid", "blocked_self_compose", "blocking_factor",
    "compose_pmfs", "self_compose", "trim"]
