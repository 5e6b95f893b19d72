"""Smoke + consistency test of experiments/dpsgd_digits.py on a shrunken configuration."""

import json
import math
import os
import tempfile

import pytest
from absl.testing import absltest

from dpjax import accounting
from experiments import dpsgd_digits


class DpsgdDigitsExperimentTest(absltest.TestCase):

  def _run(self, out, archs=("mlp",)):
    cfg = dpsgd_digits.DpsgdDigitsConfig(
        seed=0, eps=(2.0, math.inf), archs=tuple(archs), seeds=2, steps=4, sampling_prob=0.1,
        clip=1.0, delta=1e-5, mlp_lr=2.0, cnn_lr=4.0, mlp_hidden=(16,), cnn_channels=(2, 4))
    return dpsgd_digits.run(cfg, out, progress=False, quiet=True)

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
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["tables"][0]["columns"][0], "model")
    self.assertEqual(doc["flags"]["eps"], [2.0, "inf"])
    # Same seed, same numbers (the compiled programs are cached, so this is cheap).
    self.assertEqual(self._run(tempfile.mkdtemp(), archs)["record"], rec)

  def test_bad_config(self):
    config = dpsgd_digits.DpsgdDigitsConfig
    with self.assertRaisesRegex(ValueError, "archs"):
      config(eps=(1.0,), archs=("resnet",), seeds=1, steps=1)
    with self.assertRaisesRegex(ValueError, "seeds"):
      config(eps=(1.0,), archs=("mlp",), seeds=0, steps=1)
    with self.assertRaisesRegex(ValueError, "eps"):
      config(eps=(0.0,))
    for kw in (dict(seed=-1), dict(eps=()), dict(archs=()), dict(steps=0),
               dict(sampling_prob=0.0), dict(clip=-1.0), dict(delta=1.0), dict(mlp_lr=0.0),
               dict(cnn_lr=float("inf")), dict(mlp_hidden=(0,)), dict(cnn_channels=()),
               dict(test_fraction=1.0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          config(**kw)


if __name__ == "__main__":
  absltest.main()
