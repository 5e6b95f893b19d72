"""RDP amplification by sampling without replacement (replace-one neighbours).

A mechanism M runs on m records drawn uniformly without replacement from a dataset of n
(gamma = m / n); neighbouring datasets have the same size and differ in one record
(replace-one). If M has RDP eps(j) at every integer order j >= 2 and pure eps_inf
(math.inf when it has none), then at every integer order alpha >= 2 (Wang, Balle &
Kasiviswanathan 2019, https://arxiv.org/abs/1808.00087, Theorem 9)

    eps'(alpha) <= 1/(alpha-1) log(1 + gamma^2 C(alpha, 2) min(4 (e^eps(2) - 1),
                   e^eps(2) min(2, (e^eps_inf - 1)^2))
                   + sum_{j=3}^alpha gamma^j C(alpha, j) e^{(j-1) eps(j)} min(2, (e^eps_inf - 1)^j)),

and eps'(alpha) <= eps(alpha) (the sampled pair is a mixture of M's replace-one pairs and of
identical ones). Fractional orders: (alpha - 1) eps'(alpha) = log E[(dP/dQ)^alpha] is convex
in alpha and 0 at alpha = 1, so linear interpolation of it between the neighbouring integer
orders (and between 1 and 2) is an upper bound. Sums in log space; orders [A], host NumPy.
The Gaussian (`sampled_without_replacement_gaussian_rdp`): the same sum, each term j >= 3
also capped by the paper's Theorem 27: with phi(l) = e^{(l-1) eps(l)} = E_Q[(P/Q)^l] for the
pair P = N(1, sigma^2), Q = N(0, sigma^2), the forward difference Delta^k phi(0) =
E_Q[(P/Q - 1)^k] (exact for even k, where it is >= 0), and the j-th term's factor
e^{(j-1) eps(j)} min(2, ...) becomes min(2 phi(j), 4 sqrt(Delta^{2 floor(j/2)} phi(0)
Delta^{2 ceil(j/2)} phi(0))) (Cauchy-Schwarz for odd j). The alternating sums are evaluated
in mpmath at a precision raised until the cancellation is resolved (relative error < 2^-50),
for j <= FORWARD_DIFFERENCE_MAX_ORDER; above it (or where the precision cap leaves a
difference unresolved) the Theorem 9 factor 2 phi(j) is kept, a valid upper bound of the
term. Orders above 256 are therefore still at most dp_accounting's (its Theorem 9 form).

PLD (`sampled_without_replacement_gaussian_pld`, `..._laplace_pld`, `..._pair_pld`): let (P, Q)
be M's replace-one dominating pair, symmetric (Q is P mirrored: Gaussian, Laplace, the pmf
pairs of the events), and R = (gamma P + (1 - gamma) Q, Q), the Poisson "remove" pair at rate
gamma. A sample of m holds the replaced record with probability gamma; the rest of it is
common to both datasets, so the two output laws are (1 - gamma) mu_0 + gamma mu_x and
(1 - gamma) mu_0 + gamma mu_x', each of (mu_x, mu_0), (mu_x, mu_x') a mixture of replace-one
pairs of M. Advanced joint convexity (Balle, Barthe & Gaboardi 2018,
https://arxiv.org/abs/1807.01647, Thm 2 and Thm 10) bounds the hockey-stick divergence
H_a, a = e^eps >= 1, of both orders by gamma H_a'(P || Q) = H_a(R); the orders a < 1 follow
from H_a(A || B) = 1 - a + a H_{1/a}(B || A). Both R and its mirror (P against
gamma Q + (1 - gamma) P) occur (all common records contributing as x' or as x) and an
adaptive composition can alternate them, so one step's dominating pair is the symmetric S
with delta_S(eps) = delta_R(eps) for eps >= 0 and delta_S(eps) = 1 - e^eps + e^eps
delta_R(-eps) below 0 (Dong, Roth & Su 2019, https://arxiv.org/abs/1905.02383, Thm 4.2:
C_gamma(f) = min(f_gamma, f_gamma^-1)**). Its PLD is R's on losses > 0, that part mirrored
with weight e^-l onto -l, and the rest at 0 (mass 1 - R_P(L > 0) - R_Q(L > 0) >= 0 for a
symmetric (P, Q)). Built from R's pessimistic grid (connect-the-dots never raises R_P(L > 0)
nor R_Q(L > 0) on a grid holding 0), S's grid dominates S. One step's delta(eps >= 0) is the
Poisson remove direction's; compositions exceed composing either direction alone (the
pitfall of Lebeda, Regehr, Kamath & Steinke 2024, https://arxiv.org/abs/2405.20769).
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import mpmath
import numpy as np
from scipy import special

from dpjax import _validate
from dpjax.accounting import pld
from dpjax.accounting import pld_grid

# Largest integer order evaluated (the sum has alpha terms per order).
MAX_ORDER = 4096
# Terms j above this keep Theorem 9's factor in the Gaussian bound (the forward differences
# Delta^k phi(0), k <= j + 1, cost O(j^2) high-precision operations).
FORWARD_DIFFERENCE_MAX_ORDER = 256
# Working precision cap (bits) of the forward differences; an unresolved one is not used.
_MAX_PRECISION = 2 ** 14


def _log_min_2_pow(j: np.ndarray, pure_epsilon: float) -> np.ndarray:
  """log min(2, (e^eps_inf - 1)^j) for integer j [J]."""
  if not math.isfinite(pure_epsilon):
    return np.full(j.shape, math.log(2.0))
  with np.errstate(divide="ignore"):
    log_base = (pure_epsilon + math.log(-math.expm1(-pure_epsilon))) if pure_epsilon > 0 else -math.inf
  return np.minimum(math.log(2.0), j * log_base)


def _integer_bound(alpha: int, log_gamma: float, eps_int: np.ndarray, pure_epsilon: float,
                   log_caps: Optional[np.ndarray] = None) -> float:
  """The Theorem 9 bound at integer alpha >= 2; eps_int[j - 2] = eps(j), j = 2..alpha;
  log_caps[j - 3] (j = 3..), when given, a further upper bound on the log of term j's
  factor e^{(j-1) eps(j)} min(2, (e^eps_inf - 1)^j) (inf where none)."""
  e2 = float(eps_int[0])
  log_c2 = math.log(alpha * (alpha - 1) / 2.0)
  log_a = math.log(4.0) + (e2 + math.log(-math.expm1(-e2)) if e2 > 0 else -math.inf)
  log_b = e2 + float(_log_min_2_pow(np.array([2.0]), pure_epsilon)[0])
  terms = [0.0, 2.0 * log_gamma + log_c2 + min(log_a, log_b)]
  if alpha >= 3:
    j = np.arange(3, alpha + 1, dtype=np.float64)
    log_binom = (special.gammaln(alpha + 1.0) - special.gammaln(j + 1.0)
                 - special.gammaln(alpha - j + 1.0))
    factor = (j - 1.0) * eps_int[1:alpha - 1] + _log_min_2_pow(j, pure_epsilon)
    if log_caps is not None:
      factor = np.minimum(factor, log_caps[:alpha - 2])
    terms.extend((j * log_gamma + log_binom + factor).tolist())
  return float(special.logsumexp(terms)) / (alpha - 1.0)


def _cumulant_to_orders(scaled: np.ndarray, a: np.ndarray) -> np.ndarray:
  """eps'(a) [A] from scaled[j - 2] = (j - 1) eps'(j) at integer j >= 2: exact at integer a,
  linear interpolation of the (convex) cumulant elsewhere (0 at a = 1)."""
  out = np.empty_like(a)
  for i, x in enumerate(a):
    lo = math.floor(x)
    if lo == x:
      out[i] = scaled[lo - 2] / (x - 1.0)
    elif lo < 2:   # between alpha = 1 (cumulant 0) and 2
      out[i] = scaled[0]
    else:
      t = x - lo
      out[i] = ((1.0 - t) * scaled[lo - 2] + t * scaled[lo - 1]) / (x - 1.0)
  return out


def sampled_without_replacement_rdp(sample_fraction: float, inner_rdp: Callable,
                                    orders, pure_epsilon: float = math.inf) -> np.ndarray:
  """RDP upper bound (float64[A]) of M on a uniform sample without replacement of a fraction
  gamma = sample_fraction in (0, 1] of the dataset, replace-one neighbours.

  inner_rdp(orders float64[J]) -> float64[J] is M's replace-one RDP curve (called at integer
  orders 2..ceil(max order) and at `orders`); pure_epsilon >= 0 its pure eps (math.inf if
  none). Orders above MAX_ORDER are refused by name.

  Examples:
    >>> import numpy as np
    >>> g = lambda a: a / (2 * 4.0 ** 2)           # Gaussian, sigma = 4 (replace-one)
    >>> r = sampled_without_replacement_rdp(0.01, g, [2.0, 8.0])
    >>> bool(np.all(r < g(np.array([2.0, 8.0])) / 100))
    True
  """
  gamma, a = _check_fraction_and_orders(sample_fraction, orders)
  _validate.check_callable(inner_rdp, "inner_rdp")
  eps_inf = _validate.check_range(pure_epsilon, "pure_epsilon", 0.0, allow_inf=True)
  top = max(2, int(math.ceil(a.max())))
  ints = np.arange(2, top + 1, dtype=np.float64)
  eps_int = np.asarray(inner_rdp(ints), np.float64)
  direct = np.asarray(inner_rdp(a), np.float64)
  if eps_int.shape != ints.shape or direct.shape != a.shape:
    raise ValueError("inner_rdp must return one value per order")
  if np.any(np.isnan(eps_int)) or np.any(eps_int < 0):
    raise ValueError("inner_rdp must return RDP values >= 0 (inf allowed)")
  if gamma == 1.0:
    return direct
  log_gamma = math.log(gamma)
  # scaled[j - 2] = (j - 1) eps'(j): the cumulant at integer orders
  scaled = np.array([(j - 1.0) * min(_integer_bound(int(j), log_gamma, eps_int, eps_inf),
                                     float(eps_int[int(j) - 2])) for j in ints])
  return np.minimum(_cumulant_to_orders(scaled, a), direct)


@functools.lru_cache(maxsize=64)
def _log_gaussian_forward_differences(noise_multiplier: float, kmax: int) -> np.ndarray:
  """log Delta^k phi(0) for even k = 0..kmax (float64[kmax + 1]; +inf, "no cap", at odd k
  and where unresolved), phi(l) = exp(l (l - 1) / (2 sigma^2)).

  Delta^k phi(0) = sum_l (-1)^(k-l) C(k, l) phi(l) cancels heavily for large sigma. By
  Jensen it is at least (e^{1/sigma^2} - 1)^{k/2} while sum_l C(k, l) phi(l) <= 2^k phi(k),
  which bounds the mpmath precision needed for a relative error below 2^-50; the precision
  doubles up to that bound until the sum passes the check (a k needing more than
  _MAX_PRECISION bits is left uncapped).
  """
  out = np.full(kmax + 1, math.inf)
  out[0] = 0.0
  if noise_multiplier * noise_multiplier == 0.0:   # sigma^2 underflows: nothing to cap
    return out
  s = 1.0 / (2.0 * noise_multiplier * noise_multiplier)
  log2_var = math.log2(math.expm1(2.0 * s)) if 0.0 < s < 700.0 else (-math.inf if s == 0
                                                                       else 2.0 * s / math.log(2))
  need = {k: k + k * (k - 1) * s / math.log(2.0) - 0.5 * k * log2_var + 64 + math.log2(k + 1)
          for k in range(2, kmax + 1, 2)}
  need = {k: min(bits, _MAX_PRECISION) for k, bits in need.items()}
  todo = list(need)
  prec = 128
  while todo:
    with mpmath.workprec(prec):
      s_mp = 1 / (2 * mpmath.mpf(noise_multiplier) ** 2)
      phi = [mpmath.exp(l * (l - 1) * s_mp) for l in range(max(todo) + 1)]
      left = []
      for k in todo:
        total, size = mpmath.mpf(0), mpmath.mpf(0)
        for l in range(k + 1):
          term = math.comb(k, l) * phi[l]
          total += term if (k - l) % 2 == 0 else -term
          size += term
        if total > size * (k + 1) * mpmath.ldexp(1, 50 - prec):
          # relative error < 2^-50; the margin keeps the rounded log above the exact one
          out[k] = float(mpmath.log(total)) + 2.0 ** -48
        elif need[k] > prec:
          left.append(k)
    todo = left
    prec = int(min(2 * prec, max([need[k] for k in todo] + [0]) + 64))
  return out


@_validate.names_extreme_arguments
def sampled_without_replacement_gaussian_rdp(sample_fraction: float, noise_multiplier: float,
                                             orders) -> np.ndarray:
  """RDP upper bound (float64[A]) of the Gaussian mechanism (noise sigma = noise_multiplier
  times the replace-one L2 sensitivity) on a uniform sample without replacement of a
  fraction gamma = sample_fraction in (0, 1] of the dataset, replace-one neighbours: Wang,
  Balle & Kasiviswanathan 2019 (https://arxiv.org/abs/1808.00087), Theorem 27 (the module
  docstring), never above Theorem 9 (`sampled_without_replacement_rdp`) nor above the
  unsampled alpha / (2 sigma^2). Orders (> 1, at most MAX_ORDER) [A].

  Examples:
    >>> import numpy as np
    >>> g = lambda a: np.asarray(a) / (2 * 3.0 ** 2)
    >>> t27 = sampled_without_replacement_gaussian_rdp(0.1, 3.0, [8.0])
    >>> bool(t27[0] < sampled_without_replacement_rdp(0.1, g, [8.0])[0])
    True
  """
  gamma, a = _check_fraction_and_orders(sample_fraction, orders)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  with np.errstate(divide="ignore", over="ignore"):
    direct = a / (2.0 * sigma * sigma)
  if gamma == 1.0 or np.all(direct == 0.0) or np.all(direct == math.inf):
    return direct
  top = max(2, int(math.ceil(a.max())))
  ints = np.arange(2, top + 1, dtype=np.float64)
  with np.errstate(divide="ignore", over="ignore"):
    eps_int = ints / (2.0 * sigma * sigma)
  jmax = min(top, FORWARD_DIFFERENCE_MAX_ORDER)
  kmax = 2 * ((jmax + 1) // 2)
  log_fd = _log_gaussian_forward_differences(sigma, kmax)
  j = np.arange(3, top + 1)
  caps = np.full(j.shape, math.inf)
  lo, hi = 2 * (j // 2), 2 * ((j + 1) // 2)
  has = j <= jmax
  caps[has] = math.log(4.0) + 0.5 * (log_fd[lo[has]] + log_fd[hi[has]])
  log_gamma = math.log(gamma)
  scaled = np.array([(k - 1.0) * min(_integer_bound(int(k), log_gamma, eps_int, math.inf, caps),
                                     float(eps_int[int(k) - 2])) for k in ints])
  return np.minimum(_cumulant_to_orders(scaled, a), direct)


def _symmetrised(remove: pld_grid.LossPmf) -> pld_grid.LossPmf:
  """The PLD of the symmetric pair S built from the remove pair R (module docstring): R's
  P-mass at each loss l > 0 (and +inf), its Q-mass p e^-l at -l, the rest at 0."""
  h, p = remove.h, remove.probs
  idx = remove.offset + np.arange(p.size)
  pos = (idx > 0) & (p > 0)
  top = int(idx[pos].max()) if np.any(pos) else 0
  p_pos, i_pos = p[pos], idx[pos]
  q_pos = p_pos * np.exp(-i_pos * h)
  rest = 1.0 - remove.infinity_mass - float(p_pos.sum()) - float(q_pos.sum())
  if rest < -1e-9:
    raise ValueError(f"the remove pair is not symmetrisable (its mass at 0 would be {rest:.3g}):"
                     " the inner pair must be symmetric")
  probs = np.zeros(2 * top + 1)
  probs[top + i_pos] = p_pos
  probs[top - i_pos] = q_pos
  probs[top] = max(rest, 0.0)
  return pld_grid.LossPmf(h, -top, probs, remove.infinity_mass)


def _symmetrised_from(poisson: pld.PrivacyLossDistribution, h: float
                      ) -> pld.PrivacyLossDistribution:
  """S's PLD from a Poisson-sampled PLD whose direction 0 is the remove pair R."""
  losses, probs, inf = poisson.loss_pmf(0)
  remove = pld_grid.LossPmf(h, int(round(losses[0] / h)), probs, inf)
  return pld.PrivacyLossDistribution(pmfs=(_symmetrised(remove),), value_discretization=h)


