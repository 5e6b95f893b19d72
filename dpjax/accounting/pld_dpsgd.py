"""The PLD accountant of DP-SGD, on an adaptive grid.

T Poisson-sampled steps (add/remove-one) compose the remove and add PLDs of the subsampled
Gaussian T times by FFT; the answer is the worse direction. The grid spacing h is halved
from 1e-2 until the estimated error (eps(2h) - eps(h)) / (2^p - 1), order p in [1, 2] from
three grids, is <= rtol * eps (an estimate, not a bound) on a grid h <= 1e-4 (dp_accounting's
default, so eps lands at or below its answer). Where it is cheaper, T steps compose in two
levels (`pld_grid.blocked_self_compose`) with the error of one level at h. Each grid after
the first tilts its FFT towards the previous eps (float64 noise ~1e-16 relative). q = 1 is
exact (mu = sqrt(T) / sigma).

Examples:
  >>> round(dpsgd_epsilon(1.0, 0.01, 1000, 1e-5), 3)
  1.828
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, Optional

import numpy as np

from dpjax import _validate
from dpjax.accounting import gdp
from dpjax.accounting import pld_grid, pld_pmfs
from dpjax.accounting.pld_grid import DEFAULT_TAIL_MASS

# The smallest rtol: each halving of h doubles the grid; below 1e-8 the refinement
# runs to the memory cap (MAX_POINTS) for want of float64 precision, taking minutes.
RTOL_MIN = 1e-8
# At most this many 4x coarsenings of the first grid (h up to 1e-2 * 4^10 ~ 1e4): past
# that no grid fits (T-fold compositions need ~sqrt(T) points whatever h is).
_MAX_COARSENINGS = 10


@dataclasses.dataclass(frozen=True)
class PldResult:
  """An adaptive PLD answer: `value` (an upper bound on eps or delta), `error` (estimated
  value - truth), `value_discretization` h, `exact` (closed form, q = 1; h = error = 0)."""
  value: float
  error: float
  value_discretization: float
  exact: bool


def _adaptive(value_at_h: Callable[[float], float], rtol: float, atol: float,
              h_start: float = 1e-2, h_min: float = 1e-9,
              h_cap: float = math.inf) -> tuple[float, float, float]:
  """(v, error, h): halves h from h_start until (v(2h) - v(h)) / (2^p - 1) <= max(rtol v, atol)
  (p in [1, 2] from three grids) on a grid h <= h_cap, h_min, or a GridTooLarge
  (memory or work budget, named in the warning); far off, jumps
  halvings at an h^2 rate (or straight to the pair below h_cap)."""
  h = h_start
  for _ in range(_MAX_COARSENINGS + 1):   # coarsen until the first grid fits
    try:
      vals = {h: value_at_h(h)}
      break
    except pld_grid.GridTooLarge:
      h *= 4
  else:
    raise pld_grid.GridTooLarge(f"no grid spacing from {h_start:g} to {h / 4:g} fits in "
                                f"{pld_grid.MAX_POINTS} points")
  p = 1.0
  err = math.inf
  while True:
    h_next = h / 2
    try:
      if h_next not in vals:
        vals[h_next] = value_at_h(h_next)
    except pld_grid.GridTooLarge as e:
      if not math.isfinite(err):   # the first grid is the finest: estimate from (2h, h)
        vals[2 * h] = value_at_h(2 * h)
        err = abs(vals[2 * h] - vals[h])
      limit = ("the work budget (pld_grid.MAX_WORK)" if e.limit == "work budget"
               else "memory (pld_grid.MAX_POINTS)")
      warnings.warn(f"PLD grid limited by {limit} at h={h:g}; estimated error {err:.3g}",
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
    if (err <= target and h_next <= h_cap) or h_next <= h_min:
      return v, err, h_next
    if err <= target:   # accurate enough, but coarser than h_cap: on to the pair below it
      h = h_next / 2 ** max(0, math.ceil(math.log2(h_next / h_cap)) - 1)
      try:
        if h not in vals:
          vals[h] = value_at_h(h)
      except pld_grid.GridTooLarge:
        return v, err, h_next
      continue
    # Halvings needed if the error falls like h^2 (the fine-grid rate; an
    # optimistic guess, so a jump never overshoots); jump when more than one.
    m = min(8, math.ceil(math.log2(err / target) / 2.0)) if err > 0 else 1
    if m >= 2 and 2 * h in vals:
      h = h_next / 2 ** (m - 1)   # next pair: (h, h / 2) with h = h_next / 2^(m-1)
      try:
        vals[h] = value_at_h(h)
      except pld_grid.GridTooLarge:
        h = h_next
    else:
      h = h_next


def _adaptive_steps(value_at_h, rtol: float, atol: float, t: int, h_cap: float = math.inf):
  """`_adaptive`, naming num_steps when no grid can hold T compositions."""
  try:
    return _adaptive(value_at_h, rtol, atol, h_cap=h_cap)
  except pld_grid.GridTooLarge as e:
    raise pld_grid.GridTooLarge(f"num_steps = {t} is too many compositions for the PLD "
                                f"grid ({e}); use the RDP accountant", e.limit) from e


# The eps grid ends at h <= dp_accounting's default value_discretization (1e-4), whatever
# rtol allows: its error there is below that grid's, so eps lands at or below dp_accounting's.
_H_CAP = 1e-4
_DIRECTIONS = ("remove", "add")
# A direction is skipped when its eps on a coarser grid is below (1 - this) x the max.
_SKIP_MARGIN = 1e-3
# The per-step grid uses every _STRIDE-th point where the P-mass beyond is at most
# _FINE_SHARE * delta / T: the T steps' mass there moves delta by a share of that at most.
_STRIDE = 32
_FINE_SHARE = 1e-3


def _dpsgd_pmfs(sigma: float, q: float, h: float, tail: float) -> tuple[pld_grid.LossPmf, ...]:
  return pld_pmfs.subsampled_gaussian_pmfs(1.0 / sigma, q, h, tail)


def _direction_epsilon(sigma: float, q: float, t: int, delta: float, h: float, d: str,
                       tilt: Optional[float], factors: dict) -> float:
  """eps of T DP-SGD steps in direction d on the grid h (one or two levels, `factors`)."""
  tail = min(DEFAULT_TAIL_MASS * 1e5, 1e-6 * delta / t)
  # FFT window: tails of 1e-6 * delta each (pessimistic, see `pld_grid.self_compose`);
  # FFT rounding noise is kept below ~1e-4 * delta by tilting when needed.
  window_tail = min(pld_grid.WINDOW_TAIL_MASS * 1e6, 1e-6 * delta)
  fine = _FINE_SHARE * delta / t
  factor, pmf = factors.get(d), None
  if factor is None:
    (pmf,) = pld_pmfs.subsampled_gaussian_pmfs(1.0 / sigma, q, h, tail, directions=(d,),
                                               stride=_STRIDE, fine_mass=fine)
    factor = 1   # a coarse grid: one level (an FFT this small costs less than the Python of two)
    if pmf.probs.size >= 1000:   # a grid fine enough to judge the windows by
      factor = factors[d] = pld_grid.blocking_factor(pmf, t, window_tail, 1e-4 * delta)
  if factor > 1 or pmf is None:
    # two levels add twice one level's variance: h / sqrt(2) keeps h's error
    (pmf,) = pld_pmfs.subsampled_gaussian_pmfs(
        1.0 / sigma, q, h / math.sqrt(2) if factor > 1 else h, tail, directions=(d,),
        stride=_STRIDE, fine_mass=fine)
  composed = pld_grid.blocked_self_compose(pmf, t, factor, window_tail, tilt, 1e-4 * delta)
  return composed.epsilon(delta)


def _epsilon_on_grid(sigma: float, q: float, t: int, delta: float, h: float,
                     tilt: Optional[float], coarse: Optional[dict] = None,
                     factors: Optional[dict] = None) -> float:
  """eps of T DP-SGD steps on the grid of spacing h, the FFT tilted towards `tilt`.

  coarse: {direction: eps} on a grid h * 2^m, m >= 1, which contains this one: a
  connect-the-dots PLD on the coarser grid dominates the finer one, so its eps is at least
  this grid's; a direction whose coarse eps is below (1 - `_SKIP_MARGIN`) x the larger
  direction's eps here cannot be the max and is not composed. A coarse eps far above (from a
  much coarser grid) is first refreshed on the grid 4h, a quarter of the work. Filled in with
  this grid's per-direction eps (or the coarse bound of a skipped one). factors: {direction:
  blocking factor} chosen on an earlier grid (the choice hardly depends on h), filled in here.
  """
  factors = {} if factors is None else factors
  bounds = {} if coarse is None else dict(coarse)
  order = sorted(_DIRECTIONS, key=lambda d: -bounds.get(d, math.inf))
  best = -math.inf
  for d in order:
    if d == "add" and q == 1.0:
      continue
    if d in bounds and bounds[d] > 1.5 * best > 0 and h <= 1e-3:
      bounds[d] = _direction_epsilon(sigma, q, t, delta, 4 * h, d, tilt, factors)
    if d in bounds and bounds[d] < (1.0 - _SKIP_MARGIN) * best:
      continue
    bounds[d] = _direction_epsilon(sigma, q, t, delta, h, d, tilt, factors)
    best = max(best, bounds[d])
  if coarse is not None:
    coarse.clear()
    coarse.update(bounds)
  return best


@_validate.names_extreme_arguments
def dpsgd_epsilon_bound(noise_multiplier: float, sampling_prob: float, num_steps: int,
                        delta: float, rtol: float = 1e-5) -> PldResult:
  """eps of DP-SGD (Poisson sampling, add/remove-one) as a PldResult with its error estimate.

  rtol in [RTOL_MIN = 1e-8, 0.1]: target max(rtol * eps, 1e-9), on a grid h <= 1e-4.
  Per-step tails cut at 1e-6 delta / T and FFT-window tails of 1e-6 delta move
  pessimistically: the eps of a delta <= ~3e-6 delta smaller than asked.

  Examples:
    >>> r = dpsgd_epsilon_bound(1.0, 0.01, 1000, 1e-5)
    >>> round(r.value, 4), r.error < 1e-4
    (1.8282, True)
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  delta = _validate.check_delta(delta)
  rtol = _validate.check_range(rtol, "rtol", RTOL_MIN, 0.1)
  if q == 1.0:
    return PldResult(gdp.gaussian_epsilon(delta, math.sqrt(t) / sigma), 0.0, 0.0, True)
  last = []   # the previous grid's eps: where the next grid tilts its FFT
  per_grid = {}   # h -> {direction: eps}, for skipping a dominated direction on finer grids
  factors = {}    # direction -> blocking factor

  def eps_at(h):
    tilt = last[-1] if last and math.isfinite(last[-1]) and last[-1] > 0 else None
    coarser = [g for g in per_grid if g > h]
    dirs = dict(per_grid[min(coarser)]) if coarser else {}
    eps = _epsilon_on_grid(sigma, q, t, delta, h, tilt, dirs, factors)
    per_grid[h] = dirs
    last.append(eps)
    return eps

  eps, err, h = _adaptive_steps(eps_at, rtol, 1e-9, t, _H_CAP)
  return PldResult(eps, err, h, False)


