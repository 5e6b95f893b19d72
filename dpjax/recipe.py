"""A DP-SGD training recipe: the pieces that close most of the gap to non-private training.

Each plugs into `dpsgd.train_many` with sampler, privatizer and accountant unchanged: a
momentum or Adam `optimizer=` and `DpSgdConfig(ema_decay=...)` (post-processing);
`augmented_clipping` (augmentation multiplicity, De et al. 2022); `models.cnn(...,
groups=G)` and `center_on_public` (normalisation without private statistics);
`noise_for_batch_sizes` (batch size at fixed epsilon, Sander et al. 2023).

References: De et al. 2022, https://arxiv.org/abs/2204.13650; Sander, Stock &
Sablayrolles 2023, https://arxiv.org/abs/2210.03403; Tramer & Boneh 2021,
https://arxiv.org/abs/2011.11660.

Shape letters: M models, N records, F features, B batch, K views, H x W x C images.

Examples:
  >>> import jax, jax.numpy as jnp, optax
  >>> from dpjax import dpsgd, models
  >>> model = models.mlp(16, (8,), 3)
  >>> x = jax.random.uniform(jax.random.key(0), (30, 16))
  >>> y = jnp.arange(30) % 3
  >>> cfg = dpsgd.DpSgdConfig(dataset_size=30, sampling_prob=0.5, num_steps=4,
  ...                         noise_multiplier=1.0, ema_decay=0.5)
  >>> out = dpsgd.train_many(jax.random.key(1), x, y, jnp.ones((2, 30), bool), cfg, model,
  ...                        optimizer=optax.sgd(0.5, momentum=0.9))
  >>> out.ema_params["layers"][0]["w"].shape
  (2, 16, 8)
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import models as models_lib
from dpjax.clipping import ClippingPath
from dpjax.clipping import sqnorm
from dpjax.clipping import vmap as vmap_clipping


# One-pixel shifts: the identity and the four neighbours (8x8 digits).
DIGIT_SHIFTS = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))


def _check_shifts(shifts, image_shape) -> tuple[tuple[int, int], ...]:
  if isinstance(shifts, (str, bytes)) or not hasattr(shifts, "__iter__"):
    raise TypeError(f"shifts must be a sequence of (dy, dx) integer pairs, got {shifts!r:.80}")
  out = []
  for s in shifts:
    if isinstance(s, (str, bytes)) or not hasattr(s, "__len__") or len(s) != 2:
      raise ValueError(f"shifts must hold (dy, dx) integer pairs, got {s!r:.80}")
    dy = _validate.check_int(s[0], "shifts (dy)", minimum=-(image_shape[0] - 1))
    dx = _validate.check_int(s[1], "shifts (dx)", minimum=-(image_shape[1] - 1))
    if dy >= image_shape[0] or dx >= image_shape[1]:
      raise ValueError(f"shifts must be smaller than the image {image_shape[:2]}, got {s!r}")
    out.append((dy, dx))
  if not out:
    raise ValueError("shifts must hold at least one (dy, dx) pair")
  return tuple(out)


def _check_image_shape(image_shape) -> tuple[int, int, int]:
  shape = _validate.check_sizes(image_shape, "image_shape")
  if len(shape) != 3:
    raise ValueError(f"image_shape must be (H, W, C), got {image_shape!r}")
  return shape


def _shift(x_F, dy, dx, image_shape):
  """One record [F] (row-major H x W x C) moved by (dy, dx) pixels, zeros shifted in."""
  h, w, c = image_shape
  a = x_F.reshape(h, w, c)
  a = jnp.pad(a, ((max(dy, 0), max(-dy, 0)), (max(dx, 0), max(-dx, 0)), (0, 0)))
  a = a[max(-dy, 0): max(-dy, 0) + h, max(-dx, 0): max(-dx, 0) + w]
  return a.reshape(x_F.shape)


def shift_images(x_BxF: jax.typing.ArrayLike, shift: Sequence[int],
                 image_shape: Sequence[int]) -> jax.Array:
  """Rows [B, H * W * C] of images moved by (dy, dx) pixels (dy > 0: down), zeros shifted in.

  Examples:
    >>> shift_images(jnp.arange(4.0)[None], (0, 1), (2, 2, 1)).tolist()
    [[0.0, 0.0, 0.0, 2.0]]
  """
  image_shape = _check_image_shape(image_shape)
  (dy, dx), = _check_shifts((shift,), image_shape)
  x = jnp.asarray(_validate.check_array(x_BxF, "x_BxF", np.float32,
                                        shape=(None, math.prod(image_shape)), min_size=1))
  return jax.vmap(lambda r: _shift(r, dy, dx, image_shape))(x)


def augmented_clipping(model: models_lib.Model, shifts: Sequence[Sequence[int]],
                       image_shape: Sequence[int]) -> ClippingPath:
  """Augmentation multiplicity as a clipping path of the engine (De et al. 2022, §3.2).

  Record i is seen through K fixed public shifts v_ik (e.g. `DIGIT_SHIFTS`) and its
  view-averaged gradient clipped once:

    g_i = (1 / K) sum_k grad loss(params; v_ik, y_i),   sum = sum_i w_i min(1, C / ||g_i||) g_i,

  so one record moves the sum by at most C whatever K (accountant unchanged). Returns a
  `ClippingPath` "augmented" for `train_many(..., clipping=...)` (reuse it: the engine
  caches its program on it).

  Examples:
    >>> model = models_lib.mlp(4, (), 2)
    >>> path = augmented_clipping(model, ((0, 0), (1, 0)), (2, 2, 1))
    >>> s, norms = path(model.init(jax.random.key(0)), jnp.ones((3, 4)), jnp.array([0, 1, 0]),
    ...                 jnp.ones(3), 0.1)
    >>> bool(jnp.all(norms > 0.1)), s["layers"][0]["b"].shape
    (True, (2,))
  """
  models_lib.check_model(model)
  image_shape = _check_image_shape(image_shape)
  shifts = _check_shifts(shifts, image_shape)
  return _augmented_path(model, shifts, image_shape)


@functools.lru_cache(maxsize=64)
def _augmented_path(model, shifts, image_shape) -> ClippingPath:
  f = math.prod(image_shape)
  k = len(shifts)

  def loss_one(params, x_F, y):
    losses = jnp.stack([vmap_clipping.example_loss(model, params, _shift(x_F, dy, dx,
                                                                         image_shape), y)
                        for dy, dx in shifts])
    return jnp.sum(losses) / k

  def fn(params, x_BxF, y_B, weights_B, l2_clip_norm):
    _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=model.num_outputs)
    if math.prod(x_BxF.shape[1:]) != f:
      raise ValueError(f"x_BxF rows must have H * W * C = {f} values (image_shape "
                       f"{image_shape}), got shape {tuple(x_BxF.shape)}")
    l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
    g = sqnorm.per_example_grads(loss_one, params, jnp.reshape(x_BxF, (-1, f)), y_B)
    return vmap_clipping.sum_clipped_grads(g, weights_B, l2_clip_norm)

  return ClippingPath(fn, "augmented", per_example_grad_memory=True)


class NoiseAtBatchSize(NamedTuple):
  """One row of `noise_for_batch_sizes`: B, q = B / n, T = round(epochs / q), calibrated sigma,
  noise_per_example sigma / B, total_amount_of_noise eta = sigma / (q sqrt(T)) (TAN).
  """
  batch_size: float
  sampling_prob: float
  num_steps: int
  noise_multiplier: float
  noise_per_example: float
  total_amount_of_noise: float


@_validate.names_extreme_arguments
def noise_for_batch_sizes(target_epsilon: float, delta: float, epochs: float,
                          dataset_size: int, batch_sizes: Sequence[float], *,
                          accountant: str = "rdp") -> list[NoiseAtBatchSize]:
  """sigma for each batch size B in (0, n] at fixed (epsilon, delta, epochs).

  q = B / n, T = round(epochs n / B), sigma = `accounting.calibrate_noise` ("rdp" or
  "pld"). For large sigma epsilon depends on T q^2 / sigma^2 = 1 / eta^2 only (Sander et
  al. 2023), so sigma / B falls like 1 / sqrt(B). Small-batch runs at sigma B' / B simulate
  the dynamics for tuning; they must not touch private data unaccounted.

  Examples:
    >>> rows = noise_for_batch_sizes(1.0, 1e-5, 20, 1000, [100, 400])
    >>> [r.num_steps for r in rows], rows[0].noise_per_example > rows[1].noise_per_example
    ([200, 50], True)
  """
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  eps = _validate.check_epsilon(target_epsilon, "target_epsilon")
  delta = _validate.check_delta(delta)
  epochs = _validate.check_positive(epochs, "epochs")
  n = _validate.check_int(dataset_size, "dataset_size")
  _validate.check_choice(accountant, ("rdp", "pld"), "accountant")
  sizes = _validate.check_array(batch_sizes, "batch_sizes", ndim=1, min_size=1)
  rows = []
  for b in sizes.tolist():
    if not 0 < b <= n:
      raise ValueError(f"batch_sizes must lie in (0, dataset_size = {n}], got {b}")
    q = b / n
    t = max(1, int(round(epochs / q)))
    sigma = float(accounting.calibrate_noise(eps, q, t, delta, accountant=accountant,
                                             dataset_size=n))
    rows.append(NoiseAtBatchSize(float(b), q, t, sigma, sigma / b, sigma / (q * math.sqrt(t))))
  return rows


def center_on_public(x_public_PxF: jax.typing.ArrayLike,
                     x_NxF: jax.typing.ArrayLike) -> jax.Array:
  """x_NxF - mean(x_public_PxF): centred on PUBLIC records only, so it costs no privacy.

  Never use the private records' mean (unaccounted). float32[N, F...].

  Examples:
    >>> center_on_public(jnp.array([[0.0, 2.0], [2.0, 4.0]]),
    ...                  jnp.array([[1.0, 1.0]])).tolist()
    [[0.0, -2.0]]
  """
  pub = _validate.check_array(x_public_PxF, "x_public_PxF", np.float32, ndim=(2, 4), min_size=1)
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, ndim=pub.ndim, min_size=1)
  if x.shape[1:] != pub.shape[1:]:
    raise ValueError(f"x_NxF has rows of shape {x.shape[1:]}, x_public_PxF "
                     f"{pub.shape[1:]}: they must match")
  return jnp.asarray(x) - jnp.mean(jnp.asarray(pub), axis=0, keepdims=True)
