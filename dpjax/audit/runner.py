"""Auditing any training: a user's training function, or our DP-SGD with any model.

R runs, canary j in run i iff included_RxK[i, j]; canary scores (higher = IN) become eps lower
bounds. Modes: "independent" pools every (run, canary) pair into `score_audit.score_bounds`
(valid only if one run's K trials are independent given the bits: K = 1, or Dirac canaries of
DP-SGD as claimed); "one_run" treats the R x K canaries as one run with i.i.d. Bernoulli(1/2)
bits and reports the one-run tests (valid for ANY (eps, delta)-DP training; the Gaussian f-DP
test only for mu-GDP training). Shape letters: R runs, K canaries per run, T steps, N records.

References: Nasr et al. 2021 (arXiv:2101.04535); Steinke, Nasr & Jagielski 2023
(arXiv:2305.08846); Mahloujifar, Melis & Chaudhuri 2025 (arXiv:2410.22235).

Examples:
  >>> def gaussian(key, included_K):          # one Gaussian mechanism per canary, mu = 2
  ...   return included_K * 2.0 + jax.random.normal(key, included_K.shape)
  >>> a = audit_training(jax.random.key(0), gaussian, num_runs=400, num_canaries=2,
  ...                    delta=1e-5, progress=False)
  >>> a.scores_in.shape, 0 < a.bounds["clopper_pearson"].epsilon_lower < 7.5
  ((400,), True)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

MODES = ("independent", "one_run")
_ONE_RUN_NAMES = {"one_run": "steinke", "fdp_one_run": "fdp", "fdp_one_run_gdp": "fdp_gdp"}
_MAX_CHUNK = 4096


@dataclasses.dataclass(frozen=True)
class TrainingAudit:
  """What an audit of R runs with K canaries observed (scores_RxK float64, included_RxK bool) and
  its bounds {name: `score_audit.ScoreBound`} in `mode`, at delta and confidence.
  """
  scores_RxK: np.ndarray
  included_RxK: np.ndarray
  bounds: dict
  mode: str
  delta: float
  confidence: float
  claimed_epsilon: Optional[float] = None

  @property
  def scores_in(self) -> np.ndarray:
    """float64[#IN]: the IN scores, run-major."""
    return self.scores_RxK[self.included_RxK]

  @property
  def scores_out(self) -> np.ndarray:
    """float64[#OUT]: the OUT scores, run-major."""
    return self.scores_RxK[~self.included_RxK]

  def epsilon_lower(self) -> dict:
    """{estimator: eps lower bound} (plain floats)."""
    return {k: float(v.epsilon_lower) for k, v in self.bounds.items()}

  @classmethod
  def of(cls, scores_RxK, included_RxK, *, delta: float, confidence: float, mode: str,
         claimed_epsilon: Optional[float], seed: int) -> "TrainingAudit":
    """The audit of these scores and bits: `bounds_from_trials` with the same arguments."""
    return cls(scores_RxK, included_RxK, bounds_from_trials(
        scores_RxK, included_RxK, delta=delta, confidence=confidence, mode=mode,
        claimed_epsilon=claimed_epsilon, seed=seed), mode, delta, confidence, claimed_epsilon)

  def ceiling(self, name: str = "best") -> float:
    """`score_bounds`' entry `name` for a perfect adversary with these trial counts."""
    from dpjax.audit import score_audit  # pylint: disable=g-import-not-at-top
    n_in, n_out = int(self.included_RxK.sum()), int((~self.included_RxK).sum())
    return score_audit.score_bounds(np.ones(n_in), np.zeros(n_out), delta=self.delta,
                                    confidence=self.confidence)[name].epsilon_lower

  def to_json(self) -> dict:
    """A JSON-ready record: counts and bounds with assumptions and details (no scores)."""
    return {"mode": self.mode, "num_runs": int(self.scores_RxK.shape[0]),
            "num_canaries": int(self.scores_RxK.shape[1]),
            "num_in": int(self.included_RxK.sum()), "num_out": int((~self.included_RxK).sum()),
            "delta": self.delta, "confidence": self.confidence,
            "claimed_epsilon": self.claimed_epsilon,
            "bounds": {k: {"epsilon_lower": float(v.epsilon_lower),
                           "assumptions": v.assumptions, "details": v.details}
                       for k, v in self.bounds.items()}}


def inclusion_bits(key, num_runs: int, num_canaries: int, mode: str = "independent") -> np.ndarray:
  """bool[R, K] inclusion bits: "independent", exactly floor(R/2) random runs per canary; "one_run",
  i.i.d. Bernoulli(1/2).

  Examples:
    >>> inclusion_bits(jax.random.key(0), 6, 3).sum(axis=0).tolist()
    [3, 3, 3]
  """
  r = _validate.check_int(num_runs, "num_runs")
  k = _validate.check_int(num_canaries, "num_canaries")
  _validate.check_size(r * k, "num_runs * num_canaries")
  mode = _validate.check_choice(mode, MODES, "mode")
  if mode == "one_run":
    return np.asarray(jax.random.bernoulli(key, 0.5, (r, k)))
  u = np.asarray(jax.random.uniform(key, (r, k)))
  ranks = np.argsort(np.argsort(u, axis=0, kind="stable"), axis=0, kind="stable")
  return ranks < r // 2


def bounds_from_trials(scores_RxK, included_RxK, *, delta: float, confidence: float = 0.95,
                       mode: str = "independent", claimed_epsilon: Optional[float] = None,
                       seed: int = 0) -> dict:
  """Every estimator valid in `mode` on R x K canary scores (NaN refused) and their bits.

  "independent": `score_bounds` on the pooled trials (>= 2 IN and >= 2 OUT; `seed` for its
  one-run coins). "one_run": the one-run tests on all R K >= 2 canaries over
  `one_run.declared_guess_counts(R K)` (union bound). With `claimed_epsilon`, details record
  "falsifies_claim". Returns {name: score_audit.ScoreBound}.

  Examples:
    >>> inc = np.arange(200).reshape(100, 2) % 2 == 0
    >>> b = bounds_from_trials(inc * 1.0, inc, delta=1e-5, mode="one_run")
    >>> sorted(b), b["one_run"].details["num_correct"]
    (['fdp_one_run', 'fdp_one_run_gdp', 'one_run'], 200)
  """
  from dpjax.audit import one_run, score_audit  # pylint: disable=g-import-not-at-top
  s = _validate.check_array(scores_RxK, "scores_RxK", ndim=2, allow_inf=True, min_size=1)
  inc = _validate.check_binary(included_RxK, "included_RxK", shape=s.shape).astype(bool)
  delta = _validate.check_delta(delta)
  confidence = _validate.check_confidence(confidence)
  mode = _validate.check_choice(mode, MODES, "mode")
  if claimed_epsilon is not None:
    claimed_epsilon = _validate.check_epsilon(claimed_epsilon, "claimed_epsilon", allow_zero=True)
  seed = _validate.check_int(seed, "seed", minimum=0)
  if mode == "independent":
    s_in, s_out = s[inc], s[~inc]
    if s_in.size < 2 or s_out.size < 2:
      raise ValueError("mode 'independent' needs >= 2 IN and >= 2 OUT trials, got "
                       f"{s_in.size} and {s_out.size} (use more runs)")
    return score_audit.score_bounds(s_in, s_out, delta=delta, confidence=confidence,
                                   claimed_epsilon=claimed_epsilon, seed=seed)
  flat, bits = s.reshape(-1), inc.reshape(-1)
  if flat.size < 2:
    raise ValueError(f"mode 'one_run' needs >= 2 canaries in all, got {flat.size}")
  out = {}
  for name, method in _ONE_RUN_NAMES.items():
    res = one_run.audit_declared_guesses(flat, bits, delta=delta, confidence=confidence,
                                         method=method)
    how = {"steinke": "Steinke, Nasr & Jagielski 2023 test of (eps, delta)-DP",
           "fdp": "Mahloujifar, Melis & Chaudhuri 2025 test with the (eps, delta)-DP "
                  "trade-off function",
           "fdp_gdp": "valid only if the training is mu-GDP; Mahloujifar, Melis & "
                      "Chaudhuri 2025 test with f = G_mu, converted to eps at delta"}[method]
    details = {"num_canaries": int(flat.size), "num_guesses": int(res.num_guesses),
               "num_correct": int(res.num_correct),
               "guess_counts": [int(c) for c in res.guess_counts],
               "confidence_per_test": float(res.confidence_per_test)}
    if method == "fdp_gdp":
      details["mu_lower"] = float(res.mu_lower)
    if claimed_epsilon is not None:
      details["claimed_epsilon"] = claimed_epsilon
      details["falsifies_claim"] = bool(res.epsilon_lower > claimed_epsilon)
    out[name] = score_audit.ScoreBound(
        name, float(res.epsilon_lower),
        how + "; all canaries of all runs as the canaries of one run, inclusion bits i.i.d. "
        "Bernoulli(1/2) drawn before training; guesses IN for the top r/2 scores and OUT "
        f"for the bottom r/2, r over the declared set {list(res.guess_counts)} with a union "
        "bound; valid for any (eps, delta)-DP training whatever the dependence between "
        "canaries", details, confidence, delta)
  return out


def union_best(audits: dict, names=None) -> tuple[float, str]:
  """(bound, name): the largest "best" bound of several TrainingAudits (default all), each at
  1 - alpha / k so that the maximum holds at their confidence (mode "independent").
  """
  from dpjax.audit import thresholds  # pylint: disable=g-import-not-at-top
  names = list(audits) if names is None else list(names)
  if not names or not all(isinstance(audits.get(n), TrainingAudit) for n in names):
    raise ValueError("audits must map each of names to a TrainingAudit")
  a0 = audits[names[0]]
  per = thresholds.bonferroni_confidence(a0.confidence, len(names))
  vals = {n: bounds_from_trials(audits[n].scores_RxK, audits[n].included_RxK, delta=a0.delta,
                                confidence=per)["best"].epsilon_lower for n in names}
  top = max(vals, key=vals.get)
  return float(vals[top]), top


def _check_trial_counts(mode: str, r: int, k: int, what: str) -> None:
  """Refuses, before any training, a design too small for the mode's estimators."""
  if mode == "independent" and min(k * (r // 2), k * (r - r // 2)) < 2:
    raise ValueError(f"mode 'independent' needs >= 2 IN and >= 2 OUT trials: {what} = "
                     f"{r} x {k} gives {k * (r // 2)} IN; use more runs or canaries")
  if mode == "one_run" and r * k < 2:
    raise ValueError(f"mode 'one_run' needs >= 2 canaries in all: {what} = {r} x {k}")


def seed_from_key(key: jax.Array) -> int:
  """A NumPy seed in [0, 2^31 - 1) drawn from a JAX key (for host-side estimators)."""
  key = _validate.check_key(key)
  return int(jax.random.randint(key, (), 0, 2**31 - 1))


@functools.lru_cache(maxsize=32)
def _batched(train_fn, score_fn):
  def one(key, included_K):
    obs = train_fn(key, included_K)
    return obs if score_fn is None else score_fn(obs)
  return one, jax.jit(jax.vmap(one))


def _chunk_size(fn, keys, bits, budget: int) -> int:
  """Runs per chunk: budget / (2 x one run's compiled working set), at most 4096."""
  per = None
  try:
    mem = fn.lower(keys[:1], bits[:1]).compile().memory_analysis()
    if mem is not None:
      per = (mem.temp_size_in_bytes + mem.output_size_in_bytes + mem.argument_size_in_bytes)
  except Exception:  # pylint: disable=broad-except
    per = None         # no analysis on this backend: fall back to the cap
  if not per:
    return min(keys.shape[0], 256)
  return int(max(1, min(keys.shape[0], _MAX_CHUNK, budget // (2 * per))))


def audit_training(key, train_fn: Callable, *, num_runs: int, num_canaries: int = 1,
                   score_fn: Optional[Callable] = None, delta: float,
                   confidence: float = 0.95, claimed_epsilon: Optional[float] = None,
                   mode: str = "independent", chunk_size: Optional[int] = None,
                   memory_budget_bytes: int = 2 * 2**30,
                   progress: bool = True) -> TrainingAudit:
  """Audits a user's training function: R runs with K canaries, scored, bounded.

  train_fn(key, included_K: bool[K]) -> observation: pure, vmappable, randomness only from key;
  score_fn(observation) -> float[K] (default: the observation is the scores). R >= 2 in mode
  "independent". The result depends only on `key`, not on the chunking (chunk_size default from
  XLA's memory analysis and `memory_budget_bytes`). Raises ValueError on bad output or NaN scores.

  Examples:
    >>> from dpjax.audit import score_audit
    >>> leak = lambda key, inc: inc * 1.0            # reveals the bits: not private
    >>> a = audit_training(jax.random.key(1), leak, num_runs=100, delta=1e-5,
    ...                    progress=False)
    >>> perfect = score_audit.score_bounds(np.ones(50), np.zeros(50), delta=1e-5)
    >>> a.bounds["clopper_pearson"].epsilon_lower == perfect["clopper_pearson"].epsilon_lower
    True
  """
  key = _validate.check_key(key)
  _validate.check_callable(train_fn, "train_fn")
  if score_fn is not None:
    _validate.check_callable(score_fn, "score_fn")
  mode = _validate.check_choice(mode, MODES, "mode")
  r = _validate.check_int(num_runs, "num_runs", minimum=2 if mode == "independent" else 1)
  k = _validate.check_int(num_canaries, "num_canaries")
  delta = _validate.check_delta(delta)
  confidence = _validate.check_confidence(confidence)
  if claimed_epsilon is not None:
    claimed_epsilon = _validate.check_epsilon(claimed_epsilon, "claimed_epsilon", allow_zero=True)
  chunk_size = None if chunk_size is None else _validate.check_int(chunk_size, "chunk_size")
  memory_budget_bytes = _validate.check_int(memory_budget_bytes, "memory_budget_bytes")
  _check_trial_counts(mode, r, k, "num_runs * num_canaries")
  k_bits, k_runs, k_seed = jax.random.split(key, 3)
  bits = inclusion_bits(k_bits, r, k, mode)
  one, fn = _batched(train_fn, score_fn)
  what = "score_fn" if score_fn is not None else "train_fn"
  try:
    shape = jax.eval_shape(one, k_runs, jax.ShapeDtypeStruct((k,), jnp.bool_))
  except Exception as e:  # the user's function fails on one run's inputs
    raise ValueError(f"{what} failed on (key, included_K: bool[{k}]): "
                     f"{type(e).__name__}: {e}") from e
  if (not isinstance(shape, jax.ShapeDtypeStruct) or shape.shape != (k,)
      or not (jnp.issubdtype(shape.dtype, jnp.floating)
              or jnp.issubdtype(shape.dtype, jnp.integer)
              or shape.dtype == jnp.bool_)):
    got = shape.shape if isinstance(shape, jax.ShapeDtypeStruct) else type(shape).__name__
    dt = getattr(shape, "dtype", "")
    raise ValueError(f"{what} must return one real score per canary, float[{k}] "
                     f"(num_canaries = {k}), got {dt}{got}")
  keys = jax.random.split(k_runs, r)
  bits_j = jnp.asarray(bits)
  chunk = chunk_size if chunk_size is not None else _chunk_size(fn, keys, bits_j,
                                                                int(memory_budget_bytes))
  chunk = min(chunk, r)
  chunk = -(-r // -(-r // chunk))      # the same number of chunks, least padding
  num_chunks = -(-r // chunk)
  it = range(num_chunks)
  if progress and num_chunks > 1:
    import tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm.tqdm(it, desc=f"audit {r} runs x {k} canaries", unit="chunk")
  outs = []
  for ci in it:
    lo, hi = ci * chunk, min(r, (ci + 1) * chunk)
    idx = np.arange(lo, lo + chunk) % r     # the last chunk padded: one compiled shape
    outs.append(np.asarray(fn(keys[idx], bits_j[idx]), np.float64)[: hi - lo])
  scores = np.concatenate(outs, axis=0)
  nan = np.isnan(scores)
  if nan.any():
    i, j = (int(v) for v in np.argwhere(nan)[0])
    raise ValueError(f"{what} returned NaN scores ({int(nan.sum())} of {scores.size}; first: "
                     f"run {i}, canary {j}): no bound is computed from a failed run")
  return TrainingAudit.of(scores, bits, delta=delta, confidence=confidence, mode=mode,
                          claimed_epsilon=claimed_epsilon, seed=seed_from_key(k_seed))


# DP-SGD with any model of ours.


@dataclasses.dataclass(frozen=True)
class DpSgdAudit:
  """An audit of `dpsgd.train_many`: white_box (K gradient canaries) and black_box (record canary)
  TrainingAudits (None when absent), the claimed (accountant) and exact (PLD) eps.
  """
  white_box: Optional[TrainingAudit]
  black_box: Optional[TrainingAudit]
  claimed_epsilon: float
  exact_epsilon: Optional[float]
  config: Any

  def to_json(self) -> dict:
    return {"claimed_epsilon": self.claimed_epsilon, "exact_epsilon": self.exact_epsilon,
            "noise_multiplier": float(self.config.noise_multiplier),
            "sampling_prob": float(self.config.sampling_prob),
            "num_steps": int(self.config.num_steps), "delta": float(self.config.delta),
            "white_box": None if self.white_box is None else self.white_box.to_json(),
            "black_box": None if self.black_box is None else self.black_box.to_json()}


@functools.lru_cache(maxsize=32)
def _path_with_canary_leaf(path):
  """`path`'s clipped sum on params["model"], zero on the canary leaf."""
  from dpjax import clipping as clipping_lib  # pylint: disable=g-import-not-at-top

  def fn(params, x, y, w, c):
    g, norms = path(params["model"], x, y, w, c)
    return {"model": g, "canary": jnp.zeros_like(params["canary"])}, norms
  return clipping_lib.ClippingPath(fn, f"{path.name}+canary_leaf",
                                   per_example_grad_memory=path.per_example_grad_memory,
                                   scan_unroll=path.scan_unroll, accounted=path.accounted)


def _observe_canary_leaf(update):
  return update["canary"]


@functools.lru_cache(maxsize=8)
def _black_box_fn(model):
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top

  def score(params, x1, y1):
    return -models_lib.per_example_loss(model, params["model"], x1, y1)[0]
  return jax.jit(jax.vmap(score, in_axes=(0, None, None)))


@_validate.names_extreme_arguments
def audit_dpsgd(key, cfg, model, x_NxF, y_N, *, num_runs: int,
                num_gradient_canaries: int = 1, record_canary: Optional[tuple] = None,
                confidence: float = 0.95, mode: str = "independent",
                progress: bool = True, **train_kwargs) -> DpSgdAudit:
  """Audits DP-SGD (`dpsgd.train_many`, through `run.train`) for `model` on (x, y).

  Each of R runs trains on all N records plus canaries with independent bits: white-box, K Dirac
  gradient canaries C e_j in an extra leaf float32[K] that apply never reads, scored by
  `canary.white_box_llr`; black-box (optional `record_canary` (x_c, y_c)), a record appended to
  the data, scored by -loss. **train_kwargs: other `dpsgd.train_many` components, audited
  against the claim cfg. Raises ValueError on bad input, no canary, or diverged runs.
  """
  from dpjax import accounting, dpsgd  # pylint: disable=g-import-not-at-top
  from dpjax import clipping as clipping_lib  # pylint: disable=g-import-not-at-top
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  from dpjax.audit import canary, run  # pylint: disable=g-import-not-at-top

  key = _validate.check_key(key)
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  models_lib.check_model(model)
  mode = _validate.check_choice(mode, MODES, "mode")
  r = _validate.check_int(num_runs, "num_runs", minimum=2 if mode == "independent" else 1)
  k = _validate.check_int(num_gradient_canaries, "num_gradient_canaries", minimum=0)
  confidence = _validate.check_confidence(confidence)
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32, min_size=1))
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  y_np = np.asarray(y_N)
  if not (np.issubdtype(y_np.dtype, np.number) or y_np.dtype == np.bool_):
    raise ValueError(f"y_N must be numeric labels, got dtype {y_np.dtype}")
  y = jnp.asarray(y_np)
  if y.shape != (x.shape[0],):
    raise ValueError(f"y_N must have shape ({x.shape[0]},), got {y.shape}")
  if record_canary is not None:
    if not (isinstance(record_canary, tuple) and len(record_canary) == 2):
      raise TypeError("record_canary must be a pair (x_c, y_c)")
    x_c = _validate.check_array(record_canary[0], "record_canary[0]", np.float32, shape=x.shape[1:])
  if k == 0 and record_canary is None:
    raise ValueError("nothing to audit: num_gradient_canaries = 0 and no record_canary")
  if k:
    _validate.check_size(r * k, "num_runs * num_gradient_canaries")
    _check_trial_counts(mode, r, k, "num_runs * num_gradient_canaries")
  if record_canary is not None:
    _check_trial_counts(mode, r, 1, "num_runs (one record-canary trial per run)")
  sigma = cfg.noise_multiplier
  claimed = float(cfg.epsilon())
  claim = claimed if math.isfinite(claimed) else None
  exact = (accounting.dpsgd_epsilon(sigma, float(cfg.sampling_prob), int(cfg.num_steps),
                                    float(cfg.delta), accountant="pld")
           if sigma > 0 else None)
  k_bits, k_train, k_seed = jax.random.split(key, 3)
  kb_grad, kb_rec = jax.random.split(k_bits)
  rec_in = None if record_canary is None else inclusion_bits(kb_rec, r, 1, mode)
  kk = max(k, 1)
  wrapped = models_lib.with_canary_leaf(model, kk)
  path = train_kwargs.pop("clipping", None)
  path = clipping_lib.path_for(model) if path is None else clipping_lib.as_path(path)
  c = float(cfg.l2_clip_norm)
  grad_in = inclusion_bits(kb_grad, r, kk, mode) if k else np.zeros((r, 1), bool)
  params_shape = jax.eval_shape(wrapped.init, jax.random.key(0))
  canaries = jax.tree.map(lambda l: jnp.zeros((kk,) + tuple(l.shape), jnp.float32),
                          params_shape)
  canaries["canary"] = c * jnp.eye(kk, dtype=jnp.float32)
  design = run.canary_design(
      x, y, r, gradients=(canaries, grad_in),
      records=None if record_canary is None else (x_c[None], record_canary[1], rec_in))
  train_kwargs.setdefault("perf", dpsgd.PerformanceFlags(progress=progress))
  out = run.train(k_train, design, cfg, wrapped, observe_fn=_observe_canary_leaf if k else None,
                  components=dict(train_kwargs, clipping=_path_with_canary_leaf(path)))
  seed_w, seed_b = (seed_from_key(kk_) for kk_ in jax.random.split(k_seed))
  delta = float(cfg.delta)
  white = black = None
  if k:
    s = canary.white_box_llr(out.observations, expected_batch_size=cfg.expected_batch_size,
                             l2_clip_norm=c, sampling_prob=float(cfg.sampling_prob),
                             noise_multiplier=sigma)
    white = TrainingAudit.of(s, grad_in, delta=delta, confidence=confidence, mode=mode,
                             claimed_epsilon=claim, seed=seed_w)
  if record_canary is not None:
    s = np.asarray(_black_box_fn(model)(out.params, design.x_NxF[-1:], design.y_N[-1:]),
                   np.float64)[:, None]
    if np.isnan(s).any():
      raise ValueError("the record canary's loss is NaN on some run: no bound computed")
    black = TrainingAudit.of(s, rec_in, delta=delta, confidence=confidence, mode=mode,
                             claimed_epsilon=claim, seed=seed_b)
  return DpSgdAudit(white, black, claimed, exact, cfg)
