"""Auditing with one training run and many canaries (Steinke, Nasr & Jagielski 2023).

m canaries, each included w.p. 1/2; one training run; the auditor makes r guesses (IN for the
k+ highest scores, OUT for the k- lowest, counts fixed in advance). If training is
(eps, delta)-DP, V correct guesses satisfy (their Thm 5.2, p = e^eps / (1 + e^eps))

    P[V >= v] <= P[Bin(r, p) >= v] + 2 m delta max_{1<=i<=v} P[v - i <= Bin(r, p) < v] / i;

the eps lower bound is the largest eps this rejects at level alpha. The f-DP analysis of the
game is `dpjax.audit.one_run_fdp`. `one_run_game`, `expected_correct` and `paper_protocol`
are the idealized Gaussian game and protocol of Mahloujifar, Melis & Chaudhuri 2025, Table 1.
Shape letters: K canaries.

Examples:
  >>> round(epsilon_lower_bound(num_canaries=1000, num_guesses=100, num_correct=100, delta=0.0), 2)
  3.49
  >>> epsilon_lower_bound(num_canaries=1000, num_guesses=100, num_correct=50, delta=1e-5)
  0.0
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
from scipy import optimize, special, stats

from dpjax import _validate
from dpjax.audit import one_run_fdp


def p_value(num_canaries: int, num_guesses: int, num_correct: int, epsilon: float,
            delta: float) -> float:
  """Upper bound on P[V >= v] for an (epsilon, delta)-DP run (m canaries, r guesses, v correct).

  Examples:
    >>> round(p_value(100, 10, 10, 0.0, 0.0), 6)            # ten coin flips all right
    0.000977
  """
  m, r, v = one_run_fdp.check_guesses(num_canaries, num_guesses, num_correct)
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
  """Largest eps that v = `num_correct` of r = `num_guesses` correct guesses rejects (0 if none);
  m >= 1, r in [0, m], v in [0, r], delta in [0, 1].
  """
  m, r, v = one_run_fdp.check_guesses(num_canaries, num_guesses, num_correct)
  delta, confidence = _validate.check_delta_confidence(delta, confidence, allow_zero=True)
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
  """`p_value(m, r, v, eps_e, delta_e)` for each e, float[E]; exact window for i <= 2,000, beyond
  that bounded by P[Bin < v] / 2,001 (errs upwards only).
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
                                          confidence: float = 0.95) -> one_run_fdp.FdpOneRunResult:
  """Steinke et al.'s test at every point of a mu-GDP curve, reported as eps at `delta`.

  A mu-GDP run is (eps, delta_mu(eps))-DP for all eps, so "mu-GDP" is rejected when
  min_eps `p_value(m, r, v, eps, delta_mu(eps))` <= 1 - confidence (200-point eps grid on
  [0, eps_mu(1e-12)]). Returns the largest mu rejected (bisection to 1e-6) as a FdpOneRunResult
  of family "steinke_pointwise". Valid only for mu-GDP runs (Mahloujifar et al. 2025, Table 1).

  Examples:
    >>> r = steinke_pointwise_epsilon_lower_bound(num_canaries=1000, num_guesses=100,
    ...                                           num_correct=100, delta=1e-5)
    >>> bool(r.epsilon_lower >= epsilon_lower_bound(num_canaries=1000, num_guesses=100,
    ...                                             num_correct=100, delta=1e-5) - 0.05)
    True
  """
  m, r, v = one_run_fdp.check_guesses(num_canaries, num_guesses, num_correct)
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
  return one_run_fdp.FdpOneRunResult(float(eps), float(mu), "steinke_pointwise", m, r, v)


class OneRunResult(NamedTuple):
  """Outcome of a one-run audit: the bound and the counts behind it."""
  epsilon_lower: float
  num_canaries: int
  num_guesses: int
  num_correct: int


