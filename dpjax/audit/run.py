"""The audit pipeline: design -> `dpsgd.train_many` -> scores -> bounds.

`train` is the one door to the engine in `dpjax.audit`: a `Design` (base records, record canaries
with their bits, fixed-gradient canaries with theirs), the audited training's components and what
a white-box adversary observes of each privatized update. `canary_audit` (`experiments/audit.py`)
trains 2N models per claimed setting in stored chunks (chunk c of setting si from
fold_in(fold_in(key_train, si), c), verified by identity and checksum, so `run_chunks` resumes
and never reads a bad chunk), scores them black-box (-logit) and white-box (the exact per-step
likelihood ratio, Nasr et al. 2021, arXiv:2101.04535) and bounds them (`evaluate`).

Shape letters: M models, N records, C record canaries, T steps, K gradient canaries.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import _validate, accounting, dpsgd, metrics
from dpjax import clipping as clipping_lib
from dpjax import models as models_lib
from dpjax.audit import canary, leaf, parametric, stats, store, thresholds, variants

THREAT_MODELS = ("black_box", "white_box", "both")
# With K > 1 canaries per run: the fixed-threshold test's share of alpha.
FIXED_ALPHA_SHARE = 0.8
# Where the K > 1 gradient canaries live (`CanaryAuditSpec.canary_layout`).
CANARY_LAYOUTS = ("parameter_leaf", "fixed_gradients")
# Points of each recorded ROC curve.
_ROC_POINTS = 100
# Models per compiled program when a stored chunk is trained: per-model results do not
# depend on it (keys are per model); XLA:CPU runs the audit step faster at 256 than at 2,000.
_CHUNK = 256
# train_many keywords an audit's design and observation set.
_DESIGNED = ("keep_MxN", "fixed_gradients", "observe_fn", "init_params", "per_example_stats")


class Design(NamedTuple):
  """What the audited runs train on: records x_NxF, y_N (canaries included), keep_MxN bool[M, N],
  and optional `dpsgd.FixedGradients` (gradient canaries with their bits).
  """
  x_NxF: Any
  y_N: Any
  keep_MxN: Any
  fixed_gradients: Optional[dpsgd.FixedGradients] = None


def canary_design(x_NxF, y_N, num_runs: int, *, records=None, gradients=None) -> Design:
  """M runs on N base records (every run holds them all) plus canaries with their bits.

  records: (x_CxF, y_C, in_MxC), C record canaries appended (labels cast to y_N's dtype);
  gradients: (gradients_K, in_MxK), a pytree like the parameters with leaves [K, ...].

  Examples:
    >>> d = canary_design(np.zeros((3, 2)), np.zeros(3, np.int32), 2,
    ...                   records=(np.ones((1, 2)), [1], [[True], [False]]))
    >>> d.x_NxF.shape, d.keep_MxN.tolist()
    ((4, 2), [[True, True, True, True], [True, True, True, False]])
  """
  m = _validate.check_size(num_runs, "num_runs", bytes_per_unit=64)   # per-run masks and bits
  x, y = jnp.asarray(x_NxF), jnp.asarray(y_N)
  keep = np.ones((m, x.shape[0]), bool)
  for value, name, size in ((records, "records", 3), (gradients, "gradients", 2)):
    if value is not None and not (isinstance(value, tuple) and len(value) == size):
      raise TypeError(f"{name} must be a tuple of {size} (see the docstring), got {value!r}")
  if records is not None:
    x_c, y_c, in_c = records
    in_c = np.asarray(_validate.check_binary(in_c, "records[2]", ndim=2), bool)
    if in_c.shape != (m, np.shape(x_c)[0]):
      raise ValueError(f"records[2] must be bool[num_runs, C] = bool[{m}, "
                       f"{np.shape(x_c)[0]}], got shape {in_c.shape}")
    x = jnp.concatenate([x, jnp.asarray(x_c, x.dtype)], 0)
    y = jnp.concatenate([y, jnp.asarray(np.asarray(y_c).reshape(-1), y.dtype)], 0)
    keep = np.concatenate([keep, in_c], axis=1)
  fixed = None
  if gradients is not None:
    fixed = dpsgd.FixedGradients(gradients[0], jnp.asarray(gradients[1]))
  return Design(x, y, keep, fixed)


def train(key, design: Design, cfg, model, *, observe_fn=None, init_params=None,
          components: Optional[dict] = None, quiet: bool = False) -> dpsgd.TrainResult:
  """Trains the design's M runs with `dpsgd.train_many` (run m: split(key, M)[m]).

  observe_fn: f(privatized update) -> array, the white-box view; components: `train_many`'s
  sampler, clipping, privatizer, optimizer, perf (a replacement is audited against the claim);
  quiet silences the engine's warnings. Raises ValueError on a keyword the design sets or a
  run with non-finite parameters (not evidence about the mechanism).
  """
  _validate.check_instance(design, Design, "design")
  components = dict(components or {})
  for name in _DESIGNED:
    if name in components:
      raise ValueError(f"{name} is set by the audit (its design and what it observes)")
  with warnings.catch_warnings():
    if quiet:
      warnings.simplefilter("ignore")
    out = dpsgd.train_many(key, design.x_NxF, design.y_N, jnp.asarray(design.keep_MxN), cfg,
                           model, init_params=init_params, observe_fn=observe_fn,
                           fixed_gradients=design.fixed_gradients, **components)
  finite = np.asarray(out.finite)
  if not finite.all():
    raise ValueError(f"{int((~finite).sum())} of {finite.size} audited runs diverged "
                     "(non-finite parameters): no eps lower bound is computed from them; "
                     "lower the learning rate")
  return out


def audited_training(spec, setting: "Setting", dataset_size: int, model) -> variants.Variant:
  """The training `spec.variant` of the claim (q, sigma, T, delta); its warning silenced."""
  _validate.check_instance(setting, Setting, "setting")
  claimed = dpsgd.DpSgdConfig(dataset_size=_validate.check_int(dataset_size, "dataset_size"),
                              sampling_prob=spec.sampling_prob, num_steps=spec.num_steps,
                              noise_multiplier=setting.sigma, delta=spec.delta)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return variants.variant(spec.variant, claimed, model)


# The canary audit of DP-SGD (`experiments/audit.py`).


@dataclasses.dataclass(frozen=True)
class Setting:
  """One claimed configuration: a name, the claimed eps (inf: no noise) and its sigma."""
  name: str
  claimed_epsilon: float
  sigma: float

  def __post_init__(self):
    _validate.check_instance(self.name, str, "name")
    eps = _validate.check_epsilon(self.claimed_epsilon, "claimed_epsilon", allow_inf=True)
    sigma = _validate.check_nonnegative(self.sigma, "sigma")
    if (sigma == 0) != math.isinf(eps):
      raise ValueError(f"sigma = 0 exactly when claimed_epsilon = inf, got sigma = {sigma} "
                       f"and claimed_epsilon = {eps}")
    object.__setattr__(self, "claimed_epsilon", eps)
    object.__setattr__(self, "sigma", sigma)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CanaryAuditSpec:
  """What the audit trains and how it bounds (everything but the data and the key).

  trials: N models per side, even; canaries_per_run: K; canary_in_fraction: with K > 1, the share
  of runs each canary is IN; chunk_models: a multiple of 4; observation_budget: with K > 1, most
  white-box observations (M x T x K) at once; design_seed: of `canary.canaries_design`;
  canary_layout: with K > 1, "parameter_leaf" (`leaf_canary_training`, O(K) per step) or
  "fixed_gradients" (C e_j on the data's last K unused features, sampled by the audited
  sampler as extra records; O(K D) per step).
  """
  trials: int
  sampling_prob: float
  num_steps: int
  delta: float
  confidence: float = 0.95
  variant: str = "correct"
  threat_model: str = "both"
  canaries_per_run: int = 1
  canary_in_fraction: float = 0.25
  chunk_models: int = 2000
  observation_budget: int = 2 ** 25
  design_seed: int = 0
  canary_layout: str = "parameter_leaf"

  def __post_init__(self):
    v = _validate
    trials = v.check_int(self.trials, "trials", 2)
    if trials % 2:
      raise ValueError(f"trials must be even (half of each side trains the held-out "
                       f"threshold), got {trials}")
    checked = dict(
        trials=trials, sampling_prob=v.check_sampling_prob(self.sampling_prob),
        num_steps=v.check_int(self.num_steps, "num_steps"), delta=v.check_delta(self.delta),
        confidence=v.check_confidence(self.confidence),
        variant=v.check_choice(self.variant, variants.VARIANTS, "variant"),
        threat_model=v.check_choice(self.threat_model, THREAT_MODELS, "threat_model"),
        canaries_per_run=v.check_int(self.canaries_per_run, "canaries_per_run"),
        canary_in_fraction=v.check_probability(self.canary_in_fraction, "canary_in_fraction",
                                               open_low=True, open_high=True),
        chunk_models=v.check_int(self.chunk_models, "chunk_models", 4),
        observation_budget=v.check_int(self.observation_budget, "observation_budget"),
        design_seed=v.check_int(self.design_seed, "design_seed", 0),
        canary_layout=v.check_choice(self.canary_layout, CANARY_LAYOUTS, "canary_layout"))
    if checked["chunk_models"] % 4:
      raise ValueError(f"chunk_models must be a multiple of 4, got {checked['chunk_models']}")
    for k, val in checked.items():
      object.__setattr__(self, k, val)

  @property
  def models_per_setting(self) -> int:
    return 2 * self.trials

  @property
  def models_per_chunk(self) -> int:
    """chunk_models, fewer when K > 1 so that M x T x K observations fit observation_budget."""
    k = self.canaries_per_run
    if k == 1:
      return self.chunk_models
    fit = max(4, (self.observation_budget // (self.num_steps * k)) // 4 * 4)
    return min(self.chunk_models, fit)


def settings(epsilons: Sequence[float], sampling_prob: float, num_steps: int, delta: float,
             no_noise: bool) -> list[Setting]:
  """A Setting per claimed eps (sigma by RDP `calibrate_noise`), plus sigma = 0 when no_noise."""
  epsilons = [_validate.check_epsilon(e, "epsilons")
              for e in np.atleast_1d(np.asarray(epsilons, dtype=object)).ravel()]
  no_noise = _validate.check_bool(no_noise, "no_noise")
  out = []
  for i, e in enumerate(epsilons):
    try:
      s = accounting.calibrate_noise(float(e), sampling_prob, num_steps, delta)
    except ValueError as err:    # an unreachable claim: say which of `epsilons` it is
      if "target_epsilon" not in str(err):
        raise
      raise ValueError(f"epsilons[{i}] = {e!r}: {err}") from err
    out.append(Setting(f"eps{float(e):g}", float(e), float(s)))
  if no_noise:
    out.append(Setting("no_noise", math.inf, 0.0))
  return out


def _check_spec(spec, setting_list=None):
  _validate.check_instance(spec, CanaryAuditSpec, "spec")
  if setting_list is not None:
    if isinstance(setting_list, (str, bytes)) or not isinstance(setting_list, Sequence):
      raise TypeError(f"setting_list must be a sequence of Setting, got {setting_list!r}")
    for st in setting_list:
      _validate.check_instance(st, Setting, "setting_list")


def chunk_names(spec: CanaryAuditSpec, setting_list: Sequence[Setting]) -> dict:
  """{(setting index, chunk index): chunk name} and the chunks' model ranges."""
  _check_spec(spec, setting_list)
  m_total = spec.models_per_setting
  per = spec.models_per_chunk
  bounds = [(lo, min(m_total, lo + per)) for lo in range(0, m_total, per)]
  names = {(si, c): f"{st.name}_c{c:04d}" for si, st in enumerate(setting_list)
           for c in range(len(bounds))}
  return names, bounds


def chunk_key(key_train, si: int, c: int):
  """The key chunk c of setting si is trained from."""
  si = _validate.check_int(si, "si", 0, 2**32 - 1)   # fold_in takes a uint32
  c = _validate.check_int(c, "c", 0, 2**32 - 1)
  return jax.random.fold_in(jax.random.fold_in(key_train, si), c)


def chunk_identities(key_train, spec: CanaryAuditSpec, setting_list: Sequence[Setting]) -> dict:
  """{chunk name: identity (setting, chunk, models, key)}, stored with it, verified on read."""
  names, bounds = chunk_names(spec, setting_list)
  # K > 1: the layout too (the two layouts' chunks are equal in law, not bit for bit).
  layout = {} if spec.canaries_per_run == 1 else {"canary_layout": spec.canary_layout}
  return {n: {"setting": dataclasses.asdict(setting_list[si]), "chunk": c,
              "models": list(bounds[c]),
              "key": np.asarray(jax.random.key_data(chunk_key(key_train, si, c))).tolist(),
              **layout}
          for (si, c), n in names.items()}


def run_chunks(key_train, spec: CanaryAuditSpec, setting_list: Sequence[Setting], data,
               model, chunks: store.ChunkStore, *, progress: bool = True,
               max_new_chunks: int | None = None) -> tuple[int, bool]:
  """Trains every chunk the store lacks; returns (chunks trained, all complete).

  data: `canaries.audit_data(...)` with spec.canaries_per_run unused features; model: a logistic
  regression on its features; max_new_chunks: stop (incomplete) after training this many.
  """
  _validate.check_instance(chunks, store.ChunkStore, "chunks")
  names, bounds = chunk_names(spec, setting_list)
  ids = chunk_identities(key_train, spec, setting_list)
  missing = set(chunks.missing(list(names.values()), ids))
  todo = [k for k, n in names.items() if n in missing]
  n_records = int(data.x_NxD.shape[0])
  trained = 0
  bar = tqdm(total=len(names), initial=len(names) - len(todo),
             desc=f"audit ({spec.variant}, {spec.models_per_setting} models per setting, "
                  f"K = {spec.canaries_per_run} gradient canaries per run)",
             unit="chunk", disable=not progress)
  for si, c in todo:
    if max_new_chunks is not None and trained >= max_new_chunks:
      break
    st = setting_list[si]
    var = audited_training(spec, st, n_records, model)
    lo, hi = bounds[c]
    r, s, bb, wb = train_chunk(chunk_key(key_train, si, c), spec, st, data, var, model, lo, hi)
    chunks.save(names[(si, c)], identity=ids[names[(si, c)]], record_in=r, gradient_in=s,
                black_box=bb, white_box=wb)
    trained += 1
    bar.update(1)
  bar.close()
  return trained, all(n in chunks for n in names.values())


def load_setting(key_train, spec: CanaryAuditSpec, setting_list: Sequence[Setting],
                 chunks: store.ChunkStore, si: int):
  """(record_in, gradient_in, black_box, white_box) of setting si over 2N models (K columns when
  K > 1), each chunk verified against its identity (else `store.StoreError`).
  """
  _validate.check_instance(chunks, store.ChunkStore, "chunks")
  names, bounds = chunk_names(spec, setting_list)
  si = _validate.check_int(si, "si", 0, len(setting_list) - 1)
  ids = chunk_identities(key_train, spec, setting_list)
  parts = [chunks.load(names[(si, c)], ids[names[(si, c)]]) for c in range(len(bounds))]
  return tuple(np.concatenate([p[k] for p in parts])
               for k in ("record_in", "gradient_in", "black_box", "white_box"))


def canary_audit(key_train, spec: CanaryAuditSpec, setting_list: Sequence[Setting], data,
                 model, chunks: store.ChunkStore, *, progress: bool = True,
                 max_new_chunks: int | None = None) -> dict:
  """The canary audit end to end: trains missing chunks, then bounds each setting.

  Returns {"rows": `evaluate` rows, "white_box_roc": {noisy setting: `roc_record`},
  "chunks_trained", "complete"}; rows and ROCs are empty while incomplete.
  """
  trained, complete = run_chunks(key_train, spec, setting_list, data, model, chunks,
                                 progress=progress, max_new_chunks=max_new_chunks)
  rows, roc = [], {}
  for si, st in enumerate(setting_list if complete else ()):
    r, s, bb, wb = load_setting(key_train, spec, setting_list, chunks, si)
    rows.append(evaluate(spec, st, r, s, bb, wb))
    if st.sigma > 0:
      roc[st.name] = roc_record(spec, st, wb[s], wb[~s])
  return {"rows": rows, "white_box_roc": roc, "chunks_trained": trained, "complete": complete}


def train_chunk(key, spec: CanaryAuditSpec, setting: Setting, data, var, model, lo: int, hi: int):
  """Trains models lo..hi-1 of the design; returns (r, s, black-box, white-box scores).

  K = 1: `canary.balanced_design` bits, one fixed-gradient canary C e_D, white-box
  float64[m]; K > 1: s bool[m, K] of `canary.canaries_design`, white-box float64[m, K]
  (`white_box_llr_scores`), the canaries in spec.canary_layout (`leaf_canary_training`
  or fixed gradients on the data's last K features).
  """
  _check_spec(spec)
  _validate.check_instance(setting, Setting, "setting")
  k = spec.canaries_per_run
  m_total = spec.models_per_setting
  lo = _validate.check_int(lo, "lo", 0, m_total - 1)
  hi = _validate.check_int(hi, "hi", lo + 1, m_total)
  if k == 1:
    r_all, s_all = canary.balanced_design(m_total)
  else:
    r_all, s_all = canary.canaries_design(m_total, k, spec.canary_in_fraction, spec.design_seed)
  r, s = r_all[lo:hi], s_all[lo:hi]
  c, b = var.config.l2_clip_norm, var.config.expected_batch_size
  if k > 1 and spec.canary_layout == "parameter_leaf":
    out = leaf_canary_training(key, data, var, model, r, s, sampling_prob=spec.sampling_prob,
                               noise_multiplier=setting.sigma)
    bb = canary.black_box_scores(np.asarray(out.params["model"]["w"]),
                                 np.asarray(data.x_NxD[data.canary_index, :data.num_features - k]))
    return r, s, bb, np.asarray(out.params["canary"], np.float64)
  keep = np.ones((hi - lo, data.x_NxD.shape[0]), bool)
  keep[:, data.canary_index] = r
  design = Design(data.x_NxD, data.y_N, keep, dpsgd.FixedGradients(
      canary.gradient_canaries(data.num_features, k, c), jnp.asarray(s)[:, None] if k == 1
      else jnp.asarray(s)))
  out = train(key, design, var.config, model, quiet=True,
              observe_fn=(canary.observe_last_coordinate() if k == 1 else
                          canary.observe_last_coordinates(k)),
              components=dict(var.components, perf=dpsgd.PerformanceFlags(
                  max_chunk=min(hi - lo, _CHUNK), progress=False)))
  bb = canary.black_box_scores(np.asarray(out.params["w"]),
                               np.asarray(data.x_NxD[data.canary_index]))
  if k == 1:
    return r, s, bb, canary.white_box_llr(
        out.observations[:, :, None], expected_batch_size=b, l2_clip_norm=c,
        sampling_prob=spec.sampling_prob, noise_multiplier=setting.sigma)[:, 0]
  wb = _llr_scores(out.observations, b / c, sampling_prob=float(spec.sampling_prob),
                   noise_multiplier=float(setting.sigma))
  return r, s, bb, np.asarray(wb, np.float64)


def leaf_canary_training(key, data, var, model, record_in_M, canary_in_MxK, *,
                         sampling_prob: float, noise_multiplier: float) -> dpsgd.TrainResult:
  """M runs of `var` with the record canary and K Dirac gradient canaries in a parameter leaf,
  each canary's claimed likelihood ratio summed inside the training scan.

  Records: data's first D - K features (the last K, all zero, dropped with their weights),
  the record canary kept iff record_in_M[m], then K canary records (zero features, label 0,
  kept iff canary_in_MxK[m, k]) sampled like every record; a sampled IN canary adds C e_k to
  the leaf {"canary": float32[K]} that apply never reads (`leaf.canary_leaf_path`, shared with
  `dpjax.audit.per_step_run`). Noise is var's on the whole tree, so the leaf coordinate of
  update t is o_tk = b_tk + sigma z_tk in units of C / B, as in the fixed-gradient layout.
  The optimizer is the engine's default on params["model"]; on the leaf its update is
  `canary.step_llr(o_tk)` under the claim (no noise: 1 if o_tk > 1/2), post-processing of
  the release, so the final leaf holds each canary's white-box score with no [M, T, K]
  observations. Full-mask step; O(K) work per step for the canaries.

  Args:
    key: the training key (run m uses split(key, M)[m]).
    data: `canaries.audit_data(..., unused_features=K)`.
    var: the audited training (`variants.variant`) of a logistic regression on data.
    model: `models.logistic_regression(data.num_features)` (its l2 is kept).
    record_in_M: bool[M]; canary_in_MxK: bool[M, K], K >= 1.
    sampling_prob, noise_multiplier: the claimed q and sigma of the score.
  Returns:
    `dpsgd.TrainResult`: params {"model": {"w": [M, D - K]}, "canary": [M, K] float32,
    the summed step statistics}, no observations.
  """
  models_lib.check_model(model)
  if model.kind != "logistic_regression":
    raise ValueError(f"model must be the audit's models.logistic_regression, got kind "
                     f"{model.kind!r}")
  q = _validate.check_sampling_prob(sampling_prob)
  sigma = _validate.check_nonnegative(noise_multiplier, "noise_multiplier")
  g = np.asarray(_validate.check_binary(canary_in_MxK, "canary_in_MxK", ndim=2), bool)
  m, k = g.shape
  r = np.asarray(_validate.check_binary(record_in_M, "record_in_M", shape=(m,)), bool)
  n, d = int(data.x_NxD.shape[0]), int(data.num_features)
  if k >= d:
    raise ValueError(f"canary_in_MxK has K = {k} canaries, but data has only {d} features "
                     "(its last K, unused, are dropped)")
  x_all = jnp.asarray(data.x_NxD)
  if bool(jnp.any(x_all[:, d - k:] != 0)):
    raise ValueError(f"data's last K = {k} features must be unused (all zero)")
  keep = np.ones((m, n + k), bool)
  keep[:, data.canary_index] = r
  keep[:, n:] = g
  x = jnp.concatenate([x_all[:, :d - k], jnp.zeros((k, d - k), x_all.dtype)])
  y_n = jnp.asarray(data.y_N)
  y = jnp.concatenate([y_n, jnp.zeros((k,), y_n.dtype)])
  used = models_lib.logistic_regression(d - k, model.l2)
  comps = dict(var.components)
  path = comps.pop("clipping", None)
  path = clipping_lib.path_for(used) if path is None else clipping_lib.as_path(path)
  cfg = var.config
  opt = leaf.llr_accumulating_sgd(float(cfg.learning_rate), float(cfg.momentum),
                              float(cfg.expected_batch_size / cfg.l2_clip_norm), q, sigma)
  return train(key, Design(x, y, keep), cfg, models_lib.with_canary_leaf(used, k), quiet=True,
               components=dict(comps, optimizer=opt, clipping=leaf.canary_leaf_path(path, k),
                               perf=dpsgd.PerformanceFlags(max_chunk=m, progress=False,
                                                           batch_capacity=None)))


@_validate.names_extreme_arguments
def white_box_llr_scores(obs_MxTxK, scale, *, sampling_prob, noise_multiplier):
  """float32[M, K]: `canary.white_box_scores` of each canary's coordinate, in XLA.

  o = obs B / C (scale = B / C > 0); score = sum_t step_llr(o_t) (sigma > 0) or #{t: o_t > 1/2}
  (no noise). float32; matches the float64 `canary.white_box_scores` to 1e-4 relative.
  """
  if not _validate.is_tracer(obs_MxTxK):
    obs_MxTxK = _validate.check_array(obs_MxTxK, "obs_MxTxK", np.float32, ndim=3, min_size=1)
  return _llr_scores(obs_MxTxK, _validate.check_positive(scale, "scale"),
                     sampling_prob=_validate.check_sampling_prob(sampling_prob),
                     noise_multiplier=_validate.check_nonnegative(noise_multiplier,
                                                                  "noise_multiplier"))


@functools.partial(jax.jit, static_argnames=("sampling_prob", "noise_multiplier"))
def _llr_scores(obs_MxTxK, scale, *, sampling_prob, noise_multiplier):
  o = obs_MxTxK * scale
  if noise_multiplier == 0:
    return jnp.sum((o > 0.5).astype(jnp.float32), axis=1)
  x = (2.0 * o - 1.0) / (2.0 * noise_multiplier * noise_multiplier)
  if sampling_prob < 1.0:
    x = jnp.logaddexp(math.log1p(-sampling_prob), math.log(sampling_prob) + x)
  return jnp.sum(x, axis=1)


def claimed_roc(spec: CanaryAuditSpec, setting: Setting):
  """(thresholds, FPR, FNR) of the claimed mechanism's likelihood-ratio tests."""
  _check_spec(spec)
  _validate.check_instance(setting, Setting, "setting")
  return _claimed_roc(spec.sampling_prob, setting.sigma, spec.num_steps)


@functools.lru_cache(maxsize=16)
def _claimed_roc(q: float, sigma: float, t: int):
  """claimed_roc, cached (evaluate and roc_record both read it), its arrays read-only."""
  out = canary.llr_distribution(q, sigma, t).roc()
  for a in out:
    a.setflags(write=False)
  return out


def evaluate(spec: CanaryAuditSpec, st: Setting, r, s, bb, wb) -> dict:
  """One row of plain floats for setting st from `load_setting`'s arrays: claimed and PLD eps, each
  adversary's eps_lower with bootstrap sd and counts, ceilings, best certifiable bounds, GDP
  estimates and the white-box fractions of the best and exact eps.
  """
  _check_spec(spec)
  _validate.check_instance(st, Setting, "st")
  trials, half, delta, conf = spec.trials, spec.trials // 2, spec.delta, spec.confidence
  no_noise = st.sigma == 0
  multi = spec.canaries_per_run > 1
  if multi:
    # All (run, canary) pairs are trials; alpha split 4:1 fixed : held-out (union bound).
    n_in, n_out = int(np.sum(s)), int(np.sum(~s))
    conf_fixed = 1.0 - FIXED_ALPHA_SHARE * (1.0 - conf)
    conf_split = 1.0 - (1.0 - FIXED_ALPHA_SHARE) * (1.0 - conf)
  else:
    n_in = n_out = trials
    conf_fixed = conf_split = thresholds.bonferroni_confidence(conf, 2)
  row = {"setting": st.name, "epsilon": st.claimed_epsilon, "sigma": st.sigma,
         "epsilon_pld": (accounting.dpsgd_epsilon(st.sigma, spec.sampling_prob, spec.num_steps,
                                                  delta, accountant="pld")
                         if not no_noise else math.inf),
         "trials": trials, "variant": spec.variant,
         "ceiling": stats.perfect_attack_ceiling(trials, delta, conf),
         "ceiling_black_box": stats.perfect_attack_ceiling(half, delta, conf),
         "ceiling_white_box": float(stats.epsilon_lower_bound(0, n_out, 0, n_in, delta,
                                                              conf_fixed)),
         "canaries_per_run": spec.canaries_per_run,
         "white_box_trials_in": n_in, "white_box_trials_out": n_out}
  if no_noise:
    # Without noise the canary's steps show as o_t = 1 exactly: "any step > 1/2".
    threshold_wb = 0.5
    row["best_certifiable"] = row["ceiling_white_box"]
    row["best_certifiable_black_box"] = row["ceiling_black_box"]
  else:
    thr, fpr, fnr = claimed_roc(spec, st)
    best = thresholds.best_certifiable(fpr, fnr, n_out, trials_in=n_in, delta=delta,
                                       confidence=conf_fixed, thresholds_J=thr)
    threshold_wb, row["best_certifiable"] = best.threshold, best.epsilon
    row["best_certifiable_black_box"] = thresholds.best_certifiable(
        fpr, fnr, half, delta=delta, confidence=conf).epsilon
  row["epsilon_lower_black_box"] = row["epsilon_lower_white_box"] = None
  row["gdp_estimate_black_box"] = row["gdp_estimate_white_box"] = None
  row["white_box_fraction_of_best"] = row["white_box_fraction_of_exact"] = None
  if spec.threat_model in ("black_box", "both"):
    a = thresholds.SplitThreshold(both_signs=True).bound(bb[r], bb[~r], delta=delta,
                                                         confidence=conf)
    row["epsilon_lower_black_box"] = a.epsilon_lower
    row["black_box_counts"] = a.counts()
    row["epsilon_lower_black_box_sd"] = thresholds.bootstrap_spread(a, np.random.default_rng(0)).sd
    if not no_noise:
      row["gdp_estimate_black_box"] = parametric.gdp_estimate(
          a.sign * bb[r], a.sign * bb[~r], delta, conf).epsilon
  if spec.threat_model in ("white_box", "both"):
    # The claim's likelihood-ratio threshold (optimal if the claim holds) and a held-out
    # one (robust when it does not), each at its share of alpha; the larger is reported.
    fixed = thresholds.FixedThreshold(threshold_wb).bound(wb[s], wb[~s], delta=delta,
                                                          confidence=conf_fixed)
    held_out = thresholds.SplitThreshold(both_signs=True).bound(
        wb[s], wb[~s], delta=delta, confidence=conf_split)
    row["epsilon_lower_white_box"] = max(fixed.epsilon_lower, held_out.epsilon_lower)
    row["white_box_fixed_threshold"] = fixed.epsilon_lower
    row["white_box_held_out_threshold"] = held_out.epsilon_lower
    row["white_box_threshold"] = threshold_wb
    row["white_box_counts"] = fixed.counts()
    row["epsilon_lower_white_box_sd"] = thresholds.bootstrap_spread(
        fixed, np.random.default_rng(0)).sd
    if row["best_certifiable"] > 0:
      row["white_box_fraction_of_best"] = row["epsilon_lower_white_box"] / row["best_certifiable"]
    if not no_noise:
      row["white_box_fraction_of_exact"] = row["epsilon_lower_white_box"] / row["epsilon_pld"]
      row["gdp_estimate_white_box"] = parametric.gdp_estimate(
          wb[s], wb[~s], delta, conf, threshold=threshold_wb).epsilon
  return row


def roc_record(spec: CanaryAuditSpec, st: Setting, s_in, s_out) -> dict:
  """The white-box ROC for the figure: empirical (most true positives with <= k false positives,
  k on a geometric grid) and the claimed mechanism's TPR on a geometric FPR grid.
  """
  _check_spec(spec)
  _validate.check_instance(st, Setting, "st")
  s_in = _validate.check_array(s_in, "s_in", ndim=1, min_size=1)
  s_out = _validate.check_array(s_out, "s_out", ndim=1, min_size=1)
  fp, tp, _ = metrics.roc_counts(np.r_[s_in, s_out], np.r_[np.ones(s_in.size, bool),
                                                           np.zeros(s_out.size, bool)])
  k = np.unique(np.r_[0, np.rint(np.geomspace(1, s_out.size, _ROC_POINTS))]).astype(np.int64)
  at = np.searchsorted(fp, k, side="right") - 1             # last threshold with fp <= k
  _, fpr, fnr = claimed_roc(spec, st)
  grid = np.geomspace(1e-6, 1.0, _ROC_POINTS)
  return {"claimed_epsilon": st.claimed_epsilon, "positives": int(s_in.size),
          "negatives": int(s_out.size), "false_positives": k[at >= 0],
          "true_positives": tp[at[at >= 0]],
          "exact_fpr": grid, "exact_tpr": np.interp(grid, fpr[::-1], 1 - fnr[::-1])}

