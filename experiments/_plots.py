"""Figures for experiments: the Agg backend, one figure's create / save / close.

    with _plots.figure(out_dir, "audit_digits.png", figsize=(6, 4)) as (fig, ax):
      ax.plot(...)                   # ncols=2 (or any plt.subplots keyword): an array

The only module that chooses matplotlib's backend (`from experiments._plots import plt`).
"""

from __future__ import annotations

import contextlib
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "figure", "epsilon_axes"]

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


def epsilon_axes(ax, *, xlabel: str, title: str, ylabel: str = "ε at δ",
                 yscale: str | None = None) -> None:
  """The audits' eps frame: log2 x axis, labels, a 10-pt title, a 7-pt legend."""
  ax.set_xscale("log", base=2)
  if yscale is not None:
    ax.set_yscale(yscale)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=10)
  ax.legend(fontsize=7)
