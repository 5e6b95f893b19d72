"""Tests for experiments/mia.py at a shrunken scale."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import mia as mia_exp


class MiaExperimentTest(absltest.TestCase):

  # End-to-end run: behind slow for the CI budget; ./run.sh all runs the experiment at its
  # default scale.
  @pytest.mark.slow
  def test_small_run(self):
    with tempfile.TemporaryDirectory() as d:
      cfg = mia_exp.MiaConfig(seed=0, num_models=16, pool_size=40, epsilons=(8.0,),
                              num_steps=50, test_size=2000)
      out = mia_exp.run(cfg, d, progress=False, quiet=True)
      rows = {r["row"]: r for r in out["record"]["rows"]}
      self.assertEqual(set(rows), {"overfit", "l2=1e-2", "clipped", "eps=8"})
      for r in rows.values():
        for k in ("test_accuracy", "loss_advantage", "loss_tpr", "lira_tpr", "lira_tpr_0.1%",
                  "bound", "floor"):
          self.assertBetween(r[k], 0.0, 1.0)
      # the overfit model fits its training data better than the test data
      self.assertGreater(rows["overfit"]["train_accuracy"], rows["overfit"]["test_accuracy"])
      self.assertAlmostEqual(rows["eps=8"]["bound"], 1.0, places=3)
      with open(out["path"]) as f:
        doc = json.load(f)
      self.assertEqual(doc["experiment"], "mia")
      self.assertTrue(os.path.exists(os.path.join(d, "mia_roc.png")))
      self.assertEqual(doc["flags"]["num_models"], 16)
      # The figure's ROC curves are in the record: non-decreasing, ending at TPR = 1.
      roc = doc["results"]["roc"]
      self.assertEqual(set(roc["tpr"]), set(rows))
      for name, c in roc["tpr"].items():
        self.assertTrue(all(a <= b for a, b in zip(c["lira"], c["lira"][1:])), name)
        self.assertEqual(c["lira"][-1], 1.0)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "num_models"):
      mia_exp.MiaConfig(num_models=3)
    for kw in (dict(seed=-1), dict(num_models=2), dict(num_models=7), dict(pool_size=3),
               dict(epsilons=()), dict(epsilons=(0.0,)), dict(num_steps=0),
               dict(sampling_prob=1.5), dict(delta=0.0), dict(test_size=0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          mia_exp.MiaConfig(**kw)


if __name__ == "__main__":
  absltest.main()
