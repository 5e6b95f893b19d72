"""experiments/one_run_fdp.py on a tiny scale: shape of the record, validity, determinism."""

import json
import os
import tempfile

import numpy as np
import pytest
from absl.testing import absltest

from dpjax.accounting import gdp
from experiments import one_run_fdp
from tests import helpers


class OneRunFdpRunTest(absltest.TestCase):

  def test_run_small(self):
    out = tempfile.mkdtemp()
    cfg = one_run_fdp.OneRunFdpConfig(seed=1, noise_multipliers=(0.5, 2.0), num_canaries=400,
                                      repeats=2, paper_protocol=False)
    one_run_fdp.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "one_run_fdp")
    self.assertEqual(doc["flags"]["num_canaries"], 400)
    self.assertTrue(os.path.exists(os.path.join(out, "one_run_fdp.png")))
    rows = doc["results"]["per_sigma"]
    self.assertEqual([r["sigma"] for r in rows], [0.5, 2.0])
    for r in rows:
      self.assertAlmostEqual(r["exact_epsilon"], gdp.gaussian_epsilon(1e-5, 1 / r["sigma"]),
                             places=9)
      self.assertTrue(r["all_below_exact"])
      for m in one_run_fdp.METHODS:
        self.assertLen(r[m]["runs"], 2)
        self.assertLessEqual(r[m]["min"], r[m]["median"])
      # the Gaussian-curve analysis of the same guesses is the tighter one
      self.assertGreater(r["fdp_gdp"]["median"], r["steinke"]["median"])
    self.assertGreater(rows[0]["steinke"]["median"], 1.0)     # sigma = 0.5 carries signal
    # the paper columns hold Mahloujifar et al.'s printed Table 1 values
    self.assertEqual(doc["tables"][0]["rows"][0][6:8], [4.99, 8.16])
    for row in doc["tables"][0]["rows"]:      # the fractions of exact eps, last columns
      np.testing.assert_allclose(row[-3:], np.array(row[3:6]) / row[2], rtol=1e-12)
    self.assertNotIn("paper_protocol", doc["results"])
    # same seed, same numbers
    out2 = tempfile.mkdtemp()
    one_run_fdp.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])

  @pytest.mark.slow
  def test_paper_table(self):
    cfg = one_run_fdp.OneRunFdpConfig(seed=1, noise_multipliers=(1.0,), num_canaries=400,
                                      repeats=1, paper_scale=0.01, paper_grid_points=8)
    out = tempfile.mkdtemp()
    one_run_fdp.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    (row,) = doc["results"]["paper_protocol"]
    self.assertEqual(row["num_canaries"], 1000)
    self.assertEqual(row["fdp_gdp"]["paper"], 3.61)
    self.assertIn("NOT a valid", doc["tables"][1]["title"])

  @pytest.mark.slow
  def test_command_line(self):
    # One subprocess (about 4 s): the flags reach the config.
    p = helpers.run_experiment("one_run_fdp", "--num_canaries", "100", "--repeats", "1",
                               "--nopaper_protocol",
                               "--noise_multipliers", "1.0")
    self.assertEqual(p.returncode, 0, p.stderr)
    # Bad flag values: tests/experiments_import_test.py (_BAD_FLAGS).


if __name__ == "__main__":
  absltest.main()
