"""The model axis of `dpsgd.train_many` sharded over devices (and hosts).

Training M independent models is embarrassingly parallel: `train_many_sharded`
lays the per-model inputs (keys, membership masks, canary bits) out along a
one-dimensional `jax.sharding.Mesh` named "models" over `jax.devices()`, and the
same jitted vmap-over-models / scan-over-steps program is partitioned by XLA with
no communication (the records x, y are replicated). Model i still uses
`jax.random.split(key, M)[i]`, so the parameters equal those of an unsharded
`dpsgd.train_many` call (tested with 4 forced CPU devices).

Across hosts: call `jax.distributed.initialize()` first in every process and call
this function with identical arguments everywhere; `jax.devices()` then lists every
host's devices. The returned arrays are global (sharded); use
`jax.experimental.multihost_utils.process_allgather` to bring them to each host.
(Only single-host multi-device runs are tested here.)

Shape letters: M models, N records.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import dpsgd, models
  >>> cfg = dpsgd.DpSgdConfig(dataset_size=8, sampling_prob=0.5, num_steps=3,
  ...                         noise_multiplier=1.0)
  >>> out = train_many_sharded(jax.random.key(0), jnp.ones((8, 2)), jnp.ones((8,), int),
  ...                          jnp.ones((3, 8), bool), cfg, models.logistic_regression(2))
  >>> out.params["w"].shape
  (3, 2)
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dpjax import _validate
from dpjax import dpsgd
from dpjax import models as models_lib

MODEL_AXIS = "models"


def model_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A 1-D mesh named "models" over `devices` (default: all of jax.devices())."""
  if devices is not None and (isinstance(devices, (str, bytes))
                              or not hasattr(devices, "__iter__")):
    raise TypeError(f"devices must be a sequence of jax devices, got {devices!r:.80}")
  devs = list(jax.devices() if devices is None else devices)
  for d in devs:
    _validate.check_instance(d, jax.Device, "devices")
  if not devs:
    raise ValueError("devices must be a non-empty sequence of jax devices")
  return Mesh(np.asarray(devs), (MODEL_AXIS,))


def model_sharding(mesh: Mesh | None = None) -> NamedSharding:
  """Sharding of an array's leading (model) axis over the mesh's "models" axis."""
  mesh = model_mesh() if mesh is None else _validate.check_instance(mesh, Mesh, "mesh")
  if MODEL_AXIS not in mesh.axis_names:
    raise ValueError(f"mesh must have an axis named {MODEL_AXIS!r}, got {mesh.axis_names}")
  return NamedSharding(mesh, PartitionSpec(MODEL_AXIS))


def train_many_sharded(key: jax.Array, x_NxF, y_N, keep_MxN, cfg: dpsgd.DpSgdConfig,
                       model: models_lib.Model, *,
                       devices: Sequence[jax.Device] | None = None,
                       **kwargs) -> dpsgd.TrainResult:
  """`dpsgd.train_many` with the model axis sharded over `devices`.

  Args:
    key, x_NxF, y_N, keep_MxN, cfg, model: as in dpsgd.train_many.
    devices: devices to use (default: jax.devices(), all hosts).
    **kwargs: any other train_many keyword (observe_fn, per_example_stats,
      gradient_canary, canary_keep_M, memory_budget_bytes, ...).
  Returns:
    dpsgd.TrainResult whose arrays have a leading model axis of size M, equal to the
    unsharded train_many result.
  """
  if "model_sharding" in kwargs:
    raise ValueError("pass devices=, not model_sharding=, to train_many_sharded")
  sharding = model_sharding(model_mesh(devices))
  kwargs.setdefault("progress", True)
  return dpsgd.train_many(key, x_NxF, y_N, keep_MxN, cfg, model, model_sharding=sharding,
                          **kwargs)
