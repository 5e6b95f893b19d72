"""Shared plumbing for experiments: the --seed/--out flags, tables, results.json.

Every experiment module defines its own flags, a pure-ish `run(...)` function that
tests call with a shrunken configuration, and a `main` that turns flags into that
call and hands the outcome to `write_results`. The layout it writes:

    <out>/results.json   {"experiment", "dpjax_version", "versions", "flags",
                          "results", "tables", "figures", "summary"}
    <out>/*.png          figures, drawn from the numbers in results.json

Nothing time-dependent goes into results.json, so the same flags and seed give a
byte-identical file.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import math
import os
import sys
from typing import Any, Sequence

import numpy as np
from absl import flags

import dpjax

# JAX logs an INFO line per process about the TPU backend it did not find; keep the
# experiments' output to what they measured.
logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)

SEED = flags.DEFINE_integer("seed", 0, "Integer seed; the only source of randomness.")
OUT = flags.DEFINE_string("out", None, "Output directory (default: results/<experiment>).")

RESULTS_ROOT = "results"
_VERSIONED = ("jax", "jaxlib", "optax", "dp-accounting", "numpy", "scipy")


@dataclasses.dataclass
class Table:
  """A small table printed to stdout and rendered into results/REPORT.md.

  Cells may be numbers (formatted with `digits` significant decimals), strings or
  None (printed as "–"). By convention a column named "lecture" holds the value
  the lecture printed for the same quantity, next to ours.
  """
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


def flag_values(module_name: str) -> dict:
  """The values of the flags defined by `module_name`, plus --seed and --out."""
  fv = flags.FLAGS
  out = {"seed": SEED.value, "out": OUT.value}
  for f in fv.get_flags_for_module(sys.modules[module_name]):
    out[f.name] = f.value
  return _jsonable(out)


def versions() -> dict:
  v = {"dpjax": dpjax.__version__}
  for pkg in _VERSIONED:
    try:
      v[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      v[pkg] = None
  return v


def write_results(out_dir: str, name: str, *, flag_dict: dict, results: dict,
                  tables: Sequence[Table] = (), figures: Sequence[str] = (),
                  summary: str = "", quiet: bool = False) -> str:
  """Writes `<out_dir>/results.json` and prints the tables; returns the JSON path.

  Args:
    out_dir: directory (created if missing).
    name: experiment name, e.g. "mechanisms".
    flag_dict: the flags (or config) the run used; recorded verbatim.
    results: machine-readable numbers (plain floats and lists after conversion).
    tables: human-readable tables; printed now and rendered into REPORT.md.
    figures: file names (relative to out_dir) of figures already written.
    summary: a paragraph of prose for the report (what the tables show).
  """
  os.makedirs(out_dir, exist_ok=True)
  doc = {
      "experiment": name,
      "dpjax_version": dpjax.__version__,
      "versions": versions(),
      "flags": _jsonable(flag_dict),
      "summary": summary,
      "results": _jsonable(results),
      "tables": [t.to_json() for t in tables],
      "figures": list(figures),
  }
  path = os.path.join(out_dir, "results.json")
  with open(path, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=False, allow_nan=False)
    f.write("\n")
  if not quiet:
    for t in tables:
      print()
      print(t.text())
    print(f"\n[{name}] wrote {path}" + (f" and {len(figures)} figure(s)" if figures else ""))
  return path
