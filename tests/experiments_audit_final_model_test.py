"""experiments/audit_final_model.py, tiny: record shape, bounds below the exact eps, seed."""

import json
import os
import tempfile

import pytest
from absl.testing import absltest

from dpjax import accounting
from experiments import audit_final_model as afm


def _tiny(**kw):
  base = dict(seed=1, eps=(10.0,), runs=8, num_train=120, steps=2, mlp_hidden=4,
              pretrain_steps=5)
  base.update(kw)
  return afm.AuditFinalModelConfig(**base)


class AuditFinalModelTest(absltest.TestCase):

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "runs"):
      _tiny(runs=4)
    with self.assertRaisesRegex(ValueError, "model"):
      _tiny(model="resnet")
    with self.assertRaisesRegex(ValueError, "num_train"):
      _tiny(num_train=1500)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      _tiny(sampling_prob=0.0)

  @pytest.mark.slow
  def test_run_small(self):
    cfg = _tiny()
    out = tempfile.mkdtemp()
    afm.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "audit_final_model")
    self.assertTrue(os.path.exists(os.path.join(out, "audit_final_model.png")))
    (row,) = doc["results"]["per_epsilon"]
    exact = accounting.dpsgd_epsilon(row["noise_multiplier"], 1.0, 2, 1e-5, accountant="pld")
    self.assertAlmostEqual(row["exact_epsilon"], exact, places=6)
    self.assertLessEqual(abs(row["claimed_epsilon"] - 10.0), 0.01)
    # q = 1: the last-iterate pair is the Gaussian of the whole composition
    self.assertAlmostEqual(row["last_iterate_epsilon"], exact, delta=0.02)
    k = doc["results"]["gradient_canaries_per_run"]
    self.assertEqual(row["trials_record"], [4, 4])
    self.assertEqual(row["trials_gradient"], [4 * k, 4 * k])
    # a correct configuration: every bound at or below the exact eps, and no
    # adversary above what a perfect one certifies with the same trials
    self.assertTrue(row["all_below_exact"])
    for name, v in row["epsilon_lower"].items():
      self.assertLessEqual(v, exact, name)
      ceiling = row["ceiling_gradient"] if "gradient" in name else row["ceiling_record"]
      self.assertLessEqual(v, ceiling + 1e-9, name)
    for v in row["other_bounds"].values():
      self.assertLessEqual(v, exact)
    self.assertLessEqual(row["best_final_model_union"], exact)
    self.assertIn(row["best_final_model_union_by"], afm._FINAL)
    out2 = tempfile.mkdtemp()
    afm.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])

  @pytest.mark.slow
  def test_cnn_runs(self):
    cfg = _tiny(model="cnn", cnn_channels=(2,), num_train=60)
    out = tempfile.mkdtemp()
    res = afm.run(cfg, out, progress=False, quiet=True)["record"]
    (row,) = res["per_epsilon"]
    self.assertEqual(res["gradient_canaries_per_run"], 1)
    self.assertTrue(row["all_below_exact"])


if __name__ == "__main__":
  absltest.main()
