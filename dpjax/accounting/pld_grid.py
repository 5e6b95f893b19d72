"""Discretised privacy loss distributions: the grid value type and its operations.

A `LossPmf` is one direction of a PLD: P-mass probs[j] at privacy loss (offset + j) h, plus
mass at +inf; delta(eps) = P[L = inf] + E_P[(1 - exp(eps - L))_+], L = log(P(o) / Q(o)).
Discretisation is pessimistic ("connect the dots", `discretise`): an interval's P- and Q-mass
moves to its ends (l_i gets (dP - e^{l_{i-1}} dQ) / (1 - e^{-h})), so delta(eps) is an upper
bound, exact at grid points; mass cut off moves up (`_dominated_discretise`: the lower-bound
counterpart, for checks). k-fold self-composition is one FFT power
on a Chernoff-sized window, optionally tilted and untilted exactly (Koskela, Jalko & Honkela
2020; Doroshenko et al. 2022); float64 noise ~k 1e-16 max(pmf) per point (`LossPmf.noise`).
Shapes: J grid points, L query losses. Host NumPy float64.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import numpy as np
from scipy import fft as sp_fft
from scipy import signal, special

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


def _log_diff(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
  """log(e^la - e^lb), clipped at -inf when lb >= la."""
  with np.errstate(invalid="ignore", divide="ignore"):
    d = np.minimum(lb - la, 0.0)
    out = la + np.log(-np.expm1(d))
  return np.where(np.isfinite(la) & (lb < la), out, -np.inf)


def discretise(tails: Callable, lo: float, hi: float, h: float, stride: int = 1,
               fine_mass: float = 0.0) -> LossPmf:
  """Connect-the-dots discretisation of one (P, Q) pair with monotone losses.

  `tails(l [L])` gives (log P(L > l), log P(L <= l), log Q(L > l), log Q(L <= l)), each [L],
  accurate in both tails; losses in [lo, hi] are gridded at spacing h, mass below lo moves up
  to the bottom point, mass above hi splits between the top point and +inf. stride > 1 uses
  every stride-th point where the P-mass beyond it (either tail) is at most `fine_mass`; an
  interval (l_a, l_b] then gives l_b (dP - e^{l_a} dQ) / (1 - e^{-(l_b - l_a)}) (exact at the
  points used; the grid stays h), saving `tails` evaluations where little mass lies."""
  i_lo, i_hi = math.floor(lo / h), math.ceil(hi / h)
  if i_hi <= i_lo:
    i_hi = i_lo + 1
  if stride > 1:
    i_lo, i_hi = stride * (i_lo // stride), stride * -(-i_hi // stride)
  n = i_hi - i_lo + 1
  if n > MAX_POINTS:
    raise GridTooLarge(
        f"value_discretization={h} needs {n} grid points for losses in "
        f"[{lo:.3g}, {hi:.3g}] (more than {MAX_POINTS}); use a larger value_discretization")
  idx = np.arange(i_lo, i_hi + 1, stride)
  if stride > 1 and idx.size > 2:
    gp, hp, _, _ = tails(idx * h)
    log_tau = math.log(fine_mass) if fine_mass > 0 else -math.inf
    a = max(0, int(np.searchsorted(hp, log_tau, side="right")) - 1)    # P(L <= l_a) <= tau
    b = min(idx.size - 1, int(np.searchsorted(-gp, -log_tau, side="left")))  # P(L > l_b) <= tau
    if b > a:
      idx = np.concatenate([idx[:a], np.arange(idx[a], idx[b] + 1), idx[b + 1:]])
  l = idx * h
  gp, hp, gq, hq = tails(l)
  # Interval masses (l_{j-1}, l_j], j = 1..n-1: difference of whichever tail is smaller.
  use_g = gp[:-1] <= math.log(0.5)
  log_dp = np.where(use_g, _log_diff(gp[:-1], gp[1:]), _log_diff(hp[1:], hp[:-1]))
  use_gq = gq[:-1] <= math.log(0.5)
  log_dq = np.where(use_gq, _log_diff(gq[:-1], gq[1:]), _log_diff(hq[1:], hq[:-1]))
  dp = np.exp(log_dp)
  with np.errstate(over="ignore", invalid="ignore"):
    up = (dp - np.exp(l[:-1] + log_dq)) / -np.expm1(-np.diff(idx) * h)
  up = np.clip(np.nan_to_num(up, nan=0.0, posinf=0.0), 0.0, dp)
  probs = np.zeros(n)
  pos = idx - i_lo
  probs[pos[1:]] += up
  probs[pos[:-1]] += dp - up
  probs[0] += math.exp(hp[0])                       # lower tail moves up to l_0
  with np.errstate(over="ignore"):
    top = min(math.exp(gp[-1]), math.exp(min(l[-1] + gq[-1], 700.0)))
  probs[-1] += top                                  # upper tail: ratio e^{l_n} part
  inf_mass = max(0.0, math.exp(gp[-1]) - top)       # the rest goes to +inf
  return _trim(LossPmf(h, i_lo, probs, inf_mass))


def _dominated_discretise(tails: Callable, lo: float, hi: float, h: float,
                          shift: Optional[float] = None, slack: float = 1e-8
                          ) -> tuple[LossPmf, float]:
  """(pmf, shift): a pmf of L - shift on the grid j h whose delta, composed or not, is a
  LOWER bound (T steps: read delta_T(eps) at eps - T shift).

  Post-processing: the cells (l_{j-1}, l_j], l_j = j h + shift (P-, Q-mass A_j, B_j from
  `tails` as in `discretise`; the lowest cell also holds all mass below) are split, cell j's
  fraction alpha_j joining the output of l_j and the rest that of l_{j-1} (a randomised map
  of the loss: the pair it gives is dominated by the true one, composed or not). From the top
  down each alpha_j is the largest keeping the output's ratio P / Q >= e^{l_j} (less `slack`,
  against float64 rounding of the masses): its loss is at least l_j, and putting its P-mass
  at l_j lowers every composed loss (so delta). Mass above hi joins the top output; a bottom
  remainder below l_0 is dropped. O(h^2) like `discretise` where the law is smooth on the
  scale h; a Python loop over the grid (a check, not for the accountant's hot path).
  shift None anchors l_0 just under the loss of {L <= l_0 + h} (a fixed point, approached
  from below, every iterate valid): a mass narrower than h at the bottom (the unsampled steps
  at small q) then keeps its loss instead of moving down by up to h.
  """
  if shift is None:
    l0 = lo
    for _ in range(60):
      _, hp1, _, hq1 = tails(np.array([l0 + h]))
      nxt = float(hp1[0] - hq1[0]) - 1e-12 - 2 * slack   # its remainder passes the check below
      if not nxt > l0:
        break
      l0 = nxt
    shift = l0 - h * math.floor(l0 / h)
    i_lo = math.floor(l0 / h)
  else:
    i_lo = math.floor((lo - shift) / h)
  i_hi = max(math.ceil((hi - shift) / h), i_lo + 1)
  n = i_hi - i_lo + 1
  if n > MAX_POINTS:
    raise GridTooLarge(f"value_discretization={h} needs {n} grid points")
  l = np.arange(i_lo, i_hi + 1) * h + shift
  gp, hp, gq, hq = tails(l)
  use_g = gp[:-1] <= math.log(0.5)
  a = np.exp(np.where(use_g, _log_diff(gp[:-1], gp[1:]), _log_diff(hp[1:], hp[:-1])))
  use_gq = gq[:-1] <= math.log(0.5)
  b = np.exp(np.where(use_gq, _log_diff(gq[:-1], gq[1:]), _log_diff(hq[1:], hq[:-1])))
  a[0], b[0] = math.exp(hp[1]), math.exp(hq[1])      # the lowest cell: all of L <= l_1
  probs = np.zeros(n)
  in_a, in_b = math.exp(gp[-1]), math.exp(gq[-1])   # above hi: loss > l_{n-1}
  el = np.exp(l).tolist()
  a_list, b_list = a.tolist(), b.tolist()
  for j in range(n - 1, 0, -1):     # output l_j gets in_* from above and alpha of cell j
    aj, bj = a_list[j - 1], b_list[j - 1]
    pos = (in_a - el[j] * in_b) - slack * in_a
    neg = max(el[j] * bj - aj, 0.0) + slack * aj
    if pos <= 0:   # too close to l_j to vouch for: its own output, at l_{j-1}
      probs[j - 1] += in_a
      in_a = alpha = 0.0
    else:
      alpha = 1.0 if pos >= neg else pos / neg
    probs[j] += in_a + alpha * aj
    in_a, in_b = (1.0 - alpha) * aj, (1.0 - alpha) * bj
  if in_a - el[0] * in_b >= slack * in_a:
    probs[0] += in_a
  return LossPmf(h, i_lo, probs, 0.0), shift


def _trim(pmf: LossPmf, tail: float = 0.0) -> LossPmf:
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
  return _trim(LossPmf(a.h, a.offset + b.offset, c, inf, noise), WINDOW_TAIL_MASS)


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
  idx = pmf.offset + np.arange(pmf.probs.size)
  ci = np.floor_divide(idx, factor)
  r = (idx - ci * factor) * pmf.h
  up = pmf.probs * (-np.expm1(-r)) / -math.expm1(-big_h)
  base = int(ci.min())
  size = int(ci.max()) - base + 2
  probs = (np.bincount(ci - base, weights=pmf.probs - up, minlength=size)
           + np.bincount(ci - base + 1, weights=up, minlength=size))
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
  for _ in range(16):   # any theta untilts exactly; it only needs to be near
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if k * mean(mid) < target else (lo, mid)
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
    m = f * f
    a, r = divmod(k, m)
    if f > 64 or a < 2:
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
  within `noise_tolerance`, the tilted pmf p_j e^{theta l_j - K(theta)} is also composed (on a
  window widened for its heavier upper tail) and untilted exactly; each point takes the lower
  noise floor. GridTooLarge, before any FFT, past MAX_POINTS window points or MAX_WORK."""
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
  n_fft = sp_fft.next_fast_len(width, real=True)
  # entry (j_true mod n_fft) of the cyclic result holds loss (k * offset + j_true) h.
  shift = (i_lo - k * pmf.offset) % n_fft
  out = _cyclic_power(pmf.probs, k, n_fft, shift, width)
  noise = k * 2.2e-16 * float(out.max()) + k * pmf.noise
  if theta > 0:
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
  return _trim(LossPmf(h, i_lo, out, min(1.0, inf + tail_hi), noise),
               min(tail_mass, WINDOW_TAIL_MASS))


def blocked_self_compose(pmf: LossPmf, k: int, factor: int, tail_mass: float = WINDOW_TAIL_MASS,
                         tilt_at: Optional[float] = None, noise_tolerance: float = 0.0) -> LossPmf:
  """k-fold composition in two levels: blocks of m = factor^2 compositions on the pmf's grid
  h, each moved to the grid factor * h by connect-the-dots (which dominates it), composed
  k // m times there; the k mod m steps left over are composed, coarsened and convolved in.
  Why: connect-the-dots adds P-variance <= h^2 / 4 per gridded law, so one level adds ~k h^2;
  here k h^2 + (k / m)(factor h)^2 = 2 k h^2, on a final window factor times shorter; every
  step is pessimistic. Window tails: tail_mass / (k // m) per block, tail_mass for the rest;
  each level tilts at its share of `tilt_at`. factor <= 1 or k < 2 m: `self_compose`."""
  m = factor * factor
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


def subsampled_gaussian_pmfs(mu: float, q: float, h: float, tail: float,
                             directions: tuple[str, ...] = ("remove", "add"),
                             stride: int = 1, fine_mass: float = 0.0,
                             dominated: bool = False, shift: Optional[float] = None
                             ) -> tuple:
  """Remove (P = (1-q) N(0,1) + q N(mu,1), Q = N(0,1), L(x) = log(1 - q + q e^{mu x - mu^2/2}))
  and add (swapped, loss -L(x)) PLDs of the Poisson-subsampled Gaussian, in units of sigma;
  only those named in `directions` (in that order; "add" is dropped at q = 1). stride and
  fine_mass: the tails' coarser points, as in `discretise`. dominated: the lower-bound pmf of
  `_dominated_discretise` instead (stride ignored): (pmf of L - shift, shift) pairs."""
  log_q = math.log(q)
  log_1mq = math.log1p(-q) if q < 1 else -math.inf

  def loss(x):   # remove-direction loss at x, increasing
    return np.logaddexp(log_1mq, log_q + mu * x - mu * mu / 2)

  def x_of(l):   # inverse of `loss`; -inf at or below log(1-q)
    l = np.asarray(l, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):   # where() drops those
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

  z = -float(special.ndtri(tail / 2))   # Phi(-z) = tail / 2
  x_hi = max(mu - float(special.ndtri(min(0.5, tail / (2 * q)))), z)
  grid = ((lambda t, a, b: _dominated_discretise(t, a, b, h, shift)) if dominated else
          (lambda t, a, b: discretise(t, a, b, h, stride, fine_mass)))
  make = {"remove": lambda: grid(tails_remove, float(loss(-z)), float(loss(x_hi))),
          "add": lambda: grid(tails_add, -float(loss(z)), -log_1mq)}
  return tuple(make[d]() for d in directions if not (d == "add" and q == 1.0))


def _laplace_log_cdf(y):
  """log P(X <= y) for the standard Laplace law, accurate in both tails."""
  y = np.asarray(y, np.float64)
  with np.errstate(divide="ignore", over="ignore"):
    return np.where(y < 0, y - math.log(2), np.log1p(-0.5 * np.exp(-np.abs(y))))


def laplace_pmf(eps0: float, h: float) -> LossPmf:
  """PLD of Lap(0, 1) against Lap(eps0, 1) (symmetric in the two directions)."""
  log_cdf = _laplace_log_cdf

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

  return discretise(tails, -eps0, eps0, h)


def subsampled_laplace_pmfs(eps0: float, q: float, h: float) -> tuple[LossPmf, LossPmf]:
  """Remove ((1 - q) Lap(0, 1) + q Lap(eps0, 1) against Lap(0, 1), loss
  L(x) = log(1 - q + q e^{|x| - |x - eps0|}), atoms at both ends) and add (swapped, loss -L)
  PLDs of the Poisson-subsampled Laplace mechanism; exact tails, q in (0, 1)."""
  lo = math.log1p(q * math.expm1(-eps0))   # L at x <= 0
  hi = math.log1p(q * math.expm1(eps0))    # L at x >= eps0
  log_q, log_1mq = math.log(q), math.log1p(-q)
  cdf = _laplace_log_cdf

  def x_of(l):   # inverse of L on (lo, hi)
    with np.errstate(divide="ignore", invalid="ignore"):
      ell = np.log(np.maximum(np.expm1(l) + q, 1e-300)) - log_q
    return np.clip((ell + eps0) / 2, 0.0, eps0)

  def mix(log_a, log_b):
    return np.logaddexp(log_1mq + log_a, log_q + log_b)

  def masked(l, a, b, gp, hp, gq, hq):   # L <= a: all mass above; L >= b: none above
    above, below = l >= b, l < a
    gp, gq = (np.where(above, -np.inf, np.where(below, 0.0, v)) for v in (gp, gq))
    hp, hq = (np.where(above, 0.0, np.where(below, -np.inf, v)) for v in (hp, hq))
    return gp, hp, gq, hq

  def tails_remove(l):
    x = x_of(l)   # {L > l} = {X > x}
    sf0, cdf0, sf1, cdf1 = cdf(-x), cdf(x), cdf(eps0 - x), cdf(x - eps0)
    return masked(l, lo, hi, mix(sf0, sf1), mix(cdf0, cdf1), sf0, cdf0)

  def tails_add(l):
    x = x_of(-l)  # {-L > l} = {X < x}
    sf0, cdf0, sf1, cdf1 = cdf(-x), cdf(x), cdf(eps0 - x), cdf(x - eps0)
    return masked(l, -hi, -lo, cdf0, sf0, mix(cdf0, cdf1), mix(sf0, sf1))

  return discretise(tails_remove, lo, hi, h), discretise(tails_add, -hi, -lo, h)


def atoms_pmf(losses: np.ndarray, p_masses: np.ndarray, h: float) -> LossPmf:
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

  return discretise(tails, float(losses.min()), float(losses.max()), h)


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
  return _trim(LossPmf(h, base, probs, min(1.0, float(infinity_mass))))


__all__ = [
    "DEFAULT_TAIL_MASS", "DEFAULT_VALUE_DISCRETIZATION", "GridTooLarge", "LossPmf", "MAX_POINTS",
    "MAX_WORK", "WINDOW_TAIL_MASS", "atoms_pmf", "atoms_to_grid", "blocked_self_compose",
    "blocking_factor", "compose_pmfs", "discretise", "laplace_pmf", "self_compose",
    "subsampled_gaussian_pmfs", "subsampled_laplace_pmfs"]
