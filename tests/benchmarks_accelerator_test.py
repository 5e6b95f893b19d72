"""benchmarks/accelerator.py: its steps' status, its file names, its RESULTS.md section,
and large_n's batch setting that it drives."""

import os
import tempfile

import pytest
from absl.testing import absltest

from benchmarks import accelerator
from benchmarks import large_n
from benchmarks import report


class StepTest(absltest.TestCase):

  def test_ok_failed_and_timed_out(self):
    ok = accelerator.run_step(["json.tool", "--help"], 60)
    self.assertEqual(ok["status"], "ok")
    self.assertIn("usage", ok["tail"])
    bad = accelerator.run_step(["json.tool", "/nonexistent/file.json"], 60)
    self.assertRegex(bad["status"], r"^failed \(exit [1-9]\d*\)$")
    slow = accelerator.run_step(["timeit", "-n", "1", "import time; time.sleep(30)"], 1)
    self.assertEqual(slow["status"], "timed out after 1 s")
    self.assertLess(slow["wall_s"], 20)

  def test_file_name(self):
    self.assertEqual(accelerator.file_name("NVIDIA H100 80GB HBM3"),
                     "accelerator_NVIDIA_H100_80GB_HBM3.json")
    self.assertEqual(accelerator.file_name("cpu"), "accelerator_cpu.json")


class LargeNBatchTest(absltest.TestCase):

  def tearDown(self):
    large_n.set_batch(256)
    super().tearDown()

  def test_set_batch_changes_steps_and_refuses_bad_values(self):
    large_n.set_batch(1024)
    self.assertEqual(large_n.steps_per_epoch(60_000), 59)   # round(60000 / 1024)
    for bad in (0, -3, 2.0, True, "256"):
      with self.assertRaisesRegex(ValueError, "batch"):
        large_n.set_batch(bad)


def _figures(ratio_256, ratio_1024, wall):
  return {
      "device": {"platform": "gpu", "kind": "Test GPU", "count": 1}, "small": False,
      "audit.status": "ok", "audit.wall_s": 12.0,
      "audit.M2000.dpjax_models_per_s": 5e5, "audit.M2000.speedup_vs_numpy": 40.0,
      "large_n.B256.status": "ok", "large_n.B256.n": 60_000,
      "large_n.B256.dp_over_nonprivate": ratio_256, "large_n.B256.dp_padded_epoch_s": 1.0,
      "large_n.B256.nonprivate_epoch_s": 1.0 / ratio_256,
      "large_n.B1024.status": "ok", "large_n.B1024.n": 60_000,
      "large_n.B1024.dp_over_nonprivate": ratio_1024,
      "main_job.status": "ok", "main_job.wall_s": wall, "main_job.trials": 10_000,
  }


class SectionTest(absltest.TestCase):

  def test_targets_met_and_not_met(self):
    with tempfile.TemporaryDirectory() as d:
      report.write("accelerator", _figures(1.5, 1.4, 8.0),
                   os.path.join(d, accelerator.file_name("Test GPU")))
      text = report.render(d)
    self.assertIn("## On Test GPU (gpu, 1 device(s))", text)
    self.assertIn("= 1.50x (target 1.6x: met)", text)      # B = 256
    self.assertIn("= 1.40x (target 1.3x: not met)", text)  # B = 1,024
    self.assertIn("(target 10 s on an H200-class GPU: met)", text)
    self.assertIn("M = 2,000: 500,000 models/s, 40.00x NumPy", text)

  def test_main_job_over_target(self):
    with tempfile.TemporaryDirectory() as d:
      report.write("accelerator", _figures(1.7, 1.2, 11.0),
                   os.path.join(d, accelerator.file_name("Test GPU")))
      text = report.render(d)
    self.assertIn("= 1.70x (target 1.6x: not met)", text)
    self.assertIn("= 1.20x (target 1.3x: met)", text)
    self.assertIn("H200-class GPU: not met)", text)


@pytest.mark.slow
class SmallRunTest(absltest.TestCase):
  """The whole script at toy sizes on this machine's CPU (a few CPU-minutes)."""

  def test_small_run_writes_every_step(self):
    with tempfile.TemporaryDirectory() as d:
      fig = accelerator.measure(d, small=True, batches=[256, 1024], limit_s=600)
    self.assertEqual(fig["audit.status"], "ok")
    self.assertEqual(fig["large_n.B16.status"], "ok")
    self.assertEqual(fig["large_n.B64.status"], "ok")
    self.assertEqual(fig["main_job.status"], "ok")
    self.assertGreater(fig["large_n.B16.dp_over_nonprivate"], 0)


if __name__ == "__main__":
  absltest.main()