def audit(scores_K, included_K, *, num_positive_guesses: int, num_negative_guesses: int = 0,
          delta: float = 0.0, confidence: float = 0.95) -> OneRunResult:
  """Guesses IN for the k+ top scores and OUT for the k- bottom ones (fixed in advance); bounds eps.

  Examples:
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


# Several guess counts, declared in advance, with a union bound.

ONE_RUN_METHODS = ("steinke", "fdp", "fdp_gdp", "fdp_subsampled_gaussian")


def declared_guess_counts(num_canaries: int, num_levels: int = 12) -> tuple[int, ...]:
  """Guess counts r_j = 2 floor(m / 2^(j+1)) >= 2, j < num_levels; depend only on m.

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
  """One-run bound maximised over J guess counts declared in advance (union bound).

  Each r (default `declared_guess_counts(K)`) guesses IN for the r/2 top and OUT for the r/2
  bottom scores at confidence 1 - (1 - confidence) / J. method: "steinke"
  (`epsilon_lower_bound`), "fdp" / "fdp_gdp" / "fdp_subsampled_gaussian" (`fdp_epsilon_lower_bound`
  families "dp" / "gdp" (mu-GDP runs only) / "subsampled_gaussian" (T DP-SGD steps at rate q
  only; needs sampling_prob, num_steps)). delta in [0, 1) ((0, 1) for the last two).

  Examples:
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
  if fam is None and (sampling_prob is not None or num_steps is not None):
    raise ValueError("sampling_prob and num_steps are for method 'fdp_subsampled_gaussian' "
                     f"only, got method {method!r}")
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
      p = one_run_fdp.largest_rejected(num_canaries=m, num_guesses=r, num_correct=v, family=fam,
                                       delta=delta, confidence=per, at_least=best_p,
                                       sampling_prob=sampling_prob, num_steps=num_steps)
    if p > best_p:
      best_p, best_r = p, r
  eps = (one_run_fdp.parameter_epsilon(best_p, family=fam, delta=delta,
                                       sampling_prob=sampling_prob, num_steps=num_steps)
         if fam else best_p)
  sigma = (math.inf if best_p == 0.0 else 1.0 / best_p) if fam == "subsampled_gaussian" else math.nan
  return DeclaredGuessResult(float(eps), float(best_p) if fam == "gdp" else math.nan, int(best_r),
                             int(correct[best_r]), counts, float(per), method, sigma)


# The idealized Gaussian game and Mahloujifar et al.'s Table 1 protocol.

PAPER_METHODS = ("steinke", "steinke_pointwise", "fdp_gdp")
_POINTWISE_COUNTS = 5        # counts at which "steinke_pointwise" (seconds each) is evaluated


def one_run_game(rng: np.random.Generator, num_canaries: int, sigma: float):
  """One idealized Gaussian run: bits_K ~ Bernoulli(1/2), x_K = bits + sigma N(0, 1) (mu = 1/sigma).

  Examples:
    >>> x, bits = one_run_game(np.random.default_rng(0), 4, 0.5)
    >>> x.shape, bits.dtype
    ((4,), dtype('bool'))
  """
  _validate.check_instance(rng, np.random.Generator, "rng")
  m = _validate.check_size(num_canaries, "num_canaries", bytes_per_unit=16)
  sigma = _validate.check_positive(sigma, "sigma")
  bits = rng.random(m) < 0.5
  return bits + sigma * rng.normal(size=m), bits


@_validate.names_extreme_arguments
def top_precision(sigma: float, fraction: float) -> float:
  """P[b = 1 | x in the top `fraction`], x = b + sigma Z, b a fair coin (m -> inf); in [1/2, 1].

  The top is {x > t} with (Phi((1 - t)/sigma) + Phi(-t/sigma)) / 2 = fraction; precision
  Phi((1 - t)/sigma) / (Phi((1 - t)/sigma) + Phi(-t/sigma)), also that of the bottom OUT guesses.

  Examples:
    >>> round(top_precision(1.0, 0.5), 4)                   # Phi(1 / (2 sigma))
    0.6915
  """
  sigma = _validate.check_positive(sigma, "sigma")
  fraction = _validate.check_probability(fraction, "fraction", open_low=True, open_high=True)

  def excess(t):
    return 0.5 * (special.ndtr((1 - t) / sigma) + special.ndtr(-t / sigma)) - fraction
  t = optimize.brentq(excess, -1.0 - 60 * sigma, 2.0 + 60 * sigma, xtol=1e-14, rtol=1e-14)
  a, b = special.ndtr((1 - t) / sigma), special.ndtr(-t / sigma)
  return float(a / (a + b))


@_validate.names_extreme_arguments
def expected_correct(sigma: float, num_canaries: int, num_guesses: int) -> int:
  """The paper protocol's count ceil(c' `top_precision`(sigma, c'/(2 m))), c' even in [2, m].

  Examples:
    >>> expected_correct(1.0, 1000, 1000)           # top / bottom halves: Phi(1 / 2)
    692
  """
  m = _validate.check_int(num_canaries, "num_canaries", minimum=2)
  r = _validate.check_int(num_guesses, "num_guesses", minimum=2)
  if r > m or r % 2:
    raise ValueError(f"need an even num_guesses in [2, num_canaries], got {num_guesses!r} "
                     f"of {num_canaries!r}")
  frac = r / (2 * m)
  prec = top_precision(_validate.check_positive(sigma, "sigma"), frac) if frac < 1 else 0.5
  return min(r, math.ceil(r * prec - 1e-9))


def paper_guess_grid(num_canaries: int, points: int) -> tuple[int, ...]:
  """The c' grid of the paper protocol: even counts, geometric from 10 to m.

  Examples:
    >>> paper_guess_grid(1000, 4)
    (10, 46, 214, 1000)
  """
  m = _validate.check_int(num_canaries, "num_canaries", minimum=10)
  points = _validate.check_size(points, "points", minimum=2, bytes_per_unit=16)
  g = 2 * np.unique(np.geomspace(5, m // 2, points).astype(int))
  return tuple(int(c) for c in g)


def paper_protocol(sigma: float, num_canaries: int, *, delta: float, confidence: float,
                   grid_points: int) -> dict:
  """Mahloujifar et al.'s Table 1 protocol: each method's best bound over the c' grid.

  NOT a valid audit: counts are expected values and c' is chosen after the fact.
  "steinke_pointwise" runs only at the 5 counts with the best "steinke" bounds.
  Returns {method: {"epsilon_lower", "num_guesses", "num_correct"}} for `PAPER_METHODS`.
  """
  m = num_canaries
  grid = paper_guess_grid(m, grid_points)
  counts = {r: expected_correct(sigma, m, r) for r in grid}
  per = {"steinke": {}, "fdp_gdp": {}, "steinke_pointwise": {}}
  for r, c in counts.items():
    per["steinke"][r] = epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=c,
                                            delta=delta, confidence=confidence)
    per["fdp_gdp"][r] = one_run_fdp.fdp_epsilon_lower_bound(
        num_canaries=m, num_guesses=r, num_correct=c, delta=delta, family="gdp",
        confidence=confidence).epsilon_lower
  for r in sorted(grid, key=lambda g: -per["steinke"][g])[:_POINTWISE_COUNTS]:
    per["steinke_pointwise"][r] = steinke_pointwise_epsilon_lower_bound(
        num_canaries=m, num_guesses=r, num_correct=counts[r], delta=delta,
        confidence=confidence).epsilon_lower
  out = {}
  for meth in PAPER_METHODS:
    r = max(per[meth], key=lambda g: (per[meth][g], -g))
    out[meth] = {"epsilon_lower": float(per[meth][r]), "num_guesses": int(r),
                 "num_correct": int(counts[r])}
  return out
