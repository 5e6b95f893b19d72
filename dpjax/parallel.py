"""DP-SGD's model axis, and one model's batch axis, sharded over devices and processes.

`train_many_sharded` shards the model axis of `dpsgd.train_many` over a 1-D mesh
"models" (no communication). With P processes, process p trains the block
`process_models(M)` of S = ceil(M / P) models and `gather_models` all-gathers the blocks;
inputs are fingerprinted and compared first. Model i uses `split(key, M)[i]`, equal to an
unsharded run up to rounding. `train_batch_sharded` shards one model's records ("batch").
Multi-host: call `jax.distributed.initialize()`, then `train_many_sharded` with the same
arguments in every process.

Shape letters: M models, N records, S models per process, D devices.

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

import dataclasses
import zlib
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dpjax import _validate
from dpjax import dpsgd
from dpjax import models as models_lib

MODEL_AXIS = "models"
BATCH_AXIS = "batch"

def _device_list(devices, default) -> list:
  """devices (a non-empty sequence of jax devices) as a list; `default` when None."""
  if devices is not None and (isinstance(devices, (str, bytes))
                              or not hasattr(devices, "__iter__")):
    raise TypeError(f"devices must be a sequence of jax devices, got {devices!r:.80}")
  devs = list(default if devices is None else devices)
  for d in devs:
    _validate.check_instance(d, jax.Device, "devices")
  if not devs:
    raise ValueError("devices must be a non-empty sequence of jax devices")
  if len(set(devs)) != len(devs):
    raise ValueError("devices must not repeat a device")
  return devs


def model_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A 1-D mesh named "models" over `devices` (default: all of jax.devices())."""
  return Mesh(np.asarray(_device_list(devices, jax.devices())), (MODEL_AXIS,))


def batch_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A 1-D mesh named "batch" over `devices` (default: all of jax.devices())."""
  return Mesh(np.asarray(_device_list(devices, jax.devices())), (BATCH_AXIS,))


def model_sharding(mesh: Mesh | None = None) -> NamedSharding:
  """Sharding of an array's leading (model) axis over the mesh's "models" axis."""
  mesh = model_mesh() if mesh is None else _validate.check_instance(mesh, Mesh, "mesh")
  if MODEL_AXIS not in mesh.axis_names:
    raise ValueError(f"mesh must have an axis named {MODEL_AXIS!r}, got {mesh.axis_names}")
  return NamedSharding(mesh, PartitionSpec(MODEL_AXIS))


def process_models(num_models: int) -> np.ndarray:
  """The model indices int64[S] this process trains: (p S, ..., p S + S - 1) mod M, S =
  ceil(M / P) (the last block wraps so all programs share one shape).

  Examples:
    >>> process_models(5)   # one process
    array([0, 1, 2, 3, 4])
  """
  m = _validate.check_size(num_models, "num_models", bytes_per_unit=16)   # two int64[S]
  per = -(-m // jax.process_count())
  p = jax.process_index()
  return np.arange(p * per, (p + 1) * per) % m


def gather_models(tree: Any, num_models: int) -> Any:
  """Every process's block [S, ...] (rows `process_models(M)`) as leaves [M, ...] everywhere.

  A collective: every process calls it with the same structure.

  Examples:
    >>> gather_models({"w": jnp.arange(6.0).reshape(3, 2)}, 3)["w"].shape
    (3, 2)
  """
  m = _validate.check_int(num_models, "num_models")
  per = -(-m // jax.process_count())
  for leaf in jax.tree.leaves(tree):
    shape = np.shape(leaf)
    if not shape or shape[0] != per:
      raise ValueError(f"tree must hold arrays with leading axis S = ceil(num_models / P) = "
                       f"{per} (num_models = {m}, P = {jax.process_count()}), got a leaf of "
                       f"shape {shape}")
  if jax.process_count() > 1:
    tree = multihost_utils.process_allgather(tree, tiled=True)
  return jax.tree.map(lambda a: jnp.asarray(a[:m]), tree)


# train_many keywords holding data that changes the result (not functions), included
# in the fingerprint (cfg, with ema_decay, is fingerprinted through its repr).
_DATA_KWARGS = ("init_params", "fixed_gradients")


def _perf(kwargs) -> dpsgd.PerformanceFlags:
  """The `perf` keyword of train_many (its default when absent), checked."""
  return _validate.check_instance(kwargs.get("perf", dpsgd.PerformanceFlags()),
                                  dpsgd.PerformanceFlags, "perf")


def _fingerprint(*trees) -> np.ndarray:
  """uint32[len(trees)]: CRC-32 of each pytree's structure, dtypes, shapes and bytes."""
  out = []
  for tree in trees:
    leaves, treedef = jax.tree.flatten(tree)
    h = zlib.crc32(str(treedef).encode())
    for a in leaves:
      a = np.ascontiguousarray(a)
      h = zlib.crc32(a.tobytes(), zlib.crc32(f"{a.dtype}{a.shape}".encode(), h))
    out.append(h)
  return np.asarray(out, np.uint32)


