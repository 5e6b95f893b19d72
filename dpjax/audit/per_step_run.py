"""The per-step white-box audit of DP-SGD: its training runs, its row, its coverage mechanism.

Runs of the audited training carry K Dirac gradient canaries in an extra parameter leaf
float32[K] that the model never reads (`step_observations`): canary k is a record whose
clipped gradient is C e_k on that leaf, sampled by the audited sampler like every record,
IN in a random half of each run's canaries. The records' clipping never touches the leaf,
so the engine's cost per step grows by O(K) (K Poisson bits, K noise draws), not O(K^2)
(fixed gradients on K unused input features). Every step's privatized leaf is observed
and reduced to the per-step statistics of `dpjax.audit.per_step`, which give estimate (a)
and bound (b) on the same runs (`per_step_audit`, one row per claim, beside the run-level
bound). `StepMechanism` simulates the per-step scores of DP-SGD as claimed, to measure
(a) and (b) for coverage (`coverage_estimators` with `dpjax.audit.coverage.measure`).

References: Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023,
https://arxiv.org/abs/2302.07956.

Shape letters: M models (runs), N records, T steps, K canaries per run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import _validate, accounting, dpsgd
from dpjax import clipping as clipping_lib
from dpjax import models as models_lib
from dpjax.audit import canary, coverage, leaf, per_step, run, thresholds, variants


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerStepSpec:
  """The per-step white-box audit of a claim: its runs, canaries and thresholds.

  Estimate (a) (`per_step.step_estimate`), bound (b) (`per_step.composed_bound`) and the
  run-level bound are computed on the same `runs` runs with `canaries` Dirac canaries
  each, a random half of them IN in each run (`canary_bits`): runs * T * K per-step
  trials, half per side.

  Attributes:
    sampling_prob, num_steps, delta: the claimed DP-SGD's q, T and delta.
    confidence: of (a)'s lower limit, of (b) and of the run-level bound.
    variant: the audited training (`variants.VARIANTS`).
    runs: training runs M >= 1.
    canaries: Dirac canaries per run K >= 2.
    num_thresholds: J of bound (b) (`per_step.design_thresholds`).
    observation_budget: most observations (M x T x K) held at once (runs go in chunks).
  """
  sampling_prob: float
  num_steps: int
  delta: float
  confidence: float = 0.95
  variant: str = "correct"
  runs: int = 8
  canaries: int = 2 ** 15
  num_thresholds: int = 7
  observation_budget: int = 2 ** 24

  def __post_init__(self):
    v = _validate
    checked = dict(
        sampling_prob=v.check_sampling_prob(self.sampling_prob),
        num_steps=v.check_int(self.num_steps, "num_steps"), delta=v.check_delta(self.delta),
        confidence=v.check_confidence(self.confidence),
        variant=v.check_choice(self.variant, variants.VARIANTS, "variant"),
        runs=v.check_int(self.runs, "runs"),
        canaries=v.check_int(self.canaries, "canaries", 2),
        num_thresholds=v.check_int(self.num_thresholds, "num_thresholds", 1, 1000),
        observation_budget=v.check_int(self.observation_budget, "observation_budget"))
    for k, val in checked.items():
      object.__setattr__(self, k, val)


def canary_bits(num_runs: int, num_canaries: int, seed: int) -> np.ndarray:
  """bool[M, K]: in each run an independent uniformly random set of floor(K / 2) canaries IN.

  Fixed before training (Generator(seed)), so which trials are IN is independent of
  the scores; each run gives exactly floor(K / 2) IN and ceil(K / 2) OUT canaries.

  Examples:
    >>> canary_bits(3, 4, seed=0).sum(axis=1).tolist()
    [2, 2, 2]
  """
  m = _validate.check_size(num_runs, "num_runs", bytes_per_unit=8)
  k = _validate.check_size(num_canaries, "num_canaries", minimum=2, units=m, bytes_per_unit=2)
  rng = np.random.default_rng(_validate.check_int(seed, "seed", minimum=0))
  order = np.argsort(rng.random((m, k)), axis=1)
  return order < k // 2


def _observe_canary_leaf(update):
  return update["canary"]


def step_observations(key, setting: run.Setting, data, model, var, canary_in_MxK) -> jax.Array:
  """float32[M, T, K]: each Dirac canary's leaf coordinate of every privatized update, in units of C / B.

  Trains M runs of `var` (a `variants.variant`) on data's records (the record canary
  left out) plus K canary records appended after them (zero features, label 0, kept
  iff canary_in_MxK[m, k]), sampled by var's sampler. The model gets the leaf
  {"canary": float32[K]} (`apply` never reads it); var's clipping runs on the records
  and params["model"], and a sampled IN canary k adds C e_k to the leaf
  (`leaf.canary_leaf_path`; norm C: clipping leaves it unchanged) and 1 to the realised
  batch size, as a record would. Noise and update are var's, on the whole parameter tree. o = obs B / C is b_t + sigma z_t for
  DP-SGD as claimed (`dpjax.audit.per_step`); the full-mask step is used
  (batch_capacity None), O(K) work per step for the canaries.

  Args:
    key: the training key (run m uses split(key, M)[m]).
    setting: the claim (sigma > 0).
    data: `canaries.audit_data(...)` (its record canary is left out).
    model: the audited model on data's features.
    var: the audited training for this claim (`variants.variant`).
    canary_in_MxK: bool[M, K], K >= 1.
  """
  _validate.check_instance(setting, run.Setting, "setting")
  if setting.sigma == 0:
    raise ValueError("setting: the per-step audit needs sigma > 0")
  g = np.asarray(_validate.check_binary(canary_in_MxK, "canary_in_MxK", ndim=2), bool)
  m, k = g.shape
  n = data.x_NxD.shape[0]
  keep = np.ones((m, n + k), bool)
  keep[:, data.canary_index] = False
  keep[:, n:] = g
  x = jnp.concatenate([jnp.asarray(data.x_NxD), jnp.zeros((k,) + data.x_NxD.shape[1:],
                                                          data.x_NxD.dtype)])
  y = jnp.concatenate([jnp.asarray(data.y_N), jnp.zeros((k,), jnp.asarray(data.y_N).dtype)])
  comps = dict(var.components)
  path = comps.pop("clipping", None)
  path = clipping_lib.path_for(model) if path is None else clipping_lib.as_path(path)
  c = var.config.l2_clip_norm
  out = run.train(key, run.Design(x, y, keep), var.config,
                  models_lib.with_canary_leaf(model, k), quiet=True,
                  observe_fn=_observe_canary_leaf,
                  components=dict(comps, clipping=leaf.canary_leaf_path(path, k),
                                  perf=dpsgd.PerformanceFlags(max_chunk=m, progress=False,
                                                              batch_capacity=None)))
  return out.observations * (var.config.expected_batch_size / c)


@functools.partial(jax.jit, static_argnames=("sampling_prob",))
def _llr_sums(o_MxTxK, two_sigma_sq, *, sampling_prob):
  """float32[M, K]: sum_t log(1 - q + q e^((2 o_t - 1) / (2 sigma^2))) of normalized
  observations, `run.white_box_llr_scores(o, 1, ...)` bit for bit; sigma traced (as
  2 sigma^2), so one program serves every claim at q."""
  x = (2.0 * o_MxTxK - 1.0) / two_sigma_sq
  if sampling_prob < 1.0:
    x = jnp.logaddexp(math.log1p(-sampling_prob), math.log(sampling_prob) + x)
  return jnp.sum(x, axis=1)


def per_step_statistics(key, spec: PerStepSpec, setting: run.Setting, data, model, *, bar=None,
                        run_scores: bool = False):
  """`per_step.StepStatistics` of spec.runs runs with spec.canaries Dirac canaries each.

  With run_scores, returns (statistics, scores_in, scores_out): also each (run,
  canary) trial's summed claimed likelihood ratio (`run.white_box_llr_scores`), float64.

  Runs go in chunks of at most spec.observation_budget observations (at least one
  run); chunk c is trained from fold_in(key, c) with `canary_bits(chunk, K, seed=c)`,
  observed by `step_observations` and reduced at once to counts at
  `per_step.design_thresholds` of the claim (`per_step.observation_statistics`).
  """
  _validate.check_instance(spec, PerStepSpec, "spec")
  _validate.check_instance(setting, run.Setting, "setting")
  runs, k = spec.runs, spec.canaries
  var = run.audited_training(spec, setting, int(data.x_NxD.shape[0]), model)
  thr = per_step.design_thresholds(spec.sampling_prob, setting.sigma, spec.num_thresholds)
  per = min(runs, max(1, spec.observation_budget // (spec.num_steps * k)))
  total, s_in, s_out = None, [], []
  for c, lo in enumerate(range(0, runs, per)):
    m = min(per, runs - lo)
    g = canary_bits(m, k, c)
    o = step_observations(jax.random.fold_in(key, c), setting, data, model, var, g)
    part = per_step.observation_statistics(o, g, thr)
    total = part if total is None else total + part
    if run_scores:
      llr = np.asarray(_llr_sums(o, 2.0 * float(setting.sigma) ** 2,
                                 sampling_prob=float(spec.sampling_prob)), np.float64)
      s_in.append(llr[g])
      s_out.append(llr[~g])
    del o
    if bar is not None:
      bar.update(m)
  if run_scores:
    return total, np.concatenate(s_in), np.concatenate(s_out)
  return total


def per_step_audit(key, spec: PerStepSpec, setting: run.Setting, data, model, *,
                   bar=None) -> dict:
  """One per-step row: estimate (a), bound (b) and the run-level bound of a claim beside its exact eps.

  Args:
    key: the runs' key (`per_step_statistics`).
    spec: the per-step audit.
    setting: the claim (sigma > 0).
    data, model: the audit records (`canaries.audit_data`) and the audited model.
    bar: an optional tqdm bar, advanced by runs trained.
  Returns:
    a dict of plain values: the claim, its exact (PLD) eps, (a) (lower limit and point,
    fitted sigma_eff, assumption), (b) (bound, certified points, assumption and what it
    certifies), each as a fraction of the exact eps; the runs, canaries per run and
    per-step trials they share; the run-level bound on the same runs (each (run,
    canary) one trial, `thresholds.FixedThreshold` at the claimed best certifiable
    threshold), which needs no i.i.d.-step assumption; and "cpu_seconds", the process
    CPU time of the row (training, statistics and bounds).
  """
  _validate.check_instance(spec, PerStepSpec, "spec")
  _validate.check_instance(setting, run.Setting, "setting")
  if setting.sigma == 0:
    raise ValueError("setting: the per-step audit needs sigma > 0 (no noise: see evaluate)")
  cpu0 = time.process_time()
  t, q, delta, conf = spec.num_steps, spec.sampling_prob, spec.delta, spec.confidence
  exact = accounting.dpsgd_epsilon(setting.sigma, q, t, delta, accountant="pld")
  st, r_in, r_out = per_step_statistics(key, spec, setting, data, model, bar=bar,
                                        run_scores=True)
  est = per_step.step_estimate(st, sampling_prob=q, num_steps=t, delta=delta, confidence=conf)
  bnd = per_step.composed_bound(st, num_steps=t, delta=delta, confidence=conf)
  # The run-level bound on the same runs: each (run, canary) one trial, its summed
  # claimed LLR thresholded where the claimed mechanism's best certifiable test is
  # (fixed in advance); needs no i.i.d.-step assumption, only independent canaries.
  thr, fpr, fnr = canary.llr_distribution(q, setting.sigma, t).roc()
  best = thresholds.best_certifiable(fpr, fnr, r_out.size, trials_in=r_in.size, delta=delta,
                                      confidence=conf, thresholds_J=thr)
  run_level = thresholds.FixedThreshold(best.threshold).bound(r_in, r_out, delta=delta,
                                                              confidence=conf).epsilon_lower
  return {
      "setting": setting.name, "epsilon": setting.claimed_epsilon, "sigma": setting.sigma,
      "epsilon_pld": exact, "variant": spec.variant, "sampling_prob": q, "num_steps": t,
      "confidence": conf, "runs": spec.runs, "canaries": spec.canaries,
      "trials_in": st.n_in, "trials_out": st.n_out,
      "estimate": est.epsilon, "estimate_point": est.epsilon_point,
      "estimate_fraction_of_exact": est.epsilon / exact,
      "estimate_point_fraction_of_exact": est.epsilon_point / exact,
      "estimate_noise_multiplier": est.noise_multiplier,
      "estimate_assumption": est.assumption,
      "bound": bnd.epsilon_lower, "bound_fraction_of_exact": bnd.epsilon_lower / exact,
      "bound_thresholds": bnd.thresholds_J.tolist(), "bound_fpr_upper": bnd.fpr_upper_J.tolist(),
      "bound_fnr_upper": bnd.fnr_upper_J.tolist(), "bound_assumption": bnd.assumption,
      "run_level_bound": run_level, "run_level_fraction_of_exact": run_level / exact,
      "run_level_best_certifiable": best.epsilon,
      "run_level_assumption": ("each (run, canary) pair one trial, the canaries independent "
                               "(DP-SGD as claimed); no assumption on the steps; threshold "
                               "fixed from the claimed likelihood-ratio law"),
      "bound_certifies": (
          f"with probability >= {conf:g} over the per-step trials, if the {t} steps are "
          "i.i.d. copies of one step pair, the training is not (eps, delta)-DP for any eps "
          f"< {bnd.epsilon_lower:.6g} at delta = {delta:g}"),
      "cpu_seconds": time.process_time() - cpu0,
  }


def audit_claims(key, spec: PerStepSpec, setting_list, key_data, base_size: int, *,
                 progress: bool = False, bar=None) -> list[dict]:
  """`per_step_audit` rows of every noisy claim, on the audit records of `key_data`.

  Claim i (of those with sigma > 0) is audited from fold_in(key, i), its runs on
  `canaries.audit_data(key_data, base_size)` with a logistic regression; `progress`
  shows a bar over runs (or `bar`, a tqdm bar the caller sized, is advanced).
  """
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  _validate.check_instance(spec, PerStepSpec, "spec")
  data = canaries.audit_data(key_data, base_size)
  model = models_lib.logistic_regression(data.num_features)
  noisy = [st for st in setting_list if st.sigma > 0]
  if bar is not None:
    return [per_step_audit(jax.random.fold_in(key, si), spec, st, data, model, bar=bar)
            for si, st in enumerate(noisy)]
  with tqdm(total=len(noisy) * spec.runs, unit="run", desc="per-step white-box audit",
            disable=not progress) as own:
    return [per_step_audit(jax.random.fold_in(key, si), spec, st, data, model, bar=own)
            for si, st in enumerate(noisy)]


# ----------------------------------------------------------------------------------
# Coverage: the per-step mechanism of known eps, and the two estimators.


@dataclasses.dataclass(frozen=True)
class StepMechanism(coverage.Mechanism):
  """One step of DP-SGD's white-box canary coordinate, composed T times (for coverage).

  `sample` draws per-step scores: OUT N(0, sigma^2), IN (1 - q) N(0, sigma^2) +
  q N(1, sigma^2); `true_epsilon` is eps(delta) of T steps (GDP at q = 1, the PLD
  accountant at q < 1, an upper bound within its 1e-5 relative tolerance).
  kind = "gaussian", strength = 1 / sigma (build with `step_mechanism`).

  Attributes:
    num_steps: T.
    sampling_prob: q.
  """
  num_steps: int = 1
  sampling_prob: float = 1.0

  def __post_init__(self):
    super().__post_init__()
    _validate.check_int(self.num_steps, "num_steps")
    _validate.check_sampling_prob(self.sampling_prob)
    if self.strength <= 0:
      raise ValueError(f"strength must be 1 / sigma > 0, got {self.strength}")

  @property
  def is_gdp(self) -> bool:
    return self.sampling_prob == 1.0

  @property
  def label(self) -> str:
    return (f"DP-SGD step sigma={1 / self.strength:.4g} q={self.sampling_prob:g} "
            f"x T={self.num_steps}")

  def true_epsilon(self, delta: float) -> float:
    delta = _validate.check_delta(delta)
    return per_step.family_epsilon(1.0 / self.strength, self.sampling_prob, self.num_steps, delta)

  def sample(self, rng: np.random.Generator, included) -> np.ndarray:
    _validate.check_instance(rng, np.random.Generator, "rng")
    inc = np.asarray(_validate.check_binary(included, "included"))
    if inc.size == 0:
      raise ValueError("included must not be empty")
    b = inc & (rng.random(inc.shape) < self.sampling_prob)
    return rng.standard_normal(inc.shape) / self.strength + b


@_validate.names_extreme_arguments
def step_mechanism(noise_multiplier: float, sampling_prob: float, num_steps: int
                   ) -> StepMechanism:
  """The StepMechanism of DP-SGD's white-box Dirac canary at (sigma, q, T).

  Examples:
    >>> round(step_mechanism(2.0, 1.0, 4).true_epsilon(1e-5), 4)   # 1-GDP
    4.3772
  """
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  return StepMechanism("gaussian", 1.0 / s, num_steps=_validate.check_int(num_steps, "num_steps"),
                       sampling_prob=_validate.check_sampling_prob(sampling_prob))


def coverage_estimators(mechanism: StepMechanism, *, num_thresholds: int = 7,
                        grid_points: int = 2 ** 16) -> tuple[coverage.Estimator, ...]:
  """Estimators (a) and (b) on per-step scores, for `coverage.measure`.

  "per_step_estimate": `step_estimate(...).epsilon` (its lower limit); valid for
  the (subsampled-)Gaussian family, which every StepMechanism is in.
  "per_step_bound": `composed_bound(...).epsilon_lower`, thresholds from
  `design_thresholds` at the mechanism's (q, sigma).

  Args:
    mechanism: a StepMechanism (its q and T are the estimators' known q and T).
    num_thresholds: J of bound (b).
    grid_points: of `composed_epsilon_lower`.
  """
  _validate.check_instance(mechanism, StepMechanism, "mechanism")
  q, t = mechanism.sampling_prob, mechanism.num_steps
  thr = per_step.design_thresholds(q, 1.0 / mechanism.strength, num_thresholds)
  n = _validate.check_int(grid_points, "grid_points", 1024 + t, 2 ** 26)

  def est(s_in, s_out, d, c):
    return per_step.step_estimate(per_step.step_statistics(s_in, s_out, thr), sampling_prob=q,
                                  num_steps=t,
                         delta=d, confidence=c).epsilon

  def bound(s_in, s_out, d, c):
    return per_step.composed_bound(per_step.step_statistics(s_in, s_out, thr), num_steps=t, delta=d,
                          confidence=c, grid_points=n).epsilon_lower

  return (coverage.Estimator("per_step_estimate", est,
                             description="per_step.step_estimate lower limit (family fit)"),
          coverage.Estimator("per_step_bound", bound,
                             description=f"per_step.composed_bound, {thr.size} thresholds"))
