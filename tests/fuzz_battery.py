"""The input battery behind tests/api_fuzz_test.py (not a test file itself).

Cases are generated from each parameter's declared kind (a property), not listed by
hand. An entry point is described by an `Entry`: the callable, a valid baseline call
(keyword arguments) and, where a parameter's name does not say what it is, an explicit
kind. A parameter with no kind from its name or the entry is still covered when its
signature declares it: a bool default or a `bool` annotation makes it a "flag", an `int`
annotation an "int", a `float` annotation a "float". `inputs(entry)` yields one
(parameter, label, value, expect) per probe, mutating one parameter of the baseline at
a time; `run_case` calls the entry point and classifies the outcome:

  named     ValueError, TypeError or OverflowError whose message names the parameter
            (or its documented alias);
  value     the call returned, and every float it released is finite (or inf where
            the entry declares infinities part of its contract, or exactly the
            non-finite answer the entry's `exact` documents for that probe);
  silent    the call returned although the input is outside the parameter's domain;
  wrong     a value inside the domain released NaN or inf, or an error did not name
            the parameter;
  crash     any other exception (AttributeError, an XLA error, ...), or the process died;
  oom       MemoryError or an allocation XLA could not serve;
  hang      the call ran past the per-call time limit.

`expect` is "named" for a value outside the domain of its kind (only "named" passes)
and "either" for one inside it or on a boundary that differs between parameters of
the kind ("named" or "value" pass). Passing outcomes: named, value.

Probes by property:

  float kinds (eps, epsarr, delta, prob, pos, posinf, nonneg, real, realinf, float):
      +-0, +-5e-324 (subnormal), +-1e-300, +-1e300, +-inf, NaN, each judged by the
      kind's domain below; then -1 and 1.5 where outside it; True, "1", None, 1+1j
      (always outside); eps also [1, 2].
        eps, epsarr  > 0 finite (0: either)    delta     (0, 1)  (0: either)
        epsinf       > 0, inf allowed (delta(inf) = 0; 0: either)
        prob         [0, 1]                    pos       > 0 finite
        posinf       > 0 (inf allowed)         nonneg    >= 0 finite
        real         finite                    realinf   not NaN
        float        not NaN (declared by annotation only: the domain is unknown, so
                     every other value must give a named error or a finite value)
  integer kinds (count, size, int): 0 (either), -1 (outside; "int": either), the int32
      and int64 limits +-2^31 - 1, 2^31, 2^63 - 1, 2^63, -2^63 (large ones: either,
      negative: outside), 2.5, NaN, inf, True, "3", None (outside); size also 10^12.
  flag (a bool): "False", "no", "yes", 1, 0, 1.0, NaN, None (outside); np.bool_(False)
      (inside: accepted).
  array kinds: a NaN entry, an inf entry (outside unless +-inf is documented), complex,
      object and string dtypes, None, an extra axis, empty, a length mismatch along
      every axis named by a shape letter that another array parameter of the same call
      shares (scores_K vs labels_K), and the kind's out-of-range entries:
        array          the common values      binary     + an entry equal to 2
        labels         + entries -1 and 0.5   probarr    + entries -0.1 and 1.5
        anyrank        no extra axis          arrayinf   no inf entry
        probany        probarr's, no extra axis, no empty array
        anyrankinf, binaryany    arrayinf's / binary's, no extra axis
        elemwise, binaryelem, elemwiseinf   no extra axis, no empty array
  choice "no-such-choice", 3; callable 3; object 3, "x"; pathlike 3, None;
  shape (-1,), (2.5,), (True,), "3", None, (10**12,); sizes (0,), (-1,), (2.5,),
  (True,), "4", None.

A length mismatch (and an empty array or an extra axis, which change a length) may
be reported under the name of either array that shares the shape letter. Optional
parameters (default None, or annotated Optional) are fuzzed with a valid non-None
baseline value supplied in the entry; None is then a valid input.

`inputs(entry, full=False)` is the default subset run by the default test suite: for
every parameter, three probes of its kind (NaN, a string, the nearest value outside the
domain; for arrays also every length mismatch) plus one of the others chosen by
rotation (a stable hash of entry and parameter), so that every probe value is tried
somewhere in the table on every run; `full=True` (the `slow` test, and
`--table --full`) is the whole sweep.

Under jit, array checks see only shapes: a traced array cannot be checked by value.
A function that refuses a traced privacy parameter names it (a "named" outcome); one
that accepts traced arrays (the engine's traceable helpers, mechanisms drawing noise
for traced data) computes with them as written (a traced clip norm out of range gives
NaN sums; see the `dpjax._validate` docstring); `--table` lists the array parameters
per entry as "checkable by value only on the host".

Print the table of outcomes per class:  python -m tests.fuzz_battery --table [--full]
"""

