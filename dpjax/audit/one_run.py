"""Auditing with one training run and many canaries (Steinke, Nasr & Jagielski 2023).

Instead of training thousands of models, insert m canaries, each independently
included with probability 1/2, train ONCE, and let the auditor guess the
inclusion bit of r of them (abstaining on the rest, e.g. guessing IN for the k+
highest scores and OUT for the k- lowest). If training is (eps, delta)-DP, the
number V of correct guesses satisfies (their Theorem 5.2, with p = e^eps/(1+e^eps))

    P[V >= v] <= P[Binomial(r, p) >= v]
                 + 2 m delta * max_{1<=i<=v} P[v - i <= Binomial(r, p) < v] / i,

so observing v correct guesses rejects "(eps, delta)-DP" at level alpha when the
right side is <= alpha; the eps lower bound is the largest eps rejected. With
delta = 0 this is exactly the binomial tail of eps-randomized response: one run
with many canaries behaves like many runs with one, up to the delta term.

The number of guesses must be fixed in advance (choosing k after looking at the
scores would inflate the bound, as choosing a threshold does).

`fdp_rejects`, `fdp_p_value` and `fdp_epsilon_lower_bound` are the f-DP analysis of the game
(Mahloujifar, Melis & Chaudhuri 2025, https://arxiv.org/abs/2410.22235): the
hypothesis is a whole trade-off curve f instead of (eps, delta), tested by a
recursion over the number of correct guesses (see `fdp_rejects`). With the
(eps, delta)-DP curve it holds for every (eps, delta)-DP run and does not pay the
2 m delta of the bound above; with the Gaussian curve G_mu it is much tighter,
but rejects (eps, delta) claims only for mechanisms that are mu-GDP.

Shape letters: K canaries.

Examples:
  >>> round(epsilon_lower_bound(num_canaries=1000, num_guesses=100, num_correct=100, delta=0.0), 2)
  3.49
  >>> epsilon_lower_bound(num_canaries=1000, num_guesses=100, num_correct=50, delta=1e-5)
  0.0
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import numpy as np
from scipy import optimize, special, stats

from dpjax import _validate


def _check_guesses(m, r, v) -> tuple[int, int, int]:
  """(m, r, v) as ints with 0 <= v <= r <= m and m >= 1."""
  m = _validate.check_int(m, "num_canaries")
  r = _validate.check_int(r, "num_guesses", minimum=0)
  v = _validate.check_int(v, "num_correct", minimum=0)
  if not v <= r <= m:
    raise ValueError(f"need num_correct ({v}) <= num_guesses ({r}) <= num_canaries ({m})")
  return m, r, v


def p_value(num_canaries: int, num_guesses: int, num_correct: int, epsilon: float,
            delta: float) -> float:
  """Upper bound on P[V >= num_correct] for an (epsilon, delta)-DP training run.

  Args:
    num_canaries: m >= 1 canaries, each included with probability 1/2.
    num_guesses: r in [0, m] guesses made (abstentions excluded).
    num_correct: v in [0, r] correct guesses observed.
    epsilon: >= 0, the null hypothesis' eps.
    delta: in [0, 1].
  Returns:
    A p-value in [0, 1].

  Examples:
    >>> round(p_value(100, 10, 10, 0.0, 0.0), 6)            # ten coin flips all right
    0.000977
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  epsilon = _validate.check_epsilon(epsilon, allow_zero=True, allow_inf=True)
  delta = _validate.check_delta(delta, allow_zero=True)
  if v == 0:
    return 1.0
  p = 1.0 / (1.0 + math.exp(-epsilon)) if epsilon < 700 else 1.0
  tail = float(stats.binom.sf(v - 1, r, p))
  extra = 0.0
  if delta > 0:
    i = np.arange(1, v + 1)
    cdf_v1 = stats.binom.cdf(v - 1, r, p)
    window = cdf_v1 - stats.binom.cdf(v - i - 1, r, p)   # P[v - i <= Bin < v]
    extra = 2.0 * m * delta * float(np.max(window / i))
  return min(1.0, tail + extra)


