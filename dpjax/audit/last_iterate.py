"""The last-iterate heuristic: what the final model alone reveals about a linear canary.

For a LINEAR loss (Steinke et al. 2025) theta_T reveals only the sum of the canary's
contributions; in units of C, with s = sigma sqrt(T),

    IN:  X = sum_t (b_t + sigma z_t) ~ sum_k Binom(k; T, q) N(k, s^2)
    OUT: X = sum_t sigma z_t         ~ N(0, s^2).

q = 1: the Gaussian mechanism, mu = sqrt(T) / sigma; q < 1: below the accountant's eps. Exact
for a Dirac gradient canary in an untouched coordinate; for a record canary a HEURISTIC, NOT A
BOUND. Inputs: q in (0, 1], finite sigma > 0, int T >= 1. Shape letters: T steps, E epsilons,
J ROC points. References: Steinke et al. 2025 (arXiv:2410.06186).

Examples:
  >>> from dpjax.accounting import gdp
  >>> e = last_iterate_epsilon(1.0, 2.0, 16, 1e-5)           # q = 1: 2-GDP
  >>> abs(e - gdp.gaussian_epsilon(1e-5, 2.0)) < 1e-6
  True
  >>> from dpjax import accounting                           # q < 1: below the accountant
  >>> exact = accounting.dpsgd_epsilon(1.0, 0.1, 100, 1e-5, accountant="pld")
  >>> round(last_iterate_epsilon(0.1, 1.0, 100, 1e-5), 2), round(exact, 2)
  (5.36, 7.05)
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats as sp_stats

from dpjax import _validate
from dpjax.audit import thresholds


def _check_mechanism(sampling_prob, noise_multiplier, num_steps):
  q = _validate.check_sampling_prob(sampling_prob)
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  if not math.isfinite(s):
    raise ValueError(f"noise_multiplier must be finite, got {noise_multiplier!r}")
  t = _validate.check_int(num_steps, "num_steps")
  return q, s, t


def _mixture(q: float, t: int):
  """(k, log w_k) of Binom(T, q), the canary's count of sampled steps (w_k > 0 only)."""
  if q >= 1.0:
    return np.array([float(t)]), np.array([0.0])
  # Four float64 arrays over k = 0..T: a T that cannot fit is named before allocating.
  _validate.check_size(t, "num_steps", bytes_per_unit=4 * 8)
  k = np.arange(t + 1, dtype=np.float64)
  logw = sp_stats.binom.logpmf(k, t, q)
  ok = np.isfinite(logw)
  return k[ok], logw[ok]


def _log_lr(x, k, logw, s):
  """log L(x) = log sum_k w_k exp((2 k x - k^2) / (2 s^2)), increasing in x."""
  x = np.asarray(x, np.float64)
  return special.logsumexp(logw + (2.0 * k * x[..., None] - k * k) / (2.0 * s * s), axis=-1)


def _solve(target, k, logw, s):
  """x with log L(x) = target (log L increases from log w_0 (or -inf) to +inf)."""
  f = lambda x: float(_log_lr(x, k, logw, s)) - target
  lo, hi = -s - 1.0, k.max() + s + 1.0
  while f(lo) > 0:
    lo = 2.0 * lo - 1.0
  while f(hi) < 0:
    hi = 2.0 * hi + 1.0
  return optimize.brentq(f, lo, hi, xtol=1e-13 * max(1.0, abs(hi)), rtol=1e-15, maxiter=500)


@_validate.names_extreme_arguments
def last_iterate_delta(epsilon, sampling_prob: float, noise_multiplier: float,
                       num_steps: int, direction: str = "both"):
  """Exact privacy profile delta(eps) of the last-iterate pair (scalar, or float64[E] for float[E]).

  With w_k = Binom(k; T, q) and the increasing L(x) = sum_k w_k exp((2 k x - k^2) / (2 s^2)),

      remove: delta = sum_k w_k Phi((k - x1) / s) - e^eps Phi(-x1 / s),  L(x1) = e^eps
      add:    delta = Phi(x2 / s) - e^eps sum_k w_k Phi((x2 - k) / s),  L(x2) = e^-eps

  (add is 0 when e^-eps <= (1 - q)^T); "both" is the max.

  Examples:
    >>> from dpjax.accounting import gdp
    >>> d = last_iterate_delta(1.0, 1.0, 2.0, 4)       # q = 1: mu = sqrt(4) / 2 = 1
    >>> abs(d - float(gdp.gaussian_delta(1.0, 1.0))) < 1e-12
    True
  """
  q, sig, t = _check_mechanism(sampling_prob, noise_multiplier, num_steps)
  direction = _validate.check_choice(direction, ("remove", "add", "both"), "direction")
  if np.ndim(epsilon) == 0:
    eps = np.array([_validate.check_epsilon(epsilon, "epsilon", allow_zero=True)])
  else:
    eps = _validate.check_array(epsilon, "epsilon", low=0.0, min_size=1)
  k, logw = _mixture(q, t)
  s = sig * math.sqrt(t)
  w = np.exp(logw)
  out = []
  for e in eps.ravel():
    x1 = _solve(e, k, logw, s)
    rem = float(np.dot(w, special.ndtr((k - x1) / s)) - math.exp(e) * special.ndtr(-x1 / s))
    log_w0 = logw[0] if k[0] == 0 else -math.inf
    if -e <= log_w0:
      add = 0.0
    else:
      x2 = _solve(-e, k, logw, s)
      add = float(special.ndtr(x2 / s) - math.exp(e) * np.dot(w, special.ndtr((x2 - k) / s)))
    d = {"remove": rem, "add": add, "both": max(rem, add)}[direction]
    out.append(min(1.0, max(0.0, d)))
  res = np.asarray(out).reshape(eps.shape)
  return float(res[0]) if np.ndim(epsilon) == 0 else res


