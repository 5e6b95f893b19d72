"""dpjax.parallel across processes: two local CPU processes joined by jax.distributed.

Each test starts two worker processes (tests/multiprocess_worker.py), each with two
forced CPU devices, connected through a coordinator on a free localhost port. The
sharded many-model run must equal the single-process `dpsgd.train_many` run of the
same problem (computed here): sample counts, flags and step indices exactly;
parameters and norm sums to 1e-5 absolute + 1e-6 relative, because each model's
arithmetic is the same but runs in a vmap of another batch size (3 models padded
to 4 per process against 5), which XLA may vectorise with another float rounding
(on this CPU they come out bit-identical). The gathered results must be
bit-identical on both processes (the gather only moves data). A second test (slow)
gives the processes different inputs, which every process must refuse.
"""

import os
import socket
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
from absl.testing import absltest
import pytest

from dpjax import dpsgd
from tests import multiprocess_worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TIMEOUT_S = 300      # all workers together (minutes of wall time on a loaded machine)


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _run_workers(mode: str, out_dir: str, num_processes: int = 2):
  """Starts the workers, waits (with a timeout), returns the npz of each process."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                      " --xla_force_host_platform_device_count=2").strip()
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
  port = _free_port()
  logs = [os.path.join(out_dir, f"log{p}.txt") for p in range(num_processes)]
  procs = []
  deadline = time.monotonic() + _TIMEOUT_S
  try:
    for p in range(num_processes):
      with open(logs[p], "w") as log:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.multiprocess_worker", str(p), str(num_processes),
             str(port), out_dir, mode], cwd=_ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT))
    # One deadline for all; a worker that fails stops the others (which would
    # otherwise wait for it at the next collective until their own timeouts).
    while any(p.poll() is None for p in procs):
      if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
        break
      time.sleep(0.1)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait()
  timed_out = time.monotonic() > deadline
  failed = []
  for i, (p, log) in enumerate(zip(procs, logs)):
    if p.returncode != 0:
      with open(log) as f:
        failed.append(f"worker {i} exited with {p.returncode} (-9: stopped here):\n"
                      f"{f.read()[-3000:]}")
  assert not failed, (f"timed out after {_TIMEOUT_S} s; " if timed_out else "") + \
      "\n".join(failed)
  return [dict(np.load(os.path.join(out_dir, f"process{p}.npz")))
          for p in range(num_processes)]


class MultiprocessTest(absltest.TestCase):

  def test_two_processes_equal_single_process(self):
    with tempfile.TemporaryDirectory() as out_dir:
      res = _run_workers("train", out_dir)
    key, x, y, keep, cfg, model, kwargs = multiprocess_worker.problem()
    ref = dpsgd.train_many(key, x, y, keep, cfg, model, **kwargs)
    ref_flat = multiprocess_worker._flat(ref, "")  # pylint: disable=protected-access
    m = keep.shape[0]
    self.assertGreater(float(np.max(np.abs(ref.params["w"]))), 1e-2)   # models moved
    for p, r in enumerate(res):
      self.assertEqual(int(r["process_count"]), 2)
      self.assertEqual(int(r["device_count"]), 4)
      self.assertEqual(int(r["local_device_count"]), 2)
      self.assertEqual(int(r["block_devices"]), 2)      # a block uses both local devices
      # Blocks of S = ceil(5 / 2) = 3: models 0-2 and 3, 4, 0 (wrapping round).
      np.testing.assert_array_equal(r["models"], np.arange(3 * p, 3 * p + 3) % m)
      for name, want in ref_flat.items():
        for prefix, rows in (("gathered", np.arange(m)), ("block", r["models"])):
          got = r[prefix + name]
          self.assertEqual(got.shape, want[rows].shape, prefix + name)
          if np.issubdtype(got.dtype, np.floating) and "times_" not in name:
            np.testing.assert_allclose(got, want[rows], rtol=1e-6, atol=1e-5,
                                       err_msg=prefix + name)
          else:   # counts of 0/1 weights (exact in float32), flags, step indices
            np.testing.assert_array_equal(got, want[rows], err_msg=prefix + name)
    for name in res[0]:
      if name.startswith("gathered"):
        np.testing.assert_array_equal(res[0][name], res[1][name], err_msg=name)

  @pytest.mark.slow
  def test_different_inputs_are_refused_on_every_process(self):
    with tempfile.TemporaryDirectory() as out_dir:
      res = _run_workers("mismatch", out_dir)
    for r in res:
      self.assertIn("fingerprints differ across processes", str(r["error"]))


if __name__ == "__main__":
  absltest.main()
