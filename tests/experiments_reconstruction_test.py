"""Smoke + shape test of experiments/reconstruction.py on a shrunken configuration."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from experiments import reconstruction


class ReconstructionExperimentTest(absltest.TestCase):

  # End-to-end run: behind slow for the CI budget; ./run.sh all runs the experiment at its
  # default scale.
  @pytest.mark.slow
  def test_run_small(self):
    out = tempfile.mkdtemp()
    cfg = reconstruction.ReconstructionConfig(people=30, queries=(60, 240), trials=4,
                                              lp_max_queries=60)
    res = reconstruction.run(cfg, out, progress=False, quiet=True)
    rec = res["record"]
    cells = {(c["regime"], c["num_queries"]): c["mean"] for c in rec["cells"]}
    self.assertEqual(len(cells), 6)
    self.assertGreater(cells[("pm1", 240)], 0.95)        # small noise: near-total recovery
    self.assertLess(cells[("dp", 240)], rec["majority_baseline"] + 0.2)
    self.assertTrue(os.path.exists(os.path.join(out, "recovery.png")))
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["tables"][0]["columns"][0], "m")
    self.assertEqual(doc["flags"]["people"], 30)
    # Same seed, same numbers.
    out2 = tempfile.mkdtemp()
    res2 = reconstruction.run(cfg, out2, progress=False, quiet=True)
    self.assertEqual(res2["record"]["cells"], rec["cells"])

  def test_bad_config(self):
    for kw in (dict(people=1), dict(queries=()), dict(queries=(0,)), dict(trials=0),
               dict(epsilon=-1.0), dict(seed=-1), dict(people=True)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, next(iter(kw))):
          reconstruction.ReconstructionConfig(**kw)

if __name__ == "__main__":
  absltest.main()
