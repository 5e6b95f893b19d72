"""The empirical ROC of an attack, a simultaneous confidence band, and the accounted curve beside it.

Band (Dvoretzky-Kiefer-Wolfowitz, Massart's constant): P[sup_t |S_n(t) - S(t)| > e] <=
2 exp(-2 n e^2) for n i.i.d. scores. With alpha/2 per side, e = sqrt(ln(4/alpha) / (2 K)) per
side, and every true ROC point (x, y) of a (randomized) threshold test satisfies

    max(0, R_n^lo(x - e_out) - e_in) <= y <= min(1, R_n^hi(x + e_out) + e_in),

R_n^lo / R_n^hi the lowest / highest empirical ROC point at an abscissa, at every FPR at once.
A lower band above the accounted trade-off curve (`dpjax.tradeoff`) falsifies the claim.
Shape letters: K trials, J ROC points, G grid of false-positive rates.

References: Dvoretzky, Kiefer & Wolfowitz 1956; Massart 1990 (doi:10.1214/aop/1176990746).

Examples:
  >>> fpr, tpr, thr = empirical_roc([2.0, 3.0], [0.0, 2.0])
  >>> fpr.tolist(), tpr.tolist()
  ([0.0, 0.0, 0.0, 0.5, 1.0], [0.0, 0.0, 0.5, 1.0, 1.0])
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

from dpjax import _validate, metrics, tradeoff
from dpjax.audit import stats


def empirical_roc(scores_in_K, scores_out_K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(fpr_J, tpr_J, thresholds_J) of the tests "IN iff score > t", t = +inf, the distinct scores
  decreasing, -inf: from (0, 0) to (1, 1).

  Examples:
    >>> _, _, thr = empirical_roc([1.0], [0.0])
    >>> thr.tolist()
    [inf, 1.0, 0.0, -inf]
  """
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  fp, tp, thr = metrics.roc_counts(np.r_[s_in, s_out], np.r_[np.ones(s_in.size, bool),
                                                             np.zeros(s_out.size, bool)])
  # "score > t" at a distinct score t is "score >= the next higher one"; the last point
  # is the test "always IN" (at -inf).
  finite = np.isfinite(thr[1:])
  pick = np.r_[0, np.flatnonzero(finite), thr.size - 1]
  return fp[pick] / s_out.size, tp[pick] / s_in.size, np.r_[np.inf, thr[1:][finite], -np.inf]


@dataclasses.dataclass(frozen=True)
class RocBand:
  """With probability >= `confidence`, every true ROC point lies in [tpr_lower_G, tpr_upper_G] at
  every fpr_G (float64[G], increasing) at once; epsilon_out, epsilon_in: the DKW half-widths.
  """
  fpr_G: np.ndarray
  tpr_lower_G: np.ndarray
  tpr_upper_G: np.ndarray
  tpr_empirical_G: np.ndarray
  confidence: float
  epsilon_out: float
  epsilon_in: float
  assumptions: str


def _curve_at(fpr_J, tpr_J, u_G, high: bool):
  """Highest (lowest) point of the polyline through (fpr_J, tpr_J) at u: 1 beyond 1 (0 below 0)."""
  if high:
    j = np.clip(np.searchsorted(fpr_J, u_G, side="right") - 1, 0, fpr_J.size - 1)
    k = np.minimum(j + 1, fpr_J.size - 1)
  else:
    k = np.clip(np.searchsorted(fpr_J, u_G, side="left"), 0, fpr_J.size - 1)
    j = np.maximum(k - 1, 0)
  width = fpr_J[k] - fpr_J[j]
  with np.errstate(invalid="ignore", divide="ignore"):
    lam = np.where(width > 0, (u_G - fpr_J[j]) / width, 0.0 if high else 1.0)
  y = tpr_J[j] + np.clip(lam, 0.0, 1.0) * (tpr_J[k] - tpr_J[j])
  return np.where(u_G >= 1.0, 1.0, y) if high else np.where(u_G <= 0.0, 0.0, y)


