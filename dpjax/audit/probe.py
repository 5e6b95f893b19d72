"""Probe worlds: auditing the bugs that shipped in DP libraries where the theory is exact.

Each `Case` trains a `variants` fault (accountant told the claimed (q, sigma, T, delta)) in a
tiny world: n0 base records M e_0, a canary M e_1 (M = 100, label 0, IN for half the 2N models),
K = `noise_coords` free coordinates, a logistic regression from w = 0 at learning rate 1e-7 B so
every gradient clips to exactly C e_0 or C e_1. Six adversaries (`ADVERSARIES`), each a split
threshold at 1 - alpha / 6: white-box `llr`, `slot` (u_t[0] + u_t[1] over each epoch's last
batch), `scale_min` / `scale_sum` (-log of the min / sum of ||u_t[2:]||^2); black-box
(z = -w_T / lr) `final_canary` z[1] and `final_scale` -log ||z[2:]||^2.

References: Opacus issues 571, 813, 819; Tramer et al. 2022 (arXiv:2202.12219); Chua et al.
2024 (arXiv:2403.17673); Nasr et al. 2021 (arXiv:2101.04535).
Shape letters: M models (2N), T steps, F = 2 + K features.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, accounting, dpsgd, models
from dpjax.accounting import gdp
from dpjax.audit import canary, run, stats, thresholds, variants

ADVERSARIES = ("llr", "slot", "scale_min", "scale_sum", "final_canary", "final_scale")
WHITE_BOX = ("llr", "slot", "scale_min", "scale_sum")
RECORD_NORM = 100.0          # M: every record is M e_k, label 0
# Learning rate / expected batch size: keeps |w . x| < 0.1, so each clipped gradient
# is constant (the update is the sum divided by about the expected batch size).
LEARNING_RATE = 1e-7
CLIP = 1.0


@dataclasses.dataclass(frozen=True)
class Case:
  """One audited configuration: a variant in a probe world (n0 = base_records; the claimed data
  set has n0 + 1). own_size: floored_expected_batch divides by each data set's own size (the
  shipped fault), else by the claimed n. source, why: the published figure and the explanation.
  """
  key: str
  label: str
  variant: str
  sampling_prob: float
  base_records: int
  steps: int
  own_size: bool = True
  source: str = "-"
  why: str = ""

  def __post_init__(self):
    for name in ("key", "label", "source", "why"):
      _validate.check_instance(getattr(self, name), str, name)
    _validate.check_choice(self.variant, variants.VARIANTS, "variant")
    _validate.check_sampling_prob(self.sampling_prob)
    _validate.check_int(self.base_records, "base_records")
    _validate.check_int(self.steps, "steps")
    _validate.check_bool(self.own_size, "own_size")


def _control(q: float, n0: int, steps: int) -> Case:
  """The accounted mechanism in a probe world (a control)."""
  return Case(f"correct_q{q:g}_n{n0 + 1}", f"correct (q = {q:g}, n = {n0 + 1})", "correct", q,
              n0, steps, why="control: the accounted mechanism, so every bound must stay at "
              "or below its exact eps")


CASES = (
    _control(0.5, 1, 32),
    Case("realised_batch_denominator", "realised_batch_denominator",
         "realised_batch_denominator", 0.5, 1, 32,
         source="opacus/issues/571: eps ~2.5 measured, 1.2 reported (2-3 records)",
         why="with one other record a divisor of 2 exists only with the canary (a quarter "
             "of the steps): the update's scale on the free coordinates shows it "
             "(scale_min; final_scale sees the average). Tests on the canary coordinate "
             "see little: noise and signal are divided alike"),
    _control(0.5, 3, 32),
    Case("floored_expected_batch", "floored_expected_batch (n of the data set)",
         "floored_expected_batch", 0.5, 3, 32,
         source="opacus/issues/819: neighbours almost fully distinguishable "
                "(small n, high d)",
         why="floor(0.5 * 3) = 1 but floor(0.5 * 4) = 2: every update of the larger data "
             "set is halved, noise included; every scale test sees it, white-box or not"),
    Case("floored_expected_batch_public", "floored_expected_batch (claimed n)",
         "floored_expected_batch", 0.5, 3, 32, own_size=False,
         why="a public divisor is post-processing: exactly the claimed eps, which no "
             "adversary can exceed"),
    _control(0.01, 1, 32),
    Case("over_rate_sampler", "over_rate_sampler", "over_rate_sampler", 0.01, 1, 32,
         source="opacus/issues/813: a rate 45,000x off (no eps measured)",
         why="sampled at rate 1, not 0.01 (no amplification by sampling): the canary "
             "tests, white-box or on the final model, see it at every step; scales are "
             "unchanged"),
    _control(0.2, 49, 32),
    Case("backprop_clipping", "backprop_clipping", "backprop_clipping", 0.2, 49, 32,
         source="Tramer et al. 2022: claimed 0.21, audited > 2.79 (MNIST, poisoned input)",
         why="the canary (||x|| >= C_in, residual 1/2) moves the sum by 5 C, not C, when "
             "its batch has >= 5 records: the canary tests see it; scales are unchanged"),
    _control(0.02, 49, 500),
    Case("shuffle_as_poisson", "shuffle_as_poisson", "shuffle_as_poisson", 0.02, 49, 500,
         source="Chua et al. 2024: shuffling far less private than its Poisson accounting",
         why="49 records in 50 slots of 1 leave the last batch of every epoch empty; the "
             "canary fills it, 10 times in 10 epochs, deterministically. Only the slot "
             "test looks there (an exactly Gaussian test, mu = sqrt(5) / sigma); the "
             "Poisson-likelihood tests see the canary at about the claimed rate. Its "
             "bound at claimed eps 1 needs about 10,000 trials per side to pass 1"),
)


def steps_per_epoch(case: Case) -> int:
  """E, the batches of one epoch of the shuffle at the case's expected batch size."""
  _validate.check_instance(case, Case, "case")
  n = case.base_records + 1
  b = max(1, int(round(case.sampling_prob * n)))
  return max(1, n // b)


def true_epsilon(case: Case, noise_multiplier: float, *, noise_coords: int,
                 delta: float) -> tuple[float, str]:
  """(eps, kind): the case's true eps ("exact"), a lower bound (">="), or an estimate ("~").

  Examples:
    >>> true_epsilon(CASES[0], 4.0, noise_coords=100, delta=1e-5)[1]
    'exact'
  """
  _validate.check_instance(case, Case, "case")
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  k = _validate.check_int(noise_coords, "noise_coords")
  q, t, d = case.sampling_prob, case.steps, _validate.check_delta(delta)
  claim = dpsgd.DpSgdConfig(dataset_size=case.base_records + 1, sampling_prob=q, num_steps=t,
                            noise_multiplier=sigma, delta=d)
  if case.variant == "correct" or (case.variant == "floored_expected_batch" and not case.own_size):
    return variants.exact_epsilon("correct", claim), "exact"
  if case.variant == "realised_batch_denominator":
    return variants.realised_denominator_lower_bound(k, case.base_records, q, t, d), ">="
  if case.variant == "floored_expected_batch":
    return variants.floored_denominator_lower_bound(k, case.base_records, q, t, d), ">="
  if case.variant == "over_rate_sampler":
    return variants.exact_epsilon("over_rate_sampler", claim), "exact"
  if case.variant == "backprop_clipping":
    # The canary's contribution in a batch of >= 5 records: |r| C_in = 0.5 C / grad_clip.
    moved = 0.5 * CLIP / variants.BACKPROP_GRAD_CLIP
    return accounting.dpsgd_epsilon(sigma * CLIP / moved, q, t, d, "pld"), "~"
  if case.variant == "shuffle_as_poisson":
    mu = variants.shuffle_slot_mu(sigma, t, steps_per_epoch(case))
    return gdp.gaussian_epsilon(d, mu), ">="
  raise ValueError(f"case: no theory for {case.label!r}")


def _observe(u):
  w = u["w"]
  return jnp.stack([w[0], w[1], jnp.sum(jnp.square(w[2:]))])


def _train_case(key, case: Case, noise_multiplier: float, in_M, *, noise_coords: int, delta: float):
  """(obs float64[M, T, 3] = (u_t[0], u_t[1], ||u_t[2:]||^2), final w float64[M, F], config).

  floored_expected_batch with own_size trains IN from fold_in(key, 0) and OUT from fold_in(key, 1)
  with their own divisors; every other case trains all models from fold_in(key, 0).
  """
  _validate.check_instance(case, Case, "case")
  r = np.asarray(_validate.check_binary(in_M, "in_M", ndim=1), bool)
  k = _validate.check_int(noise_coords, "noise_coords")
  n = case.base_records + 1
  x = np.zeros((n, 2 + k), np.float32)
  x[:case.base_records, 0] = RECORD_NORM
  x[case.base_records, 1] = RECORD_NORM
  y = np.zeros((n,), np.int32)
  model = models.logistic_regression(2 + k)
  cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=case.sampling_prob, num_steps=case.steps,
                          l2_clip_norm=CLIP, noise_multiplier=noise_multiplier, delta=delta,
                          learning_rate=LEARNING_RATE * case.sampling_prob * n)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", variants.FaultyDpSgdWarning)
    v = variants.variant(case.variant, cfg, model)
  obs, w = np.zeros((r.size, case.steps, 3)), np.zeros((r.size, 2 + k))
  groups = [(np.ones_like(r), None)]
  if case.variant == "floored_expected_batch" and case.own_size:
    groups = [(r, v.privatizer.on_dataset(n)), (~r, v.privatizer.on_dataset(n - 1))]
  for g, (sel, priv) in enumerate(groups):
    design = run.canary_design(x[:-1], y[:-1], int(sel.sum()),
                               records=(x[-1:], y[-1:], r[sel][:, None]))
    comps = dict(v.components, perf=dpsgd.PerformanceFlags(progress=False,
                                                            max_chunk=int(np.sum(sel))))
    if priv is not None:
      comps["privatizer"] = priv
    out = run.train(jax.random.fold_in(key, g), design, v.config, model, observe_fn=_observe,
                    components=comps, quiet=True)
    obs[sel] = np.asarray(out.observations, np.float64)
    w[sel] = np.asarray(out.params["w"], np.float64)
  return obs, w, v.config


