"""Figures for experiments: the Agg backend, one figure's create / save / close.

    with _plots.figure(out_dir, "audit_digits.png", figsize=(6, 4)) as (fig, ax):
      ax.plot(...)                   # ncols=2 (or any plt.subplots keyword): an array

The only module that chooses matplotlib's backend (`from experiments._plots import plt`).
"""

from __future__ import annotations

import contextlib
import math
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dpjax import mechanisms  # noqa: E402
from dpjax.audit import stats  # noqa: E402

__all__ = ["plt", "figure", "decorate", "epsilon_axes", "audit_bounds", "audit_roc",
           "dpsgd_cost_and_clip", "final_model_bounds", "mechanisms_bias_and_threshold",
           "exercise6_zips", "pate_credit_accuracy"]

DPI = 120


@contextlib.contextmanager
def figure(out_dir: str, name: str, *, dpi: float = DPI, tight_layout: bool = True,
           savefig_kwargs: dict | None = None, **subplots_kwargs):
  """Yields `plt.subplots(**kwargs)`; saves <out_dir>/<name> on normal exit; always closes."""
  fig, ax = plt.subplots(**subplots_kwargs)
  try:
    yield fig, ax
    if tight_layout:
      fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name), dpi=dpi, **(savefig_kwargs or {}))
  finally:
    plt.close(fig)


def decorate(ax, *, xlabel: str | None = None, ylabel: str | None = None,
             title: str | None = None, xscale: str | None = None, yscale: str | None = None,
             legend: float | None = 7, title_size: float | None = None) -> None:
  """Labels, title, scales ("log", "log2", "linear") and a legend of `legend`-pt text."""
  for scale, setter in ((xscale, ax.set_xscale), (yscale, ax.set_yscale)):
    if scale == "log2":
      setter("log", base=2)
    elif scale is not None:
      setter(scale)
  if xlabel is not None:
    ax.set_xlabel(xlabel)
  if ylabel is not None:
    ax.set_ylabel(ylabel)
  if title is not None:
    ax.set_title(title, fontsize=title_size)
  if legend:
    ax.legend(fontsize=legend)


def epsilon_axes(ax, *, xlabel: str, title: str, ylabel: str = "ε at δ",
                 yscale: str | None = None) -> None:
  """The audits' eps frame: log2 x axis, labels, a 10-pt title, a 7-pt legend."""
  decorate(ax, xlabel=xlabel, ylabel=ylabel, title=title, xscale="log2", yscale=yscale,
           title_size=10)


def audit_bounds(out_dir: str, results: dict) -> str:
  """experiments.audit: bounds against the claimed eps, drawn from the recorded rows."""
  rows, trials, variant = results["rows"], results["trials"], results["variant"]
  fin = [r for r in rows if math.isfinite(r["epsilon"])]
  fn = "audit_bounds.png"
  with figure(out_dir, fn, figsize=(5.2, 4.2), dpi=130) as (fig, ax):
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
    ax.set(xlabel="ε upper bound (accountant, claimed)",
           ylabel="ε lower bound (95% confidence)", title=f"Audit of DP-SGD ({variant})")
    ax.legend(fontsize=7)
  return fn


def audit_roc(out_dir: str, results: dict) -> str:
  """experiments.audit: the white-box ROC per claimed eps, from the recorded counts and curve."""
  items = list(results["white_box_roc"].values())
  fn = "audit_roc.png"
  with figure(out_dir, fn, ncols=max(1, len(items)), squeeze=False,
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
      ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1), xlabel="FPR")
      ax.set_title(f"claimed ε = {rec['claimed_epsilon']:g}", fontsize=9)
    axes[0][0].set_ylabel("TPR")
    axes[0][0].legend(fontsize=6, loc="lower right")
  return fn


