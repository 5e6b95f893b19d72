"""One process of tests/multiprocess_test.py: a sharded DP-SGD run over processes.

Usage: python -m tests.multiprocess_worker PROCESS_ID NUM_PROCESSES PORT OUT_DIR MODE

Connects to the coordinator on localhost:PORT (process 0 hosts it), trains the
problem of `problem()` with `parallel.train_many_sharded(..., gather=False)`, then
gathers the blocks with `parallel.gather_models`, and writes OUT_DIR/process{P}.npz
with this process's block, its model indices and the gathered result. MODE
"train" is the run above; MODE "mismatch" gives process 1 a different keep_MxN,
which every process must refuse (it writes the error text instead).
"""

import os
import sys

import jax
import numpy as np


def problem():
  """(key, x_NxF, y_N, keep_MxN, cfg, model, kwargs): M = 5 logistic regressions,
  N = 24, T = 8, one fixed-gradient record (gradient canary) whose keep bits have a
  model axis, per-record stats, the parameters' moving average (cfg.ema_decay).
  Built with NumPy so every process holds identical bytes."""
  from dpjax import dpsgd, models  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(7)
  n, f, m = 24, 3, 5
  x = rng.normal(size=(n, f)).astype(np.float32)
  y = (x[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(np.int32)
  keep = rng.random((m, n)) < 0.7
  cfg = dpsgd.DpSgdConfig(dataset_size=16, sampling_prob=0.4, num_steps=8,
                          noise_multiplier=1.0, learning_rate=0.5, ema_decay=0.9)
  model = models.logistic_regression(f, l2=0.01)
  canary = {"w": np.asarray([[0.3, -0.2, 0.1]], np.float32)}
  kwargs = dict(per_example_stats=True,
                fixed_gradients=dpsgd.FixedGradients(canary,
                                                     (np.arange(m) % 2 == 0)[:, None]),
                perf=dpsgd.PerformanceFlags(progress=False))
  return jax.random.key(11), x, y, keep, cfg, model, kwargs


def _flat(result, prefix):
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(result._asdict())[0]:
    out[prefix + jax.tree_util.keystr(path)] = np.asarray(leaf)
  return out


def main(argv):
  pid, nproc, port, out_dir, mode = int(argv[1]), int(argv[2]), int(argv[3]), argv[4], argv[5]
  jax.config.update("jax_numpy_rank_promotion", "raise")
  jax.distributed.initialize(f"localhost:{port}", num_processes=nproc, process_id=pid,
                             initialization_timeout=60)
  from dpjax import parallel  # pylint: disable=g-import-not-at-top
  key, x, y, keep, cfg, model, kwargs = problem()
  info = {"process_count": np.int32(jax.process_count()),
          "device_count": np.int32(jax.device_count()),
          "local_device_count": np.int32(jax.local_device_count())}
  path = os.path.join(out_dir, f"process{pid}.npz")
  if mode == "mismatch":
    if pid == 1:
      keep = keep.copy()
      keep[0, 0] = not keep[0, 0]
    try:
      parallel.train_many_sharded(key, x, y, keep, cfg, model, **kwargs)
      error = ""
    except ValueError as e:
      error = str(e)
    np.savez(path, error=np.asarray(error), **info)
    return
  block = parallel.train_many_sharded(key, x, y, keep, cfg, model, gather=False, **kwargs)
  leaf = jax.tree.leaves(block.params)[0]
  info["block_devices"] = np.int32(len(leaf.sharding.device_set))
  gathered = parallel.gather_models(block, keep.shape[0])
  np.savez(path, models=parallel.process_models(keep.shape[0]), **info,
           **_flat(block, "block"), **_flat(gathered, "gathered"))


if __name__ == "__main__":
  main(sys.argv)
