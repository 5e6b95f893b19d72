"""DP-SGD: the configuration the accountant is told, and many models trained at once.

One step of DP-SGD (Abadi et al. 2016) for a model with dataset size n:

  1. batch selection: Poisson sampling, each record in independently with prob. q
     (`sampling.PoissonSampler`, a static-shape 0/1 mask over the records);
  2. per-example gradients g_i, clipped to L2 norm <= C and summed
     (`clipping.path_for(model)`);
  3. noise and the FIXED denominator: (sum + N(0, sigma^2 C^2 I)) / B with
     B = q * n, never the realised batch size (`privatizer.dp_aggregate`);
  4. any optax optimiser (post-processing).

The accountant is told (q, sigma, T, delta) by `DpSgdConfig.epsilon()`, built from
the same fields that drive steps 1-3.

Step layout (`train_many(batch_capacity=...)`, a cost choice, never a privacy one):
the full-mask step computes step 2 for all N records and weights them by their
0/1 batch bits (cost proportional to N); the padded step gathers the sampled
records into buffers of K rows (`sampling.padded_batch`) and runs step 2 on
ceil(count / K) >= 1 buffers in a `lax.while_loop` (cost proportional to K when
the batch fits, which the default K of `sampling.default_batch_capacity` makes
true on 97.5 % of steps). A batch larger than K is split into more buffers, never
truncated, so every sampled record is clipped and summed exactly once and the
accountant's Poisson analysis holds unchanged. Both layouts draw the same batch
bits, so they train the same models up to float summation order. "auto"
(`batch_layout`) picks the padded step for large pools of large models.

Privacy unit (`DpSgdConfig.privacy_unit`): "example" (the default; neighbouring
datasets differ in one record) or "user" (they differ in ALL the records of one
user; McMahan et al. 2018, https://arxiv.org/abs/1710.06963). For "user",
dataset_size is the number of users U, q is the rate at which each user is
sampled, B = q U, and `train_many(..., user_ids_N=...)` swaps in user-level
Poisson sampling (`sampling.UserPoissonSampler`) and user-level clipping (each
user's summed gradient clipped to C, `clipping.user.user_level_path`): one user
then moves the clipped sum by at most C, so the same accountant call gives the
guarantee per user. The engine refuses components whose unit differs from the
config's (a per-example clipping under user accounting is not user-level DP; user
components under example accounting would tell the accountant the wrong unit). Each of steps 1-3 is a component passed
through one door, `train_many(..., sampler=, clipping=, privatizer=)`, with the
accounted one as the default; a component that declares `accounted = False` (a
shuffle sampler, the broken variants of `dpjax.audit.variants`) makes training warn
that the epsilon does not hold for it.

`train_many` trains M models in one jitted program per memory-sized chunk: vmap
over models, `lax.scan` over the T steps. Model i uses its own key (by default
`jax.random.split(key, M)[i]`) and its own membership mask `keep_MxN[i]`, and equals
`train_one` with that key. A model's key is split into (init, sample, noise,
canary) keys; step t's batch mask and noise are drawn from `fold_in(key, t)` of
those (`dpjax.prng`), so a model's stream never depends on M or the chunking.
`train_sweep` trains models whose configs differ only in their noise as one program
(the noise std is an input of the compiled program).

Records: NaN / inf features or labels, and labels outside the model's range, are
refused before training (ValueError naming `x_NxF` / `y_N` and the first index);
finite features of any size are accepted, the clipping paths making them harmless.
Each result says per model whether its parameters ended finite (`TrainResult.finite`,
`first_nonfinite_step`); a run with diverged models warns (`DivergenceWarning`).

Shape letters: M models, N records, F features, B batch, T steps.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import models
  >>> x = jax.random.normal(jax.random.key(0), (40, 3))
  >>> y = (x[:, 0] > 0).astype(jnp.int32)
  >>> cfg = DpSgdConfig(dataset_size=40, sampling_prob=0.25, num_steps=20,
  ...                   noise_multiplier=1.0)
  >>> out = train_many(jax.random.key(1), x, y, jnp.ones((4, 40), bool), cfg,
  ...                  models.logistic_regression(3), progress=False)
  >>> out.params["w"].shape
  (4, 3)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import clipping as clipping_lib
from dpjax import flax_model
from dpjax.clipping import grid as clipping_grid
from dpjax import models as models_lib
from dpjax import privatizer as privatizer_lib
from dpjax import sampling as sampling_lib

PyTree = Any

# Steps per scan iteration (the clipping path's `scan_unroll`) apply only to chunks of
# at least _UNROLL_MIN_MODELS models with at most _UNROLL_MAX_PARAMS parameters each:
# unrolling pays off for many small models and costs compile time otherwise.
_UNROLL_MAX_PARAMS = 4096
_UNROLL_MIN_MODELS = 256
# Models per chunk unless max_chunk says otherwise: chunks of a few thousand small
# models run faster than one huge chunk (cache locality; benchmarks/dpsgd.py).
# Performance only; results do not depend on chunking.
_DEFAULT_MAX_CHUNK = 4096
# batch_capacity="auto" uses the padded step when the pool has at least
# _PADDED_MIN_RECORDS records, the capacity is at most 1 / _PADDED_MAX_FRACTION_INV
# of them and the model has at least _PADDED_MIN_PARAMS parameters (`batch_layout`).
_PADDED_MIN_RECORDS = 2048
_PADDED_MAX_FRACTION_INV = 8
_PADDED_MIN_PARAMS = 1024
_ACCOUNTANTS = ("rdp", "pld")
_PRIVACY_UNITS = ("example", "user")


class UnaccountedComponentWarning(UserWarning):
  """Training uses a component (sampler, clipping, privatizer) the accountant does not model."""


class DivergenceWarning(UserWarning):
  """Some trained models ended with non-finite parameters (see `TrainResult.finite`)."""


@functools.lru_cache(maxsize=256)
def _calibrated_sigma(target_epsilon, sampling_prob, num_steps, delta, accountant,
                      dataset_size):
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  return float(accounting.calibrate_noise(target_epsilon, sampling_prob, num_steps, delta,
                                          accountant=accountant, dataset_size=dataset_size))


@functools.lru_cache(maxsize=256)
def _epsilon(sigma, sampling_prob, num_steps, delta, accountant, dataset_size):
  # dataset_size lets the accountant warn when delta >= 1/n.
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  return float(accounting.dpsgd_epsilon(sigma, sampling_prob, num_steps, delta,
                                        accountant=accountant, dataset_size=dataset_size))


def _is_int(v) -> bool:
  return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpSgdConfig:
  """What DP-SGD does, and therefore what the accountant is told.

  Attributes:
    dataset_size: n >= 1, public; the fixed denominator is B = q * n.
    sampling_prob: q in (0, 1], the Poisson sampling rate.
    num_steps: T >= 1.
    l2_clip_norm: C > 0; math.inf disables clipping (non-private baseline; then
      noise_multiplier must be 0).
    noise_multiplier: sigma >= 0 (0 = the clipped-noiseless baseline), or None when
      target_epsilon is given.
    target_epsilon: eps > 0; sigma is then calibrated with
      `dpjax.accounting.calibrate_noise` at (q, T, delta). Give exactly one of
      noise_multiplier and target_epsilon.
    delta: in (0, 1).
    learning_rate: > 0 (used by the default optimiser, SGD).
    momentum: in [0, 1) (default optimiser only).
    accountant: "rdp" or "pld".
    privacy_unit: "example" (add/remove one record) or "user" (add/remove one
      user with all of their records); for "user", dataset_size is the number of
      users U and q is the per-user sampling rate, and training needs the record
      owners (`train_many(..., user_ids_N=...)`). The accountant's numbers are the
      same function of (q, sigma, T, delta); the unit says what they protect.
  """
  dataset_size: int
  sampling_prob: float
  num_steps: int
  l2_clip_norm: float = 1.0
  noise_multiplier: float | None = None
  target_epsilon: float | None = None
  delta: float = 1e-5
  learning_rate: float = 0.5
  momentum: float = 0.0
  accountant: str = "rdp"
  privacy_unit: str = "example"

  def __post_init__(self):
    for name in ("dataset_size", "num_steps"):
      v = getattr(self, name)
      if not _is_int(v) or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    _validate.check_sampling_prob(self.sampling_prob)
    c = self.l2_clip_norm
    if c != math.inf:
      try:
        _validate.check_positive(c, "l2_clip_norm")
      except ValueError:
        raise ValueError(f"l2_clip_norm must be > 0 (math.inf = no clipping), got {c!r}"
                         ) from None
    if (self.noise_multiplier is None) == (self.target_epsilon is None):
      raise ValueError("give exactly one of noise_multiplier (sigma >= 0) and "
                       f"target_epsilon (> 0); got noise_multiplier={self.noise_multiplier!r},"
                       f" target_epsilon={self.target_epsilon!r}")
    s = self.noise_multiplier
    if s is not None:
      _validate.check_nonnegative(s, "noise_multiplier")
    if self.target_epsilon is not None:
      _validate.check_epsilon(self.target_epsilon, "target_epsilon")
    if math.isinf(c) and (s is None or s > 0):
      raise ValueError("l2_clip_norm = inf (no clipping) has unbounded sensitivity: "
                       "noise_multiplier must be 0 (the non-private baseline)")
    _validate.check_delta(self.delta)
    _validate.check_positive(self.learning_rate, "learning_rate")
    _validate.check_probability(self.momentum, "momentum", open_high=True)
    _validate.check_choice(self.accountant, _ACCOUNTANTS, "accountant")
    _validate.check_choice(self.privacy_unit, _PRIVACY_UNITS, "privacy_unit")

  @property
  def expected_batch_size(self) -> float:
    """B = q * n, the fixed public denominator."""
    return float(self.sampling_prob) * float(self.dataset_size)

  @property
  def sigma(self) -> float:
    """The noise multiplier actually used (calibrated if target_epsilon was given)."""
    if self.noise_multiplier is not None:
      return float(self.noise_multiplier)
    return _calibrated_sigma(float(self.target_epsilon), float(self.sampling_prob),
                             int(self.num_steps), float(self.delta), self.accountant,
                             int(self.dataset_size))

  @property
  def epochs(self) -> float:
    return self.num_steps * float(self.sampling_prob)

  def epsilon(self) -> float:
    """The epsilon spent at `delta`: accounting.dpsgd_epsilon(sigma, q, T, delta).

    The accountant models Poisson sampling at rate q, per-example clipping to C and
    Gaussian noise sigma * C on the sum (the defaults of `train_many`). math.inf
    when sigma == 0.
    """
    s = self.sigma
    if s == 0.0:
      return math.inf
    return _epsilon(s, float(self.sampling_prob), int(self.num_steps), float(self.delta),
                    self.accountant, int(self.dataset_size))

  def sampler(self, user_ids_N: jax.typing.ArrayLike | None = None):
    """The sampler the accountant models: Poisson at rate q over the privacy unit.

    Args:
      user_ids_N: int[N] record owners, required for privacy_unit "user" (ids in
        [0, dataset_size)), refused for "example".
    Returns:
      `sampling.PoissonSampler(q)` ("example") or
      `sampling.UserPoissonSampler(q, user_ids_N, dataset_size)` ("user").
    """
    if self.privacy_unit == "example":
      if user_ids_N is not None:
        raise ValueError("user_ids_N is only for privacy_unit = 'user' (this config's "
                         "unit is 'example')")
      return sampling_lib.PoissonSampler(float(self.sampling_prob))
    if user_ids_N is None:
      raise ValueError("privacy_unit = 'user' needs user_ids_N (the user of each record)")
    return sampling_lib.UserPoissonSampler(float(self.sampling_prob), user_ids_N,
                                           int(self.dataset_size))

  def statement(self, **kwargs):
    """`accounting.privacy_statement` of this configuration, naming its privacy unit.

    Args:
      **kwargs: other `privacy_statement` keywords (deltas, fprs, pld_rtol,
        noise_draws_per_step).
    Returns:
      a `dpjax.accounting.statement.PrivacyStatement` for (sigma, q, T, n) and
      `privacy_unit`.
    """
    from dpjax.accounting import statement  # pylint: disable=g-import-not-at-top
    return statement.privacy_statement(self.sigma, float(self.sampling_prob),
                                       int(self.num_steps), int(self.dataset_size),
                                       privacy_unit=self.privacy_unit, **kwargs)


class TrainResult(NamedTuple):
  """Output of train_many / train_one / train_sweep.

  Attributes:
    params: pytree with leaves [M, ...] (train_one: unbatched).
    observations: [M, T, ...] outputs of observe_fn, or None.
    stats: None, or {"times_sampled", "times_clipped", "norm_sum"}: float32[M, N]
      (over steps where the record was sampled: how often, how often its norm
      exceeded C, and the sum of its pre-clipping norms; inf for a record whose
      gradient was dropped as non-finite, see `dpjax.clipping.vmap.safe_norm`).
    finite: bool[M], whether every parameter of model i is finite at the end.
    first_nonfinite_step: int32[M], the first step t (0-based) after whose update
      some parameter of model i was NaN or inf; -1 if none. Clipping bounds every
      record's contribution and drops non-finite per-example gradients, so no record
      of finite values can cause this; a learning rate or optimiser that makes the
      parameters themselves blow up can, and `train_many` then warns
      (`DivergenceWarning`). Anything computed from such a model (an audit score,
      an epsilon lower bound) must exclude it explicitly.
    ema_params: None, or (with `train_many(..., ema_decay=d)`) the exponential
      moving average of the iterates, leaves [M, ...] like params: with p_t the
      parameters after step t, sum_{t=1}^T d^(T-t) (1 - d) p_t / (1 - d^T), a
      weighted average whose weights sum to 1. A function of the released
      iterates only, so post-processing: the same (eps, delta) as `params`.
  """
  params: PyTree
  observations: jax.Array | None
  stats: dict | None
  finite: jax.Array | None = None
  first_nonfinite_step: jax.Array | None = None
  ema_params: PyTree | None = None


def _noise_free(cfg: DpSgdConfig) -> DpSgdConfig:
  """cfg with its noise fields blanked: what the compiled program depends on (the
  noise std is an input, so a sweep over sigma or epsilon compiles once)."""
  return dataclasses.replace(cfg, noise_multiplier=0.0, target_epsilon=None)


def _train_single(key, keep_N, canary_keep, noise_std, init_params, x, y, *,
                  cfg: DpSgdConfig, model, observe_fn, per_example_stats, gradient_canary,
                  clipping, sampler, privatizer, optimizer, unroll=1, capacity=None,
                  ema_decay=None):
  """Trains one model (vmapped by train_many). Pure; traced under jit.

  `capacity` None: the full-mask step (every record's clipped gradient, weighted
  by its 0/1 batch bit). An int K: the padded step (`_padded_clipped_sum`), the
  same batch processed in chunks of K gathered rows.

  `noise_std` is this model's float32 scalar `privatizer.noise_stddev(sigma, C)`, an
  input of the program (cfg here has its noise fields blanked), or a static 0.0 when
  no model of the call has noise. Step t's batch mask and canary bit are drawn from
  the model's sample / canary keys and t, its noise by the privatizer from the noise
  key and its update count t.

  `ema_decay` None: no average (the carry holds an empty tuple). A float d: the
  carry also holds e_t = d e_(t-1) + (1 - d) p_t from e_0 = 0, updated from the
  new parameters p_t only (never from a gradient), and the result returns
  e_T / (1 - d^T).
  """
  c = float(cfg.l2_clip_norm)
  k_init, k_sample, k_noise, k_canary = jax.random.split(key, 4)
  params = model.init(k_init) if init_params is None else init_params
  aggregate = privatizer.transform(noise_std, cfg.expected_batch_size, k_noise)
  agg_state = aggregate.init(params)
  opt_state = optimizer.init(params)
  if gradient_canary is not None:
    # K canaries: every leaf [K, ...]; canary_keep is bool[K].
    g_c = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), gradient_canary)
    num_canaries = jax.tree.leaves(g_c)[0].shape[0]
    # Overflow-safe ||g_c^j|| (sqrt of the sum of squares wherever that is in range).
    norm_c = clipping_lib.vmap.tree_norms(
        [jnp.reshape(v, (num_canaries, -1)) for v in jax.tree.leaves(g_c)])
    factor_c = clipping_lib.clip_factor(norm_c, c)
    g_c_clipped = jax.tree.map(
        lambda v: v * jnp.reshape(factor_c, (-1,) + (1,) * (v.ndim - 1)), g_c)
    if getattr(clipping, "grid", None) is not None:
      # A grid path sums int32 grid units: each canary is rounded like any record.
      g_c_clipped = clipping_grid.round_clipped(g_c_clipped, clipping.grid, c)
    # Each canary is one more record, Poisson-sampled at the accounted rate q with
    # its own bit: bit j of step t is entry j of poisson_mask(fold_in(k_canary, t),
    # q, K), so K = 1 draws exactly the single canary's bit.
    canary_sampler = sampling_lib.PoissonSampler(float(cfg.sampling_prob))
    all_canaries = jnp.ones((num_canaries,), bool)

  def step(carry, t):
    params, agg_state, opt_state, st, first_bad, ema = carry
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
      gsum, st = _padded_clipped_sum(clipping, params, x, y, mask, c, capacity,
                                     st if per_example_stats else None)
      bsize = jnp.sum(mask, dtype=jnp.int32).astype(jnp.float32)
    if gradient_canary is not None:
      bits = canary_sampler.batch_mask(k_canary, t, all_canaries).astype(jnp.float32)
      bits = bits * canary_keep.astype(jnp.float32)
      # sum_j bit_j g_j: exact for K = 1 (a product by 0 or 1) and for canaries in
      # disjoint coordinates; counted in the realised batch size like records.
      gsum = jax.tree.map(lambda s, v: s + _canary_sum(bits, v), gsum, g_c_clipped)
      bsize = bsize + jnp.sum(bits)
    priv, agg_state = aggregate.update(gsum, agg_state, params, batch_size=bsize)
    obs = observe_fn(priv) if observe_fn is not None else None
    upd, opt_state = optimizer.update(priv, opt_state, params)
    params = optax.apply_updates(params, upd)
    ok = functools.reduce(jnp.logical_and,
                          [jnp.all(jnp.isfinite(l)) for l in jax.tree.leaves(params)])
    first_bad = jnp.where((first_bad < 0) & ~ok, t, first_bad)
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
      unroll=unroll if num_params <= _UNROLL_MAX_PARAMS else 1)
  stats = None
  if per_example_stats:
    stats = {"times_sampled": st[0], "times_clipped": st[1], "norm_sum": st[2]}
  finite = functools.reduce(jnp.logical_and,
                            [jnp.all(jnp.isfinite(l)) for l in jax.tree.leaves(params)])
  if ema_decay is not None:
    debias = 1.0 - float(ema_decay) ** int(cfg.num_steps)
    ema = jax.tree.map(lambda e: e / debias, ema)
  else:
    ema = None
  return params, obs, stats, finite, first_bad, ema


def _padded_clipped_sum(clipping, params, x, y, mask_N, c, capacity, stats):
  """The clipped sum of the records in mask_N, in chunks of K = capacity gathered rows.

  Chunk j (`sampling.padded_batch`) holds the sampled records of rank jK .. jK + K - 1;
  chunks are processed in a `lax.while_loop` until all sampled records are
  (chunk 0 always, ceil(count / K) in all), so every sampled record is clipped and
  summed exactly once and padding rows have weight 0: the result is the full-mask
  sum of the same batch, up to float summation order. Under vmap over models the
  loop runs to the largest count of the models, the finished models' carries
  unchanged. The cost per chunk is K rows of the clipping path plus O(N) integer
  work (a cumsum, then a binary search per row) for the ranks.

  Args:
    stats: None, or the per-record statistics (times_sampled, times_clipped,
      norm_sum), each float32[N], to which the chunks' rows are scattered.
  Returns:
    (sum pytree like params, the updated stats or ()).
  """
  k = int(capacity)
  count = jnp.sum(mask_N, dtype=jnp.int32)
  x_k = jax.ShapeDtypeStruct((k,) + x.shape[1:], x.dtype)
  y_k = jax.ShapeDtypeStruct((k,) + y.shape[1:], y.dtype)
  w_k = jax.ShapeDtypeStruct((k,), jnp.float32)
  out_shape = jax.eval_shape(lambda p, a, b, w: clipping(p, a, b, w, c)[0], params, x_k,
                             y_k, w_k)
  zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out_shape)

  def body(carry):
    j, gsum, st = carry
    index, valid = sampling_lib.padded_batch(mask_N, k, j)
    w = valid.astype(jnp.float32)
    g, norms = clipping(params, x[index], y[index], w, c)
    gsum = jax.tree.map(jnp.add, gsum, g)
    if stats is not None:
      clipped = (norms > c).astype(jnp.float32) * w
      st = (st[0].at[index].add(w), st[1].at[index].add(clipped),
            st[2].at[index].add(jnp.where(valid, w * norms, 0.0)))
    return j + 1, gsum, st

  def cond(carry):
    j = carry[0]
    return (j == 0) | (j * k < count)

  st0 = stats if stats is not None else ()
  _, gsum, st = jax.lax.while_loop(cond, body, (jnp.int32(0), zero, st0))
  return gsum, st


def _canary_sum(bits_K, canaries_KxP):
  """sum_j bits_K[j] * canaries_KxP[j]: a dot product for float leaves (under vmap over
  models, one matrix product [M, K] x [K, P]), elementwise for int32 grid units."""
  if jnp.issubdtype(canaries_KxP.dtype, jnp.floating):
    return jnp.tensordot(bits_K.astype(canaries_KxP.dtype), canaries_KxP, axes=1)
  b = jnp.reshape(bits_K.astype(canaries_KxP.dtype), (-1,) + (1,) * (canaries_KxP.ndim - 1))
  return jnp.sum(b * canaries_KxP, axis=0)


@functools.lru_cache(maxsize=64)
def _compiled(cfg, model, observe_fn, per_example_stats, has_canary, path, sampler,
              privatizer, optimizer, has_init, has_noise, capacity=None, ema_decay=None):
  def batched(key, keep, canary_keep, noise_std, init_params, canary, x, y):
    unroll = path.scan_unroll if key.shape[0] >= _UNROLL_MIN_MODELS else 1

    def one(key, keep, canary_keep, noise_std):
      return _train_single(
          key, keep, canary_keep, noise_std if has_noise else 0.0, init_params, x, y,
          cfg=cfg, model=model, observe_fn=observe_fn, per_example_stats=per_example_stats,
          gradient_canary=canary if has_canary else None, clipping=path, sampler=sampler,
          privatizer=privatizer, optimizer=optimizer, unroll=unroll, capacity=capacity,
          ema_decay=ema_decay)
    return jax.vmap(one)(key, keep, canary_keep, noise_std)
  return jax.jit(batched)


def _bytes_per_model(x, cfg, per_example_stats, observe_fn, path, params_shape,
                     num_canaries=0, rows=None):
  """A rough working-set estimate per model, for sizing chunks (rows: the padded
  step's K, else every record is a row)."""
  n, f = x.shape[0], int(np.prod(x.shape[1:]))
  r = n if rows is None else rows        # rows the clipping path sees per step
  p = sum(int(np.prod(l.shape)) for l in jax.tree.leaves(params_shape))
  per = 4 * (8 * p + 6 * n + f)          # params, optimiser state, noise, masks, logits
  if rows is not None:
    per += 4 * (rows * (f + 6))          # the gathered rows and their logits
  if path.per_example_grad_memory:
    per += 4 * 3 * r * p                 # per-example gradients
  if per_example_stats:
    per += 4 * 3 * n
  if observe_fn is not None:
    try:
      obs_size = sum(int(np.prod(l.shape)) for l in jax.tree.leaves(
          jax.eval_shape(observe_fn, params_shape)))
    except Exception:  # pylint: disable=broad-except
      obs_size = 1     # an observer that cannot be traced here fails in training instead
    per += 4 * cfg.num_steps * max(8, obs_size)
  per += 4 * 2 * num_canaries            # the canaries' bits
  return per


def batch_layout(num_records: int, sampling_prob: float, kept_max: int | None = None,
                 num_models: int = 1, privacy_unit: str = "example",
                 num_params: int | None = None) -> int | None:
  """The step layout `train_many(batch_capacity="auto")` picks: None (full mask) or K.

  The padded step costs about K rows of the clipping path plus O(N) integer work
  per step (the ranks of the sampled records: a cumsum and a binary search, about 40 us
  per model at N = 4096 on one CPU core), the full mask N rows; padding pays once
  K is a small fraction of N and a row costs more than that integer work. Rule:
  K = `sampling.default_batch_capacity(kept_max, q, num_models)`; padded when
  N >= _PADDED_MIN_RECORDS, K <= N / _PADDED_MAX_FRACTION_INV and the model has
  at least _PADDED_MIN_PARAMS parameters, else the full mask. Always the full mask
  for privacy_unit "user" (its clipping groups all of a user's records). A
  logistic regression's closed-form clipping costs about as much per row as the
  ranking, so the many-model audits of small models stay on the full mask (their
  padded step measured 4.5-20 times slower at N = 4096, M = 64).

  Args:
    num_records: N >= 1, the records in the pool (x_NxF's rows).
    sampling_prob: q in (0, 1].
    kept_max: the largest number of records a model keeps (default N).
    num_models: M >= 1 models trained together.
    privacy_unit: "example" or "user".
    num_params: the model's parameter count (None: not limiting).
  Returns:
    None or K (an int in [8, N]).
  Examples:
    >>> batch_layout(60_000, 256 / 60_000)
    288
    >>> batch_layout(151, 0.2) is None
    True
  """
  n = _validate.check_int(num_records, "num_records")
  q = _validate.check_sampling_prob(sampling_prob)
  kept = n if kept_max is None else _validate.check_int(kept_max, "kept_max", 0)
  if kept > n:
    raise ValueError(f"kept_max = {kept} exceeds num_records = {n}")
  m = _validate.check_int(num_models, "num_models")
  _validate.check_choice(privacy_unit, _PRIVACY_UNITS, "privacy_unit")
  if num_params is not None:
    num_params = _validate.check_int(num_params, "num_params", 0)
  if (privacy_unit != "example" or n < _PADDED_MIN_RECORDS
      or (num_params is not None and num_params < _PADDED_MIN_PARAMS)):
    return None
  k = sampling_lib.default_batch_capacity(max(kept, 1), q, m)
  return k if k * _PADDED_MAX_FRACTION_INV <= n else None


def _capacity(batch_capacity, cfg, sampler, path, keep, max_chunk, num_params
              ) -> int | None:
  """Resolves train_many's batch_capacity to None (full mask) or an int K in [1, N]."""
  n = int(keep.shape[1])
  example_level = all(getattr(c, "privacy_unit", "example") == "example"
                      for c in (sampler, path))
  if batch_capacity is None:
    return None
  if isinstance(batch_capacity, str):
    _validate.check_choice(batch_capacity, ("auto",), "batch_capacity")
    if not example_level:
      return None
    kept_max = int(np.max(np.sum(np.asarray(keep), axis=1)))
    m = min(int(keep.shape[0]), int(max_chunk) if max_chunk else _DEFAULT_MAX_CHUNK)
    return batch_layout(n, float(cfg.sampling_prob), kept_max, m, num_params=num_params)
  k = _validate.check_int(batch_capacity, "batch_capacity")
  if not example_level:
    raise ValueError("batch_capacity (the padded step) needs example-level sampling and "
                     "clipping; user-level DP-SGD clips each user's records together and "
                     "uses the full mask (batch_capacity=None or 'auto')")
  return min(k, n)


def _model_keys(key, m: int) -> jax.Array:
  """[M] per-model keys: `key` itself if it is already a batch of M keys, else split(key, M)."""
  key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
  typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
  single_ndim = 0 if typed else 1
  if not typed and (key.dtype != jnp.uint32 or key.shape[-1:] != (2,)):
    raise TypeError(f"key must be a jax.random key (or a batch of them), got {key.dtype}"
                    f"{list(key.shape)}")
  if key.ndim == single_ndim:
    return jax.random.split(key, m)
  if key.ndim == single_ndim + 1:
    if key.shape[0] != m:
      raise ValueError(f"got {key.shape[0]} model keys for M = {m} models")
    return key
  raise ValueError(f"key must be one key or a batch of M keys, got shape {key.shape}")


@functools.lru_cache(maxsize=16)
def _user_components(sampling_prob, ids_bytes, num_records, num_users, model):
  """The default user-level sampler and clipping path, memoised by their contents so
  that repeated calls with the same owners reuse one compiled program."""
  from dpjax.clipping import user as user_clipping  # pylint: disable=g-import-not-at-top
  ids = np.frombuffer(ids_bytes, np.int32, count=num_records)
  return (sampling_lib.UserPoissonSampler(sampling_prob, ids, num_users),
          user_clipping.user_level_path(model, ids, num_users))


def _check_units(cfg, sampler, path, ids, n) -> None:
  """Refuses a sampler or clipping path whose privacy unit is not cfg.privacy_unit, and
  user-level components whose grouping disagrees with the data or the config."""
  unit = cfg.privacy_unit
  for kind, comp in (("sampler", sampler), ("clipping", path)):
    got = getattr(comp, "privacy_unit", "example")
    if got == unit:
      continue
    if unit == "user":
      raise ValueError(
          f"cfg.privacy_unit = 'user' but the {kind} is {got}-level: that is not "
          "user-level DP (a user's records would be sampled or clipped one by one, so "
          "one user could move the noisy sum by k C for k records). Pass user_ids_N "
          "for the user-level defaults, or user-level components.")
    raise ValueError(
        f"cfg.privacy_unit = {unit!r} but the {kind} is {got}-level: the accountant "
        "would be told the wrong unit (q per record, n records). Use "
        "DpSgdConfig(privacy_unit='user', dataset_size=<number of users>).")
  if unit != "user":
    return
  for kind, comp in (("sampler", sampler), ("clipping", path)):
    comp_ids = getattr(comp, "user_ids_N", None)
    if comp_ids is None:
      continue
    comp_ids = np.asarray(comp_ids)
    if comp_ids.shape != (n,):
      raise ValueError(f"the {kind}'s user_ids_N has shape {comp_ids.shape}, but the data "
                       f"has {n} records (one id per record)")
    if int(getattr(comp, "num_users")) != int(cfg.dataset_size):
      raise ValueError(f"the {kind}'s num_users = {getattr(comp, 'num_users')} but "
                       f"cfg.dataset_size = {cfg.dataset_size}: under privacy_unit 'user' "
                       "dataset_size is the number of users")
    if ids is not None and not np.array_equal(comp_ids, ids):
      raise ValueError(f"the {kind}'s user_ids_N differ from the user_ids_N given")
    ids = comp_ids


def _components(cfg, model, sampler, clipping, privatizer, user_ids_N=None, n=None):
  """The three components with their defaults; warns for any the accountant does not model,
  refuses any whose privacy unit is not the config's."""
  ids = None
  if user_ids_N is not None:
    if cfg.privacy_unit != "user":
      raise ValueError("user_ids_N is given but cfg.privacy_unit = 'example': set "
                       "DpSgdConfig(privacy_unit='user', dataset_size=<number of users>) "
                       "for user-level DP")
    ids = sampling_lib.check_user_ids(user_ids_N, cfg.dataset_size, "user_ids_N",
                                      num_records=n)
  if cfg.privacy_unit == "user" and ids is None and (sampler is None or clipping is None):
    raise ValueError("cfg.privacy_unit = 'user' needs user_ids_N (the user of each record, "
                     "int[N]) or both a user-level sampler and clipping")
  if ids is not None and (sampler is None or clipping is None):
    default_sampler, default_path = _user_components(
        float(cfg.sampling_prob), np.ascontiguousarray(ids, np.int32).tobytes(), int(n),
        int(cfg.dataset_size), model)
    sampler = default_sampler if sampler is None else sampler
    clipping = default_path if clipping is None else clipping
  sampler = cfg.sampler() if sampler is None else sampler
  sampling_lib.check_sampler(sampler, cfg.sampling_prob)
  path = clipping_lib.path_for(model) if clipping is None else clipping_lib.as_path(clipping)
  _check_units(cfg, sampler, path, ids, n)
  privatizer = privatizer_lib.GaussianPrivatizer() if privatizer is None else privatizer
  privatizer_lib.check_privatizer(privatizer)
  privatizer_lib.check_matching_grid(path, privatizer)
  off = [f"{kind} {c!r}" for kind, c in (("sampler", sampler), ("clipping", path.name),
                                        ("privatizer", privatizer))
         if not getattr(c if kind != "clipping" else path, "accounted")]
  if off:
    warnings.warn("training with " + ", ".join(off) + ", which the accountant does NOT model: "
                  "DpSgdConfig.epsilon() is not a guarantee for this run.",
                  UnaccountedComponentWarning, stacklevel=3)
  return sampler, path, privatizer


def _check_sampler_delta(cfg, params_shape) -> None:
  """Warns when the delta prng.standard_normal's finite support adds is > 1e-3 cfg.delta.

  The extra delta is `accounting.sampler_delta(cfg.epsilon(), T d)`, d = the number
  of parameters (noise draws per step). cfg.epsilon() is computed only when a cheap
  bound does not settle it: eps <= rho + 2 sqrt(rho log(1/delta)), rho = T / (2
  sigma^2), the zCDP of T unsubsampled Gaussian steps (Bun & Steinke 2016; Poisson
  subsampling never raises Renyi divergence, by its joint quasi-convexity). A warning,
  not an error: the run is still (eps, delta + extra)-DP, as
  `accounting.privacy_statement(..., noise_draws_per_step=d)` reports.
  """
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  d = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params_shape))
  k = int(cfg.num_steps) * max(1, d)
  delta, sigma = float(cfg.delta), cfg.sigma
  eps_ok = accounting.max_epsilon_for_sampler_delta(delta, k)
  rho = int(cfg.num_steps) / (2.0 * sigma * sigma)
  if rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)) <= eps_ok:
    return
  eps = cfg.epsilon()
  if eps > eps_ok:
    extra = accounting.sampler_delta(eps, k)
    warnings.warn(f"the noise sampler's finite support adds {extra:.3g} to delta (eps = "
                  f"{eps:.4g}, T*d = {k} draws), more than 1e-3 * delta = {1e-3 * delta:.3g}: "
                  f"the guarantee is (eps, delta + {extra:.3g}), not (eps, delta) "
                  "(dpjax.accounting.sampler_delta).", UnaccountedComponentWarning,
                  stacklevel=4)


