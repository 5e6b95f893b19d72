"""experiments.dpsgd runs end to end on a shrunken configuration."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import dpsgd as exp


class ExperimentDpsgdTest(absltest.TestCase):

  # End-to-end run (tens of CPU seconds): behind slow for the CI budget; ./run.sh all runs
  # the experiment at its default scale.
  @pytest.mark.slow
  def test_run_small(self):
    with tempfile.TemporaryDirectory() as out:
      cfg = exp.DpsgdExperimentConfig(seed=0, seeds=2, clip_seeds=2, test_size=500,
                                      anatomy_draws=20, epsilons=(1.0,),
                                      clip_norms=(0.1, 100.0), batches=(50,),
                                      fixed_step_qs=(0.05, 0.1))
      out_run = exp.run(cfg, out, progress=False, quiet=True)
      res, tables = out_run["record"], out_run["tables"]
      with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
      self.assertTrue(os.path.exists(os.path.join(out, "dpsgd_cost_and_clip.png")))
    self.assertEqual(doc["experiment"], "dpsgd")
    self.assertEqual(doc["flags"]["clip_norms"], [0.1, 100.0])
    self.assertLen(tables, 5)
    # Sigma for eps = 1, B = 50, 20 epochs: the lecture's 2.19 and 5.89.
    self.assertAlmostEqual(res["anatomy"]["linear"]["sigma"], 2.19, delta=0.01)
    self.assertAlmostEqual(res["anatomy"]["cubic"]["sigma"], 5.89, delta=0.01)
    # Noise norm sigma C sqrt(d) / B is what was drawn (within Monte Carlo error).
    for name in ("linear", "cubic"):
      a = res["anatomy"][name]
      self.assertAlmostEqual(a["noise_norm_realised"] / a["noise_norm_expected"], 1.0,
                             delta=0.15)
    # At fixed T = 400, sigma / B lies in the lecture's 0.162-0.168 for q >= 0.05.
    for entry in res["batch"]["steps"].values():
      if entry["q"] >= 0.05:
        self.assertGreater(entry["sigma_over_b"], 0.160)
        self.assertLess(entry["sigma_over_b"], 0.170)
    # The fraction of sampled examples that get clipped falls as C grows.
    fr = [res["clip"][str(c)]["clip_fraction"] for c in (0.1, 100.0)]
    self.assertTrue(all(a >= b for a, b in zip(fr, fr[1:])), fr)

  def test_bad_config(self):
    with self.assertRaises(ValueError):
      exp.DpsgdExperimentConfig(seeds=1)
    for kw in (dict(seed=-1), dict(seeds=1), dict(clip_seeds=1), dict(test_size=0),
               dict(anatomy_draws=0), dict(epsilons=()), dict(epsilons=(0.0,)),
               dict(clip_norms=(-1.0,)), dict(batches=(0,)), dict(batches=(501,)),
               dict(fixed_step_qs=(1.5,))):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          exp.DpsgdExperimentConfig(**kw)


if __name__ == "__main__":
  absltest.main()
