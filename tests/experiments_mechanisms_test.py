"""experiments/mechanisms.py on a shrunken configuration: files, closed forms, lecture math."""

import json
import math
import os
import tempfile

import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest

from experiments import mechanisms as exp

_SMALL = exp.MechanismsConfig(
    seed=1, rr_people=2_000, rr_epsilons=(0.1, 1.0), rr_reps=50, count_epsilons=(0.5, 1.0),
    noise_draws=20_000, income_people=1_000, clip_bounds=(50.0, 200.0, 2000.0),
    mean_reps=2_000, em_private=200, em_public=500, em_test=5_000,
    em_epsilons=(0.01, 1.0, 5.0), em_reps=200, em_datasets=3)


# One shrunken run shared by the class (about 40 CPU s): behind slow for the CI
# budget; ./run.sh all runs the experiment, tests/mechanisms_test.py the library.
@pytest.mark.slow
class MechanismsExperimentTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.out = tempfile.mkdtemp()
    cls.res = exp.run(_SMALL, cls.out, progress=False, quiet=True)
    with open(os.path.join(cls.out, "results.json")) as f:
      cls.doc = json.load(f)

  def test_writes_results_and_figure(self):
    self.assertEqual(self.doc["experiment"], "mechanisms")
    self.assertEqual(self.res["path"], os.path.join(self.out, "results.json"))
    self.assertEqual(self.doc["flags"]["seed"], 1)
    self.assertLen(self.doc["tables"], 5)
    for fig in self.doc["figures"]:
      self.assertTrue(os.path.exists(os.path.join(self.out, fig)))
    # Every table that has a "lecture" column shows the lecture's value somewhere.
    for t in self.doc["tables"][:4]:
      self.assertIn("lecture", t["columns"])

  def test_lecture_pure_math(self):
    rr = {r["epsilon"]: r for r in self.doc["results"]["randomized_response"]["per_epsilon"]}
    # Posterior at the lecture's rate 0.548 (0.572: the lecture's unrounded rate, see
    # tests/mechanisms_test.py).
    self.assertAlmostEqual(rr[1.0]["posterior_yes_at_0.548"], 0.767, delta=1e-3)
    self.assertAlmostEqual(rr[0.1]["posterior_yes_at_0.548"], 0.572, delta=1e-3)
    # Ratio local/central -> sqrt(n/2) as eps -> 0 (exactly: eps sqrt(p(1-p))/tanh(eps/2)).
    n = _SMALL.rr_people
    self.assertAlmostEqual(rr[0.1]["ratio_exact"] / math.sqrt(n / 2), 1.0, delta=0.01)
    cn = {r["epsilon"]: r for r in self.doc["results"]["count_noise"]["per_epsilon"]}
    self.assertAlmostEqual(cn[1.0]["gaussian_mae_exact"], 2.98, delta=5e-3)
    self.assertAlmostEqual(cn[1.0]["laplace_mae_exact"], 1.00, places=12)
    self.assertIsNone(cn[1.0]["classic_sigma"])           # refused at eps >= 1
    self.assertGreater(cn[0.5]["classic_sigma"], cn[0.5]["gaussian_sigma"])
    # 20k draws: MC mean |error| within 3% (relative SE ~0.7% for Laplace, 0.5% Gaussian).
    for r in cn.values():
      self.assertAlmostEqual(r["laplace_mae_mc"] / r["laplace_mae_exact"], 1, delta=0.03)
      self.assertAlmostEqual(r["gaussian_mae_mc"] / r["gaussian_mae_exact"], 1, delta=0.03)
    # Noise SD of the private mean at B = 2000 (n = 1000, eps = 1): 2 sqrt(2) B / (eps n)
    # plus a small count term -> 5.66, the lecture's figure.
    clip = {r["clip_bound"]: r for r in self.doc["results"]["clip_bound"]["per_clip_bound"]}
    self.assertAlmostEqual(clip[2000.0]["noise_sd_delta_method"], 5.66, delta=0.01)
    self.assertAlmostEqual(clip[200.0]["noise_sd_delta_method"], 0.59, delta=0.01)
    # 2000 repetitions: the MC sd is within 10% of the delta method (relative SE ~2.5%).
    for r in clip.values():
      self.assertAlmostEqual(r["noise_sd_mc"] / r["noise_sd_delta_method"], 1, delta=0.1)

  def test_exponential_demo_sane(self):
    em = self.doc["results"]["exponential"]
    per = {r["epsilon"]: r for r in em["per_epsilon"]}
    # eps = 0.01 is close to a uniform pick: P[a private-best threshold] near the share
    # of tied best thresholds (200 draws: SE <= 0.035 -> tolerance 0.11); eps = 5
    # concentrates on the best ones.
    acc = np.array(em["curves"]["private_accuracy"])
    share = np.mean(acc == acc.max())
    self.assertAlmostEqual(per[0.01]["p_private_best"], share, delta=0.11)
    self.assertGreater(per[5.0]["p_private_best"], per[0.01]["p_private_best"])
    self.assertGreater(per[5.0]["private_accuracy"], per[0.01]["private_accuracy"])
    self.assertAlmostEqual(em["best_private_threshold"],
                           _SMALL.thresholds[int(np.argmax(acc))], places=12)
    self.assertLessEqual(em["best_test_accuracy"], em["bayes_accuracy_test"] + 0.02)

  def test_deterministic(self):
    out2 = tempfile.mkdtemp()
    exp.run(_SMALL, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      doc2 = json.load(f)
    self.assertEqual(self.doc["results"], doc2["results"])

  def test_bad_config_raises(self):
    with self.assertRaisesRegex(ValueError, "rr_people"):
      exp.MechanismsConfig(rr_people=0)
    with self.assertRaisesRegex(ValueError, "em_epsilons"):
      exp.MechanismsConfig(em_epsilons=(0.0,))
    with self.assertRaisesRegex(ValueError, "delta"):
      exp.MechanismsConfig(delta=2.0)
    for kw in (dict(seed=-1), dict(rr_reps=True), dict(em_candidates=1), dict(clip_bounds=()),
               dict(count_epsilons=(1.0, float("inf"))), dict(income_epsilon=0.0),
               dict(small_count=-1.0), dict(noise_draws=2.5)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          exp.MechanismsConfig(**kw)


if __name__ == "__main__":
  absltest.main()
