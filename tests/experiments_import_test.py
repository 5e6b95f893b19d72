"""Every experiment module has the one shape of experiments/_common.py.

All import into one process (as pytest workers do) without absl flag clashes; each
has a config class deriving from `_common.ExperimentConfig`, `run(cfg, out_dir)` and
`main()`; its docstring gives the command and no history; and a bad flag value
(`--seed -1`, which every config rejects) ends the program with one stderr line and
exit status 2. One subprocess per experiment, run two at a time.
"""

import concurrent.futures
import dataclasses
import importlib
import inspect
import os
import re
import subprocess
import sys

from absl.testing import absltest

from experiments import _common

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIR = os.path.join(_ROOT, "experiments")
_NAMES = sorted(f[:-3] for f in os.listdir(_DIR)
                if f.endswith(".py") and not f.startswith("_") and f != "report.py")
# What a docstring must not carry: when or where a number was measured, or why it moved.
_HISTORY = re.compile(r"\bsession\b|\bissue\b|#\d+|\b20\d\d-\d\d\b|this machine|\d-core|"
                      r"under load|\bloaded\b|\bidle\b|older engine", re.IGNORECASE)


def _config_classes(module) -> list:
  return [v for v in vars(module).values()
          if inspect.isclass(v) and issubclass(v, _common.ExperimentConfig)
          and v is not _common.ExperimentConfig and v.__module__ == module.__name__]


def _bad_seed(name: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", f"experiments.{name}", "--seed", "-1"],
                        cwd=_ROOT, capture_output=True, text=True, timeout=120)


class ExperimentsImportTest(absltest.TestCase):

  def test_there_are_experiments(self):
    self.assertGreaterEqual(len(_NAMES), 10)

  def test_all_import_together_with_one_shape(self):
    mods = [importlib.import_module(f"experiments.{n}") for n in _NAMES]
    for n, m in zip(_NAMES, mods):
      with self.subTest(n):
        self.assertTrue(callable(getattr(m, "main", None)), f"{n} has no main()")
        self.assertTrue(callable(getattr(m, "run", None)), f"{n} has no run()")
        self.assertEqual(list(inspect.signature(m.run).parameters)[:2], ["cfg", "out_dir"], n)
        configs = _config_classes(m)
        self.assertLen(configs, 1, f"{n}: one config class deriving from ExperimentConfig")
        self.assertTrue(dataclasses.is_dataclass(configs[0]), n)
        self.assertEqual(configs[0]().seed, 0, n)    # defaults are valid; seed 0
        doc = m.__doc__ or ""
        self.assertIn("python -m experiments.", doc, f"{n}: no command in docstring")
        self.assertIsNone(_HISTORY.search(doc), f"{n}: history in the docstring")

  def test_bad_flag_is_one_line_and_exit_2(self):
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
      done = dict(zip(_NAMES, pool.map(_bad_seed, _NAMES)))
    for n, p in done.items():
      with self.subTest(n):
        self.assertEqual(p.returncode, 2, p.stderr)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        self.assertLen(lines, 1, p.stderr)
        self.assertIn("--seed=-1", lines[0])


if __name__ == "__main__":
  absltest.main()
