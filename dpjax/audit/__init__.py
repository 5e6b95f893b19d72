"""Empirical privacy auditing: statistics, threshold tests, canary audits, one-run audits.

`audit.epsilon_lower_bound(...)` and `audit.clopper_pearson(...)` are re-exported
from `stats` (host NumPy/SciPy only). The other submodules are imported on first
use:

  from scores to bounds: `thresholds` (fixed, split and declared threshold tests,
    Bonferroni, the best bound certifiable on a known ROC), `parametric` (the mu-GDP
    estimate), `score_audit` (every estimator on one pair of score samples), `one_run`
    (one training run, many canaries: Steinke et al.'s test, declared guess counts) and
    `one_run_fdp` (its f-DP analysis), `roc` (empirical ROC and its confidence band),
    `coverage` (the estimators' confidence on mechanisms of known eps);
  the audit pipeline: `run` (design -> train -> scores -> bounds, the one door to the
    engine, and the resumable canary audit of DP-SGD), `store` (its verified chunk
    store), `canary` (canaries, designs, the black- and white-box scores and the white-box
    statistic's exact law), `per_step` and `per_step_run` (the per-step white-box audit),
    `runner` (auditing any training function, and our DP-SGD with any model),
    `final_model` (adversaries that see only the last iterate), `crafting` (their
    canaries and initialisations), `last_iterate` (the last-iterate heuristic);
  broken trainings: `variants` (deliberately broken DP-SGDs, as replacement components),
    `mf_variants` (broken matrix-factorization trainings),
    `probe` (the bugs that shipped, in worlds where the theory is exact), `guard` (a short
    audit of the engine that fails when its guarantee regresses);
  `pate_audit` (a canary audit of PATE's released labels).
"""

import importlib

from dpjax.audit.stats import clopper_pearson, epsilon_lower_bound

_SUBMODULES = ("canary", "coverage", "crafting", "final_model", "guard", "last_iterate",
               "mf_variants", "one_run", "one_run_fdp", "parametric", "pate_audit", "per_step",
               "per_step_run", "probe", "roc", "run", "runner", "score_audit", "stats",
               "store", "thresholds", "variants")
__all__ = ["clopper_pearson", "epsilon_lower_bound", *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax.audit' has no attribute {name!r}")
