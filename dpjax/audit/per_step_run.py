"""The per-step white-box audit of DP-SGD: its training runs, its row, its coverage mechanism.

Runs of the audited training carry many Dirac gradient canaries (C e_j on a coordinate
no record touches, IN in half the runs); every step's privatized update is observed
(`step_observations`, through `dpjax.audit.run.train`) and reduced to the per-step
statistics of `dpjax.audit.per_step`, which give estimate (a) and bound (b)
(`per_step_audit`, one row per claim, beside the run-level bound on the same runs).
`StepMechanism` simulates the per-step scores of DP-SGD as claimed, to measure (a) and
(b) for coverage (`coverage_estimators` with `dpjax.audit.coverage.measure`).

References: Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023,
https://arxiv.org/abs/2302.07956.

Shape letters: M models (runs), T steps, K canaries per run.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import _validate, accounting, dpsgd
from dpjax.audit import canary, coverage, per_step, run, thresholds, variants


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerStepSpec:
  """The per-step white-box audit of a claim: its runs, canaries and thresholds.

  Estimate (a) (`per_step.step_estimate`) uses `estimate_runs` runs with
  `estimate_canaries` Dirac canaries each; bound (b) (`per_step.composed_bound`)
  uses `bound_runs` runs with `bound_canaries` each (the engine's cost per
  observation is least near 128 canaries per run: the fixed gradients are a
  K x D matrix). Every canary is IN in half of each chunk's runs
  (`canary.canaries_design` at 1/2), on its own unused coordinate.

  Attributes:
    sampling_prob, num_steps, delta: the claimed DP-SGD's q, T and delta.
    confidence: of (a)'s lower limit and of (b).
    variant: the audited training (`variants.VARIANTS`).
    estimate_runs, bound_runs: runs, positive multiples of 4.
    estimate_canaries, bound_canaries: canaries per run, >= 1.
    num_thresholds: J of bound (b) (`per_step.design_thresholds`).
    observation_budget: most observations (M x T x K) per chunk of runs.
  """
  sampling_prob: float
  num_steps: int
  delta: float
  confidence: float = 0.95
  variant: str = "correct"
  estimate_runs: int = 8
  estimate_canaries: int = 2048
  bound_runs: int = 1024
  bound_canaries: int = 128
  num_thresholds: int = 7
  observation_budget: int = 2 ** 23

  def __post_init__(self):
    v = _validate
    checked = dict(
        sampling_prob=v.check_sampling_prob(self.sampling_prob),
        num_steps=v.check_int(self.num_steps, "num_steps"), delta=v.check_delta(self.delta),
        confidence=v.check_confidence(self.confidence),
        variant=v.check_choice(self.variant, variants.VARIANTS, "variant"),
        estimate_runs=v.check_int(self.estimate_runs, "estimate_runs", 4),
        estimate_canaries=v.check_int(self.estimate_canaries, "estimate_canaries"),
        bound_runs=v.check_int(self.bound_runs, "bound_runs", 4),
        bound_canaries=v.check_int(self.bound_canaries, "bound_canaries"),
        num_thresholds=v.check_int(self.num_thresholds, "num_thresholds", 1, 1000),
        observation_budget=v.check_int(self.observation_budget, "observation_budget"))
    for name in ("estimate_runs", "bound_runs"):
      if checked[name] % 4:
        raise ValueError(f"{name} must be a multiple of 4, got {checked[name]}")
    for k, val in checked.items():
      object.__setattr__(self, k, val)


def step_observations(key, setting: run.Setting, data, model, var, gradient_in_MxK) -> jax.Array:
  """float32[M, T, K]: each Dirac canary's coordinate of every privatized update, in units of C / B.

  Trains M runs of `var` (a `variants.variant`) on data's records (the record
  canary left out) with K gradient canaries C e_j in data's last K coordinates,
  canary k of run m a fixed-gradient record iff gradient_in_MxK[m, k]; o = obs B / C
  is b_t + sigma z_t for DP-SGD as claimed (`dpjax.audit.per_step`).

  Args:
    key: the training key (run m uses split(key, M)[m]).
    setting: the claim (sigma > 0).
    data: `canaries.audit_data(..., unused_features >= K)`.
    model: the audited model on data's features.
    var: the audited training for this claim (`variants.variant`).
    gradient_in_MxK: bool[M, K].
  """
  _validate.check_instance(setting, run.Setting, "setting")
  if setting.sigma == 0:
    raise ValueError("setting: the per-step audit needs sigma > 0")
  g = np.asarray(_validate.check_binary(gradient_in_MxK, "gradient_in_MxK", ndim=2), bool)
  m, k = g.shape
  keep = np.ones((m, data.x_NxD.shape[0]), bool)
  keep[:, data.canary_index] = False
  c = var.config.l2_clip_norm
  design = run.Design(data.x_NxD, data.y_N, keep, dpsgd.FixedGradients(
      canary.gradient_canaries(data.num_features, k, c), jnp.asarray(g)))
  out = run.train(key, design, var.config, model, quiet=True,
                  observe_fn=canary.observe_last_coordinates(k),
                  components=dict(var.components, perf=dpsgd.PerformanceFlags(
                      max_chunk=m, progress=False)))
  return out.observations * (var.config.expected_batch_size / c)


def per_step_statistics(key, spec: PerStepSpec, setting: run.Setting, data, model, *,
                        runs: int, canaries: int, bar=None, run_scores: bool = False):
  """`per_step.StepStatistics` of `runs` runs with `canaries` Dirac canaries each.

  With run_scores, returns (statistics, scores_in, scores_out): also each (run,
  canary) trial's summed claimed likelihood ratio (`white_box_llr_scores`), float64.

  Runs go in chunks of a multiple of 4 (at most spec.observation_budget
  observations); chunk c is trained from fold_in(key, c) with the design
  `canary.canaries_design(chunk, canaries, 1/2, seed=c)`, observed by
  `step_observations` and reduced to counts at `per_step.design_thresholds` of the
  claim at once (`per_step.observation_statistics`).
  """
  _validate.check_instance(spec, PerStepSpec, "spec")
  _validate.check_instance(setting, run.Setting, "setting")
  runs = _validate.check_int(runs, "runs", 4)
  k = _validate.check_int(canaries, "canaries")
  var = run.audited_training(spec, setting, int(data.x_NxD.shape[0]), model)
  thr = per_step.design_thresholds(spec.sampling_prob, setting.sigma, spec.num_thresholds)
  per = min(runs, max(4, spec.observation_budget // (spec.num_steps * k) // 4 * 4))
  total, s_in, s_out = None, [], []
  for c, lo in enumerate(range(0, runs, per)):
    m = min(per, runs - lo)
    _, g = canary.canaries_design(m, k, 0.5, c)
    o = step_observations(jax.random.fold_in(key, c), setting, data, model, var, g)
    part = per_step.observation_statistics(o, g, thr)
    total = part if total is None else total + part
    if run_scores:
      llr = np.asarray(run.white_box_llr_scores(o, 1.0, sampling_prob=float(spec.sampling_prob),
                                                noise_multiplier=float(setting.sigma)),
                       np.float64)
      s_in.append(llr[g])
      s_out.append(llr[~g])
    if bar is not None:
      bar.update(m)
  if run_scores:
    return total, np.concatenate(s_in), np.concatenate(s_out)
  return total


def per_step_audit(key, spec: PerStepSpec, setting: run.Setting, estimate_inputs, bound_inputs,
                   *, bar=None) -> dict:
  """One per-step row: estimate (a) and bound (b) of a claim beside its exact eps.

  Args:
    key: the per-step audit's key ((a) from fold_in(key, 0), (b) from fold_in(key, 1)).
    spec: the per-step audit.
    setting: the claim (sigma > 0).
    estimate_inputs, bound_inputs: (data, model) with >= spec.estimate_canaries /
      spec.bound_canaries unused coordinates.
    bar: an optional tqdm bar, advanced by runs trained.
  Returns:
    a dict of plain values: the claim, its exact (PLD) eps, (a) (lower limit and
    point, fitted sigma_eff, assumption), (b) (bound, certified points, assumption
    and what it certifies), each with its runs, canaries per run, per-step trials
    and fraction of the exact eps; and the run-level bound on (b)'s runs (each
    (run, canary) one trial, `thresholds.FixedThreshold` at the claimed best
    certifiable threshold), which needs no i.i.d.-step assumption.
  """
  _validate.check_instance(spec, PerStepSpec, "spec")
  _validate.check_instance(setting, run.Setting, "setting")
  if setting.sigma == 0:
    raise ValueError("setting: the per-step audit needs sigma > 0 (no noise: see evaluate)")
  t, q, delta, conf = spec.num_steps, spec.sampling_prob, spec.delta, spec.confidence
  exact = accounting.dpsgd_epsilon(setting.sigma, q, t, delta, accountant="pld")
  st_a = per_step_statistics(jax.random.fold_in(key, 0), spec, setting, *estimate_inputs,
                             runs=spec.estimate_runs, canaries=spec.estimate_canaries, bar=bar)
  est = per_step.step_estimate(st_a, sampling_prob=q, num_steps=t, delta=delta, confidence=conf)
  st_b, r_in, r_out = per_step_statistics(
      jax.random.fold_in(key, 1), spec, setting, *bound_inputs, runs=spec.bound_runs,
      canaries=spec.bound_canaries, bar=bar, run_scores=True)
  bnd = per_step.composed_bound(st_b, num_steps=t, delta=delta, confidence=conf)
  # The run-level fallback on the same runs: each (run, canary) one trial, its summed
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
      "confidence": conf,
      "estimate": est.epsilon, "estimate_point": est.epsilon_point,
      "estimate_fraction_of_exact": est.epsilon / exact,
      "estimate_point_fraction_of_exact": est.epsilon_point / exact,
      "estimate_noise_multiplier": est.noise_multiplier,
      "estimate_runs": spec.estimate_runs, "estimate_canaries": spec.estimate_canaries,
      "estimate_trials_in": est.trials_in, "estimate_trials_out": est.trials_out,
      "estimate_assumption": est.assumption,
      "bound": bnd.epsilon_lower, "bound_fraction_of_exact": bnd.epsilon_lower / exact,
      "bound_runs": spec.bound_runs, "bound_canaries": spec.bound_canaries,
      "bound_trials_in": bnd.trials_in, "bound_trials_out": bnd.trials_out,
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
  }


def audit_claims(key, spec: PerStepSpec, setting_list, key_data, base_size: int, *,
                 progress: bool = False) -> list[dict]:
  """`per_step_audit` rows of every noisy claim, on the audit records of `key_data`.

  Claim i (of those with sigma > 0) is audited from fold_in(key, i), its runs on
  `canaries.audit_data(key_data, base_size, unused_features=K)` (K = the spec's
  canaries per run) with a logistic regression; `progress` shows a bar over runs.
  """
  from dpjax import models  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  _validate.check_instance(spec, PerStepSpec, "spec")

  def inputs(k):
    data = canaries.audit_data(key_data, base_size, unused_features=k)
    return data, models.logistic_regression(data.num_features)

  noisy = [st for st in setting_list if st.sigma > 0]
  est_in, bnd_in = inputs(spec.estimate_canaries), inputs(spec.bound_canaries)
  with tqdm(total=len(noisy) * (spec.estimate_runs + spec.bound_runs), unit="run",
            desc="per-step white-box audit", disable=not progress) as bar:
    return [per_step_audit(jax.random.fold_in(key, si), spec, st, est_in, bnd_in, bar=bar)
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
