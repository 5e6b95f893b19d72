"""DP-SGD: the configuration the accountant is told, and many models trained at once.

One step (Abadi et al. 2016): Poisson sampling at q; per-example gradients clipped to C and
summed; (sum + N(0, sigma^2 C^2 I)) / B with the FIXED B = q n; any optax optimiser.
`DpSgdConfig.epsilon()` accounts the default components of `train_many`.

Examples (training: `train_many`'s docstring):
  >>> cfg = DpSgdConfig(dataset_size=60_000, sampling_prob=256 / 60_000,
  ...                   num_steps=2_000).calibrate(2.0)       # sigma for eps = 2
  >>> round(cfg.noise_multiplier, 2), cfg.expected_batch_size, round(cfg.epsilon(), 2)
  (0.84, 256.0, 2.0)
"""

from dpjax.dpsgd.components import OtherAccountantWarning, UnaccountedComponentWarning
from dpjax.dpsgd.config import DpSgdConfig, PerformanceFlags
from dpjax.dpsgd.engine import (DivergenceWarning, TrainResult, model_keys, program,
                                train_many, train_one, train_sweep)
from dpjax.dpsgd.inputs import FixedGradients
from dpjax.dpsgd.layout import batch_layout

__all__ = [
    "DpSgdConfig", "PerformanceFlags", "FixedGradients", "TrainResult", "train_many",
    "train_one", "train_sweep", "batch_layout", "model_keys", "program",
    "UnaccountedComponentWarning", "OtherAccountantWarning", "DivergenceWarning",
]
