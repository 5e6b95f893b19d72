"""Privacy loss distributions (PLD): numerical composition by FFT, pessimistic.

The privacy loss of a mechanism with output laws (P, Q) on neighbours is L = log(P(o) / Q(o)),
o ~ P; delta(eps) = P[L = inf] + E_P[(1 - exp(eps - L))_+]. Composition convolves PLDs
(Koskela, Jalko & Honkela 2020; Meiser & Mohammadi 2018; Doroshenko et al. 2022) on a grid
of spacing h (`value_discretization`, `pld_grid`); every delta(eps) read is an upper bound
up to float64 FFT rounding (`epsilon` / `delta` warn where it matters). Plain Gaussians
compose in closed form (mu = sqrt(sum mu_i^2)). Add/remove-one neighbours: the remove and
add directions are both held and the worse answers. The adaptive DP-SGD accountant is
`pld_dpsgd`, re-exported here. Host NumPy float64.

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
from scipy import optimize, special

from dpjax import _validate
from dpjax.accounting import gdp
from dpjax.accounting import pld_grid, pld_pmfs
from dpjax.accounting.pld_dpsgd import (  # noqa: F401  (re-exported)
    CheckedEpsilon, PldResult, dpsgd_delta, dpsgd_delta_bound, dpsgd_epsilon,
    dpsgd_epsilon_bound, dpsgd_epsilon_never_looser)
from dpjax.accounting.pld_grid import DEFAULT_TAIL_MASS, DEFAULT_VALUE_DISCRETIZATION

class PrivacyLossDistribution:
  """A PLD for add/remove-one neighbours, exact (Gaussian, `mu`) or discretised (`pmfs`);
  combine with `compose` / `self_compose`, read `epsilon(delta)` or `delta(epsilon)`."""

  def __init__(self, *, mu: Optional[float] = None,
               pmfs: Optional[tuple[pld_grid.LossPmf, ...]] = None,
               value_discretization: float = DEFAULT_VALUE_DISCRETIZATION):
    if (mu is None) == (pmfs is None):
      raise ValueError("exactly one of mu (exact Gaussian) and pmfs must be given")
    if mu is not None:
      mu = _validate.check_positive(mu, "mu")
    value_discretization = _validate.check_positive(value_discretization, "value_discretization")
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
    """(losses float64[J], probs float64[J], mass at +inf) of direction 0 or 1 of a
    discretised PLD (an exact one raises ValueError: `discretise()` first)."""
    if self._pmfs is None:
      raise ValueError("loss_pmf needs a discretised PLD: call discretise() first")
    direction = _validate.check_int(direction, "direction", 0, len(self._pmfs) - 1)
    p = self._pmfs[direction]
    return p.losses, p.probs.copy(), float(p.infinity_mass)

  def _discretised(self, h: float) -> tuple[pld_grid.LossPmf, ...]:
    if self._pmfs is not None:
      return self._pmfs
    return pld_pmfs.subsampled_gaussian_pmfs(self._mu, 1.0, h, DEFAULT_TAIL_MASS)

  def discretise(self, value_discretization: Optional[float] = None) -> "PrivacyLossDistribution":
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

  def gdp_mu(self, num_epsilons: int = 20_000) -> float:
    """A mu (an upper bound on the smallest) with delta(eps) <= delta_mu(eps) + p_inf, all eps.

    delta_mu: the Gaussian profile; p_inf = `infinity_mass` (0 gives mu-GDP: Dong, Roth & Su
    2022). Checked on at most num_epsilons (>= 10) grid losses e_0 < ... < e_n via
    delta(e_i) - p_inf <= delta_mu(e_{i+1}) (both profiles decrease): loose by one interval.

    Examples:
      >>> round(gaussian_pld(2.0).gdp_mu(), 6)
      0.5
    """
    n = _validate.check_int(num_epsilons, "num_epsilons", minimum=10, maximum=100_000)
    if self.is_exact:
      return self._mu
    worst = 0.0
    for p in self._pmfs:
      l, d = p.losses, p.grid_deltas() - p.infinity_mass
      keep = l >= 0
      l, d = l[keep], d[keep]
      if l.size == 0 or l[0] > 0:   # delta at eps = 0 starts the first interval
        l, d = np.concatenate([[0.0], l]), np.concatenate([[p.delta(0.0) - p.infinity_mass], d])
      stride = max(1, -(-l.size // n))
      l = np.concatenate([l[::stride], l[-1:]])
      d = np.concatenate([d[::stride], d[-1:]])
      mus = _mu_at_least_many(l[1:], d[:-1])
      if mus.size:
        i = int(np.argmax(mus))
        worst = max(worst, _mu_at_least(float(l[i + 1]), float(d[i])), float(mus.max()))
    return worst

  @property
  def infinity_mass(self) -> float:
    """The largest P-mass at loss +inf over the held directions (0 when exact)."""
    return 0.0 if self.is_exact else max(float(p.infinity_mass) for p in self._pmfs)

  def __repr__(self) -> str:
    if self.is_exact:
      return f"PrivacyLossDistribution(exact Gaussian, mu={self._mu:.6g})"
    return (f"PrivacyLossDistribution(discretised, h={self._h:g}, "
            f"directions={len(self._pmfs)}, points={self.num_points})")


@_validate.names_extreme_arguments
def finite_output_pld(log_probs_in_K, log_probs_out_K,
                      value_discretization: float = DEFAULT_VALUE_DISCRETIZATION
                      ) -> PrivacyLossDistribution:
  """The PLD (both directions) of a mechanism with K outputs, log-probabilities float[K] <= 0
  on the two neighbours; losses log P_in / P_out gridded pessimistically at spacing h.

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
  return PrivacyLossDistribution(pmfs=(pld_pmfs.atoms_pmf(a - b, np.exp(a), h),
                                       pld_pmfs.atoms_pmf(b - a, np.exp(b), h)),
                                 value_discretization=h)


