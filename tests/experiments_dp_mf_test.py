"""experiments.dp_mf runs end to end on a shrunken configuration, with the right privacy."""

import json
import math
import os
import tempfile

import numpy as np
import pytest
from absl.testing import absltest

from dpjax import matrix_factorization as mf
from dpjax.accounting import gdp
from experiments import dp_mf as exp


class ExperimentDpMfTest(absltest.TestCase):

  # End-to-end run (tens of CPU seconds): behind slow for the CI budget; ./run.sh all runs
  # the experiment at its default scale.
  @pytest.mark.slow
  def test_run_small(self):
    with tempfile.TemporaryDirectory() as out:
      cfg = exp.DpMfExperimentConfig(seed=0, seeds=2, epsilons=(1.0, 8.0), epochs=(2,),
                                     bands=(1, 4), lrs=(0.5,), validation_size=200,
                                     test_size=500, optimizer_iterations=20,
                                     digits_epochs=(1,), digits_lrs=(0.5,), digits_hidden=8)
      res = exp.run(cfg, out, progress=False, quiet=True)
      with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
      self.assertTrue(os.path.exists(os.path.join(out, "dp_mf_accuracy.png")))
      self.assertTrue(os.path.exists(os.path.join(out, "dp_mf_digits_accuracy.png")))
    self.assertEqual(doc["experiment"], "dp_mf")
    self.assertLen(res["tables"], 2)
    runs = res["record"]["runs"]
    self.assertLen(runs, 2 * 4)        # eps x (DP-SGD, b = 1, b = 4, tree)
    digit_runs = res["record"]["digits_runs"]
    self.assertLen(digit_runs, 2 * 4)
    e_digits = 1148 // 128               # n = 1,148 private digits, B = 128: E = 8
    for r in digit_runs.values():
      self.assertLessEqual(r["epsilon_spent"], r["epsilon"] * (1 + 1e-9))
      self.assertGreater(r["epsilon_spent"], r["epsilon"] * 0.99)
      self.assertEqual(r["steps"], e_digits)
      self.assertTrue(0.0 <= r["acc_mean"] <= 1.0)
      if r["method"] == "BandMF b=1":   # one participation: sens 1
        self.assertAlmostEqual(r["sensitivity"], 1.0, places=12)
    steps = 2 * (exp.N_PRIVATE // exp.BATCH)
    for key, r in runs.items():
      with self.subTest(key):
        # Every method spends the target (the DP-SGD calibration and the PLD bisection
        # both stop at or just below it).
        self.assertLessEqual(r["epsilon_spent"], r["epsilon"] * (1 + 1e-9))
        self.assertGreater(r["epsilon_spent"], r["epsilon"] * 0.99)
        self.assertEqual(r["steps"], steps)
        self.assertTrue(0.0 <= r["acc_mean"] <= 1.0)
        if r["method"] == "BandMF b=1":
          # Independent noise, 2 participations: sens sqrt(2); the Gaussian mechanism's
          # exact eps at multiplier sigma / sqrt(2) is the target (PLD within 0.3%).
          self.assertAlmostEqual(r["sensitivity"], math.sqrt(2), places=12)
          exact = gdp.gaussian_epsilon(exp.DELTA, r["sensitivity"] / r["sigma"])
          self.assertAlmostEqual(exact, r["epsilon"], delta=3e-3 * r["epsilon"])
          # C = I: the prefix error is sigma^2 (T + 1) / 2.
          self.assertAlmostEqual(r["prefix_error"], r["sigma"] ** 2 * (steps + 1) / 2,
                                 delta=1e-9 * r["prefix_error"])
        if r["method"] == "DP-FTRL tree":
          c = mf.tree_aggregation(steps)
          self.assertAlmostEqual(r["sensitivity"],
                                 mf.cyclic_sensitivity(c, exp.N_PRIVATE // exp.BATCH),
                                 places=12)
    # At a fixed eps, sigma / sens is the same for every MF method.
    for eps in (1.0, 8.0):
      ratios = [r["sigma"] / r["sensitivity"] for r in runs.values()
                if r["epsilon"] == eps and not r["method"].startswith("DP-SGD")]
      np.testing.assert_allclose(ratios, ratios[0], rtol=1e-12)
    self.assertIn("Published direction", doc["summary"])

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(seeds=1), dict(epsilons=(0.0,)), dict(epochs=(0,)),
               dict(bands=(0,)), dict(lrs=(-1.0,)), dict(validation_size=0),
               dict(test_size=0), dict(optimizer_iterations=-1), dict(worlds=("mnist",)),
               dict(digits_epochs=(0,)), dict(digits_hidden=0), dict(digits_batch=0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          exp.DpMfExperimentConfig(**kw)


if __name__ == "__main__":
  absltest.main()
