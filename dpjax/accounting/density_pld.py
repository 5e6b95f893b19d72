"""The PLD of any pair of one-dimensional densities given as log-densities on a grid.

The pair (P, Q) is defined by its log-densities at points x_0 < ... < x_K: on each cell
[x_i, x_{i+1}] both log-densities are linear (log-linear interpolation), outside [x_0, x_K]
there is no mass, and each is normalised. Every cell then holds exact masses
P_i = w e^{a} (e^{b - a} - 1) / (b - a) (a, b the end log-densities, w the width) and a
privacy loss L = log p - log q that is linear, so within [l_lo, l_hi] (its end values).
The worst pair with these masses and losses puts P-mass u at l_hi and P_i - u at l_lo with
u e^{-l_hi} + (P_i - u) e^{-l_lo} = Q_i: any in-cell law is a post-processing of it. These
atoms are gridded by connect-the-dots (`pld_grid.atoms_to_grid`), so every delta(eps) read
is an upper bound for the interpolated pair; `tail_mass` adds mass at +inf for a pair
truncated to the window. A Laplace pair with x = 0 and x = Delta on the grid is
interpolated exactly; a Gaussian pair converges as the squared spacing.
Shapes: K + 1 grid points; host NumPy float64.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from dpjax import _validate
from dpjax.accounting import pld, pld_grid


def _cell_log_mass(a: np.ndarray, b: np.ndarray, log_w: np.ndarray) -> np.ndarray:
  """log of the integral of exp(linear from a to b) over a cell of width e^{log_w}."""
  with np.errstate(invalid="ignore"):
    d = b - a
  d = np.where(np.isneginf(a) & np.isneginf(b), 0.0, d)
  small = np.abs(d) < 1e-8
  safe = np.where(small, 1.0, d)
  # log((e^d - 1) / d), computed on the larger end: max(a, b) + log((1 - e^{-|d|}) / |d|)
  big = np.maximum(a, b)
  with np.errstate(divide="ignore"):
    core = np.log(-np.expm1(-np.abs(safe))) - np.log(np.abs(safe))
  return log_w + np.where(small, 0.5 * (a + b), big + core)


def _direction(x_log_w, lp, lq, h, tail) -> pld_grid.LossPmf:
  """The (P || Q) loss pmf of the interpolated pair; lp, lq normalised log-densities."""
  mp = np.exp(_cell_log_mass(lp[:-1], lp[1:], x_log_w))
  mq = np.exp(_cell_log_mass(lq[:-1], lq[1:], x_log_w))
  with np.errstate(invalid="ignore"):
    la, lb = lp[:-1] - lq[:-1], lp[1:] - lq[1:]
  lo, hi = np.minimum(la, lb), np.maximum(la, lb)
  inf_mass = float(mp[np.isposinf(hi)].sum()) + tail
  keep = (mp > 0) & np.isfinite(hi)
  lo, hi, mp, mq = lo[keep], hi[keep], mp[keep], mq[keep]
  lo = np.maximum(lo, hi - 700.0)   # a looser lower end only moves mass up
  split = hi - lo > 1e-12
  # u = (P e^{-lo} - Q) / (e^{-lo} - e^{-hi}), in a form stable for close ends
  den = -np.expm1(-(hi - lo))
  u = np.where(split, (mp - mq * np.exp(lo)) / np.where(split, den, 1.0), mp)
  u = np.clip(u, 0.0, mp)
  losses = np.concatenate([hi, lo])
  masses = np.concatenate([u, mp - u])
  nz = masses > 0
  if not nz.any():
    return pld_grid.LossPmf(h, 0, np.zeros(1), min(1.0, inf_mass))
  return pld_grid.atoms_to_grid(losses[nz], masses[nz], h, min(1.0, inf_mass))


@_validate.names_extreme_arguments
def log_density_pair_pld(x_K, log_p_K, log_q_K,
                         value_discretization: float = pld.DEFAULT_VALUE_DISCRETIZATION,
                         tail_mass: float = 0.0) -> pld.PrivacyLossDistribution:
  """PLD (P || Q and Q || P) of the pair of log-linearly interpolated densities (module
  docstring); x_K float[K+1] strictly increasing, log_p_K / log_q_K float[K+1] (-inf allowed,
  some finite), tail_mass in [0, 1e-3] added at +inf in both directions.

  Examples:
    >>> x = np.linspace(-30.0, 31.0, 6101)            # Lap(1) against Lap(1) shifted by 1
    >>> d = log_density_pair_pld(x, -np.abs(x), -np.abs(x - 1.0), 1e-4)
    >>> round(d.epsilon(1e-9), 4)                      # pure 1-DP
    1.0
  """
  x = _validate.check_array(x_K, "x_K", ndim=1, min_size=2)
  lp = _validate.check_array(log_p_K, "log_p_K", shape=x.shape, allow_inf=True)
  lq = _validate.check_array(log_q_K, "log_q_K", shape=x.shape, allow_inf=True)
  if not np.all(np.diff(x) > 0):
    raise ValueError("x_K must be strictly increasing")
  for arr, name in ((lp, "log_p_K"), (lq, "log_q_K")):
    if np.any(np.isposinf(arr)) or not np.any(np.isfinite(arr)):
      raise ValueError(f"{name} must be finite or -inf, with some finite value")
  h = _validate.check_positive(value_discretization, "value_discretization")
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3)
  log_w = np.log(np.diff(x))
  lp = lp - float(special.logsumexp(_cell_log_mass(lp[:-1], lp[1:], log_w)))
  lq = lq - float(special.logsumexp(_cell_log_mass(lq[:-1], lq[1:], log_w)))
  if not (np.isfinite(lp).any() and np.isfinite(lq).any()):
    raise ValueError("log_p_K and log_q_K must each give positive mass")
  return pld.PrivacyLossDistribution(
      pmfs=(_direction(log_w, lp, lq, h, tail), _direction(log_w, lq, lp, h, tail)),
      value_discretization=h)


__all__ = ["log_density_pair_pld"]