def dpsgd_epsilon(noise_multiplier: float, sampling_prob: float, num_steps: int,
                  delta: float, rtol: float = 1e-5) -> float:
  """eps (an upper bound) of T steps of DP-SGD by the PLD accountant (`dpsgd_epsilon_bound`).

  Examples:
    >>> round(dpsgd_epsilon(1.1, 256 / 60000, 14063, 1e-5), 3)
    2.382
  """
  return dpsgd_epsilon_bound(noise_multiplier, sampling_prob, num_steps, delta, rtol).value


@_validate.names_extreme_arguments
def dpsgd_delta_bound(noise_multiplier: float, sampling_prob: float, num_steps: int,
                      epsilon: float, rtol: float = 1e-5) -> PldResult:
  """delta(eps) (PldResult, value an upper bound) of DP-SGD by the PLD accountant; rtol in
  [1e-8, 0.1] on delta, other arguments as in `dpsgd_epsilon_bound`."""
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  e = _validate.check_epsilon(epsilon, allow_zero=True)
  rtol = _validate.check_range(rtol, "rtol", RTOL_MIN, 0.1)
  if q == 1.0:
    return PldResult(gdp.gaussian_delta(e, math.sqrt(t) / sigma), 0.0, 0.0, True)

  def delta_at(h):
    return max(pld_grid.self_compose(p, t).delta(e)
               for p in _dpsgd_pmfs(sigma, q, h, DEFAULT_TAIL_MASS))

  d, err, h = _adaptive_steps(delta_at, rtol, 1e-300, t)
  return PldResult(d, err, h, False)


