"""experiments/fp_attacks.py at a tiny scale: naive mechanisms broken, defended ones not."""

import json
import re

import pytest
from absl.testing import absltest

from experiments import fp_attacks
from tests import helpers


class FpAttacksRunTest(absltest.TestCase):

  # End-to-end run (tens of CPU seconds): behind slow for the CI budget; ./run.sh all runs
  # the experiment at its default scale.
  @pytest.mark.slow
  def test_tiny_run(self):
    p = helpers.run_experiment(
        "fp_attacks", "--trials", "2000", "--models", "40", "--epsilons", "1,2",
        "--noise_multipliers", "1,4", "--num_steps", "20", timeout=900)
    self.assertEqual(p.returncode, 0, p.stderr)
    path = re.search(r"wrote (\S+results\.json)", p.stdout).group(1)
    with open(path) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "fp_attacks")
    self.assertEqual(doc["flags"]["models"], 40)
    res = doc["results"]
    self.assertTrue(res["exactness_checks_pass"])
    # (a) Mironov: most naive releases of x flagged (~0.9 measured), none of x'; the
    # eps lower bound exceeds the claim, which allows TPR 0 at FPR 0.
    for r in res["naive_laplace"]:
      self.assertGreater(r["tpr"], 0.7)
      self.assertEqual(r["fpr"], 0.0)
      self.assertEqual(r["tpr_allowed"], 0.0)
      self.assertGreater(r["epsilon_lower"], r["epsilon"])
    # (b) lattice: with q = 0.2, T = 20 and ~0.85 of sampled steps impossible, a model
    # with the canary escapes with probability (1 - 0.17)^20 ~ 0.02; none without.
    for r in res["naive_dpsgd"]:
      self.assertGreaterEqual(r["flagged_with"], 0.85)
      self.assertEqual(r["flagged_without"], 0.0)
      self.assertBetween(r["sampled_steps_impossible"], 0.7, 0.97)
      self.assertGreater(r["sampled_steps"], 0)
    self.assertGreater(res["naive_dpsgd"][-1]["epsilon_lower"],
                       res["naive_dpsgd"][-1]["claimed_epsilon"])   # sigma = 4: eps ~ 1
    # (c) defended: nothing flagged on either side, eps_lower 0 <= the claim.
    for r in res["defended_laplace"]:
      self.assertEqual((r["tpr"], r["fpr"], r["epsilon_lower"]), (0.0, 0.0, 0.0))
    for r in res["defended_dpsgd"]:
      self.assertEqual((r["flagged_with"], r["flagged_without"], r["epsilon_lower"]),
                       (0.0, 0.0, 0.0))
      self.assertTrue(r["true_hypothesis_reachable"])
    self.assertLen(doc["tables"], 3)
    self.assertIn("reported", doc["tables"][1]["columns"])

  def test_bad_config(self):
    for kw in (dict(epsilons=(0.0,)), dict(trials=0), dict(models=0), dict(sampling_prob=1.5),
               dict(noise_multipliers=()), dict(defended_noise_multipliers=(-1.0,)),
               dict(num_steps=0), dict(seed=-1)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, f"^{next(iter(kw))}"):
          fp_attacks.FpAttacksConfig(**kw)


if __name__ == "__main__":
  absltest.main()
