"""Models as pure (init, apply) pairs: logistic regression, an MLP, a small CNN.

A `Model` is a NamedTuple of two pure functions and an L2 coefficient:

  params = model.init(key)                      # unbatched pytree
  logits_BxK = model.apply(params, x_BxF)       # K == 1: binary (one logit)
  loss_B = per_example_loss(model, params, x_BxF, y_B)

Binary models (K == 1) use the logistic loss with labels y in {0, 1}; multi-class
models use softmax cross-entropy with integer labels. The optional L2 penalty
0.5 * l2 * ||params||^2 is part of EACH example's loss, so under DP-SGD it is
clipped with the example's data gradient (the accountant needs nothing else).

Factories are memoised (`logistic_regression(56) is logistic_regression(56)`), so a
model can be a static argument of a jitted function without recompiling on every
call.

Shape letters: B examples, F input features, D = F for linear models, K outputs.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> model = logistic_regression(3)
  >>> params = model.init(jax.random.key(0))
  >>> model.apply(params, jnp.ones((2, 3))).shape
  (2, 1)
  >>> per_example_loss(model, params, jnp.ones((2, 3)), jnp.array([0, 1]))
  Array([0.6931472, 0.6931472], dtype=float32)
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from dpjax import _validate

PyTree = Any


class Model(NamedTuple):
  """A model as pure functions.

  Attributes:
    init: key -> params (an unbatched pytree).
    apply: (params, x_BxF) -> logits float32[B, K]; K == 1 means binary.
    l2: coefficient of the per-example penalty 0.5 * l2 * ||params||^2 (>= 0).
    kind: "logistic_regression" (DP-SGD then uses its closed-form GLM clipping
      path), "mlp", "cnn" or "custom".
    num_outputs: K.
    input_shape: (H, W, C_in) of a "cnn" (its apply reshapes flat inputs to it);
      None for other kinds.
  """
  init: Callable[[jax.Array], PyTree]
  apply: Callable[[PyTree, jax.Array], jax.Array]
  l2: float = 0.0
  kind: str = "custom"
  num_outputs: int = 1
  input_shape: tuple[int, ...] | None = None


@functools.lru_cache(maxsize=None)
def logistic_regression(num_features: int, l2: float = 0.0) -> Model:
  """Binary logistic regression on given features (include an intercept column).

  Args:
    num_features: D >= 1 (the intercept, if any, is one of the features).
    l2: L2 coefficient >= 0 (penalises every weight, the intercept too).
  Returns:
    A Model with params {"w": float32[D]}, zero-initialised; apply gives x @ w
    as logits float32[B, 1].
  """
  d = _validate.check_int(num_features, "num_features")
  l2 = _validate.check_nonnegative(l2, "l2")

  def init(key):
    del key
    return {"w": jnp.zeros((d,), jnp.float32)}

  def apply(params, x_BxF):
    return (x_BxF @ params["w"])[:, None]

  return Model(init, apply, l2, "logistic_regression", 1)


def _dense_init(key, fan_in, fan_out):
  # He-normal weights for relu networks, zero biases.
  w = jax.random.normal(key, (fan_in, fan_out), jnp.float32) * math.sqrt(2.0 / fan_in)
  return {"w": w, "b": jnp.zeros((fan_out,), jnp.float32)}


@functools.lru_cache(maxsize=None)
def mlp(num_inputs: int, hidden: Sequence[int] = (256, 256), num_classes: int = 10,
        l2: float = 0.0) -> Model:
  """A dense relu network: num_inputs -> hidden... -> num_classes.

  Args:
    num_inputs: F >= 1.
    hidden: widths of the hidden layers (a tuple of positive ints; may be empty).
    num_classes: K >= 1 (K == 1: binary logistic output).
    l2: L2 coefficient >= 0 on all parameters.
  Returns:
    A Model with params {"layers": [{"w": [in, out], "b": [out]}, ...]}; each layer
    computes a @ w + b, relu on all but the last.
  """
  f = _validate.check_int(num_inputs, "num_inputs")
  hidden = tuple(_validate.check_int(h, "hidden") for h in hidden)
  k = _validate.check_int(num_classes, "num_classes")
  l2 = _validate.check_nonnegative(l2, "l2")
  sizes = (f,) + hidden + (k,)

  def init(key):
    keys = jax.random.split(key, len(sizes) - 1)
    return {"layers": [_dense_init(kk, a, b) for kk, a, b in zip(keys, sizes[:-1], sizes[1:])]}

  def apply(params, x_BxF):
    a = x_BxF.reshape(x_BxF.shape[0], -1)
    layers = params["layers"]
    for i, layer in enumerate(layers):
      a = a @ layer["w"] + layer["b"][None, :]
      if i + 1 < len(layers):
        a = jax.nn.relu(a)
    return a

  return Model(init, apply, l2, "mlp", k)


def avg_pool2(a_BxHxWxC: jax.Array) -> jax.Array:
  """2x2 average pooling with stride 2 (odd trailing rows / columns dropped), as in `cnn`.

  Args:
    a_BxHxWxC: activations [B, H, W, C].
  Returns:
    [B, H // 2, W // 2, C].
  """
  b, h, w, c = a_BxHxWxC.shape
  a = a_BxHxWxC[:, : h // 2 * 2, : w // 2 * 2, :]
  return a.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


@functools.lru_cache(maxsize=None)
def cnn(input_shape: Sequence[int] = (8, 8, 1), channels: Sequence[int] = (16, 32),
        num_classes: int = 10, l2: float = 0.0) -> Model:
  """A small convolutional network.

  Architecture (NHWC): for each entry c of `channels`: 3x3 convolution with stride 1
  and SAME padding -> + bias -> relu -> 2x2 average pooling (floor); then flatten and
  one dense layer to `num_classes` logits. On 8x8x1 with channels (16, 32):
  8x8x16 -> 4x4x16 -> 4x4x32 -> 2x2x32 -> 128 -> 10.

  Args:
    input_shape: (H, W, C_in).
    channels: output channels per conv layer (positive ints).
    num_classes: K >= 1.
    l2: L2 coefficient >= 0 on all parameters.
  Returns:
    A Model with params {"conv": [{"w": [3, 3, c_in, c_out], "b": [c_out]}, ...],
    "dense": [{"w": [flat, K], "b": [K]}]}; apply accepts x flattened [B, H*W*C_in]
    or NHWC [B, H, W, C_in].
  """
  if len(input_shape) != 3:
    raise ValueError(f"input_shape must be (H, W, C), got {input_shape!r}")
  h, w, c_in = (_validate.check_int(v, "input_shape") for v in input_shape)
  channels = tuple(_validate.check_int(c, "channels") for c in channels)
  k = _validate.check_int(num_classes, "num_classes")
  l2 = _validate.check_nonnegative(l2, "l2")
  hh, ww = h, w
  for _ in channels:
    hh, ww = hh // 2, ww // 2
  if hh < 1 or ww < 1:
    raise ValueError(f"input_shape {input_shape} too small for {len(channels)} pooling layers")
  flat = hh * ww * (channels[-1] if channels else c_in)
  chans = (c_in,) + channels

  def init(key):
    keys = jax.random.split(key, len(channels) + 1)
    conv = []
    for kk, a, b in zip(keys[:-1], chans[:-1], chans[1:]):
      wconv = jax.random.normal(kk, (3, 3, a, b), jnp.float32) * math.sqrt(2.0 / (9 * a))
      conv.append({"w": wconv, "b": jnp.zeros((b,), jnp.float32)})
    return {"conv": conv, "dense": [_dense_init(keys[-1], flat, k)]}

  def apply(params, x):
    a = x.reshape(x.shape[0], h, w, c_in)
    for layer in params["conv"]:
      a = jax.lax.conv_general_dilated(
          a, layer["w"], window_strides=(1, 1), padding="SAME",
          dimension_numbers=("NHWC", "HWIO", "NHWC"))
      a = jax.nn.relu(a + layer["b"][None, None, None, :])
      a = avg_pool2(a)
    a = a.reshape(a.shape[0], -1)
    d = params["dense"][0]
    return a @ d["w"] + d["b"][None, :]

  return Model(init, apply, l2, "cnn", k, (h, w, c_in))


def l2_penalty(model: Model, params: PyTree) -> jax.Array:
  """0.5 * model.l2 * ||params||^2 (a scalar)."""
  if model.l2 == 0.0:
    return jnp.zeros((), jnp.float32)
  sq = sum(jnp.sum(jnp.square(p)) for p in jax.tree.leaves(params))
  return 0.5 * model.l2 * sq


def per_example_loss(model: Model, params: PyTree, x_BxF: jax.Array,
                     y_B: jax.Array) -> jax.Array:
  """Per-example loss float32[B] (each including the L2 penalty).

  Args:
    model: a Model.
    params: its parameters.
    x_BxF: inputs [B, ...].
    y_B: labels [B]: {0, 1} when the model has one output, class indices otherwise.
  Returns:
    float32[B]: logistic loss (K == 1) or softmax cross-entropy, plus
    0.5 * l2 * ||params||^2.
  """
  if x_BxF.shape[0] != y_B.shape[0]:
    raise ValueError(f"x_BxF and y_B must have the same leading size, got {x_BxF.shape[0]} "
                     f"and {y_B.shape[0]}")
  return loss_from_logits(model.apply(params, x_BxF), y_B) + l2_penalty(model, params)


@jax.custom_jvp
def logistic_loss(z: jax.Array, y: jax.Array) -> jax.Array:
  """softplus(z) - y * z elementwise: the logistic loss of logit z for label y.

  Its derivative in z is sigmoid(z) - y (one exp), written as a custom JVP: the
  derivative jax derives from softplus's logaddexp form costs two exps and a log1p
  per example, which dominates vmap(grad) clipping of many small logistic
  regressions. Same values to float rounding (closer to the float64 derivative,
  tested).
  """
  return jax.nn.softplus(z) - y * z


@logistic_loss.defjvp
def _logistic_loss_jvp(primals, tangents):
  z, y = primals
  z_dot, y_dot = tangents
  return logistic_loss(z, y), (jax.nn.sigmoid(z) - y) * z_dot - z * y_dot


def loss_from_logits(logits_BxK: jax.Array, y_B: jax.Array) -> jax.Array:
  """Per-example data loss float32[B] from logits [B, K] (no L2 term).

  K == 1: logistic loss of logit z for y in {0, 1}; K > 1: softmax cross-entropy
  for class indices y.
  """
  if logits_BxK.shape[-1] == 1:
    z = logits_BxK[:, 0]
    return logistic_loss(z, y_B.astype(z.dtype))
  logp = jax.nn.log_softmax(logits_BxK, axis=-1)
  return -jnp.take_along_axis(logp, y_B.astype(jnp.int32)[:, None], axis=-1)[:, 0]
