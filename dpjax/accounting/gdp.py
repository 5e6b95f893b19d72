"""Gaussian differential privacy (Dong, Roth & Su 2022) and the exact Gaussian (eps, delta).

mu-GDP: neighbours are no easier to tell apart than N(0, 1) from N(mu, 1). The Gaussian
mechanism (L2 sensitivity Delta, std sigma) is exactly mu-GDP, mu = Delta / sigma; k compose
to mu sqrt(k). Profile (Balle & Wang 2018, Thm 8):
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).
Host NumPy/SciPy, float64.

Examples:
  >>> round(gaussian_epsilon(1e-5, 1.0), 4)   # one mu = 1 Gaussian at delta = 1e-5
  4.3772
  >>> round(gaussian_delta(0.0, 1.0), 4)       # its delta at eps = 0: 2 Phi(1/2) - 1
  0.3829
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
from scipy import optimize, special

from dpjax import _validate


@_validate.names_extreme_arguments
def gaussian_delta(epsilon, mu):
  """Exact delta(eps) of a mu-GDP mechanism; eps >= 0 and mu > 0 broadcast.

  Log space; 0 where the first term underflows; where the two terms agree to more than 8
  digits the difference is taken in mpmath (tiny mu keeps its relative accuracy).

  Examples:
    >>> gaussian_delta(float("inf"), 1.0), gaussian_delta(1e300, 1.0)
    (0.0, 0.0)
    >>> round(gaussian_delta(0.0, 1e-300) / 1e-300, 6)   # 1 / sqrt(2 pi)
    0.398942
  """
  eps = _validate.check_array(epsilon, "epsilon", low=0.0, allow_inf=True)
  mu = _validate.check_array(mu, "mu", low=0.0, open_low=True)
  with np.errstate(invalid="ignore", over="ignore"):
    a = special.log_ndtr(-eps / mu + mu / 2)
    b = eps + special.log_ndtr(-eps / mu - mu / 2)
    gap = b - a
    # exp(a) - exp(b) = exp(a) * (1 - exp(b - a)), b <= a always.
    out = np.exp(a) * -np.expm1(np.minimum(gap, 0.0))
  # delta <= exp(a): where a underflows to -inf (eps = inf among them) delta is 0.
  out = np.where(a == -np.inf, 0.0, out)
  lost = np.isfinite(a) & ~(np.abs(gap) >= 1e-8 * np.maximum(np.abs(a), 1.0))
  if np.any(lost):
    out = np.array(out, np.float64)
    e_b, m_b, a_b = np.broadcast_arrays(eps, mu, a)
    for i in np.argwhere(np.broadcast_to(lost, out.shape)):
      i = tuple(i)
      out[i] = _gaussian_delta_mp(float(e_b[i]), float(m_b[i]), float(a_b[i]))
  out = np.maximum(out, 0.0)
  return float(out) if out.ndim == 0 else out


def _gaussian_delta_mp(eps: float, mu: float, log_term: float) -> float:
  """delta(eps) of mu-GDP in mpmath; the precision leaves more than 64 bits after the
  cancellation (the relative gap is at least of order mu^2 / max(eps, 1))."""
  prec = 128 + math.ceil(math.log2(1.0 + abs(log_term))) + 4 * max(0, math.ceil(-math.log2(mu)))
  prec += math.ceil(math.log2(1.0 + eps))
  with mpmath.workprec(prec):
    e, m = mpmath.mpf(eps), mpmath.mpf(mu)
    d = mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)
    return max(0.0, float(d))


@_validate.names_extreme_arguments
def gaussian_epsilon(delta: float, mu: float) -> float:
  """Smallest eps >= 0 with delta(eps) <= delta for a mu-GDP mechanism (exact); 0.0 when the
  mechanism is already (0, delta)-DP. ValueError naming mu when eps passes the float64
  maximum (eps >= mu^2 / 2 - mu sqrt(2 log(1 / delta)): mu above about 1.9e154)."""
  delta = _validate.check_delta(delta)
  mu = _validate.check_positive(mu, "mu")
  if gaussian_delta(0.0, mu) <= delta:
    return 0.0
  hi = max(1.0, mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0)
  if math.isinf(hi):
    raise ValueError(f"mu = {mu!r}: epsilon (about mu^2 / 2) exceeds the float64 maximum "
                     "1.8e308; mu must be below about 1.9e154")
  while gaussian_delta(hi, mu) > delta:
    hi *= 2
  eps = float(optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi,
                              xtol=1e-14, rtol=1e-14, maxiter=500))
  # Step up past the root finder's answer until delta(eps) <= delta as evaluated.
  while gaussian_delta(eps, mu) > delta:
    eps = max(eps * (1.0 + 1e-13), eps + 1e-300)
  return eps


@_validate.names_extreme_arguments
def mu_for_epsilon(epsilon: float, delta: float) -> float:
  """The largest mu whose Gaussian mechanism is (epsilon, delta)-DP (exact, Balle-Wang):
  the analytic Gaussian calibration is sigma = sensitivity / mu."""
  epsilon = _validate.check_epsilon(epsilon)
  delta = _validate.check_delta(delta)
  lo, hi = 1e-12, 1.0
  while gaussian_delta(epsilon, hi) < delta:
    hi *= 2
    if hi > 1e6:
      raise ValueError("epsilon/delta out of range: no finite mu found")
  mu = float(optimize.brentq(lambda m: gaussian_delta(epsilon, m) - delta, lo, hi,
                             xtol=1e-15, rtol=1e-15, maxiter=500))
  # Step down past the root finder's answer until delta(eps) <= delta as evaluated.
  while gaussian_delta(epsilon, mu) > delta:
    mu *= 1.0 - 1e-13
  return mu


@_validate.names_extreme_arguments
def compose_mu(mu0: float, k: int) -> float:
  """mu of k adaptive compositions of a mu0-GDP mechanism: mu0 * sqrt(k) (exact)."""
  mu0 = _validate.check_positive(mu0, "mu0")
  k = _validate.check_int(k, "k")
  return mu0 * math.sqrt(k)


@_validate.names_extreme_arguments
def dpsgd_clt_mu(noise_multiplier: float, sampling_prob: float, num_steps: int,
                 sampler: str = "poisson") -> float:
  """APPROXIMATE mu of T steps of DP-SGD by the GDP CLT (Bu, Dong, Long & Su 2020):

      poisson: mu = q sqrt(T (e^{1/sigma^2} - 1)),
      uniform: mu = q sqrt(2T (e^{1/sigma^2} Phi(1.5/sigma) + 3 Phi(-0.5/sigma) - 2)).

  Warning: a limit theorem, not a bound; it can under-report eps for finite T. Use `rdp`
  or `pld` for a guarantee.

  Examples:
    >>> round(dpsgd_clt_mu(1.3, 256 / 60000, 3516), 3)   # Bu et al.: MNIST, 15 epochs
    0.227
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  _validate.check_choice(sampler, ("poisson", "uniform"), "sampler")
  if sampler == "poisson":
    return q * math.sqrt(t * math.expm1(sigma ** -2))
  inner = (math.exp(sigma ** -2) * special.ndtr(1.5 / sigma)
           + 3.0 * special.ndtr(-0.5 / sigma) - 2.0)
  return q * math.sqrt(2.0 * t * inner)


@_validate.names_extreme_arguments
def dpsgd_clt_epsilon(noise_multiplier: float, sampling_prob: float, num_steps: int,
                      delta: float, sampler: str = "poisson") -> float:
  """APPROXIMATE eps(delta) of DP-SGD from the GDP CLT (`dpsgd_clt_mu`), not a bound.

  Examples:
    >>> round(dpsgd_clt_epsilon(1.3, 256 / 60000, 3516, 1e-5), 2)
    0.83
  """
  _validate.check_delta(delta)
  return gaussian_epsilon(delta, dpsgd_clt_mu(noise_multiplier, sampling_prob, num_steps,
                                              sampler))
