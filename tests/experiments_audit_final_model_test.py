"""experiments/audit_final_model.py, tiny: record shape, bounds below the exact eps, seed,
the paper protocol."""

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
    with self.assertRaisesRegex(ValueError, "protocol"):
      _tiny(protocol="theirs")
    with self.assertRaisesRegex(ValueError, "paper_runs"):
      _tiny(paper_runs=4)
    with self.assertRaisesRegex(ValueError, "paper_seeds"):
      _tiny(paper_seeds=0)
    self.assertEqual(_tiny().protocol, "ours")        # the default keeps today's output

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
    # the seed reproduces; --protocol both adds the paper's record and table and
    # leaves ours unchanged
    out2 = tempfile.mkdtemp()
    afm.run(_tiny(protocol="both", paper_seeds=2, paper_runs=8), out2, progress=False,
            quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      doc2 = json.load(f)
    self.assertLen(doc2["results"].pop("paper_protocol"), 1)
    self.assertEqual(doc2["results"], doc["results"])
    self.assertEqual(doc2["tables"][:-1], doc["tables"])
    self.assertTrue(doc2["summary"].startswith(doc["summary"] + " Paper protocol"))

  @pytest.mark.slow
  def test_paper_protocol_small(self):
    cfg = _tiny(protocol="paper", paper_seeds=2, paper_runs=8)
    out = tempfile.mkdtemp()
    afm.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    res = doc["results"]
    self.assertNotIn("per_epsilon", res)
    (row,) = res["paper_protocol"]
    self.assertEqual(row["trials_per_seed"], [4, 4])
    self.assertLen(row["paper_epsilon"], 2)
    self.assertLen(row["strict_epsilon"], 2)
    self.assertEqual(row["published"], 7.21)           # MNIST, 1,000 records, eps = 10
    self.assertAlmostEqual(row["summed_learning_rate"], 2.0 / 120)
    # sigma by PLD: the claim is the exact eps
    self.assertAlmostEqual(row["exact_epsilon"], 10.0, delta=0.01)
    exact = accounting.dpsgd_epsilon(row["noise_multiplier"], 1.0, 2, 1e-5, accountant="pld")
    self.assertAlmostEqual(row["exact_epsilon"], exact, places=6)
    for v in row["strict_epsilon"] + [row["strict_pooled"]]:
      self.assertLessEqual(v, exact)
    for v in row["paper_epsilon"]:
      self.assertLessEqual(v, row["paper_ceiling"] + 1e-9)
    (table,) = doc["tables"]
    self.assertIn("NOT a valid 95% bound", table["note"])
    col = next(i for i, c in enumerate(table["columns"]) if c.startswith("published"))
    self.assertEqual(table["rows"][0][col], 7.21)

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