def train_many(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
               keep_MxN: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model, *,
               init_params: PyTree | None = None,
               observe_fn: Callable[[PyTree], jax.Array] | None = None,
               per_example_stats: bool = False,
               gradient_canary: PyTree | None = None,
               canary_keep_M: jax.typing.ArrayLike | None = None,
               gradient_canaries: PyTree | None = None,
               canary_keep_MxK: jax.typing.ArrayLike | None = None,
               sampler: sampling_lib.Sampler | None = None,
               clipping: clipping_lib.ClippingPath | Callable | None = None,
               privatizer: privatizer_lib.Privatizer | None = None,
               optimizer: optax.GradientTransformation | None = None,
               memory_budget_bytes: int = 2 * 2 ** 30,
               max_chunk: int | None = None,
               model_sharding: jax.sharding.Sharding | None = None,
               progress: bool = True,
               user_ids_N: jax.typing.ArrayLike | None = None,
               batch_capacity: int | str | None = "auto",
               ema_decay: float | None = None) -> TrainResult:
  """Trains M models with DP-SGD in one jitted program per memory-sized chunk.

  Args:
    key: a jax.random key (model i uses jax.random.split(key, M)[i]), or a batch
      of M keys [M] (model i uses key[i]).
    x_NxF: float32[N, ...] records (all models share the pool).
    y_N: labels [N] ({0, 1} for binary models, ints for multi-class).
    keep_MxN: bool[M, N]; model i's private dataset is {j : keep_MxN[i, j]}.
    cfg: the DP-SGD configuration (dataset_size = the nominal size of each model's
      dataset, which fixes B = q * n).
    model: a models.Model, or a flax.linen.Module (converted with
      `flax_model.from_flax(model, x_NxF.shape[1:])`, which also picks its clipping).
    init_params: optional unbatched params shared by all models (default: model.init
      with each model's own init key).
    observe_fn: optional f(privatized update pytree) -> array, evaluated each step
      inside the scan (the white-box adversary's view); outputs stacked to [M, T, ...].
    per_example_stats: also return per-record clip statistics [M, N]. Warning:
      these are exact functions of the private data, NOT covered by the epsilon
      of the trained parameters; they are for analysis (disparate impact, audits)
      and must not be released as if private.
    gradient_canary: optional pytree like params: a Nasr-style gradient canary, an
      extra record whose per-example gradient is this fixed vector (clipped to C,
      Poisson-sampled at rate q with its own bit, counted in the realised batch size).
    canary_keep_M: bool[M], whether the canary is in model i's dataset (required
      with gradient_canary).
    gradient_canaries: optional pytree like params whose every leaf has an extra
      leading axis K >= 1: K gradient canaries g^1..g^K (canary j is the slice
      [j] of every leaf). Each is an extra record with that fixed gradient:
      clipped to C, Poisson-sampled at rate q every step with its own bit
      (independent of the other canaries' and the records' bits; for K = 1 the
      bit of `gradient_canary`, so `gradient_canary=g, canary_keep_M=k` and
      `gradient_canaries=g[None], canary_keep_MxK=k[:, None]` train identical
      models), added to the clipped sum and counted in the realised batch size.
      Not combinable with gradient_canary.
    canary_keep_MxK: bool[M, K]: canary j is in model i's dataset iff
      canary_keep_MxK[i, j] (required with gradient_canaries).
    sampler: batch selection (`dpjax.sampling`); default `cfg.sampler()`, Poisson at q.
    clipping: a `clipping.ClippingPath` or a function with the clipped-sum contract;
      default `clipping.path_for(model)`.
    privatizer: the noise step (`dpjax.privatizer`); default GaussianPrivatizer(),
      noise sigma * C on the clipped sum, then divide by B.
    optimizer: optax transformation applied after the privatizer (default
      optax.sgd(cfg.learning_rate, momentum=cfg.momentum or None)). Pass the same
      object across calls to reuse the compiled program.
    memory_budget_bytes: rough cap on the working set; the model axis is chunked
      to stay under it (a tqdm bar over chunks).
    max_chunk: optional cap on models per chunk (default 4096; chunks are balanced
      to minimise padding).
    model_sharding: optional sharding of the leading model axis (see
      `dpjax.parallel`); each chunk is then a multiple of the device count.
    progress: show a progress bar when there is more than one chunk.
    user_ids_N: int[N], the user owning each record, ids in [0, cfg.dataset_size);
      only with cfg.privacy_unit "user", where the default sampler becomes
      `sampling.UserPoissonSampler` and the default clipping
      `clipping.user.user_level_path(model, ...)` (the stats' norms are then the
      users' norms). Gradient canaries stay one record each, sampled at rate q: a
      user with one record.
    batch_capacity: how a step's batch is laid out. None: the full-mask step,
      every record's clipped gradient computed and weighted by its 0/1 batch bit
      (cost proportional to N per step). An int K >= 1: the padded step, the
      sampled records gathered into buffers of K rows (K > N means N) and
      processed a buffer at a time until all are (cost proportional to K per
      step when the batch fits, which `sampling.default_batch_capacity` makes
      the usual case); no sampled record is ever dropped, so the accountant's
      analysis is unchanged. "auto" (default): `batch_layout(...)` decides.
      Both steps use the same batch bits, so they train the same models up to
      float summation order (tested). Example-level components only: user-level
      DP-SGD always uses the full mask.
    ema_decay: None (default), or d in [0, 1): also return the exponential moving
      average of the iterates (`TrainResult.ema_params`; De et al. 2022,
      https://arxiv.org/abs/2204.13650). It reads the parameters after each
      update and nothing else, so it is post-processing: the accountant's epsilon
      covers it, and `params` are the same with or without it.
  Returns:
    TrainResult(params [M, ...], observations [M, T, ...] or None, stats or None,
    finite bool[M], first_nonfinite_step int32[M], ema_params [M, ...] or None).
  Raises:
    ValueError on shape mismatches, non-finite data (features, labels, init_params,
    gradient_canary), labels outside the model's range, bad budgets, a sampler
    whose q is not the config's, a sampler or clipping whose privacy unit is not
    cfg.privacy_unit, bad user_ids_N (wrong length, non-integer, outside
    [0, dataset_size)); TypeError on components without the required members.
  Warns:
    UnaccountedComponentWarning when a component declares `accounted = False`;
    DivergenceWarning when some model ends with non-finite parameters.
  """
  return _train(noise_std_M=None, **locals())


