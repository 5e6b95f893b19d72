"""Shared plumbing for experiments: config-derived flags, tables, results.json.

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
"tables", "figures", "summary"}, nothing time-dependent: same flags and seed, same bytes.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import math
import os
import re
import sys
import types
import typing
from typing import Any, Callable, Sequence

import numpy as np
from absl import app
from absl import flags

import dpjax
from dpjax import _validate
from dpjax.audit import store

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
  v = {"dpjax": dpjax.__version__}
  for pkg in _VERSIONED:
    try:
      v[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      v[pkg] = None
  return v


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


# Configs and their flags.

def option(default: Any, help: str, *, choices: Sequence[Any] | None = None,  # pylint: disable=redefined-builtin
           flag: bool = True, bounds: str | None = None) -> Any:
  """A config field: immutable default, flag help, string `choices`; flag=False: no flag.

  bounds, checked item by item: ">=k" (int field), ">0", ">=a", "(a,b)", "(a,b]", "[a,b)", "[a,b]".
  """
  return dataclasses.field(default=default, metadata={
      "help": help, "choices": choices, "flag": flag, "bounds": bounds})


def _check_bounds(cfg, name: str, spec: str, is_int: bool) -> None:
  if is_int:
    check_int(cfg, name, minimum=int(spec.removeprefix(">=")))
  elif spec == ">0":
    check_positive(cfg, name)
  elif spec.startswith(">="):
    check_range(cfg, name, low=float(spec[2:]))
  else:
    low, high = (float(v) for v in spec[1:-1].split(","))
    check_range(cfg, name, low=low, high=high, open_low=spec[0] == "(", open_high=spec[-1] == ")")


# Seeds are int32-safe: experiments derive per-part seeds and keys from them.
SEED_MAX = 2 ** 31 - 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
  """Base of every config: the seed (the only randomness); checks every `choices` field."""
  seed: int = option(0, "Integer seed in [0, 2^31 - 1]; the only source of randomness.")

  def __post_init__(self):
    check_int(self, "seed", minimum=0, maximum=SEED_MAX)
    for f in dataclasses.fields(self):
      if f.metadata.get("choices") and getattr(self, f.name) is not None:
        check_choices(self, f.name, f.metadata["choices"])
      if f.metadata.get("bounds"):
        t, _ = _unwrap_optional(typing.get_type_hints(type(self))[f.name])
        is_int = t is int or (typing.get_origin(t) is tuple and typing.get_args(t)[0] is int)
        _check_bounds(self, f.name, f.metadata["bounds"], is_int)


def _items(cfg, name: str) -> tuple:
  """cfg.<name> as a tuple of the values to check: a tuple field item by item, non-empty."""
  v = getattr(cfg, name)
  if isinstance(v, (tuple, list)):
    if not v:
      raise ValueError(f"{name} must be a non-empty list, got {v!r}")
    return tuple(v)
  return (v,)


def check_int(cfg, name: str, minimum: int = 1, maximum: int | None = None) -> None:
  """Raises ValueError unless cfg.<name> is an int in [minimum, maximum] (or a tuple of them)."""
  for x in _items(cfg, name):
    if isinstance(x, (float, np.floating)):
      raise ValueError(f"{name} must hold integers, got {getattr(cfg, name)!r}")
    _validate.check_int(x, name, minimum, maximum)


def check_positive(cfg, *names: str, finite: bool = True) -> None:
  """Raises ValueError unless each cfg.<name> (a number or a tuple of numbers) is > 0."""
  for name in names:
    for x in _items(cfg, name):
      _validate.check_range(x, name, 0.0, open_low=True, allow_inf=not finite)


def check_range(cfg, *names: str, low: float | None = None, high: float | None = None,
                open_low: bool = False, open_high: bool = False) -> None:
  """Raises ValueError unless each cfg.<name> (or item) is finite and in [low, high] (None: no
  bound; open_low / open_high: strict)."""
  for name in names:
    for x in _items(cfg, name):
      _validate.check_range(x, name, low, high, open_low=open_low, open_high=open_high)


def check_choices(cfg, name: str, allowed: Sequence[Any]) -> None:
  """Raises ValueError unless cfg.<name> (or each item of a non-empty tuple) is allowed."""
  v = getattr(cfg, name)
  if not all(isinstance(x, str) and x in allowed for x in _items(cfg, name)):
    what = "a list of values from" if isinstance(v, tuple) else "one of"
    raise ValueError(f"{name} must be {what} {tuple(allowed)}, got {v!r}")


def _unwrap_optional(t):
  args = typing.get_args(t)
  if typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in args:
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
      return rest[0], True
  return t, False


def define_flags(config_cls) -> dict:
  """One absl flag per field of `config_cls` (skipping flag=False); {field name: FlagHolder}."""
  hints = typing.get_type_hints(config_cls)
  holders = {}
  for f in dataclasses.fields(config_cls):
    if not f.metadata.get("flag", True):
      continue
    t, _ = _unwrap_optional(hints[f.name])
    help_text = f.metadata.get("help") or f.name
    default = f.default
    if typing.get_origin(t) is tuple:
      items = None if default is None else [_flag_text(v) for v in default]
      holders[f.name] = flags.DEFINE_list(f.name, items, help_text)
    elif t is bool:
      holders[f.name] = flags.DEFINE_bool(f.name, default, help_text)
    elif t is int:
      holders[f.name] = flags.DEFINE_integer(f.name, default, help_text)
    elif t is float:
      holders[f.name] = flags.DEFINE_float(f.name, default, help_text)
    elif t is str and f.metadata.get("choices"):
      holders[f.name] = flags.DEFINE_enum(f.name, default, list(f.metadata["choices"]), help_text)
    elif t is str:
      holders[f.name] = flags.DEFINE_string(f.name, default, help_text)
    else:
      raise TypeError(f"{config_cls.__name__}.{f.name}: no flag type for {t!r}")
  return holders


def _flag_text(v) -> str:
  """A list item's text: short, and parsed back to exactly the same value."""
  if isinstance(v, float):
    short = f"{v:g}"
    return short if float(short) == v else repr(v)
  return str(v)