def dpsgd_cost_and_clip(out_dir: str, record: dict, epsilons, clip_norms) -> list[str]:
  """experiments.dpsgd: demo 2's accuracy against eps and demo 3's against C, drawn from the record."""
  cost, clip = record["cost"], record["clip"]
  with figure(out_dir, "dpsgd_cost_and_clip.png", ncols=2, figsize=(10, 3.8),
              dpi=110) as (fig, axes):
    for name, color in (("linear", "C0"), ("cubic", "C1")):
      axes[0].errorbar(epsilons, [cost[f"{name}/{e}"]["acc_mean"] for e in epsilons],
                       yerr=[cost[f"{name}/{e}"]["acc_sd"] for e in epsilons], marker="o",
                       color=color, label=f"{name} DP-SGD")
      axes[0].axhline(cost[f"{name}/noiseless"]["acc_mean"], color=color, ls="--", lw=1,
                      label=f"{name} clipped, no noise")
      axes[0].axhline(cost[f"{name}/newton"]["acc_mean"], color=color, ls=":", lw=1,
                      label=f"{name} Newton")
    decorate(axes[0], xscale="log", xlabel="epsilon (delta = 1e-5)", ylabel="test accuracy",
             title="Cost of privacy", legend=7)
    cs = list(clip_norms)
    axes[1].plot(cs, [clip[str(c)]["acc_mean"] for c in cs], "o-", label="accuracy")
    ax2 = axes[1].twinx()
    ax2.plot(cs, [clip[str(c)]["logloss_mean"] for c in cs], "s--", color="C3", label="log loss")
    decorate(axes[1], xscale="log", xlabel="clipping norm C (eta * C = 0.5)",
             ylabel="accuracy", legend=None)
    ax2.set_ylabel("log loss", color="C3")
    axes[1].set_title("Clipping norm (cubic, n = 500, eps = 2)")
  return ["dpsgd_cost_and_clip.png"]


def final_model_bounds(out_dir: str, rows: list) -> str:
  """experiments.audit_final_model: each adversary's bound (the first five final-model, the
  sixth white-box) against the exact eps, the heuristic and the ceiling."""
  eps = [r["target_epsilon"] for r in rows]
  with figure(out_dir, "audit_final_model.png", figsize=(6.5, 4.2)) as (fig, ax):
    for key, style, label in (("exact_epsilon", "k-s", "exact ε (PLD)"),
                              ("last_iterate_epsilon", "k:", "last-iterate heuristic"),
                              ("ceiling_record", "--", "ceiling, record canaries")):
      ax.plot(eps, [r[key] for r in rows], style, label=label,
              **({"color": "gray"} if style == "--" else {}))
    for i, name in enumerate(rows[0]["epsilon_lower"]):
      ax.plot(eps, [r["epsilon_lower"][name] for r in rows], "-o" if i < 5 else "-^",
              color=f"C{i}", label=name if i < 5 else "white-box, same runs")
    epsilon_axes(ax, xlabel="claimed ε", ylabel="ε at δ (95% lower bounds)",
                 title="Final-model adversaries on the digits")
  return "audit_final_model.png"


def mechanisms_bias_and_threshold(out_dir: str, results: dict) -> list[str]:
  """experiments.mechanisms: demo 2(b) against B and demo 3 against the threshold."""
  clip, em = results["clip_bound"], results["exponential"]
  em_curves = em["curves"]
  with figure(out_dir, "mechanisms.png", ncols=2, figsize=(10, 3.8)) as (fig, axes):
    ax = axes[0]
    per = clip["per_clip_bound"]
    b = [r["clip_bound"] for r in per]
    ax.plot(b, [abs(r["bias"]) for r in per], marker="o", label="|bias| (clipping)")
    ax.plot(b, [r["noise_sd_mc"] for r in per], marker="s", label="noise SD")
    ax.plot(b, [r["rmse_mc"] for r in per], marker="^", color="k", label="RMSE")
    ax.axvline(clip["true_max"], color="gray", ls=":", label="private max (must not be used)")
    decorate(ax, xscale="log", yscale="log", xlabel="clip bound B (k$)", ylabel="k$",
             title="Demo 2(b): private mean income, ε = 1", legend=7)
    ax = axes[1]
    ax.plot(em_curves["thresholds"], em_curves["private_accuracy"], marker=".",
            label="accuracy on the 500 private applicants")
    ax.plot(em_curves["thresholds"], em_curves["test_accuracy"], marker=".", label="test accuracy")
    for r in em["per_epsilon"]:
      ax.axhline(r["test_accuracy"], ls="--", lw=0.8,
                 color=plt.cm.plasma(0.15 + 0.2 * em["per_epsilon"].index(r)),
                 label=f"exp. mech. ε={r['epsilon']:g}: test acc")
    decorate(ax, xlabel="approval threshold", ylabel="accuracy",
             title="Demo 3: choosing a threshold privately", legend=7)
  return ["mechanisms.png"]


