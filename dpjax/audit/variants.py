"""Deliberately faulty DP-SGD variants, for audits and tests only.

Each variant replaces one component of `dpsgd.train_many` while the accountant is told the
CLAIMED (q, sigma, T, delta); replacements declare `accounted = False` (training warns), and
building a variant warns `FaultyDpSgdWarning`. Matrix-factorization faults: `mf_variants`.

  name                        what the training does              vs the claim
  correct                     per-example clip C, noise sigma C   the claim
  clip_batch_mean             clips the batch-MEAN gradient (4a)  one record moves ~B*C
  realised_batch_denominator  divides by the realised batch (4b)  not covered by the proof
  noise_without_clip_norm     noise sigma, not sigma C; C = 10    noise multiplier sigma/10
  noise_on_mean               noise sigma C after dividing by B   B times MORE noise
  shuffle_as_poisson          shuffled batches, accounted Poisson not modelled (Chua 2024)
  floored_expected_batch      / max(1, floor(q n)), n its data    the divisor reveals n
  over_rate_sampler           samples at min(1, 45,000 q)         rate far above q
  backprop_clipping           batch-MEAN logit gradient clipped   up to min(10, b) C
  noise_half                  noise sigma C / 2                   exact: sigma / 2
  sampler_twice_q             Poisson at min(1, 2 q)              exact: rate min(1, 2 q)
  clip_four_c                 clips to 4 C, noise sigma C         exact: sigma / 4

Examples:
  >>> from dpjax import dpsgd, models
  >>> cfg = dpsgd.DpSgdConfig(dataset_size=100, sampling_prob=0.1, num_steps=10,
  ...                         noise_multiplier=1.0)
  >>> with warnings.catch_warnings():
  ...   warnings.simplefilter("ignore")
  ...   v = variant("noise_without_clip_norm", cfg, models.logistic_regression(3))
  >>> v.config.l2_clip_norm, v.privatizer.noise_stddev(1.0, 10.0)
  (10.0, 1.0)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from scipy import special, stats as sps

from dpjax import _validate
from dpjax import clipping as clipping_lib
from dpjax import dpsgd
from dpjax import models as models_lib
from dpjax import privatizer as privatizer_lib
from dpjax import sampling
from dpjax.audit import thresholds

VARIANTS = ("correct", "clip_batch_mean", "realised_batch_denominator", "noise_without_clip_norm",
            "noise_on_mean", "shuffle_as_poisson", "floored_expected_batch", "over_rate_sampler",
            "backprop_clipping", "noise_half", "sampler_twice_q", "clip_four_c")
# The regressions `dpjax.audit.guard` must catch: noise, sampling rate or clipping
# norm off by a constant factor, each with an exact eps (`exact_epsilon`).
REGRESSIONS = ("noise_half", "sampler_twice_q", "clip_four_c")

# The clipping norm the noise-without-C variant runs with (the lecture's exercise 4c).
NOISE_WITHOUT_CLIP_NORM_C = 10.0
# How far above the accounted q the over-rate sampler samples, capped at 1 (the Opacus bug
# github.com/pytorch/opacus/issues/813).
OVER_RATE_FACTOR = 45_000.0
# The backprop-clipping variant's logit-gradient bound C_out (inputs clipped to C / C_out).
BACKPROP_GRAD_CLIP = 0.1


class FaultyDpSgdWarning(dpsgd.UnaccountedComponentWarning):
  """A deliberately broken DP-SGD variant is in use; its epsilon is NOT valid."""


# Replacement components.


def _as_base(base) -> clipping_lib.ClippingPath:
  if not (isinstance(base, clipping_lib.ClippingPath) or callable(base)):
    raise TypeError(f"base must be a ClippingPath or a callable, got {base!r:.80}")
  return clipping_lib.as_path(base)


@functools.lru_cache(maxsize=16)
def clip_batch_mean(base: clipping_lib.ClippingPath) -> clipping_lib.ClippingPath:
  """Clipping of the batch-MEAN gradient (4a): b clip(mean, C), sensitivity not C; memoised."""
  base = _as_base(base)

  def fn(params, x_BxF, y_B, weights_B, l2_clip_norm):
    gsum, norms = base.fn(params, x_BxF, y_B, weights_B, math.inf)
    cnt = jnp.maximum(jnp.sum(weights_B), 1.0)
    mean = jax.tree.map(lambda v: v / cnt, gsum)
    mnorm = jnp.sqrt(sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(mean)))
    factor = clipping_lib.clip_factor(mnorm, l2_clip_norm) * jnp.sum(weights_B)
    return jax.tree.map(lambda v: v * factor, mean), norms

  return dataclasses.replace(base, fn=fn, name="clip_batch_mean", accounted=False)


def _scale_by_realised_batch() -> optax.GradientTransformationExtraArgs:
  """Divides by max(1, b), b the realised batch size passed as `batch_size=`."""

  def update_fn(updates, state, params=None, *, batch_size=None, **extra):
    del params, extra
    if batch_size is None:
      raise ValueError("the realised-denominator variant needs update(..., batch_size=)")
    denom = 1.0 / jnp.maximum(jnp.asarray(batch_size).astype(jnp.float32), 1.0)
    return jax.tree.map(lambda l: l * denom, updates), state

  return optax.GradientTransformationExtraArgs(optax.init_empty_state, update_fn)


@dataclasses.dataclass(frozen=True)
class RealisedBatchDenominator(privatizer_lib.GaussianPrivatizer):
  """Noise sigma * C, then divide by the REALISED batch size, which the canary changes (4b)."""
  accounted: ClassVar[bool] = False

  def transform(self, noise_stddev, expected_batch_size, key):
    del expected_batch_size
    return optax.chain(privatizer_lib.gaussian_privatizer(noise_stddev, key),
                       _scale_by_realised_batch())


@dataclasses.dataclass(frozen=True)
class NoiseWithoutClipNorm(privatizer_lib.GaussianPrivatizer):
  """Noise std sigma instead of sigma * C (exercise 4c)."""
  accounted: ClassVar[bool] = False

  def noise_stddev(self, noise_multiplier, l2_clip_norm):
    del l2_clip_norm
    return float(noise_multiplier)


@dataclasses.dataclass(frozen=True)
class HalfNoise(privatizer_lib.GaussianPrivatizer):
  """Noise std sigma C / 2: half the accounted noise."""
  accounted: ClassVar[bool] = False

  def noise_stddev(self, noise_multiplier, l2_clip_norm):
    return 0.5 * super().noise_stddev(noise_multiplier, l2_clip_norm)


@dataclasses.dataclass(frozen=True)
class NoiseOnMean(privatizer_lib.GaussianPrivatizer):
  """Divide by B first, then add noise sigma * C (to the mean)."""
  accounted: ClassVar[bool] = False

  def transform(self, noise_stddev, expected_batch_size, key):
    b = float(expected_batch_size)
    return optax.chain(optax.scale(1.0 / b), privatizer_lib.gaussian_privatizer(noise_stddev, key))


def floored_denominator(sampling_prob: float, dataset_size: int) -> int:
  """max(1, floor(q n)): the denominator of `FlooredExpectedBatch` for n records.

  Examples:
    >>> floored_denominator(0.5, 3), floored_denominator(0.5, 4), floored_denominator(0.1, 5)
    (1, 2, 1)
  """
  q = _validate.check_sampling_prob(sampling_prob)
  n = _validate.check_int(dataset_size, "dataset_size")
  return max(1, int(math.floor(q * n)))


@dataclasses.dataclass(frozen=True)
class FlooredExpectedBatch(privatizer_lib.GaussianPrivatizer):
  """Noise sigma C on the sum, then divide by max(1, floor(q n)), n = the data set's size.

  Imitates Opacus 1.0-1.6 (opacus issues 571, 819): n differs by one record between neighbours,
  so when floor(q n) != floor(q (n + 1)) every update's scale tells them apart. Train each data
  set with `on_dataset(its size)`. Privacy: NOT accounted.
  """
  sampling_prob: float = 1.0
  dataset_size: int = 1
  accounted: ClassVar[bool] = False

  def __post_init__(self):
    _validate.check_sampling_prob(self.sampling_prob)
    _validate.check_int(self.dataset_size, "dataset_size")

  @property
  def denominator(self) -> int:
    """max(1, floor(q n))."""
    return floored_denominator(self.sampling_prob, self.dataset_size)

  def on_dataset(self, dataset_size: int) -> "FlooredExpectedBatch":
    """The same privatizer run on a data set of `dataset_size` records."""
    return dataclasses.replace(self, dataset_size=dataset_size)

  def transform(self, noise_stddev, expected_batch_size, key):
    del expected_batch_size
    return optax.chain(privatizer_lib.gaussian_privatizer(noise_stddev, key),
                       optax.scale(1.0 / self.denominator))


@dataclasses.dataclass(frozen=True)
class OverRateSampler:
  """Poisson sampling at `true_rate` = min(1, factor q) while the accountant is told q (the Opacus
  bug github.com/pytorch/opacus/issues/813). Privacy: NOT accounted; true eps:
  `dpsgd_epsilon(sigma, true_rate, T, delta, "pld")`.
  """
  sampling_prob: float
  factor: float = OVER_RATE_FACTOR
  accounted: ClassVar[bool] = False
  privacy_unit: ClassVar[str] = "example"

  def __post_init__(self):
    _validate.check_sampling_prob(self.sampling_prob)
    _validate.check_positive(self.factor, "factor")

  @property
  def true_rate(self) -> float:
    """min(1, factor q): the rate the batches are drawn at."""
    return min(1.0, float(self.factor) * float(self.sampling_prob))

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: `sampling.PoissonSampler(true_rate).batch_mask(key, step, keep_N)`."""
    return sampling.PoissonSampler(self.true_rate).batch_mask(key, step, keep_N)