@_validate.names_extreme_arguments
def gaussian_pld(noise_multiplier: float, sampling_prob: float = 1.0,
                 sensitivity: float = 1.0,
                 value_discretization: Optional[float] = None,
                 tail_mass: float = DEFAULT_TAIL_MASS) -> PrivacyLossDistribution:
  """PLD of one (Poisson-subsampled) Gaussian mechanism, add/remove-one neighbours.

  mu = sensitivity / noise_multiplier; q = 1 stays exact (h ignored) until composed with a
  discretised PLD. tail_mass in (0, 1e-3]: P-mass per direction left off the grid (moved up).

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
  if not (mu < 1e150 or (q == 1.0 and math.isfinite(mu))):   # mu^2 / 2 overflows past 1.9e154
    raise pld_grid.GridTooLarge(
        f"mu = sensitivity / noise_multiplier = {s!r} / {sigma!r} = {mu:.3g} is too large: "
        "the losses of the subsampled Gaussian reach mu^2 / 2, past any grid")
  if q == 1.0:
    return PrivacyLossDistribution(mu=mu, value_discretization=h)
  return PrivacyLossDistribution(pmfs=pld_pmfs.subsampled_gaussian_pmfs(mu, q, h, tail),
                                 value_discretization=h)


@_validate.names_extreme_arguments
def laplace_pld(scale: float, sensitivity: float = 1.0,
                value_discretization: Optional[float] = None,
                sampling_prob: float = 1.0) -> PrivacyLossDistribution:
  """PLD of the Laplace mechanism Lap(scale) on a query of L1 sensitivity `sensitivity`.

  Loss in [-eps0, eps0], eps0 = sensitivity / scale, no tail cut; q < 1 Poisson-subsamples
  (add/remove): both directions of (1 - q) Lap(0) + q Lap(Delta) are held.

  Examples:
    >>> round(laplace_pld(1.0).epsilon(1e-9), 4)   # pure 1-DP
    1.0
    >>> round(laplace_pld(1.0, sampling_prob=0.1).epsilon(1e-9), 4)   # log(1 + q(e - 1))
    0.1586
  """
  b = _validate.check_positive(scale, "scale")
  s = _validate.check_positive(sensitivity, "sensitivity")
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  q = _validate.check_sampling_prob(sampling_prob)
  if q < 1.0:
    return PrivacyLossDistribution(pmfs=pld_pmfs.subsampled_laplace_pmfs(s / b, q, h),
                                   value_discretization=h)
  return PrivacyLossDistribution(pmfs=(pld_pmfs.laplace_pmf(s / b, h),), value_discretization=h)


def randomized_response_pld(epsilon: float, num_buckets: int = 2, value_discretization:
                            Optional[float] = None) -> PrivacyLossDistribution:
  """PLD of k-ary randomized response, exactly epsilon-DP (replace-one): the true value with
  probability e^eps / (e^eps + k - 1); losses +eps, -eps, 0 (exact when eps is a multiple of h).

  Examples:
    >>> round(randomized_response_pld(1.0).epsilon(1e-6), 4)
    1.0
  """
  e = _validate.check_epsilon(epsilon)
  k = _validate.check_int(num_buckets, "num_buckets", minimum=2)
  h = DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else _validate.check_positive(
      value_discretization, "value_discretization")
  if e / h > 2.0**52:     # the grid index of the loss eps is no longer exact in float64
    raise pld_grid.GridTooLarge(
        f"epsilon = {e!r} at value_discretization = {h!r} puts the loss eps at grid index "
        f"{e / h:.3g}, past 2^52 (exact float64 indices); use a larger value_discretization")
  log_z = e + math.log1p((k - 1) * math.exp(-e))     # log(e^eps + k - 1), no overflow
  losses = np.array([e, -e, 0.0])
  masses = np.array([math.exp(e - log_z), math.exp(-log_z), (k - 2) * math.exp(-log_z)])
  keep = masses > 0
  return PrivacyLossDistribution(pmfs=(pld_pmfs.atoms_pmf(losses[keep], masses[keep], h),),
                                 value_discretization=h)


def _mu_at_least(epsilon: float, delta: float) -> float:
  """The smallest mu with gaussian_delta(epsilon, mu) >= delta, rounded up."""
  if delta <= 0:
    return 0.0
  if delta >= 1:
    return math.inf
  f = lambda m: gdp.gaussian_delta(epsilon, m) - delta
  hi = 1.0
  while f(hi) < 0:
    hi *= 2
    if hi > 1e6:
      return math.inf
  mu = float(optimize.brentq(f, 1e-12, hi, xtol=1e-14, rtol=1e-14, maxiter=500))
  while f(mu) < 0:
    mu *= 1.0 + 1e-13
  return mu


def _mu_at_least_many(eps: np.ndarray, delta: np.ndarray) -> np.ndarray:
  """Vectorised `_mu_at_least`, rounded up; the profile is compared in log space,
  log Phi(a) + log(1 - e^eps Phi(b) / Phi(a)), accurate where both terms are tiny."""
  out = np.where(delta >= 1, math.inf, 0.0)
  todo = (delta > 0) & (delta < 1)
  e, log_d = eps[todo], np.log(delta[todo])
  lo, hi = np.full(e.size, 1e-12), np.full(e.size, 1.0)

  def log_profile(m):
    la, lb = special.log_ndtr(m / 2 - e / m), special.log_ndtr(-m / 2 - e / m)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
      v = la + np.log(-np.expm1(np.minimum(e + lb - la, 0.0)))
    return np.nan_to_num(v, nan=-np.inf)

  for _ in range(60):   # bracket
    low = log_profile(hi) < log_d
    if not low.any():
      break
    hi = np.where(low, hi * 2, hi)
  for _ in range(80):
    mid = 0.5 * (lo + hi)
    below = log_profile(mid) < log_d
    lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
  out[todo] = np.where(log_profile(hi) >= log_d, hi, math.inf)
  return out


def _pair_direction(a: np.ndarray, b: np.ndarray, h: float, tail: float) -> pld_grid.LossPmf:
  """The (A || B) direction: A-mass at log(a / b); A-mass where b = 0 (plus `tail`) at +inf."""
  both = (a > 0) & (b > 0)
  inf = float(a[(a > 0) & (b == 0)].sum()) + tail
  if not both.any():
    return pld_grid.LossPmf(h, 0, np.zeros(1), min(1.0, inf))
  losses = np.log(a[both]) - np.log(b[both])
  return pld_grid.atoms_to_grid(losses, a[both], h, inf)


@_validate.names_extreme_arguments
def pmf_pair_pld(probs_p_K, probs_q_K, value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
                 sampling_prob: float = 1.0, tail_mass: float = 0.0) -> PrivacyLossDistribution:
  """The PLD (P || Q and Q || P) of a dominating pair given as pmfs float[K] (sums 1 +- 1e-6).

  Outputs with mass on one side only give loss +inf; `tail_mass` in [0, 1e-3] bounds either
  side's mass left out (added at +inf). q < 1 Poisson-subsamples for add/remove: remove
  (q P + (1 - q) Q || Q), add (Q || q P + (1 - q) Q) (Zhu, Dong & Wang 2022), valid when
  (P, Q) dominates in both orders.

  Examples:
    >>> d = pmf_pair_pld([0.75, 0.25], [0.25, 0.75]).delta(math.log(3) / 2)
    >>> round(d, 6), round(0.75 - math.sqrt(3) * 0.25, 6)
    (0.316987, 0.316987)
  """
  p = _validate.check_array(probs_p_K, "probs_p_K", ndim=1, min_size=1, low=0.0, high=1.0)
  q = _validate.check_array(probs_q_K, "probs_q_K", shape=p.shape, low=0.0, high=1.0)
  for arr, name in ((p, "probs_p_K"), (q, "probs_q_K")):
    if abs(arr.sum() - 1.0) > 1e-6:
      raise ValueError(f"{name} must sum to 1 (within 1e-6), got {arr.sum():.9g}")
  h = _validate.check_positive(value_discretization, "value_discretization")
  rate = _validate.check_sampling_prob(sampling_prob)
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3)
  if rate < 1.0:
    mix = rate * p + (1.0 - rate) * q
    pmfs = (_pair_direction(mix, q, h, tail), _pair_direction(q, mix, h, tail))
  else:
    pmfs = (_pair_direction(p, q, h, tail), _pair_direction(q, p, h, tail))
  return PrivacyLossDistribution(pmfs=pmfs, value_discretization=h)


def epsilon_delta_pair(epsilon: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
  """The dominating pair (p float[4], q = p reversed) of every (eps, delta)-DP mechanism,
  p = (delta, (1 - delta) e^eps / (1 + e^eps), (1 - delta) / (1 + e^eps), 0) (Kairouz, Oh &
  Viswanath 2015; composing them is optimal composition, Murtagh & Vadhan 2016)."""
  e = _validate.check_epsilon(epsilon, allow_zero=True)
  d = _validate.check_delta(delta, allow_zero=True)
  hi = (1.0 - d) / (1.0 + math.exp(-e))
  p = np.array([d, hi, (1.0 - d) - hi, 0.0])
  return p, p[::-1].copy()


def discrete_laplace_pair(noise_parameter: float, sensitivity: int = 1
                          ) -> tuple[np.ndarray, np.ndarray]:
  """The discrete Laplace pair (law of X, law of X + Delta), P(X = x) ~ e^{-a |x|}, exactly on
  Delta + 1 merged outputs (x <= 0 and x >= Delta share their ratios). Returns float[Delta + 1]."""
  a = _validate.check_positive(noise_parameter, "noise_parameter")
  dl = _validate.check_int(sensitivity, "sensitivity", maximum=1_000_000)
  r = math.exp(-a)
  x = np.arange(1, dl)
  c = -math.expm1(-a) / (1.0 + r)
  p = np.concatenate([[1.0 / (1.0 + r)], c * r ** x, [r ** dl / (1.0 + r)]])
  return p, p[::-1].copy()


@_validate.names_extreme_arguments
def discrete_gaussian_pair(sigma: float, sensitivity: int = 1,
                           tail_mass: float = DEFAULT_TAIL_MASS
                           ) -> tuple[np.ndarray, np.ndarray, float]:
  """The discrete Gaussian pair (law of X, law of X + Delta), P(X = x) ~ exp(-x^2 / 2 sigma^2)
  (Canonne, Kamath & Steinke 2020), on outputs -M..M + Delta, normalised over the window
  (never below the truth). Returns (p, q, tail), tail = 2 sigma sqrt(2 pi) Phi(-M / sigma) /
  Z_window <= tail_mass bounding each side's mass left out; p, q float[2 M + Delta + 1]."""
  s = _validate.check_positive(sigma, "sigma")
  dl = _validate.check_int(sensitivity, "sensitivity", maximum=1_000_000)
  t = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  z = -float(special.ndtri(t / 10.0))
  m = int(math.ceil(s * z)) + 1
  if 2 * m + dl + 1 > pld_grid.MAX_POINTS:
    raise ValueError(f"sigma={s:g} needs a window of {2 * m + dl + 1} outputs (more than "
                     f"{pld_grid.MAX_POINTS}); the continuous Gaussian is a close stand-in")
  x = np.arange(-m, m + dl + 1, dtype=np.float64)
  lw_p = -x * x / (2 * s * s)
  lw_q = -(x - dl) ** 2 / (2 * s * s)
  log_z = float(special.logsumexp(lw_p[x <= m]))   # P's own window [-M, M]
  p, q = np.exp(lw_p - log_z), np.exp(lw_q - log_z)
  tail = 2.0 * s * math.sqrt(2 * math.pi) * math.exp(
      float(special.log_ndtr(-m / s)) - log_z)
  if tail > t:
    raise ValueError(f"tail_mass={t:g} cannot be met for sigma={s:g}")
  return p, q, tail


__all__ = [
    "CheckedEpsilon", "DEFAULT_TAIL_MASS", "DEFAULT_VALUE_DISCRETIZATION", "PldResult",
    "PrivacyLossDistribution", "discrete_gaussian_pair", "discrete_laplace_pair",
    "dpsgd_delta", "dpsgd_delta_bound", "dpsgd_epsilon", "dpsgd_epsilon_bound",
    "dpsgd_epsilon_never_looser", "epsilon_delta_pair", "finite_output_pld", "gaussian_pld",
    "laplace_pld", "pmf_pair_pld", "randomized_response_pld",
]
