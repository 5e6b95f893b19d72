"""A DP-SGD training recipe: the pieces that close most of the gap to non-private training.

Each piece is optional and plugs into `dpsgd.train_many` through an existing door,
so the sampler, the privatizer and the accountant are the engine's own:

  optimiser        `train_many(..., optimizer=optax.sgd(lr, momentum=0.9))` or
                   `optax.adam(lr)`: the optimiser receives the privatized gradient
                   (clipped sum + N(0, sigma^2 C^2 I), divided by B), so its state
                   (momentum, Adam's moments) is post-processing.
  parameter EMA    `DpSgdConfig(..., ema_decay=0.9)`: `TrainResult.ema_params` is
                   the debiased exponential moving average of the iterates
                   (post-processing of the released parameters).
  augmentation     `augmented_clipping(model, shifts, image_shape)`: the clipping door
  multiplicity     of the engine with K views of each record (pixel shifts) whose
                   gradients are AVERAGED before clipping, so each record still moves
                   the clipped sum by at most C (De et al. 2022).
  normalisation    `models.cnn(..., groups=G)`: group norm, per-example statistics
                   (batch norm would mix the examples of a batch);
                   `center_on_public`: inputs centred on the mean of PUBLIC records.
  batch size       `noise_for_batch_sizes`: at fixed (epsilon, delta, epochs), the
                   sigma of each batch size B and the noise sigma / B of the averaged
                   gradient (Sander, Stock & Sablayrolles 2023).
  baseline         `train_nonprivate`: ordinary minibatch training (no clipping, no
                   noise) with checkpoint selection on a public validation split, the
                   reference the DP models are compared with.

References: De, Berrada, Hayes, Smith, Balle 2022, "Unlocking High-Accuracy
Differentially Private Image Classification through Scale",
https://arxiv.org/abs/2204.13650; Sander, Stock, Sablayrolles 2023, "TAN without a
burn: Scaling laws of DP-SGD", https://arxiv.org/abs/2210.03403; Tramer & Boneh 2021,
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
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import models as models_lib
from dpjax.clipping import ClippingPath
from dpjax.clipping import sqnorm
from dpjax.clipping import vmap as vmap_clipping

PyTree = Any
# The models' label check (binary {0, 1} or class indices), shared with models.py.

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
  """Images moved by a whole number of pixels, with zeros shifted in.

  Args:
    x_BxF: float32[B, H * W * C] images, row-major (H, W, C) per row.
    shift: (dy, dx) integers with |dy| < H, |dx| < W; out[b, i, j] = x[b, i - dy, j - dx]
      where that pixel exists, else 0 (dy > 0 moves the content down, dx > 0 right).
    image_shape: (H, W, C).
  Returns:
    float32[B, H * W * C]; (0, 0) returns the images unchanged.

  Examples:
    >>> import jax.numpy as jnp
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

  Each record i is seen through K = len(shifts) views v_ik = shift_k(x_i), and its
  gradient is the AVERAGE over the views, clipped once:

    g_i = (1 / K) sum_k grad loss(params; v_ik, y_i),
    sum = sum_i w_i min(1, C / ||g_i||) g_i,

  the clipped-sum contract of `dpjax.clipping` with the per-record loss
  (1 / K) sum_k loss(v_ik, y_i). Adding or removing one record therefore still moves
  the sum by at most C, whatever K: the sampler, noise and accountant are unchanged.
  (Clipping each view separately and summing would let one record contribute K C.)
  The shifts are a fixed public set, so the views of a record are a deterministic
  function of that record alone. Per-example gradients by vmap(grad) over records
  (views averaged inside), norms and the dropping of non-finite gradients as in
  `clipping.vmap.clipped_grad_sum`; with the single shift (0, 0) the result is
  `vmap.clipped_grad_sum`'s, bit for bit (tested).

  Args:
    model: a `models.Model` whose apply takes flat rows [B, H * W * C].
    shifts: K >= 1 (dy, dx) integer pairs (e.g. `DIGIT_SHIFTS`); (0, 0) is the
      identity.
    image_shape: (H, W, C) of a record.
  Returns:
    A `ClippingPath` named "augmented", for `train_many(..., clipping=...)`; build it
    once and reuse it (the engine caches its program on the object).
  Cost: K forward / backward passes per record and [B, P] per-example gradients.

  Examples:
    >>> import jax, jax.numpy as jnp
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
    return _clipped_sum(g, weights_B, l2_clip_norm)

  return ClippingPath(fn, "augmented", per_example_grad_memory=True)


