"""experiments/tuning.py on a tiny configuration: the budgets meet the target, reproducibly.

The accounting itself is tested in tests/tuning_test.py.
"""

import json
import os
import tempfile

from absl.testing import absltest
import pytest

from dpjax import accounting
from experiments import tuning as tuning_exp


class TuningExperimentTest(absltest.TestCase):

  @pytest.mark.slow  # about 27 s of CPU (credit sampler and DP-SGD compiles); the CI budget is tight
  def test_run_small(self):
    cfg = tuning_exp.TuningConfig(seed=1, epsilon=3.0, seeds=2, train_size=400, val_size=200,
                                  test_size=500, batch_size=40, epochs=1.0, mean_runs=2.0,
                                  shape=0.0, score_noise=5.0, clip_norms=(1.0,),
                                  step_sizes=(0.5,))
    docs = []
    for _ in range(2):   # same seed twice: the same numbers (the second run reuses programs)
      out = tempfile.mkdtemp()
      res = tuning_exp.run(cfg, out, progress=False, quiet=True)
      with open(res["path"]) as f:
        docs.append(json.load(f))
      self.assertTrue(os.path.exists(os.path.join(out, "tuning_epsilon.png")))
    self.assertEqual(docs[0]["results"], docs[1]["results"])
    r = docs[0]["results"]
    q, steps, m = r["q"], r["steps"], r["methods"]
    self.assertEqual(steps, 10)
    # Repeat and select: sigma calibrated so the whole procedure is at (just below) eps.
    rs = m["rs"]
    eps_rs = accounting.tuned_dpsgd_epsilon(rs["sigma"], q, steps, tuning_exp.DELTA,
                                            mean_runs=2.0, shape=0.0, score_noise_multiplier=5.0)
    self.assertAlmostEqual(rs["total_epsilon"], eps_rs, places=12)
    self.assertBetween(eps_rs, 0.99 * 3.0, 3.0)
    self.assertLess(rs["one_run_epsilon"], eps_rs)
    # Exponential mechanism: max(composition of the trainings, selection eps); one
    # setting keeps the test to one compiled program.
    em = m["em"]
    composed = accounting.dpsgd_epsilon(em["sigma"], q, steps, tuning_exp.DELTA)
    self.assertAlmostEqual(em["total_epsilon"], max(composed, 3.0), places=12)
    self.assertLessEqual(composed, 3.0 * 1.001)
    # Naive: claims eps, is not DP; its training records alone spend more than eps.
    nv = m["naive"]
    self.assertIsNone(nv["total_epsilon"])     # inf (not DP), written as null in JSON
    self.assertEqual(nv["claimed_epsilon"], 3.0)
    self.assertAlmostEqual(nv["training_records_epsilon"], 3.0, delta=0.01)
    for k in ("rs", "em", "naive"):
      self.assertLen(m[k]["test_accuracy"], 2)
      for a in m[k]["test_accuracy"]:
        self.assertBetween(a, 0.0, 1.0)
      for c in m[k]["chosen_candidate"]:
        self.assertIn(c, (-1, 0))
    acct = r["accounting"]
    for shape, eps in acct["epsilon_by_shape"].items():
      self.assertTrue(all(b > a for a, b in zip(eps, eps[1:])), shape)
      if shape != "poisson":   # E[K] = 1: K = 1 surely, one run's eps
        self.assertAlmostEqual(eps[0], acct["one_run_epsilon"], places=12)

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "mean_runs"):
      tuning_exp.TuningConfig(mean_runs=0.5)
    with self.assertRaisesRegex(ValueError, "shape"):
      tuning_exp.TuningConfig(shape=-1.0)


if __name__ == "__main__":
  absltest.main()