@functools.lru_cache(maxsize=16)
def clip_scaled(base: clipping_lib.ClippingPath, factor: float) -> clipping_lib.ClippingPath:
  """`base` clipping each example to factor * C instead of C (accounted = False); memoised."""
  base = _as_base(base)
  factor = _validate.check_positive(factor, "factor")

  def fn(params, x_BxF, y_B, weights_B, l2_clip_norm):
    return base.fn(params, x_BxF, y_B, weights_B, factor * l2_clip_norm)

  return dataclasses.replace(base, fn=fn, name=f"{base.name}_clip_x{factor:g}", accounted=False)


@functools.lru_cache(maxsize=16)
def backprop_clipping(grad_clip: float = BACKPROP_GRAD_CLIP) -> clipping_lib.ClippingPath:
  """Backpropagation clipping (Stevens et al. 2022) with the batch-size error found by Tramer et al.
  2022 (arXiv:2202.12219), for `models.logistic_regression`.

  With r_i = sigmoid(x_i . w) - y_i, C_out = grad_clip in (0, 1) and C_in = C / C_out, record i
  contributes b clip(r_i / b, C_out) clip(x_i, C_in), norm up to min(1 / C_out, b) C, not C.
  Returns a memoised ClippingPath (accounted = False) whose norms are |r_i| ||x_i||.
  """
  grad_clip = _validate.check_probability(grad_clip, "grad_clip", open_low=True, open_high=True)

  def fn(params, x_BxD, y_B, weights_B, l2_clip_norm):
    w = params["w"]
    z = jnp.einsum("d,bd->b", w, x_BxD)
    r = jax.nn.sigmoid(z) - y_B.astype(z.dtype)
    nx = jnp.sqrt(jnp.sum(jnp.square(x_BxD), axis=1))
    c_in = l2_clip_norm / grad_clip
    x_factor = c_in / jnp.maximum(nx, c_in)                  # clip(x_i, C_in)
    b = jnp.maximum(jnp.sum(weights_B), 1.0)
    r_mean = jnp.clip(r / b, -grad_clip, grad_clip)          # clip(r_i / b, C_out)
    coef = weights_B * (b * r_mean) * x_factor
    return {"w": jnp.einsum("b,bd->d", coef, x_BxD)}, jnp.abs(r) * nx

  return clipping_lib.ClippingPath(fn=fn, name="backprop_clipping", accounted=False)


