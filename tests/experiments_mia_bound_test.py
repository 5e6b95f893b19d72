"""experiments/mia_bound.py on a shrunken configuration: closed forms vs the lecture."""

import json
import math
import os
import tempfile

import numpy as np
from absl.testing import absltest, parameterized

from experiments import mia_bound


class MiaBoundClosedFormTest(parameterized.TestCase):

  @parameterized.parameters(0.1, 1.0, 3.0, 8.0)
  def test_advantage_bound_is_max_of_region(self, eps):
    delta = 1e-5
    f = np.linspace(0, 1, 2_000_001)
    best = np.max(mia_bound.region_tpr(f, eps, delta) - f)
    self.assertAlmostEqual(best, mia_bound.advantage_bound(eps, delta), delta=2e-6)

  @parameterized.parameters(0.1, 0.5, 2.0, 4.0)
  def test_best_tests_inside_region(self, eps):
    f = np.linspace(0, 1, 10_001)
    bound = mia_bound.region_tpr(f, eps, 1e-5)
    for m in mia_bound.MECHANISMS:
      tpr, adv, _ = mia_bound.best_test(m, eps, 1e-5, f)
      np.testing.assert_array_less(tpr, bound + 1e-12)
      self.assertAlmostEqual(np.max(tpr - f), adv, delta=1e-3)

  def test_lecture_pure_math(self):
    tpr, adv, mu = mia_bound.best_test("gaussian", 8.0, 1e-5, 0.01)
    self.assertAlmostEqual(adv, 0.595, delta=5e-4)
    self.assertAlmostEqual(float(tpr), 0.2545, delta=5e-5)
    self.assertAlmostEqual(float(mia_bound.region_tpr(0.01, 1.0, 1e-5)), 0.027, delta=5e-4)
    # RR attains the advantage bound (up to 2 delta / (e^eps + 1)).
    for eps in (0.1, 1.0, 8.0):
      _, adv_rr, _ = mia_bound.best_test("rr", eps, 1e-5, 0.01)
      gap = mia_bound.advantage_bound(eps, 1e-5) - adv_rr
      self.assertAlmostEqual(gap, 2e-5 / (math.exp(eps) + 1), delta=1e-12)
    # Laplace's TPR@1% equals e^eps * 1% for eps <= ln(50) (so for 0.1..2), not at 4.
    for eps, equal in ((0.1, True), (1.0, True), (2.0, True), (4.0, False)):
      tpr_l, _, _ = mia_bound.best_test("laplace", eps, 1e-5, 0.01)
      self.assertEqual(abs(float(tpr_l) - 0.01 * math.exp(eps)) < 1e-12, equal)


class MiaBoundRunTest(absltest.TestCase):

  def test_run_small_writes_results_and_matches_lecture(self):
    out = tempfile.mkdtemp()
    mia_bound.run(seed=3, out_dir=out, epsilons=[1.0, 8.0], mc_samples=20_000,
                        progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "mia_bound")
    self.assertTrue(os.path.exists(os.path.join(out, "tradeoff_curves.png")))
    per = {r["epsilon"]: r for r in doc["results"]["per_epsilon"]}
    g8 = per[8.0]["mechanisms"]["gaussian"]
    self.assertAlmostEqual(g8["advantage"], 0.595, delta=5e-4)
    self.assertAlmostEqual(g8["tpr"], 0.2545, delta=5e-5)
    self.assertAlmostEqual(per[1.0]["tpr_bound"], 0.027, delta=5e-4)
    self.assertTrue(doc["results"]["mc_all_within_tolerance"])
    # The Monte Carlo numbers are real estimates, not copies of the closed forms.
    self.assertNotEqual(g8["mc"]["tpr"], g8["tpr"])
    # Same seed, same file.
    out2 = tempfile.mkdtemp()
    mia_bound.run(seed=3, out_dir=out2, epsilons=[1.0, 8.0], mc_samples=20_000,
                  progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      doc2 = json.load(f)
    self.assertEqual(doc["results"], doc2["results"])

  def test_bad_config_raises(self):
    with self.assertRaisesRegex(ValueError, "epsilons"):
      mia_bound.run(seed=0, out_dir=tempfile.mkdtemp(), epsilons=[0.0], quiet=True)
    with self.assertRaisesRegex(ValueError, "delta"):
      mia_bound.run(seed=0, out_dir=tempfile.mkdtemp(), delta=1.0, quiet=True)


if __name__ == "__main__":
  absltest.main()
