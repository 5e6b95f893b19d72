"""The curated public API: every listed name exists and is documented; no private name
of one module is used by another.

Each package's `__init__.py` lists its public names in `__all__` (dpjax, accounting,
attacks, audit, clipping, data, dpsgd). A listed name is a submodule, a documented
function or class, or a constant. The private modules shared by design are
`dpjax._validate` (the input checks) and `dpjax._xla` (compile-time helpers, which change no
value); any other `_name` defined in one module of dpjax
and read from another (`from dpjax.x import _y`, or `x._y` on an imported dpjax module)
is refused: what another module needs is public, with a docstring.
"""

import ast
import importlib
import inspect
import os
import pkgutil

from absl.testing import absltest

import dpjax

_ROOT = os.path.dirname(dpjax.__file__)
_SHARED_PRIVATE = {"_validate", "_xla"}


def _packages():
  out = [dpjax]
  for name in dpjax.__all__:
    m = importlib.import_module(f"dpjax.{name}")
    if hasattr(m, "__path__"):
      out.append(m)
  return out


def _resolve(pkg, name):
  if hasattr(pkg, name):
    return getattr(pkg, name)
  return importlib.import_module(f"{pkg.__name__}.{name}")


def _modules():
  out = []
  for pkg in _packages():
    for sub in pkgutil.iter_modules(pkg.__path__):
      out.append(importlib.import_module(f"{pkg.__name__}.{sub.name}"))
  return out


def _private_uses(path: str, module_name: str) -> list[str]:
  """'file:line name' for each private name of another dpjax module used in `path`."""
  tree = ast.parse(open(path).read(), path)
  aliases = {}            # local name -> the dpjax module it is bound to
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and (
        node.module == "dpjax" or node.module.startswith("dpjax.")):
      for a in node.names:
        target = f"{node.module}.{a.name}"
        if a.name.startswith("_") and a.name not in _SHARED_PRIVATE:
          found.append(f"{path}:{node.lineno} from {node.module} import {a.name}")
        try:
          importlib.import_module(target)
          aliases[a.asname or a.name] = target
        except ImportError:
          pass
    elif isinstance(node, ast.Import):
      for a in node.names:
        if a.name.startswith("dpjax"):
          aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or "dpjax"
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in aliases and node.attr.startswith("_")
        and not node.attr.startswith("__") and node.attr not in _SHARED_PRIVATE
        and aliases[node.value.id] != module_name):
      found.append(f"{path}:{node.lineno} {node.value.id}.{node.attr}")
  return found


class PublicApiTest(absltest.TestCase):

  def test_every_package_lists_its_public_names(self):
    for pkg in _packages():
      self.assertTrue(hasattr(pkg, "__all__"), f"{pkg.__name__} has no __all__")

  def test_every_listed_name_exists_and_is_documented(self):
    missing, undocumented = [], []
    for pkg in _packages():
      for name in pkg.__all__:
        try:
          v = _resolve(pkg, name)
        except (AttributeError, ImportError):
          missing.append(f"{pkg.__name__}.{name}")
          continue
        if (inspect.ismodule(v) or inspect.isfunction(v) or inspect.isclass(v)) and not (
            inspect.getdoc(v) or "").strip():
          undocumented.append(f"{pkg.__name__}.{name}")
    self.assertEqual(missing, [])
    self.assertEqual(undocumented, [])

  def test_every_public_function_and_class_is_documented(self):
    undocumented = []
    for mod in _modules():
      names = getattr(mod, "__all__", None)
      if names is None:
        names = [n for n, v in vars(mod).items() if not n.startswith("_")
                 and (inspect.isfunction(v) or inspect.isclass(v))
                 and getattr(v, "__module__", "") == mod.__name__]
      for n in names:
        v = getattr(mod, n, None)
        if (inspect.isfunction(v) or inspect.isclass(v)) and not (inspect.getdoc(v) or "").strip():
          undocumented.append(f"{mod.__name__}.{n}")
    self.assertEqual(undocumented, [])

  def test_no_private_name_is_used_across_modules(self):
    found = []
    for dirpath, _, files in os.walk(_ROOT):
      for f in files:
        if f.endswith(".py"):
          path = os.path.join(dirpath, f)
          rel = os.path.relpath(path, os.path.dirname(_ROOT))[:-3].replace(os.sep, ".")
          module_name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
          found += _private_uses(path, module_name)
    self.assertEqual(found, [])

  def test_the_scan_sees_a_private_use(self):
    # The check above can fail: a module reading another's private helper is found.
    import tempfile  # pylint: disable=g-import-not-at-top
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
      f.write("from dpjax import models as m\nfrom dpjax.prng import _ATOM_TOP\n"
              "x = m._as_jax(1)\n")
    try:
      found = _private_uses(f.name, "dpjax.other")
    finally:
      os.unlink(f.name)
    self.assertLen(found, 2)


if __name__ == "__main__":
  absltest.main()