from __future__ import annotations

import dataclasses
import math
import re
import signal
import zlib
from typing import Any, Callable, Iterator, Optional

import numpy as np

HUGE = 10**12
NAMED, EITHER = "named", "either"

_FLOAT_PROBES = (("+0", 0.0), ("-0", -0.0), ("subnormal", 5e-324), ("-subnormal", -5e-324),
                 ("1e-300", 1e-300), ("-1e-300", -1e-300), ("1e300", 1e300),
                 ("-1e300", -1e300), ("inf", math.inf), ("-inf", -math.inf),
                 ("nan", math.nan))
_JUNK = (("bool", True), ("str", "1"), ("None", None), ("complex", 1 + 1j))
_INT_PROBES = (("0", 0), ("-1", -1), ("int32_max", 2**31 - 1), ("2^31", 2**31),
               ("int32_min", -2**31), ("int64_max", 2**63 - 1), ("2^63", 2**63),
               ("int64_min", -2**63), ("2.5", 2.5), ("nan", math.nan), ("inf", math.inf),
               ("bool", True), ("str", "3"), ("None", None))
_FLAG_PROBES = (("str_False", "False", NAMED), ("str_no", "no", NAMED),
                ("str_yes", "yes", NAMED), ("int_1", 1, NAMED), ("int_0", 0, NAMED),
                ("float_1", 1.0, NAMED), ("nan", math.nan, NAMED), ("None", None, NAMED),
                ("np_bool", np.bool_(False), EITHER))


def _finite(x):
  return math.isfinite(x)


# Float kinds: x -> True (inside the domain), False (outside), None (a boundary that
# differs between parameters of the kind: either outcome passes).
FLOAT_DOMAINS = {
    "eps": lambda x: None if x == 0 else x > 0 and _finite(x),
    "delta": lambda x: None if x == 0 else 0 < x < 1,
    "prob": lambda x: 0 <= x <= 1,
    "pos": lambda x: x > 0 and _finite(x),
    "posinf": lambda x: x > 0,
    "nonneg": lambda x: x >= 0 and _finite(x),
    "real": _finite,
    "realinf": lambda x: not math.isnan(x),
    "float": lambda x: not math.isnan(x),
}
FLOAT_DOMAINS["epsarr"] = FLOAT_DOMAINS["eps"]
FLOAT_DOMAINS["epsinf"] = lambda x: None if x == 0 else x > 0
INT_KINDS = ("count", "size", "int")
# The default subset: per parameter, the probes of its kind named here (the failures
# most often met: NaN, a number as a string, the nearest value outside the domain)
# plus _ROTATING of the others, chosen by a stable hash of entry and parameter, so that
# across the table every probe of every kind runs in the default suite.
_CORE = {
    "eps": ("-1", "nan", "str"), "epsarr": ("-1", "nan", "str"),
    "epsinf": ("-1", "nan", "str"), "delta": ("1", "nan", "str"),
    "prob": ("-0.1", "nan", "str"), "pos": ("+0", "nan", "str"),
    "posinf": ("+0", "nan", "str"), "nonneg": ("-1", "nan", "str"),
    "real": ("nan", "inf", "str"), "realinf": ("nan", "str", "bool"),
    "float": ("nan", "str", "bool"), "count": ("-1", "2.5", "str"),
    "size": ("-1", "2.5", "huge"), "int": ("2.5", "str", "bool"),
    "flag": ("str_False", "int_1", "np_bool"),
}
_CORE.update({k: ("nan", "strings", "2", "-1", "1.5") for k in (
    "array", "binary", "labels", "probarr", "anyrank", "arrayinf", "probany", "anyrankinf",
    "binaryany", "elemwise", "binaryelem", "elemwiseinf")})
