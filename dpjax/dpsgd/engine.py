"""Many DP-SGD models at once: `train_many`, `train_sweep`, `train_one`.

M models per jitted program (vmap over models, `lax.scan` over T steps), chunked to fit
memory. Model i's key splits into (init, sample, noise, fixed-record) keys and step t uses
`fold_in(key, t)`, so it equals `train_one` with that key whatever M or the chunking.
Shape letters: M models, N records, F features, K fixed-gradient records, T steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import flax_model
from dpjax import models as models_lib
from dpjax import privatizer as privatizer_lib
from dpjax import sampling as sampling_lib
from dpjax.dpsgd import components
from dpjax.dpsgd import config as config_lib
from dpjax.dpsgd import inputs
from dpjax.dpsgd import layout
from dpjax.dpsgd import step as step_lib

PyTree = Any
DpSgdConfig = config_lib.DpSgdConfig
PerformanceFlags = config_lib.PerformanceFlags
FixedGradients = inputs.FixedGradients

# Unrolled steps (the path's `scan_unroll`) apply only to chunks of at least this many models.
_UNROLL_MIN_MODELS = 256


class DivergenceWarning(UserWarning):
  """Some trained models ended with non-finite parameters (see `TrainResult.finite`)."""


class TrainResult(NamedTuple):
  """Output of train_many / train_one / train_sweep (train_one: no leading M axis).

  params [M, ...]; observations [M, T, ...] or None; stats None or {"times_sampled",
  "times_clipped", "norm_sum"} float32[M, N]; finite bool[M]; first_nonfinite_step int32[M]
  (-1 if none; exclude such models from any score); ema_params None or
  sum_t d^(T-t) (1 - d) p_t / (1 - d^T) for cfg.ema_decay = d.
  """
  params: PyTree
  observations: jax.Array | None
  stats: dict | None
  finite: jax.Array | None = None
  first_nonfinite_step: jax.Array | None = None
  ema_params: PyTree | None = None


def train_many(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
               keep_MxN: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model, *,
               init_params: PyTree | None = None,
               observe_fn: Callable[[PyTree], jax.Array] | None = None,
               per_example_stats: bool = False,
               fixed_gradients: FixedGradients | None = None,
               sampler: sampling_lib.Sampler | None = None,
               clipping: Any = None,
               privatizer: privatizer_lib.Privatizer | None = None,
               optimizer: optax.GradientTransformation | None = None,
               perf: PerformanceFlags = PerformanceFlags()) -> TrainResult:
  """Trains M models with DP-SGD in one jitted program per memory-sized chunk.

  Args:
    key: one key (model i uses jax.random.split(key, M)[i]) or M keys [M].
    keep_MxN: bool[M, N]; model i's private dataset is {j : keep_MxN[i, j]}.
    observe_fn: optional f(privatized update) per step, stacked to [M, T, ...].
    per_example_stats: also return per-record clip statistics [M, N]. Warning: exact
      functions of the private data, NOT covered by the epsilon; never release them.
    fixed_gradients: optional `FixedGradients`, clipped to C and sampled as records
      N .. N + K - 1 of the sampler (Poisson: their own bits at rate q).
    sampler, clipping, privatizer: default the accounted ones (`components.resolve`).
    optimizer: default optax.sgd(cfg.learning_rate, momentum=cfg.momentum or None).
  Raises ValueError/TypeError on invalid input or components; warns
  UnaccountedComponentWarning and DivergenceWarning.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax import models
    >>> x = jax.random.normal(jax.random.key(0), (40, 3))
    >>> y = (x[:, 0] > 0).astype(jnp.int32)
    >>> cfg = DpSgdConfig(dataset_size=40, sampling_prob=0.25, num_steps=20)
    >>> out = train_many(jax.random.key(1), x, y, jnp.ones((4, 40), bool), cfg,
    ...                  models.logistic_regression(3))
    >>> out.params["w"].shape
    (4, 3)
  """
  return _train(key, x_NxF, y_N, keep_MxN, cfg, model, None, init_params=init_params,
                observe_fn=observe_fn, per_example_stats=per_example_stats,
                fixed_gradients=fixed_gradients, sampler=sampler, clipping=clipping,
                privatizer=privatizer, optimizer=optimizer, perf=perf)


def _train(key, x_NxF, y_N, keep_MxN, cfg, model, noise_std_M, *, init_params=None,
           observe_fn=None, per_example_stats=False, fixed_gradients=None, sampler=None,
           clipping=None, privatizer=None, optimizer=None, perf=PerformanceFlags(),
           program_only=False):
  """train_many's body, with an optional per-model noise std float32[M] (train_sweep).

  program_only: return (the jitted program, its first chunk's arguments), untrained.
  """
  for name, value in (("key", key), ("x_NxF", x_NxF), ("y_N", y_N), ("keep_MxN", keep_MxN),
                      ("fixed_gradients", fixed_gradients)):
    if any(_validate.is_tracer(leaf) for leaf in jax.tree.leaves(value)):
      raise TypeError(f"{name} is a traced value: train_many compiles its own program "
                      "(vmap over models, scan over steps) and must be called from Python, "
                      "not under jax.jit, jax.vmap or jax.grad")
  for name, value in (("x_NxF", x_NxF), ("y_N", y_N), ("keep_MxN", keep_MxN)):
    inputs.check_numeric(name, value)
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
  _validate.check_instance(perf, PerformanceFlags, "perf")
  if flax_model.is_flax_module(model):
    model = flax_model.from_flax(model, tuple(x.shape[1:]))
    x = x.reshape(x.shape[0], -1)   # the converted model's apply restores the shape
  if not isinstance(model, models_lib.Model):
    raise ValueError(f"model must be a models.Model or a flax.linen.Module, got "
                     f"{type(model)}")
  # Labels are checked as given, not as narrowed to int32 (which wraps 2**32 to 0).
  inputs.check_records(x, y_N, model)
  per_example_stats = _validate.check_bool(per_example_stats, "per_example_stats")
  m = keep.shape[0]
  params_shape = jax.eval_shape(model.init, jax.random.key(0))
  fixed, fixed_keep = inputs.fixed_records(m, params_shape, fixed_gradients)
  if init_params is not None:
    if jax.tree.structure(init_params) != jax.tree.structure(params_shape) or any(
        tuple(a.shape) != tuple(b.shape) for a, b in
        zip(jax.tree.leaves(init_params), jax.tree.leaves(params_shape))):
      raise ValueError("init_params must match the structure and shapes of model.init")
    for v in jax.tree.leaves(init_params):
      inputs.check_numeric("init_params", v)
    if not all(bool(jnp.all(jnp.isfinite(v))) for v in jax.tree.leaves(init_params)):
      raise ValueError("init_params must be finite (no NaN or inf)")
  sampler, path, privatizer = components.resolve(cfg, model, sampler, clipping, privatizer, n)
  components.check_truncated(cfg, keep, fixed is not None)
  if optimizer is None:
    optimizer = _default_optimizer(float(cfg.learning_rate), float(cfg.momentum))
  if noise_std_M is None:
    std = np.full((m,), privatizer.noise_stddev(cfg.noise_multiplier, cfg.l2_clip_norm),
                  np.float32)
  else:
    std = np.asarray(noise_std_M, np.float32)
  has_noise = bool(np.any(std > 0))
  if noise_std_M is None and has_noise and isinstance(privatizer,
                                                     privatizer_lib.GaussianPrivatizer):
    components.check_sampler_delta(cfg, params_shape)
  capacity = layout.capacity(perf, cfg, sampler, path, keep,
                             sum(math.prod(l.shape) for l in jax.tree.leaves(params_shape)))
  if capacity is not None and cfg.max_batch_size is not None:
    capacity = min(capacity, int(cfg.max_batch_size))   # no buffer need exceed the cap
  fn = _compiled(config_lib.noise_free(cfg), model, observe_fn, per_example_stats,
                 fixed is not None, path, sampler, privatizer, optimizer,
                 init_params is not None, has_noise, capacity)

  per = layout.bytes_per_model(x, cfg, per_example_stats, observe_fn, path, params_shape,
                               fixed_keep.shape[1], rows=capacity)
  chunk = layout.chunk_size(perf, m, per)
  keys = model_keys(key, m)

  def chunk_args(lo, hi):
    if lo == 0 and hi == m == chunk:   # one chunk of every model: no gathers to dispatch
      args = (keys, keep, fixed_keep, jnp.asarray(std))
    else:
      idx = np.arange(lo, lo + chunk) % m if hi - lo < chunk else np.arange(lo, hi)
      args = (keys[idx], keep[idx], fixed_keep[idx], jnp.asarray(std[idx]))
    if perf.model_sharding is not None:
      args = tuple(jax.device_put(a, perf.model_sharding) for a in args)
    return args + (init_params, fixed, x, y)
  if program_only:
    return fn, chunk_args(0, min(m, chunk))
  num_chunks = -(-m // chunk)
  outs = []
  it = range(num_chunks)
  if perf.progress and num_chunks > 1:
    import tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm.tqdm(it, desc=f"DP-SGD {m} models", unit="chunk")
  for ci in it:
    lo, hi = ci * chunk, min(m, (ci + 1) * chunk)
    out = fn(*chunk_args(lo, hi))
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


@functools.lru_cache(maxsize=64)
def _compiled(cfg, model, observe_fn, per_example_stats, has_fixed, path, sampler,
              privatizer, optimizer, has_init, has_noise, capacity=None):
  def batched(key, keep, fixed_keep, noise_std, init_params, fixed, x, y):
    unroll = path.scan_unroll if key.shape[0] >= _UNROLL_MIN_MODELS else 1

    def one(key, keep, fixed_keep, noise_std, batched=True):
      return step_lib.train_single(
          key, keep, fixed_keep, noise_std if has_noise else 0.0, init_params,
          fixed if has_fixed else None, x, y, cfg=cfg, model=model, observe_fn=observe_fn,
          per_example_stats=per_example_stats, clipping=path, sampler=sampler,
          privatizer=privatizer, optimizer=optimizer, unroll=unroll, capacity=capacity,
          batched=batched)
    if key.shape[0] == 1 and capacity is not None:
      # One model on the padded step, unbatched: under a vmap of size 1, XLA:CPU copies the
      # buffers' operands for batched dots (about 20% of an MLP step at K = 4,224).
      return jax.tree.map(lambda a: a[None], one(key[0], keep[0], fixed_keep[0], noise_std[0],
                                                 batched=False))
    return jax.vmap(one)(key, keep, fixed_keep, noise_std)
  return jax.jit(batched)


@functools.lru_cache(maxsize=64)
def _default_optimizer(learning_rate, momentum):
  return optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None)


def model_keys(key, m: int) -> jax.Array:
  """[M] per-model keys: `key` itself if it is already a batch of M keys, else split(key, M)."""
  m = _validate.check_size(m, "m", bytes_per_unit=16)   # key data (2 x uint32), split twice
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


def train_one(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
              keep_N: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model,
              **kwargs) -> TrainResult:
  """Trains one model on keep_N bool[N]; equals model i of train_many given that model's key.
  **kwargs are `train_many`'s (`fixed_gradients.keep_MxK` may be bool[K])."""
  if not _validate.is_tracer(keep_N):
    keep_N = _validate.check_binary(keep_N, "keep_N", ndim=1)
    if np.ndim(x_NxF) >= 1 and keep_N.shape != np.shape(x_NxF)[:1]:
      raise ValueError(f"keep_N must have shape [{np.shape(x_NxF)[0]}] (one entry per "
                       f"record), got {keep_N.shape}")
  keep = jnp.asarray(keep_N)
  if keep.ndim != 1:
    raise ValueError(f"keep_N must have rank 1, got shape {keep.shape}")
  fixed = kwargs.get("fixed_gradients")
  if isinstance(fixed, FixedGradients) and np.ndim(fixed.keep_MxK) == 1:
    kwargs["fixed_gradients"] = fixed._replace(keep_MxK=np.asarray(fixed.keep_MxK)[None])
  kwargs.setdefault("perf", PerformanceFlags(progress=False))
  out = train_many(key[None], x_NxF, y_N, keep[None], cfg, model, **kwargs)
  return jax.tree.map(lambda a: a[0], out)


def program(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
            keep_MxN: jax.typing.ArrayLike, cfg: DpSgdConfig, model: models_lib.Model,
            **kwargs) -> tuple[Any, tuple]:
  """(fn, args): the jitted program `train_many` runs on its first chunk, and its arguments,
  untrained (`fn.lower(*args).compile()` for ahead-of-time analysis)."""
  return _train(key, x_NxF, y_N, keep_MxN, cfg, model, None, program_only=True, **kwargs)


def train_sweep(key: jax.Array, x_NxF: jax.typing.ArrayLike, y_N: jax.typing.ArrayLike,
                keep_MxN: jax.typing.ArrayLike, cfgs: Sequence[DpSgdConfig],
                config_index_M: jax.typing.ArrayLike, model: models_lib.Model,
                **kwargs) -> TrainResult:
  """Trains M models whose configs differ only in noise_multiplier, as ONE program: model i
  as `train_many` with cfgs[config_index_M[i]] (its guarantee: that config's `epsilon()`).

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax import models
    >>> cfgs = [DpSgdConfig(dataset_size=8, sampling_prob=0.5, num_steps=3,
    ...                     noise_multiplier=s) for s in (0.0, 1.0, 4.0)]
    >>> out = train_sweep(jax.random.key(0), jnp.ones((8, 2)), jnp.ones((8,), int),
    ...                   jnp.ones((6, 8), bool), cfgs, [0, 0, 1, 1, 2, 2],
    ...                   models.logistic_regression(2))
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
  base = config_lib.noise_free(cfgs[0])
  for j, c in enumerate(cfgs[1:], 1):
    if config_lib.noise_free(c) != base:
      diff = [f.name for f in dataclasses.fields(DpSgdConfig)
              if getattr(config_lib.noise_free(c), f.name) != getattr(base, f.name)]
      raise ValueError(f"cfgs[{j}] differs from cfgs[0] in {diff}; train_sweep configs may "
                       "differ only in noise_multiplier")
  idx = np.asarray(config_index_M)
  m = np.shape(keep_MxN)[0] if np.ndim(keep_MxN) >= 1 else -1
  if idx.shape != (m,) or not np.issubdtype(idx.dtype, np.integer):
    raise ValueError(f"config_index_M must be int[{m}] (one config per model), got "
                     f"{idx.dtype}{list(idx.shape)}")
  if np.any((idx < 0) | (idx >= len(cfgs))):
    raise ValueError(f"config_index_M values must be in [0, {len(cfgs)})")
  priv = kwargs.get("privatizer") or privatizer_lib.GaussianPrivatizer()
  stds = np.array([priv.noise_stddev(c.noise_multiplier, c.l2_clip_norm) for c in cfgs],
                  np.float64)
  return _train(key, x_NxF, y_N, keep_MxN, cfgs[0], model, stds[idx].astype(np.float32),
                **kwargs)

