"""Discretised PLDs of mechanisms: from a pair (P, Q) to a `pld_grid.LossPmf`.

`discretise` is the pessimistic "connect the dots" gridding of a pair with monotone losses
(an interval's P- and Q-mass moves to its ends, so delta(eps) is an upper bound, exact at grid
points); `_dominated_discretise` is its lower-bound counterpart, used only for checks. The
mechanisms' pmfs (subsampled Gaussian, Laplace, subsampled Laplace, atoms) are built on it.
Shapes: J grid points, L query losses, K atoms. Host NumPy float64.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
from scipy import special

from dpjax.accounting.pld_grid import GridTooLarge, LossPmf, MAX_POINTS, trim


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
  return trim(LossPmf(h, i_lo, probs, inf_mass))


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


def _log_ndtr_pair(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(log Phi(x), log Phi(-x)) from one log_ndtr: the smaller side directly, the other as
  log1p(-e^smaller) (accurate, e^smaller <= 1/2)."""
  small = special.log_ndtr(-np.abs(x))
  large = np.log1p(-np.exp(small))
  neg = x < 0
  return np.where(neg, small, large), np.where(neg, large, small)


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

  def mixed(x):   # (log Phi(x), log Phi(-x), log P_mix(X <= x), log P_mix(X > x))
    c0, s0 = _log_ndtr_pair(x)
    c1, s1 = _log_ndtr_pair(x - mu)
    return (c0, s0, np.logaddexp(log_1mq + c0, log_q + c1),
            np.logaddexp(log_1mq + s0, log_q + s1))

  def tails_remove(l):
    c0, s0, mix_cdf, mix_sf = mixed(x_of(l))
    return mix_sf, mix_cdf, s0, c0

  def tails_add(l):
    return mixed(x_of(-l))   # {L_add > l} = {X < x}

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



__all__ = [
    "atoms_pmf", "discretise", "laplace_pmf", "subsampled_gaussian_pmfs",
    "subsampled_laplace_pmfs"]
