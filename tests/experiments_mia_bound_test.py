"""experiments/mia_bound.py on a shrunken configuration: the lecture's numbers, MC.

The closed forms themselves are tested in tests/tradeoff_test.py.
"""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import mia_bound


class MiaBoundRunTest(absltest.TestCase):

  @pytest.mark.slow  # an experiment run (about 15 s)
  def test_run_small_writes_results_and_matches_lecture(self):
    out = tempfile.mkdtemp()
    cfg = mia_bound.MiaBoundConfig(seed=3, epsilons=(1.0, 8.0), mc_samples=20_000)
    mia_bound.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "mia_bound")
    self.assertEqual(doc["flags"]["mc_samples"], 20_000)
    self.assertTrue(os.path.exists(os.path.join(out, "tradeoff_curves.png")))
    per = {r["epsilon"]: r for r in doc["results"]["per_epsilon"]}
    g8 = per[8.0]["mechanisms"]["gaussian"]
    self.assertAlmostEqual(g8["advantage"], 0.595, delta=5e-4)
    self.assertAlmostEqual(g8["tpr"], 0.2545, delta=5e-5)
    self.assertAlmostEqual(per[1.0]["tpr_bound"], 0.027, delta=5e-4)
    self.assertTrue(doc["results"]["mc_all_within_tolerance"])
    # The Monte Carlo numbers are real estimates, not copies of the closed forms.
    self.assertNotEqual(g8["mc"]["tpr"], g8["tpr"])
    # The figure's curves are in the record.
    self.assertEqual([c["epsilon"] for c in doc["results"]["figure"]["curves"]], [1.0, 8.0])
    # Same seed, same file.
    out2 = tempfile.mkdtemp()
    mia_bound.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      doc2 = json.load(f)
    self.assertEqual(doc["results"], doc2["results"])

  def test_bad_config(self):
    for kw in (dict(epsilons=(0.0,)), dict(epsilons=()), dict(delta=1.0), dict(fpr=0.5),
               dict(mc_samples=999), dict(seed=-1)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, f"^{next(iter(kw))}"):
          mia_bound.MiaBoundConfig(**kw)


if __name__ == "__main__":
  absltest.main()
