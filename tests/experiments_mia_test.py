"""Tests for experiments/mia.py at a shrunken scale."""

import json
import os
import tempfile

from absl.testing import absltest

from experiments import mia as mia_exp


class MiaExperimentTest(absltest.TestCase):

  def test_small_run(self):
    with tempfile.TemporaryDirectory() as d:
      out = mia_exp.run(seed=0, out_dir=d, num_models=16, pool_size=40, epsilons=(8.0,),
                        num_steps=50, test_size=2000, progress=False, quiet=True)
      rows = {r["row"]: r for r in out["rows"]}
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

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "num_models"):
      mia_exp.run(seed=0, out_dir="/tmp/unused", num_models=3)


if __name__ == "__main__":
  absltest.main()