# Theory of the data-dependent variants, in a probe world (`experiments/audit_bugs.py`):
# n0 records besides the canary, K coordinates no record touches. Each bound is the
# exact eps of one test, so a lower bound on the variant's true eps there.


def _check_world(noise_coords, base_records, sampling_prob, steps, delta):
  return (_validate.check_int(noise_coords, "noise_coords"),
          _validate.check_int(base_records, "base_records"),
          _validate.check_sampling_prob(sampling_prob), _validate.check_int(steps, "steps"),
          _validate.check_delta(delta))


def _log_rate_any(log_p: np.ndarray, steps: int) -> np.ndarray:
  """log P(at least one of `steps` i.i.d. events of log-probability log_p)."""
  with np.errstate(divide="ignore"):
    log_none = steps * np.log1p(-np.exp(np.minimum(log_p, -1e-300)))
    return np.log(-np.expm1(np.minimum(log_none, -1e-300)))


def _log_p_scaled_below(tau: np.ndarray, k: int, n: int, q: float) -> np.ndarray:
  """log P(chi2_k / d^2 < tau) with d = max(1, Binomial(n, q)), for each tau."""
  d = np.arange(n + 1)
  log_pmf = sps.binom.logpmf(d, n, q)
  dd = np.maximum(d, 1).astype(np.float64)
  terms = log_pmf[:, None] + sps.chi2.logcdf(tau[None, :] * dd[:, None] ** 2, k)
  return special.logsumexp(terms, axis=0)


