"""Privacy loss distributions (PLD): numerical composition by FFT, pessimistic.

For output distributions (P, Q) of a mechanism on neighbours, the privacy loss is
L(o) = log(P(o) / Q(o)) with o ~ P, and the privacy profile is

    delta(eps) = P[L = inf] + E_P[(1 - exp(eps - L))_+].

T-fold composition is the T-fold convolution of one step's PLD (Koskela, Jalko & Honkela
2020; Meiser & Mohammadi 2018; Doroshenko et al. 2022), done by FFT on a grid of
spacing h (`value_discretization`). The grid, its pessimistic ("connect the dots")
discretisation and the FFT composition are `pld_grid`; every delta(eps) read from a
discretised PLD is an upper bound up to float64 FFT rounding, which swamps delta below
~1e-12 after many compositions (`epsilon` / `delta` warn). The DP-SGD accountant on an
adaptive grid (`dpsgd_epsilon`, `dpsgd_epsilon_bound`, ...) is `pld_dpsgd`, re-exported here.

Plain Gaussians (q = 1) compose in closed form (mu = sqrt(sum mu_i^2); `gdp`). Neighbours
are add/remove-one: a Poisson-subsampled Gaussian has a remove PLD (P = (1-q) N(0, s^2)
+ q N(1, s^2) against Q = N(0, s^2)) and an add PLD (swapped); both are composed and
every answer is the worse of the two. Runs on the host in NumPy float64.

Examples:
  >>> round(dpsgd_epsilon(1.0, 0.01, 1000, 1e-5), 3)
  1.828
  >>> pld = gaussian_pld(2.0).self_compose(100)   # exact: mu = 5
  >>> round(pld.epsilon(1e-5), 4)
  33.1037
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

from dpjax import _validate
from dpjax.accounting import gdp
from dpjax.accounting import pld_grid
from dpjax.accounting.pld_dpsgd import (  # noqa: F401  (re-exported)
    PldResult, dpsgd_delta, dpsgd_delta_bound, dpsgd_epsilon, dpsgd_epsilon_bound)
from dpjax.accounting.pld_grid import DEFAULT_TAIL_MASS, DEFAULT_VALUE_DISCRETIZATION

class PrivacyLossDistribution:
  """A PLD for add/remove-one neighbours: exact (Gaussian) or discretised.

  Build with `gaussian_pld` or `laplace_pld`, combine with `compose` / `self_compose`,
  read `epsilon(delta)` or `delta(epsilon)`. Discretised answers are upper bounds (up to
  float64 FFT rounding, ~1e-16 per grid point).
  """

  def __init__(self, *, mu: Optional[float] = None,
               pmfs: Optional[tuple[pld_grid.LossPmf, ...]] = None,
               value_discretization: float = DEFAULT_VALUE_DISCRETIZATION):
    if (mu is None) == (pmfs is None):
      raise ValueError("exactly one of mu (exact Gaussian) and pmfs must be given")
    if mu is not None:
      mu = _validate.check_positive(mu, "mu")
    value_discretization = _validate.check_positive(value_discretization,
                                                    "value_discretization")
    self._mu = mu
    self._pmfs = pmfs
    self._h = float(value_discretization)

  @property
  def is_exact(self) -> bool:
    """True when the PLD is a composition of Gaussians kept in closed form."""
    return self._mu is not None

  @property
  def mu(self) -> Optional[float]:
    """mu-GDP parameter when exact, else None."""
    return self._mu

  @property
  def value_discretization(self) -> float:
    return self._h

  @property
  def num_points(self) -> int:
    """Grid points held (0 when exact)."""
    return 0 if self._pmfs is None else sum(p.probs.size for p in self._pmfs)

  def loss_pmf(self, direction: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """(losses float64[J], probs float64[J], mass at +inf) of one direction of a
    discretised PLD (0: the first neighbour's side, 1: the other's, where held).

    Raises ValueError for an exact (Gaussian, closed-form) PLD: `discretise()` first.
    """
    if self._pmfs is None:
      raise ValueError("loss_pmf needs a discretised PLD: call discretise() first")
    direction = _validate.check_int(direction, "direction", 0, len(self._pmfs) - 1)
    p = self._pmfs[direction]
    return p.losses, p.probs.copy(), float(p.infinity_mass)

  def _discretised(self, h: float) -> tuple[pld_grid.LossPmf, ...]:
    if self._pmfs is not None:
      return self._pmfs
    return pld_grid.subsampled_gaussian_pmfs(self._mu, 1.0, h, DEFAULT_TAIL_MASS)

  def discretise(self, value_discretization: Optional[float] = None
                 ) -> "PrivacyLossDistribution":
    """This PLD on a grid of spacing h (default its own); a no-op unless exact."""
    h = self._h if value_discretization is None else _validate.check_positive(
        value_discretization, "value_discretization")
    if not self.is_exact:
      if h != self._h:
        raise ValueError(f"value_discretization of a discretised PLD is fixed ({self._h}), got {h}")
      return self
    return PrivacyLossDistribution(pmfs=self._discretised(h), value_discretization=h)

  def compose(self, other: "PrivacyLossDistribution") -> "PrivacyLossDistribution":
    """PLD of running this mechanism and then `other` (adaptively) on the same data."""
    if not isinstance(other, PrivacyLossDistribution):
      raise ValueError(f"other must be a PrivacyLossDistribution, got {type(other)}")
    if self.is_exact and other.is_exact:
      return PrivacyLossDistribution(mu=math.hypot(self._mu, other._mu),
                                     value_discretization=self._h)
    if not self.is_exact and not other.is_exact and self._h != other._h:
      raise ValueError(f"value_discretization must match: {self._h} vs {other._h}")
    h = other._h if self.is_exact else self._h
    a, b = self._discretised(h), other._discretised(h)
    if len(a) != len(b):   # a symmetric PLD serves both directions
      a = a * 2 if len(a) == 1 else a
      b = b * 2 if len(b) == 1 else b
    return PrivacyLossDistribution(
        pmfs=tuple(pld_grid.compose_pmfs(x, y) for x, y in zip(a, b)), value_discretization=h)

  def self_compose(self, k: int) -> "PrivacyLossDistribution":
    """PLD of k adaptive runs of this mechanism; k an integer >= 1."""
    k = _validate.check_int(k, "k")
    if self.is_exact:
      return PrivacyLossDistribution(mu=self._mu * math.sqrt(k), value_discretization=self._h)
    return PrivacyLossDistribution(pmfs=tuple(pld_grid.self_compose(p, k) for p in self._pmfs),
                                   value_discretization=self._h)

  def epsilon(self, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= delta (an upper bound when discretised)."""
    delta = _validate.check_delta(delta)
    if self.is_exact:
      return gdp.gaussian_epsilon(delta, self._mu)
    eps = max(p.epsilon(delta) for p in self._pmfs)
    self._warn_noise(delta, eps)
    return eps

  def delta(self, epsilon: float) -> float:
    """delta(eps) = sup over events of P(S) - e^eps Q(S), the worse direction."""
    e = _validate.check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    if self.is_exact:
      return 0.0 if math.isinf(e) else gdp.gaussian_delta(e, self._mu)
    d = max(p.delta(e) for p in self._pmfs)
    self._warn_noise(d, e)
    return d

  def rounding_noise(self, epsilon: float) -> float:
    """Estimated float64 rounding error of delta(epsilon) (0 when exact or freshly gridded)."""
    if self.is_exact or not math.isfinite(epsilon):
      return 0.0
    return max(p.noise_in_delta(epsilon) for p in self._pmfs)

  def _warn_noise(self, delta: float, epsilon: float) -> None:
    noise = self.rounding_noise(epsilon)
    if noise > 1e-3 * delta:
      warnings.warn(
          f"delta = {delta:.3g} is within the FFT rounding noise (~{noise:.2g}) of this "
          "composed PLD, so the answer may be off in either direction; use "
          "pld.dpsgd_epsilon (which tilts the FFT towards the answer) or a larger delta",
          RuntimeWarning, stacklevel=3)

  def __repr__(self) -> str:
    if self.is_exact:
      return f"PrivacyLossDistribution(exact Gaussian, mu={self._mu:.6g})"
    return (f"PrivacyLossDistribution(discretised, h={self._h:g}, "
            f"directions={len(self._pmfs)}, points={self.num_points})")


