"""Smoke + consistency test of experiments/dpsgd_digits.py on a shrunken configuration."""

import json
import math
import os
import tempfile

import pytest
from absl.testing import absltest

from dpjax import accounting
from experiments import _common
from experiments import dpsgd_digits


class DpsgdDigitsExperimentTest(absltest.TestCase):

  def _run(self, out, archs=("mlp",)):
    return dpsgd_digits.run(seed=0, eps=[2.0, math.inf], archs=list(archs), seeds=2, steps=4,
                            sampling_prob=0.1, clip=1.0, delta=1e-5,
                            learning_rates={"mlp": 2.0, "cnn": 4.0}, mlp_hidden=(16,),
                            cnn_channels=(2, 4), out_dir=out, progress=False)

  def test_run_small(self):
    self._check(("mlp",))

  @pytest.mark.slow  # four XLA compiles: ~15 s idle, over a minute on a loaded machine
  def test_run_small_both_architectures(self):
    self._check(("mlp", "cnn"))

  def _check(self, archs):
    out = tempfile.mkdtemp()
    res = self._run(out, archs)
    rec = res["record"]
    self.assertEqual(rec["num_train"] + rec["num_test"], 1797)
    self.assertLen(rec["cells"], 2 * len(archs))
    for c in rec["cells"]:
      self.assertLen(c["accuracy_per_seed"], 2)
      for a in c["accuracy_per_seed"]:
        self.assertTrue(0.0 <= a <= 1.0)
      self.assertTrue(0.0 <= c["fraction_clipped"] <= 1.0)
      if math.isinf(c["target_epsilon"]):
        self.assertEqual(c["sigma"], 0.0)
        self.assertTrue(math.isinf(c["epsilon_spent"]))
      else:
        # The reported epsilon is the accountant's value for the sigma actually used,
        # and calibration hit the target from below.
        self.assertAlmostEqual(
            c["epsilon_spent"],
            accounting.dpsgd_epsilon(c["sigma"], 0.1, 4, 1e-5), places=9)
        self.assertLessEqual(c["epsilon_spent"], 2.0 + 1e-6)
        self.assertGreater(c["epsilon_spent"], 1.9)
    self.assertTrue(os.path.exists(os.path.join(out, "accuracy_vs_epsilon.png")))
    path = _common.write_results(out, "dpsgd_digits", flag_dict={"seed": 0},
                                 results=rec, tables=res["tables"], quiet=True)
    with open(path) as f:
      doc = json.load(f)
    self.assertEqual(doc["tables"][0]["columns"][0], "model")
    # Same seed, same numbers (the compiled programs are cached, so this is cheap).
    self.assertEqual(self._run(None, archs)["record"], rec)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "archs"):
      dpsgd_digits.run(seed=0, eps=[1.0], archs=["resnet"], seeds=1, steps=1,
                       sampling_prob=0.1, clip=1.0, delta=1e-5, learning_rates={})
    with self.assertRaisesRegex(ValueError, "seeds"):
      dpsgd_digits.run(seed=0, eps=[1.0], archs=["mlp"], seeds=0, steps=1,
                       sampling_prob=0.1, clip=1.0, delta=1e-5, learning_rates={"mlp": 1.0})
    with self.assertRaisesRegex(ValueError, "eps"):
      dpsgd_digits._parse_eps(["0"])


if __name__ == "__main__":
  absltest.main()