def realised_denominator_lower_bound(noise_coords: int, base_records: int,
                                     sampling_prob: float, steps: int,
                                     delta: float) -> float:
  """Exact eps of the scale_min test on the realised-denominator variant (a lower bound).

  On K free coordinates the update is Z / d_t, Z ~ N(0, sigma^2 C^2 I_K), d_t = max(1, b_t),
  b_t ~ Binomial(n0, q) OUT, Binomial(n0 + 1, q) IN; "some step has ||u_t||^2 / (sigma C)^2 <
  tau" has FPR = 1 - (1 - P(chi2_K / d^2 < tau))^T (TPR likewise). Independent of sigma.
  """
  noise_coords, base_records, sampling_prob, steps, delta = _check_world(
      noise_coords, base_records, sampling_prob, steps, delta)
  tau = np.geomspace(1e-3, 10.0, 2000) * noise_coords
  lf, lt = scale_min_log_rates(tau, noise_coords, base_records, sampling_prob, steps)
  return thresholds.best_exact_epsilon(lf, lt, delta)


def scale_min_log_rates(tau, noise_coords: int, base_records: int, sampling_prob: float,
                        steps: int) -> tuple[np.ndarray, np.ndarray]:
  """(log FPR, log TPR), float64[J] each, of "min_t ||u_t||^2 / (sigma C)^2 < tau" (tau > 0)."""
  tau = np.atleast_1d(_validate.check_array(tau, "tau", low=0.0, open_low=True, min_size=1,
                                            ndim=(0, 1)))
  noise_coords, base_records, sampling_prob, steps, _ = _check_world(
      noise_coords, base_records, sampling_prob, steps, 0.5)
  # Three float64[n0 + 2, J] intermediates (the chi2 arguments, log-CDFs and terms).
  _validate.check_size(base_records, "base_records", bytes_per_unit=24, units=tau.size + 1,
                       units_name="tau's size + 1")
  lf = _log_rate_any(_log_p_scaled_below(tau, noise_coords, base_records, sampling_prob), steps)
  lt = _log_rate_any(_log_p_scaled_below(tau, noise_coords, base_records + 1, sampling_prob), steps)
  return lf, lt


def floored_denominator_lower_bound(noise_coords: int, base_records: int,
                                    sampling_prob: float, steps: int, delta: float) -> float:
  """Exact eps of the scale_sum test on the floored-denominator variant (a lower bound):
  sum_t ||u_t||^2 / (sigma C)^2 = chi2_{K T} / d^2, d = `floored_denominator(q, n0 or n0 + 1)`.
  """
  noise_coords, base_records, sampling_prob, steps, delta = _check_world(
      noise_coords, base_records, sampling_prob, steps, delta)
  d_out = floored_denominator(sampling_prob, base_records)
  d_in = floored_denominator(sampling_prob, base_records + 1)
  if d_in == d_out:
    return 0.0
  kt = noise_coords * steps
  tau = np.geomspace(1e-4, 2.0, 8000) * kt / min(d_in, d_out) ** 2
  lo, hi = sorted((d_in, d_out))
  lf = sps.chi2.logcdf(tau * lo ** 2, kt)      # the side with the smaller divisor is above
  lt = sps.chi2.logcdf(tau * hi ** 2, kt)
  return thresholds.best_exact_epsilon(lf, lt, delta)


@_validate.names_extreme_arguments
def shuffle_slot_mu(noise_multiplier: float, steps: int, steps_per_epoch: int) -> float:
  """mu = sqrt((T // E) / 2) / sigma of the slot test (the last batch one record short without the
  canary: u_t[0] + u_t[1] over the T // E last-of-epoch steps is exactly mu-GDP).
  """
  noise_multiplier = _validate.check_positive(noise_multiplier, "noise_multiplier")
  steps = _validate.check_int(steps, "steps")
  steps_per_epoch = _validate.check_int(steps_per_epoch, "steps_per_epoch", 1, steps)
  slots = steps // steps_per_epoch
  return math.sqrt(slots / 2.0) / noise_multiplier


# Variants.


class Variant(NamedTuple):
  """A DP-SGD variant: the claimed config (C = 10 for noise_without_clip_norm) and the replaced
  components (None: the engine's default).
  """
  name: str
  config: dpsgd.DpSgdConfig
  sampler: Any = None
  clipping: Any = None
  privatizer: Any = None

  @property
  def components(self) -> dict:
    """The keyword arguments for `dpsgd.train_many` (only the replaced ones)."""
    return {k: getattr(self, k) for k in ("sampler", "clipping", "privatizer")
            if getattr(self, k) is not None}