def _parse_item(text: str, t, name: str):
  if t is float and text.strip().lower() in ("inf", "+inf", "infinity", "∞"):
    return math.inf
  try:
    return t(text)
  except ValueError:
    raise ValueError(f"{name} must be a comma-separated list of {t.__name__} values, got "
                     f"{text!r}") from None


def config_from_flags(config_cls, holders: dict):
  """Builds (and so validates) the config from parsed flag values."""
  hints = typing.get_type_hints(config_cls)
  values = {}
  for name, holder in holders.items():
    v = holder.value
    t, _ = _unwrap_optional(hints[name])
    if typing.get_origin(t) is tuple and v is not None:
      (item_t, *_) = typing.get_args(t)
      v = tuple(_parse_item(x, item_t, name) for x in v)
    values[name] = v
  return config_cls(**values)


def _flag_error(message: str, holders: dict) -> str:
  """One line; "flag --name=value: message" when the message starts with a field name."""
  line = " ".join(str(message).split())
  m = re.match(r"(\w+)", line)
  if m and m.group(1) in holders:
    name = m.group(1)
    raw = flags.FLAGS[name].serialize().split("=", 1)[-1] if name in flags.FLAGS else ""
    return f"flag --{name}={raw}: {line}"
  return line


def app_run(name: str, config_cls, run_fn: Callable,
            default_out: Callable[[Any], str] | None = None) -> None:
  """The whole `__main__` of an experiment: flags from the config, then run_fn(cfg, out_dir).

  A flag value rejected by absl or the config, or a ValueError / OverflowError the run raises
  when a flag was given, prints one "FATAL Flags parsing error: flag --x=v: ..." line, exit 2;
  `store.StoreError` or OSError prints "ERROR <name>: ...", exit 1. default_out(cfg): the output
  directory without --out.
  """
  holders = define_flags(config_cls)
  parsed = {}

  def parser(argv):
    try:
      rest = flags.FLAGS(argv)
      parsed["cfg"] = config_from_flags(config_cls, holders)
    except (flags.Error, ValueError, TypeError) as e:
      sys.stderr.write(f"FATAL Flags parsing error: {_flag_error(e, holders)} "
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
      sys.stderr.write(f"FATAL Flags parsing error: {_flag_error(e, holders)} (a value the "
                       f"run cannot use; flags given: {shown}; --helpshort lists the "
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

