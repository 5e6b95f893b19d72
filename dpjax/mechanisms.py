"""The classic differential-privacy mechanisms, as pure functions of a `jax.random` key.

Every mechanism follows one recipe: bound how much one record can move the answer
(the sensitivity), then add randomness proportional to it and inversely
proportional to epsilon (lecture §3).

  randomized response   `randomized_response`, `rr_estimate_rate`, `rr_posterior`
                        (local DP; each report is eps-DP on its own)
  Laplace               `laplace_mechanism`, scale = sensitivity_L1 / eps (eps-DP)
  Gaussian              `gaussian_mechanism`, `gaussian_sigma` with the exact analytic
                        calibration of Balle & Wang (2018) or the classic
                        sigma = Delta_2 sqrt(2 ln(1.25/delta)) / eps (eps < 1 only)
  selection             `exponential_mechanism`, `exponential_probs`, `report_noisy_max`
  clipped statistics    `clipped_sum`, `noisy_count`, `private_mean` (split budget)
  per-group rates       `grouped_rates`: noisy counts and noisy sums over disjoint
                        groups (parallel composition), their ratio, its noise sd
                        and a reliability flag

Neighbouring datasets differ by adding or removing one record (add/remove), except
for randomized response, where each person's bit is replaced.

Floating point. A float32 sampler's output lives on a lattice, so the exact bits of
value + noise reveal which inputs were possible (Mironov 2012). The additive
mechanisms (`laplace_mechanism`, `gaussian_mechanism`, and through them
`clipped_sum`, `noisy_count`, `private_mean`) are therefore defended by default:
the value is snapped to a power-of-two grid gamma, integer noise round(b L) or
round(s Z) is drawn exactly from a table (`dpjax.integer_noise`) with its scale
calibrated to the sensitivity inflated by the snapping, and gamma (k + X) is
released as an exact float32. That is a post-processing of the continuous
mechanism on the integer k, so its epsilon is the continuous one's, up to the
table's delta (`accounting.sampler_delta` with the table's `tv`, below 1e-20).
`secure=False` keeps the float mechanism, with an `InsecureNoiseWarning`. The
selection mechanisms release an index, not a float, and keep float randomness
(see their docstrings).

Randomness is always an explicit key, taken first; privacy parameters (epsilon,
delta, sensitivity, clip bounds) are host scalars, validated eagerly, and data
arrays of any shape are processed elementwise (or along the last axis, for
selection and clipped statistics), so repetitions vectorise by broadcasting or
`jax.vmap` over keys. Data arrays are checked for NaN/inf whenever they are
concrete (not when traced under `jit`/`vmap`).

Shape letters: N records, C candidates, K repetitions, U privacy units (people),
Z groups; `...` any leading shape.

Examples:
  >>> import jax
  >>> k1, k2 = jax.random.split(jax.random.key(0))
  >>> noisy = laplace_mechanism(k1, 120.0, epsilon=1.0)          # a count, Delta_1 = 1
  >>> round(gaussian_sigma(1.0, 1e-5), 3)                       # analytic, Delta_2 = 1
  3.731
  >>> int(exponential_mechanism(k2, jnp.array([0.0, 5.0, 1.0]), epsilon=100.0))
  1
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import integer_noise
from dpjax.accounting import gdp

__all__ = [
    "rr_truth_prob", "randomized_response", "rr_estimate_rate", "rr_estimate_std",
    "rr_posterior", "laplace_scale", "laplace_mechanism", "laplace_grid", "gaussian_sigma",
    "gaussian_mechanism", "gaussian_grid", "InsecureNoiseWarning", "exponential_probs",
    "exponential_mechanism",
    "report_noisy_max", "clipped_sum", "noisy_count", "private_mean", "PrivateMean",
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
  """Probability p = e^eps / (1 + e^eps) that randomized response reports the truth.

  Args:
    epsilon: eps > 0.
  Returns:
    p in (1/2, 1), as a float.

  Examples:
    >>> round(rr_truth_prob(1.0), 4)
    0.7311
  """
  eps = _validate.check_epsilon(epsilon)
  return 1.0 / (1.0 + math.exp(-eps))


def randomized_response(key: jax.Array, bits: jax.typing.ArrayLike,
                        epsilon: float) -> jax.Array:
  """Each person reports their bit with probability p = e^eps/(1+e^eps), else flips it.

  Args:
    key: a jax.random key.
    bits: int or bool array of 0/1, any shape [...].
    epsilon: eps > 0.
  Returns:
    int32[...] reports, independent across entries.
  Privacy: each report is eps-DP with respect to its own bit (local DP):
    P[report = r | bit = 1] / P[report = r | bit = 0] is e^eps or e^-eps.

  Examples:
    >>> r = randomized_response(jax.random.key(0), jnp.ones(4, jnp.int32), 50.0)
    >>> r.tolist()
    [1, 1, 1, 1]
  """
  _validate.check_binary(bits, "bits")
  b = jnp.asarray(bits).astype(jnp.int32)
  lie = jax.random.uniform(key, b.shape, jnp.float32) < rr_lie_threshold(epsilon)
  return jnp.where(lie, 1 - b, b).astype(jnp.int32)


def rr_lie_threshold(epsilon: float) -> np.float32:
  """float32 threshold t with P[u < t] >= 1 / (1 + e^eps) for u ~ jax.random.uniform.

  u is uniform on the 2^-23 grid of [0, 1), so P[u < t] = ceil(t 2^23) / 2^23. The
  lie probability f = 1 / (1 + e^eps) is computed without cancellation and rounded
  UP to float32: lying at least as often as asked keeps the realised likelihood ratio
  <= e^eps even where float32 cannot represent 1 - f (eps >~ 16), where a float32
  Bernoulli(1 - f) would never lie (ratio infinite).
  """
  eps = _validate.check_epsilon(epsilon)
  f = math.exp(-eps) / (1.0 + math.exp(-eps))
  t = np.float32(f)
  if float(t) < f:
    t = np.nextafter(t, np.float32(1.0))
  return t


def rr_estimate_rate(reports: jax.typing.ArrayLike, epsilon: float,
                     axis: int = -1) -> jax.Array:
  """Unbiased estimate of the true rate: pi_hat = (lambda_hat - (1 - p)) / (2p - 1).

  Args:
    reports: 0/1 array [..., N] of randomized-response reports.
    epsilon: the eps the reports were made with.
    axis: the axis holding the N people.
  Returns:
    float32[...] estimates (not clipped to [0, 1], so that they stay unbiased).

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
  t = _rr_gap(eps)
  if 0.5 / t > 2.0 ** 100:
    raise ValueError(f"epsilon = {epsilon!r} is too small for a float32 estimate: "
                     f"1 / (2p - 1) = {1.0 / t:.3g} exceeds 2^100 (the estimate is "
                     "unbiased only unclipped, so it can be that large)")
  return (lam - 0.5) * jnp.float32(1.0 / t) + 0.5


