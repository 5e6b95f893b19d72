"""The delta added by the noise sampler's finite support.

`dpjax.prng.standard_normal` returns values only in `prng.normal_support()` (about +-12.63);
an exact N(0, 1) lands outside with probability tau = `prng.normal_tail_mass()` (~1.5e-36).
By coupling, K = T d draws make an (eps, delta)-DP mechanism (eps, delta + (1 + e^eps) K
tau)-DP (proof in `prng.standard_normal`). The float32 lattice inside the support (Mironov
2012) is not covered.

Examples:
  >>> d = sampler_delta(1.0, 500 * 57)
  >>> 1e-32 < d < 1e-30
  True
"""

from __future__ import annotations

import math
from typing import Optional

from dpjax import _validate


def _tail_mass(tail_mass: Optional[float]) -> float:
  if tail_mass is None:
    from dpjax import prng  # pylint: disable=g-import-not-at-top  (jax only when needed)
    return prng.normal_tail_mass()
  return _validate.check_probability(tail_mass, "tail_mass")


def sampler_delta(epsilon: float, num_draws: int, tail_mass: Optional[float] = None) -> float:
  """min(1, (1 + e^eps) K tau): the delta a sampler with per-draw tail mass tau (default
  `prng.normal_tail_mass()`) adds over K = num_draws draws.

  Examples:
    >>> sampler_delta(0.0, 10, tail_mass=1e-20)
    2e-19
  """
  eps = _validate.check_epsilon(epsilon, "epsilon", allow_zero=True, allow_inf=True)
  k = _validate.check_int(num_draws, "num_draws")
  tau = _tail_mass(tail_mass)
  if tau == 0.0:
    return 0.0
  if math.isinf(eps):
    return 1.0
  if eps <= 700.0:                                         # e^eps finite in float64
    return min(1.0, (1.0 + math.exp(eps)) * k * tau)
  log_d = eps + math.log1p(math.exp(-eps)) + math.log(k) + math.log(tau)
  return 1.0 if log_d >= 0.0 else math.exp(log_d)


@_validate.names_extreme_arguments
def max_epsilon_for_sampler_delta(delta: float, num_draws: int, rtol: float = 1e-3,
                                  tail_mass: Optional[float] = None) -> float:
  """The largest eps with sampler_delta(eps, K) <= rtol * delta: log(rtol delta / (K tau) - 1)
  rounded down; inf when tau = 0, -inf when 2 K tau > rtol delta.

  Examples:
    >>> e = max_epsilon_for_sampler_delta(1e-5, 1000, tail_mass=1e-30)
    >>> round(e, 3)
    43.749
    >>> sampler_delta(e, 1000, tail_mass=1e-30) <= 1e-8
    True
  """
  d = _validate.check_delta(delta)
  k = _validate.check_int(num_draws, "num_draws")
  r = _validate.check_probability(rtol, "rtol", open_low=True)
  tau = _tail_mass(tail_mass)
  if tau == 0.0:
    return math.inf
  ratio = r * d / (k * tau)
  if ratio < 2.0:
    return -math.inf
  return math.log(ratio * (1.0 - 1e-12) - 1.0)   # rounded down: never over the budget
