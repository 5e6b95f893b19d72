"""Tests for experiments/audit.py at a shrunken scale: results, resume after interruption,
config checks (bad flag values: tests/experiments_import_test.py)."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from absl.testing import absltest

import numpy as np

from dpjax.audit import stats
from experiments import audit
from experiments import audit_canaries
from tests import helpers

_SMALL = audit.AuditConfig(trials=8, epsilons=(8.0,), chunk_models=4, base_size=20,
                           num_steps=40, companion_canaries=0, per_step=False)


def _run(cfg, out_dir, **kw):
  return audit.run(cfg, out_dir, progress=False, quiet=True, **kw)


class AuditExperimentTest(absltest.TestCase):

  def _tmp(self):
    d = tempfile.TemporaryDirectory()
    self.addCleanup(d.cleanup)
    return d.name

  @pytest.mark.slow  # three experiment runs (about 25 s)
  def test_resume_after_interruption_loses_and_repeats_nothing(self):
    d1 = self._tmp()
    d2 = self._tmp()
    # 2 settings (eps = 8, no noise) x 16 models / 4 per chunk = 8 chunks.
    part = _run(_SMALL, d1, max_new_chunks=3)
    self.assertFalse(part["complete"])
    self.assertEqual(part["chunks_trained"], 3)
    self.assertLen([f for f in os.listdir(os.path.join(d1, "chunks")) if f.endswith(".npz")], 3)
    rest = _run(dataclasses.replace(_SMALL, resume=True), d1)
    self.assertTrue(rest["complete"])
    self.assertEqual(rest["chunks_trained"], 5)          # only the missing ones
    fresh = _run(_SMALL, d2)
    self.assertEqual(fresh["chunks_trained"], 8)
    with open(rest["path"]) as f:
      a = json.load(f)["results"]
    with open(fresh["path"]) as f:
      b = json.load(f)["results"]
    self.assertEqual(a, b)                                # same seed => same numbers
    with self.assertRaisesRegex(ValueError, "resume"):    # never mix runs
      _run(dataclasses.replace(_SMALL, resume=True, trials=12), d1)
    self._check_rows(fresh, d2)

  @pytest.mark.slow
  def test_resume_after_kill_loses_and_repeats_nothing(self):
    d1 = self._tmp()
    d2 = self._tmp()
    # 2 settings (eps = 8, no noise) x 16 models / 4 per chunk = 8 chunks. Start the
    # run in a subprocess and SIGKILL it as soon as its first chunk is on disk (the
    # second setting still has to compile, so the kill always lands half-way).
    code = ("import dataclasses\nfrom experiments import audit\n"
            f"cfg = audit.AuditConfig(**{dataclasses.asdict(_SMALL)!r})\n"
            f"audit.run(cfg, {d1!r}, progress=False, quiet=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=helpers.ROOT,
                            env={**os.environ, "PYTHONPATH": helpers.ROOT},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chunks = os.path.join(d1, "chunks")
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
      if os.path.isdir(chunks) and any(f.endswith("_c0000.npz") for f in os.listdir(chunks)):
        break
      time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    self.assertEqual(proc.returncode, -signal.SIGKILL)   # killed, not finished
    done = [f for f in os.listdir(chunks) if f.endswith(".npz")]
    self.assertBetween(len(done), 1, 7)
    self.assertFalse(os.path.exists(os.path.join(d1, "results.json")))
    # a time-boxed resume trains one more chunk and stops, incomplete
    resume = dataclasses.replace(_SMALL, resume=True)
    part = _run(resume, d1, max_new_chunks=1)
    self.assertFalse(part["complete"])
    self.assertEqual(part["chunks_trained"], 1)
    rest = _run(resume, d1)
    self.assertTrue(rest["complete"])
    self.assertEqual(rest["chunks_trained"], 8 - len(done) - 1)   # only the missing ones
    fresh = _run(_SMALL, d2)
    self.assertEqual(fresh["chunks_trained"], 8)
    with open(rest["path"]) as f:
      a = json.load(f)["results"]
    with open(fresh["path"]) as f:
      b = json.load(f)["results"]
    self.assertEqual(a, b)                                # nothing lost or double-counted

  def _check_rows(self, out, d):
    rows = {r["setting"]: r for r in out["rows"]}
    for r in rows.values():
      for k in ("epsilon", "epsilon_lower_black_box", "epsilon_lower_white_box", "ceiling",
                "trials", "variant"):
        self.assertIn(k, r)
      self.assertEqual(r["trials"], 8)
      self.assertEqual(r["variant"], "correct")
      self.assertAlmostEqual(r["ceiling"], stats.perfect_attack_ceiling(8, 1e-5))
      # the white-box bound is the larger of its two Bonferroni parts
      self.assertEqual(r["epsilon_lower_white_box"],
                       max(r["white_box_fixed_threshold"], r["white_box_held_out_threshold"]))
    # without noise the white-box adversary never errs (P(canary never sampled in
    # 40 steps) = 0.8^40 ~ 1e-4), so it reaches its procedure's ceiling
    nn = rows["no_noise"]
    self.assertAlmostEqual(nn["epsilon_lower_white_box"], nn["ceiling_white_box"], places=9)
    e8 = rows["eps8"]
    self.assertLessEqual(e8["epsilon_lower_white_box"], e8["epsilon_pld"])
    self.assertTrue(os.path.exists(os.path.join(d, "audit_bounds.png")))
    self.assertTrue(os.path.exists(os.path.join(d, "audit_roc.png")))
    with open(out["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["flags"]["trials"], 8)
    self.assertEqual(list(doc["results"]["white_box_roc"]), ["eps8"])   # drawn from the record

  @pytest.mark.slow
  def test_a_swapped_chunk_never_changes_a_result(self):
    # Copy one stored chunk over another of the same run, then resume: the copy is
    # detected by its identity and recomputed (or refused), never used.
    import shutil  # pylint: disable=g-import-not-at-top
    from dpjax.audit import store  # pylint: disable=g-import-not-at-top
    d = self._tmp()
    cfg = dataclasses.replace(_SMALL, no_noise=False)        # 16 models / 4 = 4 chunks
    fresh = _run(cfg, d)
    with open(fresh["path"]) as f:
      want = json.load(f)["results"]
    chunks = os.path.join(d, "chunks")
    shutil.copyfile(os.path.join(chunks, "eps8_c0000.npz"), os.path.join(chunks, "eps8_c0002.npz"))
    with self.assertWarnsRegex(store.InvalidChunkWarning, "eps8_c0002.npz: it is chunk"):
      again = _run(dataclasses.replace(cfg, resume=True), d)
    self.assertEqual(again["chunks_trained"], 1)
    with open(again["path"]) as f:
      self.assertEqual(json.load(f)["results"], want)
    shutil.copyfile(os.path.join(chunks, "eps8_c0000.npz"), os.path.join(chunks, "eps8_c0003.npz"))
    with self.assertRaisesRegex(store.StoreError, "eps8_c0003.npz: it is chunk"):
      _run(dataclasses.replace(cfg, resume=True, invalid_chunks="refuse"), d)

  @pytest.mark.slow  # about 25 s; K > 1 chunks are also checked in audit_run_test

  def test_many_canaries_per_run(self):
    d = self._tmp()
    cfg = dataclasses.replace(_SMALL, canaries_per_run=3)
    out = _run(cfg, d)
    rows = {r["setting"]: r for r in out["rows"]}
    # 16 models, 8 pairs, each canary IN in 2 * round(0.25 * 8) = 4 models: 12 IN, 36 OUT
    for r in rows.values():
      self.assertEqual((r["white_box_trials_in"], r["white_box_trials_out"]), (12, 36))
      self.assertEqual(r["canaries_per_run"], 3)
      self.assertEqual(r["epsilon_lower_white_box"],
                       max(r["white_box_fixed_threshold"], r["white_box_held_out_threshold"]))
      self.assertIsNotNone(r["epsilon_lower_black_box"])
    e8 = rows["eps8"]
    self.assertLessEqual(e8["epsilon_lower_white_box"], e8["epsilon_pld"])
    self.assertAlmostEqual(e8["white_box_fraction_of_exact"],
                           e8["epsilon_lower_white_box"] / e8["epsilon_pld"])
    # no noise: every IN trial shows its canary (P(never sampled in 40 steps) ~ 1e-4
    # each), no OUT trial does: the procedure's ceiling for 12 IN / 36 OUT at 96%
    nn = rows["no_noise"]
    self.assertAlmostEqual(nn["ceiling_white_box"],
                           stats.epsilon_lower_bound(0, 36, 0, 12, 1e-5, 0.96), places=9)
    self.assertAlmostEqual(nn["epsilon_lower_white_box"], nn["ceiling_white_box"], places=9)
    # the K = 1 run's companion: the same claims with 3 canaries per run, its own table
    comp = _run(dataclasses.replace(_SMALL, companion_canaries=3, no_noise=False), self._tmp())
    self.assertEqual(comp["chunks_trained"], 4 + 4)
    (row,) = comp["record"]["companion"]["rows"]
    self.assertEqual((row["white_box_trials_in"], row["white_box_trials_out"]), (12, 36))
    self.assertEqual(comp["rows"][0]["white_box_trials_in"], 8)        # main table: K = 1
    self.assertIn("3 gradient canaries per run", comp["tables"][1].title)
    # experiments.audit_canaries alone: the companion's rows and table
    alone = audit_canaries.run(audit_canaries.CanariesConfig(trials=8, epsilons=(8.0,),
                                                             canaries_per_run=3),
                               self._tmp(), progress=False, quiet=True, base=_SMALL)
    self.assertEqual(json.dumps(alone["rows"], sort_keys=True),
                     json.dumps(comp["record"]["companion"]["rows"], sort_keys=True))
    self.assertEqual(alone["tables"][0].to_json(), comp["tables"][1].to_json())

  def test_per_step_rows_beside_unchanged_final_model_rows(self):
    cfg = dataclasses.replace(_SMALL, per_step=True, per_step_runs=2, per_step_canaries=8)
    with_ps = _run(cfg, self._tmp())
    without = _run(_SMALL, self._tmp())
    with open(with_ps["path"]) as f:
      doc = json.load(f)
    with open(without["path"]) as f:
      ref = json.load(f)
    res = doc["results"]
    rows = res.pop("per_step")["rows"]            # eps 8 only: no per-step row at sigma 0
    self.assertEqual(res, ref["results"])                 # existing keys and values unchanged
    self.assertEqual(doc["tables"][:len(ref["tables"])], ref["tables"])
    self.assertEqual([(r["setting"], r["sampling_prob"]) for r in rows],
                     [("eps8", cfg.sampling_prob), ("eps8", 1.0)])     # claim at q and q = 1
    for row in rows:
      self.assertLessEqual(row["bound"], row["epsilon_pld"])
      self.assertEqual(row["trials_in"] + row["trials_out"], 2 * 8 * 40)
      self.assertAlmostEqual(row["estimate_fraction_of_exact"],
                             row["estimate"] / row["epsilon_pld"])
      self.assertIn("i.i.d.", row["bound_assumption"])
    self.assertIn("subsampled Gaussian", rows[0]["estimate_assumption"])
    self.assertIn("Gaussian step (q = 1)", rows[1]["estimate_assumption"])
    self.assertLess(rows[1]["sigma"], rows[0]["sigma"] / cfg.sampling_prob * 1.01)
    table = doc["tables"][-1]
    self.assertIn("Per-step white-box audit", table["title"])
    self.assertEqual(table["rows"][0][:5], [cfg.sampling_prob, 8.0, rows[0]["sigma"],
                                           rows[0]["epsilon_pld"], rows[0]["estimate"]])
    with self.assertRaisesRegex(ValueError, "^per_step_canaries"):
      dataclasses.replace(cfg, per_step_canaries=1)
    # The rows' CPU times are in timing.json, not results.json (which a second run of the
    # same config reproduces byte for byte).
    with open(os.path.join(os.path.dirname(with_ps["path"]), "timing.json")) as f:
      timing = json.load(f)
    self.assertEqual([(t["sampling_prob"], t["epsilon"]) for t in timing["per_step_cpu_seconds"]],
                     [(r["sampling_prob"], r["epsilon"]) for r in rows])
    self.assertTrue(all(t["cpu_seconds"] > 0 for t in timing["per_step_cpu_seconds"]))
    self.assertGreater(timing["process_cpu_seconds"], 0)
    self.assertNotIn("cpu_seconds", json.dumps(doc))

  def test_threat_model_black_box_only(self):
    d = self._tmp()
    cfg = dataclasses.replace(_SMALL, threat_model="black_box", no_noise=False)
    out = _run(cfg, d)
    self.assertIsNone(out["rows"][0]["epsilon_lower_white_box"])
    self.assertIsNotNone(out["rows"][0]["epsilon_lower_black_box"])

  @pytest.mark.slow  # two runs of the program (imports and calibration, about 20 s)
  def test_store_faults_end_with_one_line_and_status_1(self):
    # A corrupt manifest and an output directory that cannot be created used to end
    # in raw tracebacks (JSONDecodeError, NotADirectoryError / PermissionError).
    flags = ["--trials", "8", "--epsilons", "8", "--companion_canaries", "0", "--noper_step"]

    def cli(*args):
      p = subprocess.run([sys.executable, "-m", "experiments.audit", *flags, *args],
                         cwd=helpers.ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=helpers.ROOT))
      lines = [l for l in p.stderr.splitlines() if l.strip() and "WARNING" not in l]
      self.assertEqual(p.returncode, 1, p.stderr)
      self.assertLen(lines, 1, p.stderr)
      self.assertNotIn("Traceback", p.stderr)
      return lines[0]

    d = self._tmp()
    os.makedirs(os.path.join(d, "chunks"))
    with open(os.path.join(d, "chunks", "manifest.json"), "w") as f:
      f.write('{"seed": 0')                               # truncated
    self.assertRegex(cli("--resume", "--out", d), r"^ERROR audit: .*manifest\.json")
    blocker = os.path.join(d, "a_file")
    open(blocker, "w").close()
    self.assertRegex(cli("--out", os.path.join(blocker, "out")), r"^ERROR audit: .*a_file")

  @pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity API")
  def test_one_thread_backend_changes_no_number(self):
    # Fresh processes: one starts the backend with one intra-op thread (the CPUs come
    # back afterwards, a second start is refused) and keeps freed heap memory for reuse,
    # one with the default pool and allocator; the same small DP-SGD audit chunk trains
    # to the same bits in both.
    code = """if True:
      import os, sys, json, numpy as np, jax
      from experiments import _common
      reuse = _common.reuse_freed_memory() if sys.argv[1] == "1" else None
      from dpjax import models
      from dpjax.audit import run
      from dpjax.data import canaries
      cpus = os.sched_getaffinity(0)
      first = _common.start_backend_one_thread() if sys.argv[1] == "1" else None
      again = _common.start_backend_one_thread() if first else None
      kd, kt = jax.random.split(jax.random.key(0))
      data = canaries.audit_data(kd, 30, unused_features=1)
      model = models.logistic_regression(data.num_features)
      spec = run.CanaryAuditSpec(trials=8, sampling_prob=0.2, num_steps=50, delta=1e-5)
      st = run.settings((4.0,), 0.2, 50, 1e-5, False)[0]
      var = run.audited_training(spec, st, int(data.x_NxD.shape[0]), model)
      out = run.train_chunk(kt, spec, st, data, var, model, 0, 16)
      print(json.dumps({"first": first, "again": again, "reuse": reuse,
                        "cpus_back": os.sched_getaffinity(0) == cpus,
                        "bits": [np.asarray(a, np.float64).tobytes().hex() for a in out]}))
    """
    res = {}
    for one in ("1", "0"):
      p = subprocess.run([sys.executable, "-c", code, one], cwd=helpers.ROOT,
                         capture_output=True, text=True, timeout=600)
      self.assertEqual(p.returncode, 0, p.stderr[-2000:])
      res[one] = json.loads(p.stdout.strip().splitlines()[-1])
    self.assertIs(res["1"]["first"], True)
    self.assertIs(res["1"]["again"], False)
    self.assertIs(res["1"]["reuse"], True)                # glibc (Linux)
    self.assertTrue(res["1"]["cpus_back"])
    self.assertEqual(res["1"]["bits"], res["0"]["bits"])

  def test_bad_config(self):
    for kw in (dict(trials=7), dict(trials=0), dict(epsilons=(-1.0,)), dict(epsilons=()),
               dict(threat_model="grey_box"), dict(variant="bogus"), dict(chunk_models=6),
               dict(delta=1.0), dict(confidence=0.0), dict(sampling_prob=1.5), dict(seed=-1),
               dict(trials=True), dict(canaries_per_run=0), dict(canary_in_fraction=1.0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, f"^{next(iter(kw))}"):
          audit.AuditConfig(**kw)


if __name__ == "__main__":
  absltest.main()
