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
        seed=0, eps=(2.0,), archs=tuple(archs), seeds=2, steps=(3, 6), mlp_lrs=(0.5,),
        cnn_lrs=(0.5,), sampling_prob=0.1, clip=1.0, delta=1e-5, nonprivate_epochs=2,
        mlp_hidden=(16,), cnn_channels=(2, 4), validation_size=100)
    return dpsgd_digits.run(cfg, out, progress=False, quiet=True)

  @pytest.mark.slow  # three XLA programs: ~15 s idle
  def test_run_small(self):
    self._check(("mlp",))

  @pytest.mark.slow  # six XLA programs
  def test_run_small_both_architectures(self):
    self._check(("mlp", "cnn"))

  def _check(self, archs):
    out = tempfile.mkdtemp()
    res = self._run(out, archs)
    rec = res["record"]
    self.assertEqual(rec["num_train"] + rec["num_validation"] + rec["num_test"], 1797)
    self.assertEqual(rec["num_validation"], 100)
    self.assertLen(rec["cells"], 3 * len(archs))
    for c in rec["cells"]:
      self.assertLen(c["accuracy_per_seed"], 2)
      for a in c["accuracy_per_seed"]:
        self.assertTrue(0.0 <= a <= 1.0)
      self.assertAlmostEqual(c["accuracy_min"], min(c["accuracy_per_seed"]))
      if c["setting"] == "non-private":
        self.assertTrue(math.isinf(c["epsilon_spent"]))
        for e in c["best_epoch_per_seed"]:
          self.assertIn(e, (0, 1))
        continue
      # The chosen candidate is the one with the highest validation accuracy among
      # those recorded for its (model, setting), and only the chosen one was scored.
      cands = [d for d in rec["candidates"]
               if d["arch"] == c["arch"] and d["setting"] == c["setting"]]
      self.assertLen(cands, 2 * 2)          # 2 step counts x (last, EMA)
      self.assertEqual(c["validation_accuracy"], max(d["validation_accuracy"] for d in cands))
      if c["setting"].startswith("clipped"):
        self.assertEqual(c["sigma"], 0.0)
        self.assertTrue(math.isinf(c["epsilon_spent"]))
      else:
        # The reported epsilon is the accountant's value for the (sigma, q, T) used,
        # and calibration hit the target from below.
        self.assertIn(c["steps"], (3, 6))
        self.assertAlmostEqual(
            c["epsilon_spent"],
            accounting.dpsgd_epsilon(c["sigma"], 0.1, c["steps"], 1e-5), places=9)
        self.assertLessEqual(c["epsilon_spent"], 2.0 + 1e-6)
        self.assertGreater(c["epsilon_spent"], 1.9)
    for r in rec["noise_for_batch_sizes"]:
      self.assertLessEqual(accounting.dpsgd_epsilon(r["noise_multiplier"], r["sampling_prob"],
                                                    r["num_steps"], 1e-5), 2.0 + 1e-6)
    self.assertTrue(os.path.exists(os.path.join(out, "accuracy_vs_epsilon.png")))
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["tables"][0]["columns"][:2], ["model", "setting"])
    self.assertEqual(doc["flags"]["eps"], [2.0])
    # Same seed, same numbers (the compiled programs are cached, so this is cheap).
    self.assertEqual(self._run(tempfile.mkdtemp(), archs)["record"], rec)

  def test_bad_config(self):
    config = dpsgd_digits.DpsgdDigitsConfig
    with self.assertRaisesRegex(ValueError, "archs"):
      config(archs=("resnet",))
    with self.assertRaisesRegex(ValueError, "seeds"):
      config(seeds=0)
    with self.assertRaisesRegex(ValueError, "eps"):
      config(eps=(0.0,))
    for kw in (dict(seed=-1), dict(eps=()), dict(eps=(math.inf,)), dict(archs=()),
               dict(steps=(0,)), dict(sampling_prob=0.0), dict(clip=-1.0), dict(delta=1.0),
               dict(mlp_lrs=(0.0,)), dict(cnn_lrs=(float("inf"),)), dict(ema_decay=1.0),
               dict(nonprivate_epochs=0), dict(nonprivate_batch=0), dict(nonprivate_lrs=(-1.0,)),
               dict(mlp_hidden=(0,)),
               dict(cnn_channels=()), dict(validation_size=0), dict(test_fraction=1.0),
               dict(cnn_groups=-1), dict(cnn_groups=3)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          config(**kw)


if __name__ == "__main__":
  absltest.main()