def _rr_gap(eps: float) -> float:
  """2p - 1 = tanh(eps / 2) for randomized response with parameter eps (exact)."""
  return math.tanh(eps / 2.0)


def rr_estimate_std(n: int, epsilon: float, rate: float | None = None) -> float:
  """Exact standard deviation of `rr_estimate_rate` over n people.

  Two sources of variation, two formulas:
    rate=None: the n true bits are FIXED (the same people answer again, only the
      coins are redrawn): sd = sqrt(p (1 - p) / n) / (2p - 1), whatever the rate.
    rate=r: the n bits are themselves i.i.d. Bernoulli(r) (a fresh sample each
      time): sd = sqrt(lam (1 - lam) / n) / (2p - 1), lam = p r + (1 - p)(1 - r).

  Args:
    n: number of people, >= 1.
    epsilon: eps > 0.
    rate: None, or the true rate in [0, 1] of the sampled population.
  Returns:
    the sd as a float.

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
  t = _rr_gap(eps)
  # lam (1 - lam) = 1/4 - (lam - 1/2)^2, and lam - 1/2 = t (r - 1/2) (or t / 2).
  c = t * (0.5 if rate is None else r - 0.5)
  sd = math.sqrt((0.25 - c * c) / n) / t if t > 0 else math.inf
  if not math.isfinite(sd):
    raise ValueError(f"epsilon = {epsilon!r} is too small: the sd, about "
                     "1 / (2 sqrt(n) tanh(eps / 2)), overflows float64")
  return sd


def rr_posterior(prior: jax.typing.ArrayLike, epsilon: float,
                 report: int = 1) -> np.ndarray | float:
  """P[true bit = 1 | report] under randomized response, for a prior P[bit = 1].

  Args:
    prior: prior probability of a 1, in [0, 1]; scalar or array.
    epsilon: eps > 0.
    report: the observed report, 0 or 1.
  Returns:
    float64 posterior(s) (a float for a scalar prior). Its odds are the prior odds
    times e^eps (report 1) or e^-eps (report 0).

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

  Args:
    epsilon: eps > 0.
    sensitivity: L1 sensitivity Delta_1 > 0.
  """
  return _validate.check_positive(sensitivity, "sensitivity") / _validate.check_epsilon(epsilon)


def laplace_mechanism(key: jax.Array, value: jax.typing.ArrayLike, epsilon: float,
                      sensitivity: float = 1.0, *, grid: float | None = None,
                      secure: bool = True) -> jax.Array:
  """Releases value + Laplace(Delta_1 / eps) noise, independently per entry, on a grid.

  Defended (secure=True, the default): with gamma = `grid` (a power of two), the
  value is snapped to k = round(value / gamma) (int32) and the release is
  gamma (k + X), X = round(b L) drawn exactly by `integer_noise.rounded_laplace(b)`,

      b = Delta_grid / eps,   Delta_grid = Delta_1 / gamma + d,   d = value.size,

  computed in integers and converted to float32 exactly (|k + X| < 2^24). Rounding
  two neighbouring values moves each of the d entries by less than 1/2 each, so
  the integer vectors k differ by at most Delta_grid in L1; k + X is then a
  post-processing of the continuous Laplace mechanism on k (module docstring), and
  every output is an exact multiple of gamma whatever the input, so no output is
  impossible under a neighbour (the attack of Mironov 2012 finds nothing).
  Repetitions of a scalar release should vmap over keys (d = 1 each), not pass a
  vector of copies (d copies inflate Delta_grid by d).

  Args:
    key: a jax.random key.
    value: the exact query answer(s), float array of any shape [...].
    epsilon: eps > 0.
    sensitivity: L1 sensitivity Delta_1 > 0 of the WHOLE array `value` (the sum
      of |change| over all entries when one record changes).
    grid: gamma, a power of two; default `laplace_grid(epsilon, sensitivity)`.
    secure: False releases value + b * jax.random.laplace in float32: NOT DP
      against an observer of the exact float output (its noise lives on a lattice);
      a warning says so.
  Returns:
    float32[...] noisy answers.
  Raises:
    ValueError: naming `grid` if it is not a power of two, or `value` if a
      concrete |value| / gamma plus the table's largest noise reaches 2^24.
  Privacy: eps-DP up to delta = `accounting.sampler_delta(eps, d, tail_mass=noise.tv)`
    (< 1e-20 for tables of at most 2^22 entries); the float mode (secure=False) is
    eps-DP only as an idealised real-valued mechanism (Dwork et al. 2006).
  """
  _validate.check_array(value, "value")
  v = jnp.asarray(value, jnp.float32)
  b = laplace_scale(epsilon, sensitivity)
  secure = _validate.check_bool(secure, "secure")
  if not secure:
    _check_float_scale(b, "Laplace", epsilon, sensitivity)
    _warn_insecure("laplace_mechanism")
    return v + b * jax.random.laplace(key, v.shape, jnp.float32)
  gamma = (laplace_grid(epsilon, sensitivity) if grid is None
           else integer_noise.check_grid(grid))
  delta_grid = _validate.check_positive(sensitivity, "sensitivity") / gamma + max(1, v.size)
  noise = integer_noise.rounded_laplace(delta_grid / _validate.check_epsilon(epsilon))
  return _release_on_grid(key, v, gamma, noise)


def laplace_grid(epsilon: float, sensitivity: float = 1.0) -> float:
  """Default grid of `laplace_mechanism`: the largest power of two
  <= max(Delta_1 / 2^10, b / 2^12), b = Delta_1 / eps.

  Delta_1 / gamma >= 2^10 for eps >= 1/4 (the rounding adds d to ~2^10 grid units
  of sensitivity: +0.1% noise for a scalar) and >= 2^12 eps below (+0.25% at
  eps = 0.1, +2.5% at eps = 0.01); b / gamma < 2^13 keeps the table (about
  69 (b / gamma + d / eps) entries) small enough to build in seconds.
  """
  b = laplace_scale(epsilon, sensitivity)
  return _check_default_grid(
      integer_noise.pow2_floor(max(float(sensitivity) / 2.0 ** 10, b / 2.0 ** 12)),
      "Laplace", epsilon, sensitivity, b)


def _check_default_grid(gamma: float, kind: str, epsilon, sensitivity, scale) -> float:
  """gamma if it is at most _MAX_GRID; else a ValueError naming the parameter to blame.

  A noise scale this large (sensitivity or sensitivity / epsilon above ~2^110) has
  no finite float32 release: gamma * k overflows for the |k| the noise reaches.
  """
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
  """gamma * (round(v / gamma) + X), X ~ noise, with int32 arithmetic.

  v / gamma is clamped to [-2^30, 2^30] before the conversion (1-Lipschitz, so
  the sensitivity bound survives) and a non-finite entry (possible only under
  tracing; concrete input was checked) counts as 0.
  """
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


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0,
                   calibration: str = "analytic") -> float:
  """Noise std of a Gaussian mechanism that is (eps, delta)-DP for L2 sensitivity Delta_2.

  calibration="analytic" (default): the smallest sigma for which the mechanism is
    (eps, delta)-DP, for any eps > 0 (Balle & Wang 2018, Thm 8): with
    mu = Delta_2 / sigma, Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) = delta.
    Solved by `dpjax.accounting.gdp.mu_for_epsilon`; sigma = Delta_2 / mu.
  calibration="classic": sigma = Delta_2 sqrt(2 ln(1.25/delta)) / eps (Dwork & Roth
    2014, Thm A.1), proven only for eps < 1; larger eps raises ValueError. Always
    larger than the analytic sigma.

  Args:
    epsilon: eps > 0 (and < 1 for "classic").
    delta: in (0, 1).
    sensitivity: L2 sensitivity Delta_2 > 0.
    calibration: "analytic" or "classic".
  Returns:
    sigma > 0 as a float.

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


