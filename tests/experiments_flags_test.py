"""Bad flag values end every experiment with one line and exit status 2 (experiments/_common.py).

A value the config refuses is caught while the flags are parsed; a value the config
accepts but the run cannot use (an unreachable target eps, a size the library refuses
before allocating) is caught around the run, and named with the flags given. With no
flag given the same error is a bug, and keeps its traceback.
"""

import os
import subprocess
import sys
import textwrap

from absl.testing import absltest

from tests import helpers

# Real experiments' bad flags (--seed 2**64, sizes the library refuses) are cases of
# tests/experiments_import_test.py's _BAD_FLAGS; this file checks app_run's contract on a
# toy experiment whose run refuses a value only once it uses it.

_TOY = textwrap.dedent("""
    import dataclasses
    from experiments import _common

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class ToyConfig(_common.ExperimentConfig):
      size: int = _common.option(3, "A size the run refuses above 10.")

    def run(cfg, out_dir, progress=True, quiet=False):
      if cfg.size > 10:
        raise ValueError(f"size_N must be <= 10, got {cfg.size}")
      if cfg.seed == 7:
        raise OverflowError("an overflow the run cannot handle")
      raise ValueError("a bug: the defaults fail")

    _common.app_run("toy", ToyConfig, run)
""")


def _toy(*args):
  return subprocess.run([sys.executable, "-c", _TOY, *args, "--out", "/nonexistent/toy"],
                        cwd=helpers.ROOT, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, PYTHONPATH=helpers.ROOT))


def _lines(p):
  return [l for l in p.stderr.splitlines() if l.strip()]


class FlagErrorsTest(absltest.TestCase):

  def test_run_time_refusal_is_one_line_with_exit_status_2(self):
    p = _toy("--size", "11")
    self.assertEqual(p.returncode, 2, p.stderr)
    self.assertLen(_lines(p), 1, p.stderr)
    self.assertIn("size_N must be <= 10, got 11", p.stderr)
    self.assertIn("flags given: --size=11", p.stderr)
    p = _toy("--seed", "7")
    self.assertEqual(p.returncode, 2, p.stderr)
    self.assertLen(_lines(p), 1, p.stderr)
    self.assertIn("an overflow the run cannot handle", p.stderr)

  def test_error_at_the_defaults_keeps_its_traceback(self):
    p = _toy()
    self.assertEqual(p.returncode, 1, p.stderr)
    self.assertIn("Traceback", p.stderr)
    self.assertIn("a bug: the defaults fail", p.stderr)


if __name__ == "__main__":
  absltest.main()
