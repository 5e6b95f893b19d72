"""Audits of privacy bugs that shipped in real DP libraries (`dpjax.audit.variants`).

Each bug is a `variants` component passed to `dpsgd.train_many` through the door a user's
component would use, while the accountant is told the claimed (q, sigma, T, delta); sigma
is calibrated (RDP) to each claimed eps in {1, 2}. Each case runs in a "probe world" where
the adversaries and the theory are exact:

  records   n0 base records x = M e_0 and a canary x = M e_1 (M = 100, label 0), IN for
            `trials` models and OUT for `trials`; K = `noise_coords` coordinates no record
            touches, where the update is the noise over the implementation's divisor.
  model     logistic regression from w = 0, learning rate 1e-7 x the expected batch size:
            a gradient r x (r = sigmoid(w . x)) has norm >= C while |w . x| <= 4.6, so the
            correct path clips it to exactly C e_0 or C e_1; every final |w . x| must be
            below 0.1, or the case is refused.

Six adversaries, each a threshold on one score chosen on half of the trials
(`estimators.SplitThreshold(both_signs=True)`) at 1 - 0.05/6 (Bonferroni: a correct
implementation is wrongly caught with probability <= 5% per case and eps):

  white-box (every privatized update u_t observed; o_t = u_t[1] B / C)
    llr        sum_t log(1 - q + q exp((2 o_t - 1) / (2 sigma^2))): the claimed mechanism's
               exact likelihood ratio (Nasr et al. 2021's white-box adversary).
    slot       sum of u_t[0] + u_t[1] over steps t = E - 1 mod E (E batches per epoch of the
               shuffle): the last batch of each epoch, one record short when n = E b - 1.
    scale_min  -min_t S_t, S_t = ||u_t on the K free coordinates||^2 (one step's divisor).
    scale_sum  -sum_t S_t (every step's divisor).
  black-box (final parameters only; z = -w_T / lr = sum_t u_t)
    final_canary  z[1];   final_scale  -||z on the free coordinates||^2.

Cases (claimed eps 1 and 2 each), with the true eps beside the claim:

  correct, in every world                exact (PLD) eps
  realised_batch_denominator (n0 = 1)    >= exact error rates of the scale_min test
  floored_expected_batch (n0 = 3)        >= exact error rates of the scale_sum test
    ... with the claimed n                exact: the claimed eps (post-processing)
  over_rate_sampler (q = 0.01)            exact: PLD at the real rate min(1, 450)
  backprop_clipping (n0 = 49, q = 0.2)    ~ PLD at sigma / 5 (the canary moves the sum
                                           by 5 C whenever its batch has >= 5 records)
  shuffle_as_poisson (n0 = 49, q = 0.02,  >= the slot test's exact Gaussian eps
    10 epochs of 50 batches of 1)

Published figures, in other settings: Opacus bug reports
github.com/meta-pytorch/opacus/issues/N: N = 571, eps ~2.5 measured vs 1.2 reported (linear
regression, 2-3 records); N = 819, neighbours "almost fully distinguishable" (small n, high
d); N = 813, a rate 45,000x too high (no eps measured); Tramer et al. 2022, claimed 0.21,
audited > 2.79 (MNIST, a poisoned input); Chua et al. 2024, shuffled batches far less
private than their Poisson accounting.

Command:   python -m experiments.audit_bugs     (the six bug rows, 1,000 models per side;
                                                about 95 s of CPU)
           python -m experiments.audit_bugs --trials 10000 --cases K1,K2,...
                                               (full scale, K1,K2,... every key of CASES in
                                                order: about 8 CPU minutes)
Measured (quick, seed 0; ceiling 4.51): both divisor bugs and the over-rate sampler at
the ceiling at claimed eps 1 and 2, backprop clipping 1.83 / 3.00 (llr), the
floored denominator with the claimed n 0.00 / 0.04 (its exact eps 0.91 / 1.83), the
shuffle 0.82 / 2.31 (slot): caught at eps 2 only. Full scale (ceiling 6.82):
BUILD_NOTES.md, "Bugs that shipped".
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import accounting, dpsgd, models
from dpjax.accounting import gdp
from dpjax.audit import estimators, stats, variants
from experiments import _common, _plots

NAME = "audit_bugs"
ADVERSARIES = ("llr", "slot", "scale_min", "scale_sum", "final_canary", "final_scale")
WHITE_BOX = ("llr", "slot", "scale_min", "scale_sum")
# The probe world's constants.
RECORD_NORM = 100.0          # M: every record is M e_k, label 0
# Learning rate / expected batch size: keeps |w . x| < 0.1, so each clipped gradient
# is constant (the update is the sum divided by about the expected batch size).
LEARNING_RATE = 1e-7
CLIP = 1.0


@dataclasses.dataclass(frozen=True)
class Case:
  """One audited configuration: a variant in a probe world."""
  key: str                   # the --cases name
  label: str
  variant: str
  sampling_prob: float
  base_records: int          # n0; the claimed data set has n0 + 1 records
  steps: int
  own_size: bool = True      # floored_expected_batch: denominator from each data set's size
  source: str = "-"          # the published figure of the bug's source
  why: str = ""


_CONTROL = ("control: the accounted mechanism, so every bound must stay at or below "
            "its exact eps")
CASES = (
    Case("correct_q0.5_n2", "correct (q = 0.5, n = 2)", "correct", 0.5, 1, 32,
         why=_CONTROL),
    Case("realised_batch_denominator", "realised_batch_denominator",
         "realised_batch_denominator", 0.5, 1, 32,
         source="opacus/issues/571: eps ~2.5 measured, 1.2 reported (2-3 records)",
         why="with one other record a divisor of 2 exists only with the canary (a quarter "
             "of the steps): the update's scale on the free coordinates shows it "
             "(scale_min; final_scale sees the average). Tests on the canary coordinate "
             "see little: noise and signal are divided alike"),
    Case("correct_q0.5_n4", "correct (q = 0.5, n = 4)", "correct", 0.5, 3, 32,
         why=_CONTROL),
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
    Case("correct_q0.01_n2", "correct (q = 0.01, n = 2)", "correct", 0.01, 1, 32,
         why=_CONTROL),
    Case("over_rate_sampler", "over_rate_sampler", "over_rate_sampler", 0.01, 1, 32,
         source="opacus/issues/813: a rate 45,000x off (no eps measured)",
         why="sampled at rate 1, not 0.01 (no amplification by sampling): the canary "
             "tests, white-box or on the final model, see it at every step; scales are "
             "unchanged"),
    Case("correct_q0.2_n50", "correct (q = 0.2, n = 50)", "correct", 0.2, 49, 32,
         why=_CONTROL),
    Case("backprop_clipping", "backprop_clipping", "backprop_clipping", 0.2, 49, 32,
         source="Tramer et al. 2022: claimed 0.21, audited > 2.79 (MNIST, poisoned input)",
         why="the canary (||x|| >= C_in, residual 1/2) moves the sum by 5 C, not C, when "
             "its batch has >= 5 records: the canary tests see it; scales are unchanged"),
    Case("correct_q0.02_n50", "correct (q = 0.02, n = 50)", "correct", 0.02, 49, 500,
         why=_CONTROL),
    Case("shuffle_as_poisson", "shuffle_as_poisson", "shuffle_as_poisson", 0.02, 49, 500,
         source="Chua et al. 2024: shuffling far less private than its Poisson accounting",
         why="49 records in 50 slots of 1 leave the last batch of every epoch empty; the "
             "canary fills it, 10 times in 10 epochs, deterministically. Only the slot "
             "test looks there (an exactly Gaussian test, mu = sqrt(5) / sigma); the "
             "Poisson-likelihood tests see the canary at about the claimed rate. Its "
             "bound at claimed eps 1 needs about 10,000 trials per side to pass 1"),
)


# The quick scale (`./run.sh all`): every bug, and the floored denominator with the
# claimed n, which is the correct mechanism up to a public rescaling (each case costs
# a compile of about 10 s); `--cases` with every key adds the five controls.
QUICK_CASES = ("realised_batch_denominator", "floored_expected_batch",
               "floored_expected_batch_public", "over_rate_sampler", "backprop_clipping",
               "shuffle_as_poisson")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditBugsConfig(_common.ExperimentConfig):
  """What `run` computes (defaults = the quick scale)."""
  trials: int = _common.option(1000, "Models per side (canary IN / OUT) per case and eps.")
  epsilons: tuple[float, ...] = _common.option((1.0, 2.0), "Claimed eps values.")
  cases: tuple[str, ...] = _common.option(
      QUICK_CASES, "Which cases to run (keys of CASES; the default leaves out the five "
      "controls).",
      choices=tuple(c.key for c in CASES))
  noise_coords: int = _common.option(
      100, "K: coordinates no record touches (where the update is noise / divisor).")
  delta: float = _common.option(1e-5, "delta of the claims.", flag=False)
  confidence: float = _common.option(0.95, "Family-wise confidence over the six "
                                     "adversaries of one case and eps.", flag=False)

  def __post_init__(self):
    super().__post_init__()
    _common.check_int(self, "trials", minimum=4)
    _common.check_int(self, "noise_coords")
    _common.check_positive(self, "epsilons")
    _common.check_range(self, "delta", "confidence", low=0, high=1, open_low=True,
                        open_high=True)


# ----------------------------------------------------------------------------------
# Exact theory: the true eps of each case, or a lower bound from one test's exact rates.


def true_epsilon(case: Case, sigma: float, cfg: AuditBugsConfig) -> tuple[float, str]:
  """(eps, kind): the case's true eps ("exact"), a lower bound (">="), or an estimate ("~")."""
  q, t, d = case.sampling_prob, case.steps, cfg.delta
  claim = dpsgd.DpSgdConfig(dataset_size=case.base_records + 1, sampling_prob=q, num_steps=t,
                            noise_multiplier=sigma, delta=d)
  if case.variant == "correct" or (case.variant == "floored_expected_batch"
                                   and not case.own_size):
    return variants.exact_epsilon("correct", claim), "exact"
  if case.variant == "realised_batch_denominator":
    return variants.realised_denominator_lower_bound(cfg.noise_coords, case.base_records, q,
                                                     t, d), ">="
  if case.variant == "floored_expected_batch":
    return variants.floored_denominator_lower_bound(cfg.noise_coords, case.base_records, q,
                                                    t, d), ">="
  if case.variant == "over_rate_sampler":
    return variants.exact_epsilon("over_rate_sampler", claim), "exact"
  if case.variant == "backprop_clipping":
    return accounting.dpsgd_epsilon(sigma * CLIP / _backprop_canary_norm(), q, t, d,
                                    "pld"), "~"
  if case.variant == "shuffle_as_poisson":
    e = _steps_per_epoch(case)
    return gdp.gaussian_epsilon(d, variants.shuffle_slot_mu(sigma, t, e)), ">="
  raise ValueError(f"no theory for case {case.label!r}")


