"""Deliberately faulty DP-SGD variants, for audits and tests only.

Each variant is a named change to the engine's configuration (`dpsgd.Faults` or the
sampler) while the accountant is still told the CLAIMED (q, sigma, T, delta): the
audit then checks whether the claim survives. The engine warns loudly whenever a
fault is on (FaultyDpSgdWarning / UnaccountedSamplingWarning).

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
  >>> from dpjax import dpsgd
  >>> cfg = dpsgd.DpSgdConfig(dataset_size=100, sampling_prob=0.1, num_steps=10,
  ...                         noise_multiplier=1.0)
  >>> with warnings.catch_warnings():
  ...   warnings.simplefilter("ignore")
  ...   v = variant_config("noise_without_clip_norm", cfg)
  >>> v.l2_clip_norm, v.faults.noise_without_clip_norm, v.noise_multiplier
  (10.0, True, 1.0)
"""

from __future__ import annotations

import dataclasses

from dpjax import dpsgd

VARIANTS = ("correct", "clip_batch_mean", "realised_batch_denominator",
            "noise_without_clip_norm", "noise_on_mean", "shuffle_as_poisson")

# The clipping norm the noise-without-C variant runs with (the lecture's exercise 4c).
NOISE_WITHOUT_CLIP_NORM_C = 10.0


def variant_config(name: str, cfg: dpsgd.DpSgdConfig) -> dpsgd.DpSgdConfig:
  """The training configuration of variant `name`, derived from the claimed `cfg`.

  Args:
    name: one of VARIANTS.
    cfg: the claimed (correct) configuration; its (q, sigma, T, delta) is what the
      accountant is told for every variant. A `target_epsilon` is resolved to the
      claimed sigma first, so a variant never re-calibrates its own noise.
  Returns:
    A DpSgdConfig for training (equal to `cfg` up to the resolved sigma for
    "correct"). Constructing a faulty one warns.
  """
  if name not in VARIANTS:
    raise ValueError(f"variant must be one of {VARIANTS}, got {name!r}")
  if not isinstance(cfg, dpsgd.DpSgdConfig):
    raise ValueError(f"cfg must be a dpsgd.DpSgdConfig, got {type(cfg)}")
  if cfg.faults.any or cfg.sampler != "poisson":
    raise ValueError("cfg must be the claimed, correct configuration (no faults, Poisson)")
  base = dataclasses.replace(cfg, noise_multiplier=cfg.sigma, target_epsilon=None)
  if name == "correct":
    return base
  if name == "shuffle_as_poisson":
    return dataclasses.replace(base, sampler="shuffle")
  faults = dpsgd.Faults(**{name: True})
  if name == "noise_without_clip_norm":
    return dataclasses.replace(base, faults=faults, l2_clip_norm=NOISE_WITHOUT_CLIP_NORM_C)
  return dataclasses.replace(base, faults=faults)


def claimed_epsilon(cfg: dpsgd.DpSgdConfig) -> float:
  """What the accountant reports for the claimed (q, sigma, T, delta) of `cfg`."""
  if cfg.faults.any or cfg.sampler != "poisson":
    raise ValueError("pass the claimed configuration, not a variant's")
  return cfg.epsilon()