def epsilon_lower_bound(*, num_canaries: int, num_guesses: int, num_correct: int,
                        delta: float = 0.0, confidence: float = 0.95) -> float:
  """Largest eps that `num_correct` of `num_guesses` correct guesses rejects.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r].
    delta: in [0, 1].
    confidence: in (0, 1).
  Returns:
    eps_lower >= 0: with probability >= `confidence`, the run is not (eps,
    delta)-DP for any eps < eps_lower (0 when nothing is rejected).
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  delta = _validate.check_delta(delta, allow_zero=True)
  confidence = _validate.check_confidence(confidence)
  alpha = 1.0 - confidence

  def f(eps):
    return p_value(m, r, v, eps, delta) - alpha

  if f(0.0) > 0:
    return 0.0
  hi = 1.0
  while f(hi) <= 0:
    hi *= 2.0
    if hi > 1e4:
      return math.inf
  # p_value is non-decreasing in eps: find the crossing.
  return float(optimize.brentq(f, 0.0, hi, xtol=1e-10, rtol=1e-10, maxiter=200))


_POINTWISE_EPS_POINTS = 200           # eps grid of `steinke_pointwise_epsilon_lower_bound`
_WINDOW_TERMS = 2000                   # terms of the delta-term maximum computed exactly


def _p_values_over_eps(m: int, r: int, v: int, eps_E, delta_E) -> np.ndarray:
  """`p_value(m, r, v, eps_e, delta_e)` for each e, float[E]; an upper bound when v > 2,000.

  The delta term's max over i of P[v - i <= Bin < v] / i is exact for i <= 2,000;
  the rest is bounded by P[Bin < v] / 2,001, so the p-value can only err upwards.
  """
  eps = np.asarray(eps_E, np.float64)
  dl = np.asarray(delta_E, np.float64)
  p = special.expit(eps)
  tail = stats.binom.sf(v - 1, r, p)
  k = min(v, _WINDOW_TERMS)
  i = np.arange(1, k + 1)
  pmf = stats.binom.pmf(v - i[None, :], r, p[:, None])          # P[Bin = v - i]
  best = np.max(np.cumsum(pmf, axis=1) / i, axis=1)
  if k < v:
    best = np.maximum(best, stats.binom.cdf(v - 1, r, p) / (k + 1))
  return np.minimum(1.0, tail + 2.0 * m * dl * best)


def steinke_pointwise_epsilon_lower_bound(*, num_canaries: int, num_guesses: int,
                                          num_correct: int, delta: float,
                                          confidence: float = 0.95) -> "FdpOneRunResult":
  """Steinke et al.'s test applied at every point of a Gaussian curve (mu-GDP), as eps at delta.

  A mu-GDP run is (eps, delta_mu(eps))-DP for every eps >= 0 (`gdp.gaussian_delta`),
  so Theorem 5.2 of Steinke, Nasr & Jagielski 2023 bounds P[V >= v] by
  min over eps of `p_value(m, r, v, eps, delta_mu(eps))`: "mu-GDP" is rejected when
  that minimum is <= 1 - confidence (the best split of the curve into one (eps, delta)
  pair, chosen per mu). The bound is the largest mu rejected (bisection to 1e-6),
  converted to eps at `delta` of mu-GDP: Mahloujifar, Melis & Chaudhuri 2025's
  Table 1 row of Steinke et al.'s analysis with the Gaussian curve ("taken pointwise
  over delta"). Like the f-DP "gdp" family it is valid only for mu-GDP runs; it is at
  least Steinke et al.'s bound at `delta` up to the 200-point eps grid on
  [0, eps_mu(1e-12)] (any grid gives a valid test; a finer one a tighter bound).

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r].
    delta: in (0, 1), the delta of the eps reported.
    confidence: in (0, 1).
  Returns:
    FdpOneRunResult with family "steinke_pointwise" and `mu_lower` the mu found.

  Examples:
    >>> r = steinke_pointwise_epsilon_lower_bound(num_canaries=1000, num_guesses=100,
    ...                                           num_correct=100, delta=1e-5)
    >>> bool(r.epsilon_lower >= epsilon_lower_bound(num_canaries=1000, num_guesses=100,
    ...                                             num_correct=100, delta=1e-5) - 0.05)
    True
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  delta = _validate.check_delta(delta)
  alpha = 1.0 - _validate.check_confidence(confidence)
  from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top

  def rejected(mu):
    eps = np.linspace(0.0, gdp.gaussian_epsilon(1e-12, mu), _POINTWISE_EPS_POINTS)
    dl = np.array([gdp.gaussian_delta(float(e), mu) for e in eps])
    return bool(_p_values_over_eps(m, r, v, eps, dl).min() <= alpha)

  mu = 0.0
  if v > 0 and rejected(1e-6):
    lo, hi = 1e-6, 1.0
    while rejected(hi):
      lo, hi = hi, 2.0 * hi
      if hi > 1e3:
        lo = math.inf
        break
    while math.isfinite(lo) and hi - lo > 1e-6:
      mid = 0.5 * (lo + hi)
      lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    mu = lo
  eps = 0.0 if mu == 0.0 else (math.inf if math.isinf(mu) else gdp.gaussian_epsilon(delta, mu))
  return FdpOneRunResult(float(eps), float(mu), "steinke_pointwise", m, r, v)


