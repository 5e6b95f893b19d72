"""Ghost clipping: clipped per-example gradient sums without per-example gradients.

Dense layer z = a @ W + b: the per-example gradient a_b g_b^T (g_b = dloss_b/dz_b) has
squared norm ||a_b||^2 ||g_b||^2 (+ ||g_b||^2 for the bias) (Goodfellow 2015; Li et al.
2022); the clipped sum is a^T (s * g), s_b = w_b min(1, C/||grad_b||) (Bu et al. 2023).
Convolutions (patches A_b [P, K], output gradients G_b [P, O]): ||A_b^T G_b||^2 from the
[K, O] matrix (cost P K O) or sum((A_b A_b^T) * (G_b G_b^T)) (cost P^2 (K + O)).
L2 penalty 0.5 l2 ||theta||^2: ||grad_b + l2 theta||^2 = ||grad_b||^2
  + 2 l2 sum_layers <g_b, z_b> + l2^2 ||theta||^2.
Out of float32 range, norms come from overflow-safe upper bounds. Shape letters: B examples,
F features, I / O layer inputs / outputs, H, W, C image dims, P positions, K patch size.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import models
  >>> model = models.mlp(4, hidden=(8,), num_classes=3)
  >>> params = model.init(jax.random.key(0))
  >>> fn = clipped_sum_fn(model)
  >>> grads, norms = fn(params, jnp.ones((5, 4)), jnp.arange(5) % 3, jnp.ones((5,)), 1.0)
  >>> norms.shape, grads["layers"][0]["w"].shape
  ((5,), (4, 8))
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax import _xla
from dpjax import models as models_lib
from dpjax.clipping import vmap as _vmap

PyTree = Any
ClippedSumFn = Callable[..., tuple[PyTree, jax.Array]]

_CONV_MODES = ("auto", "materialise", "gram")


class Layer(NamedTuple):
  """What the ghost pass records about one linear layer (dense or conv)."""
  a: jax.Array             # its input: dense [B, I]; conv patches [B, P, K]
  z: jax.Array             # its pre-activation output (bias included): [B, O] / [B, P, O]

  @property
  def kind(self) -> str:
    return "dense" if self.a.ndim == 2 else "conv"


def _mlp_forward(params, x_BxF, probes):
  """The MLP of `models.mlp`, with a zero `probe` added to each layer's output."""
  a = x_BxF.reshape(x_BxF.shape[0], -1)
  layers = params["layers"]
  recs = []
  for i, layer in enumerate(layers):
    z = a @ layer["w"] + layer["b"][None, :]
    if probes is not None:
      z = z + probes[i]
    recs.append(Layer(a, z))
    a = jax.nn.relu(z) if i + 1 < len(layers) else z
  return a, recs


def conv3x3_patches(a_BxHxWxC: jax.Array) -> jax.Array:
  """3x3 SAME stride-1 patches [B, H*W, 9*C], ordered (kh, kw, c) like an HWIO kernel."""
  b, h, w, c = a_BxHxWxC.shape
  padded = jnp.pad(a_BxHxWxC, ((0, 0), (1, 1), (1, 1), (0, 0)))
  views = [padded[:, i:i + h, j:j + w, :] for i in range(3) for j in range(3)]
  return jnp.stack(views, axis=3).reshape(b, h * w, 9 * c)


def check_input_size(x_BxF: jax.Array, input_shape: Sequence[int]) -> jax.Array:
  """x_BxF as an array if it holds prod(input_shape) values per example (static shapes)."""
  x = jnp.asarray(x_BxF)
  if math.prod(x.shape[1:]) != math.prod(input_shape):
    raise ValueError(f"x_BxF must hold {math.prod(input_shape)} values per example "
                     f"(input_shape {tuple(input_shape)}), got shape {x.shape}")
  return x


