"""Models as pure (init, apply) pairs: logistic regression, an MLP, a small CNN.

  params = model.init(key)                      # unbatched pytree
  logits_BxK = model.apply(params, x_BxF)       # K == 1: binary (one logit)
  loss_B = per_example_loss(model, params, x_BxF, y_B)

The L2 penalty 0.5 * l2 * ||params||^2 is part of EACH example's loss, so DP-SGD
clips it with the example's gradient. Factories are memoised, so a model can be a
static argument of a jitted function.

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
  """A model as pure functions: init(key) -> params; apply(params, x_BxF) -> float32[B, K].

  l2 >= 0 weighs the per-example penalty; kind "logistic_regression" (closed-form
  clipping), "mlp", "cnn" or "custom"; num_outputs K (1: binary); input_shape (H, W, C_in)
  for a "cnn", else None.
  """
  init: Callable[[jax.Array], PyTree]
  apply: Callable[[PyTree, jax.Array], jax.Array]
  l2: float = 0.0
  kind: str = "custom"
  num_outputs: int = 1
  input_shape: tuple[int, ...] | None = None


def check_model(model: Any, name: str = "model") -> Model:
  """model itself if it is a valid Model; TypeError or ValueError naming `name` otherwise.

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


def check_params(model: Any, params: Any, name: str = "params") -> PyTree:
  """params itself if `model` is a valid Model and params has the structure, leaf shapes and
  finite real values of `model.init`'s output; ValueError naming `name` otherwise.

  Examples:
    >>> check_params(logistic_regression(3), {"w": np.zeros(4)})
    Traceback (most recent call last):
    ...
    ValueError: params (leaf 0) must have shape [3], got (4,)
  """
  check_model(model)
  _check_params_like(params, jax.eval_shape(model.init, jax.random.key(0)), name)
  return params


def _check_params_like(params: Any, reference: PyTree, name: str) -> None:
  """params has reference's tree structure, leaf shapes, real dtypes and finite values."""
  try:
    same = jax.tree.structure(params) == jax.tree.structure(reference)
  except Exception:  # pylint: disable=broad-except
    same = False
  if not same:
    raise ValueError(f"{name} must have the structure of the model's parameters "
                     f"{jax.tree.structure(reference)}, got {type(params).__name__}")
  for i, (leaf, ref) in enumerate(zip(jax.tree.leaves(params), jax.tree.leaves(reference))):
    _validate.check_array(leaf, f"{name} (leaf {i})", np.float32, shape=tuple(ref.shape))


# Factories validate, then call a cache keyed by the canonical arguments (3 and 3.0 give
# the same Model; a bool or unhashable argument is refused before the cache).


