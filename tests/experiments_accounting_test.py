"""Shrunken run of experiments/accounting.py."""

import json
import os
import tempfile

from absl.testing import absltest

from dpjax.accounting import gdp
from experiments import accounting as exp_accounting

_SMALL = exp_accounting.AccountingConfig(
    mu0=0.01, ks=(1, 100), total_delta=1e-5, total_epsilon=1.0, demo3_sigma=1.0,
    demo3_qs=(1.0, 0.01), demo3_steps=(1, 100), with_pld=False)


class AccountingExperimentTest(absltest.TestCase):

  def test_run_small(self):
    out = tempfile.mkdtemp()
    res = exp_accounting.run(_SMALL, out, progress=False, quiet=True)
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
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertLen(doc["tables"], 3)
    self.assertEqual(doc["flags"]["ks"], [1, 100])
    out2 = tempfile.mkdtemp()
    self.assertEqual(exp_accounting.run(_SMALL, out2, progress=False, quiet=True)["record"],
                     rec)   # deterministic

  def test_bad_config(self):
    for kw in (dict(mu0=0.0), dict(ks=()), dict(ks=(0,)), dict(total_delta=1.0),
               dict(total_epsilon=-1.0), dict(demo3_sigma=float("nan")),
               dict(demo3_qs=(0.0,)), dict(demo3_qs=(1.5,)), dict(demo3_steps=(1, -2)),
               dict(seed=-1)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          exp_accounting.AccountingConfig(**kw)


if __name__ == "__main__":
  absltest.main()
