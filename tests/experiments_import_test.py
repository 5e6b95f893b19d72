"""Every experiment module imports into one process (as pytest workers do) and
exposes a `run` function and a `main` entry point; no absl flag clashes."""

import importlib
import os

from absl.testing import absltest, parameterized

_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments")
_NAMES = sorted(f[:-3] for f in os.listdir(_DIR)
                if f.endswith(".py") and not f.startswith("_") and f != "report.py")


class ExperimentsImportTest(parameterized.TestCase):

  def test_there_are_experiments(self):
    self.assertGreaterEqual(len(_NAMES), 10)

  def test_all_import_together(self):
    mods = [importlib.import_module(f"experiments.{n}") for n in _NAMES]
    for n, m in zip(_NAMES, mods):
      with self.subTest(n):
        self.assertTrue(callable(getattr(m, "main", None)), f"{n} has no main()")
        self.assertTrue(callable(getattr(m, "run", None)), f"{n} has no run()")
        self.assertIn("python -m experiments.", m.__doc__ or "", f"{n}: no command in docstring")


if __name__ == "__main__":
  absltest.main()
