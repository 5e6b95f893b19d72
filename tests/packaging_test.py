"""The package builds, installs and imports from outside the repository."""

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from absl.testing import absltest

import dpjax

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tracked_package_files():
  """The dpjax/*.py files git tracks (the package as committed)."""
  out = subprocess.run(["git", "ls-files", "dpjax"], cwd=_ROOT, capture_output=True, text=True)
  if out.returncode != 0:
    return None
  return sorted(f for f in out.stdout.split() if f.endswith(".py"))


class PackagingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    # Build from a copy of what the package is made of (an in-tree build would leave
    # build/ and *.egg-info in the checkout).
    src = os.path.join(cls.tmp, "src")
    shutil.copytree(os.path.join(_ROOT, "dpjax"), os.path.join(src, "dpjax"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
      shutil.copy(os.path.join(_ROOT, f), src)
    wheels = os.path.join(cls.tmp, "wheels")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", wheels, src], capture_output=True, text=True, timeout=300)
    if build.returncode != 0:
      raise AssertionError(f"pip wheel failed:\n{build.stdout}\n{build.stderr}")
    (cls.wheel,) = [os.path.join(wheels, f) for f in os.listdir(wheels) if f.endswith(".whl")]
    cls.target = os.path.join(cls.tmp, "site")
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", cls.target,
         cls.wheel], capture_output=True, text=True, timeout=300)
    if inst.returncode != 0:
      raise AssertionError(f"pip install failed:\n{inst.stdout}\n{inst.stderr}")

  def test_wheel_holds_the_library_only(self):
    names = zipfile.ZipFile(self.wheel).namelist()
    py = sorted(n for n in names if n.endswith(".py"))
    self.assertTrue(all(n.startswith("dpjax/") for n in py), py)
    tracked = _tracked_package_files()
    if tracked is not None:
      self.assertEqual(sorted(set(tracked) - set(py)), [])   # every module shipped
    meta = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(self.wheel).read(meta).decode()
    self.assertIn(f"Version: {dpjax.__version__}", text)
    for dep in ("jax", "numpy", "scipy", "optax", "tqdm"):
      self.assertIn(f"Requires-Dist: {dep}>=", text)

  def test_installed_package_imports_from_another_directory(self):
    code = ("import dpjax, os; import dpjax.dpsgd, dpjax.clipping, dpjax.audit, "
            "dpjax.accounting; print(os.path.dirname(dpjax.__file__)); "
            "print(dpjax.__version__); "
            "print(round(dpjax.accounting.dpsgd_epsilon(1.0, 0.01, 1000, 1e-5), 3))")
    env = dict(os.environ, PYTHONPATH=self.target)
    out = subprocess.run([sys.executable, "-c", code], cwd=tempfile.mkdtemp(), env=env,
                         capture_output=True, text=True, timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr)
    where, version, eps = out.stdout.split()
    self.assertEqual(os.path.realpath(where),
                     os.path.realpath(os.path.join(self.target, "dpjax")))
    self.assertEqual(version, dpjax.__version__)
    self.assertGreater(float(eps), 0.0)

  def test_public_api_lists_real_modules(self):
    for name in dpjax.__all__:
      with self.subTest(name):
        self.assertTrue(os.path.exists(os.path.join(_ROOT, "dpjax", name + ".py"))
                        or os.path.isdir(os.path.join(_ROOT, "dpjax", name)))
    with self.assertRaises(AttributeError):
      dpjax.no_such_module  # pylint: disable=pointless-statement


if __name__ == "__main__":
  absltest.main()
