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

Examples (training: `train_many`'s docstring):
  >>> cfg = DpSgdConfig(dataset_size=60_000, sampling_prob=256 / 60_000,
  ...                   num_steps=2_000).calibrate(2.0)       # sigma for eps = 2
  >>> round(cfg.noise_multiplier, 2), cfg.expected_batch_size, round(cfg.epsilon(), 2)
  (0.84, 256.0, 2.0)
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