class OneRunResult(NamedTuple):
  """Outcome of a one-run audit: the bound and the counts behind it."""
  epsilon_lower: float
  num_canaries: int
  num_guesses: int
  num_correct: int


def audit(scores_K, included_K, *, num_positive_guesses: int, num_negative_guesses: int = 0,
          delta: float = 0.0, confidence: float = 0.95) -> OneRunResult:
  """Guesses IN for the top scores and OUT for the bottom ones, then bounds eps.

  Args:
    scores_K: float[K] canary scores (higher = more likely included).
    included_K: bool[K] true inclusion bits (each drawn with probability 1/2).
    num_positive_guesses: k+ >= 0, fixed in advance.
    num_negative_guesses: k- >= 0, fixed in advance; k+ + k- <= K.
    delta, confidence: as in `epsilon_lower_bound`.
  Returns:
    OneRunResult.

  Examples:
    >>> import numpy as np
    >>> inc = np.arange(100) % 2 == 0
    >>> r = audit(inc.astype(float), inc, num_positive_guesses=50, num_negative_guesses=50)
    >>> r.num_correct, round(r.epsilon_lower, 2)
    (100, 3.49)
  """
  s = _validate.check_array(scores_K, "scores_K", ndim=1, allow_inf=True, min_size=1)
  inc = _validate.check_binary(included_K, "included_K", shape=s.shape)
  kp = _validate.check_int(num_positive_guesses, "num_positive_guesses", minimum=0)
  kn = _validate.check_int(num_negative_guesses, "num_negative_guesses", minimum=0)
  if kp + kn > s.size:
    raise ValueError(f"num_positive_guesses + num_negative_guesses must be <= {s.size} "
                     f"(the number of canaries), got {kp} + {kn}")
  order = np.argsort(-s, kind="stable")
  correct = int(inc[order[:kp]].sum()) + int((~inc[order[s.size - kn:]]).sum() if kn else 0)
  eps = epsilon_lower_bound(num_canaries=s.size, num_guesses=kp + kn, num_correct=correct,
                            delta=delta, confidence=confidence)
  return OneRunResult(eps, int(s.size), kp + kn, correct)


