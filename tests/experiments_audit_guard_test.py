"""experiments/audit_guard.py end to end at a small scale (one regression)."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import audit_guard


class AuditGuardExperimentTest(absltest.TestCase):

  @pytest.mark.slow
  def test_small_run_passes_the_engine_and_catches_the_bug(self):
    cfg = audit_guard.AuditGuardConfig(runs=64, canaries=512, bugs=("clip_four_c",))
    with tempfile.TemporaryDirectory() as out:
      res = audit_guard.run(cfg, out, progress=False, quiet=True)
      with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
      self.assertTrue(os.path.exists(os.path.join(out, "audit_guard.png")))
    rows = res["record"]["rows"]
    self.assertEqual([r["engine"] for r in rows], ["engine", "clip_four_c"])
    self.assertFalse(rows[0]["falsified"])
    self.assertLessEqual(rows[0]["epsilon_lower"], rows[0]["exact_epsilon"])
    self.assertTrue(rows[1]["falsified"])
    self.assertLessEqual(rows[1]["epsilon_lower"], rows[1]["true_epsilon"])
    self.assertEqual(doc["flags"]["canaries"], 512)

  def test_rejects_bad_flags(self):
    with self.assertRaises(ValueError):
      audit_guard.AuditGuardConfig(bugs=("no_such_bug",))
    with self.assertRaises(ValueError):
      audit_guard.AuditGuardConfig(runs=1)


if __name__ == "__main__":
  absltest.main()