_ROTATING = 1

_SCALAR_BATTERY = {
    "choice": [("unknown", "no-such-choice"), ("int", 3)],
    "callable": [("int", 3)],
    "object": [("int", 3), ("str", "x")],
    "pathlike": [("int", 3), ("None", None)],
    "shape": [("-1", (-1,)), ("2.5", (2.5,)), ("bool", (True,)), ("str", "3"), ("None", None),
              ("huge", (HUGE,))],
    "sizes": [("0", (0,)), ("-1", (-1,)), ("2.5", (2.5,)), ("bool", (True,)), ("str", "4"),
              ("None", None)],
}


def scalar_probes(kind: str) -> list[tuple[str, Any, str]]:
  """(label, value, expect) of every probe of a scalar kind, generated from its domain."""
  if kind in FLOAT_DOMAINS:
    domain = FLOAT_DOMAINS[kind]
    out = []
    for label, x in _FLOAT_PROBES + (("-1", -1.0), ("1", 1.0), ("-0.1", -0.1),
                                     ("1.5", 1.5)):
      inside = domain(x)
      if label in ("1", "-0.1", "1.5") and inside:
        continue                       # ordinary values: nothing to learn
      if label == "-1" and inside:
        continue
      out.append((label, x, EITHER if inside is None or inside else NAMED))
    out += [(label, x, NAMED) for label, x in _JUNK]
    if kind == "eps":
      out.append(("list", [1.0, 2.0], NAMED))
    return out
  if kind in INT_KINDS:
    out = []
    for label, x in _INT_PROBES:
      if isinstance(x, int) and not isinstance(x, bool):
        expect = EITHER if (x >= 0 or kind == "int") else NAMED
      else:
        expect = NAMED
      out.append((label, x, expect))
    if kind == "size":
      out.append(("huge", HUGE, EITHER))
    return out
  if kind == "flag":
    return list(_FLAG_PROBES)
  return [(label, x, NAMED) for label, x in _SCALAR_BATTERY[kind]]


ARRAY_KINDS = ("array", "binary", "labels", "probarr", "anyrank", "arrayinf", "probany",
               "anyrankinf", "binaryany", "elemwise", "binaryelem", "elemwiseinf")

# Name -> kind, first match wins (full-name regular expressions).
_NAME_RULES = (
    (r"key|rng", None),                       # PRNG keys: not fuzzed (see api_fuzz_test)
    (r".*delta.*", "delta"),
    (r".*epsilon.*|eps", "eps"),
    (r"sampling_prob|confidence|minority_share|test_fraction|count_fraction|rate|prior",
     "prob"),
    (r"num_\w+|k|n|trials|dataset_size|base_size|bit_width|batch_size|steps_per_epoch"
     r"|count|num", "count"),
    (r"noise_multiplier|sigma\w*|scale|sensitivity|laplace_scale|mu0?|stddev|std"
     r"|noise_stddev|value_discretization|rtol|tail_mass|learning_rate"
     r"|expected_batch_size|max_step_norm|tol", "pos"),
    (r"l2_clip_norm", "posinf"),
    (r"l2|min_rate", "nonneg"),
    (r"threshold|upper|lower", "real"),
    (r"accountant|method|rdp_method|sampler|calibration|noise|aggregator|conv_mode", "choice"),
    (r"loss_one|observe_fn|factory", "callable"),
    (r"model|cfg", "object"),
)


def kind_of(name: str) -> Optional[str]:
  for pattern, kind in _NAME_RULES:
    if re.fullmatch(pattern, name):
      return kind
  return None


def shape_letters(name: str) -> Optional[str]:
  """'scores_MxN' -> 'MN'; None when the name carries no shape suffix."""
  m = re.search(r"_([A-Z](?:x[A-Z])*)$", name)
  return m.group(1).replace("x", "") if m else None


