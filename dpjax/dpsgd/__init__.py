"""DP-SGD: the configuration the accountant is told, and many models trained at once.

One step of DP-SGD (Abadi et al. 2016) for a model with dataset size n:

  1. batch selection: Poisson sampling, each record in independently with prob. q
     (`sampling.PoissonSampler`, a static-shape 0/1 mask over the records);
  2. per-example gradients g_i, clipped to L2 norm <= C and summed
     (`clipping.path_for(model)`);
  3. noise and the FIXED denominator: (sum + N(0, sigma^2 C^2 I)) / B with
     B = q * n, never the realised batch size (`privatizer.dp_aggregate`);
  4. any optax optimiser (post-processing).

The accountant is told (q, sigma, T, delta) by `DpSgdConfig.epsilon()`, built from
the same fields that drive steps 1-3. Each of steps 1-3 is a component passed
through one door, `train_many(..., sampler=, clipping=, privatizer=)`, with the
accounted one as the default (`components`).

Modules:
  config      DpSgdConfig (privacy and training fields; calibrate() returns a new
              config), PerformanceFlags (layout knobs that change no result)
  step        one model's T steps in a lax.scan: sample -> clip -> privatize -> update
  components  the accounted default sampler / clipping / privatizer, privacy-unit checks
  layout      the step layout (full mask or padded batches) and the chunks of models
  inputs      checks of the records, labels and fixed-gradient records (FixedGradients)
  engine      train_many / train_sweep / train_one: vmap over models, chunking

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import models
  >>> x = jax.random.normal(jax.random.key(0), (40, 3))
  >>> y = (x[:, 0] > 0).astype(jnp.int32)
  >>> cfg = DpSgdConfig(dataset_size=40, sampling_prob=0.25, num_steps=20)
  >>> out = train_many(jax.random.key(1), x, y, jnp.ones((4, 40), bool), cfg,
  ...                  models.logistic_regression(3))
  >>> out.params["w"].shape
  (4, 3)
"""

from dpjax.dpsgd.components import UnaccountedComponentWarning
from dpjax.dpsgd.config import DpSgdConfig, PerformanceFlags
from dpjax.dpsgd.engine import (DivergenceWarning, TrainResult, model_keys,
                                train_many, train_one, train_sweep)
from dpjax.dpsgd.inputs import FixedGradients
from dpjax.dpsgd.layout import batch_layout

__all__ = [
    "DpSgdConfig", "PerformanceFlags", "FixedGradients", "TrainResult", "train_many",
    "train_one", "train_sweep", "batch_layout", "model_keys",
    "UnaccountedComponentWarning", "DivergenceWarning",
]
