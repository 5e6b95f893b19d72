"""Trade-off curves and ROC bounds: what a privacy guarantee leaves a membership test.

A test tells OUT (record absent) from IN, with FPR alpha, FNR beta, TPR = 1 - FNR. A
mechanism's trade-off function is the smallest FNR at each FPR (f-DP, Dong, Roth & Su
2019); its TPR bounds every attack's ROC. Curves: (eps, delta)-DP (Kairouz, Oh &
Viswanath 2015) with the advantage and posterior bounds; mu-GDP, TPR = Phi(Phi^-1(FPR)
+ mu); optimal tests against randomized response and Laplace; a privacy profile
delta(eps); the ROC of a likelihood-ratio pmf pair. Host float64.
Shape letters: F false-positive rates, J grid points.

Examples:
  >>> round(dp_tpr_bound(0.01, 1.0, 1e-5), 4)          # (1, 1e-5)-DP at FPR 1%
  0.0272
  >>> round(advantage_bound(1.0), 4)                    # = tanh(1/2)
  0.4621
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from dpjax import _validate

# eps grid on which a privacy profile delta(eps) is read to bound the ROC.
_PROFILE_EPS_POINTS = 400


def _scalar_or_array(out):
  out = np.asarray(out)
  return float(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------------
# (eps, delta)-DP


@_validate.names_extreme_arguments
def dp_tpr_bound(fpr_F, epsilon: float, delta: float = 0.0):
  """Highest TPR at `fpr_F` (scalar or float[F]) against an (eps, delta)-DP mechanism.

  min(1, e^eps FPR + delta, 1 - e^-eps (1 - FPR - delta)); eps = inf: no constraint.
  Kairouz, Oh & Viswanath 2015, https://arxiv.org/abs/1311.0776, Thm 2.1.

  Examples:
    >>> round(dp_tpr_bound(0.01, 2.0, 1e-5), 3)           # lecture §6.1: 0.074
    0.074
    >>> dp_tpr_bound(0.01, 8.0, 1e-5) > 0.999             # vacuous at eps = 8
    True
  """
  f = _validate.check_array(fpr_F, "fpr_F", low=0.0, high=1.0)
  eps = _validate.check_epsilon(epsilon, allow_zero=True, allow_inf=True)
  delta = _validate.check_delta(delta, allow_zero=True)
  if math.isinf(eps):
    return _scalar_or_array(np.ones_like(f))
  e = math.exp(eps)
  return _scalar_or_array(np.clip(np.minimum(e * f + delta, 1 - (1 - f - delta) / e), 0.0, 1.0))


def advantage_bound(epsilon: float, delta: float = 0.0) -> float:
  """Largest advantage TPR - FPR under (eps, delta)-DP: (e^eps - 1 + 2 delta) / (e^eps + 1).

  Randomized response attains it up to 2 delta / (e^eps + 1). Kairouz et al. 2015; Yeom
  et al. 2018, https://arxiv.org/abs/1709.01604.

  Examples:
    >>> round(advantage_bound(2.0, 1e-5), 4)
    0.7616
  """
  eps = _validate.check_epsilon(epsilon, allow_zero=True)
  delta = _validate.check_delta(delta, allow_zero=True)
  if eps > 700.0:      # e^eps overflows: 1 - 2 (1 - delta) e^-eps / (1 + e^-eps), rounds to 1
    return 1.0 - 2.0 * (1.0 - delta) * math.exp(-eps)
  e = math.exp(eps)
  return (e - 1 + 2 * delta) / (e + 1)


def posterior_bound(prior, epsilon: float):
  """Largest P[member | output] from prior pi under eps-DP: pi e^eps / (pi e^eps + 1 - pi).

  Examples:
    >>> round(posterior_bound(0.5, 1.0), 4)
    0.7311
  """
  pi = _validate.check_array(prior, "prior", low=0.0, high=1.0)
  eps = _validate.check_epsilon(epsilon, allow_zero=True)
  if eps > 700.0:      # e^eps overflows: pi / (pi + (1 - pi) e^-eps), 0 at pi = 0
    with np.errstate(invalid="ignore"):
      return _scalar_or_array(np.where(pi > 0, pi / (pi + (1 - pi) * math.exp(-eps)), 0.0))
  return _scalar_or_array(pi * math.exp(eps) / (pi * math.exp(eps) + 1 - pi))


# ----------------------------------------------------------------------------------
# Gaussian differential privacy


def gaussian_tpr(fpr_F, mu):
  """Highest TPR at `fpr_F` against mu-GDP (mu > 0): Phi(Phi^-1(FPR) + mu).

  Dong, Roth & Su 2019, https://arxiv.org/abs/1905.02383.

  Examples:
    >>> round(gaussian_tpr(0.01, 1.0), 4)
    0.0924
  """
  f = _validate.check_array(fpr_F, "fpr_F", low=0.0, high=1.0)
  _validate.check_array(mu, "mu", low=0.0, open_low=True)
  return _scalar_or_array(stats.norm.cdf(stats.norm.ppf(f) + np.asarray(mu, np.float64)))


def gaussian_fnr(fpr_F, mu):
  """Trade-off function of mu-GDP, G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu).

  Examples:
    >>> round(gaussian_fnr(0.01, 1.0) + gaussian_tpr(0.01, 1.0), 12)
    1.0
  """
  a = _validate.check_array(fpr_F, "fpr_F", low=0.0, high=1.0)
  _validate.check_array(mu, "mu", low=0.0, open_low=True)
  return _scalar_or_array(stats.norm.cdf(stats.norm.ppf(1.0 - a) - np.asarray(mu, np.float64)))


def gaussian_mu(fpr_F, fnr_F):
  """mu of the Gaussian curve through (FPR, FNR): Phi^-1(1 - FPR) - Phi^-1(FNR).

  Broadcastable; negative below FPR + FNR = 1, +inf when one rate is 0 and the other < 1.
  Nasr et al. 2023, https://arxiv.org/abs/2302.07956.

  Examples:
    >>> round(gaussian_mu(0.01, gaussian_fnr(0.01, 1.5)), 9)
    1.5
  """
  a = _validate.check_array(fpr_F, "fpr_F", low=0.0, high=1.0)
  b = _validate.check_array(fnr_F, "fnr_F", low=0.0, high=1.0)
  try:
    np.broadcast_shapes(a.shape, b.shape)
  except ValueError:
    raise ValueError(f"fpr_F and fnr_F must have broadcastable shapes, got {a.shape} and "
                     f"{b.shape}") from None
  return _scalar_or_array(stats.norm.ppf(1.0 - a) - stats.norm.ppf(b))


def gaussian_advantage(mu: float) -> float:
  """Largest advantage TPR - FPR against mu-GDP: 2 Phi(mu / 2) - 1.

  Examples:
    >>> round(gaussian_advantage(1.0), 4)
    0.3829
  """
  mu = _validate.check_positive(mu, "mu")
  return float(2 * stats.norm.cdf(mu / 2) - 1)


# ----------------------------------------------------------------------------------
# Optimal tests against pure-DP mechanisms


def randomized_response_tpr(fpr_F, epsilon: float):
  """Highest TPR at `fpr_F` against eps-randomized response on one bit (Neyman-Pearson).

  Examples:
    >>> round(randomized_response_tpr(0.01, 1.0), 4)      # e * 1%
    0.0272
  """
  f = _validate.check_array(fpr_F, "fpr_F", low=0.0, high=1.0)
  eps = _validate.check_epsilon(epsilon)
  p = 1.0 / (1.0 + math.exp(-eps))
  tpr = np.where(f <= 1 - p, f * p / (1 - p), p + (f - (1 - p)) * (1 - p) / p)
  return _scalar_or_array(np.clip(tpr, 0, 1))


def randomized_response_advantage(epsilon: float) -> float:
  """Largest advantage against eps-randomized response: 2p - 1 = tanh(eps / 2).

  Examples:
    >>> round(randomized_response_advantage(1.0), 4)
    0.4621
  """
  eps = _validate.check_epsilon(epsilon)
  return 2 * (1.0 / (1.0 + math.exp(-eps))) - 1


def _laplace_sf(t, b):
  t = np.asarray(t, np.float64)
  return np.where(t >= 0, 0.5 * np.exp(-np.abs(t) / b), 1 - 0.5 * np.exp(-np.abs(t) / b))


def _laplace_isf(f, b):
  f = np.asarray(f, np.float64)
  return np.where(f <= 0.5, -b * np.log(2 * np.maximum(f, 1e-300)),
                  b * np.log(2 * np.maximum(1 - f, 1e-300)))


@_validate.names_extreme_arguments
def laplace_tpr(fpr_F, epsilon: float):
  """Highest TPR at `fpr_F` against Laplace(1 / eps) on 0 vs 1 (a threshold test).

  Examples:
    >>> round(laplace_tpr(0.01, 1.0), 6)                  # e * 1%, for eps <= ln 50
    0.027183
  """
  f = _validate.check_array(fpr_F, "fpr_F", low=0.0, high=1.0)
  b = 1.0 / _validate.check_epsilon(epsilon)
  return _scalar_or_array(_laplace_sf(_laplace_isf(f, b) - 1.0, b))


def laplace_advantage(epsilon: float) -> float:
  """Largest advantage against the Laplace mechanism of `laplace_tpr`: 1 - e^(-eps/2).

  Examples:
    >>> round(laplace_advantage(2.0), 4)
    0.6321
  """
  eps = _validate.check_epsilon(epsilon)
  return 1 - math.exp(-eps / 2)


# ----------------------------------------------------------------------------------
# Privacy profiles and likelihood-ratio distributions


def pld_tpr_bound(privacy_loss, fpr_F, max_epsilon: float) -> np.ndarray:
  """Largest TPR at each FPR allowed by a privacy profile: float64[F].

  min over 400 eps in [0, max_epsilon] of `dp_tpr_bound(FPR, eps, delta(eps))`, delta
  including `rounding_noise(eps)` (conservative); valid for a PLD that holds in both
  neighbour directions (Dong, Roth & Su 2019, Prop. 2.12). `privacy_loss` needs
  `delta(eps)` and `rounding_noise(eps)` (a PrivacyLossDistribution).

  Examples:
    >>> from dpjax.accounting import pld
    >>> tpr = pld_tpr_bound(pld.gaussian_pld(1.0), [0.01], 10.0)    # 1-GDP
    >>> bool(gaussian_tpr(0.01, 1.0) <= tpr[0] <= gaussian_tpr(0.01, 1.0) + 0.01)
    True
  """
  if not (callable(getattr(privacy_loss, "delta", None))
          and callable(getattr(privacy_loss, "rounding_noise", None))):
    raise TypeError("privacy_loss must have delta(eps) and rounding_noise(eps) methods "
                    f"(e.g. a PrivacyLossDistribution), got {privacy_loss!r:.80}")
  f = _validate.check_array(np.atleast_1d(fpr_F), "fpr_F", ndim=1, low=0.0, high=1.0, min_size=1)
  max_epsilon = _validate.check_epsilon(max_epsilon, "max_epsilon")
  eps = np.linspace(0.0, max_epsilon, _PROFILE_EPS_POINTS)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    dlt = np.array([min(1.0, privacy_loss.delta(e) + privacy_loss.rounding_noise(e)) for e in eps])
  a = dlt[None, :] + np.exp(eps)[None, :] * f[:, None]
  b = 1.0 - np.exp(-eps)[None, :] * (1.0 - dlt[None, :] - f[:, None])
  return np.clip(np.minimum(a, b).min(axis=1), f, 1.0)


def likelihood_ratio_roc(values_J, pmf_in_J, pmf_out_J) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
  """ROC of the tests "IN iff V > threshold" for V on an even increasing grid `values_J`.

  pmf_in_J / pmf_out_J: float[J] (sum <= 1 + 1e-9); missing mass is read pessimistically
  (pmf_in's at +inf, pmf_out's at -inf). Returns (thresholds_J halfway between grid
  values, FPR = P_OUT(V > thr), FNR = P_IN(V <= thr)), clipped to [0, 1].

  Examples:
    >>> thr, fpr, fnr = likelihood_ratio_roc([0.0, 1.0], [0.25, 0.75], [0.75, 0.25])
    >>> thr.tolist(), fpr.tolist(), fnr.tolist()
    ([0.5, 1.5], [0.25, 0.0], [0.25, 1.0])
  """
  grid = _validate.check_array(values_J, "values_J", ndim=1)
  if grid.size < 2 or not np.all(np.diff(grid) > 0):
    raise ValueError("values_J must be increasing with at least 2 entries")
  pmf_in = _validate.check_array(pmf_in_J, "pmf_in_J", shape=grid.shape, low=0.0, high=1.0)
  pmf_out = _validate.check_array(pmf_out_J, "pmf_out_J", shape=grid.shape, low=0.0, high=1.0)
  for pmf, name in ((pmf_in, "pmf_in_J"), (pmf_out, "pmf_out_J")):
    if pmf.sum() > 1.0 + 1e-9:
      raise ValueError(f"{name} must be a probability mass function (sum <= 1), got sum "
                       f"{pmf.sum():.6g}")
  h = grid[1] - grid[0]
  thr = grid + 0.5 * h
  fnr = np.cumsum(pmf_in)                         # P_IN(V <= grid_j)
  fpr = np.r_[np.cumsum(pmf_out[::-1])[::-1][1:], 0.0]
  return thr, np.clip(fpr, 0, 1), np.clip(fnr, 0, 1)
