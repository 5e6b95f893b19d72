"""Scalar input checks shared by the accountants; each raises ValueError naming the
parameter and its allowed range."""

from __future__ import annotations

import math

import numpy as np


def _as_float(x, message: str) -> float:
  if isinstance(x, (bool, np.bool_)):
    raise ValueError(message)
  try:
    return float(x)
  except (TypeError, ValueError):
    raise ValueError(message) from None


def check_positive(x, name: str) -> float:
  """x as a float, finite and > 0."""
  v = _as_float(x, f"{name} must be a finite number > 0, got {x!r}")
  if not math.isfinite(v) or v <= 0:
    raise ValueError(f"{name} must be finite and > 0, got {x!r}")
  return v


def check_sampling_prob(q, name: str = "sampling_prob") -> float:
  """q as a float in (0, 1]."""
  v = _as_float(q, f"{name} must be in (0, 1], got {q!r}")
  if not (0.0 < v <= 1.0):
    raise ValueError(f"{name} must be in (0, 1], got {q!r}")
  return v


def check_nonnegative(x, name: str) -> float:
  """x as a float, finite and >= 0."""
  v = _as_float(x, f"{name} must be finite and >= 0, got {x!r}")
  if not math.isfinite(v) or v < 0:
    raise ValueError(f"{name} must be finite and >= 0, got {x!r}")
  return v


def check_delta(delta, name: str = "delta", allow_zero: bool = False) -> float:
  """delta as a float in (0, 1), or [0, 1) with allow_zero."""
  interval = "[0, 1)" if allow_zero else "(0, 1)"
  v = _as_float(delta, f"{name} must be in {interval}, got {delta!r}")
  if not ((0.0 <= v if allow_zero else 0.0 < v) and v < 1.0):
    raise ValueError(f"{name} must be in {interval}, got {delta!r}")
  return v


def check_int(value, name: str, minimum: int = 1) -> int:
  """value as an int >= minimum (floats with an integer value are accepted)."""
  msg = f"{name} must be an integer >= {minimum}, got {value!r}"
  f = _as_float(value, msg)
  if not math.isfinite(f) or f != int(f) or f < minimum:
    raise ValueError(msg)
  return int(f)