# ----------------------------------------------------------------------------------
# f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2025).

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
  """x -> max_j of the (eps_j, delta_j)-DP inverse blow-up: the f-DP curve of a privacy profile.

  A mechanism that is (eps_j, delta_j)-DP for every j has trade-off function
  f >= max_j f_{eps_j, delta_j} (Dong, Roth & Su 2019, Prop. 2.12): the curve that
  `dpjax.tradeoff.pld_tpr_bound` reads from a PLD, here as f(1 - x) per row P.
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
  """r_0 + h_0 - r/m of the recursion (> 0: "f-DP with >= v correct" rejected at alpha).

  Vectorised over `size` candidates (the P axis): trade-off functions of
  `inverse_blowup`, or levels when `alpha` is a float[P].
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
  """Whether `num_correct` correct guesses reject "the run is f-DP" at 1 - confidence.

  The test of Mahloujifar, Melis & Chaudhuri 2025 (their one-run analysis for a
  trade-off function f; https://arxiv.org/abs/2410.22235). With m canaries, each
  included independently with probability 1/2, and r guesses made after seeing
  the run (abstaining on the rest), suppose P[V >= v] >= tau for the number V of
  correct guesses. Write h_inv(x) = f(1 - x) for the least probability, under one
  input, of an event of probability x under its neighbour. Start from
  t_v = tau v / m and w_v = tau (r - v) / m and, for i = v - 1, ..., 0,

      w_i = max(w_{i+1}, h_inv(t_{i+1})),
      t_i = min(1, t_{i+1} + i / (r - i) * (w_i - w_{i+1})).

  An f-DP mechanism has t_0 + w_0 <= r / m; so t_0 + w_0 > r / m rejects "f-DP
  and P[V >= v] >= tau", i.e. it rejects f-DP at level tau = 1 - confidence.
  Guesses may be IN or OUT: the families below are symmetric trade-off functions,
  so a guess of OUT is a guess of IN for the flipped bit.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r].
    family: "gdp" (f = G_mu, `parameter` = mu > 0) or "dp" (f = the (eps, delta)-DP
      trade-off max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)), `parameter` =
      eps >= 0) or "subsampled_gaussian" (DP-SGD: T = `num_steps` steps of the
      Poisson-subsampled Gaussian at rate q = `sampling_prob`, `parameter` = the noise
      multiplier sigma > 0; f = max_j f_{eps_j, delta(eps_j)} over 1,000 eps of the
      privacy profile of our PLD (`dpjax.accounting.pld`, both neighbour directions,
      FFT rounding noise added), the curve of `dpjax.tradeoff.pld_tpr_bound`: a valid
      lower bound on the exact curve).
    parameter: mu, eps or sigma, as above.
    delta: the delta of the "dp" family, in [0, 1) (ignored otherwise).
    confidence: in (0, 1).
    sampling_prob: q in (0, 1], "subsampled_gaussian" only (required there).
    num_steps: T >= 1, "subsampled_gaussian" only (required there).
  Returns:
    True when the claim is rejected.

  Examples:
    >>> fdp_rejects(num_canaries=1000, num_guesses=100, num_correct=100, family="gdp",
    ...             parameter=1.0)
    True
    >>> fdp_rejects(num_canaries=1000, num_guesses=100, num_correct=60, family="gdp",
    ...             parameter=1.0)
    False
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  family, parameter, delta, q_t = _check_family(family, parameter, delta, sampling_prob,
                                                num_steps)
  alpha = 1.0 - _validate.check_confidence(confidence)
  if v == 0:
    return False
  inv = _make_inverse(family, delta, q_t)(np.array([_internal(family, parameter)]))
  return bool(_fdp_excess(m, r, v, inv, alpha, 1)[0] > 0)


def fdp_p_value(*, num_canaries: int, num_guesses: int, num_correct: int, family: str,
                parameter: float, delta: float = 0.0, sampling_prob: Optional[float] = None,
                num_steps: Optional[int] = None) -> float:
  """Upper bound on P[V >= num_correct] for an f-DP run (Mahloujifar et al. 2025).

  The test of `fdp_rejects` at level tau shows P[V >= v] < tau whenever it rejects,
  and rejection grows with tau; the bound is the smallest tau found rejected, from
  a log-spaced grid on [1e-15, 1] refined three times on 63-point linear grids
  (it errs upwards, never below the crossing). 1 when nothing is rejected.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r].
    family, parameter, delta, sampling_prob, num_steps: the trade-off function, as in
      `fdp_rejects`.
  Returns:
    A bound in (0, 1] on the probability of >= v correct guesses.

  Examples:
    >>> p = fdp_p_value(num_canaries=100, num_guesses=10, num_correct=10, family="dp",
    ...                 parameter=0.0)
    >>> bool(0.0009 < p < 0.0011)                      # ten fair coins all right: 2^-10
    True
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  family, parameter, delta, q_t = _check_family(family, parameter, delta, sampling_prob,
                                                num_steps)
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
  elif parameter is not None:
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
  return (_validate.check_sampling_prob(sampling_prob),
          _validate.check_int(num_steps, "num_steps"))


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
  """Largest u = 2^(k/256) (integer k) rejected, >= start; `start` when none is.

  For "subsampled_gaussian" (u = 1 / sigma): each u costs one PLD composition, so
  the search bisects over the fixed grid k (cached profiles are reused across calls)
  instead of refining 63-point grids. The answer is a grid point rejected, never
  above the crossing (rejection is monotone in u, the curves being ordered).
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
  """Largest parameter (mu or eps) rejected, >= start; `start` itself when it is not rejected.

  Rejection is monotone in the parameter (a larger mu or eps makes the inverse
  blow-up, hence the recursion's growth, smaller). A bracket [lo, hi] with lo
  rejected and hi not is refined on 63-point grids three times (resolution
  (hi - lo) / 64^3); the answer is the largest grid point rejected, never above
  the crossing.
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

  family "dp": the largest eps for which `fdp_rejects(family="dp", parameter=eps,
  delta=delta)`: the run is not (eps, delta)-DP, whatever the mechanism, with
  probability >= confidence. family "gdp": the largest mu rejected, converted to
  the eps at `delta` of a mu-GDP mechanism (`dpjax.accounting.gdp`); this rejects
  "the run is (eps, delta)-DP" only for mechanisms whose trade-off curve is
  Gaussian (the paper's setting for the Gaussian mechanism and DP-SGD); a
  mechanism that is (eps, delta)-DP without being mu-GDP can exceed it. family
  "subsampled_gaussian": the smallest noise multiplier sigma rejected for T steps of
  DP-SGD at rate q (the largest privacy loss rejected), converted to eps at `delta`
  by our PLD accountant (`dpjax.accounting.dpsgd_epsilon(..., accountant="pld")`);
  it rejects (eps, delta)-DP only for runs whose curve is that of DP-SGD at some sigma
  (Mahloujifar et al.'s analysis of DP-SGD).

  Rejection is monotone in mu (eps, 1 / sigma): the search refines a grid to a
  resolution of (upper end) / 64^3 (for sigma: a factor 2^(1/256)) on the rejected
  side of the crossing, never past it.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r], with
      the number of guesses fixed before the run is seen.
    delta: in (0, 1) for "gdp" and "subsampled_gaussian" (the delta of the eps
      reported); in [0, 1) for "dp".
    family: "dp", "gdp" or "subsampled_gaussian".
    confidence: in (0, 1).
    sampling_prob, num_steps: q in (0, 1] and T >= 1, for "subsampled_gaussian" only.
  Returns:
    FdpOneRunResult.

  Examples:
    >>> r = fdp_epsilon_lower_bound(num_canaries=1000, num_guesses=100, num_correct=100,
    ...                             delta=0.0)
    >>> round(r.epsilon_lower, 2)                      # Steinke et al.: 3.49
    3.49
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  delta = _validate.check_delta(delta, allow_zero=family == "dp")
  alpha = 1.0 - _validate.check_confidence(confidence)
  q_t = _check_steps(family, sampling_prob, num_steps)
  p = _fdp_parameter(m, r, v, family, delta, alpha, q_t=q_t)
  return FdpOneRunResult(_fdp_epsilon(p, family, delta, q_t),
                         p if family == "gdp" else math.nan, family, m, r, v,
                         _sigma_of(p) if family == "subsampled_gaussian" else math.nan)


def _sigma_of(inv_sigma: float) -> float:
  return math.inf if inv_sigma == 0.0 else 1.0 / inv_sigma


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
    return float(accounting.dpsgd_epsilon(1.0 / parameter, q_t[0], q_t[1], delta,
                                          accountant="pld"))
  from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top
  return float(gdp.gaussian_epsilon(delta, parameter))


# ----------------------------------------------------------------------------------
# Several guess counts, declared in advance, with a union bound.

ONE_RUN_METHODS = ("steinke", "fdp", "fdp_gdp", "fdp_subsampled_gaussian")


def declared_guess_counts(num_canaries: int, num_levels: int = 12) -> tuple[int, ...]:
  """The guess counts r_j = 2 floor(m / 2^(j+1)), j = 0..num_levels-1, those >= 2.

  Half of each r_j are IN guesses on the top scores, half OUT guesses on the
  bottom ones. The set depends only on m, so it is declared before any score.

  Examples:
    >>> declared_guess_counts(1000, 4)
    (1000, 500, 250, 124)
  """
  m = _validate.check_int(num_canaries, "num_canaries")
  levels = _validate.check_int(num_levels, "num_levels")
  out = []
  for j in range(levels):
    r = 2 * (m >> (j + 1)) if j < 64 else 0
    if r < 2:
      break
    if r not in out:
      out.append(r)
  return tuple(out)


class DeclaredGuessResult(NamedTuple):
  """The best one-run bound over a declared set of guess counts (union bound)."""
  epsilon_lower: float
  mu_lower: float                      # the largest mu rejected ("fdp_gdp"), else nan
  num_guesses: int                     # the guess count attaining the bound
  num_correct: int
  guess_counts: tuple[int, ...]
  confidence_per_test: float
  method: str
  # the smallest noise multiplier rejected ("fdp_subsampled_gaussian"), else nan
  noise_multiplier_upper: float = math.nan


def audit_declared_guesses(scores_K, included_K, *, delta: float, confidence: float = 0.95,
                           method: str = "steinke", guess_counts=None,
                           sampling_prob: Optional[float] = None,
                           num_steps: Optional[int] = None) -> DeclaredGuessResult:
  """One-run bound maximised over guess counts declared in advance, valid at `confidence`.

  For each declared r (default `declared_guess_counts(K)`), guess IN for the r/2
  highest scores and OUT for the r/2 lowest, and compute the bound at confidence
  1 - (1 - confidence) / J (J = number of counts); by the union bound the largest
  of the J bounds holds at `confidence`. Methods: "steinke" (`epsilon_lower_bound`),
  "fdp", "fdp_gdp" and "fdp_subsampled_gaussian" (`fdp_epsilon_lower_bound` with
  family "dp" / "gdp" / "subsampled_gaussian"; the last two are valid only if the
  run is mu-GDP, resp. T steps of DP-SGD at rate q for some sigma).

  Args:
    scores_K: float[K] canary scores (higher = more likely included).
    included_K: bool[K] inclusion bits, each drawn independently with probability 1/2.
    delta: in [0, 1) ((0, 1) for "fdp_gdp" and "fdp_subsampled_gaussian").
    confidence: in (0, 1).
    method: one of `ONE_RUN_METHODS`.
    guess_counts: optional even guess counts in [2, K], fixed before seeing the scores.
    sampling_prob, num_steps: q in (0, 1] and T >= 1, for "fdp_subsampled_gaussian" only.
  Returns:
    DeclaredGuessResult.

  Examples:
    >>> import numpy as np
    >>> inc = np.arange(1000) % 2 == 0
    >>> r = audit_declared_guesses(inc + 0.0, inc, delta=0.0)
    >>> r.num_guesses, r.num_correct, round(r.epsilon_lower, 2)
    (1000, 1000, 5.26)
  """
  s = _validate.check_array(scores_K, "scores_K", ndim=1, allow_inf=True, min_size=2)
  inc = _validate.check_binary(included_K, "included_K", shape=s.shape).astype(bool)
  method = _validate.check_choice(method, ONE_RUN_METHODS, "method")
  delta = _validate.check_delta(delta, allow_zero=method in ("steinke", "fdp"))
  confidence = _validate.check_confidence(confidence)
  fam = {"fdp": "dp", "fdp_gdp": "gdp", "fdp_subsampled_gaussian": "subsampled_gaussian"
         }.get(method)
  q_t = _check_steps(fam, sampling_prob, num_steps)
  m = s.size
  if guess_counts is None:
    counts = declared_guess_counts(m)
  else:
    counts = tuple(int(c) for c in _validate.check_array(
        guess_counts, "guess_counts", ndim=1, low=2, high=m, integer=True, min_size=1))
    if any(c % 2 for c in counts):
      raise ValueError(f"guess_counts must be even (half IN, half OUT), got {counts}")
  per = 1.0 - (1.0 - confidence) / len(counts)
  alpha = 1.0 - per
  order = np.argsort(-s, kind="stable")
  correct = {r: int(inc[order[:r // 2]].sum()) + int((~inc[order[m - r // 2:]]).sum())
             for r in counts}
  # Most promising count first (highest lower confidence limit on the accuracy), so
  # that later counts are mostly dismissed by one test at the best value so far.
  acc_lo = {r: float(stats.beta.ppf(alpha / 2, correct[r], r - correct[r] + 1))
            if correct[r] > 0 else 0.0 for r in counts}
  best_p, best_r = 0.0, counts[0]
  for r in sorted(counts, key=lambda c: -acc_lo[c]):
    v = correct[r]
    if fam is None:
      if best_p > 0 and p_value(m, r, v, best_p, delta) > alpha:
        continue                       # not rejected at the best eps so far: no gain
      p = epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v, delta=delta,
                              confidence=per)
    else:
      p = _fdp_parameter(m, r, v, fam, delta, alpha, best_p, q_t)
    if p > best_p:
      best_p, best_r = p, r
  eps = _fdp_epsilon(best_p, fam, delta, q_t) if fam else best_p
  return DeclaredGuessResult(
      float(eps), float(best_p) if fam == "gdp" else math.nan, int(best_r),
      int(correct[best_r]), counts, float(per), method,
      _sigma_of(best_p) if fam == "subsampled_gaussian" else math.nan)
