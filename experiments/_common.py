"""Shared plumbing for experiments: config-derived flags, tables, results.json, timing.json.

Every experiment has one shape:

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FooConfig(_common.ExperimentConfig):      # seed comes from the base class
      trials: int = _common.option(1000, "Models per side.", bounds=">=2")   # checked

    def run(cfg: FooConfig, out_dir: str, *, progress=True, quiet=False) -> dict:
      ...                                            # compute, figures, then finish

    def main():                                      # `python -m experiments.foo --trials 7`
      _common.app_run(NAME, FooConfig, run)

`app_run` derives one absl flag per config field, plus --out. `finish` writes
<out>/results.json {"experiment", "dpjax_version", "versions", "flags", "results",
"tables", "figures", "summary"}, nothing time-dependent: same flags and seed, same bytes;
`write_timing` puts CPU seconds beside it in timing.json. The canary audit's tables are in
`experiments._audit_tables`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import math
import os
import sys
from typing import Any, Callable, Sequence

import jax
import numpy as np
from absl import app
from absl import flags

import dpjax
from dpjax.audit import store
from experiments import _config
# The config names every experiment uses, so that `_common` is an experiment's one import.
from experiments._config import (  # noqa: F401
    ExperimentConfig, check_choices, check_int, check_positive, check_range, option)

# JAX logs an INFO line per process about the TPU backend it did not find; keep the
# experiments' output to what they measured.
logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)

OUT = flags.DEFINE_string("out", None, "Output directory (default: results/<experiment>).")

RESULTS_ROOT = "results"
_VERSIONED = ("jax", "jaxlib", "optax", "dp-accounting", "numpy", "scipy")


@dataclasses.dataclass
class Table:
  """A table for stdout and REPORT.md; a "lecture" column holds the lecture's value."""
  title: str
  columns: Sequence[str]
  rows: Sequence[Sequence[Any]]
  note: str = ""
  digits: int = 3

  def _cells(self) -> list[list[str]]:
    return [[fmt(c, self.digits) for c in row] for row in self.rows]

  def markdown(self) -> str:
    lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
             "|" + "|".join("---" for _ in self.columns) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in self._cells()]
    if self.note:
      lines += ["", self.note]
    return "\n".join(lines)

  def text(self) -> str:
    cells = [list(map(str, self.columns))] + self._cells()
    widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
    out = [self.title, "-" * len(self.title)]
    for k, r in enumerate(cells):
      out.append("  ".join(c.rjust(w) for c, w in zip(r, widths)))
      if k == 0:
        out.append("  ".join("-" * w for w in widths))
    if self.note:
      out.append(self.note)
    return "\n".join(out)

  def to_json(self) -> dict:
    return {"title": self.title, "columns": list(self.columns),
            "rows": _jsonable([list(r) for r in self.rows]), "note": self.note,
            "digits": self.digits}

  @classmethod
  def from_json(cls, d: dict) -> "Table":
    return cls(title=d["title"], columns=d["columns"], rows=d["rows"],
               note=d.get("note", ""), digits=d.get("digits", 3))


def fmt(x: Any, digits: int = 3) -> str:
  """Formats one table cell."""
  if x is None:
    return "–"
  if isinstance(x, (bool, np.bool_)):
    return str(bool(x))
  if isinstance(x, (int, np.integer)):
    return str(int(x))
  if isinstance(x, (float, np.floating)):
    x = float(x)
    if math.isnan(x):
      return "nan"
    if math.isinf(x):
      return "∞" if x > 0 else "-∞"
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 10 ** (-digits)):
      return f"{x:.{digits}g}"
    return f"{x:.{digits}f}"
  return str(x)


def rows(records: Sequence[dict], *keys) -> list[list]:
  """One table row per record: a str key names a field; a callable maps the record to a cell."""
  return [[k(r) if callable(k) else r[k] for k in keys] for r in records]


