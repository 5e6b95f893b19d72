"""experiments/audit_pate.py on a tiny scale: record shape, bounds against exact eps, seed."""

import json
import os
import tempfile

import numpy as np
import pytest
from absl.testing import absltest

from dpjax.audit import pate_audit
from experiments import audit_pate


def _tiny(**kw):
  base = dict(seed=1, eps=(8.0,), queries=4, trials=2000, teachers=21,
              records_per_teacher=40, public=200, teacher_steps=60)
  base.update(kw)
  return audit_pate.AuditPateConfig(**base)


class AuditPateTest(absltest.TestCase):

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "teachers"):
      _tiny(teachers=2)
    with self.assertRaisesRegex(ValueError, "broken_noise"):
      _tiny(broken_noise=1.0)
    with self.assertRaisesRegex(ValueError, "trials"):
      _tiny(trials=5)

  @pytest.mark.slow
  def test_run_small(self):
    cfg = _tiny()
    out = tempfile.mkdtemp()
    audit_pate.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "audit_pate")
    self.assertTrue(os.path.exists(os.path.join(out, "audit_pate.png")))
    res = doc["results"]
    rows = {r["setting"]: r for r in res["rows"]}
    self.assertLen(rows, 5)
    info = res["teachers"]
    # Teachers that never saw the extra feature keep exactly zero weight on it.
    self.assertEqual(info["other_teachers_max_abs_weight_on_extra"], 0.0)
    self.assertEqual(info["teacher0_out_weight_on_extra"], 0.0)
    self.assertTrue(res["pairs"]["ood"]["flipped"])
    sigma = pate_audit.calibrate_sigma(8.0, 4, delta=1e-5)
    for name, r in rows.items():
      self.assertAlmostEqual(r["claimed_epsilon"], 8.0, delta=1e-6)
      self.assertAlmostEqual(r["sigma"], sigma, places=9)
      v_in, v_out = np.tile(r["votes_in"], (4, 1)), np.tile(r["votes_out"], (4, 1))
      np.testing.assert_array_equal(v_in.sum(1), 21)
      self.assertAlmostEqual(r["exact_epsilon"], pate_audit.exact_epsilon(
          v_in, v_out, sigma=sigma, delta=1e-5), places=9)
      self.assertLessEqual(r["exact_epsilon"], r["claimed_epsilon"])
      self.assertLessEqual(r["epsilon_lower"], r["ceiling"])
      if name.startswith("(c)"):
        self.assertLessEqual(r["epsilon_lower"], r["broken_exact_epsilon"])
        self.assertGreater(r["broken_exact_epsilon"], r["exact_epsilon"])
      else:
        self.assertLessEqual(r["epsilon_lower"], r["exact_epsilon"])
        self.assertLessEqual(r["exact_epsilon"], r["data_dependent_epsilon"] + 1e-9)
    self.assertEqual(rows["(a) crafted tie"]["votes_in"], [11, 10])
    out2 = tempfile.mkdtemp()
    audit_pate.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      doc2 = json.load(f)
    self.assertEqual(doc2["results"], doc["results"])   # CPU seconds: timing.json only
    with open(os.path.join(out2, "timing.json")) as f:
      self.assertGreater(json.load(f)["ensemble_cpu_seconds"], 0.0)


if __name__ == "__main__":
  absltest.main()