def _cnn_forward(params, x, probes, input_shape):
  """The CNN of `models.cnn`, recording conv patches, with zero probes added."""
  h, w, c_in = input_shape
  a = x.reshape(x.shape[0], h, w, c_in)
  recs = []
  for i, layer in enumerate(params["conv"]):
    bsz, hh, ww, _ = a.shape
    kernel = layer["w"]
    o = kernel.shape[-1]
    # im2col + one matmul: the patches are needed anyway, and XLA:CPU runs this faster.
    patches = conv3x3_patches(a)                                        # [B, P, 9*C]
    z_flat = patches @ kernel.reshape(-1, o) + layer["b"][None, None, :]
    if probes is not None:
      z_flat = z_flat + probes[i]
    z = z_flat.reshape(bsz, hh, ww, o)
    # Recorded input: the backward pass never differentiates the record itself.
    recs.append(Layer(jax.lax.stop_gradient(patches), z_flat))
    a = models_lib.avg_pool2(jax.nn.relu(z))
  a = a.reshape(a.shape[0], -1)
  d = params["dense"][0]
  z = a @ d["w"] + d["b"][None, :]
  if probes is not None:
    z = z + probes[len(params["conv"])]
  recs.append(Layer(a, z))
  return z, recs


def _conv_mode(mode: str, p: int, k: int, o: int) -> str:
  if mode != "auto":
    return mode
  return "materialise" if p * k * o <= p * p * (k + o) else "gram"


def _check_args(x_BxF, y_B, weights_B, l2_clip_norm):
  x = _validate.check_array(x_BxF, "x_BxF", min_size=1)
  if jnp.ndim(x) >= 1:
    _validate.check_array(y_B, "y_B", shape=(jnp.shape(x)[0],), low=0, integer=True)
    _validate.check_array(weights_B, "weights_B", shape=(jnp.shape(x)[0],), low=0.0, high=1.0)
  _validate.check_clip_norm(l2_clip_norm)
  if x_BxF.ndim < 2:
    raise ValueError(f"x_BxF must have a leading batch axis and features, got shape {x_BxF.shape}")
  b = x_BxF.shape[0]
  if y_B.shape != (b,) or weights_B.shape != (b,):
    raise ValueError(f"y_B and weights_B must have shape ({b},), got {y_B.shape} and "
                     f"{weights_B.shape}")
  if isinstance(l2_clip_norm, (int, float)) and l2_clip_norm != math.inf:
    _validate.check_positive(l2_clip_norm, "l2_clip_norm")


def _outer_norm(a_BxI, asq_B, g_BxO, gsq_B, bias=True):
  """||a_b g_b^T||_F (with bias: sqrt(||a_b||^2 + 1) ||g_b||), overflow-safe: float32[B]
  (0 for a zero output gradient and finite input)."""
  ma = jnp.max(jnp.abs(a_BxI), axis=1)
  if bias:
    one = jnp.ones_like(asq_B)
    na = _vmap.safe_norm(asq_B + 1.0, jnp.maximum(ma, 1.0),
                         lambda unit: jnp.sum(jnp.square(unit(a_BxI)), axis=1)
                         + jnp.square(unit(one)))
  else:
    na = _vmap.safe_norm(asq_B, ma, lambda unit: jnp.sum(jnp.square(unit(a_BxI)), axis=1))
  ng = _vmap.safe_norm(gsq_B, jnp.max(jnp.abs(g_BxO), axis=1),
                       lambda unit: jnp.sum(jnp.square(unit(g_BxO)), axis=1))
  return jnp.where((ng == 0) & (ma < jnp.inf), 0.0, na * ng)


