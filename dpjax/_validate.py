"""Input checks shared by the whole package.

Each check takes the value and its parameter name, returns it in canonical form (a Python
float or int, or a NumPy array) and raises a ValueError naming the parameter and the allowed
range. Bools, strings and None are not numbers; NaN and infinities are refused unless allowed.
Sizes and iteration counts are bounded before anything is allocated or looped over
(`check_size`: memory; `check_iterations`: MAX_ITERATIONS sequential steps).

Under jit, scalar checks refuse tracers (privacy parameters are concrete) and array checks
of a tracer check its shape only (no host callback or checkify in the engine's scan); a
traced clip norm <= 0 or NaN becomes NaN (`check_clip_norm`).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from typing import Any, Optional, Sequence

import numpy as np

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def is_tracer(x: Any) -> bool:
  """True if x is a JAX tracer (its values are unknown until the program runs)."""
  jax = sys.modules.get("jax")
  return jax is not None and isinstance(x, jax.core.Tracer)


def _real(x: Any, name: str, requirement: str) -> float:
  """x as a Python float, or ValueError("{name} must be {requirement}, got x")."""
  if is_tracer(x):
    raise ValueError(f"{name} must be a concrete host scalar (it is a privacy "
                     "parameter), not a traced value")
  message = f"{name} must be {requirement}, got {x!r}"
  if isinstance(x, (bool, np.bool_, str, bytes)) or x is None:
    raise ValueError(message)
  try:
    arr = np.asarray(x)
  except (TypeError, ValueError):
    raise ValueError(message) from None
  if arr.ndim != 0:
    raise ValueError(f"{name} must be a scalar ({requirement}), got shape {arr.shape}")
  if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
    raise ValueError(message)
  return float(arr)


# scalars


def _range_text(low, high, open_low, open_high) -> str:
  if low is not None and high is not None:
    return f"in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
  if low is not None:
    return f"{'>' if open_low else '>='} {low:g}"
  if high is not None:
    return f"{'<' if open_high else '<='} {high:g}"
  return ""


def check_range(x: Any, name: str, low: Optional[float] = None,
                high: Optional[float] = None, *, open_low: bool = False,
                open_high: bool = False, allow_inf: bool = False) -> float:
  """x as a float in [low, high] (None: unchecked; open_low / open_high exclude; NaN never).

  Examples:
    >>> check_range(0.5, "rtol", 0.0, 0.1, open_low=True)
    Traceback (most recent call last):
    ...
    ValueError: rtol must be in (0, 0.1], got 0.5
  """
  text = _range_text(low, high, open_low, open_high)
  if low is not None and high is not None:
    requirement = text
  elif allow_inf:
    requirement = f"a number {text} (inf allowed)".replace("  ", " ")
  else:
    requirement = f"a finite number {text}".rstrip()
  v = _real(x, name, requirement)
  ok = not math.isnan(v) and (allow_inf or math.isfinite(v))
  if low is not None:
    ok = ok and (v > low if open_low else v >= low)
  if high is not None:
    ok = ok and (v < high if open_high else v <= high)
  if not ok:
    raise ValueError(f"{name} must be {requirement}, got {x!r}")
  return v


def check_finite(x: Any, name: str) -> float:
  """x as a finite float."""
  return check_range(x, name)


def check_positive(x: Any, name: str) -> float:
  """x as a float, finite and > 0.

  Examples:
    >>> check_positive(0, "noise_multiplier")
    Traceback (most recent call last):
    ...
    ValueError: noise_multiplier must be a finite number > 0, got 0
  """
  return check_range(x, name, 0.0, open_low=True)


def check_nonnegative(x: Any, name: str) -> float:
  """x as a float, finite and >= 0."""
  return check_range(x, name, 0.0)


def check_interval(lower: Any, upper: Any, lower_name: str = "lower",
                   upper_name: str = "upper") -> tuple[float, float]:
  """(lower, upper) as finite floats with lower < upper.

  Examples:
    >>> check_interval(1, 1)
    Traceback (most recent call last):
    ...
    ValueError: upper must be > lower = 1, got 1
  """
  lo, hi = check_finite(lower, lower_name), check_finite(upper, upper_name)
  if not hi > lo:
    raise ValueError(f"{upper_name} must be > {lower_name} = {lo:g}, got {hi:g}")
  return lo, hi


def check_epsilon(epsilon: Any, name: str = "epsilon", allow_zero: bool = False,
                  allow_inf: bool = False) -> float:
  """epsilon as a float, finite and > 0 (>= 0 with allow_zero, inf with allow_inf)."""
  return check_range(epsilon, name, 0.0, open_low=not allow_zero, allow_inf=allow_inf)


def check_probability(p: Any, name: str, *, open_low: bool = False,
                      open_high: bool = False) -> float:
  """p as a float in [0, 1]; open_low / open_high exclude 0 / 1.

  Examples:
    >>> check_probability(1, "p", open_high=True)
    Traceback (most recent call last):
    ...
    ValueError: p must be in [0, 1), got 1
  """
  return check_range(p, name, 0.0, 1.0, open_low=open_low, open_high=open_high)


def check_sampling_prob(q: Any, name: str = "sampling_prob") -> float:
  """q as a float in (0, 1]."""
  return check_probability(q, name, open_low=True)


def check_delta(delta: Any, name: str = "delta", allow_zero: bool = False) -> float:
  """delta as a float in (0, 1), or [0, 1) with allow_zero."""
  return check_probability(delta, name, open_low=not allow_zero, open_high=True)


def check_confidence(confidence: Any, name: str = "confidence") -> float:
  """A confidence level as a float in (0, 1)."""
  return check_probability(confidence, name, open_low=True, open_high=True)


def check_delta_confidence(delta: Any, confidence: Any, *, allow_zero: bool = False
                           ) -> tuple[float, float]:
  """(delta, confidence) of an audit: `check_delta` (allow_zero) and `check_confidence`."""
  return check_delta(delta, allow_zero=allow_zero), check_confidence(confidence)


def check_int(value: Any, name: str, minimum: int = 1, maximum: Optional[int] = None) -> int:
  """value as an int in [minimum, maximum]; floats with an integer value are accepted.

  Examples:
    >>> check_int(3.0, "num_steps")
    3
    >>> check_int(9, "bit_width", 1, 8)
    Traceback (most recent call last):
    ...
    ValueError: bit_width must be an integer in [1, 8], got 9
  """
  requirement = (f"an integer >= {minimum}" if maximum is None
                 else f"an integer in [{minimum}, {maximum}]")
  v = _real(value, name, requirement)
  if not (math.isfinite(v) and v == int(v) and v >= minimum and (maximum is None or v <= maximum)):
    raise ValueError(f"{name} must be {requirement}, got {value!r}")
  if isinstance(value, (int, np.integer)):
    return int(value)          # exact, even beyond 2**53
  return int(v)


def memory_bytes() -> int:
  """Usable memory in bytes: physical memory or a smaller address-space limit (else 2**40)."""
  try:
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (AttributeError, ValueError, OSError):
    have = 2**40
  try:
    import resource  # pylint: disable=g-import-not-at-top
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit != resource.RLIM_INFINITY and limit > 0:
      have = min(have, limit)
  except (ImportError, ValueError, OSError):
    pass
  return have


# The most sequential steps one call may run (a scan length, an optimiser's iterations):
# at a microsecond or more per XLA loop step, 10^6 steps are seconds to minutes per call.
MAX_ITERATIONS = 10**6


def check_iterations(value: Any, name: str, minimum: int = 1) -> int:
  """A count of sequential steps as an int in [minimum, MAX_ITERATIONS], checked before looping.

  Examples:
    >>> check_iterations(2**31 - 1, "num_steps")
    Traceback (most recent call last):
    ...
    ValueError: num_steps must be an integer in [1, 1000000], got 2147483647
  """
  return check_int(value, name, minimum, MAX_ITERATIONS)


def check_size(value: Any, name: str, minimum: int = 1, *, bytes_per_unit: int = 4,
               units: int = 1, units_name: Optional[str] = None) -> int:
  """A count that sizes an allocation: an int >= minimum whose `value * units` entries of
  `bytes_per_unit` bytes fit in `memory_bytes()` (XLA would abort instead of raising).

  Examples:
    >>> check_size(10**15, "num_records")
    Traceback (most recent call last):
    ...
    ValueError: num_records = 1000000000000000 needs at least 4e+15 bytes, more than the memory of this machine (...)
  """
  v = check_int(value, name, minimum)
  need = v * max(int(units), 1) * bytes_per_unit
  have = memory_bytes()
  if need > have:
    times = f" (times {units_name} = {units})" if units_name else ""
    raise ValueError(f"{name} = {v}{times} needs at least {need:.3g} bytes, more than the "
                     f"memory of this machine ({have:.3g} bytes)")
  return v


def check_sizes(value: Any, name: str, minimum: int = 1) -> tuple[int, ...]:
  """A flat sequence of counts (layer widths, an input shape) as a tuple of ints >= minimum.

  Examples:
    >>> check_sizes((4, 0), "hidden")
    Traceback (most recent call last):
    ...
    ValueError: hidden[1] must be an integer >= 1, got 0
  """
  if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
    raise TypeError(f"{name} must be a sequence of integers, got {value!r}")
  if np.ndim(value) != 1 and len(value) > 0:
    raise ValueError(f"{name} must be a flat sequence of integers, got shape {np.shape(value)}")
  return tuple(check_size(v, f"{name}[{i}]", minimum) for i, v in enumerate(value))


def check_bool(value: Any, name: str) -> bool:
  """value as a Python bool if it is one (or a NumPy bool); TypeError otherwise (no truthiness).

  Examples:
    >>> check_bool("False", "monotonic")
    Traceback (most recent call last):
    ...
    TypeError: monotonic must be a bool (True or False), got str 'False'
  """
  if is_tracer(value):
    raise TypeError(f"{name} must be a concrete bool, not a traced value")
  if isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.bool_:
    value = value[()]
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{name} must be a bool (True or False), got "
                    f"{type(value).__name__} {value!r:.80}")
  return bool(value)


def check_callable(value: Any, name: str) -> Any:
  """value itself, if it is callable; TypeError naming the parameter otherwise."""
  if not callable(value):
    raise TypeError(f"{name} must be callable, got {value!r}")
  return value


def check_instance(value: Any, types: Any, name: str) -> Any:
  """value itself, if isinstance(value, types); TypeError naming the parameter otherwise.

  Examples:
    >>> check_instance(3, str, "directory")
    Traceback (most recent call last):
    ...
    TypeError: directory must be a str, got int 3
  """
  if not isinstance(value, types):
    want = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
    raise TypeError(f"{name} must be {'an' if want[0] in 'AEIOUaeiou' else 'a'} {want}, got "
                    f"{type(value).__name__} {value!r:.80}")
  return value


def check_choice(value: Any, allowed: Sequence[Any], name: str) -> Any:
  """value itself, if it is one of `allowed`.

  Examples:
    >>> check_choice("gdp", ("rdp", "pld"), "accountant")
    Traceback (most recent call last):
    ...
    ValueError: accountant must be one of ('rdp', 'pld'), got 'gdp'
  """
  if isinstance(value, (list, dict, set, np.ndarray)) or value not in allowed:
    raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
  return value


# arrays


def check_shape(x: Any, name: str, *, ndim: Optional[int | Sequence[int]] = None,
                shape: Optional[Sequence[Optional[int]]] = None,
                min_size: int = 0) -> tuple[int, ...]:
  """The shape of x, if of rank `ndim` (or one of them), matching `shape` (None: any) and
  with at least min_size entries."""
  s = tuple(np.shape(x))
  if ndim is not None:
    ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if len(s) not in ranks:
      want = " or ".join(str(r) for r in ranks)
      raise ValueError(f"{name} must have rank {want}, got shape {s}")
  if shape is not None:
    if len(s) != len(shape) or any(w is not None and w != g for w, g in zip(shape, s)):
      want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
      raise ValueError(f"{name} must have shape {want}, got {s}")
  if math.prod(s) < min_size:
    raise ValueError(f"{name} must have at least {min_size} entries, got shape {s}")
  return s


def _numeric_array(x: Any, name: str) -> np.ndarray:
  """x as a NumPy array of real numbers or bools."""
  arr = np.asarray(x)
  if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
          or arr.dtype == np.bool_):
    raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
  return arr


def check_array(x: Any, name: str, dtype: Any = np.float64, *,
                ndim: Optional[int | Sequence[int]] = None,
                shape: Optional[Sequence[Optional[int]]] = None,
                low: Optional[float] = None, high: Optional[float] = None,
                open_low: bool = False, open_high: bool = False,
                allow_inf: bool = False, min_size: int = 0, integer: bool = False) -> Any:
  """x as a NumPy array of `dtype` with no NaN, no inf, and every entry in range.

  Checks run in float64: ndim, shape, min_size as in `check_shape`; low / high bound every entry
  (inclusive unless open_low / open_high); allow_inf accepts +-inf (NaN never); integer requires
  integer values. A JAX tracer gets only the shape check and is returned unchanged.

  Examples:
    >>> check_array([0.0, 1.5], "mu", low=0, open_low=True)
    Traceback (most recent call last):
    ...
    ValueError: mu must be > 0, got values from 0 to 1.5
  """
  check_shape(x, name, ndim=ndim, shape=shape, min_size=min_size)
  if is_tracer(x):
    return x
  arr = _numeric_array(x, name)
  if arr.dtype == np.bool_ and arr.ndim == 0:
    raise ValueError(f"{name} must be a number, got {x!r}")
  values = arr.astype(np.float64)
  if integer and not np.all(values[np.isfinite(values)] == np.floor(values[np.isfinite(values)])):
    raise ValueError(f"{name} must be integers, got a non-integer value")
  if allow_inf:
    if np.any(np.isnan(values)):
      raise ValueError(f"{name} must not contain NaN")
  elif not np.all(np.isfinite(values)):
    raise ValueError(f"{name} must be finite (no NaN or inf)")
  low_bad = low is not None and np.any(values <= low if open_low else values < low)
  high_bad = high is not None and np.any(values >= high if open_high else values > high)
  if low_bad or high_bad:
    raise ValueError(f"{name} must be {_range_text(low, high, open_low, open_high)}, got values "
                     f"from {values.min():g} to {values.max():g}")
  return arr.astype(dtype)


def check_batch(x: Any, y: Any, weights: Any = ..., *, num_outputs: int = 1,
                x_name: str = "x_BxF", y_name: str = "y_B",
                weights_name: str = "weights_B") -> None:
  """Checks one batch: x [B, ...] (rank >= 2, B >= 1), y [B], weights [B] (shapes, tracers too);
  concrete x finite, y in {0, 1} (num_outputs == 1) or [0, num_outputs), weights in [0, 1].

  Examples:
    >>> check_batch(np.ones((2, 3)), [0, 2], num_outputs=2)
    Traceback (most recent call last):
    ...
    ValueError: y_B must be in [0, 1], got values from 0 to 2
  """
  shape = check_shape(x, x_name, min_size=1)
  if len(shape) < 2:
    raise ValueError(f"{x_name} must have a leading batch axis and features, got shape "
                     f"{shape}")
  b = shape[0]
  check_array(x, x_name)
  if num_outputs == 1:
    check_binary(y, y_name, shape=(b,))
  else:
    check_array(y, y_name, shape=(b,), low=0, high=num_outputs - 1, integer=True)
  if weights is not ...:
    check_array(weights, weights_name, shape=(b,), low=0.0, high=1.0)


def check_clip_norm(l2_clip_norm: Any, name: str = "l2_clip_norm") -> Any:
  """A clip norm C > 0 (inf: no clipping); C above the float32 maximum is returned as inf.
  A traced C is returned as where(C > 0, C, NaN): an out-of-range C under jit makes the
  clipped sum NaN, whatever the data, instead of a sign-flipped or zero sum.

  Examples:
    >>> check_clip_norm(1e39)
    inf
  """
  if is_tracer(l2_clip_norm):
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    c = jnp.asarray(l2_clip_norm)
    c = c if jnp.issubdtype(c.dtype, jnp.floating) else c.astype(jnp.float32)
    return jnp.where(c > 0, c, jnp.nan)
  c = check_range(l2_clip_norm, name, 0.0, open_low=True, allow_inf=True)
  return math.inf if np.ndim(c) == 0 and float(c) > _FLOAT32_MAX else c


def check_orders(orders: Any, name: str = "orders") -> np.ndarray:
  """Renyi orders as a non-empty float64[A], each finite and > 1 (a scalar becomes [1])."""
  a = check_array(np.atleast_1d(orders), name, ndim=1, low=1.0, open_low=True)
  if a.size == 0:
    raise ValueError(f"{name} must be a non-empty 1-D sequence of values > 1, got shape {a.shape}")
  return a


def check_binary(x: Any, name: str, *, ndim: Optional[int | Sequence[int]] = None,
                 shape: Optional[Sequence[Optional[int]]] = None) -> Any:
  """x as a NumPy bool array of booleans or 0 / 1; a tracer gets only the shape check."""
  check_shape(x, name, ndim=ndim, shape=shape)
  if is_tracer(x):
    return x
  arr = _numeric_array(x, name)
  if arr.dtype != np.bool_ and not np.all((arr == 0) | (arr == 1)):
    raise ValueError(f"{name} must contain only 0 and 1 (or booleans)")
  return arr.astype(bool)


# keys, labels and parameter trees


def check_key(key: Any, name: str = "key") -> Any:
  """key itself if it is one JAX PRNG key (a typed key or a raw uint32[2]); TypeError otherwise."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
          and key.ndim == 0) and not (
              isinstance(key, jax.Array) and key.dtype == jnp.uint32 and key.shape == (2,)):
    raise TypeError(f"{name} must be one jax.random key, got {key!r:.80}")
  return key


