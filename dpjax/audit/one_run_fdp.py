"""The f-DP one-run test (Mahloujifar, Melis & Chaudhuri 2025) and its trade-off families.

The game of `dpjax.audit.one_run` (m canaries, r guesses, v correct) tested against a whole
trade-off curve f. `FDP_FAMILIES`: "dp" (every (eps, delta)-DP run, without Steinke et al.'s
2 m delta), "gdp" (G_mu, mu-GDP runs only), "subsampled_gaussian" (T DP-SGD steps at rate q,
from our PLD). Shape letters: P candidate parameters, J points of a privacy profile.

References: Mahloujifar, Melis & Chaudhuri 2025, https://arxiv.org/abs/2410.22235.

Examples:
  >>> r = fdp_epsilon_lower_bound(num_canaries=1000, num_guesses=100, num_correct=100,
  ...                             delta=0.0)
  >>> round(r.epsilon_lower, 2)                      # Steinke et al.: 3.49
  3.49
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import numpy as np
from scipy import special

from dpjax import _validate


def check_guesses(num_canaries, num_guesses, num_correct) -> tuple[int, int, int]:
  """(m, r, v) as ints with 0 <= v <= r <= m and m >= 1: the counts of a one-run game.

  Examples:
    >>> check_guesses(10, 4, 3)
    (10, 4, 3)
  """
  m = _validate.check_int(num_canaries, "num_canaries")
  r = _validate.check_int(num_guesses, "num_guesses", minimum=0)
  v = _validate.check_int(num_correct, "num_correct", minimum=0)
  if not v <= r <= m:
    raise ValueError(f"need num_correct ({v}) <= num_guesses ({r}) <= num_canaries ({m})")
  return m, r, v


FDP_FAMILIES = ("gdp", "dp", "subsampled_gaussian")


def _gaussian_inverse_blowup(mu_P):
  """x -> Phi(Phi^-1(x) - mu) for each mu: the least OUT-probability of an event of IN-probability x."""
  mu_P = np.asarray(mu_P, np.float64)

  def inv(x_P):
    return special.ndtr(special.ndtri(np.clip(x_P, 0.0, 1.0)) - mu_P)
  return inv


def _dp_inverse_blowup(eps_P, delta):
  """x -> max(0, 1 - delta - e^eps (1 - x), e^-eps (x - delta)) for each eps."""
  eps_P = np.asarray(eps_P, np.float64)

  def inv(x_P):
    x_P = np.clip(x_P, 0.0, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
      a = 1.0 - delta - np.exp(eps_P) * (1.0 - x_P)
      a = np.where(x_P >= 1.0, 1.0 - delta, a)
    return np.maximum(0.0, np.maximum(a, np.exp(-eps_P) * (x_P - delta)))
  return inv


_PROFILE_POINTS = 1000                 # eps grid of a privacy profile delta(eps)
_SIGMA_STEPS_PER_OCTAVE = 256          # the grid 1/sigma = 2^(k/256) searched by "subsampled_gaussian"


def _profile_inverse_blowup(eps_PxJ, delta_PxJ):
  """x -> max_j of the (eps_j, delta_j)-DP inverse blow-ups per row P: f >= max_j f_{eps_j, delta_j}
  (Dong, Roth & Su 2019, Prop. 2.12), the curve of `dpjax.tradeoff.pld_tpr_bound`.
  """
  e = np.asarray(eps_PxJ, np.float64)
  d = np.asarray(delta_PxJ, np.float64)

  def inv(x_P):
    x = np.clip(np.asarray(x_P, np.float64), 0.0, 1.0)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
      a = np.where(x >= 1.0, 1.0 - d, 1.0 - d - np.exp(e) * (1.0 - x))
    return np.maximum(0.0, np.maximum(a, np.exp(-e) * (x - d)).max(axis=1))
  return inv


def _pld_profile(privacy_loss, eps_J) -> np.ndarray:
  """delta(eps_j) (+ its FFT rounding-noise estimate) of a discretised PLD, worse direction."""
  eps_J = np.asarray(eps_J, np.float64)
  out = np.zeros_like(eps_J)
  for direction in range(2):
    try:
      losses, probs, inf_mass = privacy_loss.loss_pmf(direction)
    except ValueError:           # a symmetric PLD holds one direction
      break
    with np.errstate(divide="ignore"):
      logq = np.log(probs) - losses
    # sums over l_j > eps of p_j and of p_j e^{-l_j}, by reverse cumulative sums
    sp = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    lq = np.concatenate([np.logaddexp.accumulate(logq[::-1])[::-1], [-np.inf]])
    i = np.searchsorted(losses, eps_J, side="right")
    with np.errstate(over="ignore"):
      d = inf_mass + sp[i] - np.exp(np.minimum(eps_J + lq[i], 700.0))
    out = np.maximum(out, d)
  noise = np.array([privacy_loss.rounding_noise(float(e)) for e in eps_J])
  return np.clip(out + noise, 0.0, 1.0)


@functools.lru_cache(maxsize=4096)
def _subsampled_gaussian_profile(noise_multiplier: float, sampling_prob: float,
                                 num_steps: int) -> tuple[np.ndarray, np.ndarray]:
  """(eps_J, delta_J): the privacy profile of T Poisson-subsampled Gaussian steps (our PLD)."""
  from dpjax.accounting import pld  # pylint: disable=g-import-not-at-top
  from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top
  p = pld.gaussian_pld(noise_multiplier, sampling_prob)
  p = (p.self_compose(num_steps) if sampling_prob < 1 else
       pld.gaussian_pld(noise_multiplier / math.sqrt(num_steps)).discretise())
  # Subsampling only lowers delta(eps): the unsubsampled eps at 1e-12 ends the grid.
  top = max(1.0, gdp.gaussian_epsilon(1e-12, math.sqrt(num_steps) / noise_multiplier))
  eps = np.linspace(0.0, top, _PROFILE_POINTS)
  return eps, _pld_profile(p, eps)


def _subsampled_gaussian_inverse_blowup(inv_sigma_P, sampling_prob, num_steps):
  """The inverse blow-up of T subsampled-Gaussian steps at noise multiplier 1 / inv_sigma, per P."""
  prof = [_subsampled_gaussian_profile(1.0 / float(u), sampling_prob, num_steps)
          for u in np.atleast_1d(inv_sigma_P)]
  return _profile_inverse_blowup(np.stack([e for e, _ in prof]), np.stack([d for _, d in prof]))


def _fdp_excess(m: int, r: int, v: int, inverse_blowup, alpha, size: int) -> np.ndarray:
  """t_0 + w_0 - r/m of the recursion (> 0: rejected), vectorised over `size` candidates
  (trade-off functions of `inverse_blowup`, or levels when `alpha` is float[P]).
  """
  tail = np.full(size, alpha * v / m)               # mass of runs with >= v correct guesses
  wrong = np.full(size, alpha * (r - v) / m)        # ... their wrong guesses
  for i in range(v - 1, -1, -1):
    wrong_new = np.maximum(wrong, inverse_blowup(tail))
    if np.array_equal(wrong_new, wrong):
      break                                         # a fixed point: nothing changes below
    tail = np.minimum(tail + i / (r - i) * (wrong_new - wrong), 1.0)
    wrong = wrong_new
  return tail + wrong - r / m


def fdp_rejects(*, num_canaries: int, num_guesses: int, num_correct: int, family: str,
                parameter: float, delta: float = 0.0, confidence: float = 0.95,
                sampling_prob: Optional[float] = None,
                num_steps: Optional[int] = None) -> bool:
  """Whether v = `num_correct` correct guesses reject "the run is f-DP" at level 1 - confidence.

  With h_inv(x) = f(1 - x), tau = 1 - confidence, t_v = tau v / m, w_v = tau (r - v) / m and,
  for i = v - 1, ..., 0,

      w_i = max(w_{i+1}, h_inv(t_{i+1})),  t_i = min(1, t_{i+1} + i / (r - i) (w_i - w_{i+1})),

  an f-DP run with P[V >= v] >= tau has t_0 + w_0 <= r / m; more rejects. The families are
  symmetric, so OUT guesses count as IN guesses for the flipped bit. `parameter`: mu > 0 ("gdp");
  eps >= 0 with `delta` in [0, 1) ("dp"); the noise multiplier sigma > 0 ("subsampled_gaussian",
  needs sampling_prob and num_steps; f = max_j f_{eps_j, delta(eps_j)} over 1,000 eps of our PLD's
  profile, both directions, FFT rounding noise added: a valid lower bound on the exact curve).

  Examples:
    >>> fdp_rejects(num_canaries=1000, num_guesses=100, num_correct=100, family="gdp",
    ...             parameter=1.0)
    True
    >>> fdp_rejects(num_canaries=1000, num_guesses=100, num_correct=60, family="gdp",
    ...             parameter=1.0)
    False
  """
  m, r, v = check_guesses(num_canaries, num_guesses, num_correct)
  family, parameter, delta, q_t = _check_family(family, parameter, delta, sampling_prob, num_steps)
  alpha = 1.0 - _validate.check_confidence(confidence)
  if v == 0:
    return False
  inv = _make_inverse(family, delta, q_t)(np.array([_internal(family, parameter)]))
  return bool(_fdp_excess(m, r, v, inv, alpha, 1)[0] > 0)


def fdp_p_value(*, num_canaries: int, num_guesses: int, num_correct: int, family: str,
                parameter: float, delta: float = 0.0, sampling_prob: Optional[float] = None,
                num_steps: Optional[int] = None) -> float:
  """Upper bound in (0, 1] on P[V >= v] for an f-DP run: the smallest level `fdp_rejects` rejects.

  Log grid on [1e-15, 1] refined three times on 63-point grids (errs upwards); 1 if none.

  Examples:
    >>> p = fdp_p_value(num_canaries=100, num_guesses=10, num_correct=10, family="dp",
    ...                 parameter=0.0)
    >>> bool(0.0009 < p < 0.0011)                      # ten fair coins all right: 2^-10
    True
  """
  m, r, v = check_guesses(num_canaries, num_guesses, num_correct)
  family, parameter, delta, q_t = _check_family(family, parameter, delta, sampling_prob, num_steps)
  if v == 0:
    return 1.0
  inv = _make_inverse(family, delta, q_t)(np.array([_internal(family, parameter)]))
  grid = np.geomspace(1e-15, 1.0, 64)
  rej = _fdp_excess(m, r, v, inv, grid, grid.size) > 0
  if not rej[-1]:
    return 1.0
  k = int(np.argmax(rej))                   # the first rejected level
  if k == 0:
    return float(grid[0])
  lo, hi = grid[k - 1], grid[k]             # not rejected at lo, rejected at hi
  for _ in range(3):
    g = np.linspace(lo, hi, 65)[1:-1]
    rj = _fdp_excess(m, r, v, inv, g, g.size) > 0
    j = int(np.argmax(rj)) if rj.any() else g.size
    lo, hi = (g[j - 1] if j else lo), (g[j] if j < g.size else hi)
  return float(hi)


def _check_family(family, parameter, delta, sampling_prob, num_steps):
  """Validated (family, parameter, delta, (q, T) or None) of the f-DP tests."""
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  if family == "dp":
    parameter = _validate.check_epsilon(parameter, "parameter", allow_zero=True)
  else:
    parameter = _validate.check_positive(parameter, "parameter")
  delta = _validate.check_delta(delta, allow_zero=True)
  return family, parameter, delta, _check_steps(family, sampling_prob, num_steps)


def _check_steps(family, sampling_prob, num_steps):
  """(q, T) for "subsampled_gaussian" (both required), else None (both must be None)."""
  if family != "subsampled_gaussian":
    if sampling_prob is not None or num_steps is not None:
      raise ValueError(f"sampling_prob and num_steps are for family 'subsampled_gaussian' "
                       f"only, got family {family!r}")
    return None
  if sampling_prob is None or num_steps is None:
    raise ValueError("family 'subsampled_gaussian' needs sampling_prob (q in (0, 1]) and "
                     "num_steps (T >= 1)")
  return (_validate.check_sampling_prob(sampling_prob), _validate.check_int(num_steps, "num_steps"))


def _internal(family, parameter):
  """The searched parameter, rejected for all values below a crossing: 1 / sigma for DP-SGD."""
  return 1.0 / parameter if family == "subsampled_gaussian" else parameter


def _make_inverse(family, delta, q_t):
  """parameter_P -> inverse blow-up, for the internal parameter (mu, eps or 1 / sigma)."""
  if family == "gdp":
    return _gaussian_inverse_blowup
  if family == "dp":
    return lambda p: _dp_inverse_blowup(p, delta)
  return lambda u: _subsampled_gaussian_inverse_blowup(u, *q_t)


def _largest_rejected_on_grid(m, r, v, make_inverse, alpha, start: float = 0.0) -> float:
  """Largest u = 2^(k/256) (integer k) rejected, >= start (`start` if none); bisection over k,
  since each u = 1 / sigma costs a PLD composition. Never above the crossing.
  """
  n = _SIGMA_STEPS_PER_OCTAVE

  def rejected(u):
    try:
      return _rejected(m, r, v, make_inverse, alpha, u)
    except ValueError:           # the PLD grid of so small a sigma does not fit in memory:
      return False               # not rejected, which only lowers the bound
  lo = math.ceil(math.log2(start) * n) if start > 0 else -8 * n      # sigma = 256
  if v == 0 or not rejected(2.0 ** (lo / n)):
    return start
  step = n
  hi = lo + step
  while rejected(2.0 ** (hi / n)):
    lo, step = hi, 2 * step
    hi = lo + step
    if hi > 8 * n:                                                   # sigma < 1/256
      return math.inf
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if rejected(2.0 ** (mid / n)):
      lo = mid
    else:
      hi = mid
  return max(start, 2.0 ** (lo / n))


def _rejected(m, r, v, make_inverse, alpha, parameter: float) -> bool:
  return bool(_fdp_excess(m, r, v, make_inverse(np.array([parameter])), alpha, 1)[0] > 0)


def _largest_rejected(m, r, v, make_inverse, alpha, start: float = 0.0) -> float:
  """Largest parameter (mu or eps) rejected, >= start (`start` if not rejected).

  Rejection is monotone; the bracket is refined on 63-point grids three times (resolution
  (hi - lo) / 64^3), returning the largest rejected grid point, never above the crossing.
  """
  if v == 0 or not _rejected(m, r, v, make_inverse, alpha, start):
    return start
  lo, hi = start, max(1.0, 2.0 * start)
  while _rejected(m, r, v, make_inverse, alpha, hi):
    lo, hi = hi, 2.0 * hi
    if hi > 1e4:
      return math.inf
  for _ in range(3):
    grid = np.linspace(lo, hi, 65)[1:-1]
    rej = _fdp_excess(m, r, v, make_inverse(grid), alpha, grid.size) > 0
    k = int(np.sum(np.cumprod(rej)))          # the rejected points form a prefix
    lo, hi = (grid[k - 1] if k else lo), (grid[k] if k < grid.size else hi)
  return float(lo)


class FdpOneRunResult(NamedTuple):
  """Outcome of the f-DP one-run bound: the eps bound and what it came from."""
  epsilon_lower: float
  mu_lower: float                # the largest mu rejected (family "gdp"), else nan
  family: str
  num_canaries: int
  num_guesses: int
  num_correct: int
  # the smallest noise multiplier rejected (family "subsampled_gaussian"), else nan
  noise_multiplier_upper: float = math.nan


def fdp_epsilon_lower_bound(*, num_canaries: int, num_guesses: int, num_correct: int,
                            delta: float, family: str = "dp",
                            confidence: float = 0.95, sampling_prob: Optional[float] = None,
                            num_steps: Optional[int] = None) -> FdpOneRunResult:
  """eps lower bound from the f-DP one-run test (Mahloujifar, Melis & Chaudhuri 2025).

  "dp": the largest eps rejected; valid for every mechanism. "gdp": the largest mu rejected, as
  eps at `delta` of mu-GDP; valid only for runs with a Gaussian trade-off curve.
  "subsampled_gaussian": the smallest sigma rejected for T steps at rate q, as eps at `delta` by
  the PLD accountant; valid only for DP-SGD runs. Search resolution: (upper end) / 64^3 (sigma:
  a factor 2^(1/256)), on the rejected side. delta in [0, 1) for "dp", else (0, 1).
  Example: the module docstring.
  """
  m, r, v = check_guesses(num_canaries, num_guesses, num_correct)
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  delta = _validate.check_delta(delta, allow_zero=family == "dp")
  alpha = 1.0 - _validate.check_confidence(confidence)
  q_t = _check_steps(family, sampling_prob, num_steps)
  p = _fdp_parameter(m, r, v, family, delta, alpha, q_t=q_t)
  sigma = (math.inf if p == 0.0 else 1.0 / p) if family == "subsampled_gaussian" else math.nan
  return FdpOneRunResult(_fdp_epsilon(p, family, delta, q_t),
                         p if family == "gdp" else math.nan, family, m, r, v, sigma)


def _fdp_parameter(m, r, v, family, delta, alpha, start: float = 0.0, q_t=None) -> float:
  """The largest eps ("dp"), mu ("gdp") or 1 / sigma rejected, >= start (start when none is)."""
  inverse = _make_inverse(family, delta, q_t)
  if family == "subsampled_gaussian":
    return _largest_rejected_on_grid(m, r, v, inverse, alpha, start)
  return _largest_rejected(m, r, v, inverse, alpha, start)


def _fdp_epsilon(parameter: float, family: str, delta: float, q_t=None) -> float:
  """eps at delta of a rejected parameter: eps itself ("dp"), of mu-GDP, or of DP-SGD at sigma."""
  if family == "dp" or parameter == 0.0 or math.isinf(parameter):
    return float(parameter)
  if family == "subsampled_gaussian":
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    return float(accounting.dpsgd_epsilon(1.0 / parameter, q_t[0], q_t[1], delta, accountant="pld"))
  from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top
  return float(gdp.gaussian_epsilon(delta, parameter))


def largest_rejected(*, num_canaries: int, num_guesses: int, num_correct: int, family: str,
                     delta: float, confidence: float = 0.95, at_least: float = 0.0,
                     sampling_prob: Optional[float] = None,
                     num_steps: Optional[int] = None) -> float:
  """The largest parameter the counts reject: eps ("dp"), mu ("gdp") or 1 / sigma.

  The search of `fdp_epsilon_lower_bound` before `parameter_epsilon`, started at `at_least` >= 0
  (returned when not rejected, so a union over guess counts can skip hopeless counts).

  Examples:
    >>> round(largest_rejected(num_canaries=1000, num_guesses=100, num_correct=100,
    ...                        family="dp", delta=0.0), 2)
    3.49
  """
  m, r, v = check_guesses(num_canaries, num_guesses, num_correct)
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  delta = _validate.check_delta(delta, allow_zero=family == "dp")
  alpha = 1.0 - _validate.check_confidence(confidence)
  start = _validate.check_range(at_least, "at_least", 0.0, allow_inf=True)
  q_t = _check_steps(family, sampling_prob, num_steps)
  return _fdp_parameter(m, r, v, family, delta, alpha, start, q_t)


@_validate.names_extreme_arguments(finite=False)
def parameter_epsilon(parameter: float, *, family: str, delta: float,
                      sampling_prob: Optional[float] = None,
                      num_steps: Optional[int] = None) -> float:
  """eps at delta of a rejected parameter: eps itself ("dp"), of mu-GDP ("gdp"), or of
  T DP-SGD steps at q and sigma = 1 / parameter ("subsampled_gaussian", PLD accountant).

  Examples:
    >>> round(parameter_epsilon(1.0, family="gdp", delta=1e-5), 4)
    4.3772
  """
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  p = _validate.check_range(parameter, "parameter", 0.0, allow_inf=True)
  delta = _validate.check_delta(delta, allow_zero=family == "dp")
  return _fdp_epsilon(p, family, delta, _check_steps(family, sampling_prob, num_steps))

