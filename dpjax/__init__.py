"""dpjax: differential privacy for machine learning in JAX.

The public API is the submodules below; each module's docstring shows its canonical
use. They are imported on first access, so `import dpjax` is cheap and call sites
read `dpjax.accounting.dpsgd_epsilon(...)` or, after `from dpjax import dpsgd`,
`dpsgd.train_many(...)`. Accounting and audit statistics run on the host
(NumPy/SciPy); mechanisms, training and scoring run in JAX.

  DP-SGD, one concept per module (data flows top to bottom):
    prng          counter-based random bits, Bernoulli masks and normals
    sampling      batch selection: PoissonSampler (accounted), ShuffleSampler
    clipping      clipped per-example gradient sums: glm, ghost, vmap, sqnorm,
                  grid (int32 sums for secure DP-SGD); path_for(model) /
                  register(kind, factory)
    privatizer    the noise step as optax transformations: dp_aggregate,
                  GaussianPrivatizer, SecureGaussianPrivatizer (integer noise)
    dpsgd         DpSgdConfig (what the accountant is told); train_many,
                  train_sweep, train_one
    parallel      the model axis sharded over devices
    models        logistic regression, MLP, CNN (optionally group-normalised) as
                  (init, apply) pairs
    recipe        training well with DP: augmentation multiplicity, batch size
                  at fixed epsilon, the non-private baseline (optimisers and the
                  parameter EMA go through train_many's optimizer / cfg.ema_decay)
    flax_model    a flax.linen module as a model (from_flax), ghost clipping
                  where its layers allow
  Privacy accounting and mechanisms:
    accounting    dpsgd_epsilon, calibrate_noise, Accountant; rdp, pld, gdp,
                  composition, statement
    mechanisms    randomized response, Laplace, Gaussian (on an integer grid by
                  default), exponential mechanism
    integer_noise rounded Gaussian / Laplace noise drawn exactly from a table
  Attacks and audits:
    attacks       membership inference (loss, shadow models, LiRA), reconstruction
    audit         epsilon lower bounds from attack scores, canary audits, one-run
                  audits, deliberately broken DP-SGD variants
    tradeoff      f-DP trade-off curves and the membership-inference region
    metrics       ROC, AUC, TPR at fixed FPR
  Other:
    data          synthetic credit world, scikit-learn digits, canary data sets
    fitting       non-private reference fitters (Newton logistic regression)
    pate          PATE teachers, noisy argmax, data-dependent RDP
    pate_release  the data-dependent RDP published with its smooth sensitivity
    recommender   McSherry-Mironov private recommender (global effects, covariance)
    tuning        private hyperparameter tuning: repeat-and-select with a random
                  number of runs, exponential-mechanism selection

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
