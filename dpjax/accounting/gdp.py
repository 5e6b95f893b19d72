"""Gaussian differential privacy (Dong, Roth & Su 2022) and the exact Gaussian (eps, delta).

A mechanism is mu-GDP when distinguishing neighbours is no easier than telling
N(0, 1) from N(mu, 1). The Gaussian mechanism with L2 sensitivity Delta and noise
std sigma is exactly mu-GDP with mu = Delta / sigma, and k of them compose to
mu * sqrt(k) exactly. Its whole privacy profile is (Balle & Wang 2018, Thm 8)

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps * Phi(-eps/mu - mu/2),

and the optimal membership test has TPR = Phi(Phi^{-1}(FPR) + mu) at every FPR.

All functions run on the host (NumPy/SciPy), in float64.

Examples:
  >>> round(gaussian_epsilon(1e-5, 1.0), 4)   # one mu = 1 Gaussian at delta = 1e-5
  4.3772
  >>> round(float(tradeoff_tpr(0.01, 1.0)), 4)
  0.0924
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats


def _check_mu(mu) -> None:
  mu_arr = np.asarray(mu, np.float64)
  if not np.all(np.isfinite(mu_arr)) or np.any(mu_arr <= 0):
    raise ValueError(f"mu must be finite and > 0, got {mu}")


def _check_delta(delta: float, name: str = "delta") -> None:
  if not (0.0 < delta < 1.0):
    raise ValueError(f"{name} must be in (0, 1), got {delta}")


def gaussian_delta(epsilon, mu):
  """Exact delta(eps) of a mu-GDP mechanism (a Gaussian mechanism with mu = Delta/sigma).

  Args:
    epsilon: eps >= 0, scalar or array.
    mu: mu > 0, scalar or array broadcastable with `epsilon`.
  Returns:
    float64 array (or float) of delta, computed in log space so that large eps
    does not overflow.
  """
  eps = np.asarray(epsilon, np.float64)
  if np.any(np.isnan(eps)) or np.any(eps < 0):
    raise ValueError(f"epsilon must be >= 0, got {epsilon}")
  _check_mu(mu)
  mu = np.asarray(mu, np.float64)
  a = special.log_ndtr(-eps / mu + mu / 2)
  b = eps + special.log_ndtr(-eps / mu - mu / 2)
  # exp(a) - exp(b) = exp(a) * (1 - exp(b - a)), b <= a always.
  out = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
  out = np.maximum(out, 0.0)
  return float(out) if out.ndim == 0 else out


def gaussian_epsilon(delta: float, mu: float) -> float:
  """Smallest eps >= 0 with delta(eps) <= delta for a mu-GDP mechanism (exact).

  Args:
    delta: in (0, 1).
    mu: > 0.
  Returns:
    eps as a float (0.0 when the mechanism is already (0, delta)-DP).
  """
  _check_delta(delta)
  _check_mu(mu)
  mu = float(mu)
  if gaussian_delta(0.0, mu) <= delta:
    return 0.0
  hi = max(1.0, mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0)
  while gaussian_delta(hi, mu) > delta:
    hi *= 2
  return float(optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi,
                               xtol=1e-14, rtol=1e-14, maxiter=500))


def mu_for_epsilon(epsilon: float, delta: float) -> float:
  """The largest mu whose Gaussian mechanism is (epsilon, delta)-DP (exact, Balle-Wang).

  The analytic Gaussian calibration is sigma = sensitivity / mu_for_epsilon(eps, delta).
  """
  if not (epsilon > 0) or not math.isfinite(epsilon):
    raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
  _check_delta(delta)
  lo, hi = 1e-12, 1.0
  while gaussian_delta(epsilon, hi) < delta:
    hi *= 2
    if hi > 1e6:
      raise ValueError("epsilon/delta out of range: no finite mu found")
  return float(optimize.brentq(lambda m: gaussian_delta(epsilon, m) - delta, lo, hi,
                               xtol=1e-15, rtol=1e-15, maxiter=500))


def compose_mu(mu0: float, k: int) -> float:
  """mu of k adaptive compositions of a mu0-GDP mechanism: mu0 * sqrt(k) (exact)."""
  _check_mu(mu0)
  if int(k) != k or k < 1:
    raise ValueError(f"k must be an integer >= 1, got {k}")
  return float(mu0) * math.sqrt(k)


def tradeoff_tpr(fpr, mu):
  """Highest TPR any test achieves at false-positive rate `fpr` against mu-GDP.

  TPR = Phi(Phi^{-1}(FPR) + mu), i.e. 1 - G_mu(FPR) in f-DP notation.

  Args:
    fpr: in [0, 1], scalar or array.
    mu: > 0.
  """
  f = np.asarray(fpr, np.float64)
  if np.any(np.isnan(f)) or np.any(f < 0) or np.any(f > 1):
    raise ValueError("fpr must be in [0, 1]")
  _check_mu(mu)
  out = stats.norm.cdf(stats.norm.ppf(f) + np.asarray(mu, np.float64))
  return float(out) if np.ndim(out) == 0 else out