def _clipped_sum(g, weights_B, l2_clip_norm):
  """sum_i w_i min(1, C / ||g_i||) g_i and the norms, for per-example gradients g
  (the reduction of `vmap.clipped_grad_sum`: non-finite records add exactly 0)."""
  norms = vmap_clipping.tree_norms(g)
  keep = norms < jnp.inf
  a = jnp.where(keep, weights_B * vmap_clipping.clip_factor(norms, l2_clip_norm), 0.0)

  def weighted_sum(gl):
    gl = jnp.where((keep & (a != 0)).reshape((-1,) + (1,) * (gl.ndim - 1)), gl, 0.0)
    return jnp.tensordot(a, gl, axes=1)
  return jax.tree.map(weighted_sum, g), norms


class NoiseAtBatchSize(NamedTuple):
  """One batch size of `noise_for_batch_sizes`.

  Attributes:
    batch_size: B, the expected batch q n.
    sampling_prob: q = B / n.
    num_steps: T = round(epochs / q) (>= 1).
    noise_multiplier: sigma calibrated so that (q, sigma, T) spends target_epsilon.
    noise_per_example: sigma / B, the std of the noise in the averaged gradient in
      units of C (the "effective noise").
    total_amount_of_noise: eta = sigma / (q sqrt(T)), Sander et al.'s TAN; for large
      sigma epsilon depends on (q, sigma, T) almost only through eta.
  """
  batch_size: float
  sampling_prob: float
  num_steps: int
  noise_multiplier: float
  noise_per_example: float
  total_amount_of_noise: float