def _backprop_canary_norm() -> float:
  """The canary's contribution under backprop_clipping in a batch of >= 5 records:
  |r| C_in = 0.5 C / BACKPROP_GRAD_CLIP."""
  return 0.5 * CLIP / variants.BACKPROP_GRAD_CLIP


def _steps_per_epoch(case: Case) -> int:
  n = case.base_records + 1
  b = max(1, int(round(case.sampling_prob * n)))
  return max(1, n // b)


# ----------------------------------------------------------------------------------
# Training and scores.


def _data(case: Case, k: int):
  n = case.base_records + 1
  x = np.zeros((n, 2 + k), np.float32)
  x[:case.base_records, 0] = RECORD_NORM
  x[case.base_records, 1] = RECORD_NORM
  return jnp.asarray(x), jnp.zeros((n,), jnp.int32)


def _observe(u):
  w = u["w"]
  return jnp.stack([w[0], w[1], jnp.sum(jnp.square(w[2:]))])


def _design(trials: int, seed: int) -> np.ndarray:
  """bool[2 trials]: the canary's inclusion, exactly `trials` IN, in a random order."""
  r = np.zeros(2 * trials, bool)
  r[:trials] = True
  return np.random.default_rng(seed).permutation(r)


def _train(case: Case, sigma: float, cfg: AuditBugsConfig, key, r: np.ndarray):
  """(observations float64[M, T, 3], final w float64[M, F]) of the case at sigma."""
  x, y = _data(case, cfg.noise_coords)
  n = case.base_records + 1
  model = models.logistic_regression(int(x.shape[1]))
  train_cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=case.sampling_prob,
                                num_steps=case.steps, l2_clip_norm=CLIP,
                                noise_multiplier=sigma, delta=cfg.delta,
                                learning_rate=LEARNING_RATE * case.sampling_prob * n)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", variants.FaultyDpSgdWarning)
    v = variants.variant(case.variant, train_cfg, model)
  keep = np.ones((r.size, n), bool)
  keep[:, case.base_records] = r
  obs = np.zeros((r.size, case.steps, 3))
  w = np.zeros((r.size, int(x.shape[1])))
  if case.variant == "floored_expected_batch" and case.own_size:
    # The shipped code took n from the data set it was given: each side its own size.
    groups = [(r, v.privatizer.on_dataset(n)), (~r, v.privatizer.on_dataset(n - 1))]
  else:
    groups = [(np.ones_like(r), None)]
  for g, (sel, priv) in enumerate(groups):
    comps = dict(v.components)
    if priv is not None:
      comps["privatizer"] = priv
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpsgd.UnaccountedComponentWarning)
      out = dpsgd.train_many(jax.random.fold_in(key, g), x, y, jnp.asarray(keep[sel]),
                             v.config, model, observe_fn=_observe,
                             perf=dpsgd.PerformanceFlags(progress=False,
                                                         max_chunk=int(np.sum(sel))), **comps)
    if not np.all(np.asarray(out.finite)):
      raise ValueError(f"case {case.label!r}: a model diverged; no audit is computed")
    obs[sel] = np.asarray(out.observations, np.float64)
    w[sel] = np.asarray(out.params["w"], np.float64)
  return obs, w, v.config


