"""Tests for experiments/audit.py at a shrunken scale: results, resume after interruption."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from absl.testing import absltest

from dpjax.audit import stats
from experiments import audit

_SMALL = dict(seed=0, trials=8, epsilons=(8.0,), chunk_models=4, base_size=20, num_steps=40,
              progress=False, quiet=True)


class AuditExperimentTest(absltest.TestCase):

  def _tmp(self):
    d = tempfile.TemporaryDirectory()
    self.addCleanup(d.cleanup)
    return d.name

  def test_resume_after_interruption_loses_and_repeats_nothing(self):
    d1 = self._tmp()
    d2 = self._tmp()
    # 2 settings (eps = 8, no noise) x 16 models / 4 per chunk = 8 chunks.
    part = audit.run(out_dir=d1, max_new_chunks=3, **_SMALL)
    self.assertFalse(part["complete"])
    self.assertEqual(part["chunks_trained"], 3)
    self.assertLen([f for f in os.listdir(os.path.join(d1, "chunks")) if f.endswith(".npz")], 3)
    rest = audit.run(out_dir=d1, resume=True, **_SMALL)
    self.assertTrue(rest["complete"])
    self.assertEqual(rest["chunks_trained"], 5)          # only the missing ones
    fresh = audit.run(out_dir=d2, **_SMALL)
    self.assertEqual(fresh["chunks_trained"], 8)
    with open(rest["path"]) as f:
      a = json.load(f)["results"]
    with open(fresh["path"]) as f:
      b = json.load(f)["results"]
    self.assertEqual(a, b)                                # same seed => same numbers
    with self.assertRaisesRegex(ValueError, "resume"):    # never mix runs
      audit.run(out_dir=d1, resume=True, **{**_SMALL, "trials": 12})
    self._check_rows(fresh, d2)

  @pytest.mark.slow
  def test_resume_after_kill_loses_and_repeats_nothing(self):
    d1 = self._tmp()
    d2 = self._tmp()
    # 2 settings (eps = 8, no noise) x 16 models / 4 per chunk = 8 chunks. Start the
    # run in a subprocess and SIGKILL it as soon as its first chunk is on disk (the
    # second setting still has to compile, so the kill always lands half-way).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("from experiments import audit; audit.run(out_dir=%r, **%r)" % (d1, _SMALL))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=root,
                            env={**os.environ, "PYTHONPATH": root},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chunks = os.path.join(d1, "chunks")
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
      if os.path.isdir(chunks) and any(f.endswith("_c0000.npz") for f in os.listdir(chunks)):
        break
      time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    self.assertEqual(proc.returncode, -signal.SIGKILL)   # killed, not finished
    done = [f for f in os.listdir(chunks) if f.endswith(".npz")]
    self.assertBetween(len(done), 1, 7)
    self.assertFalse(any(".tmp" in f for f in done))      # atomic writes: no half chunks
    self.assertFalse(os.path.exists(os.path.join(d1, "results.json")))
    # a time-boxed resume trains one more chunk and stops, incomplete
    part = audit.run(out_dir=d1, resume=True, max_new_chunks=1, **_SMALL)
    self.assertFalse(part["complete"])
    self.assertEqual(part["chunks_trained"], 1)
    rest = audit.run(out_dir=d1, resume=True, **_SMALL)
    self.assertTrue(rest["complete"])
    self.assertEqual(rest["chunks_trained"], 8 - len(done) - 1)   # only the missing ones
    fresh = audit.run(out_dir=d2, **_SMALL)
    self.assertEqual(fresh["chunks_trained"], 8)
    with open(rest["path"]) as f:
      a = json.load(f)["results"]
    with open(fresh["path"]) as f:
      b = json.load(f)["results"]
    self.assertEqual(a, b)                                # nothing lost or double-counted

  def _check_rows(self, out, d):
    rows = {r["setting"]: r for r in out["rows"]}
    for r in rows.values():
      for k in ("epsilon", "epsilon_lower_black_box", "epsilon_lower_white_box", "ceiling",
                "trials", "variant"):
        self.assertIn(k, r)
      self.assertEqual(r["trials"], 8)
      self.assertEqual(r["variant"], "correct")
      self.assertAlmostEqual(r["ceiling"], stats.perfect_attack_ceiling(8, 1e-5))
    # without noise the white-box adversary never errs (P(canary never sampled in
    # 40 steps) = 0.8^40 ~ 1e-4), so it reaches its procedure's ceiling
    nn = rows["no_noise"]
    self.assertAlmostEqual(nn["epsilon_lower_white_box"], nn["ceiling_white_box"], places=9)
    e8 = rows["eps8"]
    self.assertLessEqual(e8["epsilon_lower_white_box"], e8["epsilon_pld"])
    self.assertTrue(os.path.exists(os.path.join(d, "audit_bounds.png")))
    self.assertTrue(os.path.exists(os.path.join(d, "audit_roc.png")))

  def test_threat_model_black_box_only(self):
    d = self._tmp()
    out = audit.run(out_dir=d, threat_model="black_box", include_no_noise=False, **_SMALL)
    self.assertIsNone(out["rows"][0]["epsilon_lower_white_box"])
    self.assertIsNotNone(out["rows"][0]["epsilon_lower_black_box"])

  def test_validation(self):
    d = self._tmp()
    with self.assertRaisesRegex(ValueError, "trials"):
      audit.run(out_dir=d, **{**_SMALL, "trials": 7})
    with self.assertRaisesRegex(ValueError, "variant"):
      audit.run(out_dir=d, variant="bogus", **_SMALL)


if __name__ == "__main__":
  absltest.main()
