"""experiments/audit_bugs.py: its config and a small run (the probe worlds: tests/probe_test.py)."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import audit_bugs


class ConfigTest(absltest.TestCase):

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "trials"):
      audit_bugs.AuditBugsConfig(trials=1)
    with self.assertRaisesRegex(ValueError, "cases"):
      audit_bugs.AuditBugsConfig(cases=("nope",))


class RunTest(absltest.TestCase):

  @pytest.mark.slow
  def test_run_small(self):
    cfg = audit_bugs.AuditBugsConfig(
        trials=100, epsilons=(1.0,), noise_coords=50,
        cases=("correct_q0.5_n4", "floored_expected_batch", "floored_expected_batch_public",
               "realised_batch_denominator"))
    out = tempfile.mkdtemp()
    audit_bugs.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertTrue(os.path.exists(os.path.join(out, "audit_bugs.png")))
    rows = {r["case"].split(" (")[0] + ("_public" if "claimed n" in r["case"] else ""): r
            for r in doc["results"]["rows"]}
    for r in doc["results"]["rows"]:
      for b in r["bounds"].values():
        self.assertLessEqual(b["epsilon_lower"], r["ceiling"] + 1e-9)
      if r["true_epsilon_kind"] == "exact":            # correct, or a public divisor
        self.assertLessEqual(r["epsilon_lower"], r["true_epsilon"])
        self.assertFalse(r["caught"])
    self.assertTrue(rows["floored_expected_batch"]["caught"])
    self.assertTrue(rows["realised_batch_denominator"]["caught"])
    self.assertIn("scale_sum", rows["floored_expected_batch"]["caught_by"])
    out2 = tempfile.mkdtemp()
    audit_bugs.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])


if __name__ == "__main__":
  absltest.main()
