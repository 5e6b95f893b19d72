"""dpjax: differential privacy for machine learning in JAX.

The public API is the submodules below, imported on first access (`import dpjax` is
cheap); each module's docstring shows its canonical use. Accounting and audit statistics
run on the host (NumPy/SciPy); mechanisms, training and scoring run in JAX.

  DP-SGD (data flows top to bottom):
    prng          counter-based random bits, Bernoulli masks and normals
    sampling      batch selection: PoissonSampler (accounted), ShuffleSampler
    clipping      clipped per-example gradient sums (glm, ghost, vmap, sqnorm, grid)
    privatizer    the noise step as optax transformations
    matrix_factorization  correlated noise (banded Toeplitz, tree): streams, sensitivity
    dpsgd         DpSgdConfig (what the accountant is told); train_many / train_one
    clip_sweep    a (C, lr) grid of logistic regression as rescaled copies, few programs
    parallel      the model axis sharded over devices
    models        logistic regression, MLP, CNN as (init, apply) pairs
    recipe        training well with DP: augmentation multiplicity, batch size
    flax_model    a flax.linen module as a model
  Accounting and mechanisms:
    accounting    dpsgd_epsilon, calibrate_noise, Accountant; rdp, pld, gdp
    mechanisms    randomized response, Laplace, Gaussian, clipped sums and means
    selection     exponential mechanism, report noisy max
    integer_noise rounded Gaussian / Laplace noise drawn exactly from a table
  Attacks and audits:
    attacks       membership inference (loss, shadow models, LiRA), reconstruction
    audit         eps lower bounds from scores, canary audits, broken DP-SGD variants
    tradeoff      f-DP trade-off curves and the membership-inference region
    metrics       ROC, AUC, TPR at fixed FPR
  Other: data (credit world, digits, ratings, canaries), fitting (non-private reference
    fits), pate, pate_release, recommender, tuning (private hyperparameter tuning).

Examples:
  >>> import dpjax
  >>> round(dpjax.accounting.dpsgd_epsilon(1.0, 0.01, 10_000, 1e-5), 2)
  6.71
"""

import importlib

__version__ = "0.1.0"

__all__ = (
    "accounting", "attacks", "audit", "clip_sweep", "clipping", "data", "dpsgd", "fitting",
    "flax_model",
    "integer_noise", "matrix_factorization", "mechanisms", "metrics", "models", "parallel",
    "pate", "pate_release", "privatizer", "prng", "recipe", "recommender", "sampling",
    "selection", "tradeoff", "tuning",
)


def __getattr__(name):
  if name in __all__:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module 'dpjax' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + list(__all__))