@dataclasses.dataclass
class Entry:
  """One public entry point and a valid call of it.

  Attributes:
    name: "module.function" (or "module.Class.method") as reported in the table.
    fn: the callable.
    kwargs: a valid call, fn(**kwargs); a `Fresh` value is built anew for each call.
    kinds: parameter -> kind, overriding the name rules; kind None skips it.
    alias: parameter -> the name its messages use (e.g. a dataclass field).
    mismatch: False when arrays that share a shape letter may differ in length
      (scores of members and of non-members).
    inf_ok: True when the contract releases infinities or NaN (a bound that is inf
      when nothing is rejected, a trained model's parameters); the finiteness of a
      valid call's result is then not checked.
    exact: parameter -> {probe label: the exact non-finite answer its docstring
      documents there} (inf when nothing constrains, -inf for the log of an
      underflowed probability); the call must return exactly that value.
  """
  name: str
  fn: Callable
  kwargs: dict
  kinds: dict = dataclasses.field(default_factory=dict)
  alias: dict = dataclasses.field(default_factory=dict)
  mismatch: bool = True
  inf_ok: bool = False
  exact: dict = dataclasses.field(default_factory=dict)

  def partners(self, param: str) -> set:
    """The array parameters that share a shape letter with `param`."""
    mine = set(shape_letters(param) or "")
    return {o for o in self.kwargs if o != param and self.kind(o) in ARRAY_KINDS
            and mine & set(shape_letters(o) or "")}

  def kind(self, param: str) -> Optional[str]:
    if param in self.kinds:
      return self.kinds[param]
    return kind_of(param)


def _as_np(value):
  try:
    return np.asarray(value)
  except Exception:  # pylint: disable=broad-except
    return None


def _array_values(entry: Entry, param: str, kind: str, value) -> Iterator[tuple[str, Any]]:
  a = _as_np(value)
  if a is None or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
    return
  if a.size:
    flat = a.astype(np.float64).ravel()
    for label, bad in (("nan", math.nan), ("inf", math.inf)):
      if label == "inf" and kind in ("arrayinf", "anyrankinf", "elemwiseinf"):
        continue
      b = flat.copy()
      b[0] = bad
      yield label, b.reshape(a.shape)
    if kind in ("binary", "binaryany", "binaryelem"):
      b = flat.copy(); b[0] = 2; yield "2", b.reshape(a.shape)
    if kind == "labels":
      b = flat.copy(); b[0] = -1; yield "-1", b.reshape(a.shape)
      b = flat.copy(); b[0] = 0.5; yield "0.5", b.reshape(a.shape)
    if kind in ("probarr", "probany"):
      b = flat.copy(); b[0] = -0.1; yield "-0.1", b.reshape(a.shape)
      b = flat.copy(); b[0] = 1.5; yield "1.5", b.reshape(a.shape)
  if a.size:
    yield "complex", a.astype(np.complex128) + 1j
    yield "object", a.astype(object)
  yield "strings", np.full(a.shape if a.ndim else (1,), "x")
  yield "None", None
  if kind not in ("anyrank", "probany", "anyrankinf", "binaryany", "elemwise", "binaryelem",
                  "elemwiseinf"):
    yield "extra_axis", a[None]
  if a.ndim and kind not in ("probany", "elemwise", "binaryelem", "elemwiseinf"):
    yield "empty", a[:0]
  letters = shape_letters(param)
  if letters and len(letters) == a.ndim:
    for axis, letter in enumerate(letters):
      shared = any(other != param and entry.kind(other) in ARRAY_KINDS
                   and letter in (shape_letters(other) or "")
                   for other in entry.kwargs)
      if shared and entry.mismatch and a.shape[axis] >= 2:
        yield f"mismatch_{letter}", np.take(a, np.arange(a.shape[axis] - 1), axis=axis)


def _signature(fn):
  import inspect  # pylint: disable=import-outside-toplevel
  try:
    return dict(inspect.signature(fn).parameters)
  except (TypeError, ValueError):
    return {}


def declared_kind(parameter) -> Optional[str]:
  """The kind a signature declares: a bool default or bool / int / float annotation."""
  import inspect  # pylint: disable=import-outside-toplevel
  ann = parameter.annotation
  ann = getattr(ann, "__name__", ann) if ann is not inspect.Parameter.empty else None
  if isinstance(parameter.default, bool) or ann == "bool":
    return "flag"
  if ann == "int":
    return "int"
  if ann == "float":
    return "float"
  return None


