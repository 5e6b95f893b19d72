"""The classic differential-privacy mechanisms, as pure functions of a `jax.random` key.

Randomized response, Laplace, Gaussian, clipped sums, counts, means and per-group rates
(lecture §3). Neighbours differ by adding or removing one record (randomized response:
one bit replaced).

Floating point: the exact bits of float32 value + noise reveal which inputs were possible
(Mironov 2012). The additive mechanisms snap the value to a power-of-two grid gamma and
add integer noise drawn exactly (`dpjax.integer_noise`), calibrated to the sensitivity
inflated by the snapping: post-processing of the continuous mechanism, up to the table's
delta (`accounting.sampler_delta`, < 1e-20). `secure=False` keeps float noise, with an
`InsecureNoiseWarning`. Private selection is `dpjax.selection`.

Shape letters: N records, K repetitions, U privacy units (people), Z groups; `...` any.

Examples:
  >>> import jax
  >>> noisy = laplace_mechanism(jax.random.key(0), 120.0, epsilon=1.0)  # a count, Delta_1 = 1
  >>> round(gaussian_sigma(1.0, 1e-5), 3)                       # analytic, Delta_2 = 1
  3.731
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from dpjax import _validate
from dpjax import integer_noise
from dpjax.accounting import gdp

__all__ = [
    "rr_truth_prob", "randomized_response", "rr_estimate_rate", "rr_estimate_std",
    "rr_posterior", "laplace_scale", "laplace_mechanism", "laplace_grid", "gaussian_sigma",
    "gaussian_mechanism", "gaussian_grid", "InsecureNoiseWarning",
    "clipped_sum", "noisy_count", "rounded_count_error", "private_mean", "PrivateMean",
    "grouped_rates", "GroupedRates",
]

_CALIBRATIONS = ("analytic", "classic")

# Below this eps, 2p - 1 is taken as tanh(eps / 2) (exact) instead of from p (which
# loses digits as p -> 1/2 and is exactly 1/2 below eps ~ 1e-16).
_RR_SMALL_EPS = 1e-4
# The coarsest grid a release may use: gamma * k, |k| < 2^24, stays finite in float32.
_MAX_GRID = 2.0 ** 100
# Exact Gaussian tables cost ~0.15 ms an entry (mpmath); a release refuses one of
# more entries than this (about 20 s) instead of building it for minutes.
MAX_GAUSSIAN_TABLE_ENTRIES = 2 ** 17


class InsecureNoiseWarning(UserWarning):
  """A mechanism was asked for float noise (secure=False), which leaks through its bits."""


# ----------------------------------------------------------------------------------
# Randomized response (Warner 1965): local DP for one bit.

def rr_truth_prob(epsilon: float) -> float:
  """Probability p = e^eps / (1 + e^eps) in (1/2, 1) that randomized response tells the truth.

  Examples:
    >>> round(rr_truth_prob(1.0), 4)
    0.7311
  """
  eps = _validate.check_epsilon(epsilon)
  return 1.0 / (1.0 + math.exp(-eps))


def randomized_response(key: jax.Array, bits: jax.typing.ArrayLike,
                        epsilon: float) -> jax.Array:
  """Each 0/1 bit reported truthfully with probability p = e^eps/(1+e^eps), else flipped.

  int32[...] reports, each eps-DP for its own bit (local DP).

  Examples:
    >>> randomized_response(jax.random.key(0), jnp.ones(4, jnp.int32), 50.0).tolist()
    [1, 1, 1, 1]
  """
  _validate.check_binary(bits, "bits")
  b = jnp.asarray(bits).astype(jnp.int32)
  lie = jax.random.uniform(key, b.shape, jnp.float32) < rr_lie_threshold(epsilon)
  return jnp.where(lie, 1 - b, b).astype(jnp.int32)


def rr_lie_threshold(epsilon: float) -> np.float32:
  """float32 t with P[u < t] >= 1 / (1 + e^eps), u ~ jax.random.uniform (rounded up)."""
  eps = _validate.check_epsilon(epsilon)
  f = math.exp(-eps) / (1.0 + math.exp(-eps))
  t = np.float32(f)
  if float(t) < f:
    t = np.nextafter(t, np.float32(1.0))
  return t


def rr_estimate_rate(reports: jax.typing.ArrayLike, epsilon: float,
                     axis: int = -1) -> jax.Array:
  """Unbiased rate estimate from 0/1 reports [..., N] along `axis`: float32[...], unclipped.

  pi_hat = (lambda_hat - (1 - p)) / (2p - 1) (2p - 1 = tanh(eps / 2) for small eps).

  Examples:
    >>> round(float(rr_estimate_rate(jnp.array([1, 0]), 1.0)), 4)   # lambda_hat = 1/2
    0.5
  """
  _validate.check_binary(reports, "reports")
  r = jnp.asarray(reports).astype(jnp.int32).astype(jnp.float32)
  if r.ndim == 0 or r.shape[axis] == 0:
    raise ValueError("reports must have at least one report along `axis`")
  p = rr_truth_prob(epsilon)
  lam = jnp.mean(r, axis=axis)
  eps = float(epsilon)
  if eps >= _RR_SMALL_EPS:
    return (lam - (1.0 - p)) / (2.0 * p - 1.0)
  # pi_hat = (lam - 1/2) / (2p - 1) + 1/2 with 2p - 1 = tanh(eps / 2): no cancellation.
  t = math.tanh(eps / 2.0)
  if t == 0.0 or 0.5 / t > 2.0 ** 100:   # t underflows to 0 at subnormal eps
    raise ValueError(f"epsilon = {epsilon!r} is too small for a float32 estimate: "
                     f"1 / (2p - 1) = {1.0 / t if t else math.inf:.3g} exceeds 2^100 (the estimate is "
                     "unbiased only unclipped, so it can be that large)")
  return (lam - 0.5) * jnp.float32(1.0 / t) + 0.5


def rr_estimate_std(n: int, epsilon: float, rate: float | None = None) -> float:
  """Exact sd of `rr_estimate_rate` over n people.

  rate=None (fixed bits, coins redrawn): sqrt(p (1 - p) / n) / (2p - 1); rate=r (bits
  iid Bernoulli(r)): sqrt(lam (1 - lam) / n) / (2p - 1), lam = p r + (1 - p)(1 - r).

  Examples:
    >>> round(rr_estimate_std(10_000, 1.0), 5)
    0.0096
  """
  n = _validate.check_int(n, "n")
  p = rr_truth_prob(epsilon)
  if rate is None:
    lam = p
  else:
    r = _validate.check_probability(rate, "rate")
    lam = p * r + (1 - p) * (1 - r)
  eps = float(epsilon)
  if eps >= _RR_SMALL_EPS:
    return math.sqrt(lam * (1 - lam) / n) / (2 * p - 1)
  t = math.tanh(eps / 2.0)
  # lam (1 - lam) = 1/4 - (lam - 1/2)^2, and lam - 1/2 = t (r - 1/2) (or t / 2).
  c = t * (0.5 if rate is None else r - 0.5)
  sd = math.sqrt((0.25 - c * c) / n) / t if t > 0 else math.inf
  if not math.isfinite(sd):
    raise ValueError(f"epsilon = {epsilon!r} is too small: the sd, about "
                     "1 / (2 sqrt(n) tanh(eps / 2)), overflows float64")
  return sd


def rr_posterior(prior: jax.typing.ArrayLike, epsilon: float,
                 report: int = 1) -> np.ndarray | float:
  """P[true bit = 1 | report]: prior odds times e^eps (report 1) or e^-eps; float64.

  Examples:
    >>> round(rr_posterior(0.548, 1.0), 3)
    0.767
  """
  pi = _validate.check_array(prior, "prior", low=0.0, high=1.0)
  _validate.check_choice(report, (0, 1), "report")
  p = rr_truth_prob(epsilon)
  like1, like0 = (p, 1 - p) if report == 1 else (1 - p, p)
  out = like1 * pi / (like1 * pi + like0 * (1 - pi))
  return float(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------------
# Laplace and Gaussian additive noise.

def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
  """Laplace scale b = Delta_1 / eps (the noise sd is sqrt(2) b).

  ValueError naming both when b leaves the positive float64 range (above 1.8e308 or below
  5e-324): no float holds the scale, so no release can use it.
  """
  s = _validate.check_positive(sensitivity, "sensitivity")
  e = _validate.check_epsilon(epsilon)
  b = s / e
  if not 0.0 < b < math.inf:
    raise ValueError(f"epsilon = {epsilon!r} with sensitivity = {sensitivity!r}: the Laplace "
                     "scale sensitivity / epsilon must lie in [5e-324, 1.8e308] (float64), got "
                     f"{b}; rescale the query")
  return b


@_validate.names_extreme_arguments
def laplace_mechanism(key: jax.Array, value: jax.typing.ArrayLike, epsilon: float,
                      sensitivity: float = 1.0, *, grid: float | None = None,
                      secure: bool = True) -> jax.Array:
  """Releases value + Laplace(Delta_1 / eps) per entry, on a grid: float32[...].

  secure=True: gamma (round(value / gamma) + X), gamma = `grid` (default `laplace_grid`),
  X = `integer_noise.rounded_laplace(b)`, b = (Delta_1 / gamma + d) / eps, d = value.size.
  `sensitivity` is the L1 sensitivity of the WHOLE array (repeat a scalar release by
  vmapping over keys). ValueError for a non-power-of-two grid, or a value that with the
  table's largest noise reaches 2^24 grid units.
  secure=False: value + b * jax.random.laplace in float32, NOT DP against an observer of the
  exact float output (warns).
  Privacy: eps-DP up to delta = `accounting.sampler_delta(eps, d, tail_mass=noise.tv)`
  (< 1e-20 for tables of <= 2^22 entries) (Dwork et al. 2006).
  """
  _validate.check_array(value, "value")
  v = jnp.asarray(value, jnp.float32)
  b = laplace_scale(epsilon, sensitivity)
  secure = _validate.check_bool(secure, "secure")
  if not secure:
    _check_float_scale(b, "Laplace", epsilon, sensitivity)
    _warn_insecure("laplace_mechanism")
    return v + b * jax.random.laplace(key, v.shape, jnp.float32)
  gamma = (laplace_grid(epsilon, sensitivity) if grid is None else integer_noise.check_grid(grid))
  delta_grid = _validate.check_positive(sensitivity, "sensitivity") / gamma + max(1, v.size)
  noise = integer_noise.rounded_laplace(delta_grid / _validate.check_epsilon(epsilon))
  return _release_on_grid(key, v, gamma, noise)


def laplace_grid(epsilon: float, sensitivity: float = 1.0) -> float:
  """Default grid of `laplace_mechanism`: the largest power of two <= max(Delta_1 / 2^10,
  b / 2^12), b = Delta_1 / eps (+0.1% noise for a scalar).
  """
  b = laplace_scale(epsilon, sensitivity)
  target = max(float(sensitivity) / 2.0 ** 10, b / 2.0 ** 12)
  if target == 0.0:
    raise ValueError(f"sensitivity = {sensitivity!r}: the default grid max(sensitivity / 2^10, "
                     "scale / 2^12) is below the smallest float64 (5e-324); pass grid= or "
                     "rescale the query")
  return _check_default_grid(integer_noise.pow2_floor(target), "Laplace", epsilon,
                             sensitivity, b)


def _check_default_grid(gamma: float, kind: str, epsilon, sensitivity, scale) -> float:
  """gamma if it is at most _MAX_GRID; else a ValueError naming the parameter to blame."""
  if gamma <= _MAX_GRID:
    return gamma
  name, value = (("sensitivity", sensitivity) if float(sensitivity) / 2.0 ** 10 > _MAX_GRID
                 else ("epsilon", epsilon))
  raise ValueError(f"{name} = {value!r}: the {kind} noise scale {scale:.3g} is beyond what a "
                   f"float32 release can hold (its grid would be {gamma:.3g} > 2^100); "
                   "rescale the query")


def _check_float_scale(scale: float, kind: str, epsilon, sensitivity) -> None:
  """The float32 (secure=False) release overflows when the noise scale exceeds 2^112."""
  if scale > 2.0 ** 112:
    name, value = (("sensitivity", sensitivity) if float(sensitivity) > 2.0 ** 112
                   else ("epsilon", epsilon))
    raise ValueError(f"{name} = {value!r}: the {kind} noise scale {scale:.3g} overflows "
                     "a float32 release; rescale the query")


def _warn_insecure(name: str) -> None:
  warnings.warn(f"{name}(secure=False) adds float32 noise: the exact float output "
                "reveals which inputs are possible (Mironov 2012), so it is NOT "
                "differentially private against an observer of the bits",
                InsecureNoiseWarning, stacklevel=3)


def _release_on_grid(key, v, gamma: float, noise: integer_noise.IntegerNoise) -> jax.Array:
  """gamma * (round(v / gamma) + X), X ~ noise, in int32 (v / gamma clamped to +-2^30)."""
  scaled = v / jnp.float32(gamma)
  if not _validate.is_tracer(scaled):
    top = float(jnp.max(jnp.abs(scaled))) if v.size else 0.0
    if top + noise.max_abs >= integer_noise.EXACT_RANGE:
      raise ValueError(
          f"value reaches |value| / grid = {top:.4g}; with noise up to {noise.max_abs} grid "
          f"units the release would leave the exact float32 range 2^24 of the grid; use "
          "a coarser grid")
  lim = jnp.float32(2.0 ** 30)
  scaled = jnp.where(jnp.isfinite(scaled), jnp.clip(scaled, -lim, lim), 0.0)
  k = jnp.round(scaled).astype(jnp.int32)
  x = integer_noise.sample(key, noise, v.shape)
  return jnp.float32(gamma) * (k + x).astype(jnp.float32)


@_validate.names_extreme_arguments
def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0,
                   calibration: str = "analytic") -> float:
  """Noise std of an (eps, delta)-DP Gaussian mechanism for L2 sensitivity Delta_2.

  "analytic" (default, any eps > 0; Balle & Wang 2018, Thm 8): mu = Delta_2 / sigma solves
  Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) = delta. "classic": Delta_2 sqrt(2
  ln(1.25/delta)) / eps (Dwork & Roth 2014, Thm A.1), only for eps < 1 (ValueError else).

  Examples:
    >>> round(gaussian_sigma(0.5, 1e-5, calibration="classic"), 3)
    9.69
  """
  eps = _validate.check_epsilon(epsilon)
  d = _validate.check_delta(delta)
  s = _validate.check_positive(sensitivity, "sensitivity")
  _validate.check_choice(calibration, _CALIBRATIONS, "calibration")
  if calibration == "classic":
    if eps >= 1.0:
      raise ValueError(
          f"the classic Gaussian calibration sigma = sqrt(2 ln(1.25/delta))/eps is "
          f"only proven for epsilon < 1, got epsilon={epsilon}; use "
          f"calibration='analytic' (exact for every epsilon > 0)")
    return s * math.sqrt(2.0 * math.log(1.25 / d)) / eps
  return s / gdp.mu_for_epsilon(eps, d)


@_validate.names_extreme_arguments
def gaussian_mechanism(key: jax.Array, value: jax.typing.ArrayLike, epsilon: float,
                       delta: float, sensitivity: float = 1.0,
                       calibration: str = "analytic", *, grid: float | None = None,
                       secure: bool = True) -> jax.Array:
  """Releases value + N(0, sigma^2 I) on a grid, sigma = `gaussian_sigma(...)`: float32[...].

  secure=True: as `laplace_mechanism` with X = `integer_noise.rounded_gaussian(s)`, s =
  sigma (Delta_2 / gamma + sqrt(d)) / Delta_2 (same noise multiplier, so the continuous
  guarantee holds by post-processing); ValueError also for a table over
  MAX_GAUSSIAN_TABLE_ENTRIES. secure=False: float32 noise, NOT DP against an observer of
  the bits (warns). `sensitivity` is the L2 sensitivity of the whole array.
  Privacy: (eps, delta + `accounting.sampler_delta(eps, d, tail_mass=noise.tv)`)-DP; the
  analytic calibration's continuous mechanism is mu-GDP, mu = Delta_2 / sigma.
  """
  _validate.check_array(value, "value")
  v = jnp.asarray(value, jnp.float32)
  sigma = gaussian_sigma(epsilon, delta, sensitivity, calibration)
  secure = _validate.check_bool(secure, "secure")
  if not secure:
    _check_float_scale(sigma, "Gaussian", epsilon, sensitivity)
    _warn_insecure("gaussian_mechanism")
    return v + sigma * jax.random.normal(key, v.shape, jnp.float32)
  sens = float(sensitivity)
  if grid is None:
    gamma = _check_default_grid(gaussian_grid(sigma, sens), "Gaussian", epsilon, sens, sigma)
  else:
    gamma = integer_noise.check_grid(grid)
  delta_grid = sens / gamma + math.sqrt(max(1, v.size))
  s = sigma * delta_grid / sens
  entries = 11.7 * s + 1          # the table's K + 1 (`integer_noise.rounded_gaussian`)
  if entries > MAX_GAUSSIAN_TABLE_ENTRIES:
    raise ValueError(
        f"epsilon = {epsilon!r}, delta = {delta!r}: sigma = {sigma / sens:.5g} x sensitivity "
        f"is {s:.4g} grid units, so the exact noise table needs about {entries:,.0f} entries, "
        f"more than MAX_GAUSSIAN_TABLE_ENTRIES = {MAX_GAUSSIAN_TABLE_ENTRIES:,} (~0.15 ms "
        f"each to build); rounding the value to the grid alone adds sqrt(d) = "
        f"{math.sqrt(max(1, v.size)):.3g} grid units of sensitivity, so no grid brings it "
        "below 11.7 sigma sqrt(d) / sensitivity; use a larger epsilon or delta")
  noise = integer_noise.rounded_gaussian(s)
  return _release_on_grid(key, v, gamma, noise)


def gaussian_grid(sigma: float, sensitivity: float = 1.0) -> float:
  """Default grid of `gaussian_mechanism`: the largest power of two <= max(Delta_2, sigma) /
  2^10 (+0.1% noise for a scalar when sigma <= Delta_2).
  """
  s = _validate.check_positive(sigma, "sigma")
  d = _validate.check_positive(sensitivity, "sensitivity")
  return integer_noise.pow2_floor(max(d / 2.0 ** 10, s / 2.0 ** 10))


# ----------------------------------------------------------------------------------
# Clipped sums, counts and means.

@_validate.names_extreme_arguments
def clipped_sum(key: jax.Array, values: jax.typing.ArrayLike, epsilon: float,
                upper: float, lower: float = 0.0, *, grid: float | None = None,
                secure: bool = True) -> jax.Array:
  """Sum over the last axis of values [..., N] clipped to [lower, upper], plus Laplace noise.

  The bounds must come from public knowledge, NEVER from the data. eps-DP (add/remove),
  sensitivity max(|lower|, |upper|); grid, secure as in `laplace_mechanism`.
  """
  lo, hi = _validate.check_interval(lower, upper)
  for v, name in ((lo, "lower"), (hi, "upper")):   # a clip of float32 values
    if not abs(v) <= float(np.finfo(np.float32).max):
      raise ValueError(f"{name} must fit float32 (|{name}| <= 3.4e38), got {v:g}")
  _validate.check_array(values, "values")
  v = jnp.asarray(values, jnp.float32)
  if v.ndim == 0:
    raise ValueError("values must have shape [..., N]")
  total = jnp.sum(jnp.clip(v, lo, hi), axis=-1)
  return laplace_mechanism(key, total, epsilon, sensitivity=max(abs(lo), abs(hi)), grid=grid,
                           secure=secure)


@_validate.names_extreme_arguments
def noisy_count(key: jax.Array, present: jax.typing.ArrayLike, epsilon: float, *,
                grid: float | None = None, secure: bool = True) -> jax.Array:
  """Number of ones of `present` [..., N] (last axis) plus Laplace(1/eps): float32[...], eps-DP."""
  _validate.check_binary(present, "present")
  m = jnp.asarray(present).astype(jnp.int32)
  if m.ndim == 0:
    raise ValueError("present must have shape [..., N]")
  return laplace_mechanism(key, jnp.sum(m, axis=-1).astype(jnp.float32), epsilon, 1.0,
                           grid=grid, secure=secure)


@_validate.names_extreme_arguments
def rounded_count_error(true_count: float, epsilon: float, max_k: int = 2_000) -> dict:
  """Exact error of a count c released with continuous Laplace(b = 1/eps), raw and as
  max(0, round(release)): {"p_negative", "rmse_raw", "rmse_post", "bias_post", "mass"}.

  P[k] of the post-processed release sums the Laplace CDF over [k - 1/2, k + 1/2) (k = 0 takes
  everything below 1/2) for k <= max_k; `mass` is their total (1 up to the tail beyond max_k).
  A tail beyond max_k above 1e-9 (a count or a scale too large for max_k) is a ValueError:
  the truncated sums would understate rmse_post.

  Examples:
    >>> e = rounded_count_error(6.0, 0.5)                      # P[6 + Lap(2) < 0] = e^-3 / 2
    >>> round(e["p_negative"], 5), round(e["rmse_raw"], 4), bool(e["rmse_post"] < e["rmse_raw"])
    (0.02489, 2.8284, True)
  """
  c = _validate.check_nonnegative(true_count, "true_count")
  b = laplace_scale(epsilon)
  k = np.arange(0, _validate.check_size(max_k, "max_k", bytes_per_unit=32) + 1, dtype=np.float64)
  upper = stats.laplace.cdf(k + 0.5, loc=c, scale=b)
  lower = np.where(k == 0, 0.0, stats.laplace.cdf(k - 0.5, loc=c, scale=b))
  pk = upper - lower
  if not pk.sum() >= 1.0 - 1e-9:
    raise ValueError(f"max_k = {int(k[-1])} leaves mass {1.0 - float(pk.sum()):.3g} of the "
                     f"release above it (true_count = {c:g}, epsilon = {epsilon:g}); raise max_k")
  mse = float(np.sum(pk * (k - c) ** 2))
  return {"p_negative": float(stats.laplace.cdf(0.0, loc=c, scale=b)),
          "rmse_raw": math.sqrt(2) * b, "rmse_post": math.sqrt(mse),
          "bias_post": float(np.sum(pk * k) - c), "mass": float(pk.sum())}


class PrivateMean(NamedTuple):
  """Output of `private_mean`: the released mean and its two noisy ingredients."""
  mean: jax.Array
  noisy_sum: jax.Array
  noisy_count: jax.Array


@_validate.names_extreme_arguments
def private_mean(key: jax.Array, values: jax.typing.ArrayLike, epsilon: float,
                 upper: float, lower: float = 0.0,
                 count_fraction: float = 0.5, *, secure: bool = True) -> PrivateMean:
  """The lecture's private mean: clipped noisy sum / noisy count (floored at 1).

  Sum at eps (1 - count_fraction), count at eps count_fraction (basic composition); clip
  bounds as in `clipped_sum`.

  Examples:
    >>> out = private_mean(jax.random.key(1), jnp.full((1000,), 50.0), epsilon=1.0, upper=100.0)
    >>> abs(float(out.mean) - 50.0) < 5.0
    True
  """
  eps = _validate.check_epsilon(epsilon)
  f = _validate.check_probability(count_fraction, "count_fraction", open_low=True, open_high=True)
  _validate.check_array(values, "values")
  v = jnp.asarray(values, jnp.float32)
  if v.ndim == 0 or v.shape[-1] == 0:
    raise ValueError("values must have shape [..., N] with N >= 1")
  k_sum, k_count = jax.random.split(key)
  s = clipped_sum(k_sum, v, eps * (1.0 - f), upper, lower, secure=secure)
  c = noisy_count(k_count, jnp.ones(v.shape, jnp.int32), eps * f, secure=secure)
  return PrivateMean(s / jnp.maximum(c, 1.0), s, c)


# ----------------------------------------------------------------------------------
# Rates over disjoint groups (parallel composition).

class GroupedRates(NamedTuple):
  """Output of `grouped_rates` for Z groups (every field float32[Z], `reliable` bool[Z])."""
  noisy_counts: jax.Array
  noisy_totals: jax.Array
  rate: jax.Array
  rate_sd: jax.Array
  reliable: jax.Array


def _released_laplace_scale(epsilon: float, size: int, secure: bool) -> float:
  """Laplace scale in value units of `laplace_mechanism(..., sensitivity=1)` on `size` entries."""
  secure = _validate.check_bool(secure, "secure")
  if not secure:
    return 1.0 / epsilon
  return (1.0 + size * laplace_grid(epsilon, 1.0)) / epsilon


@_validate.names_extreme_arguments
def grouped_rates(key: jax.Array, group_U: jax.typing.ArrayLike,
                  values_U: jax.typing.ArrayLike, num_groups: int, epsilon: float, *,
                  count_fraction: float = 0.5, max_rate_sd: float = 0.05,
                  secure: bool = True) -> GroupedRates:
  """Per-group rates (e.g. delinquency by zip code) with Laplace noise, eps-DP in total.

  Unit u is in group g_u in [0, Z) with value v_u clipped to [0, 1]:

      n_z = #{u : g_u = z} + Laplace(1 / eps_c),         eps_c = eps * count_fraction,
      s_z = sum_{u : g_u = z} v_u + Laplace(1 / eps_s),  eps_s = eps * (1 - count_fraction),
      rate_z = clip(s_z / max(n_z, 1), 0, 1),
      rate_sd_z = sqrt(2 b_s^2 + 2 b_c^2 rate_z^2) / max(n_z, 1),
    reliable_z = rate_sd_z <= max_rate_sd,

  each histogram of L1 sensitivity 1 (parallel composition, McSherry 2009); rate_sd is the
  delta-method sd at the released values. Unreliable groups should be merged or flagged
  (lecture 10, exercise 6b). The unit is one row: pass one row per PERSON (a person's
  several records would move a count by more than 1). Z must be public. eps-DP for
  add/remove one unit, up to `laplace_mechanism`'s sampler delta.

  Examples:
    >>> out = grouped_rates(jax.random.key(0), jnp.array([0, 0, 1, 1, 1]),
    ...                     jnp.array([1, 0, 1, 1, 0]), 2, epsilon=1.0)
    >>> out.rate.shape, out.reliable.tolist()    # 2 or 3 people: far too noisy
    ((2,), [False, False])
  """
  eps = _validate.check_epsilon(epsilon)
  f = _validate.check_probability(count_fraction, "count_fraction", open_low=True, open_high=True)
  # Group ids are int32; counts, totals, their noise (16 bytes each) and the rates: 48 bytes.
  z = _validate.check_size(_validate.check_int(num_groups, "num_groups", 1, 2**31 - 1),
                           "num_groups", bytes_per_unit=48)
  max_sd = _validate.check_positive(max_rate_sd, "max_rate_sd")
  g = _validate.check_array(group_U, "group_U", np.int32, ndim=1, min_size=1, low=0,
                            high=z - 1, integer=True)
  v = _validate.check_array(values_U, "values_U", np.float32, ndim=1)
  if np.shape(v) != np.shape(g):
    raise ValueError(f"values_U and group_U must have one entry per unit each, got "
                     f"values_U of shape {np.shape(v)} and group_U of shape {np.shape(g)}")
  g, v = jnp.asarray(g, jnp.int32), jnp.clip(jnp.asarray(v, jnp.float32), 0.0, 1.0)
  counts = jnp.zeros((z,), jnp.float32).at[g].add(1.0)
  totals = jnp.zeros((z,), jnp.float32).at[g].add(v)
  eps_c, eps_s = eps * f, eps * (1.0 - f)
  k_count, k_total = jax.random.split(key)
  noisy_counts = laplace_mechanism(k_count, counts, eps_c, 1.0, secure=secure)
  noisy_totals = laplace_mechanism(k_total, totals, eps_s, 1.0, secure=secure)
  b_c = _released_laplace_scale(eps_c, z, secure)
  b_s = _released_laplace_scale(eps_s, z, secure)
  n_hat = jnp.maximum(noisy_counts, 1.0)
  rate = jnp.clip(noisy_totals / n_hat, 0.0, 1.0)
  rate_sd = jnp.sqrt(2.0 * b_s ** 2 + 2.0 * b_c ** 2 * rate ** 2) / n_hat
  return GroupedRates(noisy_counts, noisy_totals, rate, rate_sd, rate_sd <= max_sd)
