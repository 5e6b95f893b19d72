"""Empirical privacy auditing: statistics, canary audits, one-run audits, faulty variants.

`audit.epsilon_lower_bound(...)` and `audit.clopper_pearson(...)` are re-exported
from `stats` (host NumPy/SciPy only); the JAX-based submodules `canary`, `one_run`
and `variants` are imported on first use.
"""

import importlib

from dpjax.audit.stats import clopper_pearson, epsilon_lower_bound

_SUBMODULES = ("canary", "one_run", "stats", "variants")
__all__ = ["clopper_pearson", "epsilon_lower_bound", *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax.audit' has no attribute {name!r}")