def ghost_clipped_sum(forward: Callable, params: PyTree, x_BxF, y_B, weights_B, l2_clip_norm,
                      l2: float, conv_mode: str, flat_layer_params: Callable,
                      branch: bool = False):
  """The shared ghost pass: norms from (activations, output grads), then one matmul per layer.

  branch=False: one program that guards every record (fallback norms, masked rows).
  branch=True: when every record's squared norm is in float32 range (checked for the whole
  vmapped batch, `_xla.all_over_batch`), a lax.cond skips the fallback norms and row masks;
  the same clipped sum and norms, with rounding that may differ in the last bits."""
  x_BxF = jnp.asarray(x_BxF)
  y_B = jnp.asarray(y_B)
  weights_B = jnp.asarray(weights_B, jnp.float32)
  _check_args(x_BxF, y_B, weights_B, l2_clip_norm)
  if _validate.is_tracer(l2_clip_norm):   # out of range under jit: NaN sums (check_clip_norm)
    l2_clip_norm = _validate.check_clip_norm(l2_clip_norm)
  _, recs_shape = jax.eval_shape(lambda p, x: forward(p, x, None), params, x_BxF)
  probes0 = [jnp.zeros(r.z.shape, r.z.dtype) for r in recs_shape]

  def total_loss(probes):
    logits, recs = forward(params, x_BxF, probes)
    return jnp.sum(models_lib.loss_from_logits(logits, y_B)), recs

  # The loss is a sum of per-example terms: d/d(probe) is each example's output gradient.
  grads_probe, recs = jax.grad(total_loss, has_aux=True)(probes0)
  outs = []
  # Per layer, the overflow-safe norm of its per-example gradients [B] (a thunk when branching).
  layer_norms = []
  keep = (lambda part: part) if branch else (lambda part: part())
  sq_B = jnp.zeros(x_BxF.shape[0], jnp.float32)
  cross_B = jnp.zeros(x_BxF.shape[0], jnp.float32)
  for rec, g in zip(recs, grads_probe):
    if rec.kind == "dense":
      g = g.reshape(rec.z.shape)
      gsq = jnp.sum(g * g, axis=1)
      asq = jnp.sum(rec.a * rec.a, axis=1)
      sq_B = sq_B + asq * gsq + gsq
      layer_norms.append(keep(functools.partial(_outer_norm, rec.a, asq, g, gsq)))
      outs.append(("dense", rec.a, g, None))
    else:
      g = g.reshape(rec.z.shape)                       # [B, P, O]
      p, k, o = rec.a.shape[1], rec.a.shape[2], g.shape[2]
      gb = jnp.sum(g, axis=1)                          # bias gradients [B, O]
      mode = _conv_mode(conv_mode, p, k, o)
      if mode == "materialise":
        gw = jnp.einsum("bpk,bpo->bko", rec.a, g)      # per-example kernel grads [B, K, O]
        layer_sq = jnp.sum(gw * gw, axis=(1, 2)) + jnp.sum(gb * gb, axis=1)
        sq_B = sq_B + layer_sq
        layer_norms.append(keep(functools.partial(_vmap.tree_norms, (gw, gb))))
        outs.append(("conv_mat", gw, gb, None))
      else:
        gram_a = jnp.einsum("bpk,bqk->bpq", rec.a, rec.a)
        gram_g = jnp.einsum("bpo,bqo->bpq", g, g)
        sq_B = sq_B + jnp.sum(gram_a * gram_g, axis=(1, 2)) + jnp.sum(gb * gb, axis=1)
        layer_norms.append(keep(functools.partial(_gram_layer_norm, rec.a, g, gb)))
        outs.append(("conv_gram", rec.a, g, gb))
    if l2:
      cross_B = cross_B + jnp.sum((g * rec.z).reshape(g.shape[0], -1), axis=1)

  def fallback_norms(norms):
    """Out of float32 range, the norm comes from the layer norms (`vmap.safe_norm`)."""
    fallback_B = _vmap.combine_norms(norms)
    if l2:
      # ||grad_b + l2 theta|| <= ||grad_b|| + l2 ||theta||, used only where the exact form
      # overflows.
      fallback_B = fallback_B + l2 * _vmap.tree_norms(
          [jnp.reshape(t, (1, -1)) for t in jax.tree.leaves(params)])[0]
    return fallback_B

  fallback_B = None if branch else _vmap.combine_norms(layer_norms)
  if l2:
    theta_sq = sum(jnp.sum(jnp.square(t)) for t in jax.tree.leaves(params))
    sq_B = sq_B + 2.0 * l2 * cross_B + (l2 * l2) * theta_sq
    if not branch:
      fallback_B = fallback_B + l2 * _vmap.tree_norms(
          [jnp.reshape(t, (1, -1)) for t in jax.tree.leaves(params)])[0]

  def clipped_sum(guarded: bool):
    """guarded=False assumes every sq_B in range (so every record is kept and its rows are
    finite) and skips the fallback norms and the row masks."""
    if guarded:
      def guarded_norms():
        fb = fallback_norms([part() for part in layer_norms]) if branch else fallback_B
        in_range = sq_B < jnp.inf                                  # False for NaN
        norms_B = jnp.where(in_range, jnp.sqrt(jnp.maximum(sq_B, 0.0)), fb)
        return jnp.where(jnp.isnan(norms_B), jnp.inf, norms_B)
      norms_B = _xla.once(guarded_norms, y_B[0])
    else:
      norms_B = jnp.sqrt(jnp.maximum(sq_B, 0.0))
    # A record with an inf norm is dropped: its rows are zeroed with jnp.where before any
    # product, so no record can turn the sum into NaN through 0 * inf.
    keep_B = norms_B < jnp.inf
    # min(1, C / norm); C = inf or norm = 0 give factor 1.
    factor_B = jnp.minimum(1.0, l2_clip_norm / jnp.maximum(norms_B, 1e-30))
    s_B = jnp.where(keep_B, weights_B * factor_B, 0.0)

    def rows(v):
      if not guarded:
        return v
      return jnp.where(keep_B.reshape((-1,) + (1,) * (v.ndim - 1)), v, 0.0)

    sums = []
    for kind, u, v, gb in outs:
      if kind == "dense":
        u, v = rows(u), rows(v)
        sums.append((u.T @ (v * s_B[:, None]), s_B @ v))
      elif kind == "conv_mat":
        u, v = rows(u), rows(v)
        sums.append((jnp.einsum("b,bko->ko", s_B, u), s_B @ v))
      else:
        u, v, gb = rows(u), rows(v), rows(gb)
        sums.append((jnp.einsum("bpk,bpo->ko", u, v * s_B[:, None, None]), s_B @ gb))
    grad_sum = flat_layer_params(params, sums)
    if l2:
      grad_sum = jax.tree.map(lambda gsum, t: gsum + l2 * jnp.sum(s_B) * t, grad_sum, params)
    return grad_sum, norms_B

  if not branch:
    return clipped_sum(True)
  # One branch for the whole vmapped batch: the guarded sum runs only when some record's
  # squared norm is out of float32 range (or NaN).
  every_in_range = _xla.all_over_batch(jnp.all(sq_B < jnp.inf))
  return jax.lax.cond(every_in_range, lambda: clipped_sum(False), lambda: clipped_sum(True))


