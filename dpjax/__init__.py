"""dpjax: differential privacy for machine learning in JAX.

The public API is the submodules below, imported on first access (`import dpjax` is
cheap); each module's docstring shows its canonical use. Accounting and audit statistics
run on the host (NumPy/SciPy); mechanisms, training and scoring run in JAX.

  DP-SGD, in data-flow order: prng, sampling (PoissonSampler is the accounted one),
    clipping, privatizer, dpsgd (DpSgdConfig, train_many), parallel, models, recipe,
    flax_model.
  Accounting and mechanisms: accounting (dpsgd_epsilon, calibrate_noise, Accountant),
    mechanisms, integer_noise.
  Attacks and audits: attacks, audit (eps lower bounds from attack scores), tradeoff,
    metrics.
  Other: data, fitting, pate, pate_release, recommender, tuning.

Examples:
  >>> import dpjax
  >>> round(dpjax.accounting.dpsgd_epsilon(1.0, 0.01, 10_000, 1e-5), 2)
  6.71
"""

import importlib

__version__ = "0.1.0"

__all__ = (
    "accounting", "attacks", "audit", "clipping", "data", "dpsgd", "fitting", "flax_model",
    "integer_noise",
    "mechanisms",
    "metrics", "models", "parallel", "pate", "pate_release", "privatizer", "prng", "recipe",
    "recommender", "sampling",
    "tradeoff", "tuning",
)


def __getattr__(name):
  if name in __all__:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + list(__all__))