def noise_for_batch_sizes(target_epsilon: float, delta: float, epochs: float,
                          dataset_size: int, batch_sizes: Sequence[float], *,
                          accountant: str = "rdp") -> list[NoiseAtBatchSize]:
  """sigma for each batch size at fixed (epsilon, delta, epochs): how to choose B.

  For each B: q = B / n, T = round(epochs n / B), sigma =
  `accounting.calibrate_noise(target_epsilon, q, T, delta)`. The averaged
  gradient's noise is sigma C / B. For large sigma the subsampled Gaussian's Renyi
  divergence of order alpha is about alpha q^2 / sigma^2 per step (Mironov et al.
  2019), so epsilon depends on T q^2 / sigma^2 = 1 / eta^2 only (eta, the total
  amount of noise of Sander et al. 2023): at fixed epochs sigma grows like sqrt(B)
  and sigma / B falls like 1 / sqrt(B). Larger batches therefore add less noise per
  epoch, at the price of fewer steps. Sander et al. use the same relation to tune
  cheaply: runs at a small batch B' with sigma' = sigma B' / B (the same sigma / B)
  and the same T behave like the large-batch run, so a hyper-parameter search can
  run at B' and the chosen configuration be trained once at (B, sigma). Those
  small-batch runs simulate the training dynamics; their own epsilon is not the
  target and they must not touch private data unaccounted.

  Args:
    target_epsilon: epsilon > 0.
    delta: in (0, 1).
    epochs: E > 0 passes over the data.
    dataset_size: n >= 1.
    batch_sizes: expected batch sizes B in (0, n].
    accountant: "rdp" or "pld".
  Returns:
    One `NoiseAtBatchSize` per batch size, in the given order.
  Raises:
    ValueError naming the parameter.

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
  """x - mean(x_public): records centred on the feature-wise mean of PUBLIC records.

  A fixed map of each record that depends on the public records only, so applying
  it to the private data costs no privacy (a neighbouring data set changes only its
  own row) and the accountant needs no change. Zero-mean inputs remove the direction
  every record shares (the mean image) from the first layer's gradients, which
  conditions the problem (LeCun, Bottou, Orr & Mueller 1998, "Efficient BackProp",
  sec. 4.3); on the digits MLP it adds 2 points at epsilon = 1 and 1.6 at
  epsilon = 8 (`experiments.dpsgd_digits`, BUILD_NOTES.md).

  Never compute the mean on the private records: it would then depend on every
  private record, and the DP-SGD accountant does not charge for that.

  Args:
    x_public_PxF: float[P, F...], P >= 1 public records (e.g. the public validation
      split).
    x_NxF: float[N, F...], records whose rows have the public records' shape.
  Returns:
    float32[N, F...], the centred x_NxF.
  Raises:
    ValueError: on a non-finite value, no record, or rows of another shape.

  Examples:
    >>> import jax.numpy as jnp
    >>> center_on_public(jnp.array([[0.0, 2.0], [2.0, 4.0]]),
    ...                  jnp.array([[1.0, 1.0]])).tolist()
    [[0.0, -2.0]]
  """
  pub = _validate.check_array(x_public_PxF, "x_public_PxF", np.float32, ndim=(2, 4),
                              min_size=1)
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, ndim=pub.ndim, min_size=1)
  if x.shape[1:] != pub.shape[1:]:
    raise ValueError(f"x_NxF has rows of shape {x.shape[1:]}, x_public_PxF "
                     f"{pub.shape[1:]}: they must match")
  return jnp.asarray(x) - jnp.mean(jnp.asarray(pub), axis=0, keepdims=True)


class NonPrivateResult(NamedTuple):
  """Output of `train_nonprivate`.

  Attributes:
    params: pytree with leaves [M, ...], each model's parameters at its best epoch.
    val_accuracy_ME: float32[M, E], validation accuracy after each epoch.
    best_epoch_M: int32[M], the (0-based) epoch whose parameters were kept.
  """
  params: PyTree
  val_accuracy_ME: jax.Array
  best_epoch_M: jax.Array


def accuracy(model: models_lib.Model, params_M: PyTree, x_NxF: jax.typing.ArrayLike,
             y_N: jax.typing.ArrayLike) -> jax.Array:
  """Accuracy float32[M] of M models (params leaves [M, ...]) on labelled records.

  Multi-class: argmax of the logits; one output: logit > 0 predicts 1.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> model = models_lib.logistic_regression(1)
    >>> accuracy(model, {"w": jnp.array([[1.0], [-1.0]])}, jnp.array([[1.0], [-1.0]]),
    ...          jnp.array([1, 0])).tolist()
    [1.0, 0.0]
  """
  models_lib.check_model(model)
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32, ndim=(2, 4), min_size=1))
  _check_rows(x, y_N, "x_NxF", "y_N")
  y = jnp.asarray(_validate.check_labels(y_N, "y_N", model.num_outputs, shape=(x.shape[0],)))
  return _accuracy(model, params_M, x, y)


def _check_rows(x, y, x_name, y_name):
  if np.ndim(y) != 1 or np.shape(y)[0] != x.shape[0]:
    raise ValueError(f"{x_name} and {y_name} must have one label per row: {x_name} has "
                     f"{x.shape[0]} rows, {y_name} has shape {np.shape(y)}")


def _predict(model, params, x):
  logits = model.apply(params, x)
  if logits.shape[-1] == 1:
    return (logits[:, 0] > 0).astype(jnp.int32)
  return jnp.argmax(logits, axis=-1)


@functools.partial(jax.jit, static_argnums=0)
def _accuracy(model, params_M, x, y):
  pred = jax.vmap(_predict, in_axes=(None, 0, None))(model, params_M, x)
  return jnp.mean((pred == y[None, :].astype(pred.dtype)).astype(jnp.float32), axis=1)


def train_nonprivate(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                     x_val_NxF: jax.typing.ArrayLike, y_val_N: jax.typing.ArrayLike,
                     model: models_lib.Model, optimizer: optax.GradientTransformation, *,
                     batch_size: int, num_epochs: int, num_models: int = 1
                     ) -> NonPrivateResult:
  """Ordinary (non-private) minibatch training with checkpoint selection on validation.

  Model m is initialised with `model.init(k_init)` and trained for `num_epochs`
  epochs; each epoch visits the N records in a fresh random order in floor(N /
  batch_size) minibatches (the last partial batch of the order is skipped that
  epoch), each step `optimizer` on the gradient of the MEAN per-example loss
  (`models.per_example_loss`, L2 penalty included). No clipping, no noise: this is
  the non-private reference, not a private model. After every epoch the validation
  accuracy is measured; the parameters of the first epoch with the highest
  validation accuracy are returned (early stopping by checkpoint selection). The
  validation split must be public (or held out): it selects the checkpoint. The M
  models are vmapped, epochs and steps scanned, in one jitted program.

  Args:
    key: a jax.random key; model m uses jax.random.split(key, M)[m], split into an
      init key and an order key (epoch e's order from fold_in(order key, e)).
    x_NxF, y_N: training records and labels.
    x_val_NxF, y_val_N: validation records and labels.
    model: a `models.Model`.
    optimizer: an optax transformation (e.g. `optax.adam(1e-3)`); pass the same
      object across calls to reuse the compiled program.
    batch_size: in [1, N].
    num_epochs: >= 1.
    num_models: M >= 1.
  Returns:
    `NonPrivateResult(params [M, ...], val_accuracy_ME, best_epoch_M)`.

  Examples:
    >>> import jax, jax.numpy as jnp, optax
    >>> x = jax.random.normal(jax.random.key(0), (40, 2))
    >>> y = (x[:, 0] > 0).astype(jnp.int32)
    >>> out = train_nonprivate(jax.random.key(1), x, y, x, y, models_lib.logistic_regression(2),
    ...                        optax.sgd(1.0), batch_size=10, num_epochs=3)
    >>> out.val_accuracy_ME.shape, bool(out.val_accuracy_ME.max() > 0.9)
    ((1, 3), True)
  """
  models_lib.check_model(model)
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32, ndim=(2, 4), min_size=1))
  n = x.shape[0]
  _check_rows(x, y_N, "x_NxF", "y_N")
  y = jnp.asarray(_validate.check_labels(y_N, "y_N", model.num_outputs, shape=(n,)))
  xv = jnp.asarray(_validate.check_array(x_val_NxF, "x_val_NxF", np.float32,
                                         ndim=x.ndim, min_size=1))
  if xv.shape[1:] != x.shape[1:]:
    raise ValueError(f"x_val_NxF rows must have the shape of x_NxF's {x.shape[1:]}, got "
                     f"{xv.shape[1:]}")
  _check_rows(xv, y_val_N, "x_val_NxF", "y_val_N")
  yv = jnp.asarray(_validate.check_labels(y_val_N, "y_val_N", model.num_outputs,
                                 shape=(xv.shape[0],)))
  if not isinstance(optimizer, optax.GradientTransformation):
    raise TypeError(f"optimizer must be an optax.GradientTransformation, got {optimizer!r:.80}")
  b = _validate.check_int(batch_size, "batch_size")
  if b > n:
    raise ValueError(f"batch_size must be in [1, N = {n}], got {b}")
  e = _validate.check_int(num_epochs, "num_epochs")
  m = _validate.check_int(num_models, "num_models")
  keys = jax.random.split(key, m)
  params, curve, best = _nonprivate_program(model, optimizer, b, e)(keys, x, y, xv, yv)
  return NonPrivateResult(params, curve, best)


@functools.lru_cache(maxsize=32)
def _nonprivate_program(model, optimizer, batch_size, num_epochs):
  def one(key, x, y, xv, yv):
    n = x.shape[0]
    steps = n // batch_size
    k_init, k_order = jax.random.split(key)
    params = model.init(k_init)
    opt_state = optimizer.init(params)

    def loss(p, xb, yb):
      return jnp.mean(models_lib.per_example_loss(model, p, xb, yb))

    def epoch(carry, ep):
      params, opt_state, best_params, best_acc, best_ep = carry
      order = jax.random.permutation(jax.random.fold_in(k_order, ep), n)
      batches = order[: steps * batch_size].reshape(steps, batch_size)

      def step(c, idx):
        p, s = c
        g = jax.grad(loss)(p, x[idx], y[idx])
        upd, s = optimizer.update(g, s, p)
        return (optax.apply_updates(p, upd), s), None
      (params, opt_state), _ = jax.lax.scan(step, (params, opt_state), batches)
      acc = jnp.mean((_predict(model, params, xv) == yv.astype(jnp.int32)).astype(jnp.float32))
      better = acc > best_acc
      best_params = jax.tree.map(lambda new, old: jnp.where(better, new, old), params,
                                 best_params)
      return (params, opt_state, best_params, jnp.where(better, acc, best_acc),
              jnp.where(better, ep, best_ep)), acc

    carry0 = (params, opt_state, params, jnp.float32(-1.0), jnp.int32(-1))
    (_, _, best_params, _, best_ep), curve = jax.lax.scan(
        epoch, carry0, jnp.arange(num_epochs, dtype=jnp.int32))
    return best_params, curve, best_ep

  return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, None)))
