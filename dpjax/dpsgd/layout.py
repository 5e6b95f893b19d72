"""How `train_many` lays out its work: the step layout and the chunks of models.

None of this can change a trained model. Full-mask step: all N records weighted by their
batch bits (cost ~ N); padded step: ceil(count / K) >= 1 buffers of K gathered rows (cost
~ K). Chunks fit `PerformanceFlags.memory_budget_bytes`, balanced, whole per device.
"""

from __future__ import annotations

import jax
import numpy as np

from dpjax import _validate
from dpjax import sampling as sampling_lib
from dpjax.dpsgd import config as config_lib

# Models per chunk unless max_chunk says otherwise (faster than one huge chunk).
DEFAULT_MAX_CHUNK = 4096
# Thresholds of batch_capacity="auto" (`batch_layout`).
_PADDED_MIN_RECORDS = 2048
_PADDED_MAX_FRACTION_INV = 8
_PADDED_MIN_PARAMS = 1024


def batch_layout(num_records: int, sampling_prob: float, kept_max: int | None = None,
                 num_models: int = 1, privacy_unit: str = "example",
                 num_params: int | None = None) -> int | None:
  """The step layout "auto" picks: K = `sampling.default_batch_capacity(kept_max, q, M)`
  (padded) when N >= _PADDED_MIN_RECORDS, K <= N / _PADDED_MAX_FRACTION_INV and
  num_params >= _PADDED_MIN_PARAMS; else None (full mask, always for "user").

  Examples:
    >>> batch_layout(60_000, 256 / 60_000)
    288
    >>> batch_layout(151, 0.2) is None
    True
  """
  n = _validate.check_int(num_records, "num_records")
  q = _validate.check_sampling_prob(sampling_prob)
  kept = n if kept_max is None else _validate.check_int(kept_max, "kept_max", 0)
  if kept > n:
    raise ValueError(f"kept_max = {kept} exceeds num_records = {n}")
  m = _validate.check_int(num_models, "num_models")
  _validate.check_choice(privacy_unit, config_lib.PRIVACY_UNITS, "privacy_unit")
  if num_params is not None:
    num_params = _validate.check_int(num_params, "num_params", 0)
  if (privacy_unit != "example" or n < _PADDED_MIN_RECORDS
      or (num_params is not None and num_params < _PADDED_MIN_PARAMS)):
    return None
  k = sampling_lib.default_batch_capacity(max(kept, 1), q, m)
  return k if k * _PADDED_MAX_FRACTION_INV <= n else None


def capacity(perf, cfg, sampler, path, keep, num_params) -> int | None:
  """Resolves perf.batch_capacity to None (full mask) or an int K in [1, N]."""
  n = int(keep.shape[1])
  example_level = all(getattr(c, "privacy_unit", "example") == "example"
                      for c in (sampler, path))
  batch_capacity = perf.batch_capacity
  if batch_capacity is None:
    return None
  if isinstance(batch_capacity, str):
    if not example_level:
      return None
    kept_max = int(np.max(np.sum(np.asarray(keep), axis=1)))
    m = min(int(keep.shape[0]), int(perf.max_chunk) if perf.max_chunk else DEFAULT_MAX_CHUNK)
    return batch_layout(n, float(cfg.sampling_prob), kept_max, m, num_params=num_params)
  if not example_level:
    raise ValueError("batch_capacity (the padded step) needs example-level sampling and "
                     "clipping; user-level DP-SGD clips each user's records together and "
                     "uses the full mask (batch_capacity=None or 'auto')")
  return min(int(batch_capacity), n)


def bytes_per_model(x, cfg, per_example_stats, observe_fn, path, params_shape,
                     num_fixed=0, rows=None):
  """A rough working-set estimate per model (rows: the padded step's K, else N)."""
  n, f = x.shape[0], int(np.prod(x.shape[1:]))
  r = n if rows is None else rows        # rows the clipping path sees per step
  p = sum(int(np.prod(l.shape)) for l in jax.tree.leaves(params_shape))
  per = 4 * (8 * p + 6 * n + f)          # params, optimiser state, noise, masks, logits
  if rows is not None:
    per += 4 * (rows * (f + 6))          # the gathered rows and their logits
  if path.per_example_grad_memory:
    per += 4 * 3 * r * p                 # per-example gradients
  if per_example_stats:
    per += 4 * 3 * n
  if observe_fn is not None:
    try:
      obs_size = sum(int(np.prod(l.shape)) for l in jax.tree.leaves(
          jax.eval_shape(observe_fn, params_shape)))
    except Exception:  # pylint: disable=broad-except
      obs_size = 1     # an observer that cannot be traced here fails in training instead
    per += 4 * cfg.num_steps * max(8, obs_size)
  per += 4 * 2 * num_fixed               # the fixed records' bits
  return per


def chunk_size(perf: config_lib.PerformanceFlags, num_models: int, bytes_per: int) -> int:
  """Models per chunk: within budget and max_chunk, balanced, a multiple of the devices."""
  m = num_models
  chunk = max(1, int(perf.memory_budget_bytes // bytes_per))
  chunk = min(chunk, int(perf.max_chunk) if perf.max_chunk is not None else DEFAULT_MAX_CHUNK)
  chunk = min(chunk, m)
  chunk = -(-m // -(-m // chunk))
  if perf.model_sharding is not None:
    ndev = len(perf.model_sharding.device_set)
    chunk = -(-chunk // ndev) * ndev   # whole models per device (padding repeats models)
  return chunk
