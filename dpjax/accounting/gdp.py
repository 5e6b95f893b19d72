"""Gaussian differential privacy (Dong, Roth & Su 2022) and the exact Gaussian (eps, delta).

A mechanism is mu-GDP when distinguishing neighbours is no easier than telling N(0, 1)
from N(mu, 1). The Gaussian mechanism with L2 sensitivity Delta and noise std sigma is
exactly mu-GDP, mu = Delta / sigma; k of them compose to mu * sqrt(k). Its privacy
profile is (Balle & Wang 2018, Thm 8)

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps * Phi(-eps/mu - mu/2),

and the optimal membership test has TPR = Phi(Phi^{-1}(FPR) + mu)
(`dpjax.tradeoff.gaussian_tpr`). Host NumPy/SciPy, float64.

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
  """Exact delta(eps) of a mu-GDP mechanism (a Gaussian mechanism with mu = Delta/sigma).

  eps >= 0 and mu > 0 broadcast; computed in log space. delta(inf) = 0, and 0 where
  Phi(-eps/mu + mu/2) underflows (true delta below 5e-324). Where the two terms agree to
  more than 8 digits (tiny mu, or eps/mu in the thousands) the difference is taken in
  mpmath, so a tiny mu keeps its relative accuracy (delta(0) = erf(mu / sqrt 8)).

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
  # delta <= exp(a): where a underflows to -inf (eps = inf among them) delta is 0;
  # b - a would be -inf - (-inf) there.
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
  """delta(eps) of mu-GDP in mpmath, with enough bits for the cancellation.

  The terms agree to about log2(|log_term| / gap) bits, gap being at least of order
  mu^2 / max(eps, 1) relative, so 128 + log2(1 + |log_term|) + 4 log2(1/mu) bits leave
  more than 64 after the subtraction.
  """
  prec = 128 + math.ceil(math.log2(1.0 + abs(log_term))) + 4 * max(0, math.ceil(-math.log2(mu)))
  prec += math.ceil(math.log2(1.0 + eps))
  with mpmath.workprec(prec):
    e, m = mpmath.mpf(eps), mpmath.mpf(mu)
    d = mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)
    return max(0.0, float(d))


@_validate.names_extreme_arguments
def gaussian_epsilon(delta: float, mu: float) -> float:
  """Smallest eps >= 0 with delta(eps) <= delta for a mu-GDP mechanism (exact); 0.0 when the
  mechanism is already (0, delta)-DP."""
  delta = _validate.check_delta(delta)
  mu = _validate.check_positive(mu, "mu")
  if gaussian_delta(0.0, mu) <= delta:
    return 0.0
  hi = max(1.0, mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0)
  while gaussian_delta(hi, mu) > delta:
    hi *= 2
  eps = float(optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi,
                              xtol=1e-14, rtol=1e-14, maxiter=500))
  # The root finder may stop a hair below the root; step up to an eps whose
  # delta(eps) is <= delta as evaluated (delta(eps) decreases in eps).
  while gaussian_delta(eps, mu) > delta:
    eps = max(eps * (1.0 + 1e-13), eps + 1e-300)
  return eps


@_validate.names_extreme_arguments
def mu_for_epsilon(epsilon: float, delta: float) -> float:
  """The largest mu whose Gaussian mechanism is (epsilon, delta)-DP (exact, Balle-Wang).

  The analytic Gaussian calibration is sigma = sensitivity / mu_for_epsilon(eps, delta).
  """
  epsilon = _validate.check_epsilon(epsilon)
  delta = _validate.check_delta(delta)
  lo, hi = 1e-12, 1.0
  while gaussian_delta(epsilon, hi) < delta:
    hi *= 2
    if hi > 1e6:
      raise ValueError("epsilon/delta out of range: no finite mu found")
  mu = float(optimize.brentq(lambda m: gaussian_delta(epsilon, m) - delta, lo, hi,
                             xtol=1e-15, rtol=1e-15, maxiter=500))
  # The root finder may stop a hair on the unsafe side; step down to a mu whose
  # delta(eps) is <= delta (delta(eps) increases with mu).
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
  """APPROXIMATE mu of T steps of DP-SGD by the GDP central limit theorem.

  Bu, Dong, Long & Su 2020 (https://arxiv.org/abs/1911.11607): as T -> inf with q sqrt(T)
  fixed, T subsampled Gaussian steps approach mu-GDP with

      poisson: mu = q sqrt(T (e^{1/sigma^2} - 1)),
      uniform: mu = q sqrt(2T (e^{1/sigma^2} Phi(1.5/sigma) + 3 Phi(-0.5/sigma) - 2)).

  Warning: this is a limit theorem, not a bound. For finite T it can be below the true
  privacy loss (it under-reports eps when q sqrt(T) is not small relative to T, or sigma
  is small). Use `rdp` or `pld` for a guarantee; report this figure only labelled as an
  approximation.

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
  """APPROXIMATE eps(delta) of DP-SGD from the GDP CLT (see `dpsgd_clt_mu`).

  Warning: an approximation (Bu et al. 2020), not an upper bound.

  Examples:
    >>> round(dpsgd_clt_epsilon(1.3, 256 / 60000, 3516, 1e-5), 2)
    0.83
  """
  _validate.check_delta(delta)
  return gaussian_epsilon(delta, dpsgd_clt_mu(noise_multiplier, sampling_prob, num_steps,
                                              sampler))
