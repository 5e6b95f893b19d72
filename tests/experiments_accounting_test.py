"""Shrunken runs of experiments/accounting.py and experiments/published.py."""

import csv
import json
import os
import tempfile

from absl.testing import absltest

from dpjax.accounting import gdp
from experiments import _common
from experiments import accounting as exp_accounting
from experiments import published


class AccountingExperimentTest(absltest.TestCase):

  def test_run_small(self):
    out = tempfile.mkdtemp()
    kw = dict(mu0=0.01, ks=[1, 100], delta=1e-5, target_epsilon=1.0, sigma=1.0,
              qs=[1.0, 0.01], steps=[1, 100], use_pld=False, out_dir=out, progress=False)
    res = exp_accounting.run(**kw)
    rec = res["record"]
    for r in rec["a"]:
      # Every accountant is an upper bound on the exact eps; RDP beats basic for k > 1.
      for key in ("basic", "advanced", "optimal", "rdp_classic", "rdp", "rdp_int"):
        self.assertGreaterEqual(r[key], r["exact"] - 1e-9, key)
      self.assertLessEqual(r["rdp"], r["rdp_classic"])
      self.assertAlmostEqual(r["exact"], gdp.gaussian_epsilon(1e-5, 0.01 * r["k"] ** 0.5))
    for r in rec["b"]:
      for key in ("basic", "advanced", "optimal", "rdp_classic", "rdp"):
        self.assertGreaterEqual(r[key], r["exact"] * (1 - 1e-9), key)
    c = {(r["q"], r["T"]): r for r in rec["c"]}
    self.assertAlmostEqual(c[(0.01, 1)]["rdp_int"], 0.96, places=2)   # lecture
    self.assertLess(c[(0.01, 100)]["rdp"], c[(1.0, 100)]["rdp"])      # amplification
    self.assertTrue(os.path.exists(os.path.join(out, res["figures"][0])))
    _common.write_results(out, "accounting", flag_dict=kw, results=rec, tables=res["tables"],
                          quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertLen(doc["tables"], 3)
    self.assertEqual(exp_accounting.run(**kw)["record"], rec)   # deterministic


class PublishedExperimentTest(absltest.TestCase):

  def test_csv_has_sources(self):
    with open(published.CSV_PATH) as f:
      rows = list(csv.DictReader(f))
    self.assertGreaterEqual(len(rows), 15)
    for r in rows:
      self.assertTrue(r["source"].strip(), r)
      self.assertTrue(0 < float(r["sampling_prob"]) <= 1)

  def test_run_small(self):
    out = tempfile.mkdtemp()
    res = published.run(rows=published.load_rows()[:4], use_pld=False, use_dp_pld=False,
                        out_dir=out, progress=False)
    for r in res["record"]["rows"]:
      # Exact fractional orders on a superset grid: never above dp_accounting's RDP.
      self.assertLessEqual(r["ours_rdp"], r["dp_accounting_rdp"] + 1e-9)
      self.assertIsNotNone(r["published"])
    self.assertLen(res["tables"], 1)


if __name__ == "__main__":
  absltest.main()
