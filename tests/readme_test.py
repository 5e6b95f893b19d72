"""The README's "use dpjax in your own code" example runs and prints what the README says."""

import os
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example() -> tuple[str, str]:
  """(the example's code, the README text after it)."""
  with open(os.path.join(_ROOT, "README.md")) as f:
    text = f.read()
  section = text.split("## Use dpjax in your own code", 1)[1]
  m = re.search(r"```python\n(.*?)```(.*?)\n## ", section, re.S)
  return m.group(1), m.group(2)


class ReadmeExampleTest(absltest.TestCase):

  def test_example_runs_and_prints_what_the_readme_says(self):
    code, after = _example()
    env = dict(os.environ, PYTHONPATH=_ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=tempfile.mkdtemp(), env=env,
                         capture_output=True, text=True, timeout=600)
    self.assertEqual(out.returncode, 0, out.stderr)
    lines = out.stdout.strip().splitlines()
    self.assertLen(lines, 2, out.stdout)
    claimed = float(re.search(r"epsilon = ([\d.]+)", lines[0]).group(1))
    audited = float(re.search(r"epsilon >= ([\d.]+)", lines[1]).group(1))
    self.assertAlmostEqual(claimed, 8.0, delta=0.01)       # calibrated to the target
    self.assertGreater(audited, 0.0)
    self.assertLess(audited, claimed)                        # a lower bound, below the claim
    # The README quotes exactly these lines (so the prose cannot go stale).
    prose = " ".join(after.split())
    for line in lines:
      self.assertIn(" ".join(line.split()), prose)


if __name__ == "__main__":
  absltest.main()