def _check_same_inputs(keys_M, x_NxF, y_N, keep_MxN, cfg, kwargs) -> None:
  """Raises ValueError on every process if the processes' inputs differ."""
  local = _fingerprint(np.asarray(jax.random.key_data(keys_M)), np.asarray(x_NxF),
                       np.asarray(y_N), np.asarray(keep_MxN),
                       np.frombuffer(repr(cfg).encode(), np.uint8),
                       *[kwargs.get(k) for k in _DATA_KWARGS],
                       getattr(kwargs.get("sampler"), "user_ids_N", None),
                       np.frombuffer(repr(_perf(kwargs).batch_capacity).encode(), np.uint8))
  every = np.asarray(multihost_utils.process_allgather(local))
  if not np.all(every == every[0]):
    raise ValueError("train_many_sharded must be called with identical key, x_NxF, y_N, "
                     "keep_MxN, cfg and data keywords (" + ", ".join(_DATA_KWARGS) +
                     ") in every process; the inputs' fingerprints differ across "
                     f"processes:\n{every}")


def train_many_sharded(key: jax.Array, x_NxF, y_N, keep_MxN, cfg: dpsgd.DpSgdConfig,
                       model: models_lib.Model, *,
                       devices: Sequence[jax.Device] | None = None,
                       gather: bool = True,
                       **kwargs) -> dpsgd.TrainResult:
  """`dpsgd.train_many` with the model axis sharded over devices and processes.

  devices: this process's devices (default jax.local_devices()). gather=False returns
  only this process's S rows `process_models(M)`. Keys, records, masks, cfg, data
  keywords and perf.batch_capacity are compared across processes (functions such as
  observe_fn are not). Other arguments as in train_many.
  """
  perf = _perf(kwargs)
  if perf.model_sharding is not None:
    raise ValueError("pass devices=, not perf.model_sharding, to train_many_sharded")
  _validate.check_instance(gather, bool, "gather")
  if jax.process_count() == 1:
    kwargs["perf"] = dataclasses.replace(perf, model_sharding=model_sharding(model_mesh(devices)))
    return dpsgd.train_many(key, x_NxF, y_N, keep_MxN, cfg, model, **kwargs)
  local = _device_list(devices, jax.local_devices())
  for d in local:
    if d.process_index != jax.process_index():
      raise ValueError(f"devices must be this process's devices (jax.local_devices()); "
                       f"{d} belongs to process {d.process_index}")
  m = _validate.check_shape(keep_MxN, "keep_MxN", ndim=2)[0]
  if m < 1:
    raise ValueError("keep_MxN must have at least one row (M >= 1)")
  fixed = kwargs.get("fixed_gradients")
  if fixed is not None:
    _validate.check_instance(fixed, dpsgd.FixedGradients, "fixed_gradients")
    if np.shape(fixed.keep_MxK)[:1] != (m,):
      raise ValueError(f"fixed_gradients.keep_MxK must have leading axis M = {m}, got shape "
                       f"{np.shape(fixed.keep_MxK)}")
  keys = dpsgd.model_keys(key, m)
  _check_same_inputs(keys, x_NxF, y_N, keep_MxN, cfg, kwargs)
  idx = process_models(m)
  if fixed is not None:   # the records' bits have a model axis: this process's block
    kwargs["fixed_gradients"] = fixed._replace(keep_MxK=np.asarray(fixed.keep_MxK)[idx])
  kwargs["perf"] = dataclasses.replace(perf, model_sharding=model_sharding(model_mesh(local)))
  out = dpsgd.train_many(keys[idx], x_NxF, y_N, np.asarray(keep_MxN)[idx], cfg, model, **kwargs)
  return gather_models(out, m) if gather else out


def train_batch_sharded(key: jax.Array, x_NxF, y_N, keep_MxN, cfg: dpsgd.DpSgdConfig,
                        model: models_lib.Model, *,
                        devices: Sequence[jax.Device] | None = None,
                        **kwargs) -> dpsgd.TrainResult:
  """`dpsgd.train_many` with the record axis sharded over D devices (one process only).

  N must be a multiple of D; XLA all-reduces the clipped sum (equal to the unsharded run up
  to summation order). Only the full-mask step (`perf.batch_capacity=None`) is split.
  """
  if _perf(kwargs).model_sharding is not None:
    raise ValueError("train_batch_sharded shards the record axis; perf.model_sharding is "
                     "train_many_sharded's")
  if jax.process_count() > 1:
    raise ValueError("train_batch_sharded runs in one process (train_many reads its "
                     "records and results on the host); with several processes use "
                     "train_many_sharded")
  mesh = batch_mesh(devices)
  d = mesh.size
  sx = _validate.check_shape(x_NxF, "x_NxF")
  if len(sx) < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {sx}")
  n = sx[0]
  _validate.check_shape(y_N, "y_N", shape=(n,))
  _validate.check_shape(keep_MxN, "keep_MxN", shape=(None, n))
  for name, v in (("x_NxF", x_NxF), ("y_N", y_N), ("keep_MxN", keep_MxN)):
    dtype = np.asarray(v).dtype if getattr(v, "dtype", None) is None else v.dtype
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)
            or dtype == np.bool_):
      raise ValueError(f"{name} must be an array of real numbers, got dtype {dtype}")
  if n % d:
    raise ValueError(f"x_NxF's N = {n} records must be a multiple of the {d} devices "
                     "(padding would change the Poisson draws, which depend on N)")
  rows = NamedSharding(mesh, PartitionSpec(BATCH_AXIS))
  x = jax.device_put(jnp.asarray(x_NxF, jnp.float32), rows)
  y = jax.device_put(jnp.asarray(y_N), rows)
  keep = jax.device_put(jnp.asarray(keep_MxN), NamedSharding(mesh, PartitionSpec(None, BATCH_AXIS)))
  return dpsgd.train_many(key, x, y, keep, cfg, model, **kwargs)
