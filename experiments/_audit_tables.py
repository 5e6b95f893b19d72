"""The canary audit's tables: `experiments.audit`'s main, ceiling, per-step and companion
tables (the companion table is shown by `experiments.audit_canaries` too), built from
`dpjax.audit` rows with `_common.table`.
"""

from __future__ import annotations

from typing import Sequence

from dpjax.audit import stats
from experiments._common import Table, table


def audit_tables(cfg, rows: Sequence[dict], lecture_ceiling: dict) -> list[Table]:
  """`experiments.audit`'s main table (one row per claim: the bounds of both adversaries beside
  the exact eps) and the trials' ceiling beside `lecture_ceiling` {trials: eps}.

  cfg: an `experiments.audit.AuditConfig`; rows: `dpjax.audit.run.evaluate` rows (dicts of
  plain floats), one per claimed eps; the main table has 13 columns, the ceiling table one row
  per evaluation-trial count in {500, 10000, trials, trials / 2}.

  Examples:
    >>> from experiments import audit
    >>> row = dict.fromkeys(("epsilon", "sigma", "epsilon_pld", "epsilon_lower_black_box",
    ...     "best_certifiable_black_box", "epsilon_lower_white_box", "best_certifiable",
    ...     "white_box_fraction_of_best", "ceiling", "gdp_estimate_white_box",
    ...     "white_box_fraction_of_exact"), 1.0)
    >>> main, ceiling = audit_tables(audit.AuditConfig(trials=8), [row], {500: 4.91})
    >>> len(main.columns), [r[0] for r in ceiling.rows]
    (13, [4, 8, 500, 10000])
  """
  trials, k, r0 = cfg.trials, cfg.canaries_per_run, rows[0]
  title = (f"Canary audit, variant = {cfg.variant}, {trials} trials per side ({2 * trials} "
           "models per row, shared by both adversaries), 95% confidence, delta = 1e-5")
  if k > 1:
    title += (f"; {k} gradient canaries per run: white-box trials "
              f"{r0['white_box_trials_in']} IN / {r0['white_box_trials_out']} OUT")
  sd = lambda side: lambda row: row.get(f"epsilon_lower_{side}_sd")
  main = table(
      title, rows, [
          ("claimed eps", "epsilon"), ("sigma", "sigma"), ("eps (PLD)", "epsilon_pld"),
          ("eps_lower black-box", "epsilon_lower_black_box"), ("± sd", sd("black_box")),
          ("best certifiable (black-box procedure)", "best_certifiable_black_box"),
          ("eps_lower white-box", "epsilon_lower_white_box"), ("± sd", sd("white_box")),
          ("best certifiable (white-box procedure)", "best_certifiable"),
          ("white-box / best", "white_box_fraction_of_best"), ("trials' ceiling", "ceiling"),
          ("GDP estimate (white-box)", "gdp_estimate_white_box"),
          ("white-box / eps (PLD)", "white_box_fraction_of_exact")],
      note=(f"White-box: the larger of a threshold fixed in advance from the claimed "
            f"mechanism's exact likelihood ratio and one chosen on half the trials, "
            f"{audit_shares(k, cfg.confidence)} (union bound at 95%)"
            + (f", on the (run, canary) trials, independent for DP-SGD as claimed; their "
               f"ceiling is {r0['ceiling_white_box']:.3f}" if k > 1 else "")
            + f". Black-box: threshold chosen on {trials // 2} trials per side, evaluated on "
            "the other half, at 95%. 'Best certifiable': a perfect adversary for the accounted "
            "mechanism with the same trials and procedure, on expected counts; 'trials' "
            f"ceiling': 0 errors on {trials} trials per side (~ln(N/3.7)). The GDP estimate "
            "assumes a Gaussian trade-off curve and is not a bound. '± sd': bootstrap spread "
            "(white-box: of the fixed-threshold test)."))
  ceil_rows = [[n, stats.perfect_attack_ceiling(n), lecture_ceiling.get(n)]
               for n in sorted({500, 10_000, trials, trials // 2})]
  return [main, Table(title="The trials' ceiling (delta = 0): ours vs the lecture",
                      columns=["evaluation trials per side", "ours", "lecture"], rows=ceil_rows)]


def audit_shares(canaries_per_run: int, confidence: float) -> str:
  """The confidences of the canary audit's two white-box tests (fixed threshold, held-out
  threshold), as `dpjax.audit.run.evaluate` splits alpha between them.

  Examples:
    >>> audit_shares(1, 0.95), audit_shares(10, 0.95)
    ('each at 97.5%', 'at 0.96 and 0.99')
  """
  from dpjax.audit import run as audit_run  # pylint: disable=g-import-not-at-top
  if canaries_per_run == 1:
    return "each at 97.5%"
  share = audit_run.FIXED_ALPHA_SHARE
  return (f"at {1 - share * (1 - confidence):g} and "
          f"{1 - (1 - share) * (1 - confidence):g}")


def audit_companion_table(cfg, rows: Sequence[dict], k: int) -> Table:
  """The white-box audit with k canaries per run of cfg's claims, beside the exact eps.

  cfg: an `experiments.audit.AuditConfig`; rows: `dpjax.audit.run.evaluate` rows of the
  audit with k canaries per run, one per claimed eps: a row of 7 cells each.

  Examples:
    >>> from experiments import audit
    >>> row = dict.fromkeys(("epsilon", "epsilon_pld", "epsilon_lower_white_box",
    ...     "white_box_fixed_threshold", "white_box_held_out_threshold", "best_certifiable",
    ...     "white_box_fraction_of_exact", "white_box_trials_in", "white_box_trials_out"), 1)
    >>> audit_companion_table(audit.AuditConfig(trials=8), [row], 10).rows
    [[1, 1, 1, 1, 1, 1, 1]]
  """
  return table(
      f"White-box audit with {k} gradient canaries per run ({2 * cfg.trials} models per "
      f"row: {rows[0]['white_box_trials_in']} IN / {rows[0]['white_box_trials_out']} OUT "
      "trials), 95% confidence, delta = 1e-5", rows, [
          ("claimed eps", "epsilon"), ("eps (PLD)", "epsilon_pld"),
          ("eps_lower white-box", "epsilon_lower_white_box"),
          ("fixed threshold", "white_box_fixed_threshold"),
          ("held-out threshold", "white_box_held_out_threshold"),
          ("best certifiable", "best_certifiable"),
          ("white-box / eps (PLD)", "white_box_fraction_of_exact")],
      note=(f"Each run carries {k} gradient canaries on their own unused coordinates, IN in "
            f"a fraction {cfg.canary_in_fraction:g} of the runs, Poisson-sampled with their "
            "own bits: independent (run, canary) trials for DP-SGD as claimed. Bound: the "
            "larger of the fixed and held-out thresholds, "
            f"{audit_shares(k, cfg.confidence)}."))


def audit_per_step_table(cfg, rows: Sequence[dict]) -> Table:
  """The per-step rows: estimate (a), bound (b) and the run-level bound beside the exact eps.

  cfg: an `experiments.audit.AuditConfig`; rows: `dpjax.audit.per_step_run.per_step_audit` rows,
  one per claim and q: a row of 14 cells each, the last naming the family estimate (a) assumes.

  Examples:
    >>> from experiments import audit
    >>> row = {"sampling_prob": 1.0, **dict.fromkeys(("epsilon", "sigma", "epsilon_pld",
    ...     "estimate", "estimate_point", "estimate_fraction_of_exact", "bound",
    ...     "bound_fraction_of_exact", "run_level_bound", "run_level_fraction_of_exact",
    ...     "runs", "canaries"), 2)}
    >>> audit_per_step_table(audit.AuditConfig(trials=8), [row]).rows[0][-1]
    'GDP'
  """
  return table(
      f"Per-step white-box audit (Nasr et al. 2023), T = {cfg.num_steps}, "
      f"{cfg.confidence:g} confidence, delta = {cfg.delta:g}", rows, [
          ("q", "sampling_prob"), ("claimed eps", "epsilon"), ("sigma", "sigma"),
          ("exact eps (PLD)", "epsilon_pld"), ("estimate (a)", "estimate"),
          ("(a) point", "estimate_point"), ("(a) / exact", "estimate_fraction_of_exact"),
          ("bound (b)", "bound"), ("(b) / exact", "bound_fraction_of_exact"),
          ("run-level", "run_level_bound"), ("run-level / exact", "run_level_fraction_of_exact"),
          ("runs", "runs"), ("canaries per run", "canaries"), ("assumption (a)", lambda r: (
              "GDP" if r["sampling_prob"] == 1 else "subsampled Gaussian"))],
      note=(f"Every step is a trial: {cfg.per_step_runs} runs per claim x "
            f"{cfg.per_step_canaries} Dirac canaries in a parameter leaf no record touches (half "
            "IN per run), shared by all three. (a): the step's family (Gaussian at q = 1, "
            "subsampled Gaussian at q < 1) fitted and composed, lower confidence limit; valid only "
            "in that family. (b): Clopper-Pearson at 7 fixed thresholds composed T-fold; valid if "
            "the steps are i.i.d. Run-level: summed claimed LLR per (run, canary), no assumption "
            "on the steps. q = 1 rows: sigma calibrated at q = 1 for the same claimed eps."))