def dpsgd_delta(noise_multiplier: float, sampling_prob: float, num_steps: int,
                epsilon: float, rtol: float = 1e-5) -> float:
  """delta(eps) (an upper bound) of T steps of DP-SGD by the PLD accountant.

  Examples:
    >>> dpsgd_delta(1.0, 0.01, 1000, 1.83) < 1e-5
    True
  """
  return dpsgd_delta_bound(noise_multiplier, sampling_prob, num_steps, epsilon, rtol).value


@dataclasses.dataclass(frozen=True)
class CheckedEpsilon:
  """`value` (an upper bound on eps), `ours` (the plain answer: `dpsgd_epsilon`, or
  `event_accounting.epsilon` for `event_accounting.epsilon_never_looser`), `reference`
  (dp_accounting's; None without it, past pld_grid.MAX_POINTS grid points or when not
  finite) and `winner`: "dpjax", "dp_accounting" (certified by our finer grid) or
  "dpjax_finer" (our eps on a finer grid, between reference and ours)."""
  value: float
  ours: float
  reference: Optional[float]
  winner: str


@_validate.names_extreme_arguments(finite=False)
def dpsgd_epsilon_never_looser(noise_multiplier: float, sampling_prob: float, num_steps: int,
                               delta: float, rtol: float = 1e-5,
                               value_discretization: float = 1e-4) -> CheckedEpsilon:
  """DP-SGD's eps, taking dp_accounting's PLD answer only where it is certified.

  dp_accounting's value is not always an upper bound, so the smaller of the two answers is
  not one either. Where it stays below ours on benchmarks/accountant_table's grid this is
  certified (tests/pld_dpsgd_test.py): at q = 1 (exact mu-GDP) the closed-form delta at 50
  digits exceeds the target at its eps; at q < 1 (sigma 0.5, q 1e-4, T 1e3 and sigma 1,
  q 0.01, T 1e6, delta 1e-10) a lower bound on delta does, from the composed pmf of
  `pld_pmfs._dominated_discretise` (a post-processed, dominated pair with losses only
  lowered; less the FFT window's mass and 10x its float64 rounding estimate). When it is below
  ours, our PLD is recomputed on grids 4x, 16x, 64x then 256x finer (tilted at it; while
  they fit in memory); the reference is taken once some eps_fine <= reference, else the
  smallest eps_fine or ours. dp_accounting (optional) runs at `value_discretization` (its
  default 1e-4).

  Examples:
    >>> r = dpsgd_epsilon_never_looser(1.0, 0.01, 1000, 1e-5)
    >>> r.value <= r.ours
    True
  """
  res = dpsgd_epsilon_bound(noise_multiplier, sampling_prob, num_steps, delta, rtol)
  ours = res.value
  h = _validate.check_positive(value_discretization, "value_discretization")
  try:
    import dp_accounting  # pylint: disable=import-outside-toplevel
  except ImportError:
    return CheckedEpsilon(ours, ours, None, "dpjax")
  sigma, q, t, d = float(noise_multiplier), float(sampling_prob), int(num_steps), float(delta)
  if not ours / h <= pld_grid.MAX_POINTS:   # dp_accounting's grid spans eps at spacing h
    return CheckedEpsilon(ours, ours, None, "dpjax")
  acct = dp_accounting.pld.PLDAccountant(value_discretization_interval=h)
  acct.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), t)
  ref = float(acct.get_epsilon(d))
  if not math.isfinite(ref):        # no answer from dp_accounting (a tiny delta)
    return CheckedEpsilon(ours, ours, None, "dpjax")
  if res.exact or not ref < ours:
    return CheckedEpsilon(ours, ours, ref, "dpjax")
  best = ours
  for factor in (4, 16, 64, 256):
    try:
      fine = _epsilon_on_grid(sigma, q, t, d, res.value_discretization / factor, ref)
    except pld_grid.GridTooLarge:
      break
    if fine <= ref:
      return CheckedEpsilon(ref, ours, ref, "dp_accounting")
    best = min(best, fine)
  return CheckedEpsilon(best, ours, ref, "dpjax_finer" if best < ours else "dpjax")

__all__ = ["CheckedEpsilon", "PldResult", "dpsgd_delta", "dpsgd_delta_bound", "dpsgd_epsilon",
           "dpsgd_epsilon_bound", "dpsgd_epsilon_never_looser"]
