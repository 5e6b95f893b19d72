"""Tests for dpjax.audit.store: manifest, atomic chunks, resume."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl.testing import absltest

from dpjax.audit import store

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ChunkStoreTest(absltest.TestCase):

  def _dir(self):
    d = tempfile.TemporaryDirectory()
    self.addCleanup(d.cleanup)
    return d.name

  def test_save_load_round_trip(self):
    s = store.ChunkStore(self._dir(), {"seed": 0})
    arrays = {"bits": np.array([True, False]), "x": np.arange(6.0).reshape(2, 3),
              "i": np.int64(7)}
    s.save("eps1_c0000", **arrays)
    got = s.load("eps1_c0000")
    self.assertEqual(set(got), set(arrays))
    for k, v in arrays.items():
      np.testing.assert_array_equal(got[k], v)
      self.assertEqual(got[k].dtype, np.asarray(v).dtype)
    self.assertIn("eps1_c0000", s)
    self.assertNotIn("eps1_c0001", s)
    self.assertEqual(s.missing(["eps1_c0001", "eps1_c0000", "eps2_c0000"]),
                     ["eps1_c0001", "eps2_c0000"])
    self.assertEqual(s.names(), ["eps1_c0000"])
    with self.assertRaises(KeyError):
      s.load("eps1_c0001")

  def test_manifest_written_and_must_match_on_resume(self):
    d = self._dir()
    manifest = {"seed": 0, "settings": [{"eps": 1.0}, {"eps": float("inf")}],
                "sizes": (4, np.int64(8))}
    s = store.ChunkStore(d, manifest)
    s.save("a", x=np.ones(2))
    with open(os.path.join(d, store.MANIFEST)) as f:
      self.assertEqual(json.load(f), {"seed": 0, "settings": [{"eps": 1.0}, {"eps": "inf"}],
                                      "sizes": [4, 8]})
    # resuming with the same manifest keeps the chunk (NumPy vs Python values alike)
    s2 = store.ChunkStore(d, {**manifest, "sizes": [4, 8]}, resume=True)
    self.assertEqual(s2.names(), ["a"])
    # a different manifest is refused, naming what differs; nothing is deleted
    with self.assertRaisesRegex(ValueError, r"resume.*seed"):
      store.ChunkStore(d, {**manifest, "seed": 1}, resume=True)
    self.assertEqual(s2.names(), ["a"])
    # without resume the store starts empty
    s3 = store.ChunkStore(d, {**manifest, "seed": 1})
    self.assertEqual(s3.names(), [])

  def test_resume_without_manifest_starts_empty_and_keeps_other_files(self):
    d = self._dir()
    np.savez(os.path.join(d, "stale.npz"), x=np.ones(1))
    with open(os.path.join(d, "notes.txt"), "w") as f:
      f.write("not a chunk")
    s = store.ChunkStore(d, {"seed": 0}, resume=True)
    self.assertEqual(s.names(), [])
    self.assertTrue(os.path.exists(os.path.join(d, "notes.txt")))

  def test_atomic_write_survives_a_kill(self):
    # A child process saves large chunks in a loop and is SIGKILLed mid-way: every
    # chunk left under its final name loads completely, and a resumed store sees
    # exactly those.
    d = self._dir()
    code = ("import numpy as np; from dpjax.audit import store\n"
            f"s = store.ChunkStore({d!r}, {{'seed': 0}})\n"
            "x = np.arange(4_000_000, dtype=np.float64)\n"
            "for c in range(1000):\n"
            "  s.save(f'c{c:04d}', x=x + c)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=_ROOT,
                            env={**os.environ, "PYTHONPATH": _ROOT},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
      if os.path.exists(os.path.join(d, "c0002.npz")):
        break
      time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    s = store.ChunkStore(d, {"seed": 0}, resume=True)
    names = s.names()
    self.assertGreaterEqual(len(names), 2)
    for n in names:
      x = s.load(n)["x"]
      self.assertEqual(x.shape, (4_000_000,))
      self.assertEqual(float(x[-1]), 3_999_999.0 + int(n[1:]))
    # a fresh store removes both finished chunks and any temporary leftovers
    store.ChunkStore(d, {"seed": 0})
    self.assertEqual([f for f in os.listdir(d) if f != store.MANIFEST], [])

  def test_validation(self):
    d = self._dir()
    with self.assertRaisesRegex(ValueError, "manifest"):
      store.ChunkStore(d, [1, 2])
    with self.assertRaisesRegex(ValueError, "manifest values"):
      store.ChunkStore(d, {"f": object()})
    s = store.ChunkStore(d, {})
    for bad in ("../x", "a/b", "", 3):
      with self.subTest(bad):
        with self.assertRaisesRegex(ValueError, "name"):
          s.save(bad, x=np.ones(1))
    with self.assertRaisesRegex(ValueError, "at least one array"):
      s.save("a")
    with self.assertRaisesRegex(ValueError, "dtype object"):
      s.save("a", x=np.array([{}], dtype=object))


if __name__ == "__main__":
  absltest.main()
