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


class ChunkIntegrityTest(absltest.TestCase):
  """Every fault class of a stored run: never used, recomputed or refused by name."""

  def _store(self, d=None, manifest=None, **kw):
    if d is None:
      t = tempfile.TemporaryDirectory()
      self.addCleanup(t.cleanup)
      d = t.name
    return store.ChunkStore(d, manifest or {"seed": 0}, **kw)

  def _two_chunks(self):
    s = self._store()
    ids = {"a": {"setting": "eps1", "chunk": 0}, "b": {"setting": "eps1", "chunk": 1}}
    s.save("a", identity=ids["a"], x=np.arange(1000.0))
    s.save("b", identity=ids["b"], x=np.arange(1000.0) + 1)
    return s, ids

  def _resumed(self, s, **kw):
    return store.ChunkStore(s.directory, s.manifest, resume=True, **kw)

  def test_valid_chunks_pass(self):
    s, ids = self._two_chunks()
    r = self._resumed(s)
    self.assertEqual(r.missing(["a", "b", "c"], ids), ["c"])
    np.testing.assert_array_equal(r.load("b", ids["b"])["x"], np.arange(1000.0) + 1)

  def _fault(self, damage, reason):
    s, ids = self._two_chunks()
    damage(s)
    r = self._resumed(s)
    with self.assertWarnsRegex(store.InvalidChunkWarning, "b.npz: .*" + reason):
      self.assertEqual(r.missing(["a", "b"], ids), ["b"])
    self.assertNotIn("b", r)                            # deleted: it will be recomputed
    s, ids = self._two_chunks()
    damage(s)
    r = self._resumed(s, on_invalid="refuse")
    with self.assertRaisesRegex(store.StoreError, "b.npz: .*" + reason):
      r.missing(["a", "b"], ids)
    with self.assertRaisesRegex(store.StoreError, "b.npz: .*" + reason):
      r.load("b", ids["b"])

  def test_truncated_chunk(self):
    def cut(s):
      p = s.path("b")
      data = open(p, "rb").read()
      open(p, "wb").write(data[:len(data) // 2])
    self._fault(cut, "unreadable")

  def test_bit_flipped_chunk(self):
    def flip(s):
      p = s.path("b")
      data = bytearray(open(p, "rb").read())
      # a byte inside the stored array x (uncompressed .npz): the checksum catches it
      data[len(data) // 3] ^= 0x10
      open(p, "wb").write(bytes(data))
    self._fault(flip, "checksum|unreadable")

  def test_swapped_chunk(self):
    def swap(s):
      os.replace(s.path("a"), s.path("b"))
      s.save("a", identity={"setting": "eps1", "chunk": 0}, x=np.arange(1000.0))
    self._fault(swap, "chunk 'a' of this run")

  def test_chunk_of_another_run(self):
    other = self._store(manifest={"seed": 1})
    other.save("b", identity={"setting": "eps1", "chunk": 1}, x=np.arange(1000.0) + 1)

    def copy(s):
      open(s.path("b"), "wb").write(open(other.path("b"), "rb").read())
    self._fault(copy, "another run")

  def test_chunk_of_another_place_in_this_run(self):
    def relabel(s):
      s.save("b", identity={"setting": "eps2", "chunk": 1}, x=np.arange(1000.0) + 1)
    self._fault(relabel, "identity")

  def test_chunk_without_identity(self):
    def legacy(s):
      os.remove(s.path("b"))
      np.savez(s.path("b"), x=np.arange(1000.0) + 1)
    self._fault(legacy, "no identity")

  def test_corrupt_manifest_is_one_error(self):
    s, _ = self._two_chunks()
    with open(os.path.join(s.directory, store.MANIFEST), "w") as f:
      f.write('{"seed": 0')
    with self.assertRaisesRegex(store.StoreError, "manifest.json cannot be read"):
      self._resumed(s)

  def test_unwritable_directory_is_one_error(self):
    t = tempfile.TemporaryDirectory()
    self.addCleanup(t.cleanup)
    blocker = os.path.join(t.name, "file")
    open(blocker, "w").close()
    with self.assertRaisesRegex(store.StoreError, "cannot create"):
      store.ChunkStore(os.path.join(blocker, "chunks"), {"seed": 0})

  def test_full_disk_is_one_error_and_leaves_nothing(self):
    s = self._store()
    real = np.savez

    def full(f, **arrays):
      real(f, **arrays)
      raise OSError(28, "No space left on device")
    np.savez = full
    try:
      with self.assertRaisesRegex(store.StoreError, "cannot write .*a.npz: No space"):
        s.save("a", x=np.ones(3))
    finally:
      np.savez = real
    self.assertEqual([f for f in os.listdir(s.directory) if f != store.MANIFEST], [])
    s.save("a", x=np.ones(3))                             # after space is freed: resumes
    self.assertEqual(s.missing(["a"]), [])

  def test_reserved_names_and_bad_policy(self):
    s = self._store()
    with self.assertRaisesRegex(ValueError, "reserved"):
      s.save("a", __checksum__=np.ones(1))
    with self.assertRaisesRegex(ValueError, "on_invalid"):
      self._store(on_invalid="ignore")
    with self.assertRaisesRegex(TypeError, "resume"):
      self._store(resume="no")
