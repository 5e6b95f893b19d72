"""experiments/audit_scores.py: both file formats, every input error, the built-in example.

The estimators themselves are tested in tests/estimators_test.py; here: the file
readers, that the bounds written are exactly `score_bounds` on the file's arrays,
the falsification verdict, and that a bad input leaves no output behind.
"""

import json
import os
import tempfile

import numpy as np
from absl.testing import absltest

from dpjax.accounting import gdp
from dpjax.audit import score_audit, stats
from experiments import audit_scores
from tests import helpers


def _read(out):
  with open(os.path.join(out, "results.json")) as f:
    return json.load(f)


def _write_csv(path, s_in, s_out, labels=("1", "0"), header="score,member"):
  """Rows alternate IN and OUT, each side in its own order (the readers keep it)."""
  lines = [header]
  for i in range(max(s_in.size, s_out.size)):
    if i < s_in.size:
      lines.append(f"{float(s_in[i])!r},{labels[0]}")
    if i < s_out.size:
      lines.append(f"{float(s_out[i])!r},{labels[1]}")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")


class AuditScoresTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.default_rng(11)
    cls.s_in = rng.normal(1.5, 1.0, 400)
    cls.s_out = rng.normal(0.0, 1.0, 300)
    cls.dir = tempfile.mkdtemp()
    cls.npz = os.path.join(cls.dir, "scores.npz")
    np.savez(cls.npz, in_scores=cls.s_in, out_scores=cls.s_out)

  def _run(self, **kw):
    out = os.path.join(tempfile.mkdtemp(), "out")
    audit_scores.run(audit_scores.AuditScoresConfig(**kw), out, progress=False, quiet=True)
    return out, _read(out)

  def test_npz_bounds_equal_score_bounds_on_the_same_arrays(self):
    out, doc = self._run(scores=self.npz, claimed_epsilon=1.0, delta=1e-5, confidence=0.9,
                         threshold=1.0, seed=4)
    want = score_audit.score_bounds(self.s_in, self.s_out, delta=1e-5, confidence=0.9,
                                   claimed_epsilon=1.0, threshold=1.0, seed=4)
    res = doc["results"]
    self.assertIn("clopper_pearson_fixed", want)
    for name, b in want.items():
      self.assertEqual(res[f"epsilon_lower_{name}"], b.epsilon_lower, name)
      self.assertEqual(res["estimators"][name]["assumptions"], b.assumptions, name)
      self.assertEqual(res["estimators"][name]["details"]["falsifies_claim"],
                       b.epsilon_lower > 1.0, name)
      self.assertEqual(res["estimators"][name]["valid_only_if_gdp"],
                       name in ("gdp", "fdp_one_run_gdp"), name)
    # The verdict is the Bonferroni-valid maximum's, never a GDP-only bound's.
    self.assertEqual(res["falsified"], want["best"].epsilon_lower > 1.0)
    self.assertEqual(res["falsified_if_gdp"],
                     max(b.epsilon_lower for b in want.values()) > 1.0)
    self.assertEqual(res["source"]["num_in"], 400)
    self.assertEqual(res["source"]["num_out"], 300)
    self.assertTrue(os.path.exists(os.path.join(out, "roc.png")))
    # AUC of N(1.5, 1) vs N(0, 1) is Phi(1.5 / sqrt 2) = 0.856; sd ~ 0.015 at these sizes.
    self.assertAlmostEqual(res["roc"]["auc"], 0.856, delta=0.06)
    lo, hi = np.array(res["roc"]["tpr_lower"]), np.array(res["roc"]["tpr_upper"])
    self.assertTrue(np.all(lo <= np.array(res["roc"]["tpr_empirical"]) + 1e-12))
    self.assertTrue(np.all(np.array(res["roc"]["tpr_empirical"]) <= hi + 1e-12))

  def test_csv_gives_the_same_results_as_npz(self):
    path = os.path.join(self.dir, "scores.csv")
    _write_csv(path, self.s_in, self.s_out, labels=("true", "False"),
               header="run,score,member")
    # An extra leading column: rewrite with a run id in front.
    with open(path) as f:
      lines = f.read().splitlines()
    with open(path, "w") as f:
      f.write("\n".join([lines[0]] + [f"{i},{l}" for i, l in enumerate(lines[1:])]) + "\n")
    _, a = self._run(scores=self.npz, claimed_epsilon=2.0)
    _, b = self._run(scores=path, claimed_epsilon=2.0)
    ra, rb = a["results"], b["results"]
    self.assertEqual(rb["source"]["format"], "csv")
    ra.pop("source")
    rb.pop("source")
    self.assertEqual(ra, rb)

  def test_separable_scores_falsify_a_small_claim(self):
    path = os.path.join(self.dir, "sep.npz")
    rng = np.random.default_rng(0)     # trials in an order that does not depend on scores
    np.savez(path, in_scores=rng.permutation(500) + 1000.0,
             out_scores=rng.permutation(500).astype(np.int64))
    _, doc = self._run(scores=path, claimed_epsilon=0.5)
    self.assertTrue(doc["results"]["falsified"])
    # Separable: the split's threshold, chosen on the first 250 per side, makes at most a
    # few errors on the other 250, so the bound is near the ceiling of 0 errors,
    # ln((1 - delta - u) / u) with u = 1 - 0.025^(1/250), and never above it.
    u = 1 - 0.025 ** (1 / 250)
    cp = doc["results"]["estimators"]["clopper_pearson"]
    eps = doc["results"]["epsilon_lower_clopper_pearson"]
    d = cp["details"]
    self.assertLessEqual(d["false_positives"] + d["false_negatives"], 3)
    self.assertAlmostEqual(eps, stats.epsilon_lower_bound(
        d["false_positives"], d["negatives"], d["false_negatives"], d["positives"], 1e-5,
        0.95), delta=1e-12)
    self.assertEqual((d["negatives"], d["positives"]), (250, 250))
    self.assertLessEqual(eps, float(np.log((1 - 1e-5 - u) / u)) + 1e-12)
    _, none = self._run(scores=path)
    self.assertIsNone(none["results"]["falsified"])
    self.assertIsNone(none["results"]["claimed_epsilon"])

  def test_every_bad_file_is_refused_with_its_problem_and_no_output(self):
    d = tempfile.mkdtemp()

    def f(name, text=None, **arrays):
      p = os.path.join(d, name)
      if arrays:
        np.savez(p, **arrays)
      elif text is not None:
        with open(p, "w", encoding="utf-8") as fh:
          fh.write(text)
      return p

    ok = np.array([0.0, 1.0, 2.0])
    cases = [
        (f("a.npz", in_scores=ok), r"missing array\(s\) out_scores"),
        (f("b.npz", in_scores=ok, out_scores=np.array([0.0, np.nan])),
         r"out_scores has 1 non-finite.*index 1"),
        (f("c.npz", in_scores=np.array([1.0, np.inf]), out_scores=ok),
         r"in_scores has 1 non-finite"),
        (f("d.npz", in_scores=np.array([1.0]), out_scores=ok), r"in_scores needs at least two"),
        (f("e.npz", in_scores=np.array(["a", "b"]), out_scores=ok),
         r"in_scores must be numeric"),
        (f("f.npz", in_scores=np.array([True, False]), out_scores=ok), r"in_scores must be numeric"),
        (f("g.npz", in_scores=np.ones((2, 2)), out_scores=ok), r"1-dimensional"),
        (f("h.npz", "not a zip"), r"unreadable \.npz"),
        (f("i.csv", "score,member\n1,1\n2,1\nx,0\n0,0\n"), r"row 4: score 'x' is not a number"),
        (f("j.csv", "score,member\n1,1\n2,1\nnan,0\n0,0\n"), r"row 4: score 'nan' is not finite"),
        (f("k.csv", "score,label\n1,1\n2,0\n"), r"missing column\(s\) member"),
        (f("l.csv", "member\n1\n0\n"), r"missing column\(s\) score"),
        (f("m.csv", "score,member\n1,1\n2,1\n0,0\n"), r"member = 0 scores needs at least two"),
        (f("n.csv", "score,member\n1,1\n2,yes\n0,0\n"), r"row 3: member 'yes' is not one of"),
        (f("o.csv", "score,member\n1,1\n2\n"), r"row 3 has 1 field"),
        (f("p.csv", ""), r"empty file"),
        (f("q.csv", "1.0,1\n2.0,1\n0.0,0\n0.5,0\n"), r"missing column\(s\) score, member"),
        (f("r.csv", "score,member\n1,1\n"), r"member = 1 scores needs at least two"),
        (os.path.join(d, "absent.npz"), r"no such file"),
        (f("s.txt", "score,member\n"), r"unknown format '\.txt'"),
        (f("t", "score,member\n"), r"unknown format '\(no extension\)'"),
        (f("v.csv", "score,score,member\n1,1,1\n2,2,1\n0,0,0\n0,0,0\n"),
         r"column\(s\) score appear more than once"),
        (f("w.csv", "score,member\n1_000,1\n2,1\n0,0\n1,0\n"), r"row 2: score '1_000' is not"),
        (f("x.csv", "score,member\n\uff11,1\n2,1\n0,0\n1,0\n"), r"row 2: score '\uff11' is not"),
    ]
    with open(os.path.join(d, "u.csv"), "wb") as fh:
      fh.write(b"score,member\n\xff\xfe,1\n")
    cases.append((os.path.join(d, "u.csv"), r"unreadable \.csv"))
    for path, pattern in cases:
      with self.subTest(os.path.basename(path)):
        out = os.path.join(tempfile.mkdtemp(), "out")
        with self.assertRaisesRegex(ValueError, "^scores: " + ".*" + pattern):
          audit_scores.run(audit_scores.AuditScoresConfig(scores=path), out, quiet=True)
        self.assertFalse(os.path.exists(out))

  def test_excel_byte_order_mark_is_read(self):
    path = os.path.join(tempfile.mkdtemp(), "excel.csv")
    with open(path, "w", encoding="utf-8-sig") as fh:
      fh.write("score,member\n2.5,1\n3,1\n-1e-2,0\n+.5,0\n")
    s_in, s_out = audit_scores.load_scores(path)
    np.testing.assert_array_equal(s_in, [2.5, 3.0])
    np.testing.assert_array_equal(s_out, [-0.01, 0.5])

  def test_command_line_error_is_one_line_and_writes_nothing(self):
    path = os.path.join(tempfile.mkdtemp(), "bad.csv")
    with open(path, "w") as fh:
      fh.write("score,member\n1,1\n2,1\n3,0\n")
    p = helpers.run_experiment("audit_scores", "--scores", path, "--delta", "1e-6")
    self.assertEqual(p.returncode, 2, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    self.assertLen(lines, 1, p.stderr)
    self.assertIn("member = 0 scores needs at least two scores, got 1", lines[0])
    out = p.args[p.args.index("--out") + 1]
    self.assertEqual(os.listdir(out), [])

  def test_builtin_example_is_reproducible_and_its_file_audits_the_same(self):
    out, doc = self._run(seed=5, demo_trials=400, demo_mu=1.5)
    res = doc["results"]
    true_eps = gdp.gaussian_epsilon(1e-5, 1.5)
    self.assertEqual(res["source"]["true_epsilon"], true_eps)
    self.assertEqual(res["claimed_epsilon"], true_eps)        # claims its exact eps
    for name in score_audit.SCORE_BOUND_NAMES:
      if name != "clopper_pearson_fixed":
        self.assertIn(f"epsilon_lower_{name}", res)
    # Scores are N(mu, 1) vs N(0, 1) from the seed: their sample means say so.
    with np.load(os.path.join(out, "demo_scores.npz")) as z:
      s_in, s_out = z["in_scores"], z["out_scores"]
    self.assertEqual((s_in.size, s_out.size), (400, 400))
    self.assertAlmostEqual(s_in.mean() - s_out.mean(), 1.5, delta=5 * np.sqrt(2 / 400))
    self.assertAlmostEqual(s_out.std(), 1.0, delta=0.15)
    # Same seed, same results; the written file audited as a user's gives the same bounds.
    _, again = self._run(seed=5, demo_trials=400, demo_mu=1.5)
    self.assertEqual(res, again["results"])
    _, from_file = self._run(scores=os.path.join(out, "demo_scores.npz"), seed=5,
                             claimed_epsilon=true_eps)
    for name in score_audit.SCORE_BOUND_NAMES:
      key = f"epsilon_lower_{name}"
      if key in res:
        self.assertEqual(from_file["results"][key], res[key], name)
    _, other = self._run(seed=6, demo_trials=400, demo_mu=1.5)
    self.assertNotEqual(other["results"]["roc"]["auc"], res["roc"]["auc"])

  def test_bad_config(self):
    for kw in (dict(delta=1.0), dict(delta=0.0), dict(confidence=1.0), dict(claimed_epsilon=-1.0),
               dict(claimed_epsilon=float("nan")), dict(threshold=float("inf")),
               dict(demo_mu=0.0), dict(demo_trials=1), dict(seed=-1)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, f"^{next(iter(kw))}"):
          audit_scores.AuditScoresConfig(**kw)


if __name__ == "__main__":
  absltest.main()
