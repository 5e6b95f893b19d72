"""What DP-SGD does, and therefore what the accountant is told: `DpSgdConfig`.

The config holds every field that decides the privacy guarantee (n, q, T, C, sigma,
delta, the accountant, the privacy unit) and the training hyperparameters of the
default optimiser; `PerformanceFlags` holds the knobs that cannot change a result.
sigma is a field: `cfg.calibrate(target_epsilon)` returns a new config whose
noise_multiplier meets the target (`dataclasses.replace`).

Examples:
  >>> cfg = DpSgdConfig(dataset_size=4000, sampling_prob=50 / 4000, num_steps=1600)
  >>> round(cfg.calibrate(1.0).noise_multiplier, 2)     # lecture: 2.19
  2.19
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import numpy as np

from dpjax import _validate
from dpjax import sampling as sampling_lib

_ACCOUNTANTS = ("rdp", "pld")
PRIVACY_UNITS = ("example", "user")


@functools.lru_cache(maxsize=256)
def _epsilon(sigma, sampling_prob, num_steps, delta, accountant, dataset_size):
  # dataset_size lets the accountant warn when delta >= 1/n.
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  return float(accounting.dpsgd_epsilon(sigma, sampling_prob, num_steps, delta,
                                        accountant=accountant, dataset_size=dataset_size))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpSgdConfig:
  """What DP-SGD does, and therefore what the accountant is told.

  Attributes:
    dataset_size: n >= 1, public; the fixed denominator is B = q * n.
    sampling_prob: q in (0, 1], the Poisson sampling rate.
    num_steps: T >= 1.
    l2_clip_norm: C > 0; math.inf disables clipping (non-private baseline; then
      noise_multiplier must be 0).
    noise_multiplier: sigma >= 0 (0 = the clipped-noiseless baseline); the noise on
      the clipped sum has standard deviation sigma * C. `calibrate` sets it from a
      target epsilon.
    delta: in (0, 1).
    learning_rate: > 0 (used by the default optimiser, SGD).
    momentum: in [0, 1) (default optimiser only).
    ema_decay: None, or d in [0, 1): training also returns the exponential moving
      average of the iterates (`TrainResult.ema_params`; De et al. 2022,
      https://arxiv.org/abs/2204.13650), post-processing of the released iterates.
    accountant: "rdp" or "pld".
    privacy_unit: "example" (add/remove one record) or "user" (add/remove one
      user with all of their records); for "user", dataset_size is the number of
      users U and q is the per-user sampling rate, and training needs the record
      owners (`train_many(..., sampler=cfg.sampler(user_ids_N))`). The accountant's numbers are the
      same function of (q, sigma, T, delta); the unit says what they protect.
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
        raise ValueError(f"l2_clip_norm must be > 0 (math.inf = no clipping), got {c!r}"
                         ) from None
    s = _validate.check_nonnegative(self.noise_multiplier, "noise_multiplier")
    if math.isinf(s):
      raise ValueError(f"noise_multiplier must be finite, got {s}")
    if math.isinf(c) and s > 0:
      raise ValueError("l2_clip_norm = inf (no clipping) has unbounded sensitivity: "
                       "noise_multiplier must be 0 (the non-private baseline)")
    _validate.check_delta(self.delta)
    _validate.check_positive(self.learning_rate, "learning_rate")
    _validate.check_probability(self.momentum, "momentum", open_high=True)
    if self.ema_decay is not None:
      _validate.check_probability(self.ema_decay, "ema_decay", open_high=True)
    _validate.check_choice(self.accountant, _ACCOUNTANTS, "accountant")
    _validate.check_choice(self.privacy_unit, PRIVACY_UNITS, "privacy_unit")
    # A NumPy scalar or 0-d array passes the checks above but is not hashable, and a
    # config is a static argument of the compiled program: store Python floats.
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
    """A copy whose noise_multiplier is the smallest sigma with epsilon() <= target.

    Args:
      target_epsilon: eps > 0.
    Returns:
      `dataclasses.replace(self, noise_multiplier=accounting.calibrate_noise(
      target_epsilon, q, T, delta, accountant, dataset_size=n))`.
    Raises:
      ValueError: a bad or unreachable target (see `accounting.calibrate_noise`).
    """
    from dpjax import accounting  # pylint: disable=g-import-not-at-top
    eps = _validate.check_epsilon(target_epsilon, "target_epsilon")
    sigma = accounting.calibrate_noise(eps, float(self.sampling_prob), int(self.num_steps),
                                       float(self.delta), accountant=self.accountant,
                                       dataset_size=int(self.dataset_size))
    return dataclasses.replace(self, noise_multiplier=float(sigma))

  def epsilon(self) -> float:
    """The epsilon spent at `delta`: accounting.dpsgd_epsilon(sigma, q, T, delta).

    The accountant models Poisson sampling at rate q, per-example clipping to C and
    Gaussian noise sigma * C on the sum (the defaults of `train_many`). math.inf
    when sigma == 0.
    """
    s = float(self.noise_multiplier)
    if s == 0.0:
      return math.inf
    return _epsilon(s, float(self.sampling_prob), int(self.num_steps), float(self.delta),
                    self.accountant, int(self.dataset_size))

  def sampler(self, user_ids_N: jax.typing.ArrayLike | None = None):
    """The sampler the accountant models: Poisson at rate q over the privacy unit.

    Args:
      user_ids_N: int[N] record owners, required for privacy_unit "user" (ids in
        [0, dataset_size)), refused for "example".
    Returns:
      `sampling.PoissonSampler(q)` ("example") or
      `sampling.UserPoissonSampler(q, user_ids_N, dataset_size)` ("user").
    """
    if self.privacy_unit == "example":
      if user_ids_N is not None:
        raise ValueError("user_ids_N is only for privacy_unit = 'user' (this config's "
                         "unit is 'example')")
      return sampling_lib.PoissonSampler(float(self.sampling_prob))
    if user_ids_N is None:
      raise ValueError("privacy_unit = 'user' needs user_ids_N (the user of each record)")
    return sampling_lib.UserPoissonSampler(float(self.sampling_prob), user_ids_N,
                                           int(self.dataset_size))

  def statement(self, **kwargs):
    """`accounting.privacy_statement` of this configuration, naming its privacy unit.

    Args:
      **kwargs: other `privacy_statement` keywords (deltas, fprs, pld_rtol,
        noise_draws_per_step).
    Returns:
      a `dpjax.accounting.statement.PrivacyStatement` for (sigma, q, T, n) and
      `privacy_unit`.
    """
    from dpjax.accounting import statement  # pylint: disable=g-import-not-at-top
    return statement.privacy_statement(float(self.noise_multiplier),
                                       float(self.sampling_prob), int(self.num_steps),
                                       int(self.dataset_size),
                                       privacy_unit=self.privacy_unit, **kwargs)


def noise_free(cfg: DpSgdConfig) -> DpSgdConfig:
  """cfg with noise_multiplier 0: what a compiled training program depends on (the
  noise std is an input of the program, so a sweep over sigma compiles once)."""
  return dataclasses.replace(cfg, noise_multiplier=0.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerformanceFlags:
  """How `train_many` lays out its work; none of these can change a trained model.

  Attributes:
    memory_budget_bytes: rough cap (> 0) on the working set; the model axis is
      chunked to stay under it.
    max_chunk: optional cap on models per chunk (default 4096; chunks are balanced
      to minimise padding).
    model_sharding: optional `jax.sharding.Sharding` of the leading model axis (see
      `dpjax.parallel`); each chunk is then a multiple of the device count.
    batch_capacity: the step layout. None: the full-mask step, every record's
      clipped gradient computed and weighted by its 0/1 batch bit (cost
      proportional to N per step). An int K >= 1: the padded step, the sampled
      records gathered into buffers of K rows (K > N means N) and processed a
      buffer at a time until all are (cost proportional to K when the batch fits,
      which `sampling.default_batch_capacity` makes the usual case); no sampled
      record is ever dropped, so the accountant's analysis is unchanged. "auto":
      `engine.batch_layout(...)` decides. Both steps use the same batch bits and
      train the same models up to float summation order (tested). User-level
      DP-SGD always uses the full mask.
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
