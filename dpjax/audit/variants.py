"""Deliberately faulty DP-SGD variants, for audits and tests only.

Each variant replaces one component of DP-SGD (the sampler, the clipping or the
privatizer) through the same door a user's own component would use,
`dpsgd.train_many(..., sampler=, clipping=, privatizer=)`, while the accountant is
still told the CLAIMED (q, sigma, T, delta): the audit then checks whether the
claim survives. Every replacement declares `accounted = False`, so training with
it warns (`dpsgd.UnaccountedComponentWarning`); building a variant warns too
(`FaultyDpSgdWarning`).

  name                        what the training does                         vs the claim
  correct                     Poisson sampling, per-example clip to C,       the claim
                              noise N(0, sigma^2 C^2) on the sum, / (q n)
  clip_batch_mean             clips the batch-MEAN gradient, not each        one record can move the
                              example (lecture exercise 4a)                   sum by ~B*C, not C
  realised_batch_denominator  divides by the realised batch size             not covered by the proof;
                              (exercise 4b)                                   leaks little in practice
  noise_without_clip_norm     noise std sigma instead of sigma*C, run with   effective noise multiplier
                              C = 10 (exercise 4c)                            sigma/10: far less private
  noise_on_mean               noise N(0, sigma^2 C^2) added after dividing   B times MORE noise than
                              by B                                            claimed: private, useless
  shuffle_as_poisson          fixed-size batches from a shuffle per epoch,   not what the accountant
                              accounted as Poisson                            models (Chua et al. 2024)

Examples:
  >>> import warnings
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
import optax

from dpjax import clipping as clipping_lib
from dpjax import dpsgd
from dpjax import models as models_lib
from dpjax import privatizer as privatizer_lib
from dpjax import sampling

VARIANTS = ("correct", "clip_batch_mean", "realised_batch_denominator",
            "noise_without_clip_norm", "noise_on_mean", "shuffle_as_poisson")

# The clipping norm the noise-without-C variant runs with (the lecture's exercise 4c).
NOISE_WITHOUT_CLIP_NORM_C = 10.0


class FaultyDpSgdWarning(dpsgd.UnaccountedComponentWarning):
  """A deliberately broken DP-SGD variant is in use; its epsilon is NOT valid."""


# ----------------------------------------------------------------------------------
# Replacement components.


@functools.lru_cache(maxsize=16)
def clip_batch_mean(base: clipping_lib.ClippingPath) -> clipping_lib.ClippingPath:
  """Clipping of the batch-MEAN gradient instead of each example's (exercise 4a).

  The "sum" handed to the noise is b * clip(mean gradient, C), b the realised batch
  size, whose sensitivity is not C. `base` computes the unclipped sum. Memoised, so
  one base gives one path object (and one compiled program).
  """
  if not (isinstance(base, clipping_lib.ClippingPath) or callable(base)):
    raise TypeError(f"base must be a ClippingPath or a callable, got {base!r:.80}")
  base = clipping_lib.as_path(base)

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
  """Noise sigma * C, then divide by the REALISED batch size (exercise 4b)."""
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
class NoiseOnMean(privatizer_lib.GaussianPrivatizer):
  """Divide by B first, then add noise sigma * C (to the mean)."""
  accounted: ClassVar[bool] = False

  def transform(self, noise_stddev, expected_batch_size, key):
    b = float(expected_batch_size)
    return optax.chain(optax.scale(1.0 / b),
                       privatizer_lib.gaussian_privatizer(noise_stddev, key))


# ----------------------------------------------------------------------------------
# Variants.


class Variant(NamedTuple):
  """A DP-SGD variant: the training config and the components it replaces.

  Attributes:
    name: one of VARIANTS.
    config: the DpSgdConfig to train with (the claimed one, with the claimed sigma
      resolved; C = 10 for noise_without_clip_norm).
    sampler, clipping, privatizer: replacement components, or None for the
      engine's default.
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
  """Variant `name` of the claimed configuration `cfg` for `model`.

  Args:
    name: one of VARIANTS.
    cfg: the claimed (correct) configuration; its (q, sigma, T, delta) is what the
      accountant is told for every variant. A `target_epsilon` is resolved to the
      claimed sigma first, so a variant never re-calibrates its own noise.
    model: the model (clip_batch_mean wraps its default clipping path).
  Returns:
    A Variant; train with `dpsgd.train_many(..., v.config, model, **v.components)`.
  Warns:
    FaultyDpSgdWarning for every variant but "correct".
  """
  if not isinstance(name, str) or name not in VARIANTS:
    raise ValueError(f"name (the variant) must be one of {VARIANTS}, got {name!r}")
  if not isinstance(cfg, dpsgd.DpSgdConfig):
    raise ValueError(f"cfg must be a dpsgd.DpSgdConfig, got {type(cfg)}")
  models_lib.check_model(model)
  base = dataclasses.replace(cfg, noise_multiplier=cfg.sigma, target_epsilon=None)
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
  return Variant(name, dataclasses.replace(base, l2_clip_norm=NOISE_WITHOUT_CLIP_NORM_C),
                 privatizer=NoiseWithoutClipNorm())
