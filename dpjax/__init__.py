"""dpjax: differential privacy for machine learning in JAX.

Submodules are imported lazily, so `import dpjax` is cheap and call sites read
`dpjax.accounting.dpsgd_epsilon(...)`, `dpjax.mechanisms.laplace(...)`.
Accounting and audit statistics run on the host (NumPy/SciPy); mechanisms,
training and scoring run in JAX.
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "accounting", "attacks", "audit", "clipping", "data", "dpsgd", "mechanisms", "metrics",
    "models", "parallel", "pate", "privatizer", "prng", "sampling",
)


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + list(_SUBMODULES))
