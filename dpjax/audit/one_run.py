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

import math
from typing import NamedTuple

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

FDP_FAMILIES = ("gdp", "dp")


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
                parameter: float, delta: float = 0.0, confidence: float = 0.95) -> bool:
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
  Guesses may be IN or OUT: both families below are symmetric trade-off functions,
  so a guess of OUT is a guess of IN for the flipped bit.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r].
    family: "gdp" (f = G_mu, `parameter` = mu > 0) or "dp" (f = the (eps, delta)-DP
      trade-off max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)), `parameter` =
      eps >= 0).
    parameter: mu or eps, as above.
    delta: the delta of the "dp" family, in [0, 1) (ignored for "gdp").
    confidence: in (0, 1).
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
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  if family == "gdp":
    parameter = _validate.check_positive(parameter, "parameter")
  else:
    parameter = _validate.check_epsilon(parameter, "parameter", allow_zero=True)
  delta = _validate.check_delta(delta, allow_zero=True)
  alpha = 1.0 - _validate.check_confidence(confidence)
  if v == 0:
    return False
  inv = (_gaussian_inverse_blowup([parameter]) if family == "gdp"
         else _dp_inverse_blowup([parameter], delta))
  return bool(_fdp_excess(m, r, v, inv, alpha, 1)[0] > 0)


def fdp_p_value(*, num_canaries: int, num_guesses: int, num_correct: int, family: str,
                parameter: float, delta: float = 0.0) -> float:
  """Upper bound on P[V >= num_correct] for an f-DP run (Mahloujifar et al. 2025).

  The test of `fdp_rejects` at level tau shows P[V >= v] < tau whenever it rejects,
  and rejection grows with tau; the bound is the smallest tau found rejected, from
  a log-spaced grid on [1e-15, 1] refined three times on 63-point linear grids
  (it errs upwards, never below the crossing). 1 when nothing is rejected.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r].
    family, parameter, delta: the trade-off function, as in `fdp_rejects`.
  Returns:
    A bound in (0, 1] on the probability of >= v correct guesses.

  Examples:
    >>> p = fdp_p_value(num_canaries=100, num_guesses=10, num_correct=10, family="dp",
    ...                 parameter=0.0)
    >>> bool(0.0009 < p < 0.0011)                      # ten fair coins all right: 2^-10
    True
  """
  m, r, v = _check_guesses(num_canaries, num_guesses, num_correct)
  family = _validate.check_choice(family, FDP_FAMILIES, "family")
  if family == "gdp":
    parameter = _validate.check_positive(parameter, "parameter")
  else:
    parameter = _validate.check_epsilon(parameter, "parameter", allow_zero=True)
  delta = _validate.check_delta(delta, allow_zero=True)
  if v == 0:
    return 1.0
  inv = (_gaussian_inverse_blowup([parameter]) if family == "gdp"
         else _dp_inverse_blowup([parameter], delta))
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


def fdp_epsilon_lower_bound(*, num_canaries: int, num_guesses: int, num_correct: int,
                            delta: float, family: str = "dp",
                            confidence: float = 0.95) -> FdpOneRunResult:
  """eps lower bound from the f-DP one-run test (Mahloujifar, Melis & Chaudhuri 2025).

  family "dp": the largest eps for which `fdp_rejects(family="dp", parameter=eps,
  delta=delta)`: the run is not (eps, delta)-DP, whatever the mechanism, with
  probability >= confidence. family "gdp": the largest mu rejected, converted to
  the eps at `delta` of a mu-GDP mechanism (`dpjax.accounting.gdp`); this rejects
  "the run is (eps, delta)-DP" only for mechanisms whose trade-off curve is
  Gaussian (the paper's setting for the Gaussian mechanism and DP-SGD); a
  mechanism that is (eps, delta)-DP without being mu-GDP can exceed it.

  Rejection is monotone in mu (eps): the search refines a grid to a resolution of
  (upper end) / 64^3 below the crossing, never above it.

  Args:
    num_canaries, num_guesses, num_correct: m >= 1, r in [0, m], v in [0, r], with
      the number of guesses fixed before the run is seen.
    delta: in (0, 1) for "gdp" (the delta of the eps reported); in [0, 1) for "dp".
    family: "dp" or "gdp".
    confidence: in (0, 1).
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
  p = _fdp_parameter(m, r, v, family, delta, alpha)
  return FdpOneRunResult(_fdp_epsilon(p, family, delta), p if family == "gdp" else math.nan,
                         family, m, r, v)


def _fdp_parameter(m, r, v, family, delta, alpha, start: float = 0.0) -> float:
  """The largest eps ("dp") or mu ("gdp") rejected, >= start (start when none is)."""
  if family == "dp":
    return _largest_rejected(m, r, v, lambda p: _dp_inverse_blowup(p, delta), alpha, start)
  return _largest_rejected(m, r, v, _gaussian_inverse_blowup, alpha, start)


def _fdp_epsilon(parameter: float, family: str, delta: float) -> float:
  """eps of a rejected parameter: itself for "dp", the eps at delta of mu-GDP for "gdp"."""
  if family == "dp" or parameter == 0.0 or math.isinf(parameter):
    return float(parameter)
  from dpjax.accounting import gdp  # pylint: disable=g-import-not-at-top
  return float(gdp.gaussian_epsilon(delta, parameter))


# ----------------------------------------------------------------------------------
# Several guess counts, declared in advance, with a union bound.

ONE_RUN_METHODS = ("steinke", "fdp", "fdp_gdp")


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


def audit_declared_guesses(scores_K, included_K, *, delta: float, confidence: float = 0.95,
                           method: str = "steinke",
                           guess_counts=None) -> DeclaredGuessResult:
  """One-run bound maximised over guess counts declared in advance, valid at `confidence`.

  For each declared r (default `declared_guess_counts(K)`), guess IN for the r/2
  highest scores and OUT for the r/2 lowest, and compute the bound at confidence
  1 - (1 - confidence) / J (J = number of counts); by the union bound the largest
  of the J bounds holds at `confidence`. Methods: "steinke" (`epsilon_lower_bound`),
  "fdp" and "fdp_gdp" (`fdp_epsilon_lower_bound` with family "dp" / "gdp"; the
  latter is valid only if the run is mu-GDP).

  Args:
    scores_K: float[K] canary scores (higher = more likely included).
    included_K: bool[K] inclusion bits, each drawn independently with probability 1/2.
    delta: in [0, 1) ((0, 1) for "fdp_gdp").
    confidence: in (0, 1).
    method: "steinke", "fdp" or "fdp_gdp".
    guess_counts: optional even guess counts in [2, K], fixed before seeing the scores.
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
  delta = _validate.check_delta(delta, allow_zero=method != "fdp_gdp")
  confidence = _validate.check_confidence(confidence)
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
  fam = {"fdp": "dp", "fdp_gdp": "gdp"}.get(method)
  best_p, best_r = 0.0, counts[0]
  for r in sorted(counts, key=lambda c: -acc_lo[c]):
    v = correct[r]
    if fam is None:
      if best_p > 0 and p_value(m, r, v, best_p, delta) > alpha:
        continue                       # not rejected at the best eps so far: no gain
      p = epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v, delta=delta,
                              confidence=per)
    else:
      p = _fdp_parameter(m, r, v, fam, delta, alpha, best_p)
    if p > best_p:
      best_p, best_r = p, r
  eps = _fdp_epsilon(best_p, fam, delta) if fam else best_p
  return DeclaredGuessResult(float(eps), float(best_p) if fam == "gdp" else math.nan,
                             int(best_r), int(correct[best_r]), counts, float(per), method)
