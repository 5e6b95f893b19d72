"""A resumable run store: named chunks of arrays on disk, under a manifest.

A long audit trains models in chunks; each finished chunk's arrays are written to
`<directory>/<name>.npz`, so an interrupted run can continue where it stopped
without redoing (or double-counting) finished work. Three rules make that safe:

* the manifest: a JSON description of everything that determines the chunks'
  contents (seed, sizes, settings). Resuming requires the stored manifest to equal
  the new one, so chunks of two different runs are never mixed;
* atomic writes: a chunk is written to a temporary file, flushed to disk and then
  renamed into place, so a killed run leaves either the whole chunk or none;
* a fresh (non-resuming) store deletes the chunks it finds, so stale chunks of an
  earlier run are never read.

The store knows nothing about audits; the caller decides what a chunk holds and
how chunks are named (letters, digits, "_", "-", ".").

Typical use:

    store = ChunkStore(os.path.join(out_dir, "chunks"), manifest, resume=resume)
    for name in store.missing(names):
      store.save(name, **train_chunk(name))
    parts = [store.load(name) for name in names]

Examples:
  >>> import tempfile
  >>> s = ChunkStore(tempfile.mkdtemp(), {"seed": 0})
  >>> s.save("a_c0000", x=np.arange(3))
  >>> s.missing(["a_c0000", "a_c0001"]), s.load("a_c0000")["x"].tolist()
  (['a_c0001'], [0, 1, 2])
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

MANIFEST = "manifest.json"
_SUFFIX = ".npz"
_TMP = ".tmp"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def canonical(x: Any) -> Any:
  """x as plain JSON values: dicts with str keys, lists, numbers, str, bool, None.

  NumPy scalars and arrays become Python numbers and lists; tuples become lists;
  non-finite floats become the strings "inf", "-inf" and "nan" (JSON has none).

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
  """Writes via `write(file)` to path + ".tmp", flushes it to disk, renames it to path."""
  tmp = path + _TMP
  with open(tmp, "wb") as f:
    write(f)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


class ChunkStore:
  """Named chunks of NumPy arrays in one directory, under a manifest.

  Args:
    directory: where the chunks and `manifest.json` live (created if missing).
    manifest: everything that determines the chunks' contents (JSON-able: numbers,
      strings, lists, dicts, NumPy values).
    resume: keep the chunks of an earlier run with an equal manifest. Without it,
      or when no manifest is stored yet, the store starts empty (deleting chunks
      it finds).
  Raises:
    ValueError: resuming with a stored manifest that differs from `manifest`.
  """

  def __init__(self, directory: str, manifest: Mapping, *, resume: bool = False):
    if not isinstance(manifest, Mapping):
      raise ValueError(f"manifest must be a mapping, got {type(manifest).__name__}")
    if not isinstance(directory, (str, os.PathLike)):
      raise TypeError(f"directory must be a str or os.PathLike, got {directory!r:.80}")
    self._dir = os.fspath(directory)
    self._manifest = canonical(manifest)
    os.makedirs(self._dir, exist_ok=True)
    path = os.path.join(self._dir, MANIFEST)
    if resume and os.path.exists(path):
      with open(path) as f:
        stored = json.load(f)
      if stored != self._manifest:
        keys = sorted(k for k in set(stored) | set(self._manifest)
                      if stored.get(k) != self._manifest.get(k))
        raise ValueError(f"resume: {path} was written by a run with different settings "
                         f"(differing: {', '.join(keys)}); start afresh (without resume) or "
                         "use another directory")
    else:
      for fn in os.listdir(self._dir):
        if fn.endswith(_SUFFIX) or fn.endswith(_SUFFIX + _TMP):
          os.remove(os.path.join(self._dir, fn))
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

  def missing(self, names: Sequence[str]) -> list[str]:
    """The names in `names` that have no chunk yet, in order."""
    return [n for n in names if n not in self]

  def names(self) -> list[str]:
    """The names of the stored chunks, sorted."""
    return sorted(fn[:-len(_SUFFIX)] for fn in os.listdir(self._dir) if fn.endswith(_SUFFIX))

  def save(self, name: str, **arrays) -> None:
    """Writes chunk `name` atomically (replacing an existing one).

    Args:
      name: the chunk's name.
      **arrays: the arrays to store (anything `np.asarray` accepts, no objects).
    """
    if not arrays:
      raise ValueError("save needs at least one array")
    path = self.path(name)
    data = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in data.items():
      if v.dtype == object:
        raise ValueError(f"array {k!r} has dtype object; store numbers or strings")
    _replace_atomically(path, lambda f: np.savez(f, **data))

  def load(self, name: str) -> dict[str, np.ndarray]:
    """The arrays of chunk `name`, as saved.

    Raises:
      KeyError: no such chunk.
    """
    path = self.path(name)
    if not os.path.exists(path):
      raise KeyError(f"no chunk {name!r} in {self._dir}")
    with np.load(path, allow_pickle=False) as f:
      return {k: f[k] for k in f.files}