def logistic_regression(num_features: int, l2: float = 0.0) -> Model:
  """Binary logistic regression on D >= 1 features (include an intercept column).

  params {"w": float32[D]}, zero-initialised; logits x @ w float32[B, 1]; l2 penalises
  every weight, the intercept too.
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


def _he_normal(key, shape, fan_in):
  """N(0, 2 / fan_in) float32[shape], drawn flat and reshaped: the same values as
  `jax.random.normal(key, shape)` (threefry's counters are the flat indices), and XLA:CPU
  compiles a flat draw several times faster than one with a short last axis (e.g. [256, 10])."""
  z = jax.random.normal(key, (math.prod(shape),), jnp.float32).reshape(shape)
  return z * math.sqrt(2.0 / fan_in)


def _dense_init(key, fan_in, fan_out):
  # He-normal weights for relu networks, zero biases.
  return {"w": _he_normal(key, (fan_in, fan_out), fan_in),
          "b": jnp.zeros((fan_out,), jnp.float32)}


def mlp(num_inputs: int, hidden: Sequence[int] = (256, 256), num_classes: int = 10,
        l2: float = 0.0) -> Model:
  """A dense relu network F -> hidden... -> K: params {"layers": [{"w", "b"}, ...]}.

  Each layer computes a @ w + b, relu on all but the last; K == 1 is binary.
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
    last = params["layers"][-1]
    return _mlp_hidden(params, x_BxF) @ last["w"] + last["b"][None, :]

  return Model(init, apply, l2, "mlp", k)


def _mlp_hidden(params, x):
  """`mlp`'s last hidden relu activations [B, H] (the flattened input without hidden layers)."""
  a = x.reshape(x.shape[0], -1)
  for layer in params["layers"][:-1]:
    a = jax.nn.relu(a @ layer["w"] + layer["b"][None, :])
  return a


def avg_pool2(a_BxHxWxC: jax.Array) -> jax.Array:
  """2x2 average pooling, stride 2: [B, H, W, C] -> [B, H // 2, W // 2, C] (as in `cnn`)."""
  a_BxHxWxC = _as_jax(_validate.check_array(a_BxHxWxC, "a_BxHxWxC", np.float32, ndim=4, min_size=1))
  b, h, w, c = a_BxHxWxC.shape
  a = a_BxHxWxC[:, : h // 2 * 2, : w // 2 * 2, :]
  return a.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def cnn(input_shape: Sequence[int] = (8, 8, 1), channels: Sequence[int] = (16, 32),
        num_classes: int = 10, l2: float = 0.0, *, groups: int | None = None) -> Model:
  """A small convolutional network, optionally with group normalisation.

  NHWC: per entry c of `channels`, 3x3 convolution (stride 1, SAME) + bias -> [group norm]
  -> relu -> 2x2 average pooling; then one dense layer to K logits. Params {"conv":
  [{"w": [3, 3, c_in, c_out], "b": [c_out]}, ...], "dense": [{"w": [flat, K], "b": [K]}]};
  apply takes [B, H*W*C_in] or [B, H, W, C_in]. groups=G (dividing every channel count)
  adds group norm (Wu & He 2018; "gamma", "beta" per layer): per-example statistics, so
  clipping stays valid, unlike batch norm (De et al. 2022); kind "custom" then.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> net = cnn((8, 8, 1), (4,), 3, groups=2)
    >>> net.kind, net.apply(net.init(jax.random.key(0)), jnp.ones((2, 64))).shape
    ('custom', (2, 3))
  """
  input_shape = _validate.check_sizes(input_shape, "input_shape")
  if len(input_shape) != 3:
    raise ValueError(f"input_shape must be (H, W, C), got {input_shape!r}")
  _validate.check_size(input_shape[0] * input_shape[1], "input_shape", units=input_shape[2] * 4)
  channels = _validate.check_sizes(channels, "channels")
  for c_prev, c in zip((input_shape[2],) + channels[:-1], channels):
    _validate.check_size(c, "channels", units=9 * c_prev)
  k = _validate.check_size(num_classes, "num_classes",
                           units=input_shape[0] * input_shape[1] * max(channels, default=1))
  l2 = _validate.check_nonnegative(l2, "l2")
  if groups is None:
    return _cnn(input_shape, channels, k, l2)
  g = _validate.check_int(groups, "groups")
  if not channels or any(c % g for c in channels):
    raise ValueError(f"groups must divide every entry of channels {channels}, got {g}")
  return _cnn_group_norm(input_shape, channels, k, l2, g)


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
      wconv = _he_normal(kk, (3, 3, a, b), 9 * a)
      conv.append({"w": wconv, "b": jnp.zeros((b,), jnp.float32)})
    return {"conv": conv, "dense": [_dense_init(keys[-1], flat, k)]}

  return Model(init, _conv_net_apply(input_shape, lambda a, layer: a), l2, "cnn", k, (h, w, c_in))


def _conv_net_apply(input_shape: tuple[int, int, int], normalise):
  """The forward pass of `cnn` (see its docstring)."""

  def apply(params, x):
    d = params["dense"][0]
    return _conv_trunk(input_shape, normalise, params, x) @ d["w"] + d["b"][None, :]
  return apply


def _conv_trunk(input_shape: tuple[int, int, int], normalise, params, x):
  """`cnn`'s flattened last conv block [B, flat]: every layer but the dense one."""
  h, w, c_in = input_shape
  a = x.reshape(x.shape[0], h, w, c_in)
  for layer in params["conv"]:
    a = jax.lax.conv_general_dilated(
        a, layer["w"], window_strides=(1, 1), padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    a = jax.nn.relu(normalise(a + layer["b"][None, None, None, :], layer))
    a = avg_pool2(a)
  return a.reshape(a.shape[0], -1)


_GROUP_NORM_EPS = 1e-5


def group_norm(a_BxHxWxC: jax.Array, gamma_C: jax.Array, beta_C: jax.Array,
               groups: int) -> jax.Array:
  """Group normalisation of NHWC activations [B, H, W, C], per example, G groups:
  (a - mean) / sqrt(var + 1e-5) * gamma_C + beta_C over each group of C / G channels.

  Examples:
    >>> a = jnp.arange(8.0).reshape(1, 2, 2, 2)
    >>> z = group_norm(a, jnp.ones(2), jnp.zeros(2), 1)
    >>> round(float(z.mean()), 6), round(float(z.var()), 3)
    (0.0, 1.0)
  """
  a = _as_jax(_validate.check_array(a_BxHxWxC, "a_BxHxWxC", np.float32, ndim=4, min_size=1))
  c = a.shape[-1]
  g = _validate.check_int(groups, "groups")
  if c % g:
    raise ValueError(f"groups = {g} must divide the {c} channels of a_BxHxWxC")
  gamma = _as_jax(_validate.check_array(gamma_C, "gamma_C", np.float32, shape=(c,)))
  beta = _as_jax(_validate.check_array(beta_C, "beta_C", np.float32, shape=(c,)))
  return _group_norm(a, gamma, beta, g)


def _group_norm(a, gamma, beta, g):
  b, h, w, c = a.shape
  a_g = a.reshape(b, h, w, g, c // g)
  mean = jnp.mean(a_g, axis=(1, 2, 4), keepdims=True)
  var = jnp.mean(jnp.square(a_g - mean), axis=(1, 2, 4), keepdims=True)
  z = ((a_g - mean) * jax.lax.rsqrt(var + _GROUP_NORM_EPS)).reshape(b, h, w, c)
  return z * gamma[None, None, None, :] + beta[None, None, None, :]


@functools.lru_cache(maxsize=None)
def _cnn_group_norm(input_shape: tuple[int, int, int], channels: tuple[int, ...], k: int,
                    l2: float, groups: int) -> Model:
  plain = _cnn(input_shape, channels, k, l2)   # same init draws, same conv / dense layers

  def init(key):
    params = plain.init(key)
    conv = [dict(layer, gamma=jnp.ones_like(layer["b"]), beta=jnp.zeros_like(layer["b"]))
            for layer in params["conv"]]
    return {"conv": conv, "dense": params["dense"]}

  apply = _conv_net_apply(
      input_shape, lambda a, layer: _group_norm(a, layer["gamma"], layer["beta"], groups))
  return Model(init, apply, l2, "custom", k, None)


def l2_penalty(model: Model, params: PyTree) -> jax.Array:
  """0.5 * model.l2 * ||params||^2 (a scalar)."""
  check_model(model)
  if model.l2 == 0.0:
    return jnp.zeros((), jnp.float32)
  sq = sum(jnp.sum(jnp.square(p)) for p in jax.tree.leaves(params))
  return 0.5 * model.l2 * sq


def per_example_loss(model: Model, params: PyTree, x_BxF: jax.Array,
                     y_B: jax.Array) -> jax.Array:
  """Per-example loss float32[B]: logistic (K == 1, y in {0, 1}) or softmax cross-entropy,
  plus the L2 term.
  """
  check_model(model)
  x_BxF = _as_jax(_validate.check_array(x_BxF, "x_BxF", np.float32, ndim=(2, 3, 4), min_size=1))
  y_B = _as_jax(_validate.check_labels(y_B, "y_B", model.num_outputs, ndim=1))
  if x_BxF.shape[0] != y_B.shape[0]:
    raise ValueError(f"x_BxF and y_B must have the same leading size, got {x_BxF.shape[0]} "
                     f"and {y_B.shape[0]}")
  return loss_from_logits(model.apply(params, x_BxF), y_B) + l2_penalty(model, params)


def _as_jax(x):
  return x if _validate.is_tracer(x) else jnp.asarray(x)


def logistic_loss(z: jax.Array, y: jax.Array) -> jax.Array:
  """softplus(z) - y * z elementwise, y in {0, 1}; custom JVP sigmoid(z) - y (one exp)."""
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
  """Per-example data loss float32[B] from logits [B, K]: logistic (K == 1) or softmax CE."""
  logits_BxK = _as_jax(_validate.check_array(logits_BxK, "logits_BxK", np.float32, ndim=2,
                                             min_size=1))
  b, k = logits_BxK.shape
  y_B = _as_jax(_validate.check_labels(y_B, "y_B", k, shape=(b,)))
  if k == 1:
    z = logits_BxK[:, 0]
    return _logistic_loss(z, y_B.astype(z.dtype))
  logp = jax.nn.log_softmax(logits_BxK, axis=-1)
  return -jnp.take_along_axis(logp, y_B.astype(jnp.int32)[:, None], axis=-1)[:, 0]


# ----------------------------------------------------------------------------------
# Predictions and accuracy of M models.


def predict(model: Model, params: PyTree, x_BxF: jax.Array) -> jax.Array:
  """Predicted labels int32[B] of ONE model: logit > 0 for one output, else the argmax.
  Traceable, unchecked; `correct_predictions` is the checked, batched door.
  """
  logits = model.apply(params, x_BxF)
  if logits.shape[-1] == 1:
    return (logits[:, 0] > 0).astype(jnp.int32)
  return jnp.argmax(logits, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=0)
def _predict_many(model, params_M, x):
  return jax.vmap(predict, in_axes=(None, 0, None))(model, params_M, x)


def correct_predictions(model: Model, params_M: PyTree, x_NxF: jax.typing.ArrayLike,
                        y_N: jax.typing.ArrayLike, *, float64: bool = False) -> np.ndarray:
  """bool[M, N]: whether model m (params leaves [M, ...]) labels record n correctly.

  float64=True: logits x @ w on the host in float64, logistic regression only.
  """
  check_model(model)
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, ndim=(2, 4), min_size=1)
  y = _validate.check_labels(y_N, "y_N", model.num_outputs, shape=(x.shape[0],))
  if _validate.check_bool(float64, "float64"):
    if model.kind != "logistic_regression":
      raise ValueError(f"float64=True needs a logistic regression, got a {model.kind!r} model")
    w_MxD = _validate.check_array(params_M["w"], "params_M['w']", ndim=2)
    pred = (np.asarray(x_NxF, np.float64) @ w_MxD.T).T > 0
  else:
    pred = np.asarray(_predict_many(model, params_M, jnp.asarray(x)))
  return pred == np.asarray(y).astype(pred.dtype)[None, :]


def accuracy(model: Model, params_M: PyTree, x_NxF: jax.typing.ArrayLike,
             y_N: jax.typing.ArrayLike, *, float64: bool = False) -> np.ndarray:
  """Mean over N of `correct_predictions`: float32[M] as XLA computes it, or float64[M] on the
  host with float64=True.

  Examples:
    >>> model = logistic_regression(1)
    >>> accuracy(model, {"w": jnp.array([[1.0], [-1.0]])}, jnp.array([[1.0], [-1.0]]),
    ...          jnp.array([1, 0])).tolist()
    [1.0, 0.0]
  """
  ok = correct_predictions(model, params_M, x_NxF, y_N, float64=float64)
  if float64:
    return ok.mean(axis=1)
  return np.asarray(jnp.mean(jnp.asarray(ok, jnp.float32), axis=1))


# ----------------------------------------------------------------------------------
# Fine-tuning: a frozen (public) body phi and a trainable head, logits = phi(x) @ w + b.
# Either train_many on body_features with (head, init_params=head0) = split_head(...)
# (ghost clipping), or on x with frozen_body(model, params) (vmap clipping): the same
# per-example gradients. Privacy: DP-SGD's (eps, delta) for the head carries over only
# when the body was fitted and selected on public data alone (Tramer & Boneh 2021,
# arXiv:2011.11660); nothing here can check that.

_HEAD_KINDS = ("mlp", "cnn")


def _last_layer(model: Model, params: PyTree) -> dict:
  return params["layers"][-1] if model.kind == "mlp" else params["dense"][0]


def _body(model: Model, params: PyTree, x: jax.Array) -> jax.Array:
  """phi(x) [B, H]: model.apply's computation up to (not including) the last layer."""
  if model.kind == "mlp":
    return _mlp_hidden(params, x)
  return _conv_trunk(model.input_shape, lambda a, layer: a, params, x)


def _checked_split(model: Any, params: Any, name: str = "params") -> tuple[Model, PyTree]:
  if check_model(model).kind not in _HEAD_KINDS:
    raise ValueError(f"model.kind must be one of {_HEAD_KINDS} (a model with a dense last "
                     f"layer this module built), got {model.kind!r}")
  check_params(model, params, name)
  return model, jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)


def _num_inputs(model: Model, params: PyTree) -> int:
  if model.kind == "mlp":
    return int(params["layers"][0]["w"].shape[0])
  return int(math.prod(model.input_shape))


def body_features(model: Model, params: PyTree, x_BxF: jax.typing.ArrayLike) -> jax.Array:
  """phi(x) float32[B, H]: the features an mlp or cnn feeds to its last dense layer.

  model.apply(params, x) == phi(x) @ w + b with {"w", "b"} the last layer (`split_head`):
  an mlp's last hidden activations, a cnn's flattened last conv block.

  Examples:
    >>> model = mlp(4, hidden=(8,), num_classes=3)
    >>> body_features(model, model.init(jax.random.key(0)), jnp.ones((2, 4))).shape
    (2, 8)
  """
  model, params = _checked_split(model, params)
  x_BxF = _as_jax(_validate.check_array(x_BxF, "x_BxF", np.float32, ndim=(2, 4), min_size=1))
  f = math.prod(x_BxF.shape[1:])
  if f != _num_inputs(model, params):
    raise ValueError(f"x_BxF must have {_num_inputs(model, params)} features per row (the "
                     f"model's input size), got shape {tuple(x_BxF.shape)}")
  return _body(model, params, x_BxF)


def split_head(model: Model, params: PyTree) -> tuple[Model, PyTree]:
  """(head, head_params): the last dense layer of an mlp or cnn as its own model.

  head = mlp(H, hidden=(), num_classes=K, l2=model.l2); head.apply(head_params,
  body_features(model, params, x)) == model.apply(params, x).

  Examples:
    >>> model = mlp(4, hidden=(8,), num_classes=3)
    >>> head, head_params = split_head(model, model.init(jax.random.key(0)))
    >>> head_params["layers"][0]["w"].shape
    (8, 3)
  """
  model, params = _checked_split(model, params)
  last = _last_layer(model, params)
  head = mlp(int(last["w"].shape[0]), (), model.num_outputs, model.l2)
  return head, {"layers": [dict(last)]}


def join_head(model: Model, params: PyTree, head_params: PyTree) -> PyTree:
  """A new pytree: params with its last dense layer replaced by head_params (`split_head`'s)."""
  model, params = _checked_split(model, params)
  _, head0 = split_head(model, params)
  _check_params_like(head_params, head0, "head_params")
  last = {k: jnp.asarray(v, jnp.float32) for k, v in head_params["layers"][0].items()}
  if model.kind == "mlp":
    return {"layers": list(params["layers"][:-1]) + [last]}
  return {"conv": list(params["conv"]), "dense": [last]}


def reset_head(model: Model, params: PyTree, key: jax.Array | None = None) -> PyTree:
  """params with a fresh last dense layer: zeros (key None) or He-normal as at model.init."""
  model, params = _checked_split(model, params)
  last = _last_layer(model, params)
  h, k = last["w"].shape
  if key is None:
    fresh = {"w": jnp.zeros((h, k), jnp.float32), "b": jnp.zeros((k,), jnp.float32)}
  else:
    fresh = _dense_init(key, h, k)
  return join_head(model, params, {"layers": [fresh]})


def frozen_body(model: Model, params: PyTree) -> Model:
  """A model (kind "custom") training only the last layer of `model`, the body frozen at params.

  apply(head_params, x) = model.apply(join_head(model, params, head_params), x); l2 on the
  head; init returns params' own last layer. Private only when the body is public (section
  comment). Each call builds a new Model (a new program): build it once.

  Examples:
    >>> model = mlp(4, hidden=(8,), num_classes=3)
    >>> params = model.init(jax.random.key(0))
    >>> frozen = frozen_body(model, params)
    >>> head_params = frozen.init(jax.random.key(1))
    >>> bool(jnp.allclose(frozen.apply(head_params, jnp.ones((2, 4))),
    ...                   model.apply(params, jnp.ones((2, 4)))))
    True
  """
  model, params = _checked_split(model, params)
  head, head0 = split_head(model, params)
  body_params = jax.tree.map(jax.lax.stop_gradient, params)
  f = _num_inputs(model, params)

  def init(key):
    del key
    return jax.tree.map(jnp.array, head0)

  def apply(head_params, x):
    if math.prod(x.shape[1:]) != f:
      raise ValueError(f"x must have {f} features per row (the model's input size), got "
                       f"shape {tuple(x.shape)}")
    return head.apply(head_params, _body(model, body_params, x))

  return Model(init, apply, model.l2, "custom", model.num_outputs, None)


def with_canary_leaf(model: Model, size: int) -> Model:
  """`model` with params {"model": params, "canary": float32[size]}; apply never reads the leaf.

  Audits put Dirac canary gradients in that leaf: the records' clipping (on
  params["model"]) never touches it, so K canaries cost O(K) per step. Cached: the same
  (model, size) gives the same Model, hence the same compiled program.

  Examples:
    >>> m = with_canary_leaf(mlp(4, hidden=(8,), num_classes=3), 5)
    >>> p = m.init(jax.random.key(0))
    >>> p["canary"].shape, m.apply(p, jnp.ones((2, 4))).shape
    ((5,), (2, 3))
  """
  return _with_canary_leaf(check_model(model), _validate.check_int(size, "size",
                                                                  maximum=2**31 - 1))


@functools.lru_cache(maxsize=32)
def _with_canary_leaf(model: Model, k: int) -> Model:

  def init(key):
    return {"model": model.init(key), "canary": jnp.zeros((k,), jnp.float32)}

  def apply(params, x):
    return model.apply(params["model"], x)
  return Model(init, apply, l2=model.l2, kind="custom", num_outputs=model.num_outputs,
               input_shape=model.input_shape)
