"""experiments/one_run_dpsgd.py on a tiny scale: one run per eps, bounds below exact and max."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from dpjax.audit import one_run
from experiments import one_run_dpsgd
from tests import helpers


class OneRunDpsgdTest(absltest.TestCase):

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "num_canaries"):
      one_run_dpsgd.OneRunDpsgdConfig(num_canaries=2)
    with self.assertRaisesRegex(ValueError, "repeats"):
      one_run_dpsgd.OneRunDpsgdConfig(repeats=0)

  @pytest.mark.slow
  def test_run_small(self):
    cfg = one_run_dpsgd.OneRunDpsgdConfig(seed=1, eps=(4.0,), num_canaries=64, steps=4,
                                          mlp_hidden=(4,), repeats=2)
    out = tempfile.mkdtemp()
    one_run_dpsgd.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "one_run_dpsgd")
    self.assertTrue(os.path.exists(os.path.join(out, "one_run_dpsgd.png")))
    (row,) = doc["results"]["per_epsilon"]
    self.assertTrue(row["all_below_exact"])
    for m in one_run_dpsgd.METHODS:
      self.assertLessEqual(row["epsilon_lower"][m], row["maximum"][m] + 1e-12)
      self.assertIn(row["guesses"][m]["num_guesses"], one_run.declared_guess_counts(64))
    # the maximum (a perfect ranking of the realised bits) is at most Steinke et al.'s
    # bound with every guess of the best declared count correct, and positive
    counts = one_run.declared_guess_counts(64)
    best = max(one_run.epsilon_lower_bound(
        num_canaries=64, num_guesses=r, num_correct=r, delta=1e-5,
        confidence=1 - 0.05 / len(counts)) for r in counts)
    self.assertLessEqual(row["maximum"]["one_run"], best + 1e-9)
    self.assertGreater(row["maximum"]["one_run"], 0.5)
    self.assertIsNone(row["paper"])              # not available: never filled in
    for k in one_run_dpsgd.FAMILIES:             # run 0 of the repeats is the run above
      rep = row["repeats"][k]
      self.assertLen(rep["runs"], 2)
      self.assertLessEqual(rep["min"], rep["mean"])
      self.assertLessEqual(rep["max"], row["exact_epsilon"])
      if k in row["epsilon_lower"]:
        self.assertEqual(rep["runs"][0], row["epsilon_lower"][k])
    out2 = tempfile.mkdtemp()
    one_run_dpsgd.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])

  @pytest.mark.slow
  def test_command_line(self):
    p = helpers.run_experiment("one_run_dpsgd", "--eps", "8", "--num_canaries", "16",
                               "--steps", "2", "--mlp_hidden", "2")
    self.assertEqual(p.returncode, 0, p.stderr)
    # Bad flag values: tests/experiments_import_test.py (_BAD_FLAGS).


if __name__ == "__main__":
  absltest.main()
