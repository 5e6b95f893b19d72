"""Shrunken run of experiments/pate.py."""

import json
import math
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import pate as pate_exp


class PateExperimentTest(absltest.TestCase):

  # End-to-end run (tens of CPU seconds): behind slow for the CI budget; ./run.sh all runs
  # the experiment at its default scale.
  @pytest.mark.slow
  def test_run_small(self):
    out = tempfile.mkdtemp()
    cfg = pate_exp.PateConfig(seed=0, teachers=(5, 20), queries=(30,), public=40,
                              sigma_per_teacher=0.2, delta=1e-5, dpsgd_seeds=2, fit_steps=30,
                              dpsgd_epochs=1, confident_threshold=0.5,
                              confident_sigma_threshold=0.3, confident_sigma=0.1)
    res = pate_exp.run(cfg, out, progress=False, quiet=True)
    cells = res["record"]["cells"]
    self.assertLen(cells, 4)
    self.assertEqual([c["aggregator"] for c in cells], ["GNMax", "Confident-GNMax"] * 2)
    for c in cells:
      self.assertBetween(c["answered"], 0, 30)
      self.assertLessEqual(c["epsilon_data_dependent"], c["epsilon_data_independent"] + 1e-9)
      # DP-SGD was calibrated to the PATE epsilon (calibrate_noise lands at or below it).
      self.assertLessEqual(c["dpsgd_epsilon"], c["epsilon_data_independent"] * 1.001)
      self.assertGreater(c["dpsgd_epsilon"], 0.9 * c["epsilon_data_independent"])
      for k in ("student_accuracy", "ensemble_accuracy", "dpsgd_accuracy", "label_accuracy"):
        if c[k] is not None:
          self.assertBetween(c[k], 0.0, 1.0)
    gn = [c for c in cells if c["aggregator"] == "GNMax"]
    self.assertTrue(all(c["answered"] == 30 for c in gn))
    # More teachers with sigma proportional to k: less epsilon for the same queries.
    self.assertLess(gn[1]["epsilon_data_independent"], gn[0]["epsilon_data_independent"])
    self.assertTrue(math.isfinite(res["record"]["non_private_accuracy"]))
    self.assertTrue(os.path.exists(os.path.join(out, "pate_vs_dpsgd.png")))
    with open(res["path"]) as f:
      self.assertEqual(json.load(f)["flags"]["teachers"], [5, 20])

  def test_rejects_too_few_public(self):
    with self.assertRaisesRegex(ValueError, "public"):
      pate_exp.PateConfig(seed=0, teachers=(5,), queries=(50,), public=40,
                          sigma_per_teacher=0.2, delta=1e-5, dpsgd_seeds=2, fit_steps=5,
                          dpsgd_epochs=1)

  def test_bad_config(self):
    # 1,348 training images (449 held out): public + private.
    for kw in (dict(seed=-1), dict(teachers=()), dict(teachers=(0,)), dict(queries=(0,)),
               dict(public=0), dict(public=1348), dict(teachers=(900,)),
               dict(sigma_per_teacher=0.0), dict(delta=1.0), dict(dpsgd_seeds=0),
               dict(fit_steps=0), dict(dpsgd_epochs=0), dict(confident_threshold=-0.1),
               dict(confident_sigma_threshold=0.0), dict(confident_sigma=-1.0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          pate_exp.PateConfig(**kw)
    # The largest k the default split allows: every teacher gets one private image.
    self.assertEqual(pate_exp.PateConfig(teachers=(848,)).teachers, (848,))


if __name__ == "__main__":
  absltest.main()