def finite_output_pld(log_probs_in_K, log_probs_out_K,
                      value_discretization: float = DEFAULT_VALUE_DISCRETIZATION
                      ) -> PrivacyLossDistribution:
  """The PLD (both directions) of a mechanism with K outputs.

  Output k has probability exp(log_probs_in_K[k]) on one neighbour and
  exp(log_probs_out_K[k]) on the other (float[K], finite, <= 0); the losses
  log P_in / P_out and their negatives are gridded pessimistically at spacing h.

  Examples:
    >>> import math
    >>> lp = [math.log(0.75), math.log(0.25)]          # randomized response at ln 3
    >>> d = finite_output_pld(lp, lp[::-1], 1e-4).delta(1.0)
    >>> round(d, 4), round(0.75 - math.e * 0.25, 4)     # exact: 3/4 - e/4
    (0.0704, 0.0704)
  """
  a = _validate.check_array(log_probs_in_K, "log_probs_in_K", ndim=1, min_size=1, high=0.0)
  b = _validate.check_array(log_probs_out_K, "log_probs_out_K", shape=a.shape, high=0.0)
  h = _validate.check_positive(value_discretization, "value_discretization")
  return PrivacyLossDistribution(pmfs=(pld_grid.atoms_pmf(a - b, np.exp(a), h),
                                       pld_grid.atoms_pmf(b - a, np.exp(b), h)),
                                 value_discretization=h)