def _rotation(entry: Entry, param: str, n: int) -> set:
  """_ROTATING indices in range(n), from a stable hash of the entry and parameter."""
  if n <= 0:
    return set()
  h = zlib.crc32(f"{entry.name}:{param}".encode())
  return {(h + i * 7919) % n for i in range(min(_ROTATING, n))}


def params_and_kinds(entry: Entry) -> list[tuple[str, str, bool]]:
  """(parameter, kind, in_baseline) of every fuzzed parameter of the entry."""
  sig = _signature(entry.fn)
  out = []
  for param in entry.kwargs:
    kind = entry.kind(param)
    if kind is None and param not in entry.kinds and param in sig:
      kind = declared_kind(sig[param])
    if kind is not None:
      out.append((param, kind, True))
  for param, p in sig.items():
    if param in entry.kwargs or param in entry.kinds or p.kind in (p.VAR_POSITIONAL,
                                                                   p.VAR_KEYWORD):
      continue
    if declared_kind(p) == "flag":      # a bool left at its default is still fuzzed
      out.append((param, "flag", False))
  return out


def inputs(entry: Entry, full: bool = False) -> Iterator[tuple[str, str, Any, str]]:
  """(parameter, label, value, expect) per probe of each parameter (see the docstring)."""
  sig = _signature(entry.fn)
  for param, kind, _ in params_and_kinds(entry):
    optional = param in sig and (sig[param].default is None or re.search(
        r"Optional|None", str(sig[param].annotation)) is not None)
    if kind in ARRAY_KINDS:
      cases = [(label, v, NAMED)
               for label, v in _array_values(entry, param, kind, _expand(entry.kwargs[param]))]
    else:
      cases = scalar_probes(kind)
    if optional:
      cases = [(label, v, EITHER if v is None else expect) for label, v, expect in cases]
    if not full and kind in _CORE:
      core = [c for c in cases if c[0] in _CORE[kind] or c[0].startswith("mismatch_")]
      extra = [c for c in cases if c[0] not in _CORE[kind]]
      cases = core + [c for i, c in enumerate(extra) if i in _rotation(entry, param,
                                                                        len(extra))]
    for label, v, expect in cases:
      yield param, label, v, expect


def bad_inputs(entry: Entry) -> Iterator[tuple[str, str, Any]]:
  """(parameter, label, value) of every out-of-domain probe (the whole sweep)."""
  for param, label, v, expect in inputs(entry, full=True):
    if expect == NAMED:
      yield param, label, v


class Fresh:
  """A baseline value built anew for every call (a PRNG key, a Generator, a directory)."""

  def __init__(self, make: Callable[[], Any]):
    self.make = make


def _expand(value):
  return value.make() if isinstance(value, Fresh) else value


class Hang(Exception):
  pass


def _alarm(signum, frame):
  raise Hang()


def call(entry: Entry, overrides: dict, timeout_s: int = 30):
  """entry.fn(**kwargs with overrides), with a wall-clock limit (raises Hang)."""
  kwargs = {k: _expand(v) for k, v in entry.kwargs.items()}
  kwargs.update(overrides)
  previous = signal.signal(signal.SIGALRM, _alarm)
  signal.alarm(timeout_s)
  try:
    out = entry.fn(**kwargs)
    _block(out)
    return out
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _block(out):
  import jax  # pylint: disable=import-outside-toplevel
  for leaf in jax.tree.leaves(out):
    if hasattr(leaf, "block_until_ready"):
      leaf.block_until_ready()


PASSING = ("named", "value")
FAILURE_CLASSES = ("silent", "wrong", "crash", "oom", "hang")