def roc_band(scores_in_K, scores_out_K, *, confidence: float = 0.95,
             fpr_G: Optional[Any] = None) -> RocBand:
  """Simultaneous DKW-Massart band for the true ROC; fpr_G default: 0, 200 log-spaced points from
  min(1e-3, 0.1 / K_out) to 1, and 101 linear ones.

  Examples:
    >>> rng = np.random.default_rng(0)
    >>> b = roc_band(rng.normal(size=5000) + 1, rng.normal(size=5000), fpr_G=[0.5])
    >>> round(b.epsilon_in, 4), bool(b.tpr_lower_G[0] < 0.84 < b.tpr_upper_G[0])
    (0.0209, True)
  """
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  confidence = _validate.check_confidence(confidence)
  if fpr_G is None:
    lo = min(1e-3, 0.1 / s_out.size)
    grid = np.unique(np.concatenate([[0.0], np.geomspace(lo, 1.0, 200), np.linspace(0, 1, 101)]))
  else:
    grid = np.sort(_validate.check_array(fpr_G, "fpr_G", ndim=1, low=0.0, high=1.0, min_size=1))
  alpha = 1.0 - confidence
  e_out = math.sqrt(math.log(4.0 / alpha) / (2.0 * s_out.size))
  e_in = math.sqrt(math.log(4.0 / alpha) / (2.0 * s_in.size))
  fpr, tpr, _ = empirical_roc(s_in, s_out)           # both non-decreasing along J
  upper = np.minimum(1.0, _curve_at(fpr, tpr, grid + e_out, True) + e_in)
  lower = np.maximum(0.0, _curve_at(fpr, tpr, grid - e_out, False) - e_in)
  empirical = _curve_at(fpr, tpr, grid, True)
  return RocBand(
      grid, lower, upper, empirical, confidence, e_out, e_in,
      f"Dvoretzky-Kiefer-Wolfowitz-Massart band on each side's survival function at "
      f"{1 - alpha / 2:g} (jointly {confidence:g}); valid over the whole curve at once when "
      "each side's scores are i.i.d.; covers the ROC of randomized threshold tests")


@_validate.names_extreme_arguments
def plot_roc_band(ax, band: RocBand, *, epsilon: Optional[float] = None, delta: float = 0.0,
                  mu: Optional[float] = None, privacy_loss: Any = None,
                  max_epsilon: float = 50.0, log_scale: bool = True,
                  label: str = "attack") -> Any:
  """Draws the empirical ROC, its band, the diagonal and the accounted curves on `ax`; returns ax.

  Curves: the (eps, delta)-DP bound if `epsilon`, mu-GDP if `mu`, `tradeoff.pld_tpr_bound` up
  to `max_epsilon` if `privacy_loss` (with delta(eps), rounding_noise(eps)).
  """
  if not callable(getattr(ax, "fill_between", None)):
    raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
  _validate.check_instance(band, RocBand, "band")
  delta = _validate.check_delta(delta, allow_zero=True)
  max_epsilon = _validate.check_epsilon(max_epsilon, "max_epsilon")
  _validate.check_bool(log_scale, "log_scale")
  _validate.check_instance(label, str, "label")
  x = band.fpr_G
  xs = np.maximum(x, x[x > 0].min() if np.any(x > 0) else 1e-6) if log_scale else x
  ax.fill_between(xs, band.tpr_lower_G, band.tpr_upper_G, alpha=0.25,
                  label=f"{label}: {100 * band.confidence:g}% simultaneous band")
  ax.plot(xs, band.tpr_empirical_G, lw=1.2, label=f"{label}: empirical ROC")
  if epsilon is not None:
    eps = _validate.check_epsilon(epsilon, allow_zero=True)
    ax.plot(xs, tradeoff.dp_tpr_bound(xs, eps, delta), "k--", lw=1,
            label=f"({eps:g}, {delta:g})-DP bound")
  if mu is not None:
    m = _validate.check_positive(mu, "mu")
    ax.plot(xs, tradeoff.gaussian_tpr(xs, m), "k:", lw=1, label=f"{m:g}-GDP curve")
  if privacy_loss is not None:
    ax.plot(xs, tradeoff.pld_tpr_bound(privacy_loss, xs, max_epsilon), "r-.", lw=1,
            label="accounted (PLD) bound")
  ax.plot(xs, xs, color="0.6", lw=0.8)
  if log_scale:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(max(1e-4, float(np.min(xs)) / 2), 1.05)
  ax.set_xlabel("false-positive rate")
  ax.set_ylabel("true-positive rate")
  ax.legend(fontsize=7)
  return ax
