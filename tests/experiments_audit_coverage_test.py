"""experiments/audit_coverage.py on a shrunken configuration: record, tables, figure, seed.

The coverage statistics themselves are tested in tests/coverage_test.py.
"""

import json
import os
import tempfile

from absl.testing import absltest

from dpjax.audit import coverage
from experiments import audit_coverage

_TINY = dict(seed=4, audits=40, trials=(20,), epsilons=(2.0,), mechanisms=("randomized_response",),
             nulls=("gaussian",), front_door_audits=3, control_audits=30, control_trials=2000)


def _run(**kw):
  out = tempfile.mkdtemp()
  audit_coverage.run(audit_coverage.AuditCoverageConfig(**(_TINY | kw)), out, progress=False,
                     quiet=True)
  with open(os.path.join(out, "results.json")) as f:
    return out, json.load(f)


class AuditCoverageRunTest(absltest.TestCase):

  def test_run_small_writes_a_consistent_record(self):
    out, doc = _run()
    self.assertEqual(doc["experiment"], "audit_coverage")
    self.assertEqual(doc["flags"]["audits"], 40)
    self.assertTrue(os.path.exists(os.path.join(out, "coverage.png")))
    res = doc["results"]
    rows = res["rows"]
    # Two settings (null Gaussian, RR eps=2): 8 estimators at 40 audits and the
    # score_bounds entries (no fixed threshold given) at 3.
    front = [n for n in coverage.score_bounds_estimator().outputs]
    self.assertLen(rows, 2 * (8 + len(front)))
    self.assertEqual({r["mechanism"] for r in rows}, {"null (Gaussian)", "RR eps=2"})
    self.assertEqual({r["audits"] for r in rows if not r["estimator"].startswith("score")}, {40})
    self.assertEqual({r["audits"] for r in rows if r["estimator"].startswith("score")}, {3})
    for r in rows:
      self.assertEqual(r["violation_rate"], r["violations"] / r["audits"])
      self.assertLessEqual(r["violation_interval"][0], r["violation_rate"])
      self.assertGreaterEqual(r["violation_interval"][1], r["violation_rate"])
      self.assertEqual(r["assumption_met"],
                       r["kind"] == "gaussian" or "gdp" not in r["estimator"].split(".")[-1])
    # The summary flag is the conjunction of the rows' tests.
    ok = all(r["p_value"] >= res["level"] for r in rows if r["assumption_met"])
    self.assertEqual(res["all_within_nominal"], ok)
    self.assertEqual(res["control_caught"], res["control"]["p_value"] < res["level"])
    self.assertEqual(res["control"]["trials"], 2000)
    # The RR mechanism is audited at its exact eps (delta = 1e-5), the null at 0.
    true = {r["mechanism"]: r["true_epsilon"] for r in rows}
    self.assertAlmostEqual(true["RR eps=2"], coverage.Mechanism(
        "randomized_response", 2.0).true_epsilon(1e-5))
    self.assertEqual(true["null (Gaussian)"], 0.0)
    titles = [t["title"] for t in doc["tables"]]
    self.assertLen(titles, 2)
    self.assertLen(doc["tables"][0]["rows"], len(rows))
    # Same seed, same numbers.
    _, doc2 = _run()
    self.assertEqual(doc["results"], doc2["results"])

  def test_bad_config(self):
    for kw in (dict(audits=0), dict(trials=(1,)), dict(epsilons=(0.0,)), dict(delta=1.0),
               dict(confidence=1.0), dict(front_door_audits=-1), dict(control_trials=1),
               dict(mechanisms=("poisson",)), dict(nulls=()), dict(level=0.0), dict(seed=-1)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, f"^{next(iter(kw))}"):
          audit_coverage.AuditCoverageConfig(**kw)


if __name__ == "__main__":
  absltest.main()
