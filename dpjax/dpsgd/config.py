"""What DP-SGD does, and therefore what the accountant is told: `DpSgdConfig`;
`PerformanceFlags` holds the knobs that cannot change a result.

Examples:
  >>> cfg = DpSgdConfig(dataset_size=4000, sampling_prob=50 / 4000, num_steps=1600)
  >>> round(cfg.calibrate(1.0).noise_multiplier, 2)     # lecture: 2.19
  2.19
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any

import jax
import numpy as np

from dpjax import _validate
from dpjax import sampling as sampling_lib

_ACCOUNTANTS = ("rdp", "pld")
PRIVACY_UNITS = ("example", "user")


@functools.lru_cache(maxsize=256)
def _epsilon(sigma, sampling_prob, num_steps, delta, accountant, dataset_size,
             max_batch_size=None):
  # dataset_size lets the accountant warn when delta >= 1/n.
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  if max_batch_size is None:
    return float(accounting.dpsgd_epsilon(sigma, sampling_prob, num_steps, delta,
                                          accountant=accountant, dataset_size=dataset_size))
  from dpjax.accounting import event_accounting, statement  # pylint: disable=g-import-not-at-top
  if delta >= 1.0 / dataset_size:
    warnings.warn(f"delta = {delta:g} >= 1/dataset_size = {1.0 / dataset_size:g}: a mechanism "
                  "that publishes one random record in full satisfies this (eps, delta); use "
                  "delta << 1/n.", UserWarning, stacklevel=3)
  return float(event_accounting.epsilon(statement.truncated_dpsgd_event(
      sigma, sampling_prob, num_steps, dataset_size, max_batch_size), delta, accountant))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpSgdConfig:
  """What DP-SGD does, and therefore what the accountant is told.

  Attributes:
    dataset_size: n, public; the fixed denominator is B = q * n.
    l2_clip_norm: C > 0; math.inf disables clipping (non-private, needs sigma 0).
    noise_multiplier: sigma >= 0; the noise on the clipped sum has sd sigma * C.
    ema_decay: None, or d in [0, 1): also return the iterates' moving average (De et
      al. 2022), post-processing.
    privacy_unit: "example" or "user" (n users, q per user; training needs
      `sampler=cfg.sampler(user_ids_N)`).
    max_batch_size: None (Poisson batches of any size), or B >= 1: the truncating mode.
      A step that draws more than B records keeps a uniformly random B of them
      (`sampling.TruncatedPoissonSampler`); the accountant is told the truncated Poisson-
      subsampled Gaussian (`accounting.truncated_sampling`) for datasets of n =
      dataset_size records and their add/remove neighbours. The denominator stays q n
      (public; the truncated batch's mean is below it, a bias, not a privacy matter).
      Example level only; no fixed-gradient records.
  Warning (truncating mode): the bound depends on n, so a model holding a number of
    records other than n - 1, n or n + 1 is not covered (the engine warns); the selection
    is uniform up to `sampling.selection_tv_bound` in total variation (about 2^-64 C(count, 2)
    a step), which the statement adds to delta; the bound can be far above the untruncated
    eps (a cut step has sensitivity 2C), so a cap well above q n costs least.
  """
  dataset_size: int
  sampling_prob: float
  num_steps: int
  l2_clip_norm: float = 1.0
  noise_multiplier: float = 1.0
  delta: float = 1e-5
  learning_rate: float = 0.5
  momentum: float = 0.0
  ema_decay: float | None = None
  accountant: str = "rdp"
  privacy_unit: str = "example"
  max_batch_size: int | None = None

  def __post_init__(self):
    for name in ("dataset_size", "num_steps"):
      v = getattr(self, name)
      if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
      object.__setattr__(self, name, int(v))
    _validate.check_sampling_prob(self.sampling_prob)
    c = self.l2_clip_norm
    if c != math.inf:
      try:
        _validate.check_positive(c, "l2_clip_norm")
      except ValueError:
        raise ValueError(f"l2_clip_norm must be > 0 (math.inf = no clipping), got {c!r}") from None
    s = _validate.check_nonnegative(self.noise_multiplier, "noise_multiplier")
    if math.isinf(s):
      raise ValueError(f"noise_multiplier must be finite, got {s}")
    if math.isinf(c) and s > 0:
      raise ValueError("l2_clip_norm = inf (no clipping) has unbounded sensitivity: "
                       "noise_multiplier must be 0 (the non-private baseline)")
    if s * c > float(np.finfo(np.float32).max):
      raise ValueError(f"the noise stddev noise_multiplier * l2_clip_norm = {s * c:g} is beyond "
                       "float32 (the noise would be inf): rescale the clip norm")
    _validate.check_delta(self.delta)
    _validate.check_positive(self.learning_rate, "learning_rate")
    _validate.check_probability(self.momentum, "momentum", open_high=True)
    if self.ema_decay is not None:
      _validate.check_probability(self.ema_decay, "ema_decay", open_high=True)
    _validate.check_choice(self.accountant, _ACCOUNTANTS, "accountant")
    _validate.check_choice(self.privacy_unit, PRIVACY_UNITS, "privacy_unit")
    if self.max_batch_size is not None:
      object.__setattr__(self, "max_batch_size", _validate.check_int(
          self.max_batch_size, "max_batch_size", 1, 2 ** 31 - 1))
      if self.privacy_unit != "example":
        raise ValueError("max_batch_size (truncated Poisson sampling) is accounted for "
                         "example-level DP only; privacy_unit must be 'example', got "
                         f"{self.privacy_unit!r}")
    # Store Python floats: a config is a static (hashable) argument of the compiled program.
    for name in ("sampling_prob", "l2_clip_norm", "noise_multiplier", "delta",
                 "learning_rate", "momentum", "ema_decay"):
      v = getattr(self, name)
      if v is not None and not isinstance(v, float):
        object.__setattr__(self, name, float(v))

  @property
  def expected_batch_size(self) -> float:
    """B = q * n, the fixed public denominator."""
    return float(self.sampling_prob) * float(self.dataset_size)

  @property
  def epochs(self) -> float:
    return self.num_steps * float(self.sampling_prob)

  def calibrate(self, target_epsilon: float) -> DpSgdConfig:
    """A copy whose noise_multiplier is the smallest sigma with epsilon() <= target_epsilon
    (`accounting.calibrate_noise`; truncating mode: `accounting.smallest_noise` over
    `epsilon()`, bracketed from the untruncated answer)."""
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    eps = _validate.check_epsilon(target_epsilon, "target_epsilon")
    if self.max_batch_size is not None:
      return dataclasses.replace(self, noise_multiplier=self._calibrate_truncated(eps))
    sigma = accounting.calibrate_noise(eps, float(self.sampling_prob), int(self.num_steps),
                                       float(self.delta), accountant=self.accountant,
                                       dataset_size=int(self.dataset_size))
    return dataclasses.replace(self, noise_multiplier=float(sigma))

  def _calibrate_truncated(self, target: float) -> float:
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    lo_s, hi_s = accounting.NOISE_MULTIPLIER_RANGE
    try:   # the untruncated sigma: usually just below the answer (a cut costs sensitivity 2C)
      start = accounting.calibrate_noise(target, float(self.sampling_prob),
                                         int(self.num_steps), float(self.delta), rtol=1e-3)
    except ValueError:
      start = 1.0
    start = min(max(start, 1.25 * lo_s), hi_s)
    eps = lambda s: dataclasses.replace(self, noise_multiplier=s).epsilon()
    return accounting.smallest_noise(eps, target, start / 1.25, start, rtol=1e-4,
                                     factor=1.25, limits=(lo_s, hi_s))

  def epsilon(self) -> float:
    """accounting.dpsgd_epsilon(sigma, q, T, delta) of `train_many`'s defaults (inf if sigma
    0); truncating mode: the eps of `event()` by `accountant`."""
    s = float(self.noise_multiplier)
    if s == 0.0:
      return math.inf
    if self.max_batch_size is None:
      return _epsilon(s, float(self.sampling_prob), int(self.num_steps), float(self.delta),
                      self.accountant, int(self.dataset_size))
    return _epsilon(s, float(self.sampling_prob), int(self.num_steps), float(self.delta),
                    self.accountant, int(self.dataset_size), int(self.max_batch_size))

  def event(self):
    """The `events.Event` the accountant is told: `events.dpsgd_event(sigma, q, T)`, or
    `statement.truncated_dpsgd_event(sigma, q, T, n, B)` in truncating mode (sigma > 0)."""
    from dpjax.accounting import events, statement  # pylint: disable=g-import-not-at-top
    s, q, t = float(self.noise_multiplier), float(self.sampling_prob), int(self.num_steps)
    if self.max_batch_size is None:
      return events.dpsgd_event(s, q, t)
    return statement.truncated_dpsgd_event(s, q, t, int(self.dataset_size),
                                           int(self.max_batch_size))

  def sampler(self, user_ids_N: jax.typing.ArrayLike | None = None):
    """The sampler the accountant models: `PoissonSampler(q)` ("example"),
    `TruncatedPoissonSampler(q, B)` (max_batch_size B), or `UserPoissonSampler(q,
    user_ids_N, n)` ("user"; user_ids_N int[N] required)."""
    if self.privacy_unit == "example":
      if user_ids_N is not None:
        raise ValueError("user_ids_N is only for privacy_unit = 'user' (this config's "
                         "unit is 'example')")
      if self.max_batch_size is not None:
        return sampling_lib.TruncatedPoissonSampler(float(self.sampling_prob),
                                                    int(self.max_batch_size))
      return sampling_lib.PoissonSampler(float(self.sampling_prob))
    if user_ids_N is None:
      raise ValueError("privacy_unit = 'user' needs user_ids_N (the user of each record)")
    return sampling_lib.UserPoissonSampler(float(self.sampling_prob), user_ids_N,
                                           int(self.dataset_size))

  def statement(self, **kwargs):
    """`accounting.privacy_statement` of (sigma, q, T, n), `privacy_unit` and
    `max_batch_size`; kwargs are its."""
    from dpjax.accounting import statement  # pylint: disable=g-import-not-at-top
    if self.max_batch_size is not None:
      kwargs["max_batch_size"] = int(self.max_batch_size)
    return statement.privacy_statement(float(self.noise_multiplier),
                                       float(self.sampling_prob), int(self.num_steps),
                                       int(self.dataset_size),
                                       privacy_unit=self.privacy_unit, **kwargs)


def noise_free(cfg: DpSgdConfig) -> DpSgdConfig:
  """cfg with noise_multiplier 0, the key of a compiled program (sigma is its input)."""
  return dataclasses.replace(cfg, noise_multiplier=0.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerformanceFlags:
  """How `train_many` lays out its work; none of these can change a trained model.

  Attributes:
    memory_budget_bytes: rough cap on the working set; models are chunked to it.
    max_chunk: cap on models per chunk (default 4096).
    batch_capacity: None (full-mask step, cost ~ N), int K (padded step, buffers of K
      sampled rows until all are summed, cost ~ K) or "auto" (`batch_layout`).
    progress: a tqdm bar over chunks when there is more than one.
  """
  memory_budget_bytes: int | float = 2 * 2 ** 30
  max_chunk: int | None = None
  model_sharding: Any = None
  batch_capacity: int | str | None = "auto"
  progress: bool = True

  def __post_init__(self):
    b = self.memory_budget_bytes
    if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
      raise ValueError(f"memory_budget_bytes must be an integer > 0, got {b!r}")
    if self.max_chunk is not None:
      _validate.check_int(self.max_chunk, "max_chunk")
    _validate.check_bool(self.progress, "progress")
    bc = self.batch_capacity
    if isinstance(bc, str):
      _validate.check_choice(bc, ("auto",), "batch_capacity")
    elif bc is not None:
      _validate.check_int(bc, "batch_capacity")
    ms = self.model_sharding
    if ms is not None and not isinstance(ms, jax.sharding.Sharding):
      raise ValueError(f"model_sharding must be None or a jax.sharding.Sharding, got {ms!r}")