def gaussian_pld(noise_multiplier: float, sampling_prob: float = 1.0,
                 sensitivity: float = 1.0,
                 value_discretization: Optional[float] = None,
                 tail_mass: float = DEFAULT_TAIL_MASS) -> PrivacyLossDistribution:
  """PLD of one (Poisson-subsampled) Gaussian mechanism, add/remove-one neighbours.

  Noise N(0, sigma^2), sigma = noise_multiplier > 0, on a query of L2 sensitivity
  `sensitivity` (mu = sensitivity / sigma); sampling_prob q in (0, 1], q < 1 being Poisson
  sampling. value_discretization h > 0 (default 1e-4) is ignored for q = 1, which stays
  exact until composed with a discretised PLD. tail_mass in (0, 1e-3] is the P-mass per
  direction left outside the grid (moved pessimistically).

  Examples:
    >>> round(gaussian_pld(1.0).epsilon(1e-5), 4)
    4.3772
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  s = _validate.check_positive(sensitivity, "sensitivity")
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  mu = s / sigma
  if q == 1.0:
    return PrivacyLossDistribution(mu=mu, value_discretization=h)
  return PrivacyLossDistribution(pmfs=pld_grid.subsampled_gaussian_pmfs(mu, q, h, tail),
                                 value_discretization=h)


def laplace_pld(scale: float, sensitivity: float = 1.0,
                value_discretization: Optional[float] = None) -> PrivacyLossDistribution:
  """PLD of the Laplace mechanism Lap(scale) on a query of L1 sensitivity `sensitivity`.

  The loss lies in [-eps0, eps0], eps0 = sensitivity / scale (atoms at both ends), so no
  tail is cut; add and remove give the same PLD. Grid spacing h defaults to 1e-4.

  Examples:
    >>> round(laplace_pld(1.0).epsilon(1e-9), 4)   # pure 1-DP
    1.0
  """
  b = _validate.check_positive(scale, "scale")
  s = _validate.check_positive(sensitivity, "sensitivity")
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  return PrivacyLossDistribution(pmfs=(pld_grid.laplace_pmf(s / b, h),), value_discretization=h)


def randomized_response_pld(epsilon: float, num_buckets: int = 2,
                            value_discretization: Optional[float] = None
                            ) -> PrivacyLossDistribution:
  """PLD of k-ary randomized response that is exactly epsilon-DP (replace-one).

  The true value is reported with probability e^eps / (e^eps + k - 1), each other value
  with 1 / (e^eps + k - 1). The loss is +eps, -eps or 0 (three atoms, both directions),
  so the PLD is exact when eps is a multiple of h (default 1e-4).

  Examples:
    >>> round(randomized_response_pld(1.0).epsilon(1e-6), 4)
    1.0
  """
  e = _validate.check_epsilon(epsilon)
  k = _validate.check_int(num_buckets, "num_buckets", minimum=2)
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  z = math.exp(e) + k - 1
  losses = np.array([e, -e, 0.0])
  masses = np.array([math.exp(e) / z, 1.0 / z, (k - 2) / z])
  keep = masses > 0
  return PrivacyLossDistribution(pmfs=(pld_grid.atoms_pmf(losses[keep], masses[keep], h),),
                                 value_discretization=h)


__all__ = [
    "DEFAULT_TAIL_MASS", "DEFAULT_VALUE_DISCRETIZATION", "PldResult", "PrivacyLossDistribution",
    "dpsgd_delta", "dpsgd_delta_bound", "dpsgd_epsilon", "dpsgd_epsilon_bound",
    "finite_output_pld", "gaussian_pld", "laplace_pld", "randomized_response_pld",
]
