"""experiments/audit_digits.py on a tiny scale: record shape, bounds below the exact eps, seed."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from dpjax import accounting
from experiments import audit_digits
from tests import helpers


def _tiny(**kw):
  base = dict(seed=1, eps=(8.0,), runs=8, canaries=8, steps=3, mlp_hidden=(4,))
  base.update(kw)
  return audit_digits.AuditDigitsConfig(**base)


class AuditDigitsTest(absltest.TestCase):

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "runs"):
      _tiny(runs=2)
    with self.assertRaisesRegex(ValueError, "model"):
      _tiny(model="resnet")

  @pytest.mark.slow
  def test_run_small(self):
    cfg = _tiny()
    out = tempfile.mkdtemp()
    audit_digits.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "audit_digits")
    self.assertTrue(os.path.exists(os.path.join(out, "audit_digits.png")))
    (row,) = doc["results"]["per_epsilon"]
    exact = accounting.dpsgd_epsilon(row["noise_multiplier"], 0.1, 3, 1e-5, accountant="pld")
    self.assertAlmostEqual(row["exact_epsilon"], exact, places=6)
    self.assertLessEqual(abs(row["claimed_epsilon"] - 8.0), 0.01)
    self.assertEqual(row["white_box"]["num_in"], 8 * 8 // 2)
    self.assertEqual(row["black_box"]["num_in"], 4)
    for side in ("white_box", "black_box"):
      for v in row[side]["epsilon_lower"].values():
        self.assertLessEqual(v, row["exact_epsilon"])
      # a perfect adversary's bound with the same trials is the most any can certify
      self.assertLessEqual(row[side]["epsilon_lower"]["clopper_pearson"], row[side]["ceiling"])
    self.assertTrue(row["all_below_exact"])
    # the optimal adversary's expected bound is below the exact eps and the ceiling
    self.assertLessEqual(row["white_box"]["optimal_expected"], row["exact_epsilon"])
    self.assertLessEqual(row["white_box"]["optimal_expected"], row["white_box"]["ceiling"])
    out2 = tempfile.mkdtemp()
    audit_digits.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])

  @pytest.mark.slow
  def test_cnn_command_line(self):
    p = helpers.run_experiment("audit_digits", "--model", "cnn", "--eps", "8", "--runs", "4",
                               "--canaries", "4", "--steps", "2", "--cnn_channels", "2,2")
    self.assertEqual(p.returncode, 0, p.stderr)
    # Bad flag values: tests/experiments_import_test.py (_BAD_FLAGS).


if __name__ == "__main__":
  absltest.main()