def _train(*, key, x_NxF, y_N, keep_MxN, cfg, model, noise_std_M, init_params, observe_fn,
           per_example_stats, gradient_canary, canary_keep_M, sampler, clipping, privatizer,
           optimizer, memory_budget_bytes, max_chunk, model_sharding, progress,
           gradient_canaries=None, canary_keep_MxK=None, user_ids_N=None,
           batch_capacity="auto", ema_decay=None):
  """train_many's body, with an optional per-model noise std float32[M] (train_sweep)."""
  for name, value in (("key", key), ("x_NxF", x_NxF), ("y_N", y_N), ("keep_MxN", keep_MxN),
                      ("gradient_canary", gradient_canary), ("canary_keep_M", canary_keep_M),
                      ("gradient_canaries", gradient_canaries),
                      ("canary_keep_MxK", canary_keep_MxK), ("user_ids_N", user_ids_N)):
    if any(_validate.is_tracer(leaf) for leaf in jax.tree.leaves(value)):
      raise TypeError(f"{name} is a traced value: train_many compiles its own program "
                      "(vmap over models, scan over steps) and must be called from Python, "
                      "not under jax.jit, jax.vmap or jax.grad")
  for name, value in (("x_NxF", x_NxF), ("y_N", y_N), ("keep_MxN", keep_MxN)):
    dtype = getattr(value, "dtype", None)
    if dtype is None:
      dtype = np.asarray(value).dtype
    if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
      raise ValueError(f"{name} must be an array of numbers, got dtype {dtype}")
    if np.issubdtype(dtype, np.complexfloating):
      raise ValueError(f"{name} must hold real numbers, got dtype {dtype}")
  x = jnp.asarray(x_NxF, jnp.float32)
  y = jnp.asarray(y_N)
  keep = jnp.asarray(keep_MxN)
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  n = x.shape[0]
  if y.shape != (n,):
    raise ValueError(f"y_N must have shape ({n},), got {y.shape}")
  if keep.ndim != 2 or keep.shape[1] != n:
    raise ValueError(f"keep_MxN must have shape [M, {n}], got {keep.shape}")
  if keep.dtype != jnp.bool_:
    raise ValueError(f"keep_MxN must be boolean, got {keep.dtype}")
  if keep.shape[0] < 1:
    raise ValueError("keep_MxN must have at least one row (M >= 1)")
  if not isinstance(cfg, DpSgdConfig):
    raise ValueError(f"cfg must be a DpSgdConfig, got {type(cfg)}")
  if flax_model.is_flax_module(model):
    model = flax_model.from_flax(model, tuple(x.shape[1:]))
    x = x.reshape(x.shape[0], -1)   # the converted model's apply restores the shape
  if not isinstance(model, models_lib.Model):
    raise ValueError(f"model must be a models.Model or a flax.linen.Module, got "
                     f"{type(model)}")
  # Labels are checked as given, not as jnp.asarray narrowed them to int32 (which
  # wraps 2**32 to 0 and would let an invalid label train as a valid one).
  _check_records(x, y_N, model)
  if not (memory_budget_bytes > 0):
    raise ValueError(f"memory_budget_bytes must be > 0, got {memory_budget_bytes}")
  if max_chunk is not None:
    _validate.check_int(max_chunk, "max_chunk")
  if ema_decay is not None:
    ema_decay = _validate.check_probability(ema_decay, "ema_decay", open_high=True)
  m = keep.shape[0]
  params_shape = jax.eval_shape(model.init, jax.random.key(0))
  canaries, ck = _canaries(m, params_shape, gradient_canary, canary_keep_M, gradient_canaries,
                           canary_keep_MxK)
  has_canary = canaries is not None
  if init_params is not None:
    if jax.tree.structure(init_params) != jax.tree.structure(params_shape) or any(
        tuple(a.shape) != tuple(b.shape) for a, b in
        zip(jax.tree.leaves(init_params), jax.tree.leaves(params_shape))):
      raise ValueError("init_params must match the structure and shapes of model.init")
  if init_params is not None and not all(bool(jnp.all(jnp.isfinite(v)))
                                         for v in jax.tree.leaves(init_params)):
    raise ValueError("init_params must be finite (no NaN or inf)")
  sampler, path, privatizer = _components(cfg, model, sampler, clipping, privatizer,
                                          user_ids_N, n)
  if optimizer is None:
    optimizer = _default_optimizer(float(cfg.learning_rate), float(cfg.momentum))
  if noise_std_M is None:
    # cfg.sigma resolves (and validates) target_epsilon on the host, before tracing.
    std = np.full((m,), privatizer.noise_stddev(cfg.sigma, cfg.l2_clip_norm), np.float32)
  else:
    std = np.asarray(noise_std_M, np.float32)
  has_noise = bool(np.any(std > 0))
  if noise_std_M is None and has_noise and isinstance(privatizer,
                                                     privatizer_lib.GaussianPrivatizer):
    _check_sampler_delta(cfg, params_shape)
  capacity = _capacity(batch_capacity, cfg, sampler, path, keep, max_chunk,
                       sum(math.prod(l.shape) for l in jax.tree.leaves(params_shape)))
  fn = _compiled(_noise_free(cfg), model, observe_fn, bool(per_example_stats), has_canary,
                 path, sampler, privatizer, optimizer, init_params is not None, has_noise,
                 capacity, ema_decay)

  per = _bytes_per_model(x, cfg, per_example_stats, observe_fn, path, params_shape,
                         ck.shape[1], rows=capacity)
  chunk = max(1, int(memory_budget_bytes // per))
  chunk = min(chunk, int(max_chunk) if max_chunk is not None else _DEFAULT_MAX_CHUNK)
  chunk = min(chunk, m)
  chunk = -(-m // -(-m // chunk))      # balance: the same number of chunks, less padding
  if model_sharding is not None:
    ndev = len(model_sharding.device_set)
    chunk = -(-chunk // ndev) * ndev   # whole models per device (padding repeats models)
  num_chunks = -(-m // chunk)
  keys = _model_keys(key, m)
  canary = canaries
  outs = []
  it = range(num_chunks)
  if progress and num_chunks > 1:
    import tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm.tqdm(it, desc=f"DP-SGD {m} models", unit="chunk")
  for ci in it:
    lo, hi = ci * chunk, min(m, (ci + 1) * chunk)
    idx = np.arange(lo, lo + chunk) % m if hi - lo < chunk else np.arange(lo, hi)
    args = (keys[idx], keep[idx], ck[idx], jnp.asarray(std[idx]))
    if model_sharding is not None:
      args = tuple(jax.device_put(a, model_sharding) for a in args)
    out = fn(*args, init_params, canary, x, y)
    if hi - lo < chunk:
      out = jax.tree.map(lambda a: a[: hi - lo], out)
    outs.append(out)
  if len(outs) == 1:
    params, obs, stats, finite, first_bad, ema = outs[0]
  else:
    params, obs, stats, finite, first_bad, ema = jax.tree.map(
        lambda *a: jnp.concatenate(a, axis=0), *outs)
  bad = int(np.sum(~np.asarray(finite)))
  if bad:
    warnings.warn(f"{bad} of {m} models ended with non-finite parameters (NaN or inf): "
                  "their updates diverged (e.g. a learning rate too large for the model). "
                  "TrainResult.finite marks them and TrainResult.first_nonfinite_step "
                  "gives the step; exclude them from any score or audit.",
                  DivergenceWarning, stacklevel=3)
  return TrainResult(params, obs, stats, finite, first_bad, ema)


def _canaries(m, params_shape, gradient_canary, canary_keep_M, gradient_canaries,
              canary_keep_MxK):
  """(canaries with leaves [K, ...] or None, canary_keep bool[M, K]) from either form.

  The single `gradient_canary` / `canary_keep_M` is the case K = 1. Refuses a
  missing or mismatched partner, both forms at once, a structure or leaf shape
  unlike params (plus the leading K), K = 0, canaries larger than memory, and
  non-finite canaries, each by name.
  """
  if gradient_canary is not None and gradient_canaries is not None:
    raise ValueError("gradient_canary and gradient_canaries are exclusive (the single "
                     "canary is gradient_canaries with K = 1)")
  if gradient_canary is not None or canary_keep_M is not None:
    if gradient_canary is None:
      raise ValueError("canary_keep_M given without gradient_canary")
    if canary_keep_MxK is not None:
      raise ValueError("canary_keep_MxK given with gradient_canary (use canary_keep_M)")
    if canary_keep_M is None:
      raise ValueError("canary_keep_M (bool[M]) is required with gradient_canary")
    ck = np.asarray(canary_keep_M)
    if ck.shape != (m,) or ck.dtype != np.bool_:
      raise ValueError(f"canary_keep_M must be bool[{m}], got {ck.dtype}{list(ck.shape)}")
    _check_canary_leaves(gradient_canary, params_shape, "gradient_canary", batched=False)
    return (jax.tree.map(lambda v: jnp.asarray(v, jnp.float32)[None], gradient_canary),
            jnp.asarray(ck[:, None]))
  if gradient_canaries is None:
    if canary_keep_MxK is not None:
      raise ValueError("canary_keep_MxK given without gradient_canaries")
    return None, jnp.zeros((m, 0), bool)
  if canary_keep_MxK is None:
    raise ValueError("canary_keep_MxK (bool[M, K]) is required with gradient_canaries")
  k = _check_canary_leaves(gradient_canaries, params_shape, "gradient_canaries", batched=True)
  ck = np.asarray(canary_keep_MxK)
  if ck.shape != (m, k) or ck.dtype != np.bool_:
    raise ValueError(f"canary_keep_MxK must be bool[{m}, {k}] (models x canaries), got "
                     f"{ck.dtype}{list(ck.shape)}")
  return jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), gradient_canaries), jnp.asarray(ck)


def _check_canary_leaves(canaries, params_shape, name, *, batched) -> int:
  """Checks a canary pytree against params (leaves [K, ...] if batched); returns K."""
  if jax.tree.structure(canaries) != jax.tree.structure(params_shape):
    raise ValueError(f"{name} must have the structure of the model's params")
  leaves = jax.tree.leaves(canaries)
  for v in leaves:
    dtype = getattr(v, "dtype", None)
    dtype = np.asarray(v).dtype if dtype is None else dtype
    if not (np.issubdtype(dtype, np.number) or dtype == np.bool_) or np.iscomplexobj(
        np.zeros((), dtype)):
      raise ValueError(f"{name} must hold real numbers, got dtype {dtype}")
  shapes = [tuple(np.shape(v)) for v in leaves]
  want = [tuple(l.shape) for l in jax.tree.leaves(params_shape)]
  if batched:
    if any(len(s) != len(w) + 1 for s, w in zip(shapes, want)) or any(
        s[1:] != w for s, w in zip(shapes, want)) or len({s[0] for s in shapes}) != 1:
      raise ValueError(f"{name} leaves must have the params' shapes with one common leading "
                       f"axis K, got {shapes} for params {want}")
    k = shapes[0][0]
    if k < 1:
      raise ValueError(f"{name} must hold K >= 1 canaries, got K = {k}")
    _validate.check_size(k, f"{name} (K)", units=sum(math.prod(w) for w in want))
  else:
    if shapes != want:
      raise ValueError(f"{name} leaves must have the params' shapes {want}, got {shapes}")
    k = 1
  if not all(bool(np.all(np.isfinite(np.asarray(v, np.float32)))) for v in leaves):
    raise ValueError(f"{name} must be finite (no NaN or inf)")
  return k


def _first_bad_index(bad: np.ndarray) -> tuple[int, ...]:
  return tuple(int(i) for i in np.argwhere(bad)[0])


def _check_records(x: jax.Array, y: jax.Array, model: models_lib.Model) -> None:
  """Refuses records the clipping bound cannot cover: NaN / inf features or labels,
  and labels outside the model's range ({0, 1} for one output, class indices in
  [0, K) for K outputs). Finite features of any size (up to float32's ~3.4e38) are
  accepted: clipping makes them harmless (`dpjax.clipping.vmap.safe_norm`).

  Raises:
    ValueError: naming `x_NxF` or `y_N` and the first offending index.
  """
  bad_x = ~np.asarray(jnp.isfinite(x))
  if bad_x.any():
    idx = _first_bad_index(bad_x)
    raise ValueError(f"x_NxF must be finite (no NaN or inf): x_NxF{list(idx)} = "
                     f"{float(x[idx])}")
  y_np = np.asarray(y)   # as given (int64 stays int64: compared exactly in float64)
  if not (np.issubdtype(y_np.dtype, np.number) or y_np.dtype == np.bool_) or np.issubdtype(
      y_np.dtype, np.complexfloating):
    raise ValueError(f"y_N must be real numeric labels, got dtype {y_np.dtype}")
  yf = y_np.astype(np.float64)
  bad_y = ~np.isfinite(yf)
  if bad_y.any():
    i = _first_bad_index(bad_y)[0]
    raise ValueError(f"y_N must be finite (no NaN or inf): y_N[{i}] = {yf[i]}")
  k = int(model.num_outputs)
  if k == 1:
    bad_y, allowed = (yf != 0) & (yf != 1), "in {0, 1} (one output: logistic loss)"
  else:
    bad_y = (yf != np.floor(yf)) | (yf < 0) | (yf >= k)
    allowed = f"class indices in [0, {k}) (integers)"
  if bad_y.any():
    i = _first_bad_index(bad_y)[0]
    raise ValueError(f"y_N must be {allowed}, got y_N[{i}] = {y_np[i]!r}")


@functools.lru_cache(maxsize=64)
def _default_optimizer(learning_rate, momentum):
  return optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None)


def train_one(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
              keep_N: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model,
              *, canary_keep: bool | None = None, **kwargs) -> TrainResult:
  """Trains one model; equals model i of train_many when given that model's key.

  Args:
    key: the model's key (train_many's split(key, M)[i]).
    keep_N: bool[N] membership.
    canary_keep: with gradient_canary, whether the canary is in the dataset; with
      gradient_canaries, bool[K], which of the K canaries are.
    **kwargs: any other `train_many` keyword.
  Returns:
    TrainResult without the leading model axis.
  """
  if not _validate.is_tracer(keep_N):
    keep_N = _validate.check_binary(keep_N, "keep_N", ndim=1)
    if np.ndim(x_NxF) >= 1 and keep_N.shape != np.shape(x_NxF)[:1]:
      raise ValueError(f"keep_N must have shape [{np.shape(x_NxF)[0]}] (one entry per "
                       f"record), got {keep_N.shape}")
  keep = jnp.asarray(keep_N)
  if keep.ndim != 1:
    raise ValueError(f"keep_N must have rank 1, got shape {keep.shape}")
  if canary_keep is not None:
    if kwargs.get("gradient_canaries") is not None:
      kwargs["canary_keep_MxK"] = _validate.check_binary(canary_keep, "canary_keep",
                                                         ndim=1)[None]
    else:
      kwargs["canary_keep_M"] = jnp.asarray([_validate.check_bool(canary_keep,
                                                                  "canary_keep")])
  kwargs.setdefault("progress", False)
  out = train_many(key[None], x_NxF, y_N, keep[None], cfg, model, **kwargs)
  return jax.tree.map(lambda a: a[0], out)


def train_sweep(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                keep_MxN: jax.typing.ArrayLike, cfgs: Sequence[DpSgdConfig],
                config_index_M: jax.typing.ArrayLike, model: models_lib.Model,
                **kwargs) -> TrainResult:
  """Trains M models whose configs differ only in their noise, as ONE program.

  For an epsilon (or sigma) sweep: the noise std is an input of the compiled
  program, not part of it, so every config of the sweep shares one compile and one
  vmapped run. Model i is trained exactly as `train_many` trains model i with
  config cfgs[config_index_M[i]] and the same key (tested), so its guarantee is that
  config's `epsilon()`.

  Args:
    key: as in `train_many` (one key, or M keys).
    x_NxF, y_N, keep_MxN, model: as in `train_many`.
    cfgs: one or more DpSgdConfig equal in every field except noise_multiplier /
      target_epsilon (e.g. one per epsilon, plus sigma = 0 for the noiseless baseline).
    config_index_M: int[M], model i's config is cfgs[config_index_M[i]].
    **kwargs: any other `train_many` keyword.
  Returns:
    TrainResult with leaves [M, ...], as `train_many`.
  Raises:
    ValueError: if the configs differ in anything but their noise, or an index is
      out of range.
  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax import models
    >>> cfgs = [DpSgdConfig(dataset_size=8, sampling_prob=0.5, num_steps=3,
    ...                     noise_multiplier=s) for s in (0.0, 1.0, 4.0)]
    >>> out = train_sweep(jax.random.key(0), jnp.ones((8, 2)), jnp.ones((8,), int),
    ...                   jnp.ones((6, 8), bool), cfgs, [0, 0, 1, 1, 2, 2],
    ...                   models.logistic_regression(2), progress=False)
    >>> out.params["w"].shape
    (6, 2)
  """
  if isinstance(cfgs, DpSgdConfig) or not hasattr(cfgs, "__iter__"):
    raise TypeError(f"cfgs must be a non-empty sequence of DpSgdConfig, got {cfgs!r:.80}")
  cfgs = tuple(cfgs)
  if not _validate.is_tracer(keep_MxN):
    _validate.check_shape(keep_MxN, "keep_MxN", ndim=2)
  if not cfgs or not all(isinstance(c, DpSgdConfig) for c in cfgs):
    raise ValueError("cfgs must be a non-empty sequence of DpSgdConfig")
  base = _noise_free(cfgs[0])
  for j, c in enumerate(cfgs[1:], 1):
    if _noise_free(c) != base:
      diff = [f.name for f in dataclasses.fields(DpSgdConfig)
              if getattr(_noise_free(c), f.name) != getattr(base, f.name)]
      raise ValueError(f"cfgs[{j}] differs from cfgs[0] in {diff}; train_sweep configs may "
                       "differ only in noise_multiplier / target_epsilon")
  idx = np.asarray(config_index_M)
  m = np.shape(keep_MxN)[0] if np.ndim(keep_MxN) >= 1 else -1
  if idx.shape != (m,) or not np.issubdtype(idx.dtype, np.integer):
    raise ValueError(f"config_index_M must be int[{m}] (one config per model), got "
                     f"{idx.dtype}{list(idx.shape)}")
  if np.any((idx < 0) | (idx >= len(cfgs))):
    raise ValueError(f"config_index_M values must be in [0, {len(cfgs)})")
  # train_many's signature is the one list of options and defaults.
  args = inspect.signature(train_many).bind(key, x_NxF, y_N, keep_MxN, cfgs[0], model, **kwargs)
  args.apply_defaults()
  priv = args.arguments["privatizer"] or privatizer_lib.GaussianPrivatizer()
  stds = np.array([priv.noise_stddev(c.sigma, c.l2_clip_norm) for c in cfgs], np.float64)
  return _train(noise_std_M=stds[idx].astype(np.float32), **args.arguments)
