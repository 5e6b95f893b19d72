"""Metrics for attacks and models: ROC, AUC, advantage, TPR at fixed FPR, per-group rates.

A higher membership score means "more likely a member" (label 1); a random guess has
TPR = FPR (the noise floor). Report TPR at a low FPR on a log-log ROC (Carlini et al.
2022). Host NumPy, float64. Shape letters: K scored (model, record) pairs, G groups.

Examples:
  >>> import numpy as np
  >>> scores = np.array([0.9, 0.8, 0.3, 0.2]); labels = np.array([1, 0, 1, 0])
  >>> roc_auc(scores, labels)
  0.75
  >>> advantage(scores, labels)
  0.5
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from dpjax import _validate


def _check_scores_labels(scores_K, labels_K) -> tuple[np.ndarray, np.ndarray]:
  """Flattened scores (float64[K], no NaN) and labels (bool[K], both classes present)."""
  s = np.asarray(scores_K).reshape(-1)
  y = np.asarray(labels_K).reshape(-1)
  if s.shape != y.shape:
    raise ValueError(f"scores_K and labels_K must have the same size, got {s.shape} and {y.shape}")
  s = _validate.check_array(s, "scores_K", allow_inf=True)
  y = _validate.check_binary(y, "labels_K")
  if y.all() or not y.any():
    raise ValueError("labels_K must contain both members (1) and non-members (0)")
  return s, y


def roc_counts(scores_K, labels_K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(fp_J, tp_J, thresholds_J) of "member iff score >= t" over every distinct score t.

  The one empirical ROC of dpjax: int64 counts from (0, 0) at t = +inf down to
  (#non-members, #members); ties share a point; +-inf scores allowed.

  Examples:
    >>> fp, tp, thr = roc_counts([0.9, 0.8, 0.3, 0.2], [1, 0, 1, 0])
    >>> fp.tolist(), tp.tolist(), thr.tolist()
    ([0, 0, 1, 1, 2], [0, 1, 1, 2, 2], [inf, 0.9, 0.8, 0.3, 0.2])
  """
  s, y = _check_scores_labels(scores_K, labels_K)
  order = np.argsort(-s, kind="stable")
  s, y = s[order], y[order]
  last = np.r_[np.flatnonzero(s[1:] != s[:-1]), s.size - 1]   # last of each tie block
  tp = np.cumsum(y)[last]
  return np.r_[0, (last + 1) - tp], np.r_[0, tp], np.r_[np.inf, s[last]]


def roc_curve(scores_K, labels_K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """ROC (fpr, tpr, thresholds): `roc_counts` divided by the class sizes, float64."""
  fp, tp, thr = roc_counts(scores_K, labels_K)
  return fp / fp[-1], tp / tp[-1], thr


def roc_auc(scores_K, labels_K) -> float:
  """Area under the ROC = P(member score > non-member score) + P(tie)/2."""
  fpr, tpr, _ = roc_curve(scores_K, labels_K)
  return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def auc(fpr, tpr) -> float:
  """Trapezoidal area under a curve given by increasing `fpr` points."""
  fpr = _validate.check_array(fpr, "fpr", low=0.0, high=1.0)
  tpr = _validate.check_array(tpr, "tpr", low=0.0, high=1.0)
  if fpr.shape != tpr.shape or fpr.ndim != 1 or fpr.size < 2:
    raise ValueError("fpr and tpr must be 1-D arrays of the same length >= 2")
  if np.any(np.diff(fpr) < 0):
    raise ValueError("fpr must be non-decreasing")
  return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def advantage(scores_K, labels_K) -> float:
  """Membership advantage max_t (TPR - FPR) (Yeom et al. 2018), in [0, 1]."""
  fpr, tpr, _ = roc_curve(scores_K, labels_K)
  return float(np.max(tpr - fpr))


def balanced_accuracy(scores_K, labels_K) -> float:
  """Best balanced accuracy over thresholds, (1 + advantage) / 2."""
  return 0.5 * (1.0 + advantage(scores_K, labels_K))


def tpr_at_fpr(scores_K, labels_K, fpr: float | Sequence[float]):
  """Highest TPR among thresholds with FPR <= `fpr` (no interpolation): float or float64[...].

  Examples:
    >>> tpr_at_fpr(np.arange(10.0), np.array([0] * 5 + [1] * 5), 0.0)
    1.0
  """
  target = _validate.check_array(fpr, "fpr", low=0.0, high=1.0)
  f, t, _ = roc_curve(scores_K, labels_K)
  # f is non-decreasing, t non-decreasing: the best point with f <= target is the last one.
  idx = np.searchsorted(f, target, side="right") - 1
  out = t[idx]
  return float(out) if out.ndim == 0 else out


def accuracy(predictions_K, labels_K) -> float:
  """Fraction of equal entries."""
  p = _validate.check_array(predictions_K, "predictions_K", ndim=1, low=0.0, integer=True)
  y = _validate.check_array(labels_K, "labels_K", ndim=1, low=0.0, integer=True)
  if p.shape != y.shape or p.size == 0:
    raise ValueError("predictions_K and labels_K must be non-empty and of the same size")
  return float(np.mean(p == y))


def per_group_rates(predictions_K, labels_K, groups_K) -> dict:
  """{group: {"n", "accuracy", "positive_rate", "tpr", "fpr"}} of {0, 1} predictions (NaN for
  an empty denominator).
  """
  p = _validate.check_binary(predictions_K, "predictions_K", ndim=1).astype(int)
  y = _validate.check_binary(labels_K, "labels_K", ndim=1).astype(int)
  g = _validate.check_array(groups_K, "groups_K", np.int64, ndim=1, low=0.0, integer=True)
  if not (p.shape == y.shape == g.shape) or p.size == 0:
    raise ValueError("predictions_K, labels_K and groups_K must be non-empty and of one size")
  out = {}
  for gid in np.unique(g):
    m = g == gid
    pos, neg = m & (y == 1), m & (y == 0)
    out[int(gid)] = {
        "n": int(m.sum()),
        "accuracy": float(np.mean(p[m] == y[m])),
        "positive_rate": float(np.mean(p[m])),
        "tpr": float(np.mean(p[pos])) if pos.any() else float("nan"),
        "fpr": float(np.mean(p[neg])) if neg.any() else float("nan"),
    }
  return out


def plot_roc_loglog(ax, curves: Mapping[str, tuple], *, floor: bool = True,
                    min_rate: float = 1e-4, title: str | None = None):
  """Draws ROC curves {label: (fpr, tpr)} on log-log axes `ax` (with TPR = FPR if `floor`,
  lower limit `min_rate`) and returns ax.
  """
  _validate.check_probability(min_rate, "min_rate", open_low=True, open_high=True)
  floor = _validate.check_bool(floor, "floor")
  if not isinstance(curves, Mapping):
    raise TypeError(f"curves must be a mapping {{label: (fpr, tpr)}}, got {curves!r:.80}")
  for label, (f, t) in curves.items():
    f = np.maximum(np.asarray(f, np.float64), min_rate)
    t = np.maximum(np.asarray(t, np.float64), min_rate)
    ax.plot(f, t, label=label, lw=1.3)
  if floor:
    ax.plot([min_rate, 1], [min_rate, 1], "k--", lw=0.8, label="noise floor (TPR = FPR)")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(min_rate, 1)
  ax.set_ylim(min_rate, 1)
  ax.set_xlabel("false-positive rate")
  ax.set_ylabel("true-positive rate")
  if title:
    ax.set_title(title)
  ax.legend(fontsize=7, loc="lower right")
  return ax
