"""Smoke + shape test of experiments/reconstruction.py on a shrunken configuration."""

import json
import os
import tempfile

from absl.testing import absltest

from experiments import _common
from experiments import reconstruction


class ReconstructionExperimentTest(absltest.TestCase):

  def test_run_small(self):
    out = tempfile.mkdtemp()
    res = reconstruction.run(seed=0, people=30, queries=[60, 240], trials=4, epsilon=1.0,
                             lp_max_queries=60, out_dir=out, progress=False)
    rec = res["record"]
    cells = {(c["regime"], c["num_queries"]): c["mean"] for c in rec["cells"]}
    self.assertEqual(len(cells), 6)
    self.assertGreater(cells[("pm1", 240)], 0.95)        # small noise: near-total recovery
    self.assertLess(cells[("dp", 240)], rec["majority_baseline"] + 0.2)
    self.assertTrue(os.path.exists(os.path.join(out, "recovery.png")))
    path = _common.write_results(out, "reconstruction", flag_dict={"seed": 0}, results=rec,
                                 tables=res["tables"], quiet=True)
    with open(path) as f:
      doc = json.load(f)
    self.assertEqual(doc["tables"][0]["columns"][0], "m")
    # Same seed, same numbers.
    res2 = reconstruction.run(seed=0, people=30, queries=[60, 240], trials=4, epsilon=1.0,
                              lp_max_queries=0, out_dir=out, progress=False)
    self.assertEqual(res2["record"]["cells"], rec["cells"])


if __name__ == "__main__":
  absltest.main()