def check_labels(y: Any, name: str, num_outputs: int, **shape) -> Any:
  """Labels for num_outputs outputs: {0, 1} as float32 when num_outputs == 1 (a tracer is
  returned shape-checked), else int32 in [0, num_outputs); `shape` goes to the array check."""
  if num_outputs == 1:
    if is_tracer(y):
      return check_binary(y, name, **shape)
    return check_binary(y, name, **shape).astype(np.float32)
  return check_array(y, name, np.int32, low=0, high=num_outputs - 1, integer=True, **shape)


# extreme but valid inputs

_TINY, _HUGE = 1e-100, 1e100      # magnitudes past which an argument counts as extreme
_BIG_INT = 2**53                  # integers past which float arithmetic is inexact


def extreme_arguments(arguments: dict) -> dict:
  """{name: value} of the arguments of extreme magnitude: a nonzero float (or float array entry)
  below 1e-100 or above 1e100, or an integer beyond 2^53.

  Examples:
    >>> extreme_arguments({"sigma": 1e-300, "steps": 10, "delta": 1e-5, "n": 2**63})
    {'sigma': 1e-300, 'n': 9223372036854775808}
  """
  out = {}
  for name, v in arguments.items():
    if isinstance(v, (bool, np.bool_, str, bytes)) or v is None or is_tracer(v):
      continue
    if isinstance(v, (int, np.integer)):
      if abs(int(v)) > _BIG_INT:
        out[name] = v
      continue
    if isinstance(v, (float, np.floating, np.ndarray)) and np.size(v) and np.issubdtype(
        np.asarray(v).dtype, np.floating):
      a = np.abs(np.asarray(v, np.float64))
      a = a[np.isfinite(a) & (a > 0)]
      if a.size and (a.min() < _TINY or a.max() > _HUGE):
        out[name] = v
  return out


