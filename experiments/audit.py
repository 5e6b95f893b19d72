"""Canary audit of DP-SGD: empirical eps lower bounds against the accountant's eps (lecture §6.2).

150 credit records plus canaries (`dpjax.data.canaries`), logistic regression, DP-SGD with
q = 0.2, T = 500, C = 1, delta = 1e-5, sigma calibrated (RDP) to each claimed eps; the
pipeline is `dpjax.audit.run` (stored chunks: `--resume` continues an interrupted run).
2N models per eps carry a record canary (BLACK-BOX: final logit, threshold chosen on half
the trials) and a gradient canary (WHITE-BOX, Nasr et al. 2021: exact per-step likelihood
ratio, the larger of a threshold fixed from the claim and a held-out one), beside the
trials' ceiling, the best certifiable bound and the GDP estimate. `--canaries_per_run K`:
K gradient canaries per run; with K = 1, `--companion_canaries K'` adds the audit with K'
canaries per run (its own runs, in <out>/canaries<K'>; `experiments.audit_canaries` runs the
K' = 10 one on its own). `--per_step` adds the per-step audit of Nasr et al. 2023
(`audit.per_step_run`) of each claim at q and (`--per_step_full_batch`) at q = 1.

Command:   python -m experiments.audit --trials 10000  (about 90 CPU-s; <out>/timing.json)
           python -m experiments.audit                  (about 55 CPU-s)
           python -m experiments.audit --variant noise_without_clip_norm --epsilons 1
A faulty variant's results go to results/audit_variants/<variant>/ unless --out is given.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time

import jax
import tqdm
from absl import flags

from dpjax import accounting, models
from dpjax.audit import run as audit_run
from dpjax.audit import per_step, per_step_run, store, variants
from dpjax.data import canaries
from experiments import _audit_tables, _common, _plots

NAME = "audit"
_opt = _common.option
if "xla_one_thread" not in flags.FLAGS:  # runpy may execute this module a second time
  flags.DEFINE_bool("xla_one_thread", True, "Start XLA's CPU backend with one intra-op "
                    "thread (fewer CPU-seconds, the same numbers; see "
                    "`_common.start_backend_one_thread`).")
  flags.DEFINE_bool("reuse_freed_memory", True, "glibc: allocate large buffers from the heap "
                    "and keep freed ones for reuse (fewer CPU-seconds, the same numbers; see "
                    "`_common.reuse_freed_memory`).")
THREAT_MODELS = audit_run.THREAT_MODELS
# The lecture's trials' ceilings (exercise 5): 0 errors in 500 / 10,000 per side.
LECTURE_CEILING = {500: 4.91, 10_000: 7.90}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditConfig(_common.ExperimentConfig):
  """What `run` computes (defaults = the lecture's setting at 1000 trials; tests shrink them)."""
  trials: int = _opt(1000, "Models per side (with / without each canary).", bounds=">=2")
  epsilons: tuple[float, ...] = _opt((1.0, 2.0, 4.0, 8.0), "Claimed eps values.", bounds=">0")
  threat_model: str = _opt("both", "Which adversaries' bounds to report.", choices=THREAT_MODELS)
  variant: str = _opt("correct", "DP-SGD variant to audit (faulty ones for testing the audit).",
                      choices=variants.VARIANTS)
  resume: bool = _opt(False, "Continue an interrupted run from <out>/chunks.")
  invalid_chunks: str = _opt(
      "recompute", "On resume, a stored chunk that fails verification (corrupt, of another "
      "run or setting): recompute it (with a warning) or refuse (exit with one line).",
      choices=("recompute", "refuse"))
  no_noise: bool = _opt(True, "Also audit sigma = 0 (the ceiling check).")
  chunk_models: int = _opt(2000, "Models per chunk written to disk.", bounds=">=4")
  canaries_per_run: int = _opt(
      1, "Gradient canaries per run, K, each with its own coordinate and bits.", bounds=">=1")
  canary_layout: str = _opt(
      "parameter_leaf", "With K > 1: canaries as records adding to a parameter leaf (scores summed "
      "in the scan) or as fixed gradients on the data's last K features (the older, slower "
      "layout; the same law).", choices=audit_run.CANARY_LAYOUTS)
  companion_canaries: int = _opt(
      0, "With K = 1: also a white-box audit with this many canaries per run (0: none; "
      "`experiments.audit_canaries` runs the K = 10 one on its own).", bounds=">=0")
  per_step: bool = _opt(
      True, "Also run the per-step white-box audit (Nasr et al. 2023) of each claim.")
  per_step_runs: int = _opt(8, "Per-step audit: training runs per claim.", bounds=">=1")
  per_step_canaries: int = _opt(
      2 ** 15, "Per-step audit: Dirac canaries per run (a parameter leaf; O(K) per step).",
      bounds=">=2")
  per_step_full_batch: bool = _opt(
      True, "Per-step audit: also the claims at q = 1 (full batch, sigma calibrated at q = 1).")
  # The DP-SGD and audit constants (not flags; tests shrink them).
  delta: float = _opt(1e-5, "delta of the claims.", flag=False, bounds="(0,1)")
  confidence: float = _opt(0.95, "Confidence of every reported bound.", flag=False,
                           bounds="(0,1)")
  num_steps: int = _opt(500, "DP-SGD steps T.", flag=False, bounds=">=1")
  sampling_prob: float = _opt(0.2, "Poisson sampling rate q.", flag=False, bounds="(0,1]")
  base_size: int = _opt(150, "Base records besides the canary.", flag=False, bounds=">=1")
  canary_in_fraction: float = _opt(
      0.25, "With K > 1: fraction of runs in which each gradient canary is IN.", flag=False,
      bounds="(0,1)")
  observation_budget: int = _opt(
      2 ** 25, "With K > 1: most white-box observations (models x T x K) held at once.",
      flag=False, bounds=">=1")

  def __post_init__(self):
    super().__post_init__()                  # every field's bounds and choices
    if self.trials % 2:
      raise ValueError(f"trials must be an even integer >= 2 (a balanced design of 2 * trials "
                       f"models in groups of 4), got {self.trials!r}")
    for name in ("chunk_models",):
      if getattr(self, name) % 4:
        raise ValueError(f"{name} must be a positive multiple of 4, got {getattr(self, name)!r}")
    for e in self.epsilons:          # each claimed eps needs a sigma in the supported range
      try:
        accounting.calibrate_noise(float(e), self.sampling_prob, self.num_steps, self.delta)
      except ValueError as err:
        raise ValueError(f"epsilons: {err}") from None


@functools.lru_cache(maxsize=8)
def _claims(epsilons: tuple, sampling_prob: float, num_steps: int, delta: float,
            no_noise: bool) -> tuple[audit_run.Setting, ...]:
  """`audit.run.settings` as a tuple, cached: each sigma is calibrated once per process (the
  final-model audit, the run and the per-step rows read the same claims)."""
  return tuple(audit_run.settings(epsilons, sampling_prob, num_steps, delta, no_noise))


def _spec(cfg: AuditConfig) -> audit_run.CanaryAuditSpec:
  return audit_run.CanaryAuditSpec(
      trials=cfg.trials, sampling_prob=cfg.sampling_prob, num_steps=cfg.num_steps,
      delta=cfg.delta, confidence=cfg.confidence, variant=cfg.variant,
      threat_model=cfg.threat_model, canaries_per_run=cfg.canaries_per_run,
      canary_layout=cfg.canary_layout,
      canary_in_fraction=cfg.canary_in_fraction, chunk_models=cfg.chunk_models,
      observation_budget=cfg.observation_budget, design_seed=cfg.seed)


def final_model_audit(cfg: AuditConfig, out_dir: str, *, progress: bool = True,
                      max_new_chunks: int | None = None) -> dict:
  """Trains (or resumes) the final-model audit's chunks into <out_dir>/chunks and bounds
  each claim: `audit.run.canary_audit`'s dict (rows empty while incomplete)."""
  k_can = cfg.canaries_per_run
  k_data, k_train = jax.random.split(jax.random.key(cfg.seed))
  data = canaries.audit_data(k_data, cfg.base_size, unused_features=k_can)
  model = models.logistic_regression(data.num_features)
  spec = _spec(cfg)
  settings = _claims(cfg.epsilons, cfg.sampling_prob, cfg.num_steps, cfg.delta, cfg.no_noise)
  manifest = {"seed": cfg.seed, "trials": cfg.trials, "variant": cfg.variant,
              "chunk_models": cfg.chunk_models, "delta": cfg.delta, "num_steps": cfg.num_steps,
              "sampling_prob": cfg.sampling_prob, "base_size": cfg.base_size,
              "settings": [dataclasses.asdict(s) for s in settings]}
  if k_can > 1:
    manifest.update(canaries_per_run=k_can, canary_in_fraction=cfg.canary_in_fraction,
                    chunk_models=spec.models_per_chunk)
  chunks = store.ChunkStore(os.path.join(out_dir, "chunks"), manifest, resume=cfg.resume,
                            on_invalid=cfg.invalid_chunks)
  return audit_run.canary_audit(k_train, spec, settings, data, model, chunks,
                                progress=progress, max_new_chunks=max_new_chunks)


# The table of `run`'s companion audit, also that of `experiments.audit_canaries`.
companion_table = _audit_tables.audit_companion_table


def companion_config(cfg: AuditConfig, num_canaries: int) -> AuditConfig:
  """The white-box audit of cfg's claims with `num_canaries` gradient canaries per run."""
  return dataclasses.replace(cfg, canaries_per_run=num_canaries, companion_canaries=0,
                             threat_model="white_box", no_noise=False, per_step=False)


def run(cfg: AuditConfig, out_dir: str, *, progress: bool = True, quiet: bool = False,
        max_new_chunks: int | None = None) -> dict:
  """Trains (or resumes) every chunk into <out_dir>/chunks, audits each setting, writes
  results.json and figures; stops incomplete after `max_new_chunks` new chunks.

  Returns {"rows", "complete", "chunks_trained", "path"} (path None while incomplete)
  and, when complete, `_common.finish`'s "record", "tables" and "figures", and "timing"
  (what <out_dir>/timing.json holds: CPU seconds, which results.json leaves out).
  """
  timing = {"start_cpu_seconds": time.process_time()}       # imports and backend start
  k_can = cfg.canaries_per_run
  k_data = jax.random.split(jax.random.key(cfg.seed))[0]
  settings = _claims(cfg.epsilons, cfg.sampling_prob, cfg.num_steps, cfg.delta, cfg.no_noise)
  spec = _spec(cfg)
  main = final_model_audit(cfg, out_dir, progress=progress, max_new_chunks=max_new_chunks)
  timing["final_model_cpu_seconds"] = time.process_time() - timing["start_cpu_seconds"]
  rows, trained = main["rows"], main["chunks_trained"]
  companion = None
  if main["complete"] and k_can == 1 and cfg.companion_canaries > 1:
    companion = run(companion_config(cfg, cfg.companion_canaries),
                    os.path.join(out_dir, f"canaries{cfg.companion_canaries}"),
                    progress=progress, quiet=True, max_new_chunks=(
                        None if max_new_chunks is None else max_new_chunks - trained))
    trained += companion["chunks_trained"]
  if not main["complete"] or (companion is not None and not companion["complete"]):
    return {"rows": [], "complete": False, "chunks_trained": trained, "path": None}
  results = {"rows": rows, "variant": cfg.variant, "trials": cfg.trials,
             "canaries_per_run": k_can,
             "threat_model": cfg.threat_model, "models_per_setting": spec.models_per_setting,
             "shared_runs": True, "white_box_roc": main["white_box_roc"],
             "lecture_ceiling": {str(k): v for k, v in LECTURE_CEILING.items()}}
  tables = _audit_tables.audit_tables(cfg, rows, LECTURE_CEILING)
  if companion is not None:
    results["companion"] = {"canaries_per_run": cfg.companion_canaries,
                            "rows": companion["rows"]}
    tables.insert(1, companion_table(cfg, companion["rows"], cfg.companion_canaries))
  if cfg.per_step and k_can == 1:
    step_rows = _per_step_rows(cfg, settings, k_data, progress)
    # The rows' CPU times go to timing.json: results.json holds only what the same run
    # reproduces bit for bit.
    timing["per_step_cpu_seconds"] = [
        {"sampling_prob": r["sampling_prob"], "epsilon": r["epsilon"],
         "cpu_seconds": r.pop("cpu_seconds")} for r in step_rows]
    results["per_step"] = {"rows": step_rows, "bound_assumption": per_step.ASSUMPTION_IID_STEPS,
                           "estimate_assumptions": {
                               "q = 1": per_step.ASSUMPTION_GDP,
                               "q < 1": per_step.ASSUMPTION_SUBSAMPLED_GAUSSIAN}}
    tables.append(_audit_tables.audit_per_step_table(cfg, step_rows))
  cpu0 = time.process_time()
  figures = [_plots.audit_bounds(out_dir, results), _plots.audit_roc(out_dir, results)]
  timing["figures_cpu_seconds"] = time.process_time() - cpu0
  out = _common.finish(cfg, out_dir, NAME, results, tables=tables, figures=figures,
                       summary=_summary(cfg, rows), quiet=quiet)
  timing["process_cpu_seconds"] = time.process_time()
  _write_timing(out_dir, timing, quiet)
  return {**out, "rows": rows, "complete": True, "chunks_trained": trained, "timing": timing}


def _write_timing(out_dir: str, timing: dict, quiet: bool) -> None:
  """<out_dir>/timing.json: process CPU seconds at the start of `run` (imports, backend),
  of the final-model audit (training and bounds), of each per-step row, of the figures, and
  of the process so far (`_common.write_timing`)."""
  _common.write_timing(out_dir, NAME, timing, [
      ("start", timing["start_cpu_seconds"]),
      ("final-model audit", timing["final_model_cpu_seconds"])] + [
      (f"per-step q = {r['sampling_prob']:g}, eps = {r['epsilon']:g}:", r["cpu_seconds"])
      for r in timing.get("per_step_cpu_seconds", [])] + [
      ("figures", timing.get("figures_cpu_seconds", 0.0)),
      ("process so far:", timing["process_cpu_seconds"])], quiet=quiet)


def _per_step_rows(cfg: AuditConfig, settings, k_data, progress: bool) -> list[dict]:
  """Per-step rows of the claims at q (stream fold_in(seed key, 1)) and, with
  per_step_full_batch, at q = 1 (stream 2), on the same base records (k_data)."""
  worlds = [(cfg.sampling_prob, settings, 1)] + ([(1.0, _claims(
      cfg.epsilons, 1.0, cfg.num_steps, cfg.delta, False), 2)]
      if cfg.per_step_full_batch and cfg.sampling_prob != 1 else [])
  noisy = sum(sum(st.sigma > 0 for st in sts) for _, sts, _ in worlds)
  rows = []
  with tqdm.tqdm(total=noisy * cfg.per_step_runs, unit="run", desc="per-step white-box audit",
                 disable=not progress) as bar:
    for q, sts, stream in worlds:
      spec = per_step_run.PerStepSpec(
          sampling_prob=q, num_steps=cfg.num_steps, delta=cfg.delta, confidence=cfg.confidence,
          variant=cfg.variant, runs=cfg.per_step_runs, canaries=cfg.per_step_canaries)
      rows += per_step_run.audit_claims(jax.random.fold_in(jax.random.key(cfg.seed), stream),
                                        spec, sts, k_data, cfg.base_size, bar=bar)
  return rows


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
      + (f". Caught (ε_lower > claimed ε, each adversary at 95%) at ε = "
         f"{[row['epsilon'] for row in caught]}." if caught else
         ". No claimed ε was exceeded (an audit cannot prove privacy)."))


def _default_out(cfg: AuditConfig) -> str:
  """A faulty variant's results go under results/audit_variants/<variant>/ (not into
  REPORT.md, which shows the audit of the correct algorithm)."""
  if cfg.variant == "correct":
    return os.path.join(_common.RESULTS_ROOT, NAME)
  return os.path.join(_common.RESULTS_ROOT, "audit_variants", cfg.variant)


def _run_cli(cfg: AuditConfig, out_dir: str) -> dict:
  if flags.FLAGS.xla_one_thread:
    _common.start_backend_one_thread()
  if flags.FLAGS.reuse_freed_memory:
    _common.reuse_freed_memory()
  return run(cfg, out_dir)


def main():
  """`python -m experiments.audit [--flags]`: flags from AuditConfig, --xla_one_thread and
  --reuse_freed_memory."""
  _common.app_run(NAME, AuditConfig, _run_cli, default_out=_default_out)


if __name__ == "__main__":
  main()
