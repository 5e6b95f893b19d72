"""Flax (linen) modules as dpjax models, with the clipping back-end chosen automatically.

  model = from_flax(module, (8, 8, 1))
  variables = model.init(key)             # {"params": ...}: module.init on a [1, 8, 8, 1] batch
  logits_BxK = model.apply(variables, x)  # module.apply on x reshaped to [B, 8, 8, 1]

`dpsgd.train_many` converts a linen module itself. Ghost clipping (`clipping.ghost`) is
used when, checked on abstract shapes at build time: (1) every parameter is the kernel or
bias of an `nn.Dense` (exactly) or a 3x3, stride 1, SAME, undilated, ungrouped, unmasked
`nn.Conv`, with a bias, float32 parameters and computation, default precision,
dot_general / conv and dtype promotion; (2) each such layer is called once per forward
pass with one positional input whose leading axis is the batch; (3) no parameter is read
elsewhere (checked on the jaxpr). Parameter-free computation in between is allowed.
Otherwise the generic vmap(grad) path; `ghost_fallback_reason(model)` says why.

Contract: each example's output depends on that example alone. Refused: collections
other than "params" (BatchNorm mixes a batch's examples: use GroupNorm or LayerNorm) and
random streams at apply time (Dropout with deterministic=False). Memoised; flax is
imported only when a module is converted.

Shape letters: B examples, F flat input features, K outputs, I / O a layer's inputs /
outputs, P positions.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> import flax.linen as nn
  >>> from dpjax import clipping
  >>> model = from_flax(nn.Dense(3), (4,))
  >>> variables = jax.eval_shape(model.init, jax.random.key(0))    # shapes only
  >>> jax.tree.map(lambda v: v.shape, variables)
  {'params': {'bias': (3,), 'kernel': (4, 3)}}
  >>> jax.eval_shape(model.apply, variables, jnp.ones((2, 4))).shape
  (2, 3)
  >>> clipping.path_for(model).name
  'ghost'
  >>> clipping.path_for(from_flax(nn.LayerNorm(), (3,))).name
  'vmap_two_pass'
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

from dpjax import _validate
from dpjax import clipping as clipping_lib
from dpjax import models as models_lib
from dpjax.clipping import ghost

__all__ = ("is_flax_module", "from_flax", "ghost_fallback_reason")

PyTree = Any

_KIND = "flax"


def is_flax_module(obj: Any) -> bool:
  """Whether obj is a Flax module instance (linen or NNX); never imports flax.

  Examples:
    >>> is_flax_module(3)
    False
    >>> import flax.linen as nn
    >>> is_flax_module(nn.Dense(2)), is_flax_module(nn.Dense)
    (True, False)
  """
  linen = sys.modules.get("flax.linen")
  if linen is not None and isinstance(obj, linen.Module):
    return True
  nnx = sys.modules.get("flax.nnx")
  return nnx is not None and isinstance(obj, nnx.Module)


def from_flax(module: Any, input_shape: Sequence[int], *, num_outputs: int | None = None,
              l2: float = 0.0) -> models_lib.Model:
  """A `models.Model` (kind "flax") computing an unbound linen module's logits [B, K] or [B].

  init(key) = module.init(key, zeros [1, *input_shape]) as a dict; apply(variables,
  x_BxF) float32 [B, K]. num_outputs: K, checked if given; l2: per-example penalty
  0.5 * l2 * ||params||^2. TypeError if not an unbound linen Module instance; ValueError
  on bad arguments or a module the contract refuses.

  Examples:
    >>> import flax.linen as nn
    >>> from_flax(nn.Dense(1), (5,)).num_outputs
    1
  """
  _check_module(module)
  shape = _validate.check_sizes(input_shape, "input_shape")
  if not shape:
    raise ValueError("input_shape must have at least one dimension, got ()")
  _validate.check_size(math.prod(shape), "input_shape")
  if num_outputs is not None:
    num_outputs = _validate.check_int(num_outputs, "num_outputs")
  l2 = _validate.check_nonnegative(l2, "l2")
  try:
    hash(module)
  except TypeError:
    return _build(module, shape, num_outputs, l2)
  return _cached_build(module, shape, num_outputs, l2)


def ghost_fallback_reason(model: models_lib.Model) -> str | None:
  """Why a `from_flax` model does not get ghost clipping (naming the layer); None when it does.

  Examples:
    >>> import flax.linen as nn
    >>> ghost_fallback_reason(from_flax(nn.Dense(2), (3,))) is None
    True
  """
  models_lib.check_model(model)
  if not isinstance(model.apply, _FlaxApply) or model.kind != _KIND:
    raise ValueError(f"model must be a Model built by from_flax (kind {_KIND!r}), got kind "
                     f"{model.kind!r}")
  return model.apply.plan.reason


# ----------------------------------------------------------------------------------
# Building the model.


def _linen():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  return nn


def _check_module(module: Any) -> None:
  nn = _linen()
  if isinstance(module, type) and issubclass(module, nn.Module):
    raise TypeError(f"module must be a flax.linen.Module instance, got the class "
                    f"{module.__name__} (pass {module.__name__}(...))")
  if not isinstance(module, nn.Module):
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(module, nnx.Module):
      raise TypeError("module must be a flax.linen.Module; NNX modules are stateful "
                      "objects, not pure functions of a parameter pytree, and are not "
                      f"supported (got {type(module).__name__}); write the model with "
                      "flax.linen or convert it with flax.nnx.bridge.to_linen")
    raise TypeError(f"module must be a flax.linen.Module instance, got "
                    f"{type(module).__name__} {module!r:.80}")
  if getattr(module, "scope", None) is not None:
    raise TypeError(f"module must be unbound (not a submodule bound to a parent), got "
                    f"{type(module).__name__} bound at {module.scope.path}")


class _LayerSpec(NamedTuple):
  path: tuple[str, ...]       # module path in the params tree
  kind: str                   # "dense" or "conv"


class _Plan(NamedTuple):
  layers: tuple[_LayerSpec, ...]   # the ghost layers (empty when reason is set)
  reason: str | None               # None: ghost clipping; else why not


class _FlaxApply:
  """model.apply for a linen module: reshape, module.apply, logits float32[B, K]."""

  def __init__(self, module, input_shape, plan=None):
    self.module = module
    self.input_shape = input_shape
    self.plan = plan

  def __call__(self, variables, x_BxF):
    return _forward(self.module, self.input_shape, variables, x_BxF, None)


def _forward(module, input_shape, variables, x_BxF, interceptor):
  x = ghost.check_input_size(x_BxF, input_shape)
  x = x.reshape((x.shape[0],) + tuple(input_shape))
  if interceptor is None:
    out = module.apply(variables, x)
  else:
    with _linen().intercept_methods(interceptor):
      out = module.apply(variables, x)
  out = jnp.asarray(out, jnp.float32)
  return out[:, None] if out.ndim == 1 else out


def _describe(e: Exception) -> str:
  return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


@functools.lru_cache(maxsize=64)
def _cached_build(module, shape, num_outputs, l2):
  return _build(module, shape, num_outputs, l2)


def _build(module, shape, num_outputs, l2) -> models_lib.Model:
  import flax  # pylint: disable=g-import-not-at-top
  x1 = jnp.zeros((1,) + shape, jnp.float32)

  def init(key):
    return flax.core.unfreeze(module.init(key, x1))

  try:
    var_shapes = jax.eval_shape(init, jax.random.key(0))
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"module.init failed on inputs of input_shape {shape}: {_describe(e)}") from e
  others = sorted(k for k in var_shapes if k != "params")
  if "batch_stats" in others:
    raise ValueError(
        "module has a 'batch_stats' collection (BatchNorm): batch normalisation mixes "
        "the examples of a batch, so one example's gradient depends on the others and "
        "per-example clipping cannot bound its influence; use GroupNorm or LayerNorm")
  if others:
    raise ValueError(f"module has variable collections {others} besides 'params': only "
                     "parameters are trained and carried by DP-SGD")
  leaves = jax.tree.leaves(var_shapes.get("params", {}))
  if not leaves:
    raise ValueError("module has no parameters to train")
  bad = [str(l.dtype) for l in leaves if l.dtype != jnp.float32]
  if bad:
    raise ValueError(f"module parameters must be float32 (param_dtype), got {bad[0]}")
  apply = _FlaxApply(module, shape)
  outs = []
  for b in (2, 3):
    try:
      outs.append(jax.eval_shape(apply, var_shapes,
                                 jax.ShapeDtypeStruct((b,) + shape, jnp.float32)))
    except Exception as e:  # pylint: disable=broad-except
      if type(e).__name__ == "InvalidRngError":
        raise ValueError(
            f"module needs a random stream at apply time ({_describe(e)}); DP-SGD calls "
            "apply without rngs: use Dropout(deterministic=True) or remove the random "
            "layer") from e
      raise ValueError(f"module.apply failed on inputs of input_shape {shape}: "
                       f"{_describe(e)}") from e
  if any(o.shape[0] != b or o.ndim != 2 for o, b in zip(outs, (2, 3))):
    raise ValueError(f"module must return logits [B] or [B, K] for inputs [B, *input_shape]; "
                     f"for B = 2 it returned shape {outs[0].shape}")
  k = int(outs[0].shape[1])
  if num_outputs is not None and num_outputs != k:
    raise ValueError(f"num_outputs = {num_outputs} but the module returns {k} logits per "
                     "example")
  apply.plan = _plan(module, shape, var_shapes)
  return models_lib.Model(init, apply, l2, _KIND, k, shape)


# ----------------------------------------------------------------------------------
# The ghost rule.


def _get(tree, path):
  for p in path:
    tree = tree[p]
  return tree


def _is_one(v) -> bool:
  """A stride / dilation of 1 in every spatial dimension (None is flax's default, 1)."""
  if v is None or (isinstance(v, int) and not isinstance(v, bool) and v == 1):
    return True
  return isinstance(v, Sequence) and not isinstance(v, str) and tuple(v) == (1, 1)


def _is_float32(dtype) -> bool:
  """dtype None (computation in the parameters' float32) or float32 itself."""
  if dtype is None:
    return True
  try:
    return jnp.dtype(dtype) == jnp.float32
  except TypeError:
    return False


def _layer_kind(module) -> tuple[str | None, str]:
  """("dense" | "conv", "") for a layer ghost.py computes exactly, else (None, why)."""
  nn = _linen()
  if type(module) is nn.Dense:
    kind, custom = "dense", ("precision", "dot_general", "dot_general_cls")
  elif type(module) is nn.Conv:
    kind, custom = "conv", ("precision", "conv_general_dilated", "conv_general_dilated_cls", "mask")
    ks = module.kernel_size
    if not (isinstance(ks, Sequence) and tuple(ks) == (3, 3)):
      return None, f"its kernel_size is {ks!r}, not (3, 3)"
    for field in ("strides", "input_dilation", "kernel_dilation"):
      if not _is_one(getattr(module, field)):
        return None, f"its {field} is {getattr(module, field)!r}, not 1"
    if module.feature_group_count != 1:
      return None, f"its feature_group_count is {module.feature_group_count!r}, not 1"
    if not (isinstance(module.padding, str) and module.padding == "SAME"):
      return None, f"its padding is {module.padding!r}, not 'SAME'"
  else:
    return None, f"{type(module).__name__} is not nn.Dense or nn.Conv"
  if not module.use_bias:
    return None, "it has no bias (use_bias=False)"
  if not _is_float32(module.dtype):
    return None, f"its dtype is {module.dtype!r}, not float32"
  for field in custom:
    if getattr(module, field) is not None:
      return None, f"it sets {field}"
  default = {f.name: f.default for f in dataclasses.fields(type(module))}.get("promote_dtype")
  if getattr(module, "promote_dtype", default) is not default:
    return None, "it has a custom promote_dtype"
  return kind, ""


def _plan(module, shape, var_shapes) -> _Plan:
  """The ghost layers of the module, or why it gets the generic path."""
  nn = _linen()
  params_shape = var_shapes["params"]
  calls = {}
  problems = []
  owners = {}      # module path -> class name, for every module called

  for b in (2, 3):
    seen = []

    def recorder(next_fun, args, kwargs, context, seen=seen, b=b):
      mod = context.module
      owners.setdefault(tuple(mod.path), type(mod).__name__)
      if context.method_name == "__call__" and type(mod) in (nn.Dense, nn.Conv):
        path = tuple(mod.path)
        kind, why = _layer_kind(mod)
        if kind is None:
          problems.append(f"layer {'/'.join(path)}: {why}")
        elif len(args) != 1 or kwargs:
          problems.append(f"layer {'/'.join(path)} is called with extra arguments")
        else:
          a = args[0]
          lead_ok = getattr(a, "ndim", 0) >= 2 and a.shape[0] == b
          if kind == "conv" and getattr(a, "ndim", 0) != 4:
            lead_ok = False
          if not lead_ok or getattr(a, "dtype", None) != jnp.float32:
            problems.append(f"layer {'/'.join(path)} gets an input of shape "
                            f"{getattr(a, 'shape', None)} (dtype {getattr(a, 'dtype', None)}), "
                            f"not float32 [B, ...] with B = {b} first")
        seen.append((path, kind))
      return next_fun(*args, **kwargs)

    jax.eval_shape(lambda v, x, r=recorder: _forward(module, shape, v, x, r), var_shapes,
                   jax.ShapeDtypeStruct((b,) + shape, jnp.float32))
    calls[b] = seen
  if problems:
    return _Plan((), problems[0])
  order = calls[2]
  if order != calls[3]:
    return _Plan((), "the layers called depend on the batch size")
  paths = [p for p, _ in order]
  dup = sorted({p for p in paths if paths.count(p) > 1})
  if dup:
    return _Plan((), f"layer {'/'.join(dup[0])} is called more than once (shared weights)")
  layers = tuple(_LayerSpec(p, k) for p, k in order)
  # Rule 1: every parameter is the kernel or bias of one of these layers.
  owned = {}
  for spec in layers:
    try:
      sub = _get(params_shape, spec.path)
    except (KeyError, TypeError):
      return _Plan((), f"layer {'/'.join(spec.path)} has no parameters at its path")
    if not isinstance(sub, dict) or set(sub) != {"kernel", "bias"}:
      return _Plan((), f"layer {'/'.join(spec.path)} has parameters {sorted(sub)}")
    kshape = sub["kernel"].shape
    if (spec.kind == "dense" and len(kshape) != 2) or (
        spec.kind == "conv" and (len(kshape) != 4 or kshape[:2] != (3, 3))):
      return _Plan((), f"layer {'/'.join(spec.path)} has a kernel of shape {kshape}")
    owned[spec.path + ("kernel",)] = owned[spec.path + ("bias",)] = True
  for kp, _ in jax.tree_util.tree_flatten_with_path(params_shape)[0]:
    path = tuple(getattr(k, "key", str(k)) for k in kp)
    if path not in owned:
      owner = owners.get(path[:-1], "a module that is not called")
      return _Plan((), f"parameter {'/'.join(map(str, path))} belongs to {owner}, not to a "
                   "plain nn.Dense or 3x3 SAME nn.Conv layer")
  # Rule 3: with the layers computed from a separate copy of their parameters, the
  # module's own copy must be unused in the forward pass.
  index = {spec.path: i for i, spec in enumerate(layers)}

  def split(own, shadow, x):
    return _ghost_forward(module, shape, layers, index, shadow, x, None, applied=own)[0]

  try:
    jaxpr = jax.make_jaxpr(split)(var_shapes, var_shapes,
                                  jax.ShapeDtypeStruct((2,) + shape, jnp.float32)).jaxpr
  except Exception as e:  # pylint: disable=broad-except
    return _Plan((), f"the module could not be traced with its layers replaced ({_describe(e)})")
  n_own = len(jax.tree.leaves(var_shapes))
  own_vars = set(jaxpr.invars[:n_own])
  used = any(v in own_vars for eqn in jaxpr.eqns for v in eqn.invars
             if not isinstance(v, jcore.Literal)) or any(
                 v in own_vars for v in jaxpr.outvars if not isinstance(v, jcore.Literal))
  if used:
    return _Plan((), "a parameter is read outside its layer's call (tied or reused weights)")
  # The full ghost computation must trace (catches layers inside lifted transforms).
  try:
    fn = _ghost_fn(module, shape, layers, 0.0, 2)
    jax.eval_shape(fn, var_shapes, jax.ShapeDtypeStruct((2,) + shape, jnp.float32),
                   jax.ShapeDtypeStruct((2,), jnp.int32), jax.ShapeDtypeStruct((2,), jnp.float32),
                   1.0)
  except Exception as e:  # pylint: disable=broad-except
    return _Plan((), f"ghost clipping could not trace the module ({_describe(e)})")
  return _Plan(layers, None)


# ----------------------------------------------------------------------------------
# Ghost clipping for a module that passes the rule.


def _ghost_forward(module, shape, layers, index, variables, x, probes, applied=None):
  """Logits and one ghost record per layer, computed from `variables` (`applied`, for the
  rule-3 check, is what the module itself is applied with).
  """
  recs = [None] * len(layers)
  nn = _linen()

  def interceptor(next_fun, args, kwargs, context):
    mod = context.module
    if context.method_name != "__call__" or type(mod) not in (nn.Dense, nn.Conv):
      return next_fun(*args, **kwargs)
    i = index[tuple(mod.path)]
    p = _get(variables["params"], layers[i].path)
    a = args[0]
    bsz = a.shape[0]
    kernel, bias = p["kernel"], p["bias"]
    o = kernel.shape[-1]
    if layers[i].kind == "dense":
      u = a if a.ndim == 2 else a.reshape(bsz, -1, a.shape[-1])     # [B, I] or [B, P, I]
      z = u @ kernel + bias.reshape((1,) * (u.ndim - 1) + (o,))
    else:
      # The 3x3 SAME convolution as patches @ kernel, patches ordered like HWIO (the
      # gradient flows through the patches to earlier layers; the record is a constant).
      patches = ghost.conv3x3_patches(a)
      z = patches @ kernel.reshape(-1, o) + bias[None, None, :]
      u = jax.lax.stop_gradient(patches)
    if probes is not None:
      z = z + probes[i]
    recs[i] = ghost.Layer(u, z)
    return z.reshape(a.shape[:-1] + (o,))

  logits = _forward(module, shape, variables if applied is None else applied, x, interceptor)
  return logits, recs


def _ghost_fn(module, shape, layers, l2, num_outputs):
  index = {spec.path: i for i, spec in enumerate(layers)}

  def forward(variables, x, probes):
    return _ghost_forward(module, shape, layers, index, variables, x, probes)

  def unflatten(variables, sums):
    flat, treedef = jax.tree_util.tree_flatten_with_path(variables)
    out = []
    for kp, leaf in flat:
      path = tuple(getattr(k, "key", str(k)) for k in kp)
      i = index[path[1:-1]]
      gw, gb = sums[i]
      out.append(gw.reshape(leaf.shape) if path[-1] == "kernel" else gb)
    return jax.tree_util.tree_unflatten(treedef, out)

  def fn(variables, x_BxF, y_B, weights_B, l2_clip_norm):
    _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=max(num_outputs, 2))
    _validate.check_clip_norm(l2_clip_norm)
    return ghost.ghost_clipped_sum(forward, variables, ghost.check_input_size(x_BxF, shape),
                                   y_B, weights_B, l2_clip_norm, l2, "auto", unflatten)

  return fn


def _path_factory(model: models_lib.Model) -> clipping_lib.ClippingPath:
  apply = model.apply
  if isinstance(apply, _FlaxApply) and apply.plan is not None and apply.plan.reason is None:
    return clipping_lib.ClippingPath(
        _ghost_fn(apply.module, apply.input_shape, apply.plan.layers, model.l2,
                  model.num_outputs), "ghost")
  # A "flax" model whose apply is not ours (e.g. wrapped by another component) or
  # that breaks the ghost rule: the generic path, exact for any loss.
  return clipping_lib.generic_path(model)


clipping_lib.register(_KIND, _path_factory)