def scores(obs, w, *, sampling_prob: float, noise_multiplier: float,
           expected_batch_size: float, steps_per_epoch: int) -> dict:
  """The six adversaries' scores float64[M] (higher = IN) from `_train_case`'s obs and w, under the
  claimed q, sigma > 0, the trained B and the slot test's E.
  """
  obs = _validate.check_array(obs, "obs", ndim=3, min_size=1)
  w = _validate.check_array(w, "w", ndim=2, shape=(obs.shape[0], None))
  b = _validate.check_positive(expected_batch_size, "expected_batch_size")
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  # E > T: no step ends an epoch, as at E = T + 1 (and t % E stays a C long).
  e = min(_validate.check_int(steps_per_epoch, "steps_per_epoch"), obs.shape[1] + 1)
  u0, u1, s = obs[..., 0], obs[..., 1], obs[..., 2]
  llr = canary.white_box_llr(u1[:, :, None], expected_batch_size=b, l2_clip_norm=CLIP,
                             sampling_prob=sampling_prob, noise_multiplier=sigma)
  last = (np.arange(obs.shape[1]) % e) == e - 1
  z = -w / (LEARNING_RATE * b)
  return {"llr": llr[:, 0], "slot": np.sum((u0 + u1)[:, last], axis=1),
          "scale_min": -np.log(np.min(s, axis=1)), "scale_sum": -np.log(np.sum(s, axis=1)),
          "final_canary": z[:, 1], "final_scale": -np.log(np.sum(np.square(z[:, 2:]), axis=1))}


