"""Empirical privacy auditing: statistics, estimators, canary audits, one-run audits, a run store.

`audit.epsilon_lower_bound(...)` and `audit.clopper_pearson(...)` are re-exported
from `stats` (host NumPy/SciPy only). The other submodules are imported on first
use: `estimators` (attack scores -> bounds: threshold strategies, Bonferroni,
bootstrap spread), `certifiable` (the best bound certifiable from a known ROC,
the audit's ceiling), `parametric` (the mu-GDP estimate), `score_audit` (every
estimator on one pair of score samples: `score_bounds`), `canary` (the canaries
and the black-/white-box adversaries of DP-SGD), `one_run` (one training run,
many canaries), `coverage` (the estimators' confidence measured on simulated
audits of mechanisms of known eps), `runner` (auditing any training function, and our
DP-SGD with any model), `run` (the canary audit of DP-SGD as one resumable
pipeline: design, training, scores, bounds), `store` (a resumable on-disk store of
chunked results, each chunk verified against its identity),
`variants` (deliberately broken DP-SGDs), `guard` (a short white-box audit of
the engine for test suites, failing when its guarantee regresses),
`final_model` (the audit of adversaries that see only the last iterate),
`per_step` (the per-step white-box audit: every step a trial, Nasr et al. 2023),
`crafting` (their canaries, crafted initialisations and final-model scores),
`last_iterate` (the last-iterate heuristic: the law of a linear canary's final
displacement) and `pate_audit` (a canary audit of PATE's released labels, the
teachers held fixed).
"""

import importlib

from dpjax.audit.stats import clopper_pearson, epsilon_lower_bound

_SUBMODULES = ("canary", "certifiable", "coverage", "crafting", "estimators", "final_model",
               "guard", "last_iterate", "one_run", "parametric", "pate_audit", "per_step", "roc", "run",
               "runner", "score_audit", "stats", "store", "variants")
__all__ = ["clopper_pearson", "epsilon_lower_bound", *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax.audit' has no attribute {name!r}")