def nonfinite(out, depth: int = 0) -> Optional[str]:
  """Where `out` releases a NaN or inf float (a path), or None if every float is finite."""
  if depth > 6 or out is None or isinstance(out, (bool, str, bytes, int)):
    return None
  if isinstance(out, float):
    return None if math.isfinite(out) else repr(out)
  if dataclasses.is_dataclass(out) and not isinstance(out, type):
    for f in dataclasses.fields(out):
      where = nonfinite(getattr(out, f.name, None), depth + 1)
      if where:
        return f"{f.name}: {where}"
    return None
  if isinstance(out, dict):
    items = out.items()
  elif isinstance(out, (list, tuple)):
    items = enumerate(out)
  else:
    dtype = getattr(out, "dtype", None)
    if dtype is None or not hasattr(out, "shape"):
      return None
    try:
      if not np.issubdtype(np.dtype(dtype), np.inexact):
        return None
      a = np.asarray(out)
    except TypeError:                  # PRNG key arrays and other extended dtypes
      return None
    if a.size and not np.all(np.isfinite(a)):
      return f"{int(np.sum(~np.isfinite(a)))} of {a.size} entries NaN/inf"
    return None
  for k, v in items:
    where = nonfinite(v, depth + 1)
    if where:
      return f"[{k!r}]: {where}"
  return None


def _is_oom(e: BaseException) -> bool:
  text = f"{type(e).__name__} {e}"
  return isinstance(e, MemoryError) or any(
      w in text for w in ("RESOURCE_EXHAUSTED", "Out of memory", "bad_alloc",
                          "Unable to allocate"))


def run_case(entry: Entry, param: str, label: str, bad, expect: str = NAMED,
             timeout_s: int = 30) -> tuple[str, str]:
  """(outcome, detail) for one probe; outcome as in the module docstring."""
  import warnings  # pylint: disable=import-outside-toplevel
  names = {param, entry.alias.get(param, param)}
  if label.startswith("mismatch_") or label in ("empty", "extra_axis"):
    names |= entry.partners(param)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      out = call(entry, {param: bad}, timeout_s)
  except Hang:
    return "hang", f"no answer within {timeout_s} s"
  except Exception as e:  # pylint: disable=broad-except
    message = str(e)
    if _is_oom(e):
      return "oom", f"{type(e).__name__}: {message[:200]}"
    if isinstance(e, (ValueError, TypeError, OverflowError)):
      if any(n in message for n in names):
        return "named", message
      return "wrong", f"unnamed {type(e).__name__}: {message[:200]}"
    return "crash", f"{type(e).__name__}: {message[:200]}"
  if expect == NAMED:
    return "silent", "returned a result for a value outside the domain"
  if label in entry.exact.get(param, {}):
    want = entry.exact[param][label]
    if isinstance(out, float) and out == want:
      return "value", f"the documented exact answer {want!r}"
    return "wrong", f"returned {out!r}, documented as exactly {want!r}"
  where = None if entry.inf_ok else nonfinite(out)
  if where:
    return "wrong", f"released NaN/inf ({where})"
  return "value", "a finite result"


def main(argv) -> int:
  """`python -m tests.fuzz_battery --table [--full] [--timeout S] [NAME ...]`: runs the
  battery (entries whose name contains a NAME, default all) and prints the tables of
  outcomes per module and per class, then every case outside named / value."""
  import argparse  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from tests import api_fuzz_test as t  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(prog="python -m tests.fuzz_battery")
  parser.add_argument("--table", action="store_true", help="run and print the tables")
  parser.add_argument("--full", action="store_true", help="the whole sweep")
  parser.add_argument("--timeout", type=int, default=60, help="seconds per case")
  parser.add_argument("--start", default="", help="skip the entries before this one")
  parser.add_argument("names", nargs="*")
  args = parser.parse_args(argv)
  if not args.table:
    parser.print_help()
    return 2
  log = lambda line: print(line, file=sys.stderr, flush=True)
  results, baseline_errors = t.run_battery(args.names or None, args.timeout, args.full, log,
                                           args.start)
  arrays = sum(1 for e in t.entries() if not args.names or any(n in e.name for n in args.names)
               for p, k, _ in params_and_kinds(e) if k in ARRAY_KINDS)
  print(t.format_table(t.table(results)) + "\n\n" + t.class_table(results))
  print(f"\n{arrays} array parameters are checked by value on the host only: under jit "
        "a traced array has only its shape checked (its values do not exist yet).")
  for name, error in baseline_errors.items():
    print(f"baseline failed: {name}: {error}")
  for line in t.failures(results):
    print(line)
  return 1 if baseline_errors or t.failures(results) else 0


if __name__ == "__main__":
  import sys  # pylint: disable=import-outside-toplevel
  sys.exit(main(sys.argv[1:]))
