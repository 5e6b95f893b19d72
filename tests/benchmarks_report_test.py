"""benchmarks/report.py: RESULTS.md is rendered from the benchmarks' JSON files only."""

import json
import os
import sys
import tempfile
from unittest import mock

from absl.testing import absltest

from benchmarks import report


class ReportTest(absltest.TestCase):

  def test_write_then_render(self):
    tmp = tempfile.mkdtemp()
    with mock.patch.object(sys, "argv", ["dpsgd.py", "--sizes", "128"]):
      path = report.write("dpsgd", {
          "audit_workload.M128.numpy_models_per_s": 1000.0,
          "audit_workload.M128.dpjax_models_per_s": 3000.0,
          "audit_workload.M128.speedup_vs_numpy": 3.0,
          "audit_workload.M128.fraction_of_peak": 0.25,
          "audit_workload.M128.generic_slowdown_vs_fast": 1.1,
          "audit_workload.matmul_peak.peak_gflops": 300.0,
          "audit_workload.peak_rss_bytes_largest": 2 ** 30,
          "mlp.nonprivate_ex_per_s": 400e3, "mlp.naive_ex_per_s": 6e3,
          "mlp.generic_ex_per_s": 250e3, "mlp.ghost_ex_per_s": 380e3,
          "mlp.overhead_vs_nonprivate": 1.05}, os.path.join(tmp, "dpsgd.json"))
    with open(path) as f:
      doc = json.load(f)
    self.assertEqual(doc["command"], "python -m benchmarks.dpsgd --sizes 128")
    self.assertIn("cpu_count", doc["environment"])
    text = report.render(tmp)
    self.assertIn("| 128 | 1,000 | 3,000 | 3.00× | 25 % | 1.10 | – | – |", text)
    self.assertIn("| MLP 64→256→256→10 | 400,000 | 6,000 | 250,000 | 380,000 | – | – | 1.05× |",
                  text)
    self.assertIn("1.00 GiB", text)
    self.assertNotIn("Accountants", text)          # no accountants.json in tmp

  def test_dpsgd_stand_in_rng_and_main_job(self):
    tmp = tempfile.mkdtemp()
    report.write("dpsgd", {
        "audit_workload.M2000.numpy_models_per_s": 1000.0,
        "audit_workload.M2000.dpjax_models_per_s": 2500.0,
        "audit_workload.M2000.speedup_vs_numpy": 2.5,
        "audit_workload.M2000.fraction_of_peak": 0.2,
        "audit_workload.M2000.stand_in_rng_speedup_vs_numpy": 5.0,
        "audit_workload.M2000.rng_share_of_fast": 0.5,
        "main_job.trials": 10000, "main_job.cpu_s": 200.0, "main_job.user_s": 180.0,
        "main_job.sys_s": 20.0, "main_job.wall_s": 300.0,
        "main_job.load_average_1min_at_end": 2.5}, os.path.join(tmp, "dpsgd.json"))
    text = report.render(tmp)
    self.assertIn("| 2,000 | 1,000 | 2,500 | 2.50× | 20 % | – | – | – | 5.00× | 50 % |", text)
    self.assertIn("200 CPU-s (user 180 + sys 20), 300 s wall", text)
    self.assertIn("target under 60 CPU-s (not met)", text)

  def test_accountants_section(self):
    tmp = tempfile.mkdtemp()
    row = {"sigma": 1.0, "q": 0.01, "steps": 10000, "delta": 1e-5, "ours_rdp_eps": 6.7,
           "rdp_speedup": 20.0, "ours_pld_eps": 6.1877, "dp_pld_eps": 6.1878,
           "pld_speedup": 4.5, "ours_pld_minus_ref": 2e-5, "dp_pld_minus_ref": 3e-5,
           "pld_fixed_grid_speedup": 6.6}
    report.write("accountants", [row], os.path.join(tmp, "accountants.json"))
    text = report.render(tmp)
    self.assertIn("| 1, 0.01, 10,000, 1e-05 | 6.7000 | 20.0× | 6.187700 | 6.187800 | 4.50× "
                  "(target ≥ 1×: met) |",
                  text)

  def test_audit_canaries_section(self):
    tmp = tempfile.mkdtemp()
    fig = {"audit_canaries.canaries": 100}
    fig.update({"audit_canaries.M500.single_s": 1.0, "audit_canaries.M500.multi_s": 2.5,
                "audit_canaries.M500.multi_fixed_s": 4.0,
                "audit_canaries.M500.multi_over_single": 2.5,
                "audit_canaries.M500.fixed_multi_over_single": 4.0,
                "audit_canaries.M500.trials_per_s_single": 500.0,
                "audit_canaries.M500.trials_per_s_multi": 20_000.0,
                "audit_canaries.M500.trials_per_s_multi_fixed": 12_500.0})
    report.write("audit_canaries", fig, os.path.join(tmp, "audit_canaries.json"))
    text = report.render(tmp)
    self.assertIn("| 500 | fixed-gradient canaries | 1.00 | 4.00 | 4.00× (target ≤ 3×: missed) "
                  "| 500 | 12,500 |", text)
    self.assertIn("| 500 | parameter-leaf canaries | 1.00 | 2.50 | 2.50× (target ≤ 3×: met) "
                  "| 500 | 20,000 |", text)

  def test_compile_time_section(self):
    tmp = tempfile.mkdtemp()
    fig = {"n_mlp": 60000, "models_audit": 2000, "target": 2.0, "mlp.compile_ratio": 1.5,
           "mlp.compile_cpu_ratio": 2.5, "mlp.run_ratio": 2.0, "audit.compile_ratio": 3.0}
    for w in ("mlp", "audit"):
      for p, c in (("nonprivate", 2.0), ("dp", 3.0 if w == "mlp" else 6.0)):
        fig.update({f"{w}.{p}.lower_s": 0.5, f"{w}.{p}.compile_s": c, f"{w}.{p}.hlo_ops": 1234})
      fig[f"{w}.dp.compile_cpu_s"] = 5.0
    report.write("compile_time", fig, os.path.join(tmp, "compile_time.json"))
    report.write("compile_time", {"mlp.compile_ratio": 7.0, "mlp.compile_cpu_ratio": 6.5,
                                  "label": "old engine"},
                 os.path.join(tmp, "compile_time_before.json"))
    text = report.render(tmp)
    self.assertIn("| MLP, n = 60,000, one model (padded Poisson batches, ghost) | 0.50 | 2.00 | "
                  "– | 1,234 | 0.50 | 3.00 | 5.00 | 1,234 | 1.50× (met) | 2.50× (missed) | "
                  "2.00× | 7.00× / 6.50× |", text)
    self.assertIn("| audit workload, M = 2,000 (GLM, unrolled steps) | 0.50 | 2.00 | – | 1,234 | "
                  "0.50 | 6.00 | 5.00 | 1,234 | 3.00× (missed) | – | – | – |", text)
    self.assertIn("(old engine: `python -m benchmarks.compile_time", text)
    self.assertNotIn("## Compile time (`benchmarks/compile_time.py`)\n\n## Compile", text)
    self.assertEqual(text.count("## Compile time"), 1)   # the earlier run is no section of its own

  def test_mf_section(self):
    tmp = tempfile.mkdtemp()
    fig = {"target_ratio": 1.2, "bands": [1, 64], "worst_ratio": 2.5,
           "audit": {"models": 2000, "dpsgd_s_per_step": 0.010, "mf_b1_s_per_step": 0.008,
                     "mf_b1_ratio": 0.8, "mf_b64_s_per_step": 0.025, "mf_b64_ratio": 2.5}}
    report.write("mf", fig, os.path.join(tmp, "mf.json"))
    text = report.render(tmp)
    self.assertIn("| audit workload, M = 2,000 | 1 | Poisson | 8.00 | 10.00 | 0.80× | met |",
                  text)
    self.assertIn("| audit workload, M = 2,000 | 64 | Poisson | 25.00 | 10.00 | 2.50× | missed |",
                  text)
    self.assertIn("worst ratio 2.50×", text)


if __name__ == "__main__":
  absltest.main()
