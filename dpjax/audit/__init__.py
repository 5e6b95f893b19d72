"""Empirical privacy auditing: statistics, threshold tests, canary audits, one-run audits.

`audit.epsilon_lower_bound` and `audit.clopper_pearson` are re-exported from `stats`; the
other submodules are imported on first use. From scores to bounds: `thresholds`, `parametric`,
`score_audit`, `one_run`, `one_run_fdp`, `roc`, `coverage`. The pipeline: `run` (the one door
to the engine), `store`, `canary`, `leaf`, `per_step`, `per_step_run`, `runner`, `final_model`,
`crafting`, `last_iterate`. Broken trainings: `variants`, `mf_variants`, `probe`, `guard`.
MF training: `mf_audit`.
PATE: `pate_audit`.
"""

import importlib

from dpjax.audit.stats import clopper_pearson, epsilon_lower_bound

_SUBMODULES = ("canary", "coverage", "crafting", "final_model", "guard", "last_iterate", "leaf",
               "mf_audit", "mf_variants", "one_run", "one_run_fdp", "parametric", "pate_audit", "per_step",
               "per_step_run", "probe", "roc", "run", "runner", "score_audit", "stats",
               "store", "thresholds", "variants")
__all__ = ["clopper_pearson", "epsilon_lower_bound", *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax.audit' has no attribute {name!r}")