def exercise6_zips(out_dir: str, r: dict, cfg) -> str:
  """experiments.exercise6 (cfg: its config): noisy vs true zip rates (flagged in red) and the error against zip size."""
  zips = [zz for zz in r["zips"] if zz["customers"] > 0]
  n, tr, nr, sd, bad = (np.array([zz[k] for zz in zips]) for k in (
      "customers", "true_rate", "noisy_rate", "rate_sd", "unreliable_ours"))
  n = n.astype(float)
  with figure(out_dir, "exercise6_zips.png", ncols=2, figsize=(10, 3.8)) as (fig, axes):
    ax = axes[0]
    ax.errorbar(tr[~bad], nr[~bad], yerr=sd[~bad], fmt="o", ms=3, label="reliable")
    ax.errorbar(tr[bad], nr[bad], yerr=np.minimum(sd[bad], 1.0), fmt="s", ms=3, color="C3",
                label="unreliable (ours)")
    ax.plot([0, 1], [0, 1], color="gray", ls=":")
    decorate(ax, xlabel="true delinquency rate", ylabel="released rate (± noise sd)",
             legend=None)
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.loglog(n, np.maximum(np.abs(nr - tr), 1e-4), "o", ms=3, label="|released - true|")
    grid = np.geomspace(max(1.0, n.min()), n.max(), 50)
    half = cfg.zip_epsilon / 2
    b = (1.0 + cfg.zip_codes * mechanisms.laplace_grid(half)) / half
    ax.loglog(grid, math.sqrt(2) * b * math.sqrt(1 + 0.5 ** 2) / grid, color="C1",
              label="noise sd at rate 0.5")
    ax.axhline(cfg.max_rate_sd, color="C3", ls="--", label=f"our threshold {cfg.max_rate_sd:g}")
    ax.axvline(cfg.min_count, color="gray", ls=":", label=f"lecture: {cfg.min_count:g} customers")
    decorate(ax, xlabel="customers in the zip", ylabel="error of the released rate",
             legend=7)
    fig.suptitle(f"Exercise 6(b): {cfg.zip_codes} zip-code delinquency rates at "
                 f"eps = {cfg.zip_epsilon:g}")
  return "exercise6_zips.png"


def pate_credit_accuracy(out_dir: str, record: dict) -> str:
  """experiments.pate_credit: student test accuracy vs target eps: GNMax, Confident-GNMax, DP-SGD, non-private."""
  with figure(out_dir, "pate_credit.png", figsize=(5.5, 3.6)) as (fig, ax):
    for agg, mk in (("GNMax", "o"), ("Confident-GNMax", "s")):
      sel = [c for c in record["cells"] if c["aggregator"] == agg
             and c["student_accuracy"] is not None]
      ax.plot([c["target_epsilon"] for c in sel], [c["student_accuracy"] for c in sel],
              marker=mk, label=f"PATE student, {agg}")
    eps = sorted(float(e) for e in record["dpsgd"])
    ax.errorbar(eps, [record["dpsgd"][str(e)]["accuracy"] for e in eps],
                yerr=[record["dpsgd"][str(e)]["accuracy_std"] for e in eps], marker="^", ls="--",
                label="DP-SGD (mean ± sd over seeds)")
    ax.axhline(record["non_private_accuracy"], color="gray", ls=":", label="non-private")
    ax.axhline(record["ensemble_accuracy"], color="gray", ls="-.", lw=0.8,
               label="teachers' plurality vote")
    ax.axhline(record["bayes_accuracy_test"], color="black", lw=0.8, label="Bayes (test)")
    lows = [c["student_accuracy"] for c in record["cells"] if c["student_accuracy"] is not None]
    ax.set_ylim(min(lows + [record["teacher_accuracy_mean"]]) - 0.02,
                record["bayes_accuracy_test"] + 0.01)
    ax.set_xscale("log", base=2)
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    decorate(ax, xlabel="target ε (δ = 1e-5)", ylabel="test accuracy", legend=7,
             title=f"PATE ({record['teachers']} teachers) vs DP-SGD, credit world")
  return "pate_credit.png"