def table(title: str, records: Sequence, columns: Sequence[tuple[str, Any]], *, note: str = "",
          digits: int = 3, extra: Sequence[Sequence] = ()) -> Table:
  """A Table declared by columns, (header, cell) pairs, one row per record, then `extra` rows;
  a cell is a field name (str), a record -> value callable, or None (an empty cell)."""
  cells = [(lambda r: None) if c is None else c for _, c in columns]
  return Table(title, [h for h, _ in columns], rows(records, *cells) + [list(r) for r in extra],
               note, digits)


def monte_carlo(key, fn: Callable, draws: int) -> np.ndarray:
  """fn(k) for `draws` keys split from `key`, vmapped, as float64[draws, ...]."""
  return np.asarray(jax.vmap(fn)(jax.random.split(key, draws)), np.float64)


def _jsonable(x: Any) -> Any:
  """Converts numpy/jax scalars and arrays to plain JSON values (NaN/inf -> None)."""
  if isinstance(x, dict):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
    return _jsonable(np.asarray(x).tolist())
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, (float, np.floating)):
    x = float(x)
    return None if (math.isnan(x) or math.isinf(x)) else x
  return x


def output_dir(name: str, out: str | None = None) -> str:
  """Returns (and creates) the output directory of experiment `name`."""
  path = out or os.path.join(RESULTS_ROOT, name)
  os.makedirs(path, exist_ok=True)
  return path


def versions() -> dict:
  return {"dpjax": dpjax.__version__, **_config.package_versions(_VERSIONED)}


def finish(cfg, out_dir: str, name: str, record: dict, *, tables: Sequence[Table] = (),
           figures: Sequence[str] = (), summary: str = "", quiet: bool = False) -> dict:
  """Writes <out_dir>/results.json, prints the tables and summary.

  Returns {"record", "tables", "figures", "path"}."""
  os.makedirs(out_dir, exist_ok=True)
  doc = {"experiment": name, "dpjax_version": dpjax.__version__, "versions": versions(),
         "flags": _jsonable(config_record(cfg)), "summary": summary,
         "results": _jsonable(record), "tables": [t.to_json() for t in tables],
         "figures": list(figures)}
  path = os.path.join(out_dir, "results.json")
  with open(path, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=False, allow_nan=False)
    f.write("\n")
  if not quiet:
    for t in tables:
      print()
      print(t.text())
    print(f"\n[{name}] wrote {path}" + (f" and {len(figures)} figure(s)" if figures else ""))
    if summary:
      print(summary)
  return {"record": record, "tables": list(tables), "figures": list(figures), "path": path}


def app_run(name: str, config_cls, run_fn: Callable,
            default_out: Callable[[Any], str] | None = None) -> None:
  """The whole `__main__` of an experiment: flags from the config, then run_fn(cfg, out_dir).

  A flag value rejected by absl or the config, or a ValueError / OverflowError the run raises
  when a flag was given, prints one "FATAL Flags parsing error: flag --x=v: ..." line, exit 2;
  `store.StoreError` or OSError prints "ERROR <name>: ...", exit 1. default_out(cfg): the output
  directory without --out.
  """
  holders = _config.define_flags(config_cls)
  parsed = {}

  def parser(argv):
    try:
      rest = flags.FLAGS(argv)
      parsed["cfg"] = _config.config_from_flags(config_cls, holders)
    except (flags.Error, ValueError, TypeError) as e:
      sys.stderr.write(f"FATAL Flags parsing error: {_config.flag_error(e, holders)} "
                       "(--helpshort lists the flags)\n")
      sys.exit(2)
    return rest

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}", exitcode=2)
    cfg = parsed["cfg"]
    out = OUT.value or (default_out(cfg) if default_out else None)
    try:
      run_fn(cfg, output_dir(name, out))
    except (store.StoreError, OSError) as e:
      # A corrupt stored run, an unwritable directory, a full disk: one line, status 1.
      sys.stderr.write(f"ERROR {name}: {e}\n")
      sys.exit(1)
    except (ValueError, OverflowError) as e:
      given = [f for f in holders if f in flags.FLAGS and flags.FLAGS[f].present]
      if not given:
        raise                  # the defaults must run: anything else is a bug, traced
      shown = " ".join(f"--{f}={flags.FLAGS[f].serialize().split('=', 1)[-1]}" for f in given)
      sys.stderr.write(f"FATAL Flags parsing error: {_config.flag_error(e, holders)} (a value "
                       f"the run cannot use; flags given: {shown}; --helpshort lists the "
                       "flags)\n")
      sys.exit(2)

  app.run(main, flags_parser=parser)


