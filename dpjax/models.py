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
import numpy as np

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


def check_model(model: Any, name: str = "model") -> Model:
  """model itself, if it is a Model with callable init / apply and valid fields.

  Raises TypeError (not a Model, init or apply not callable) or ValueError (l2 < 0,
  num_outputs not an integer >= 1, an input_shape that is not three positive ints),
  naming `name` and the field.

  Examples:
    >>> check_model(logistic_regression(3)).kind
    'logistic_regression'
  """
  _validate.check_instance(model, Model, name)
  _validate.check_callable(model.init, f"{name}.init")
  _validate.check_callable(model.apply, f"{name}.apply")
  _validate.check_nonnegative(model.l2, f"{name}.l2")
  _validate.check_int(model.num_outputs, f"{name}.num_outputs")
  _validate.check_instance(model.kind, str, f"{name}.kind")
  if model.input_shape is not None:
    _validate.check_sizes(model.input_shape, f"{name}.input_shape")
  return model


# The model factories validate, then call a cache keyed by the canonical arguments,
# so equal requests (3 and 3.0) return the same Model, and a bool or an unhashable
# argument is rejected by name before it reaches the cache.


def logistic_regression(num_features: int, l2: float = 0.0) -> Model:
  """Binary logistic regression on given features (include an intercept column).

  Args:
    num_features: D >= 1 (the intercept, if any, is one of the features).
    l2: L2 coefficient >= 0 (penalises every weight, the intercept too).
  Returns:
    A Model with params {"w": float32[D]}, zero-initialised; apply gives x @ w
    as logits float32[B, 1].
  """
  return _logistic_regression(_validate.check_size(num_features, "num_features"),
                              _validate.check_nonnegative(l2, "l2"))


@functools.lru_cache(maxsize=None)
def _logistic_regression(d: int, l2: float) -> Model:

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
  hidden = _validate.check_sizes(hidden, "hidden")
  f = _validate.check_size(num_inputs, "num_inputs", units=(hidden or (1,))[0])
  k = _validate.check_size(num_classes, "num_classes", units=(hidden or (f,))[-1])
  for i, (a, b) in enumerate(zip(hidden[:-1], hidden[1:])):
    _validate.check_size(a, f"hidden[{i}]", units=b)
  return _mlp(f, hidden, k, _validate.check_nonnegative(l2, "l2"))


@functools.lru_cache(maxsize=None)
def _mlp(f: int, hidden: tuple[int, ...], k: int, l2: float) -> Model:
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
  a_BxHxWxC = _as_jax(_validate.check_array(a_BxHxWxC, "a_BxHxWxC", np.float32, ndim=4,
                                            min_size=1))
  b, h, w, c = a_BxHxWxC.shape
  a = a_BxHxWxC[:, : h // 2 * 2, : w // 2 * 2, :]
  return a.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


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
  input_shape = _validate.check_sizes(input_shape, "input_shape")
  if len(input_shape) != 3:
    raise ValueError(f"input_shape must be (H, W, C), got {input_shape!r}")
  _validate.check_size(input_shape[0] * input_shape[1], "input_shape",
                       units=input_shape[2] * 4)
  channels = _validate.check_sizes(channels, "channels")
  for c_prev, c in zip((input_shape[2],) + channels[:-1], channels):
    _validate.check_size(c, "channels", units=9 * c_prev)
  k = _validate.check_size(num_classes, "num_classes",
                           units=input_shape[0] * input_shape[1] * max(channels, default=1))
  return _cnn(input_shape, channels, k, _validate.check_nonnegative(l2, "l2"))


@functools.lru_cache(maxsize=None)
def _cnn(input_shape: tuple[int, int, int], channels: tuple[int, ...], k: int,
         l2: float) -> Model:
  h, w, c_in = input_shape
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
  check_model(model)
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
  check_model(model)
  x_BxF = _as_jax(_validate.check_array(x_BxF, "x_BxF", np.float32, ndim=(2, 3, 4),
                                        min_size=1))
  y_B = _as_jax(_check_labels(y_B, "y_B", model.num_outputs, ndim=1))
  if x_BxF.shape[0] != y_B.shape[0]:
    raise ValueError(f"x_BxF and y_B must have the same leading size, got {x_BxF.shape[0]} "
                     f"and {y_B.shape[0]}")
  return loss_from_logits(model.apply(params, x_BxF), y_B) + l2_penalty(model, params)


def _as_jax(x):
  return x if _validate.is_tracer(x) else jnp.asarray(x)


def _check_labels(y, name: str, num_outputs: int, **shape) -> Any:
  """Labels: {0, 1} when num_outputs == 1, else integers in [0, num_outputs)."""
  if num_outputs == 1:
    return _validate.check_binary(y, name, **shape).astype(np.float32) if not (
        _validate.is_tracer(y)) else _validate.check_binary(y, name, **shape)
  return _validate.check_array(y, name, np.int32, low=0, high=num_outputs - 1, integer=True,
                               **shape)


def logistic_loss(z: jax.Array, y: jax.Array) -> jax.Array:
  """softplus(z) - y * z elementwise: the logistic loss of logit z for label y.

  Its derivative in z is sigmoid(z) - y (one exp), written as a custom JVP: the
  derivative jax derives from softplus's logaddexp form costs two exps and a log1p
  per example, which dominates vmap(grad) clipping of many small logistic
  regressions. Same values to float rounding (closer to the float64 derivative,
  tested).

  Args:
    z: logits, any shape, finite.
    y: labels in {0, 1}, the shape of z.
  """
  _validate.check_array(z, "z", min_size=1)
  _validate.check_binary(y, "y", shape=np.shape(z))
  return _logistic_loss(jnp.asarray(z, jnp.float32) if not _validate.is_tracer(z) else z,
                        jnp.asarray(y, jnp.float32) if not _validate.is_tracer(y) else y)


@jax.custom_jvp
def _logistic_loss(z: jax.Array, y: jax.Array) -> jax.Array:
  return jax.nn.softplus(z) - y * z


@_logistic_loss.defjvp
def _logistic_loss_jvp(primals, tangents):
  z, y = primals
  z_dot, y_dot = tangents
  return _logistic_loss(z, y), (jax.nn.sigmoid(z) - y) * z_dot - z * y_dot


def loss_from_logits(logits_BxK: jax.Array, y_B: jax.Array) -> jax.Array:
  """Per-example data loss float32[B] from logits [B, K] (no L2 term).

  K == 1: logistic loss of logit z for y in {0, 1}; K > 1: softmax cross-entropy
  for class indices y.
  """
  logits_BxK = _as_jax(_validate.check_array(logits_BxK, "logits_BxK", np.float32, ndim=2,
                                             min_size=1))
  b, k = logits_BxK.shape
  y_B = _as_jax(_check_labels(y_B, "y_B", k, shape=(b,)))
  if k == 1:
    z = logits_BxK[:, 0]
    return _logistic_loss(z, y_B.astype(z.dtype))
  logp = jax.nn.log_softmax(logits_BxK, axis=-1)
  return -jnp.take_along_axis(logp, y_B.astype(jnp.int32)[:, None], axis=-1)[:, 0]