def variant(name: str, cfg: dpsgd.DpSgdConfig, model: models_lib.Model) -> Variant:
  """Variant `name` of the claim `cfg` for `model` (backprop_clipping: an unregularised logistic
  regression). Train with `dpsgd.train_many(..., v.config, model, **v.components)`.
  """
  _validate.check_choice(name, VARIANTS, "name (the variant)")
  if not isinstance(cfg, dpsgd.DpSgdConfig):
    raise ValueError(f"cfg must be a dpsgd.DpSgdConfig, got {type(cfg)}")
  models_lib.check_model(model)
  base = cfg
  if name == "correct":
    return Variant(name, base)
  warnings.warn(f"DP-SGD variant {name!r}: a deliberately broken DP-SGD; the claimed "
                "epsilon does not hold for it.", FaultyDpSgdWarning, stacklevel=2)
  if name == "shuffle_as_poisson":
    return Variant(name, base, sampler=sampling.ShuffleSampler.like_poisson(
        base.sampling_prob, base.dataset_size))
  if name == "clip_batch_mean":
    return Variant(name, base, clipping=clip_batch_mean(clipping_lib.path_for(model)))
  if name == "realised_batch_denominator":
    return Variant(name, base, privatizer=RealisedBatchDenominator())
  if name == "noise_on_mean":
    return Variant(name, base, privatizer=NoiseOnMean())
  if name == "floored_expected_batch":
    # Built on the claimed n; audits train each data set with `privatizer.on_dataset(n)`.
    return Variant(name, base, privatizer=FlooredExpectedBatch(
        sampling_prob=base.sampling_prob, dataset_size=base.dataset_size))
  if name == "over_rate_sampler":
    return Variant(name, base, sampler=OverRateSampler(base.sampling_prob))
  if name == "backprop_clipping":
    if model.kind != "logistic_regression" or model.l2 != 0.0:
      raise ValueError("the backprop_clipping variant is built for an unregularised "
                       f"models.logistic_regression, got model kind {model.kind!r}, "
                       f"l2 = {model.l2!r}")
    return Variant(name, base, clipping=backprop_clipping())
  if name == "noise_half":
    return Variant(name, base, privatizer=HalfNoise())
  if name == "sampler_twice_q":
    return Variant(name, base, sampler=OverRateSampler(base.sampling_prob, factor=2.0))
  if name == "clip_four_c":
    return Variant(name, base, clipping=clip_scaled(clipping_lib.path_for(model), 4.0))
  return Variant(name, dataclasses.replace(base, l2_clip_norm=NOISE_WITHOUT_CLIP_NORM_C),
                 privatizer=NoiseWithoutClipNorm())


def exact_epsilon(name: str, cfg: dpsgd.DpSgdConfig) -> float | None:
  """The true eps (PLD, at cfg.delta) of variant `name`, or None where it is not again a subsampled
  Gaussian (correct, noise_half, clip_four_c, sampler_twice_q, over_rate_sampler,
  noise_without_clip_norm are).

  Examples:
    >>> cfg = dpsgd.DpSgdConfig(dataset_size=100, sampling_prob=0.5, num_steps=10,
    ...                         noise_multiplier=4.0)
    >>> exact_epsilon("noise_half", cfg) > 2 * exact_epsilon("correct", cfg)
    True
    >>> exact_epsilon("shuffle_as_poisson", cfg) is None
    True
  """
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  _validate.check_choice(name, VARIANTS, "name (the variant)")
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  sigma, q = float(cfg.noise_multiplier), float(cfg.sampling_prob)
  if not sigma > 0:
    raise ValueError("exact_epsilon needs a claim with noise (noise_multiplier > 0)")
  mech = {"correct": (sigma, q), "noise_half": (sigma / 2, q), "clip_four_c": (sigma / 4, q),
          "sampler_twice_q": (sigma, min(1.0, 2.0 * q)),
          "over_rate_sampler": (sigma, OverRateSampler(q).true_rate),
          "noise_without_clip_norm": (sigma / NOISE_WITHOUT_CLIP_NORM_C, q)}.get(name)
  if mech is None:
    return None
  return float(accounting.dpsgd_epsilon(mech[0], mech[1], int(cfg.num_steps),
                                        float(cfg.delta), accountant="pld"))