def scores(obs: np.ndarray, w: np.ndarray, *, sampling_prob: float, noise_multiplier: float,
           expected_batch_size: float, steps_per_epoch: int) -> dict:
  """The six adversaries' scores (higher = IN) from observations [M, T, 3] and final w [M, F]."""
  u0, u1, s = obs[..., 0], obs[..., 1], obs[..., 2]
  o = u1 * expected_batch_size / CLIP
  x = (2.0 * o - 1.0) / (2.0 * noise_multiplier ** 2)
  q = sampling_prob
  llr = np.sum(np.logaddexp(math.log1p(-q), math.log(q) + x) if q < 1 else x, axis=1)
  t = np.arange(obs.shape[1])
  last = (t % steps_per_epoch) == steps_per_epoch - 1
  z = -w / (LEARNING_RATE * expected_batch_size)
  return {"llr": llr,
          "slot": np.sum((u0 + u1)[:, last], axis=1),
          "scale_min": -np.log(np.min(s, axis=1)),
          "scale_sum": -np.log(np.sum(s, axis=1)),
          "final_canary": z[:, 1],
          "final_scale": -np.log(np.sum(np.square(z[:, 2:]), axis=1))}


def _audit(case: Case, eps: float, cfg: AuditBugsConfig, key) -> dict:
  sigma = accounting.calibrate_noise(eps, case.sampling_prob, case.steps, cfg.delta)
  r = _design(cfg.trials, cfg.seed)
  obs, w, tcfg = _train(case, sigma, cfg, key, r)
  drift = float(np.max(np.abs(w[:, :2])) * RECORD_NORM)
  if drift >= 0.1:
    raise ValueError(f"case {case.label!r}: |w . x| reached {drift:.3g}; the probe world "
                     "assumes it stays below 0.1")
  sc = scores(obs, w, sampling_prob=case.sampling_prob, noise_multiplier=sigma,
              expected_batch_size=tcfg.expected_batch_size,
              steps_per_epoch=_steps_per_epoch(case))
  per = 1.0 - (1.0 - cfg.confidence) / len(ADVERSARIES)
  bounds = {}
  for name in ADVERSARIES:
    b = estimators.SplitThreshold(both_signs=True).bound(
        sc[name][r], sc[name][~r], delta=cfg.delta, confidence=per)
    bounds[name] = {"epsilon_lower": b.epsilon_lower, **b.counts()}
  best = max(ADVERSARIES, key=lambda a: bounds[a]["epsilon_lower"])
  true_eps, kind = true_epsilon(case, sigma, cfg)
  lower = bounds[best]["epsilon_lower"]
  caught_by = [a for a in ADVERSARIES if bounds[a]["epsilon_lower"] > eps]
  return {"case": case.label, "variant": case.variant, "claimed_epsilon": float(eps),
          "noise_multiplier": float(sigma), "sampling_prob": case.sampling_prob,
          "base_records": case.base_records, "steps": case.steps,
          "true_epsilon": float(true_eps), "true_epsilon_kind": kind,
          "epsilon_pld_claimed": accounting.dpsgd_epsilon(sigma, case.sampling_prob,
                                                          case.steps, cfg.delta, "pld"),
          "bounds": bounds, "best_adversary": best, "epsilon_lower": lower,
          "caught": bool(caught_by), "caught_by": caught_by,
          "ceiling": stats.perfect_attack_ceiling(cfg.trials - cfg.trials // 2, cfg.delta, per),
          "max_abs_logit": drift, "source": case.source, "why": case.why}


# ----------------------------------------------------------------------------------
# Report.


def _fmt_true(row) -> str:
  v = row["true_epsilon"]
  txt = "∞" if not math.isfinite(v) else (f"{v:.3g}" if v < 1e3 else f"{v:.3g}")
  return {"exact": txt, ">=": "≥ " + txt, "~": "≈ " + txt}[row["true_epsilon_kind"]]


def _tables(cfg: AuditBugsConfig, rows: list[dict]) -> list[_common.Table]:
  cols = ["case", "claimed ε", "σ", "true ε", "ε_lower (best)", "adversary"] + \
      [f"{a}" for a in ADVERSARIES] + ["caught"]
  body = []
  for r in rows:
    body.append([r["case"], r["claimed_epsilon"], r["noise_multiplier"], _fmt_true(r),
                 r["epsilon_lower"], r["best_adversary"]]
                + [r["bounds"][a]["epsilon_lower"] for a in ADVERSARIES]
                + [("yes: " + ", ".join(r["caught_by"])) if r["caught"] else "no"])
  ceiling = rows[0]["ceiling"] if rows else float("nan")
  note = (f"{cfg.trials} models per side per row (canary IN / OUT), δ = {cfg.delta:g}; each "
          f"adversary's bound at {1 - (1 - cfg.confidence) / len(ADVERSARIES):.4f} "
          f"(Bonferroni over the six: {cfg.confidence:g} per row), threshold chosen on half "
          f"the trials and evaluated on the other half; a perfect adversary could certify at "
          f"most {ceiling:.2f}. Caught = some adversary's bound exceeds the claimed ε. "
          "White-box: llr, slot, scale_min, scale_sum; black-box (final model): final_canary, "
          "final_scale. True ε: exact (PLD) where the mechanism is a subsampled Gaussian, "
          "'≥' an exact lower bound from one test's error rates, '≈' an estimate. Probe "
          f"world: n0 base records M e_0, a canary M e_1, {cfg.noise_coords} coordinates "
          "no record touches, logistic regression, C = 1. The published figures come from "
          "other settings: opacus/issues/571 a linear regression on 2-3 records, 819 its "
          "f-DP analysis, 813 a 100,000-record data set, Tramèr et al. a network trained "
          "on MNIST with a poisoned image, Chua et al. Poisson vs shuffled DP-SGD at "
          "large scale.")
  seen, why = set(), []
  for r in rows:
    if r["case"] not in seen:
      seen.add(r["case"])
      why.append([r["case"], r["why"], r["source"]])
  return [_common.Table(title="Bugs that shipped in DP libraries: caught at claimed ε?",
                        columns=cols, rows=body, note=note),
          _common.Table(title="Why each case is (or is not) caught, and the published figure",
                        columns=["case", "why", "published (their setting; see above)"],
                        rows=why)]


def _figure(out_dir: str, rows: list[dict], epsilons) -> str:
  fn = "audit_bugs.png"
  with _plots.figure(out_dir, fn, ncols=len(epsilons), figsize=(5.5 * len(epsilons), 4.6),
                     squeeze=False) as (fig, axes):
    for ax, e in zip(axes[0], epsilons):
      sel = [r for r in rows if r["claimed_epsilon"] == float(e)]
      xs = np.arange(len(sel))
      ax.bar(xs, [r["epsilon_lower"] for r in sel], color=[
          "tab:red" if r["caught"] else "tab:blue" for r in sel], label="ε_lower (best)")
      tv = [min(r["true_epsilon"], 50.0) for r in sel]
      ax.plot(xs, tv, "k_", ms=14, mew=2, label="true ε (capped at 50; ≥ / ≈ see table)")
      ax.axhline(float(e), color="grey", ls="--", label="claimed ε")
      ax.set_yscale("symlog", linthresh=1.0)
      ax.set_xticks(xs)
      ax.set_xticklabels([r["case"] for r in sel], rotation=60, ha="right", fontsize=6)
      ax.set_title(f"claimed ε = {e:g} (red: caught)")
    axes[0][0].legend(fontsize=7)
  return fn


def run(cfg: AuditBugsConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Audits the selected cases at each eps, writes the figure; returns `_common.finish`'s dict."""
  key = jax.random.key(cfg.seed)
  rows = []
  # A row's key depends on its case's place in CASES and its eps's place in the list,
  # not on which other cases run, so a row is the same in every selection.
  todo = [(i, c, j, e) for i, c in enumerate(CASES) if c.key in cfg.cases
          for j, e in enumerate(cfg.epsilons)]
  cases = sorted({i for i, *_ in todo})
  for i, c, j, e in tqdm(todo, desc=NAME, disable=not progress):
    rows.append(_audit(c, float(e), cfg, jax.random.fold_in(jax.random.fold_in(key, i), j)))
  correct_ok = all(r["epsilon_lower"] <= r["true_epsilon"] for r in rows
                   if r["true_epsilon_kind"] == "exact")
  broken = [r for r in rows if r["true_epsilon"] >= 2 * r["epsilon_pld_claimed"]]
  summary = (
      f"{len(cases)} configurations at claimed ε = "
      + ", ".join(f"{e:g}" for e in cfg.epsilons) + f", {cfg.trials} models per side. "
      + "Caught: " + (", ".join(f"{r['case']} at ε = {r['claimed_epsilon']:g} "
                                f"({r['epsilon_lower']:.2f} by {r['best_adversary']})"
                                for r in rows if r["caught"]) or "none") + ". "
      + "Not caught: " + (", ".join(f"{r['case']} at ε = {r['claimed_epsilon']:g}"
                                    for r in rows if not r["caught"]) or "none") + ". "
      + f"Every bound at or below the exact ε where it is known: {correct_ok}. "
      + "Breaking the claim by 2x or more (true ε, its exact lower bound, or for "
        "backprop clipping its estimate, ≥ 2x the exact claimed ε): "
      + (", ".join(sorted({r["case"] for r in broken})) or "none") + ".")
  record = {"rows": rows, "adversaries": list(ADVERSARIES), "white_box": list(WHITE_BOX),
            "trials": cfg.trials, "all_exact_below": correct_ok}
  fig = _figure(out_dir, rows, cfg.epsilons)
  return _common.finish(cfg, out_dir, NAME, record, tables=_tables(cfg, rows), figures=[fig],
                        summary=summary, quiet=quiet)


def main():
  """`python -m experiments.audit_bugs [--flags]`: flags from AuditBugsConfig."""
  _common.app_run(NAME, AuditBugsConfig, run)


if __name__ == "__main__":
  main()
