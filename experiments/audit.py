"""Canary audit of DP-SGD: empirical eps lower bounds against the accountant's eps (lecture §6.2).

Setting (code 04 demo 3): 150 credit records (cubic features, logistic regression)
plus canaries (`dpjax.data.canaries`), DP-SGD with q = 0.2, T = 500, C = 1,
delta = 1e-5, sigma calibrated (RDP) to each claimed eps. For every eps, 2N models
are trained in one vmapped program per chunk. Every run carries two canaries with
independent, balanced inclusion bits (see `dpjax.audit.canary`): the lecture's
record canary, attacked by the BLACK-BOX adversary (final logit; threshold chosen
on N/2 trials per side and evaluated on the other N/2), and a gradient canary in
an unused coordinate, attacked by the WHITE-BOX adversary of Nasr et al. 2021
(exact per-step likelihood ratio of the privatized updates). So N models with and
N without each canary = 2N models per eps serve both adversaries: `--trials 10000`
trains 80,000 models for the 4 eps (+ 20,000 for the no-noise check), not 160,000.

The audit policy is the library's (`dpjax.audit.estimators`): black-box,
`SplitThreshold(both_signs=True)` at 95%; white-box, `Bonferroni` over a
`FixedThreshold` (fixed in advance from the claimed mechanism's likelihood-ratio
distribution, evaluated on all N trials per side) and a `SplitThreshold`, each at
97.5%, the larger bound reported; `bootstrap_spread` for the "± sd" columns,
`best_certifiable` for the best bound any adversary could certify with the same
trials and procedure, `gdp_estimate` for the GDP column. Finished chunks are kept
in a `dpjax.audit.store.ChunkStore` under <out>/chunks/, and `--resume` continues
an interrupted run without redoing them.

Printed per eps: the claimed eps (the accountant's), eps_lower of each adversary
with 95% confidence, the trials' ceiling (a perfect attack: ~ln(N/3.7)), and the
best certifiable bound.

Command:   python -m experiments.audit --trials 10000     (about 380 CPU-seconds, plus
                                                           about 75 for the per-step rows)
           python -m experiments.audit                     (--trials 1000: also about a
                                                           minute of CPU, mostly compiling)
           python -m experiments.audit --variant noise_without_clip_norm --epsilons 1
A faulty variant's results go to results/audit_variants/<variant>/ unless --out is
given.

Per-step white-box audit (`--per_step`, on by default; Nasr et al. 2023,
`dpjax.audit.per_step`, trained by `dpjax.audit.run.per_step_audit`): fresh runs with
many Dirac canaries (each on its own unused coordinate, IN in half the runs), every
step's privatized update a trial. Estimate (a), from `--per_step_estimate_runs` (8) runs
x 2048 canaries: the step fitted in the subsampled-Gaussian family (q known), composed
over T by the PLD accountant, at its one-sided 95% lower limit (valid only in that
family). Bound (b), from `--per_step_bound_runs` (1024) runs x 128 canaries: Clopper-
Pearson on the per-step errors at 7 thresholds fixed from the claim, the certified
trade-off curve composed T-fold; no parametric assumption, valid if the T steps are
i.i.d. copies of one step (true for the Dirac canary of DP-SGD as claimed). Its table
(claimed eps, exact eps, (a), (b), fractions of exact, runs, assumption) follows the
others, its rows go to results.json under "per_step"; it adds about 75 CPU-seconds and
is recomputed (not stored) on --resume. Expected (seed 0) at claimed eps 1 / 2 / 4 / 8:
(a) 0.77 / 1.57 / 3.64 / 7.26 (0.85 / 0.85 / 0.99 / 0.98 of exact; point estimates 0.88 /
1.68 / 3.77 / 7.43), (b) 0.78 / 1.63 / 3.45 / 6.94 (0.85 / 0.89 / 0.94 / 0.94 of exact);
the run-level bound on (b)'s runs (each (run, canary) one trial, no assumption on the
steps) 0.58 / 1.08 / 2.36 / 4.52 (0.58-0.64 of exact).

Many canaries per run (`--canaries_per_run K`, K > 1): every run carries K gradient
canaries, canary j = C e_j in its own unused coordinate (`audit_data(...,
unused_features=K)`), IN in a fixed random quarter of the runs
(`canary.canaries_design`, rows paired so both sides of the black-box test carry the
same canary sets) and Poisson-sampled with its own bits. For DP-SGD as claimed the
(run, canary) pairs are independent white-box trials (`dpjax.audit.canary`), so a run
gives K of them: 2N K trials in all, a quarter IN. IN : OUT = 1 : 3 because the bound
at large eps is limited by the few false positives; alpha is split 4 : 1 between the
fixed threshold and the held-out one. Scores are the same likelihood ratio, computed
in XLA in float32 per chunk; chunks shrink to keep models x T x K observations within
`observation_budget`. With the default K = 1, a white-box-only companion audit with
`--companion_canaries` (10) canaries per run is added at the same claimed eps (its
table follows the main one); the main table's numbers are those of K = 1 alone.
Measured (`--trials 10000 --canaries_per_run 100`, seed 0; 500,000 IN / 1,500,000
OUT trials): white-box eps_lower 0.68 / 1.41 / 2.84 / 5.73 for claimed eps
1 / 2 / 4 / 8, i.e. 0.75 / 0.77 / 0.77 / 0.77 of the exact (PLD) eps 0.91 / 1.84 /
3.69 / 7.41, each below it; best certifiable on expected counts 0.68 / 1.44 / 2.87 /
5.24 (0.75 / 0.78 / 0.78 / 0.71 of exact; at eps 8 this run's 5 false positives,
against 9 expected, put it one and a half sd above). Cost: `benchmarks.audit_canaries`
times a chunk of 500 models with 100 canaries at 3.42x one with a single canary
(100 times the trials).
Expected (--trials 10000, seed 0): white-box eps_lower 0.29 / 0.94 / 1.79 / 3.58 for
claimed eps 1 / 2 / 4 / 8 against a best certifiable bound of 0.31 / 0.79 / 1.75 / 3.35
(on expected counts; ours exceeds it by sampling luck of about one sd, and stays below
the exact eps 0.91 / 1.84 / 3.69 / 7.41); black-box 0.05 / 0.73 / 1.53 / 2.92; no noise:
each adversary at its procedure's ceiling (white-box 7.73 =
10,000 trials at 97.5%, black-box 7.21 = 5,000 at 95%; a perfect attack at 95% on
10,000 would be 7.90, the lecture's figure).
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import numpy as np
from tqdm import tqdm

from dpjax import accounting, models
from dpjax.audit import run as audit_run
from dpjax.audit import per_step, stats, store, variants
from dpjax.data import canaries
from experiments import _common, _plots

NAME = "audit"
THREAT_MODELS = audit_run.THREAT_MODELS
# The lecture's trials' ceilings (exercise 5): 0 errors in 500 / 10,000 per side.
LECTURE_CEILING = {500: 4.91, 10_000: 7.90}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditConfig(_common.ExperimentConfig):
  """What `run` computes (defaults = the lecture's setting at 1000 trials; tests shrink them)."""
  trials: int = _common.option(1000, "Models per side (with / without each canary).")
  epsilons: tuple[float, ...] = _common.option((1.0, 2.0, 4.0, 8.0), "Claimed eps values.")
  threat_model: str = _common.option("both", "Which adversaries' bounds to report.",
                                     choices=THREAT_MODELS)
  variant: str = _common.option("correct",
                                "DP-SGD variant to audit (faulty ones for testing the audit).",
                                choices=variants.VARIANTS)
  resume: bool = _common.option(False, "Continue an interrupted run from <out>/chunks.")
  invalid_chunks: str = _common.option(
      "recompute", "On resume, a stored chunk that fails verification (corrupt, of another "
      "run or setting): recompute it (with a warning) or refuse (exit with one line).",
      choices=("recompute", "refuse"))
  no_noise: bool = _common.option(True, "Also audit sigma = 0 (the ceiling check).")
  chunk_models: int = _common.option(2000, "Models per chunk written to disk.")
  canaries_per_run: int = _common.option(
      1, "Gradient canaries per run, K: each in its own unused coordinate with its own "
      "inclusion and sampling bits, so each run gives K white-box trials.")
  companion_canaries: int = _common.option(
      10, "With canaries_per_run = 1: also run a white-box-only audit of the same claims "
          "with this many canaries per run (its table follows the main one; 0: none).")
  per_step: bool = _common.option(
      True, "Also run the per-step white-box audit (Nasr et al. 2023: every step a trial) "
            "of each claimed eps; its table follows the others.")
  per_step_estimate_runs: int = _common.option(
      8, "Per-step estimate (a): training runs (a multiple of 4).")
  per_step_estimate_canaries: int = _common.option(
      2048, "Per-step estimate (a): Dirac canaries per run.")
  per_step_bound_runs: int = _common.option(
      1024, "Per-step bound (b): training runs (a multiple of 4).")
  per_step_bound_canaries: int = _common.option(128, "Per-step bound (b): Dirac canaries per run.")
  # The DP-SGD and audit constants (not flags; tests shrink them).
  delta: float = _common.option(1e-5, "delta of the claims.", flag=False)
  confidence: float = _common.option(0.95, "Confidence of every reported bound.", flag=False)
  num_steps: int = _common.option(500, "DP-SGD steps T.", flag=False)
  sampling_prob: float = _common.option(0.2, "Poisson sampling rate q.", flag=False)
  base_size: int = _common.option(150, "Base records besides the canary.", flag=False)
  canary_in_fraction: float = _common.option(
      0.25, "With K > 1: fraction of runs in which each gradient canary is IN.", flag=False)
  observation_budget: int = _common.option(
      2 ** 25, "With K > 1: most white-box observations (models x T x K) held at once.",
      flag=False)

  def __post_init__(self):
    super().__post_init__()                  # seed, and threat_model / variant in their choices
    _common.check_int(self, "trials", minimum=2)
    if self.trials % 2:
      raise ValueError(f"trials must be an even integer >= 2 (a balanced design of 2 * trials "
                       f"models in groups of 4), got {self.trials!r}")
    _common.check_positive(self, "epsilons")
    _common.check_int(self, "chunk_models", minimum=4)
    if self.chunk_models % 4:
      raise ValueError(f"chunk_models must be a positive multiple of 4, got {self.chunk_models!r}")
    _common.check_int(self, "num_steps")
    _common.check_int(self, "base_size")
    _common.check_int(self, "canaries_per_run")
    _common.check_int(self, "companion_canaries", minimum=0)
    _common.check_int(self, "observation_budget")
    for name in ("per_step_estimate_runs", "per_step_bound_runs"):
      _common.check_int(self, name, minimum=4)
      if getattr(self, name) % 4:
        raise ValueError(f"{name} must be a positive multiple of 4, got {getattr(self, name)!r}")
    _common.check_int(self, "per_step_estimate_canaries")
    _common.check_int(self, "per_step_bound_canaries")
    _common.check_range(self, "canary_in_fraction", low=0, high=1, open_low=True,
                        open_high=True)
    _common.check_range(self, "delta", "confidence", low=0, high=1, open_low=True,
                        open_high=True)
    _common.check_range(self, "sampling_prob", low=0, high=1, open_low=True)
    for e in self.epsilons:          # each claimed eps needs a sigma in the supported range
      try:
        accounting.calibrate_noise(float(e), self.sampling_prob, self.num_steps, self.delta)
      except ValueError as err:
        raise ValueError(f"epsilons: {err}") from None


def _spec(cfg: AuditConfig) -> audit_run.CanaryAuditSpec:
  return audit_run.CanaryAuditSpec(
      trials=cfg.trials, sampling_prob=cfg.sampling_prob, num_steps=cfg.num_steps,
      delta=cfg.delta, confidence=cfg.confidence, variant=cfg.variant,
      threat_model=cfg.threat_model, canaries_per_run=cfg.canaries_per_run,
      canary_in_fraction=cfg.canary_in_fraction, chunk_models=cfg.chunk_models,
      observation_budget=cfg.observation_budget, design_seed=cfg.seed)


def run(cfg: AuditConfig, out_dir: str, *, progress: bool = True, quiet: bool = False,
        max_new_chunks: int | None = None) -> dict:
  """Trains (or resumes) every chunk, audits each setting, writes results.json and figures.

  Args:
    cfg: the configuration.
    out_dir: output directory (results.json, figures, chunks/).
    progress: show a progress bar.
    quiet: print nothing.
    max_new_chunks: stop (incomplete) after training this many chunks (time-boxed
      runs; the next run with `resume=True` continues).
  Returns:
    {"rows", "complete", "chunks_trained", "path"} (path None while incomplete), and
    when complete also `_common.finish`'s "record", "tables" and "figures".
  """
  k_can = cfg.canaries_per_run
  k_data, k_train = jax.random.split(jax.random.key(cfg.seed))
  data = canaries.audit_data(k_data, cfg.base_size, unused_features=k_can)
  model = models.logistic_regression(data.num_features)
  spec = _spec(cfg)
  settings = audit_run.settings(cfg.epsilons, cfg.sampling_prob, cfg.num_steps, cfg.delta,
                                cfg.no_noise)
  manifest = {"seed": cfg.seed, "trials": cfg.trials, "variant": cfg.variant,
              "chunk_models": cfg.chunk_models, "delta": cfg.delta, "num_steps": cfg.num_steps,
              "sampling_prob": cfg.sampling_prob, "base_size": cfg.base_size,
              "settings": [dataclasses.asdict(s) for s in settings]}
  if k_can > 1:
    manifest.update(canaries_per_run=k_can, canary_in_fraction=cfg.canary_in_fraction,
                    chunk_models=spec.models_per_chunk)
  chunks = store.ChunkStore(os.path.join(out_dir, "chunks"), manifest, resume=cfg.resume,
                            on_invalid=cfg.invalid_chunks)
  trained, complete = audit_run.run_chunks(k_train, spec, settings, data, model, chunks,
                                           progress=progress, max_new_chunks=max_new_chunks)
  if not complete:
    return {"rows": [], "complete": False, "chunks_trained": trained, "path": None}

  companion = None
  if k_can == 1 and cfg.companion_canaries > 1:
    sub = dataclasses.replace(cfg, canaries_per_run=cfg.companion_canaries,
                              companion_canaries=0, threat_model="white_box", no_noise=False,
                              per_step=False)
    companion = run(sub, os.path.join(out_dir, f"canaries{cfg.companion_canaries}"),
                    progress=progress, quiet=True, max_new_chunks=(
                        None if max_new_chunks is None else max_new_chunks - trained))
    trained += companion["chunks_trained"]
    if not companion["complete"]:
      return {"rows": [], "complete": False, "chunks_trained": trained, "path": None}

  rows, roc = [], {}
  for si, st in enumerate(settings):
    r, s, bb, wb = audit_run.load_setting(k_train, spec, settings, chunks, si)
    rows.append(audit_run.evaluate(spec, st, r, s, bb, wb))
    if st.sigma > 0:
      roc[st.name] = audit_run.roc_record(spec, st, wb[s], wb[~s])
  results = {"rows": rows, "variant": cfg.variant, "trials": cfg.trials,
             "canaries_per_run": k_can,
             "threat_model": cfg.threat_model, "models_per_setting": spec.models_per_setting,
             "shared_runs": True, "white_box_roc": roc,
             "lecture_ceiling": {str(k): v for k, v in LECTURE_CEILING.items()}}
  tables = _tables(cfg, rows)
  if companion is not None:
    results["companion"] = {"canaries_per_run": cfg.companion_canaries,
                            "rows": companion["rows"]}
    tables.insert(1, _companion_table(cfg, companion["rows"]))
  if cfg.per_step and k_can == 1:
    step_rows = _per_step_rows(cfg, settings, progress)
    results["per_step"] = {
        "rows": step_rows, "estimate_assumptions": {
            "q = 1": per_step.ASSUMPTION_GDP, "q < 1": per_step.ASSUMPTION_SUBSAMPLED_GAUSSIAN},
        "bound_assumption": per_step.ASSUMPTION_IID_STEPS}
    tables.append(_per_step_table(cfg, step_rows))
  figures = [_figure_bounds(out_dir, results), _figure_roc(out_dir, results)]
  out = _common.finish(cfg, out_dir, NAME, results, tables=tables, figures=figures,
                       summary=_summary(cfg, rows), quiet=quiet)
  return {**out, "rows": rows, "complete": True, "chunks_trained": trained}


def _tables(cfg: AuditConfig, rows: list[dict]) -> list[_common.Table]:
  share = audit_run.FIXED_ALPHA_SHARE
  trials = cfg.trials
  k = cfg.canaries_per_run
  title = (f"Canary audit, variant = {cfg.variant}, {trials} trials per side ({2 * trials} "
           "models per row, shared by both adversaries), 95% confidence, delta = 1e-5")
  if k > 1:
    title += (f"; {k} gradient canaries per run: white-box trials "
              f"{rows[0]['white_box_trials_in']} IN / {rows[0]['white_box_trials_out']} OUT")
  table = _common.Table(
      title=title,
      columns=["claimed eps", "sigma", "eps (PLD)", "eps_lower black-box", "± sd",
               "best certifiable (black-box procedure)", "eps_lower white-box", "± sd",
               "best certifiable (white-box procedure)", "white-box / best",
               "trials' ceiling", "GDP estimate (white-box)", "white-box / eps (PLD)"],
      rows=[[row["epsilon"], row["sigma"], row["epsilon_pld"], row["epsilon_lower_black_box"],
             row.get("epsilon_lower_black_box_sd"), row["best_certifiable_black_box"],
             row["epsilon_lower_white_box"], row.get("epsilon_lower_white_box_sd"),
             row["best_certifiable"], row["white_box_fraction_of_best"],
             row["ceiling"], row["gdp_estimate_white_box"], row["white_box_fraction_of_exact"]]
            for row in rows],
      note=(("White-box: the larger of two bounds at 97.5% each (Bonferroni, so 95% jointly): "
             "the threshold fixed in advance from the claimed mechanism's exact likelihood "
             f"ratio, evaluated on all {trials} trials per side, and a threshold chosen on half "
             "the trials (robust when the implementation is not what is claimed). "
             if k == 1 else
             f"White-box, on the {rows[0]['white_box_trials_in']} IN and "
             f"{rows[0]['white_box_trials_out']} OUT (run, canary) trials: the larger of the "
             "threshold fixed in advance from the claimed mechanism's exact likelihood ratio "
             f"(at {1 - share * (1 - cfg.confidence):g}) and a threshold chosen "
             f"on half the trials (at {1 - (1 - share) * (1 - cfg.confidence):g}), "
             "a union bound at 95%; the trials are independent for DP-SGD as claimed "
             "(dpjax.audit.canary), and its ceiling (0 errors) is "
             f"{rows[0]['ceiling_white_box']:.3f}, not the trials' ceiling column, which is "
             "for the models. ")
            + "Black-box: "
            f"threshold chosen on {trials // 2} trials per side, evaluated on the other "
            f"{trials // 2}, at 95%. 'Best certifiable' = what a perfect adversary for the "
            "accounted mechanism would certify with the same trials and procedure on expected "
            "counts (its trade-off curve, from the exact privacy-loss distribution); 'trials' "
            f"ceiling' = a perfect attack (0 errors) on {trials} trials per side at 95% "
            "(~ln(N/3.7)). The GDP estimate (Nasr et al. 2023) assumes a Gaussian trade-off "
            "curve and is not a bound. '± sd': bootstrap spread of a bound when its error counts "
            "are redrawn at the observed rates (white-box: of the fixed-threshold test)."))
  ceil_rows = [[n, stats.perfect_attack_ceiling(n), LECTURE_CEILING.get(n)]
               for n in sorted({500, 10_000, trials, trials // 2})]
  ceil_table = _common.Table(title="The trials' ceiling (delta = 0): ours vs the lecture",
                             columns=["evaluation trials per side", "ours", "lecture"],
                             rows=ceil_rows)
  return [table, ceil_table]


def _companion_table(cfg: AuditConfig, rows: list[dict]) -> _common.Table:
  """The white-box audit with `companion_canaries` canaries per run, beside the exact eps."""
  share = audit_run.FIXED_ALPHA_SHARE
  k = cfg.companion_canaries
  return _common.Table(
      title=(f"White-box audit with {k} gradient canaries per run ({2 * cfg.trials} models per "
             f"row: {rows[0]['white_box_trials_in']} IN / {rows[0]['white_box_trials_out']} OUT "
             "trials), 95% confidence, delta = 1e-5"),
      columns=["claimed eps", "eps (PLD)", "eps_lower white-box", "fixed threshold",
               "held-out threshold", "best certifiable", "white-box / eps (PLD)"],
      rows=[[r["epsilon"], r["epsilon_pld"], r["epsilon_lower_white_box"],
             r["white_box_fixed_threshold"], r["white_box_held_out_threshold"],
             r["best_certifiable"], r["white_box_fraction_of_exact"]] for r in rows],
      note=(f"Each run carries {k} gradient canaries, each C e_j in its own unused coordinate, "
            f"IN in a fraction {cfg.canary_in_fraction:g} of the runs (fixed design) and "
            "Poisson-sampled with its own bits: for DP-SGD as claimed the (run, canary) "
            "trials are independent (dpjax.audit.canary). Bound: the larger of the "
            f"threshold fixed in advance from the claimed likelihood ratio (at "
            f"{1 - share * (1 - cfg.confidence):g}) and a held-out threshold "
            f"(at {1 - (1 - share) * (1 - cfg.confidence):g}), a union bound at "
            "95%. 'Best certifiable': a perfect adversary on expected counts with these "
            "trials."))


def _per_step_rows(cfg: AuditConfig, settings, progress: bool) -> list[dict]:
  """The per-step white-box audit of each noisy claim (`audit_run.per_step_audit`)."""
  spec = audit_run.PerStepSpec(
      sampling_prob=cfg.sampling_prob, num_steps=cfg.num_steps, delta=cfg.delta,
      confidence=cfg.confidence, variant=cfg.variant,
      estimate_runs=cfg.per_step_estimate_runs,
      estimate_canaries=cfg.per_step_estimate_canaries, bound_runs=cfg.per_step_bound_runs,
      bound_canaries=cfg.per_step_bound_canaries)
  key = jax.random.fold_in(jax.random.key(cfg.seed), 1)      # independent of the main audit
  k_data = jax.random.split(jax.random.key(cfg.seed))[0]     # the same base records

  def inputs(k):
    data = canaries.audit_data(k_data, cfg.base_size, unused_features=k)
    return data, models.logistic_regression(data.num_features)

  noisy = [st for st in settings if st.sigma > 0]
  est_in, bnd_in = inputs(spec.estimate_canaries), inputs(spec.bound_canaries)
  with tqdm(total=len(noisy) * audit_run.per_step_chunks(spec), unit="run",
            desc="per-step white-box audit", disable=not progress) as bar:
    return [audit_run.per_step_audit(jax.random.fold_in(key, si), spec, st, est_in, bnd_in,
                                     bar=bar) for si, st in enumerate(noisy)]


def _per_step_table(cfg: AuditConfig, rows: list[dict]) -> _common.Table:
  """The per-step rows: estimate (a) and bound (b) beside the exact eps."""
  fam = "GDP" if cfg.sampling_prob == 1 else f"subsampled Gaussian, q = {cfg.sampling_prob:g}"
  return _common.Table(
      title=(f"Per-step white-box audit (Nasr et al. 2023), T = {cfg.num_steps}, q = "
             f"{cfg.sampling_prob:g}, {cfg.confidence:g} confidence, delta = {cfg.delta:g}"),
      columns=["claimed eps", "exact eps (PLD)", "estimate (a)", "(a) point", "bound (b)",
               "(a) / exact", "(b) / exact", "runs (a)", "runs (b)", "assumption (a)",
               "assumption (b)", "run-level on (b)'s runs"],
      rows=[[r["epsilon"], r["epsilon_pld"], r["estimate"], r["estimate_point"], r["bound"],
             r["estimate_fraction_of_exact"], r["bound_fraction_of_exact"],
             r["estimate_runs"], r["bound_runs"], fam, "i.i.d. steps", r["run_level_bound"]]
            for r in rows],
      note=(f"Every step is a trial: (a) {cfg.per_step_estimate_runs} runs x "
            f"{cfg.per_step_estimate_canaries} Dirac canaries, (b) {cfg.per_step_bound_runs} "
            f"runs x {cfg.per_step_bound_canaries}, each canary on its own unused coordinate, IN "
            "in half the runs. (a): the step fitted in the (subsampled-)Gaussian family (q "
            "known), composed over T, at its one-sided lower confidence limit (point estimate "
            "beside it); valid only in that family (dpjax.audit.per_step). (b): Clopper-"
            "Pearson upper limits on per-step FPR and FNR at 7 thresholds fixed in advance "
            "(Bonferroni), the certified trade-off curve composed T-fold, rounded down; no "
            "parametric assumption, but valid only if the T steps are i.i.d. copies of one "
            "step pair, as the white-box Dirac canary with fresh noise and Poisson bits gives "
            "for DP-SGD as claimed. Run-level: the same runs with each (run, canary) one trial "
            "(summed claimed likelihood ratio, threshold fixed from the claim): no assumption "
            "on the steps, only independent canaries."))


def _summary(cfg: AuditConfig, rows: list[dict]) -> str:
  caught = [row for row in rows if math.isfinite(row["epsilon"] or math.inf)
            and max(row["epsilon_lower_black_box"] or 0, row["epsilon_lower_white_box"] or 0)
            > row["epsilon"]]
  return (
      f"Variant {cfg.variant}, {cfg.trials} trials per side. "
      + "; ".join(f"claimed ε = {_common.fmt(row['epsilon'])}: white-box "
                  f"{_common.fmt(row['epsilon_lower_white_box'])}, black-box "
                  f"{_common.fmt(row['epsilon_lower_black_box'])} (best certifiable "
                  f"{_common.fmt(row['best_certifiable'])}, ceiling {_common.fmt(row['ceiling'])})"
                  for row in rows)
      + (f". Caught (ε_lower > claimed ε) at ε = {[row['epsilon'] for row in caught]}: each "
         "bound holds at 95%, and a claim counts as caught when either adversary's bound "
         "exceeds it, so a correct implementation is wrongly flagged with probability at "
         "most 10% per claimed ε (union bound)."
         if caught else ". No claimed ε was exceeded (an audit cannot prove privacy).")
      + " Lower bounds sit below the claim for the correct algorithm because a perfect "
        "adversary with this many trials cannot certify more (the 'best certifiable' column).")


def _figure_bounds(out_dir: str, results: dict) -> str:
  """Bounds against the claimed eps, drawn from the recorded rows."""
  rows, trials, variant = results["rows"], results["trials"], results["variant"]
  fin = [r for r in rows if math.isfinite(r["epsilon"])]
  fn = "audit_bounds.png"
  with _plots.figure(out_dir, fn, figsize=(5.2, 4.2), dpi=130) as (fig, ax):
    e = np.array([r["epsilon"] for r in fin])
    top = max(list(e) + [r["ceiling"] for r in rows]) * 1.05
    ax.plot([0, top], [0, top], "k-", lw=0.8, label="ε_lower = ε_upper (claimed)")
    ax.axhline(rows[0]["ceiling"], color="grey", ls=":", label=f"trials' ceiling ({trials}/side)")
    ax.plot(e, [r["best_certifiable"] for r in fin], "s--", color="tab:green", mfc="none",
            label="best certifiable (white-box trials)")
    for key, lab, mk in (("epsilon_lower_white_box", "white-box", "o"),
                         ("epsilon_lower_black_box", "black-box", "^")):
      if all(r[key] is not None for r in fin):
        ax.plot(e, [r[key] for r in fin], mk + "-", label=lab)
    ax.set_xlabel("ε upper bound (accountant, claimed)")
    ax.set_ylabel("ε lower bound (95% confidence)")
    ax.set_title(f"Audit of DP-SGD ({variant})")
    ax.legend(fontsize=7)
  return fn


def _figure_roc(out_dir: str, results: dict) -> str:
  """The white-box ROC per claimed eps, drawn from the recorded counts and curve."""
  items = list(results["white_box_roc"].values())
  fn = "audit_roc.png"
  with _plots.figure(out_dir, fn, ncols=max(1, len(items)), squeeze=False,
                     figsize=(3.3 * max(1, len(items)), 3.4), dpi=130) as (fig, axes):
    for ax, rec in zip(axes[0], items):
      tp, n_in = np.asarray(rec["true_positives"]), rec["positives"]
      lo, hi = stats.clopper_pearson(tp, n_in)
      fpr = np.maximum(np.asarray(rec["false_positives"]) / rec["negatives"], 1e-5)
      ax.fill_between(fpr, np.maximum(lo, 1e-5), np.maximum(hi, 1e-5), color="tab:blue",
                      alpha=0.25, step="post", label="95% CP band (TPR)")
      ax.step(fpr, np.maximum(tp / n_in, 1e-5), where="post", color="tab:blue",
              lw=1, label="white-box (empirical)")
      ax.plot(rec["exact_fpr"], rec["exact_tpr"], "k--", lw=1, label="accounted mechanism (exact)")
      ax.plot([1e-5, 1], [1e-5, 1], ":", color="grey", lw=0.8)
      ax.set_xscale("log")
      ax.set_yscale("log")
      ax.set_xlim(1e-4, 1)
      ax.set_ylim(1e-4, 1)
      ax.set_title(f"claimed ε = {rec['claimed_epsilon']:g}", fontsize=9)
      ax.set_xlabel("FPR")
    axes[0][0].set_ylabel("TPR")
    axes[0][0].legend(fontsize=6, loc="lower right")
  return fn


def _default_out(cfg: AuditConfig) -> str:
  """A faulty variant's results go under results/audit_variants/<variant>/ (not into
  REPORT.md, which shows the audit of the correct algorithm)."""
  if cfg.variant == "correct":
    return os.path.join(_common.RESULTS_ROOT, NAME)
  return os.path.join(_common.RESULTS_ROOT, "audit_variants", cfg.variant)


def main():
  """`python -m experiments.audit [--flags]`: flags from AuditConfig."""
  _common.app_run(NAME, AuditConfig, run, default_out=_default_out)


if __name__ == "__main__":
  main()
