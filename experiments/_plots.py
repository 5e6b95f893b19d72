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

from dpjax.audit import stats  # noqa: E402

__all__ = ["plt", "figure", "decorate", "epsilon_axes", "audit_bounds", "audit_roc"]

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