def gaussian_mechanism(key: jax.Array, value: jax.typing.ArrayLike, epsilon: float,
                       delta: float, sensitivity: float = 1.0,
                       calibration: str = "analytic", *, grid: float | None = None,
                       secure: bool = True) -> jax.Array:
  """Releases value + N(0, sigma^2 I) on a grid, sigma = `gaussian_sigma(...)`.

  Defended (secure=True, the default): as `laplace_mechanism`, the value is snapped
  to k = round(value / gamma) and the release is gamma (k + X), X = round(s Z)
  drawn exactly by `integer_noise.rounded_gaussian(s)` with

      s = sigma * Delta_grid / Delta_2,   Delta_grid = Delta_2 / gamma + sqrt(d),

  d = value.size (rounding moves each entry by < 1/2, so two neighbours' integer
  vectors differ by at most Delta_grid in L2). The noise multiplier s / Delta_grid
  equals sigma / Delta_2, so the (eps, delta) (and mu-GDP) guarantee of the
  continuous mechanism holds exactly for the integer one (post-processing).

  Args:
    key: a jax.random key.
    value: exact answer(s), float array [...].
    epsilon, delta, sensitivity, calibration: as in `gaussian_sigma`; `sensitivity`
      is the L2 sensitivity of the whole array `value`.
    grid: gamma, a power of two; default `gaussian_grid(sigma, sensitivity)`.
    secure: False releases value + sigma * jax.random.normal in float32: NOT DP
      against an observer of the exact float output; a warning says so.
  Returns:
    float32[...] noisy answers (exact multiples of gamma when secure).
  Raises:
    ValueError: as `laplace_mechanism` for `grid` and `value`.
  Privacy: (eps, delta + `accounting.sampler_delta(eps, d, tail_mass=noise.tv)`)-DP; with
    the analytic calibration the continuous mechanism is exactly mu-GDP with
    mu = Delta_2 / sigma.
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
  """Default grid of `gaussian_mechanism`: the largest power of two
  <= max(Delta_2 / 2^10, sigma / 2^10).

  Delta_2 / gamma >= 2^10 when sigma <= Delta_2 (rounding adds sqrt(d) to ~2^10 grid
  units: +0.1% noise for a scalar), >= 2^10 Delta_2 / sigma beyond (+1% to +2% at
  sigma = 10 Delta_2); sigma / gamma < 2^11 bounds the table at about 24,000
  entries (~0.1 ms of mpmath each, built once per scale). Pass a finer `grid` for
  less inflation at large sigma.
  """
  s = _validate.check_positive(sigma, "sigma")
  d = _validate.check_positive(sensitivity, "sensitivity")
  return integer_noise.pow2_floor(max(d / 2.0 ** 10, s / 2.0 ** 10))


# ----------------------------------------------------------------------------------
# Private selection.

def _check_utilities(utilities) -> jax.Array:
  # Sizes first: the checks below copy the array to float64.
  _validate.check_size(math.prod(np.shape(utilities)), "utilities.size", 0, bytes_per_unit=8)
  _validate.check_array(utilities, "utilities")
  u = jnp.asarray(utilities, jnp.float32)
  if u.ndim == 0 or u.shape[-1] == 0:
    raise ValueError("utilities must have at least one candidate on the last axis "
                     f"(shape [..., C], C >= 1), got shape {u.shape}")
  return u


def _selection_scale(epsilon, sensitivity, monotonic) -> float:
  # Utility differences between neighbours can move in opposite directions for two
  # candidates (2 Delta_u), unless every utility moves the same way (monotonic).
  eps = _validate.check_epsilon(epsilon)
  du = _validate.check_positive(sensitivity, "sensitivity")
  monotonic = _validate.check_bool(monotonic, "monotonic")
  return (1.0 if monotonic else 2.0) * du / eps


def exponential_probs(utilities: jax.typing.ArrayLike, epsilon: float,
                      sensitivity: float = 1.0, monotonic: bool = False) -> jax.Array:
  """Selection probabilities of the exponential mechanism, prop. to exp(eps u / (2 Delta_u)).

  Args:
    utilities: float[..., C] utility of each candidate on the private data.
    epsilon: eps > 0.
    sensitivity: Delta_u > 0, the most one record changes any candidate's utility.
    monotonic: if True, all utilities move in the same direction between
      neighbours (e.g. counts), and exp(eps u / Delta_u) is still eps-DP.
  Returns:
    float32[..., C] probabilities summing to 1 on the last axis.
  Privacy: eps-DP (McSherry & Talwar 2007).

  Examples:
    >>> exponential_probs(jnp.array([0.0, 0.0]), 1.0).tolist()
    [0.5, 0.5]
  """
  u = _check_utilities(utilities)
  scale = _selection_scale(epsilon, sensitivity, monotonic)
  return jax.nn.softmax(u / scale, axis=-1)


def exponential_mechanism(key: jax.Array, utilities: jax.typing.ArrayLike,
                          epsilon: float, sensitivity: float = 1.0,
                          monotonic: bool = False,
                          shape: tuple[int, ...] | None = None) -> jax.Array:
  """Samples a candidate index with probability `exponential_probs(...)`.

  Args:
    key: a jax.random key.
    utilities: float[..., C].
    epsilon, sensitivity, monotonic: as in `exponential_probs`.
    shape: optional output shape (must end with the batch shape `...`), e.g.
      (K,) + utilities.shape[:-1] for K independent selections.
  Returns:
    int32[...] (or int32[shape]) chosen indices.
  Privacy: eps-DP for each selection; K selections on the same data compose.
    Floating point: only an index is released, so the float noise's lattice is
    not observable (no Mironov-style test on the output); the sampler
    (`jax.random.categorical`, Gumbel-max on float32 uniforms) differs from the
    ideal probabilities by roughly the 2^-23 resolution of its uniforms per
    candidate, a delta this function does not account for.
  """
  u = _check_utilities(utilities)
  scale = _selection_scale(epsilon, sensitivity, monotonic)
  if shape is not None:
    # categorical draws float32 Gumbel noise of shape + (C,): size it before XLA does
    # (an allocation that large aborts the process).
    out = _validate.check_sizes(shape, "shape", 0)
    _validate.check_size(math.prod(out), "prod(shape)", 0, bytes_per_unit=4, units=u.shape[-1])
  return jax.random.categorical(key, u / scale, axis=-1, shape=shape).astype(jnp.int32)


def report_noisy_max(key: jax.Array, utilities: jax.typing.ArrayLike, epsilon: float,
                     sensitivity: float = 1.0, monotonic: bool = False) -> jax.Array:
  """argmax over candidates of u + Laplace(2 Delta_u / eps) (Delta_u / eps if monotonic).

  Args:
    key: a jax.random key.
    utilities: float[..., C].
    epsilon: eps > 0.
    sensitivity: Delta_u > 0.
    monotonic: as in `exponential_probs` (Dwork & Roth 2014, Claim 3.9 for counts).
  Returns:
    int32[...] index of the noisy maximum. Only the index is private; releasing the
    noisy maximum value as well costs more.
  Privacy: eps-DP. Floating point: the noise is float32 Laplace, kept on purpose:
    only the argmax index is released, which depends on the noise through
    comparisons alone, so the lattice of the float values is not observed. The
    float sampler's bounded support (|L| < 17, from 2^-24-resolution uniforms)
    and resolution make the index probabilities differ from the ideal ones by
    about 2^-23 per candidate, a delta this function does not account for.
  """
  u = _check_utilities(utilities)
  scale = _selection_scale(epsilon, sensitivity, monotonic)
  noise = jax.random.laplace(key, u.shape, jnp.float32)
  return jnp.argmax(u + scale * noise, axis=-1).astype(jnp.int32)


# ----------------------------------------------------------------------------------
# Clipped sums, counts and means.

def _check_bounds(lower, upper) -> tuple[float, float]:
  lo = _validate.check_finite(lower, "lower")
  hi = _validate.check_finite(upper, "upper")
  if not hi > lo:
    raise ValueError(f"clip bounds must be finite with lower < upper, got "
                     f"lower={lower}, upper={upper}")
  return lo, hi


def clipped_sum(key: jax.Array, values: jax.typing.ArrayLike, epsilon: float,
                upper: float, lower: float = 0.0, *, grid: float | None = None,
                secure: bool = True) -> jax.Array:
  """Sum over the last axis of values clipped to [lower, upper], plus Laplace noise.

  Args:
    key: a jax.random key.
    values: float[..., N] private values.
    epsilon: eps > 0.
    upper: clip bound, fixed in advance from public knowledge, NEVER from the data
      (the private maximum would itself leak the largest record).
    lower: lower clip bound (< upper), default 0.
    grid, secure: as in `laplace_mechanism` (defended by default).
  Returns:
    float32[...] noisy sums.
  Privacy: eps-DP for add/remove neighbours; sensitivity max(|lower|, |upper|).
  """
  lo, hi = _check_bounds(lower, upper)
  _validate.check_array(values, "values")
  v = jnp.asarray(values, jnp.float32)
  if v.ndim == 0:
    raise ValueError("values must have shape [..., N]")
  total = jnp.sum(jnp.clip(v, lo, hi), axis=-1)
  return laplace_mechanism(key, total, epsilon, sensitivity=max(abs(lo), abs(hi)), grid=grid,
                           secure=secure)


def noisy_count(key: jax.Array, present: jax.typing.ArrayLike, epsilon: float, *,
                grid: float | None = None, secure: bool = True) -> jax.Array:
  """Number of records (ones of `present`, over the last axis) plus Laplace(1/eps).

  Args:
    key: a jax.random key.
    present: 0/1 or bool [..., N] (e.g. all ones for "how many records").
    epsilon: eps > 0.
    grid, secure: as in `laplace_mechanism` (defended by default).
  Returns:
    float32[...] noisy counts. Privacy: eps-DP for add/remove neighbours.
  """
  _validate.check_binary(present, "present")
  m = jnp.asarray(present).astype(jnp.int32)
  if m.ndim == 0:
    raise ValueError("present must have shape [..., N]")
  return laplace_mechanism(key, jnp.sum(m, axis=-1).astype(jnp.float32), epsilon, 1.0,
                           grid=grid, secure=secure)


class PrivateMean(NamedTuple):
  """Output of `private_mean`: the released mean and its two noisy ingredients."""
  mean: jax.Array
  noisy_sum: jax.Array
  noisy_count: jax.Array


def private_mean(key: jax.Array, values: jax.typing.ArrayLike, epsilon: float,
                 upper: float, lower: float = 0.0,
                 count_fraction: float = 0.5, *, secure: bool = True) -> PrivateMean:
  """The lecture's private mean: clipped noisy sum / noisy count, budget split in two.

  The sum gets eps (1 - count_fraction), the count gets eps count_fraction; by
  basic composition the pair is eps-DP, and the division (with the count floored
  at 1) is post-processing.

  Args:
    key: a jax.random key.
    values: float[..., N] private values.
    epsilon: total eps > 0.
    upper, lower: public clip bounds, as in `clipped_sum`.
    count_fraction: share of the budget for the count, in (0, 1).
    secure: as in `laplace_mechanism` (both releases on their default grids).
  Returns:
    PrivateMean with float32[...] `mean`, `noisy_sum`, `noisy_count`.

  Examples:
    >>> x = jnp.full((1000,), 50.0)
    >>> out = private_mean(jax.random.key(1), x, epsilon=1.0, upper=100.0)
    >>> abs(float(out.mean) - 50.0) < 5.0
    True
  """
  eps = _validate.check_epsilon(epsilon)
  f = _validate.check_probability(count_fraction, "count_fraction", open_low=True,
                                  open_high=True)
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
  """Laplace scale, in value units, of `laplace_mechanism(..., sensitivity=1)` on `size` entries.

  The defended release adds round(b L) grid units with b = (1 / gamma + size) / eps,
  i.e. (1 + size gamma) / eps in value units (its rounding adds variance gamma^2 / 12,
  negligible next to 2 b^2); the float release adds exactly Laplace(1 / eps).
  """
  secure = _validate.check_bool(secure, "secure")
  if not secure:
    return 1.0 / epsilon
  return (1.0 + size * laplace_grid(epsilon, 1.0)) / epsilon


def grouped_rates(key: jax.Array, group_U: jax.typing.ArrayLike,
                  values_U: jax.typing.ArrayLike, num_groups: int, epsilon: float, *,
                  count_fraction: float = 0.5, max_rate_sd: float = 0.05,
                  secure: bool = True) -> GroupedRates:
  """Per-group rates (e.g. delinquency by zip code) with Laplace noise, eps-DP in total.

  Each privacy unit u (one row: a person, a customer) belongs to exactly one group
  g_u in {0, ..., Z-1} and carries a value v_u clipped to [0, 1] (1 = the event
  happened; a fraction is allowed). Two histograms are released,

      n_z = #{u : g_u = z} + Laplace(1 / eps_c),      eps_c = eps * count_fraction,
      s_z = sum_{u : g_u = z} v_u + Laplace(1 / eps_s),  eps_s = eps * (1 - count_fraction).

  Adding or removing one unit changes one entry of each histogram by at most 1, so
  each vector has L1 sensitivity 1 however many groups there are (parallel
  composition: disjoint groups do not add up), each release is eps_c- resp.
  eps_s-DP, and the pair is eps-DP (basic composition). Everything after is
  post-processing of the two noisy vectors:

      rate_z    = clip(s_z / max(n_z, 1), 0, 1),
      rate_sd_z = sqrt(2 b_s^2 + 2 b_c^2 rate_z^2) / max(n_z, 1),
      reliable_z = rate_sd_z <= max_rate_sd,

  where rate_sd is the delta-method standard deviation of the ratio (first order in
  the noise, var(Laplace(b)) = 2 b^2) evaluated at the released values, and b_c, b_s
  are the Laplace scales actually used (with `secure=True`, the grid's inflation
  (1 + Z gamma) / eps of `laplace_mechanism`). A group whose rate_sd exceeds
  `max_rate_sd` should be merged with others or flagged (lecture 10, exercise 6b).
  The noise sd falls like 1 / n, so small groups are the unreliable ones.

  The privacy unit is whatever one row stands for: pass one row per PERSON. If a
  person can hold several records (loans), aggregate them to one row first (e.g.
  v_u = 1 if any of the person's loans defaulted); counting records instead moves
  a count by up to the number of records one person holds.

  Args:
    key: a jax.random key.
    group_U: int[U], the group of each unit, in [0, num_groups).
    values_U: float[U] (or 0/1), each unit's value; clipped to [0, 1].
    num_groups: Z >= 1, public (the list of groups must not depend on the data).
    epsilon: total eps > 0 of the two releases.
    count_fraction: share of eps for the counts, in (0, 1); the lecture uses 1/2.
    max_rate_sd: reliability threshold on rate_sd, > 0.
    secure: as in `laplace_mechanism` (defended integer-grid noise by default).
  Returns:
    GroupedRates(noisy_counts, noisy_totals, rate, rate_sd, reliable), each [Z].
  Privacy: eps-DP with add/remove-one-unit neighbours (Dwork et al. 2006; parallel
    composition: McSherry 2009, "Privacy integrated queries",
    https://doi.org/10.1145/1559845.1559850), up to `laplace_mechanism`'s
    sampler delta.

  Examples:
    >>> out = grouped_rates(jax.random.key(0), jnp.array([0, 0, 1, 1, 1]),
    ...                     jnp.array([1, 0, 1, 1, 0]), 2, epsilon=1.0)
    >>> out.rate.shape, out.reliable.tolist()    # 2 or 3 people: far too noisy
    ((2,), [False, False])
  """
  eps = _validate.check_epsilon(epsilon)
  f = _validate.check_probability(count_fraction, "count_fraction", open_low=True,
                                  open_high=True)
  z = _validate.check_int(num_groups, "num_groups")
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
