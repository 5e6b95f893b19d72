"""The delta added by the noise sampler's finite support.

`dpjax.prng.standard_normal` cannot return values beyond [z_min, z_max] =
`prng.normal_support()` (about +-12.63); an exact N(0, 1) lands there with probability
tau = `prng.normal_tail_mass()` (about 1.5e-36). Coupling each draw with an exact one,
a mechanism making K = T d draws (T steps, d coordinates) differs from its ideal with
probability at most K tau, so if the ideal is (eps, delta)-DP the real one is
(eps, delta + (1 + e^eps) K tau)-DP (proof in `prng.standard_normal`). `sampler_delta`
is that extra term.

It covers the support only: the values inside it lie on a float32 grid (the lattice
effect, Mironov 2012), which this bound does not cover.

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
  """(1 + e^eps) K tau: the delta a sampler with per-draw tail mass tau adds.

  Args:
    epsilon: eps >= 0 of the ideal mechanism's guarantee (inf gives 1).
    num_draws: K >= 1, the N(0, 1) draws of the whole run (T steps times d coordinates).
    tail_mass: tau in [0, 1] (default `dpjax.prng.normal_tail_mass()`).
  Returns:
    min(1, (1 + e^eps) K tau), in log space. Covers the support, not the float32 lattice.
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
  """The largest eps with sampler_delta(eps, K) <= rtol * delta.

  delta in (0, 1), K >= 1, rtol in (0, 1], tau as in `sampler_delta`. Returns
  log(rtol delta / (K tau) - 1) (rounded down), inf when tau = 0, -inf when even eps = 0
  exceeds the budget (2 K tau > rtol delta).

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