def _gram_layer_norm(a_BxPxK, g_BxPxO, gb_BxO):
  """A Gram-mode conv layer's overflow-safe norm bound: the kernel part bounded by
  ||A_b||_F ||G_b||_F >= ||A_b^T G_b||_F, combined with the bias part."""
  flat_a = a_BxPxK.reshape(a_BxPxK.shape[0], -1)
  flat_g = g_BxPxO.reshape(g_BxPxO.shape[0], -1)
  kernel = _outer_norm(flat_a, jnp.sum(flat_a * flat_a, axis=1), flat_g,
                       jnp.sum(flat_g * flat_g, axis=1), bias=False)
  return _vmap.combine_norms([kernel, _vmap.tree_norms(gb_BxO)])


def _mlp_unflatten(params, sums):
  return {"layers": [{"w": gw.reshape(l["w"].shape), "b": gb}
                     for l, (gw, gb) in zip(params["layers"], sums)]}


def _cnn_unflatten(params, sums):
  conv = []
  for l, (gw, gb) in zip(params["conv"], sums[:-1]):
    conv.append({"w": gw.reshape(l["w"].shape), "b": gb})
  gw, gb = sums[-1]
  return {"conv": conv, "dense": [{"w": gw, "b": gb}]}


@_validate.names_extreme_arguments
def mlp_clipped_sum(params: PyTree, x_BxF: jax.typing.ArrayLike, y_B: jax.typing.ArrayLike,
                    weights_B: jax.typing.ArrayLike, l2_clip_norm: float, *,
                    l2: float = 0.0, branch: bool = False) -> tuple[PyTree, jax.Array]:
  """Ghost-clipped gradient sum (`dpjax.clipping` contract) for `models.mlp` parameters;
  l2 is the model's L2 coefficient; branch: `ghost_clipped_sum`'s."""
  num_outputs = jnp.shape(params["layers"][-1]["b"])[-1]
  _validate.check_batch(x_BxF, y_B, weights_B, num_outputs=max(num_outputs, 2))
  _validate.check_clip_norm(l2_clip_norm)
  return ghost_clipped_sum(_mlp_forward, params, x_BxF, y_B, weights_B, l2_clip_norm,
                            _validate.check_nonnegative(l2, "l2"), "auto", _mlp_unflatten,
                            _validate.check_bool(branch, "branch"))