def _check_fraction_and_orders(sample_fraction, orders) -> tuple[float, np.ndarray]:
  gamma = _validate.check_range(sample_fraction, "sample_fraction", 0.0, 1.0, open_low=True)
  a = _validate.check_orders(orders)
  if a.max() > MAX_ORDER:
    raise ValueError(f"orders must be <= {MAX_ORDER} for sampling without replacement, got "
                     f"{a.max():g}")
  return gamma, a


def _check_fraction_and_grid(sample_fraction, value_discretization) -> tuple[float, float]:
  gamma = _validate.check_range(sample_fraction, "sample_fraction", 0.0, 1.0, open_low=True)
  h = pld.DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else (
      _validate.check_positive(value_discretization, "value_discretization"))
  return gamma, h


@_validate.names_extreme_arguments
def sampled_without_replacement_gaussian_pld(
    sample_fraction: float, noise_multiplier: float,
    value_discretization: Optional[float] = None,
    tail_mass: float = pld.DEFAULT_TAIL_MASS) -> pld.PrivacyLossDistribution:
  """PLD of the Gaussian mechanism on a uniform sample without replacement, replace-one.

  Released: the sum over m = gamma n records drawn uniformly without replacement from the n
  (contributions of L2 norm <= C) plus N(0, (noise_multiplier * 2C)^2) per coordinate:
  noise_multiplier sigma is relative to the replace-one sensitivity 2C (as
  `events.GaussianEvent` under replace-one), so the inner pair is N(1/sigma, 1) against
  N(0, 1). Neighbours: equal size, one record replaced. The symmetric dominating pair of the
  module docstring, discretised pessimistically on a grid of spacing h (default 1e-4);
  tail_mass in (0, 1e-3]: P-mass left off the grid (moved up). sample_fraction gamma in
  (0, 1]; gamma = 1 is the plain Gaussian (exact, mu = 1 / sigma).

  Examples:
    >>> d = sampled_without_replacement_gaussian_pld(0.01, 1.0)
    >>> d.epsilon(1e-5) == pld.gaussian_pld(1.0, 0.01).epsilon(1e-5)   # one step: as Poisson
    True
    >>> round(d.self_compose(1000).epsilon(1e-5), 2)   # composed: above Poisson's 1.83
    2.2
  """
  gamma, h = _check_fraction_and_grid(sample_fraction, value_discretization)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  if gamma == 1.0:
    return pld.gaussian_pld(sigma, value_discretization=h)
  return _symmetrised_from(pld.gaussian_pld(sigma, gamma, value_discretization=h,
                                            tail_mass=tail), h)