@_validate.names_extreme_arguments
def last_iterate_epsilon(sampling_prob: float, noise_multiplier: float, num_steps: int,
                         delta: float, tol: float = 1e-9) -> float:
  """Smallest eps >= 0 with `last_iterate_delta(eps) <= delta` (bisection from above: the true value
  is in [result - tol, result]); ValueError above 1e4.

  Examples:
    >>> from dpjax.accounting import gdp
    >>> abs(last_iterate_epsilon(1.0, 1.0, 1, 1e-5) - gdp.gaussian_epsilon(1e-5, 1.0)) < 1e-8
    True
  """
  q, sig, t = _check_mechanism(sampling_prob, noise_multiplier, num_steps)
  delta = _validate.check_delta(delta)
  tol = _validate.check_positive(tol, "tol")
  f = lambda e: last_iterate_delta(e, q, sig, t)
  if f(0.0) <= delta:
    return 0.0
  lo, hi = 0.0, 1.0
  while f(hi) > delta:
    lo, hi = hi, 2.0 * hi
    if hi > 1e4:
      raise ValueError("last_iterate_epsilon: eps above 1e4 (noise_multiplier too small)")
  while hi - lo > tol:
    mid = 0.5 * (lo + hi)
    if not lo < mid < hi:   # adjacent floats: a tol below their spacing is met
      break
    if f(mid) > delta:
      lo = mid
    else:
      hi = mid
  return hi


def last_iterate_roc(sampling_prob: float, noise_multiplier: float, num_steps: int,
                     num_points: int = 4001) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(thresholds_J, fpr_J, fnr_J) of the Neyman-Pearson optimal test "IN iff X > t": -inf, J - 2
  points spanning both laws (+-12 sd), +inf.

  Examples:
    >>> thr, fpr, fnr = last_iterate_roc(1.0, 1.0, 1)          # N(1, 1) against N(0, 1)
    >>> j = int(abs(thr - 0.5).argmin())                        # at x = 1/2 the errors agree
    >>> bool(abs(fpr[j] - fnr[j]) < 1e-2), float(fpr[0]), float(fnr[-1])
    (True, 1.0, 1.0)
  """
  q, sig, t = _check_mechanism(sampling_prob, noise_multiplier, num_steps)
  j = _validate.check_size(num_points, "num_points", minimum=3, bytes_per_unit=4 * 8)
  k, logw = _mixture(q, t)
  s = sig * math.sqrt(t)
  w = np.exp(logw)
  inner = np.linspace(-12.0 * s, float(k.max()) + 12.0 * s, j - 2)
  thr = np.concatenate([[-np.inf], inner, [np.inf]])
  fpr = special.ndtr(-thr / s)
  fnr = np.array([float(np.dot(w, special.ndtr((x - k) / s))) for x in thr])
  return thr, fpr, fnr


def certifiable_epsilon(sampling_prob: float, noise_multiplier: float, num_steps: int,
                        trials: int, *, delta: float = 0.0, confidence: float = 0.95) -> float:
  """The eps lower bound the optimal final-model test of a linear canary is expected to certify.

  `thresholds.best_certifiable` on `last_iterate_roc` with `trials` trials per side: the
  target a final-model adversary of a linear canary can reach (a heuristic for record
  canaries, as the law itself).

  Examples:
    >>> e = certifiable_epsilon(1.0, 1.0, 4, 1000, delta=1e-5)        # 2-GDP, 1000 per side
    >>> 0.0 < e < last_iterate_epsilon(1.0, 1.0, 4, 1e-5)
    True
  """
  _, fpr, fnr = last_iterate_roc(sampling_prob, noise_multiplier, num_steps)
  # q < 1: the mixture's FNR can round a few ulps above 1.
  return float(thresholds.best_certifiable(fpr, np.minimum(fnr, 1.0), trials, delta=delta,
                                           confidence=confidence).epsilon)