def cnn_clipped_sum_fn(input_shape: Sequence[int] = (8, 8, 1), *, l2: float = 0.0,
                       conv_mode: str = "auto", branch: bool = False) -> ClippedSumFn:
  """A ghost-clipped-sum function (`dpjax.clipping` contract) for `models.cnn` parameters;
  input_shape (H, W, C_in), conv_mode "materialise", "gram" or "auto" (cheaper per layer),
  branch: `ghost_clipped_sum`'s."""
  if len(input_shape) != 3 or any(int(v) != v or v < 1 for v in input_shape):
    raise ValueError(f"input_shape must be three positive ints (H, W, C), got {input_shape!r}")
  _validate.check_choice(conv_mode, _CONV_MODES, "conv_mode")
  l2 = _validate.check_nonnegative(l2, "l2")
  branch = _validate.check_bool(branch, "branch")
  shape = tuple(int(v) for v in input_shape)

  def forward(params, x, probes):
    return _cnn_forward(params, x, probes, shape)

  def fn(params, x_BxF, y_B, weights_B, l2_clip_norm):
    return ghost_clipped_sum(forward, params, check_input_size(x_BxF, shape), y_B, weights_B,
                             l2_clip_norm, l2, conv_mode, _cnn_unflatten, branch)

  return fn


def clipped_sum_fn(model: models_lib.Model, input_shape: Sequence[int] | None = None, *,
                   conv_mode: str = "auto", branch: bool = False) -> ClippedSumFn:
  """The ghost-clipped-sum function for a `models.mlp` or `models.cnn` model (memoised); a
  CNN's input_shape defaults to the model's, else square images inferred from flat inputs;
  branch: `ghost_clipped_sum`'s."""
  models_lib.check_model(model)
  _validate.check_choice(conv_mode, _CONV_MODES, "conv_mode")
  branch = _validate.check_bool(branch, "branch")
  if input_shape is None and model.kind == "cnn":
    input_shape = model.input_shape
  shape = None if input_shape is None else tuple(input_shape)
  return _clipped_sum_fn(model, shape, conv_mode, branch)


@functools.lru_cache(maxsize=64)
def _clipped_sum_fn(model, input_shape, conv_mode, branch):
  if model.kind == "mlp":
    l2 = model.l2

    def mlp_fn(params, x_BxF, y_B, weights_B, l2_clip_norm):
      return mlp_clipped_sum(params, x_BxF, y_B, weights_B, l2_clip_norm, l2=l2,
                             branch=branch)

    return mlp_fn
  if model.kind == "cnn":
    if input_shape is not None:
      return cnn_clipped_sum_fn(input_shape, l2=model.l2, conv_mode=conv_mode, branch=branch)

    def cnn_fn(params, x_BxF, y_B, weights_B, l2_clip_norm):
      x = jnp.asarray(x_BxF)
      c_in = params["conv"][0]["w"].shape[2] if params["conv"] else None
      if x.ndim == 4:
        shape = x.shape[1:]
      else:
        f = math.prod(x.shape[1:])
        side = math.isqrt(f // c_in) if c_in else 0
        if not c_in or side * side * c_in != f:
          raise ValueError(f"cannot infer a square input_shape from x_BxF shape {x.shape}; "
                           "pass input_shape=(H, W, C)")
        shape = (side, side, c_in)
      return cnn_clipped_sum_fn(shape, l2=model.l2, conv_mode=conv_mode, branch=branch)(
          params, x, y_B, weights_B, l2_clip_norm)

    return cnn_fn
  raise ValueError(f"model.kind must be 'mlp' or 'cnn' for ghost clipping, got {model.kind!r}")