def _released_nonfinite(out) -> bool:
  """True if `out` (a float, float array, or tuple, list or dict of them) holds NaN or inf."""
  if isinstance(out, (tuple, list)):
    return any(_released_nonfinite(o) for o in out)
  if isinstance(out, dict):
    return any(_released_nonfinite(o) for o in out.values())
  if isinstance(out, (float, np.floating)):
    return not math.isfinite(out)
  dtype = getattr(out, "dtype", None)
  if dtype is not None and hasattr(out, "shape") and not is_tracer(out):
    try:
      floating = np.issubdtype(np.dtype(dtype), np.floating)
    except TypeError:                     # PRNG keys and other extended dtypes
      return False
    return floating and not bool(np.all(np.isfinite(np.asarray(out))))
  return False


def names_extreme_arguments(fn=None, *, finite: bool = True):
  """Decorator: where extreme but valid arguments defeat float arithmetic, say which.

  If the function raises ArithmeticError, or a ValueError not naming an extreme argument, or
  (with `finite`) returns NaN or inf, while some arguments are extreme (`extreme_arguments`), an
  OverflowError naming them is raised instead (original chained). Without an extreme argument the
  original outcome stands. finite=False: infinities belong to the result's contract.

  Examples:
    >>> @names_extreme_arguments
    ... def inverse_square(sigma):
    ...   return 1.0 / sigma**2
    >>> inverse_square(1e-300)
    Traceback (most recent call last):
    ...
    OverflowError: sigma = 1e-300 is too extreme for this computation (ZeroDivisionError: float division by zero)
  """
  if fn is None:
    return functools.partial(names_extreme_arguments, finite=finite)
  signature = inspect.signature(fn)

  def extremes(args, kwargs):
    try:
      bound = signature.bind(*args, **kwargs)
    except TypeError:
      return {}
    return extreme_arguments(bound.arguments)

  def refuse(found, cause):
    text = ", ".join(f"{k} = {v!r:.40}" for k, v in found.items())
    return OverflowError(f"{text} {'is' if len(found) == 1 else 'are'} too extreme for "
                         f"this computation ({cause})")

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    try:
      out = fn(*args, **kwargs)
    except (ArithmeticError, ValueError) as e:
      found = extremes(args, kwargs)
      if not found or (isinstance(e, ValueError) and not isinstance(e, ArithmeticError)
                       and any(k in str(e) for k in found)):
        raise
      raise refuse(found, f"{type(e).__name__}: {' '.join(str(e).split())[:200]}") from e
    if finite and _released_nonfinite(out):
      found = extremes(args, kwargs)
      if found:
        raise refuse(found, "the result is not finite")
    return out

  return wrapper