def audit_case(key, case: Case, epsilon: float, *, trials: int, noise_coords: int,
               delta: float, confidence: float, design_seed: int) -> dict:
  """One row: the case audited at claimed eps by the six adversaries, beside its true eps.

  sigma calibrated (RDP) to `epsilon`; 2 trials models, `trials` of them IN in an order from
  `design_seed`. Returns plain values: claim, sigma, true eps and kind, bounds and counts, the
  best, who catches the claim, the ceiling, the largest |w . x|, source and why.
  """
  _validate.check_instance(case, Case, "case")
  eps = _validate.check_epsilon(epsilon)
  trials = _validate.check_int(trials, "trials", minimum=2)
  delta = _validate.check_delta(delta)
  conf = _validate.check_confidence(confidence)
  sigma = accounting.calibrate_noise(eps, case.sampling_prob, case.steps, delta)
  r = np.zeros(2 * trials, bool)
  r[:trials] = True
  r = np.random.default_rng(_validate.check_int(design_seed, "design_seed", 0)).permutation(r)
  obs, w, tcfg = _train_case(key, case, sigma, r, noise_coords=noise_coords, delta=delta)
  drift = float(np.max(np.abs(w[:, :2])) * RECORD_NORM)
  if drift >= 0.1:
    raise ValueError(f"case {case.label!r}: |w . x| reached {drift:.3g}; the probe world "
                     "assumes it stays below 0.1")
  sc = scores(obs, w, sampling_prob=case.sampling_prob, noise_multiplier=sigma,
              expected_batch_size=tcfg.expected_batch_size, steps_per_epoch=steps_per_epoch(case))
  per = thresholds.bonferroni_confidence(conf, len(ADVERSARIES))
  bounds = {}
  for name in ADVERSARIES:
    b = thresholds.SplitThreshold(both_signs=True).bound(
        sc[name][r], sc[name][~r], delta=delta, confidence=per)
    bounds[name] = {"epsilon_lower": b.epsilon_lower, **b.counts()}
  best = max(ADVERSARIES, key=lambda a: bounds[a]["epsilon_lower"])
  true_eps, kind = true_epsilon(case, sigma, noise_coords=noise_coords, delta=delta)
  caught_by = [a for a in ADVERSARIES if bounds[a]["epsilon_lower"] > eps]
  return {"case": case.label, "variant": case.variant, "claimed_epsilon": eps,
          "noise_multiplier": float(sigma), "sampling_prob": case.sampling_prob,
          "base_records": case.base_records, "steps": case.steps,
          "true_epsilon": float(true_eps), "true_epsilon_kind": kind,
          "epsilon_pld_claimed": accounting.dpsgd_epsilon(sigma, case.sampling_prob,
                                                          case.steps, delta, "pld"),
          "bounds": bounds, "best_adversary": best,
          "epsilon_lower": bounds[best]["epsilon_lower"],
          "caught": bool(caught_by), "caught_by": caught_by,
          "ceiling": stats.perfect_attack_ceiling(trials - trials // 2, delta, per),
          "max_abs_logit": drift, "source": case.source, "why": case.why}
