"""The bad-input battery behind tests/api_fuzz_test.py (not a test file itself).

An entry point is described by an `Entry`: the callable, a valid baseline call
(positional-free keyword arguments) and, where a parameter's name does not say
what it is, an explicit kind. `bad_inputs(entry)` yields one (parameter, label,
value) triple for every bad value applicable to every parameter, mutating one
parameter of the baseline at a time; `run_case` calls the entry point with it and
classifies the outcome:

  named     ValueError or TypeError whose message names the parameter (or its
            documented alias): the only accepted outcome;
  unnamed   ValueError or TypeError that does not name it;
  other     any other exception (OverflowError, AttributeError, an XLA error, ...);
  silent    the call returned;
  hang      the call ran past the per-call time limit (SIGALRM);
  crash     the process died (recorded by the runner in tests/api_fuzz_test.py).

Kinds and their bad values (the values are chosen so that every one is outside
the documented domain of a parameter of that kind):

  eps       -1, NaN, True, "1", None, [1, 2]
  epsarr    -1, NaN, True, "1", None       (eps, where an array of them is allowed)
  delta     -0.1, 1, 1.5, NaN, True, "1e-5"
  prob      -0.1, 1.5, NaN, True, "0.5"
  pos       -1, 0, NaN, inf, True, "1"        (a finite number > 0)
  posinf    -1, 0, NaN, True, "1"             (> 0, inf allowed)
  nonneg    -1, NaN, inf, True, "1"           (a finite number >= 0)
  real      NaN, inf, True, "1"               (a finite number)
  realinf   NaN, True, "1"                    (a number, +-inf allowed)
  count     -1, 2.5, True, "3", NaN, inf      (an integer >= its minimum)
  size      count's values and 10**12         (an integer that sizes an allocation)
  choice    "no-such-choice", 3               (a string from a fixed set)
  callable  3                                 (must be callable)
  object    3, "x"                            (a model, config, sampler, ... instance)
  pathlike  3, None                           (a directory name, a registry key)
  shape     (-1,), (2.5,), (True,), "3", None, (10**12,)  (an array shape)
  array     NaN entry, inf entry, strings, an extra axis, empty, None,
            and a length mismatch along every axis named by a shape letter that
            another array parameter of the same call shares (scores_K vs labels_K)
  binary    array's values plus an entry equal to 2 (must be 0 / 1 or bool)
  labels    array's values plus an entry equal to -1 and one equal to 0.5
  probarr   array's values plus entries -0.1 and 1.5
  anyrank   array's values except the extra axis (any rank is documented)
  arrayinf  array's values except the inf entry (+-inf is documented as allowed)
  probany   probarr's values except the extra axis and the empty array (an
            elementwise function of any shape)
  anyrankinf, binaryany  arrayinf's and binary's values except the extra axis
            (flattened inputs: any shape of the right size)
  elemwise, binaryelem, elemwiseinf  array's, binary's and arrayinf's values except
            the extra axis and the empty array (elementwise functions of any shape)
  sizes     (0,), (-1,), (2.5,), (True,), "4", None (a sequence of counts)
  flag      "False", "no", 1, 1.0, NaN, None  (must be a bool: a truthy non-bool is
            not read as True; only by explicit kind, never by a name rule)

A length mismatch (and an empty array or an extra axis, which change a length) may
be reported under the name of either array that shares the shape letter.

Optional parameters (default None) are fuzzed with a valid non-None baseline
value supplied in the entry.
"""

from __future__ import annotations

import dataclasses
import math
import re
import signal
from typing import Any, Callable, Iterator, Optional

import numpy as np

HUGE = 10**12