@_validate.names_extreme_arguments
def sampled_without_replacement_laplace_pld(
    sample_fraction: float, noise_multiplier: float,
    value_discretization: Optional[float] = None) -> pld.PrivacyLossDistribution:
  """PLD of the Laplace mechanism on a uniform sample without replacement, replace-one.

  Released: a query of L1 replace-one sensitivity Delta on m = gamma n records drawn
  uniformly without replacement, plus Lap(noise_multiplier * Delta) noise (inner pair: pure
  (1 / noise_multiplier)-DP). The symmetric dominating pair of the module docstring on a grid
  of spacing h (default 1e-4). gamma in (0, 1]; gamma = 1 is the plain Laplace.

  Examples:
    >>> d = sampled_without_replacement_laplace_pld(0.1, 1.0)
    >>> round(d.epsilon(1e-9), 4)   # log(1 + gamma (e - 1))
    0.1586
  """
  gamma, h = _check_fraction_and_grid(sample_fraction, value_discretization)
  b = _validate.check_positive(noise_multiplier, "noise_multiplier")
  if gamma == 1.0:
    return pld.laplace_pld(b, value_discretization=h)
  return _symmetrised_from(pld.laplace_pld(b, value_discretization=h, sampling_prob=gamma), h)


@_validate.names_extreme_arguments
def sampled_without_replacement_pair_pld(
    sample_fraction: float, probs_p_K, probs_q_K,
    value_discretization: float = pld.DEFAULT_VALUE_DISCRETIZATION,
    tail_mass: float = 0.0) -> pld.PrivacyLossDistribution:
  """PLD of a finite-output mechanism on a uniform sample without replacement, replace-one.

  (probs_p_K, probs_q_K), float[K] each summing to 1, is M's replace-one dominating pair and
  must be symmetric (q is p mirrored: discrete Laplace / Gaussian, randomized response, an
  (eps, delta) pair); a pair failing the symmetrisation check raises ValueError. M runs on
  m = gamma n records drawn uniformly without replacement; tail_mass in [0, 1e-3] as in
  `pld.pmf_pair_pld`. gamma in (0, 1]; gamma = 1 is `pld.pmf_pair_pld` of the pair.

  Examples:
    >>> p = np.array([0.75, 0.25])                  # randomized response at ln 3
    >>> d = sampled_without_replacement_pair_pld(0.5, p, p[::-1])
    >>> round(d.epsilon(1e-9), 4)      # log(1 + gamma (3 - 1)) = 0.69315, up to the grid
    0.6932
  """
  gamma = _validate.check_range(sample_fraction, "sample_fraction", 0.0, 1.0, open_low=True)
  h = _validate.check_positive(value_discretization, "value_discretization")
  poisson = pld.pmf_pair_pld(probs_p_K, probs_q_K, h, sampling_prob=gamma, tail_mass=tail_mass)
  return poisson if gamma == 1.0 else _symmetrised_from(poisson, h)


__all__ = ["FORWARD_DIFFERENCE_MAX_ORDER", "MAX_ORDER",
           "sampled_without_replacement_gaussian_pld", "sampled_without_replacement_gaussian_rdp",
           "sampled_without_replacement_laplace_pld", "sampled_without_replacement_pair_pld",
           "sampled_without_replacement_rdp"]
