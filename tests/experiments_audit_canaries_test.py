"""Tests for experiments/audit_canaries.py at a shrunken scale (its equality with the main
audit's companion: tests/experiments_audit_test.py, slow)."""

import json
import tempfile

from absl.testing import absltest

from experiments import audit
from experiments import audit_canaries

_BASE = audit.AuditConfig(trials=8, epsilons=(8.0,), chunk_models=4, base_size=20,
                          num_steps=40, per_step=False)


class AuditCanariesTest(absltest.TestCase):

  def test_rows_table_and_record(self):
    with tempfile.TemporaryDirectory() as d:
      cfg = audit_canaries.CanariesConfig(trials=8, epsilons=(8.0,), canaries_per_run=3)
      out = audit_canaries.run(cfg, d, progress=False, quiet=True, base=_BASE)
      with open(out["path"]) as f:
        doc = json.load(f)
    (row,) = out["rows"]
    # 16 runs, 8 pairs, each canary IN in 2 * round(0.25 * 8) = 4 runs: 12 IN, 36 OUT trials
    self.assertEqual((row["white_box_trials_in"], row["white_box_trials_out"]), (12, 36))
    self.assertLessEqual(row["epsilon_lower_white_box"], row["epsilon_pld"])
    self.assertEqual(row["epsilon_lower_white_box"],
                     max(row["white_box_fixed_threshold"], row["white_box_held_out_threshold"]))
    self.assertEqual(doc["experiment"], "audit_canaries")
    self.assertEqual(doc["results"]["canaries_per_run"], 3)
    self.assertEqual(doc["flags"]["canaries_per_run"], 3)
    self.assertIn("3 gradient canaries per run", doc["tables"][0]["title"])
    # the claims' settings are the audit's (white-box only, no sigma = 0 row)
    sub = audit_canaries.audit_config(cfg, _BASE)
    self.assertEqual((sub.canaries_per_run, sub.threat_model, sub.no_noise, sub.per_step),
                     (3, "white_box", False, False))


if __name__ == "__main__":
  absltest.main()
