"""Audit any attack scores: every estimator's eps lower bound, its assumptions, and the ROC.

Input: one score per independent training run, canary IN or OUT, higher = IN (canaries of one
run are not independent: use `dpjax.audit.one_run.audit`). `.npz` with 1-D `in_scores` and
`out_scores`, or UTF-8 `.csv` (BOM allowed) with header columns `score` (ASCII decimal) and
`member` (1/0 or true/false). Values finite, at least two per side; a bad input stops with one
line before anything is written. results.json: `epsilon_lower_<estimator>` for every estimator
of `audit.score_audit.score_bounds` and "best" (their union-bound maximum); `falsified`: "best"
(no Gaussian assumption) > --claimed_epsilon (`falsified_if_gdp` for the mu-GDP-only bounds).
roc.png: ROC, DKW band, claimed curve. Without --scores, a Gaussian mechanism of mu = --demo_mu.

Commands:  python -m experiments.audit_scores                          (a few seconds)
           python -m experiments.audit_scores --scores scores.npz --claimed_epsilon 4 \\
               --delta 1e-5 --out /tmp/my_audit
Expected (demo, seed 0, mu = 1, 2,000 trials per side, delta = 1e-5): exact eps 4.38;
assumption-free bounds 0.93 (declared thresholds) to 1.56 (f-DP one-run), "best" 1.48 (not
falsified); mu-GDP-only bounds 2.04 (f-DP one-run, Gaussian f) and 3.05 (GDP).
References: Nasr et al. 2023 (arXiv 2302.07956); Steinke, Nasr & Jagielski 2023 (2305.08846);
Mahloujifar, Melis & Chaudhuri 2025 (2410.22235); Jagielski, Ullman & Oprea 2020 (2006.07709).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
import zipfile
from typing import Optional

import numpy as np

from dpjax.accounting import gdp
from dpjax.audit import roc, score_audit
from experiments import _common, _plots

NAME = "audit_scores"
FORMATS = (".npz", ".csv")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|nan)",
                     re.IGNORECASE)
_TRUE = ("1", "true")
_FALSE = ("0", "false")
# Entries of `score_bounds` valid only if the mechanism is mu-GDP.
GDP_ONLY = ("gdp", "fdp_one_run_gdp")


class ScoresError(ValueError):
  """A scores file that cannot be audited (the message names the problem)."""


def _fail(path: str, problem: str):
  raise ScoresError(f"scores: {path}: {problem}")


def _check_side(path: str, what: str, values) -> np.ndarray:
  """float64[K] of one side, or ScoresError naming the problem."""
  a = np.asarray(values)
  if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer)
                                 or np.issubdtype(a.dtype, np.floating)):
    _fail(path, f"{what} must be numeric, got dtype {a.dtype}")
  if a.ndim != 1:
    _fail(path, f"{what} must be 1-dimensional, got shape {a.shape}")
  a = a.astype(np.float64)
  bad = ~np.isfinite(a)
  if bad.any():
    i = int(np.argmax(bad))
    _fail(path, f"{what} has {int(bad.sum())} non-finite value(s) (NaN or inf), the first at "
                f"index {i}: {a[i]}")
  if a.size < 2:
    _fail(path, f"{what} needs at least two scores, got {a.size}")
  return a


def _load_npz(path: str) -> tuple[np.ndarray, np.ndarray]:
  if not zipfile.is_zipfile(path):
    _fail(path, "unreadable .npz file: not a zip archive (write it with numpy.savez)")
  try:
    with np.load(path, allow_pickle=False) as z:
      missing = [k for k in ("in_scores", "out_scores") if k not in z.files]
      if missing:
        _fail(path, f"missing array(s) {', '.join(missing)} (found: "
                    f"{', '.join(z.files) or 'none'}); expected in_scores and out_scores")
      raw_in, raw_out = z["in_scores"], z["out_scores"]
  except ScoresError:
    raise
  except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
    _fail(path, f"unreadable .npz file ({type(e).__name__}: {' '.join(str(e).split())})")
  return _check_side(path, "in_scores", raw_in), _check_side(path, "out_scores", raw_out)


def _load_csv(path: str) -> tuple[np.ndarray, np.ndarray]:
  try:
    with open(path, newline="", encoding="utf-8-sig") as f:      # Excel's byte-order mark
      rows = list(csv.reader(f))
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    _fail(path, f"unreadable .csv file ({type(e).__name__}: {' '.join(str(e).split())})")
  rows = [r for r in rows if any(c.strip() for c in r)]
  if not rows:
    _fail(path, "empty file; expected a header row with columns score and member")
  header = [c.strip().lower() for c in rows[0]]
  missing = [c for c in ("score", "member") if c not in header]
  if missing:
    _fail(path, f"missing column(s) {', '.join(missing)} in the header row "
                f"{','.join(rows[0])!r}; expected columns score and member")
  dup = [c for c in ("score", "member") if header.count(c) > 1]
  if dup:
    _fail(path, f"column(s) {', '.join(dup)} appear more than once in the header row "
                f"{','.join(rows[0])!r}")
  i_s, i_m = header.index("score"), header.index("member")
  scores, members = [], []
  for line, r in enumerate(rows[1:], start=2):
    if len(r) <= max(i_s, i_m):
      _fail(path, f"row {line} has {len(r)} field(s), fewer than the header's {len(header)}")
    s, m = r[i_s].strip(), r[i_m].strip().lower()
    # A plain ASCII decimal (float() would also take "1_000" and non-ASCII digits).
    if not _NUMBER.fullmatch(s):
      _fail(path, f"row {line}: score {s!r} is not a number")
    v = float(s)
    if not math.isfinite(v):
      _fail(path, f"row {line}: score {s!r} is not finite (NaN or inf)")
    if m in _TRUE:
      members.append(True)
    elif m in _FALSE:
      members.append(False)
    else:
      _fail(path, f"row {line}: member {r[i_m]!r} is not one of 1, 0, true, false")
    scores.append(v)
  s_K, m_K = np.array(scores, np.float64), np.array(members, bool)
  return (_check_side(path, "the member = 1 scores", s_K[m_K]),
          _check_side(path, "the member = 0 scores", s_K[~m_K]))


def load_scores(path: str) -> tuple[np.ndarray, np.ndarray]:
  """Reads an audit's scores from .npz (in_scores, out_scores) or .csv (score, member).

  Returns (in_K, out_K), float64 in file order, finite, >= 2 each; raises ScoresError (a
  ValueError) starting "scores: <path>:" and naming the problem.
  """
  if not isinstance(path, str) or not path:
    raise ScoresError(f"scores must be a file path, got {path!r}")
  ext = os.path.splitext(path)[1].lower()
  if ext not in FORMATS:
    _fail(path, f"unknown format {ext or '(no extension)'!r}; expected one of {FORMATS}")
  if not os.path.isfile(path):
    _fail(path, "no such file")
  return _load_npz(path) if ext == ".npz" else _load_csv(path)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditScoresConfig(_common.ExperimentConfig):
  """What `run` audits: a scores file, or the built-in Gaussian example."""
  scores: str = _common.option(
      "", "Path of a .npz (in_scores, out_scores) or .csv (score, member) file of attack "
      "scores, higher = IN; empty: the built-in Gaussian example.")
  claimed_epsilon: Optional[float] = _common.option(
      None, "The eps the training claims (default: none; the example claims its exact eps).")
  delta: float = _common.option(1e-5, "The delta of the claim, in (0, 1).")
  confidence: float = _common.option(0.95, "Confidence of every bound, in (0, 1).")
  threshold: Optional[float] = _common.option(
      None, "A threshold fixed before seeing the scores (adds clopper_pearson_fixed).")
  demo_mu: float = _common.option(1.0, "mu of the built-in Gaussian example.")
  demo_trials: int = _common.option(2000, "Scores per side of the built-in example.")

  def __post_init__(self):
    super().__post_init__()
    _common.check_range(self, "delta", "confidence", low=0, high=1, open_low=True, open_high=True)
    if self.claimed_epsilon is not None:
      _common.check_range(self, "claimed_epsilon", low=0)
    if self.threshold is not None and not (
        isinstance(self.threshold, (int, float)) and not isinstance(self.threshold, bool)
        and math.isfinite(self.threshold)):
      raise ValueError(f"threshold must be a finite number, got {self.threshold!r}")
    _common.check_positive(self, "demo_mu")
    _common.check_int(self, "demo_trials", minimum=2)
    if not isinstance(self.scores, str):
      raise ValueError(f"scores must be a file path, got {self.scores!r}")
    if self.scores:
      load_scores(self.scores)       # every check, before any output exists


def _demo_scores(cfg: AuditScoresConfig) -> tuple[np.ndarray, np.ndarray]:
  """The Gaussian mechanism of sensitivity mu and unit noise: N(mu, 1) IN, N(0, 1) OUT."""
  rng = np.random.default_rng(cfg.seed)
  return (rng.normal(cfg.demo_mu, 1.0, cfg.demo_trials), rng.normal(0.0, 1.0, cfg.demo_trials))


def _figure(out_dir, band, claimed, delta, mu, title) -> str:
  with _plots.figure(out_dir, "roc.png", ncols=2, figsize=(11, 4.6), dpi=110) as (fig, axes):
    for ax, log in zip(axes, (True, False)):
      roc.plot_roc_band(ax, band, epsilon=claimed, delta=delta if claimed is not None else 0.0,
                        mu=mu, log_scale=log, label="scores")
      ax.set_title(("low-FPR region (log-log)" if log else "whole ROC") + f": {title}", fontsize=9)
  return "roc.png"


def run(cfg: AuditScoresConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Reads (or makes) the scores and bounds eps (checks before writing); `_common.finish`'s dict."""
  demo = not cfg.scores
  if demo:
    s_in, s_out = _demo_scores(cfg)
    true_eps = gdp.gaussian_epsilon(cfg.delta, cfg.demo_mu)
    claimed = true_eps if cfg.claimed_epsilon is None else cfg.claimed_epsilon
    source = {"path": None, "demo": "gaussian", "demo_mu": cfg.demo_mu, "true_epsilon": true_eps}
  else:
    s_in, s_out = load_scores(cfg.scores)
    true_eps, claimed = None, cfg.claimed_epsilon
    source = {"path": cfg.scores, "format": os.path.splitext(cfg.scores)[1].lower()[1:]}
  source.update(num_in=int(s_in.size), num_out=int(s_out.size))
  bounds = score_audit.score_bounds(s_in, s_out, delta=cfg.delta, confidence=cfg.confidence,
                                   claimed_epsilon=claimed, threshold=cfg.threshold,
                                   seed=cfg.seed, progress=progress and not quiet)
  band = roc.roc_band(s_in, s_out, confidence=cfg.confidence)
  fpr, tpr, _ = roc.empirical_roc(s_in, s_out)
  auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))

  os.makedirs(out_dir, exist_ok=True)
  if demo:
    np.savez(os.path.join(out_dir, "demo_scores.npz"), in_scores=s_in, out_scores=s_out)
    source["path"] = "demo_scores.npz"

  record = {"source": source, "claimed_epsilon": claimed, "delta": cfg.delta,
            "confidence": cfg.confidence}
  for name, b in bounds.items():
    record[f"epsilon_lower_{name}"] = b.epsilon_lower
  record["estimators"] = {
      name: {"epsilon_lower": b.epsilon_lower, "confidence": b.confidence,
             "valid_only_if_gdp": name in GDP_ONLY,
             "assumptions": b.assumptions, "details": b.details}
      for name, b in bounds.items()}
  best = bounds["best"]
  gdp_max = max(bounds[n].epsilon_lower for n in GDP_ONLY if n in bounds)
  record["falsified"] = None if claimed is None else bool(best.epsilon_lower > claimed)
  record["falsified_if_gdp"] = None if claimed is None else bool(
      max(gdp_max, best.epsilon_lower) > claimed)
  record["roc"] = {"auc": auc, "fpr": band.fpr_G, "tpr_empirical": band.tpr_empirical_G,
                   "tpr_lower": band.tpr_lower_G, "tpr_upper": band.tpr_upper_G,
                   "band_half_width_in": band.epsilon_in,
                   "band_half_width_out": band.epsilon_out,
                   "band_assumptions": band.assumptions}

  rows = []
  for name, b in bounds.items():
    rows.append([name, b.epsilon_lower,
                 "mu-GDP only" if name in GDP_ONLY else "any (eps, delta)-DP",
                 None if claimed is None else bool(b.epsilon_lower > claimed)]
                + ([true_eps] if demo else []))
  cols = ["estimator", "ε lower", "valid for", "exceeds claim"] + (["exact ε"] if demo else [])
  what = (f"built-in Gaussian mechanism, μ = {cfg.demo_mu:g}" if demo else cfg.scores)
  tables = [_common.Table(
      title=f"ε lower bounds at δ = {cfg.delta:g}, {100 * cfg.confidence:g}% confidence "
            f"({what}; {s_in.size} IN / {s_out.size} OUT scores)",
      columns=cols, rows=rows,
      note="Each row is valid at the confidence on its own; 'best' is the maximum of the "
           "assumption-free rows, each rerun at a Bonferroni-corrected confidence, so it alone "
           "may be compared with the claim. Rows valid only for mu-GDP mechanisms assume a "
           "Gaussian trade-off curve.")]
  mu = cfg.demo_mu if demo else None
  figures = [_figure(out_dir, band, claimed, cfg.delta, mu, f"{s_in.size} IN / {s_out.size} OUT")]
  verdict = "FALSIFIED" if record["falsified"] else "not falsified"
  claim_text = ("no eps claimed" if claimed is None else
                f"claimed eps {claimed:.3g} {verdict} (best valid bound "
                f"{best.epsilon_lower:.3f} from {best.details['estimator']})")
  summary = (f"Audit of {what}: {claim_text} at delta = {cfg.delta:g} and "
             f"{100 * cfg.confidence:g}% confidence. Clopper-Pearson (split) "
             f"{bounds['clopper_pearson'].epsilon_lower:.3f}, one-run "
             f"{bounds['one_run'].epsilon_lower:.3f}, f-DP one-run "
             f"{bounds['fdp_one_run'].epsilon_lower:.3f}; if the mechanism is mu-GDP: GDP "
             f"{bounds['gdp'].epsilon_lower:.3f}, f-DP one-run with Gaussian f "
             f"{bounds['fdp_one_run_gdp'].epsilon_lower:.3f}. Empirical AUC {auc:.3f}."
             + (f" The exact eps of this mechanism is {true_eps:.3f}." if demo else ""))
  return _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=figures,
                        summary=summary, quiet=quiet)


def main():
  _common.app_run(NAME, AuditScoresConfig, run)


if __name__ == "__main__":
  main()