def config_record(cfg) -> dict:
  """The config as plain JSON values; an infinite float is written as its flag text "inf"."""
  def text_inf(x):
    if isinstance(x, (tuple, list)):
      return [text_inf(v) for v in x]
    if isinstance(x, float) and math.isinf(x):
      return "inf" if x > 0 else "-inf"
    return x
  return _jsonable({k: text_inf(v) for k, v in dataclasses.asdict(cfg).items()})


def start_backend_one_thread() -> bool:
  """Starts JAX's CPU backend with a one-thread intra-op pool; False if it had started.

  XLA sizes its CPU thread pool from the CPUs the process may use when the backend starts,
  so the process is held to one CPU for that moment and then given its CPUs back (its
  Python and NumPy threads are unaffected). Each program's arithmetic is the same; what
  goes is the pool's hand-offs, which cost more CPU-seconds than they save on the audit's
  small per-step kernels (T steps of vectors of a few thousand floats). `experiments.audit`
  calls it first (`--xla_one_thread`).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  started = getattr(xla_bridge, "backends_are_initialized", lambda: True)()
  if started or not hasattr(os, "sched_setaffinity"):
    return False
  cpus = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(cpus)})
  try:
    jax.devices("cpu")
  finally:
    os.sched_setaffinity(0, cpus)
  return True


def reuse_freed_memory() -> bool:
  """Makes glibc serve large blocks from its heap and keep freed ones (mallopt M_MMAP_MAX = 0,
  M_TRIM_THRESHOLD 2 GiB); False where there is no glibc. Otherwise each of XLA's per-run
  buffers (the per-step audit's 64 MiB observations and their reductions) is a fresh
  mapping, zeroed and page-faulted anew: millions of minor faults, seconds of system time.
  Allocation only: the same numbers; the heap keeps the job's peak (about 1 GB).
  `experiments.audit` calls it first (`--reuse_freed_memory`).

  Examples:
    >>> reuse_freed_memory()          # Linux
    True
  """
  try:
    libc = ctypes.CDLL("libc.so.6")
  except OSError:
    return False
  return bool(libc.mallopt(-4, 0)) and bool(libc.mallopt(-1, 2 ** 31 - 1))


def write_timing(out_dir: str, name: str, timing: dict, parts: Sequence[tuple[str, float]], *,
                 quiet: bool = False) -> str:
  """Writes `timing` to <out_dir>/timing.json and, unless quiet, prints
  "[name] CPU seconds (timing.json): label 1.2; ..." for the (label, seconds) `parts`.

  CPU seconds vary between runs, so they stay out of results.json (which the same flags and
  seed reproduce byte for byte). Returns the path.

  Examples:
    >>> import tempfile
    >>> _ = write_timing(tempfile.mkdtemp(), "demo", {"start_cpu_seconds": 1.25},
    ...                  [("start", 1.25), ("process so far:", 3.0)])
    [demo] CPU seconds (timing.json): start 1.2; process so far: 3.0
  """
  path = os.path.join(out_dir, "timing.json")
  with open(path, "w") as f:
    json.dump(timing, f, indent=1)
    f.write("\n")
  if not quiet:
    print(f"[{name}] CPU seconds (timing.json): "
          + "; ".join(f"{label} {seconds:.1f}" for label, seconds in parts))
  return path
