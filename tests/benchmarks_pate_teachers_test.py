"""benchmarks/pate_teachers.py: its RESULTS.md section, and the harness at a tiny size."""

import os
import sys
import tempfile
from unittest import mock

import pytest
from absl.testing import absltest

from benchmarks import pate_teachers
from benchmarks import report


class PateTeachersBenchmarkTest(absltest.TestCase):

  def test_section_renders_from_the_json(self):
    tmp = tempfile.mkdtemp()
    figures = {"teachers": [250], "per_teacher": 300, "steps": 300, "features": 6,
               "loop_teachers": 25, "M250.records": 75000, "M250.vmapped_s": 0.5,
               "M250.vmapped_first_call_s": 2.0, "M250.loop_timed_teachers": 25,
               "M250.loop_s": 20.0, "M250.loop_over_vmapped": 40.0,
               "M250.teachers_per_s_vmapped": 500.0, "M250.max_param_diff": 1e-7,
               "M250.xla_temp_bytes": 3 * 2 ** 20, "M250.peak_rss_bytes": 2 ** 30}
    with mock.patch.object(sys, "argv", ["pate_teachers.py", "--teachers", "250"]):
      report.write("pate_teachers", figures, os.path.join(tmp, "pate_teachers.json"))
    text = report.render(tmp)
    self.assertIn("python -m benchmarks.pate_teachers --teachers 250", text)
    self.assertIn("| 250 | 75,000 | 0.500 | 2.00 | 20.00 (25 timed) | 40.0× | 500 | 1.0e-07 | "
                  "3.0 | 1.00 |", text)

  # Compiles the fit for two sizes and both layouts (tens of CPU seconds).
  @pytest.mark.slow
  def test_measure_tiny(self):
    f = pate_teachers.measure([4, 8], per_teacher=20, loop_teachers=3, repeats=1)
    for m in (4, 8):
      self.assertEqual(f[f"M{m}.records"], 20 * m)
      self.assertEqual(f[f"M{m}.loop_timed_teachers"], 3)
      # The loop and the vmapped program fit the same teachers.
      self.assertLess(f[f"M{m}.max_param_diff"], 1e-4)
      self.assertAlmostEqual(f[f"M{m}.loop_s"], f[f"M{m}.loop_timed_s"] * m / 3)
      self.assertGreater(f[f"M{m}.vmapped_s"], 0.0)


if __name__ == "__main__":
  absltest.main()
