"""Every experiment module has the one shape of experiments/_common.py.

All import into one process (as pytest workers do) without absl flag clashes; each
has a config class deriving from `_common.ExperimentConfig`, `run(cfg, out_dir)` and
`main()`; its docstring gives the command and no history; and a bad flag value
(`--seed -1`, which every config rejects, and the experiment-specific values in
`_BAD_FLAGS`) ends the program with one stderr line and exit status 2.

The bad-flag check runs `python -m experiments.<name> <bad flag> --out <tmp>` for
every case from one subprocess: it imports every experiment module (and so jax,
dpjax and matplotlib) once, then forks one child per case that runs the module as
`__main__` through runpy (what `python -m` does) with its stderr in a file. Forking
is safe only while JAX's runtime (and its threads) has not started: if importing an
experiment starts it, the check runs one subprocess per case instead.
"""

import dataclasses
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

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


# Flag values an experiment must reject besides --seed -1: (arguments, text that the
# one stderr line must contain).
_BAD_FLAGS = {
    "audit": [(["--trials", "7"], "--trials=7"), (["--epsilons", "-1"], "--epsilons"),
              (["--variant", "bogus"], "--variant"),
              (["--epsilons", "1e6"], "already met"),         # no sigma in the range
              (["--seed", str(2 ** 64)], "--seed")],
    "audit_bugs": [(["--trials", "1"], "trials"), (["--cases", "bogus"], "--cases")],
    "audit_coverage": [(["--trials", "1"], "--trials")],
    "audit_digits": [(["--runs", "1"], "runs")],
    "audit_final_model": [(["--runs", "4"], "runs"), (["--model", "resnet"], "--model")],
    "audit_guard": [(["--runs", "1"], "runs"), (["--bugs", "bogus"], "--bugs")],
    "audit_pate": [(["--trials", "5"], "trials"), (["--broken_noise", "1.5"], "broken_noise")],
    "fp_attacks": [(["--sampling_prob", "0"], "--sampling_prob=0")],
    "mechanisms": [(["--seed", str(2 ** 64)], f"--seed={2 ** 64}"),
                   # accepted by the config, refused by the library before allocating
                   (["--rr_people", str(2 ** 40)], f"flags given: --rr_people={2 ** 40}")],
    "mia_bound": [(["--epsilons", "-1"], "--epsilons"), (["--fpr", "0.7"], "--fpr=0.7")],
    "one_run_dpsgd": [(["--num_canaries", "2"], "num_canaries")],
    "one_run_fdp": [(["--num_canaries", "2"], "num_canaries")],
    "pate_credit": [(["--queries", "5000"], "queries"),
                    (["--release_margin", "2"], "release_margin")],
    "reconstruction": [(["--trials", "0"], "--trials=0"), (["--queries", "a,b"], "--queries"),
                       (["--epsilon", "x"], "--epsilon")],
}

# Run in a fresh interpreter: argv[1] is a JSON list of [experiment name, arguments];
# prints one JSON line, a list of [exit status, stderr] in the same order.
_FORK_RUNNER = r"""
import importlib, json, os, runpy, sys, tempfile, traceback
cases = json.loads(sys.argv[1])
for n in sorted({n for n, _ in cases}):
  importlib.import_module(f"experiments.{n}")
if "jax" in sys.modules and sys.modules["jax._src.xla_bridge"].backends_are_initialized():
  print(json.dumps(None))     # JAX runs threads now: forking is unsafe (the caller falls back)
  sys.exit(0)
out = []
for n, args in cases:
  with tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as out_dir:
    pid = os.fork()
    if pid == 0:
      code = 1
      try:
        os.dup2(err.fileno(), 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        sys.argv = [os.path.join("experiments", n + ".py"), *args, "--out", out_dir]
        del sys.modules[f"experiments.{n}"]      # as under `python -m`: only __main__
        runpy.run_module(f"experiments.{n}", run_name="__main__", alter_sys=True)
        code = 0
      except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
          code = e.code or 0
        else:
          sys.stderr.write(f"{e.code}\n")
      except BaseException:
        traceback.print_exc()
      finally:
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    err.seek(0)
    out.append([os.waitstatus_to_exitcode(status), err.read().decode(errors="replace")])
print(json.dumps(out))
"""


def _run_one(name: str, args) -> tuple[int, str]:
  with tempfile.TemporaryDirectory() as out_dir:
    p = subprocess.run([sys.executable, "-m", f"experiments.{name}", *args, "--out", out_dir],
                       cwd=_ROOT, capture_output=True, text=True, timeout=120)
  return p.returncode, p.stderr


def _run_all(cases) -> list:
  """[(exit status, stderr)] of `python -m experiments.<name> *args --out <tmp>`.

  Forked from one interpreter (_FORK_RUNNER); when importing the experiments
  started JAX's runtime (so a fork could deadlock), one subprocess per case.
  """
  cases = [(n, list(a)) for n, a in cases]
  p = subprocess.run([sys.executable, "-c", _FORK_RUNNER, json.dumps(cases)],
                     cwd=_ROOT, capture_output=True, text=True, timeout=300)
  if p.returncode != 0:
    raise RuntimeError(f"bad-flag runner failed (exit {p.returncode}): {p.stderr[-3000:]}")
  out = json.loads(p.stdout.strip().splitlines()[-1])
  if out is None:
    return [_run_one(n, a) for n, a in cases]
  return [tuple(v) for v in out]


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
    self.assertEqual(sorted(set(_BAD_FLAGS) - set(_NAMES)), [])
    cases = [(n, ["--seed", "-1"], "--seed=-1") for n in _NAMES]
    cases += [(n, args, flag) for n in sorted(_BAD_FLAGS) for args, flag in _BAD_FLAGS[n]]
    done = _run_all([(n, args) for n, args, _ in cases])
    self.assertLen(done, len(cases))
    for (n, args, flag), (returncode, stderr) in zip(cases, done):
      with self.subTest(f"{n} {' '.join(args)}"):
        self.assertEqual(returncode, 2, stderr)
        lines = [l for l in stderr.splitlines() if l.strip()]
        self.assertLen(lines, 1, stderr)
        self.assertIn(flag, lines[0])


if __name__ == "__main__":
  absltest.main()
