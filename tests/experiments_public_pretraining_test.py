"""Smoke + consistency test of experiments/public_pretraining.py on a shrunken configuration."""

import json
import math
import os
import tempfile

import numpy as np
import pytest
from absl.testing import absltest

from dpjax import accounting
from dpjax.data import digits
from experiments import public_pretraining as pp

_H = 16


def _config(**kw):
  base = dict(seed=0, eps=(2.0, math.inf), seeds=2, steps=4, sampling_prob=0.1, clip=1.0,
              delta=1e-5, hidden=_H, pretrain_steps=30, strategies=("head",))
  base.update(kw)
  return pp.PublicPretrainingConfig(**base)


class PublicPretrainingExperimentTest(absltest.TestCase):

  @pytest.mark.slow  # an experiment run (about 20 s); ./run.sh all runs it at full scale
  def test_run_small(self):
    # The head strategy only (one small DP-SGD compile); the others: the slow test.
    out = tempfile.mkdtemp()
    cfg = _config()
    res = pp.run(cfg, out, progress=False, quiet=True)
    rec = self._check(res["record"], cfg)
    self.assertTrue(os.path.exists(os.path.join(out, "accuracy_vs_epsilon.png")))
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["flags"]["eps"], [2.0, "inf"])
    self.assertEqual(doc["tables"][0]["columns"][:2], ["strategy", "d"])
    # Same seed, same numbers.
    self.assertEqual(pp.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)["record"], rec)

  @pytest.mark.slow  # two more DP-SGD compiles (all layers), about 40 s
  def test_all_strategies(self):
    cfg = _config(strategies=("head", "full", "scratch"))
    res = pp.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)
    self._check(res["record"], cfg)
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertIn("lecture / paper", doc["tables"][1]["columns"])

  def _check(self, rec, cfg):
    k = 5
    # classes mode: public = training images of 0-4, private = those of 5-9.
    self.assertEqual(rec["num_public"] + rec["num_private"], 1348)
    self.assertEqual(rec["num_classes"], k)
    self.assertGreater(rec["pretrain_accuracy_public_task"], 0.6)  # chance is 0.2
    d_head, d_full = _H * k + k, digits.NUM_FEATURES * _H + _H + _H * k + k
    self.assertEqual(rec["num_params"], {"head": d_head, "full": d_full, "scratch": d_full})
    self.assertLen(rec["cells"], 2 * len(cfg.strategies))
    self.assertEqual([c["strategy"] for c in rec["cells"]],
                     [s for s in cfg.strategies for _ in range(2)])
    n = rec["num_private"]
    sigma_at = {}
    for c in rec["cells"]:
      self.assertEqual(c["num_params"], d_head if c["strategy"] == "head" else d_full)
      self.assertLen(c["accuracy_per_seed"], 2)
      self.assertTrue(all(0.0 <= a <= 1.0 for a in c["accuracy_per_seed"]))
      self.assertTrue(c["all_finite"])
      self.assertAlmostEqual(c["noise_norm"],
                             c["sigma"] * 1.0 * math.sqrt(c["num_params"]) / (0.1 * n))
      sigma_at.setdefault(c["target_epsilon"], set()).add(c["sigma"])
      if math.isinf(c["target_epsilon"]):
        self.assertEqual(c["sigma"], 0.0)
        self.assertTrue(math.isinf(c["epsilon_spent"]))
      else:
        self.assertAlmostEqual(c["epsilon_spent"],
                               accounting.dpsgd_epsilon(c["sigma"], 0.1, 4, 1e-5), places=9)
        self.assertLessEqual(c["epsilon_spent"], 2.0 + 1e-6)
        self.assertGreater(c["epsilon_spent"], 1.9)
    # The same accountant and sigma for every strategy at a given epsilon: the one
    # calibrated for (q, T, delta).
    self.assertTrue(all(len(s) == 1 for s in sigma_at.values()), sigma_at)
    self.assertAlmostEqual(sigma_at[2.0].pop(), accounting.calibrate_noise(
        2.0, 0.1, 4, 1e-5, dataset_size=n), places=9)
    return rec

  @pytest.mark.slow  # another pre-training and DP-SGD compile
  def test_split_mode(self):
    cfg = _config(public="split", public_fraction=0.25)
    rec = pp.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)["record"]
    self.assertEqual(rec["num_public"], 337)
    self.assertEqual(rec["num_private"], 1348 - 337)
    self.assertEqual(rec["num_test"], 449)
    self.assertEqual(rec["num_classes"], 10)
    self.assertEqual(rec["public_only_accuracy"], rec["pretrain_accuracy_public_task"])
    self.assertGreater(rec["public_only_accuracy"], 0.5)  # chance is 0.1
    self.assertEqual(rec["num_params"]["head"], _H * 10 + 10)

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(eps=()), dict(eps=(0.0,)), dict(public="other"),
               dict(strategies=("head", "head")), dict(strategies=("linear",)),
               dict(seeds=0), dict(steps=0), dict(sampling_prob=0.0), dict(clip=-1.0),
               dict(delta=1.0), dict(hidden=0), dict(head_lr=0.0),
               dict(full_lr=float("inf")), dict(scratch_lr=-1.0), dict(pretrain_steps=0),
               dict(pretrain_lr=0.0), dict(public_fraction=1.0), dict(test_fraction=0.0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          pp.PublicPretrainingConfig(**kw)


if __name__ == "__main__":
  absltest.main()
