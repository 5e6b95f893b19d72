"""A resumable run store: named chunks of arrays on disk, under a manifest.

Each chunk is `<directory>/<name>.npz`, written atomically (temporary file, fsync, rename) with
the manifest's SHA-256 fingerprint, its name, the caller's identity and a checksum of its arrays;
a chunk failing these is never used. Resuming requires an equal stored manifest; a fresh store
deletes the chunks it finds. Errors raise `StoreError` naming the file.

Examples:
  >>> import tempfile
  >>> s = ChunkStore(tempfile.mkdtemp(), {"seed": 0})
  >>> s.save("a_c0000", identity={"chunk": 0}, x=np.arange(3))
  >>> s.missing(["a_c0000", "a_c0001"]), s.load("a_c0000", {"chunk": 0})["x"].tolist()
  (['a_c0001'], [0, 1, 2])
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
import zipfile
import zlib
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from dpjax import _validate

MANIFEST = "manifest.json"
_SUFFIX = ".npz"
_TMP = ".tmp"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# Reserved array names of a chunk: its identity (JSON bytes) and its checksum.
_IDENTITY = "__identity__"
_CHECKSUM = "__checksum__"
_ON_INVALID = ("recompute", "refuse")


class StoreError(ValueError):
  """A store unusable as asked (corrupt or foreign file, unwritable directory, full disk)."""


class InvalidChunkWarning(UserWarning):
  """A stored chunk failed verification and will be recomputed (never used)."""


def _fingerprint(value: Any) -> str:
  """SHA-256 (hex) of the canonical JSON of value."""
  text = json.dumps(canonical(value), sort_keys=True, allow_nan=False)
  return hashlib.sha256(text.encode()).hexdigest()


def _checksum(arrays: Mapping[str, np.ndarray]) -> str:
  """SHA-256 (hex) of the arrays' names, dtypes, shapes and bytes, in name order."""
  h = hashlib.sha256()
  for k in sorted(arrays):
    a = np.ascontiguousarray(arrays[k])
    h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def canonical(x: Any) -> Any:
  """x as plain JSON values (tuples as lists, NumPy as Python, non-finite as "inf", "-inf", "nan").

  Examples:
    >>> canonical({"a": (1, np.float32(0.5)), "b": float("inf")})
    {'a': [1, 0.5], 'b': 'inf'}
  """
  if isinstance(x, Mapping):
    return {str(k): canonical(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [canonical(v) for v in x]
  if isinstance(x, (np.ndarray, np.generic)):
    return canonical(x.tolist())
  if isinstance(x, float) and not math.isfinite(x):
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
  if x is None or isinstance(x, (bool, int, float, str)):
    return x
  raise ValueError(f"manifest values must be numbers, strings, lists or dicts, got {x!r}")


def _replace_atomically(path: str, write) -> None:
  """Writes via `write(file)` to path + ".tmp", fsyncs, renames to path (StoreError on failure)."""
  tmp = path + _TMP
  try:
    with open(tmp, "wb") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except OSError as e:
    try:
      os.remove(tmp)
    except OSError:
      pass
    raise StoreError(f"cannot write {path}: {e.strerror or e}") from None


class ChunkStore:
  """Named chunks of NumPy arrays in one directory, under a manifest (JSON-able, everything that
  determines the chunks). resume keeps an equal-manifest run's chunks (StoreError if different);
  on_invalid: "recompute" (warn, delete, report missing) or "refuse" (StoreError).
  """

  def __init__(self, directory: str, manifest: Mapping, *, resume: bool = False,
               on_invalid: str = "recompute"):
    if not isinstance(manifest, Mapping):
      raise ValueError(f"manifest must be a mapping, got {type(manifest).__name__}")
    _validate.check_instance(directory, (str, os.PathLike), "directory")
    _validate.check_bool(resume, "resume")
    _validate.check_choice(on_invalid, _ON_INVALID, "on_invalid")
    self._dir = os.fspath(directory)
    self._manifest = canonical(manifest)
    self._fingerprint = _fingerprint(self._manifest)
    self._on_invalid = on_invalid
    try:
      os.makedirs(self._dir, exist_ok=True)
    except OSError as e:
      raise StoreError(f"cannot create {self._dir}: {e.strerror or e}") from None
    path = os.path.join(self._dir, MANIFEST)
    if resume and os.path.exists(path):
      try:
        with open(path) as f:
          stored = json.load(f)
      except (OSError, ValueError, UnicodeDecodeError) as e:
        raise StoreError(f"resume: {path} cannot be read ({type(e).__name__}: {e}); start "
                         "afresh (without resume) or use another directory") from None
      if not isinstance(stored, dict):
        raise StoreError(f"resume: {path} is not a manifest (a JSON object); start afresh")
      if stored != self._manifest:
        keys = sorted(k for k in set(stored) | set(self._manifest)
                      if stored.get(k) != self._manifest.get(k))
        raise StoreError(f"resume: {path} was written by a run with different settings "
                         f"(differing: {', '.join(keys)}); start afresh (without resume) or "
                         "use another directory")
    else:
      try:
        for fn in os.listdir(self._dir):
          if fn.endswith(_SUFFIX) or fn.endswith(_SUFFIX + _TMP):
            os.remove(os.path.join(self._dir, fn))
      except OSError as e:
        raise StoreError(f"cannot clear {self._dir}: {e.strerror or e}") from None
    text = json.dumps(self._manifest, indent=1, allow_nan=False).encode() + b"\n"
    _replace_atomically(path, lambda f: f.write(text))

  @property
  def directory(self) -> str:
    return self._dir

  @property
  def manifest(self) -> dict:
    """The manifest, as stored (plain JSON values)."""
    return self._manifest

  def path(self, name: str) -> str:
    """The file of chunk `name`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
      raise ValueError(f"name must be letters, digits, '_', '-' or '.', got {name!r}")
    return os.path.join(self._dir, name + _SUFFIX)

  def __contains__(self, name: str) -> bool:
    return os.path.exists(self.path(name))

  def missing(self, names: Sequence[str],
              identities: Optional[Mapping[str, Mapping]] = None) -> list[str]:
    """The names without a valid chunk, in order; invalid chunks (against `identities[name]`) are
    handled per `on_invalid`.
    """
    out = []
    for n in names:
      if n not in self:
        out.append(n)
        continue
      reason = self.verify(n, None if identities is None else identities.get(n))
      if reason is None:
        continue
      if self._on_invalid == "refuse":
        raise StoreError(f"{self.path(n)}: {reason}")
      warnings.warn(f"{self.path(n)}: {reason}; recomputing it", InvalidChunkWarning, stacklevel=2)
      try:
        os.remove(self.path(n))
      except OSError as e:
        raise StoreError(f"cannot remove {self.path(n)}: {e.strerror or e}") from None
      out.append(n)
    return out

  def names(self) -> list[str]:
    """The names of the stored chunks, sorted."""
    return sorted(fn[:-len(_SUFFIX)] for fn in os.listdir(self._dir) if fn.endswith(_SUFFIX))

  def save(self, name: str, *, identity: Optional[Mapping] = None, **arrays) -> None:
    """Writes chunk `name` atomically with its `identity` (names "__identity__", "__checksum__"
    reserved)."""
    if not arrays:
      raise ValueError("save needs at least one array")
    path = self.path(name)
    data = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in data.items():
      if k in (_IDENTITY, _CHECKSUM):
        raise ValueError(f"array name {k!r} is reserved")
      if v.dtype == object:
        raise ValueError(f"array {k!r} has dtype object; store numbers or strings")
    ident = {"manifest": self._fingerprint, "name": name,
             "identity": canonical({} if identity is None else identity)}
    data[_IDENTITY] = np.frombuffer(json.dumps(ident, sort_keys=True).encode(), np.uint8)
    data[_CHECKSUM] = np.frombuffer(_checksum(data).encode(), np.uint8)
    _replace_atomically(path, lambda f: np.savez(f, **data))

  def _read(self, name: str) -> dict[str, np.ndarray]:
    """All arrays of the chunk file, reserved ones included (StoreError if unreadable)."""
    path = self.path(name)
    try:
      with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
    except FileNotFoundError:
      raise KeyError(f"no chunk {name!r} in {self._dir}") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
      raise StoreError(f"{path}: unreadable ({type(e).__name__}: {e})") from None

  def verify(self, name: str, identity: Optional[Mapping] = None) -> Optional[str]:
    """None if chunk `name` is whole and this run's `name` (and `identity`), else the reason."""
    try:
      data = self._read(name)
    except StoreError as e:
      return str(e).split(": ", 1)[1]
    if _IDENTITY not in data or _CHECKSUM not in data:
      return "no identity or checksum (written by another tool or version)"
    want = bytes(data.pop(_CHECKSUM)).decode(errors="replace")
    if _checksum(data) != want:
      return "checksum mismatch (truncated or corrupted)"
    try:
      ident = json.loads(bytes(data[_IDENTITY]).decode())
    except ValueError:
      return "unreadable identity"
    if ident.get("manifest") != self._fingerprint:
      return "written by another run (its manifest fingerprint differs)"
    if ident.get("name") != name:
      return f"it is chunk {ident.get('name')!r} of this run, not {name!r}"
    if identity is not None and ident.get("identity") != canonical(identity):
      return (f"its identity {ident.get('identity')} differs from the expected "
              f"{canonical(identity)}")
    return None

  def load(self, name: str, identity: Optional[Mapping] = None) -> dict[str, np.ndarray]:
    """The arrays of chunk `name` after `verify`: KeyError if absent, StoreError if invalid."""
    if name not in self:
      raise KeyError(f"no chunk {name!r} in {self._dir}")
    reason = self.verify(name, identity)
    if reason is not None:
      raise StoreError(f"{self.path(name)}: {reason}")
    data = self._read(name)
    return {k: v for k, v in data.items() if k not in (_IDENTITY, _CHECKSUM)}
