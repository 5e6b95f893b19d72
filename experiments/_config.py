"""Experiment configs: frozen dataclasses whose fields carry their flag help and bounds.

`option` declares a field, `ExperimentConfig` checks them, `define_flags` derives one absl flag
per field and `config_from_flags` builds (so validates) the config. `_common` re-exports the names
experiments use (`_common.option`, `_common.ExperimentConfig`, the `check_*`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import math
import re
import types
import typing
from typing import Any, Sequence

import numpy as np
from absl import flags

from dpjax import _validate


def package_versions(packages: Sequence[str]) -> dict:
  """{package: installed version, or None}, in the order given (flag-free: benchmarks use it)."""
  out = {}
  for pkg in packages:
    try:
      out[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      out[pkg] = None
  return out


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


def flag_error(message: str, holders: dict) -> str:
  """One line; "flag --name=value: message" when the message starts with a field name."""
  line = " ".join(str(message).split())
  m = re.match(r"(\w+)", line)
  if m and m.group(1) in holders:
    name = m.group(1)
    raw = flags.FLAGS[name].serialize().split("=", 1)[-1] if name in flags.FLAGS else ""
    return f"flag --{name}={raw}: {line}"
  return line
