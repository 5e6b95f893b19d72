"""experiments/user_level.py: a tiny in-process run (results, the group-privacy closed
form), and with the slow tests the command line, the audit's claims at the default
scale and reproducibility."""

import json
import math
import os
import tempfile

from absl.testing import absltest
import pytest

from experiments import user_level
from tests import helpers

_TINY = dict(epsilons=(2.0,), num_customers=20, test_customers=20, num_steps=3, seeds=1,
             audit_customers=10, audit_models=8, audit_steps=3, seed=5)


class UserLevelExperimentTest(absltest.TestCase):

  # End-to-end run (tens of CPU seconds): behind slow for the CI budget; ./run.sh all runs
  # the experiment at its default scale.
  @pytest.mark.slow
  def test_tiny_run_writes_results(self):
    # In-process (the jax import and compiled programs are shared with the other
    # tests); the command line is exercised by the slow test below.
    out = tempfile.mkdtemp()
    user_level.run(user_level.UserLevelConfig(**_TINY), out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "user_level")
    self.assertEqual(doc["flags"]["audit_models"], 8)
    self.assertTrue(os.path.exists(os.path.join(out, "canary_scores.png")))
    res = doc["results"]
    # Group privacy rows are the closed form (k eps, k e^((k-1) eps) delta).
    for row in res["group_privacy"]:
      e, k = row["epsilon"], row["loans"]
      self.assertAlmostEqual(row["group_epsilon"], k * e)
      self.assertAlmostEqual(row["group_delta"], min(1.0, k * math.exp((k - 1) * e) * 1e-5))
    lecture_row = [r for r in res["group_privacy"] if (r["epsilon"], r["loans"]) == (3.0, 5)]
    self.assertEqual(lecture_row[0]["group_epsilon"], 15.0)   # the lecture's "about 15"
    self.assertEqual(lecture_row[0]["group_delta"], 1.0)       # 5 e^12 1e-5 > 1
    for unit in ("example", "user"):
      a = res["audit"][unit]
      self.assertEqual(a["models_in"] + a["models_out"], 16)
      self.assertGreaterEqual(a["bounds"]["clopper_pearson"], 0.0)
      self.assertLessEqual(a["epsilon"], 1.0 + 1e-6)       # calibrated to audit_epsilon
      for acc, _ in res["accuracy"]["accuracy"][unit]:
        self.assertTrue(0.0 <= acc <= 1.0)
    # Example level counts loans, user level customers (plus the canary customer).
    self.assertEqual(res["audit"]["user"]["dataset_size"], 11)
    self.assertEqual(res["audit"]["example"]["dataset_size"], res["audit"]["num_records"])

  def test_bad_config(self):
    for kw in (dict(epsilons=(0.0,)), dict(canary_loans=0), dict(audit_models=2),
               dict(sampling_prob=1.5), dict(num_customers=3)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, f"^{next(iter(kw))}"):
          user_level.UserLevelConfig(**kw)

  @pytest.mark.slow
  def test_command_line(self):
    args = [f"--{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
            for k, v in _TINY.items()]
    proc = helpers.run_experiment("user_level", *args)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    out = proc.args[proc.args.index("--out") + 1]
    with open(os.path.join(out, "results.json")) as f:
      self.assertEqual(json.load(f)["flags"]["audit_models"], 8)

  @pytest.mark.slow
  def test_default_scale_audit_claims_and_reproducibility(self):
    cfg = user_level.UserLevelConfig()
    a = user_level.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)["record"]
    # The example-level model leaks more than its eps about the canary customer; the
    # user-level model does not (its lower bound is a valid bound, so it cannot).
    self.assertTrue(a["example_level_exceeds_epsilon"])
    self.assertTrue(a["user_level_within_epsilon"])
    b = user_level.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)["record"]
    self.assertEqual(json.dumps(a["audit"]["example"]["bounds"]),
                     json.dumps(b["audit"]["example"]["bounds"]))
    self.assertEqual(a["accuracy"]["accuracy"], b["accuracy"]["accuracy"])


if __name__ == "__main__":
  absltest.main()
