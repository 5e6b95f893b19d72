"""White-box canary audit of DP-SGD with K gradient canaries per run (`experiments.audit`'s claims).

The claims, records, model, DP-SGD and seed of `experiments.audit` (q = 0.2, T = 500, C = 1,
delta = 1e-5, sigma calibrated to each claimed eps), with K = 10 gradient canaries per run on
their own unused coordinates, each IN in a quarter of the runs with its own Poisson bits: K
independent white-box trials per run for DP-SGD as claimed. Bound: the larger of a threshold
fixed from the claimed likelihood-ratio law and a held-out one (`dpjax.audit.run`), beside the
exact eps. The same numbers as `experiments.audit --companion_canaries 10` (its companion
table), run on its own so that the main job stays small.

Command:   python -m experiments.audit_canaries                 (1000 trials, about 20 CPU-s)
           python -m experiments.audit_canaries --trials 10000  (about 90 CPU-s)
"""

from __future__ import annotations

import dataclasses

from dpjax.audit import run as audit_run
from experiments import _common
from experiments import _plots
from experiments import audit

NAME = "audit_canaries"
_opt = _common.option


@dataclasses.dataclass(frozen=True, kw_only=True)
class CanariesConfig(_common.ExperimentConfig):
  """What `run` computes (the audit's claims; tests shrink `audit`)."""
  trials: int = _opt(1000, "Models per side (2 * trials runs per claimed eps).", bounds=">=2")
  epsilons: tuple[float, ...] = _opt((1.0, 2.0, 4.0, 8.0), "Claimed eps values.", bounds=">0")
  canaries_per_run: int = _opt(10, "Gradient canaries per run, K.", bounds=">=2")
  canary_layout: str = _opt("parameter_leaf", "Canaries in a parameter leaf or as fixed "
                            "gradients (the older layout; the same law).",
                            choices=audit_run.CANARY_LAYOUTS)
  resume: bool = _opt(False, "Continue an interrupted run from <out>/chunks.")


def audit_config(cfg: CanariesConfig, base: audit.AuditConfig | None = None
                 ) -> audit.AuditConfig:
  """The `experiments.audit` configuration of these runs (`base`: its other settings)."""
  base = audit.AuditConfig() if base is None else base
  return audit.companion_config(dataclasses.replace(
      base, seed=cfg.seed, trials=cfg.trials, epsilons=cfg.epsilons, resume=cfg.resume,
      canary_layout=cfg.canary_layout),
      cfg.canaries_per_run)


def run(cfg: CanariesConfig, out_dir: str, *, progress: bool = True, quiet: bool = False,
        base: audit.AuditConfig | None = None) -> dict:
  """Trains (or resumes) the runs into <out_dir>/chunks, bounds each claim, writes results.json.

  base: the audit's settings besides cfg's (tests shrink them). Returns
  `_common.finish`'s dict with "rows" (`dpjax.audit.run.evaluate` rows).
  """
  sub = audit_config(cfg, base)
  main = audit.final_model_audit(sub, out_dir, progress=progress)
  rows = main["rows"]
  results = {"rows": rows, "canaries_per_run": cfg.canaries_per_run, "trials": cfg.trials,
             "variant": sub.variant, "threat_model": sub.threat_model,
             "white_box_roc": main["white_box_roc"]}
  out = _common.finish(cfg, out_dir, NAME, results,
                       tables=[audit.companion_table(sub, rows, cfg.canaries_per_run)],
                       figures=[_plots.audit_bounds(out_dir, results),
                                _plots.audit_roc(out_dir, results)],
                       summary="; ".join(
                           f"claimed ε = {_common.fmt(r['epsilon'])}: white-box "
                           f"{_common.fmt(r['epsilon_lower_white_box'])} (exact "
                           f"{_common.fmt(r['epsilon_pld'])})" for r in rows), quiet=quiet)
  return {**out, "rows": rows}


def _run_cli(cfg: CanariesConfig, out_dir: str) -> dict:
  _common.start_backend_one_thread()
  return run(cfg, out_dir)


def main():
  """`python -m experiments.audit_canaries [--flags]`."""
  _common.app_run(NAME, CanariesConfig, _run_cli)


if __name__ == "__main__":
  main()
