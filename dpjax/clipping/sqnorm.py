"""Per-example squared gradient norms of vmap(grad), without forming outer products.

`per_example_sq_norms` returns ||g_i||^2 for ANY loss: it evaluates the jaxpr of vmap(grad)
plus the sum of squares, replacing each "sum of square(dot_general(A, B))" by

    sum_{a,b} (sum_k A[a,k] B[b,k])^2 = sum_{k,k'} (A A^T)[k,k'] (B B^T)[k,k'],

= ||A||^2 ||B||^2 for K = 1 (the "ghost norm": Goodfellow 2015; Li et al. 2022), used for
K = 1 always and K > 1 where cheaper; overflow-safe out of float32 range (`safe_norm`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

from dpjax import _validate

PyTree = Any

def safe_norm(sq_B: jax.Array, max_abs_B: jax.Array,
              scaled_sq_fn: Callable[[Callable[[jax.Array], jax.Array]], jax.Array]
              ) -> jax.Array:
  """An L2 norm per example without overflow in its squares: float32[B] in [0, inf], never NaN.

  sqrt(sq_B) where finite, else m sqrt(sum (v/m)^2), m = `max_abs_B`; `scaled_sq_fn(unit)`
  sums the squares of unit(v) per example. The shared rule: +inf for a NaN or inf
  coordinate or a norm beyond float32 (clip factor 0, contribution exactly zero)."""
  _validate.check_callable(scaled_sq_fn, "scaled_sq_fn")
  s1 = jnp.clip(max_abs_B, 1.0, 2.0 ** 100)       # 1 / s1 >= 2^-100: normal
  m2 = jnp.maximum(max_abs_B / s1, 1.0)          # <= 2^28 for finite inputs

  def unit(v):
    ex = (...,) + (None,) * (v.ndim - max_abs_B.ndim)
    # The barrier keeps XLA from folding the two divisions into one by s1 * m2.
    return jax.lax.optimization_barrier(v / s1[ex]) / m2[ex]

  scaled = s1 * (m2 * jnp.sqrt(scaled_sq_fn(unit)))
  out = jnp.where(sq_B < jnp.inf, jnp.sqrt(sq_B), scaled)    # False for NaN
  return jnp.where(jnp.isnan(out), jnp.inf, out)


def per_example_grads(loss_one: Callable, params: PyTree, x_BxF: jax.Array,
                      y_B: jax.Array) -> PyTree:
  """vmap(grad(loss_one)) over records: a pytree like params with leaves [B, ...]."""
  _check_records(loss_one, x_BxF, y_B)
  return jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))(params, x_BxF, y_B)


def _check_records(loss_one, x_BxF, y_B) -> None:
  """loss_one callable; x_BxF [B, ...] and y_B [B] finite (values only when concrete)."""
  _validate.check_callable(loss_one, "loss_one")
  x = _validate.check_array(x_BxF, "x_BxF", min_size=1)
  if np.ndim(x) < 1:
    raise ValueError(f"x_BxF must have a leading batch axis, got shape {np.shape(x)}")
  y = _validate.check_array(y_B, "y_B")
  if np.ndim(y) < 1 or np.shape(y)[0] != np.shape(x)[0]:
    raise ValueError(f"x_BxF and y_B need the same leading size B, got shapes "
                     f"{np.shape(x)} and {np.shape(y)}")


def tree_sq_norm_per_example(grads: PyTree) -> jax.Array:
  """sum over leaves of ||leaf_i||^2 for leaves [B, ...]: float32[B]."""
  return sum(jnp.sum(jnp.square(g).reshape(g.shape[0], -1), axis=1)
             for g in jax.tree.leaves(grads))


def per_example_sq_norms(loss_one: Callable, params: PyTree, x_BxF: jax.Array,
                         y_B: jax.Array, *, rewrite: bool = True) -> jax.Array:
  """||grad loss_one(params, x_i, y_i)||^2 for every record i: float32[B] (rewrite=False:
  the plain vmap(grad) reduction)."""
  _check_records(loss_one, x_BxF, y_B)

  def sq(p):
    return tree_sq_norm_per_example(per_example_grads(loss_one, p, x_BxF, y_B))
  if not _validate.check_bool(rewrite, "rewrite"):
    return sq(params)
  leaves, treedef = jax.tree.flatten(params)
  closed = jax.make_jaxpr(lambda *ls: sq(jax.tree.unflatten(treedef, ls)))(*leaves)
  out, = _eval(closed.jaxpr, closed.consts, leaves)
  return out


def _eval(jaxpr, consts, args):
  """Evaluates a jaxpr, computing matched sum-of-squares patterns by Gram matrices."""
  env = {}
  producer = {}

  def read(v):
    return v.val if isinstance(v, jcore.Literal) else env[v]

  for v, c in zip(jaxpr.constvars, consts):
    env[v] = c
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      producer[v] = eqn
    out = None
    if eqn.primitive.name == "reduce_sum":
      out = _gram_reduce(eqn, producer, read)
    if out is None:
      bind_params = eqn.primitive.get_bind_params(eqn.params)
      subfuns = ()
      if isinstance(bind_params, tuple):   # jax < 0.7 returns (subfuns, params)
        subfuns, bind_params = bind_params
      with eqn.ctx.manager:
        out = eqn.primitive.bind(*subfuns, *map(read, eqn.invars), **bind_params)
      out = out if eqn.primitive.multiple_results else [out]
    else:
      out = [out]
    for v, val in zip(eqn.outvars, out):
      env[v] = val
  return [read(v) for v in jaxpr.outvars]


def _squared_operand(eqn):
  """The variable x when eqn computes x**2, else None."""
  name = eqn.primitive.name
  if name == "square":
    return eqn.invars[0]
  if name == "integer_pow" and eqn.params.get("y") == 2:
    return eqn.invars[0]
  if name == "mul" and eqn.invars[0] is eqn.invars[1] and not isinstance(
      eqn.invars[0], jcore.Literal):
    return eqn.invars[0]
  return None


def _find_dot(eqn, producer):
  """The dot_general whose squares `eqn` (a reduce_sum over all but n leading axes) adds up,
  seen through transposes and reshapes keeping those axes; else None."""
  in_shape = eqn.invars[0].aval.shape
  axes = tuple(sorted(eqn.params["axes"]))
  n = len(in_shape) - len(axes)
  if axes != tuple(range(n, len(in_shape))):
    return None
  v, squared = eqn.invars[0], False
  while True:
    e = producer.get(v)
    if e is None:
      return None
    name = e.primitive.name
    if not squared and _squared_operand(e) is not None:
      squared, v = True, _squared_operand(e)
    elif name == "transpose" and tuple(e.params["permutation"][:n]) == tuple(range(n)):
      v = e.invars[0]
    elif (name == "reshape" and e.params.get("dimensions") is None
          and e.invars[0].aval.shape[:n] == e.outvars[0].aval.shape[:n]):
      v = e.invars[0]
    elif name == "dot_general" and squared:
      nb = len(e.params["dimension_numbers"][1][0])
      return e if nb == n else None
    else:
      return None


def _gram_reduce(eqn, producer, read):
  """The sum of squares `eqn` computes, by the norm / Gram identity; None if not the pattern
  or not cheaper."""
  dot = _find_dot(eqn, producer)
  if dot is None:
    return None
  (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
  a, b = read(dot.invars[0]), read(dot.invars[1])
  nb = len(lb)
  lfree = [d for d in range(a.ndim) if d not in lc and d not in lb]
  rfree = [d for d in range(b.ndim) if d not in rc and d not in rb]
  k = math.prod(a.shape[d] for d in lc)
  fa = math.prod(a.shape[d] for d in lfree)
  fb = math.prod(b.shape[d] for d in rfree)
  # K = 1: ||A||^2 ||B||^2 costs |A| + |B| instead of |A| |B| (and a parameter-free factor is
  # computed once under a vmap over models). K > 1: Gram matrices only where cheaper.
  if k > 1 and k * (fa + fb) >= fa * fb:
    return None
  dtype = eqn.outvars[0].aval.dtype   # what the replaced reduce_sum returns
  a = a.astype(dtype)
  b = b.astype(dtype)
  if k == 1:
    # ||A_i||^2 ||B_i||^2 per batch index (batch axes first, in dimension-number order).
    sa = jnp.sum(jnp.square(a), axis=tuple(lfree) + tuple(lc))
    sb = jnp.sum(jnp.square(b), axis=tuple(rfree) + tuple(rc))
    # Reorder the batch axes to dot_general's output order (lb's for A, rb's for B).
    sa = jnp.transpose(sa, _listed_order(lb))
    sb = jnp.transpose(sb, _listed_order(rb))
    prod = sa * sb
    # Out of range (or 0 * inf): (||A_i|| ||B_i||)^2 from overflow-safe norms, exactly 0
    # when a factor is zero and the other finite, as the plain reduction gives.
    na, ma = _safe_factor_norm(a, tuple(lfree) + tuple(lc), sa, lb)
    nb, mb = _safe_factor_norm(b, tuple(rfree) + tuple(rc), sb, rb)
    zero = ((na == 0) & (mb < jnp.inf)) | ((nb == 0) & (ma < jnp.inf))
    safe = jnp.where(zero, 0.0, jnp.square(na * nb))
    return jnp.where(prod < jnp.inf, prod, safe).astype(dtype)     # False for NaN
  # Gram matrices [batch..., K..., K...]; each K block put in lc's / rc's listed order so
  # that A's k-th contracting axis meets B's k-th.
  ga = jax.lax.dot_general(a, a, ((lfree, lfree), (lb, lb)), preferred_element_type=dtype)
  gb = jax.lax.dot_general(b, b, ((rfree, rfree), (rb, rb)), preferred_element_type=dtype)
  ga = jnp.transpose(ga, _gram_order(nb, lc))
  gb = jnp.transpose(gb, _gram_order(nb, rc))
  return jnp.sum(ga * gb, axis=tuple(range(nb, ga.ndim)))


def _safe_factor_norm(v, axes, sq, batch_dims):
  """(||v_i||, max |v_i|) per batch index over `axes`, in `batch_dims`' listed order."""
  mx = jnp.transpose(jnp.max(jnp.abs(v), axis=axes), _listed_order(batch_dims))
  # v with its batch axes first (in listed order) and the reduced axes flattened.
  vb = jnp.transpose(v, tuple(batch_dims) + tuple(axes)).reshape(
      tuple(v.shape[d] for d in batch_dims) + (-1,))
  return safe_norm(sq, mx, lambda unit: jnp.sum(jnp.square(unit(vb)), axis=-1)), mx


def _listed_order(dims):
  """Permutation from axes in increasing order of `dims` to the order listed."""
  return tuple(sorted(dims).index(d) for d in dims)


def _gram_order(nb, contracting):
  """Permutation of a [batch (nb), K-block, K-block] Gram output into `contracting`'s order."""
  block = _listed_order(contracting)
  nk = len(contracting)
  return (tuple(range(nb)) + tuple(nb + i for i in block)
          + tuple(nb + nk + i for i in block))