_SCALAR_BATTERY = {
    "eps": [("-1", -1.0), ("nan", math.nan), ("bool", True), ("str", "1"), ("None", None),
            ("list", [1.0, 2.0])],
    "epsarr": [("-1", -1.0), ("nan", math.nan), ("bool", True), ("str", "1"), ("None", None)],
    "delta": [("-0.1", -0.1), ("1", 1.0), ("1.5", 1.5), ("nan", math.nan), ("bool", True),
              ("str", "1e-5")],
    "prob": [("-0.1", -0.1), ("1.5", 1.5), ("nan", math.nan), ("bool", True), ("str", "0.5")],
    "pos": [("-1", -1.0), ("0", 0.0), ("nan", math.nan), ("inf", math.inf), ("bool", True),
            ("str", "1")],
    "posinf": [("-1", -1.0), ("0", 0.0), ("nan", math.nan), ("bool", True), ("str", "1")],
    "nonneg": [("-1", -1.0), ("nan", math.nan), ("inf", math.inf), ("bool", True),
               ("str", "1")],
    "real": [("nan", math.nan), ("inf", math.inf), ("bool", True), ("str", "1")],
    "realinf": [("nan", math.nan), ("bool", True), ("str", "1")],
    "count": [("-1", -1), ("2.5", 2.5), ("bool", True), ("str", "3"), ("nan", math.nan),
              ("inf", math.inf)],
    "choice": [("unknown", "no-such-choice"), ("int", 3)],
    "callable": [("int", 3)],
    "object": [("int", 3), ("str", "x")],
    "pathlike": [("int", 3), ("None", None)],
    "shape": [("-1", (-1,)), ("2.5", (2.5,)), ("bool", (True,)), ("str", "3"), ("None", None),
              ("huge", (HUGE,))],
    "sizes": [("0", (0,)), ("-1", (-1,)), ("2.5", (2.5,)), ("bool", (True,)), ("str", "4"),
              ("None", None)],
    "flag": [("str_False", "False"), ("str_no", "no"), ("int", 1), ("float", 1.0),
             ("nan", math.nan), ("None", None)],
}
_SCALAR_BATTERY["size"] = _SCALAR_BATTERY["count"] + [("huge", HUGE)]

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
  """
  name: str
  fn: Callable
  kwargs: dict
  kinds: dict = dataclasses.field(default_factory=dict)
  alias: dict = dataclasses.field(default_factory=dict)
  mismatch: bool = True

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


def bad_inputs(entry: Entry) -> Iterator[tuple[str, str, Any]]:
  """(parameter, label, bad value) for each applicable bad value of each parameter."""
  import inspect  # pylint: disable=import-outside-toplevel
  try:
    defaults = {p.name: p.default for p in inspect.signature(entry.fn).parameters.values()}
  except (TypeError, ValueError):
    defaults = {}
  for param, value in entry.kwargs.items():
    kind = entry.kind(param)
    if kind is None:
      continue
    optional = param in defaults and defaults[param] is None
    if kind in ARRAY_KINDS:
      cases = _array_values(entry, param, kind, _expand(value))
    else:
      cases = _SCALAR_BATTERY[kind]
    for label, bad in cases:
      if not (optional and bad is None):
        yield param, label, bad


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


def run_case(entry: Entry, param: str, label: str, bad,
             timeout_s: int = 30) -> tuple[str, str]:
  """(outcome, detail) for one bad input; outcome as in the module docstring."""
  import warnings  # pylint: disable=import-outside-toplevel
  names = {param, entry.alias.get(param, param)}
  if label.startswith("mismatch_") or label in ("empty", "extra_axis"):
    names |= entry.partners(param)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      call(entry, {param: bad}, timeout_s)
  except Hang:
    return "hang", f"no answer within {timeout_s} s"
  except (ValueError, TypeError) as e:
    message = str(e)
    if any(n in message for n in names):
      return "named", message
    return "unnamed", f"{type(e).__name__}: {message[:200]}"
  except Exception as e:  # pylint: disable=broad-except
    return "other", f"{type(e).__name__}: {str(e)[:200]}"
  return "silent", "returned a result"
