"""One model's DP-SGD run: T steps of sample -> clip -> privatize -> update, in a scan.

Step t (Abadi et al. 2016): batch bits from the sampler; the clipped sum; noise of std
`noise_std`, then the fixed denominator B = q n; the optimiser. Fixed-gradient records
(white-box auditing, Nasr et al. 2021) are clipped to C, sampled by the configured sampler
as records N .. N + K - 1 of its index space (Poisson, user-level Poisson: independent bits
at rate q from their own key) and added to the sum and the realised batch size. Shapes: N records,
K fixed records, T steps.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _xla
from dpjax import clipping as clipping_lib
from dpjax import sampling as sampling_lib
from dpjax.clipping import grid as clipping_grid

PyTree = Any

# Unrolled steps (the path's `scan_unroll`) apply only to models with at most this many params.
UNROLL_MAX_PARAMS = 4096


def _all_finite(tree) -> jax.Array:
  return functools.reduce(jnp.logical_and,
                          [jnp.all(jnp.isfinite(l)) for l in jax.tree.leaves(tree)])


def _all_finite_unbatched(tree) -> jax.Array:
  """`_all_finite(tree)`, cheaper outside vmap: a finite sum of every value implies every
  value is finite (an inf or NaN term makes an IEEE sum inf or NaN, in any order), so the
  element-wise check runs (lax.cond) only when the sum is not finite: an inf or NaN, or
  finite values whose sum overflows. Under vmap a cond runs both branches: use
  `_all_finite` there."""
  total = functools.reduce(jnp.add, [jnp.sum(l) for l in jax.tree.leaves(tree)])
  return jax.lax.cond(jnp.isfinite(total), lambda: jnp.bool_(True), lambda: _all_finite(tree))


def train_single(key, keep_N, fixed_keep_K, noise_std, init_params, fixed_K, x, y, *,
                 cfg, model, observe_fn, per_example_stats, clipping, sampler, privatizer,
                 optimizer, unroll=1, capacity=None, batched=True):
  """Trains one model; pure, traced under jit (vmapped over models by `engine`).

  noise_std: traced float32 or a static 0.0; cfg: the noise-free config; capacity: None
  (full mask) or K (padded); batched: False when traced outside vmap (the per-step
  finiteness check then skips its element-wise pass while the parameters' sum is finite). Returns (params, observations, stats, finite,
  first_nonfinite_step, ema_params), EMA e_t = d e_(t-1) + (1 - d) p_t as e_T / (1 - d^T).
  """
  c = float(cfg.l2_clip_norm)
  ema_decay = cfg.ema_decay
  step_finite = _all_finite if batched else _all_finite_unbatched
  k_init, k_sample, k_noise, k_fixed = jax.random.split(key, 4)
  params = model.init(k_init) if init_params is None else init_params
  aggregate = privatizer.transform(noise_std, cfg.expected_batch_size, k_noise)
  agg_state = aggregate.init(params)
  opt_state = optimizer.init(params)
  if fixed_K is not None:
    g = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), fixed_K)
    num_fixed = jax.tree.leaves(g)[0].shape[0]
    # Overflow-safe ||g^j|| (sqrt of the sum of squares wherever that is in range).
    norm = clipping_lib.vmap.tree_norms([jnp.reshape(v, (num_fixed, -1))
                                         for v in jax.tree.leaves(g)])
    factor = clipping_lib.clip_factor(norm, c)
    g_clipped = jax.tree.map(lambda v: v * jnp.reshape(factor, (-1,) + (1,) * (v.ndim - 1)), g)
    if getattr(clipping, "grid", None) is not None:
      # A grid path sums int32 grid units: each fixed record is rounded like any record.
      g_clipped = clipping_grid.round_clipped(g_clipped, clipping.grid, c)
    fixed_own_bits = _fixed_own_bits(sampler, x.shape[0] + num_fixed)
    if fixed_own_bits:
      fixed_sampler = sampling_lib.PoissonSampler(float(cfg.sampling_prob))
      all_fixed = jnp.ones((num_fixed,), bool)

  def step(carry, t):
    params, agg_state, opt_state, st, first_bad, ema = carry
    if fixed_K is not None and not fixed_own_bits:
      # The fixed records are records N .. N + K - 1 of the sampler's index space.
      mask_all = sampler.batch_mask(k_sample, t, jnp.concatenate(
          [keep_N, jnp.asarray(fixed_keep_K, bool)]))
      mask, fixed_bits = mask_all[:keep_N.shape[0]], mask_all[keep_N.shape[0]:]
    else:
      mask = sampler.batch_mask(k_sample, t, keep_N)
    if capacity is None:
      wts = mask.astype(jnp.float32)
      gsum, norms = clipping(params, x, y, wts, c)
      bsize = jnp.sum(wts)
      if per_example_stats:
        clipped = (norms > c).astype(jnp.float32) * wts
        # where, not wts * norms: an unsampled record with norm inf adds 0, not NaN.
        st = (st[0] + wts, st[1] + clipped, st[2] + jnp.where(wts > 0, wts * norms, 0.0))
    else:
      gsum, st, count = padded_clipped_sum(clipping, params, x, y, mask, c, capacity,
                                           st if per_example_stats else None)
      bsize = count.astype(jnp.float32)
    if fixed_K is not None:
      if fixed_own_bits:
        bits = fixed_sampler.batch_mask(k_fixed, t, all_fixed).astype(jnp.float32)
        bits = bits * fixed_keep_K.astype(jnp.float32)
      else:
        bits = fixed_bits.astype(jnp.float32)
      # sum_j bit_j g_j: exact for K = 1 (a product by 0 or 1) and for fixed gradients
      # in disjoint coordinates; counted in the realised batch size like records.
      gsum = jax.tree.map(lambda s, v: s + _bit_sum(bits, v), gsum, g_clipped)
      bsize = bsize + jnp.sum(bits)
    priv, agg_state = aggregate.update(gsum, agg_state, params, batch_size=bsize)
    obs = observe_fn(priv) if observe_fn is not None else None
    upd, opt_state = optimizer.update(priv, opt_state, params)
    params = optax.apply_updates(params, upd)
    first_bad = jnp.where((first_bad < 0) & ~step_finite(params), t, first_bad)
    if ema_decay is not None:
      ema = jax.tree.map(lambda e, p: ema_decay * e + (1.0 - ema_decay) * p, ema, params)
    return (params, agg_state, opt_state, st, first_bad, ema), obs

  if per_example_stats:
    z = jnp.zeros((x.shape[0],), jnp.float32)
    st0 = (z, z, z)
  else:
    st0 = ()
  num_params = sum(l.size for l in jax.tree.leaves(params))
  ema0 = () if ema_decay is None else jax.tree.map(jnp.zeros_like, params)
  (params, _, _, st, first_bad, ema), obs = jax.lax.scan(
      step, (params, agg_state, opt_state, st0, jnp.int32(-1), ema0),
      jnp.arange(cfg.num_steps, dtype=jnp.int32),
      unroll=unroll if num_params <= UNROLL_MAX_PARAMS else 1)
  stats = None
  if per_example_stats:
    stats = {"times_sampled": st[0], "times_clipped": st[1], "norm_sum": st[2]}
  if ema_decay is not None:
    debias = 1.0 - float(ema_decay) ** int(cfg.num_steps)
    ema = jax.tree.map(lambda e: e / debias, ema)
  else:
    ema = None
  return params, obs, stats, _all_finite(params), first_bad, ema


def _fixed_own_bits(sampler, num_records: int) -> bool:
  """How `train_single` samples K fixed-gradient records: True for `sampling.PoissonSampler`
  and `sampling.UserPoissonSampler` (independent bits at rate q from the fixed-record key:
  extra records, or extra one-record users, of those samplers), False for any other
  sampler, whose `batch_mask` then runs over N + K records (the fixed ones last, kept where
  fixed_keep_K is set) so they take part exactly as records of that sampler do (a
  shuffle's fixed-size batches, a cycle's slots, a cyclic Poisson bin (N + j) mod s).
  Raises ValueError for any other sampler whose privacy unit is not the example (a fixed
  record belongs to no unit it draws) and for one whose `batch_mask` cannot take N + K
  records.
  """
  if type(sampler) in (sampling_lib.PoissonSampler, sampling_lib.UserPoissonSampler):
    return True
  unit = getattr(sampler, "privacy_unit", "example")
  if unit != "example":
    raise ValueError(f"fixed_gradients with {type(sampler).__name__} (privacy unit {unit!r}): "
                     "a fixed-gradient record belongs to no unit the sampler draws, so its "
                     "participation cannot follow the sampler; audit with records instead")
  probe = jnp.ones((int(num_records),), bool)   # N + K
  try:
    jax.eval_shape(lambda k: sampler.batch_mask(k, jnp.int32(0), probe), jax.random.key(0))
  except (ValueError, TypeError, IndexError) as e:
    raise ValueError(f"fixed_gradients with {type(sampler).__name__}: fixed-gradient records "
                     "are sampled as extra records of the sampler's index space, and its "
                     f"batch_mask does not accept another number of records ({e})") from e
  return False


def padded_clipped_sum(clipping, params, x, y, mask_N, c, capacity, stats):
  """(clipped sum, updated stats or (), count int32) of the records in mask_N: ceil(count / K) >= 1
  chunks of K gathered rows, each clipped by the path's `on_buffer` (a plain clipped-sum
  function: itself); padding has weight 0. Chunk 0 runs outside the while_loop over chunks
  1, 2, ... (entered only when the count exceeds K) and starts the sum, as the full-mask
  path's single call does (a -0.0 coordinate stays -0.0)."""
  clip_buffer = getattr(clipping, "on_buffer", clipping)
  k = int(capacity)
  # Stored once (`_xla.once`; XLA:CPU drops an optimization_barrier before fusion): the
  # count and the chunks' ranks read it, else each recomputes the sampler's bits.
  mask_N = _xla.once(lambda: mask_N, y[0])
  count = jnp.sum(mask_N, dtype=jnp.int32)

  def chunk(j, gsum, st):
    index, valid = sampling_lib.padded_batch(mask_N, k, j)
    w = valid.astype(jnp.float32)
    g, norms = clip_buffer(params, x[index], y[index], w, c)
    gsum = g if gsum is None else jax.tree.map(jnp.add, gsum, g)
    if stats is not None:
      clipped = (norms > c).astype(jnp.float32) * w
      st = (st[0].at[index].add(w), st[1].at[index].add(clipped),
            st[2].at[index].add(jnp.where(valid, w * norms, 0.0)))
    return gsum, st

  def body(carry):
    j, gsum, st = carry
    return (j + 1,) + chunk(j, gsum, st)

  gsum, st = chunk(jnp.int32(0), None, stats if stats is not None else ())
  _, gsum, st = jax.lax.while_loop(lambda carry: carry[0] * k < count, body,
                                   (jnp.int32(1), gsum, st))
  return gsum, st, count


def _bit_sum(bits_K, leaf_KxP):
  """sum_j bits_K[j] * leaf_KxP[j]: a dot product for float leaves, elementwise for int32."""
  if jnp.issubdtype(leaf_KxP.dtype, jnp.floating):
    return jnp.tensordot(bits_K.astype(leaf_KxP.dtype), leaf_KxP, axes=1)
  b = jnp.reshape(bits_K.astype(leaf_KxP.dtype), (-1,) + (1,) * (leaf_KxP.ndim - 1))
  return jnp.sum(b * leaf_KxP, axis=0)
