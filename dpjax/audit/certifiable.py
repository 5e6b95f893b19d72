"""The audit's ceiling: the best eps lower bound certifiable from a known ROC.

For a mechanism whose trade-off curve is known (the accounted one, which no adversary
can beat, or a last-iterate law, `dpjax.audit.last_iterate.last_iterate_roc`),
`best_certifiable` reports what the best adversary is expected to certify with a given
number of trials. It is a benchmark for an audit's measured bound, not a bound on any one
audit. Host NumPy only.

References: Nasr et al. 2021, https://arxiv.org/abs/2101.04535 (audits against
the accountant's ceiling).

Shape letters: J ROC points.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from dpjax import _validate
from dpjax.audit import stats


@dataclasses.dataclass(frozen=True)
class CertifiableBound:
  """The best bound certifiable from expected counts on a known ROC.

  Attributes:
    epsilon: the best bound (max over the ROC's points), at ROC point `index`.
    threshold, fpr, fnr: that point's threshold (None when none were given) and rates.
    trials: evaluation trials per side (the OUT side); delta, confidence: as passed.
    assumptions: what the number means.
  """
  epsilon: float
  index: int
  threshold: Optional[float]
  fpr: float
  fnr: float
  trials: int
  delta: float
  confidence: float
  assumptions: str


def best_certifiable(fpr_J, fnr_J, trials: int, *, delta: float = 0.0,
                     confidence: float = 0.95,
                     thresholds_J: Optional[Sequence[float]] = None,
                     trials_in: Optional[int] = None) -> CertifiableBound:
  """Best bound certifiable from expected counts on a known ROC (the audit's ceiling).

  For each operating point j of fpr_J, fnr_J (float[J] in [0, 1], e.g. from
  `tradeoff.likelihood_ratio_roc`), the expected counts trials * FPR_j (OUT side) and
  trials_in * FNR_j (trials_in defaults to trials) go into `stats.epsilon_lower_bound`
  (delta, confidence as there); the maximum over j is returned, points with
  FPR = FNR = 0 skipped (at least one other is required). The best point's threshold
  (from the optional thresholds_J) is the natural one to fix in advance.

  Examples:
    >>> import numpy as np
    >>> from dpjax import tradeoff
    >>> a = np.linspace(0, 1, 2001)                       # trade-off curve of 1-GDP
    >>> round(best_certifiable(a, tradeoff.gaussian_fnr(a, 1.0), 10_000).epsilon, 2)
    2.17
  """
  trials = _validate.check_int(trials, "trials")
  n_in = trials if trials_in is None else _validate.check_int(trials_in, "trials_in")
  fpr = _validate.check_array(fpr_J, "fpr_J", ndim=1, low=0.0, high=1.0)
  fnr = _validate.check_array(fnr_J, "fnr_J", shape=fpr.shape, low=0.0, high=1.0)
  thr = None if thresholds_J is None else _validate.check_array(
      thresholds_J, "thresholds_J", shape=fpr.shape, allow_inf=True)
  delta = _validate.check_delta(delta, allow_zero=True)
  confidence = _validate.check_confidence(confidence)
  ok = np.flatnonzero((fpr > 0) | (fnr > 0))
  if ok.size == 0:
    raise ValueError("fpr_J and fnr_J have no point with FPR > 0 or FNR > 0")
  eps = stats.epsilon_lower_bound(fpr[ok] * trials, trials, fnr[ok] * n_in, n_in,
                                  delta, confidence)
  j = int(np.argmax(eps))
  i = int(ok[j])
  return CertifiableBound(
      float(eps[j]), i, None if thr is None else float(thr[i]), float(fpr[i]), float(fnr[i]),
      trials, delta, confidence,
      "expected counts (trials x rate) at the best point of the given ROC; what the best "
      "adversary for that ROC typically certifies, not a bound on any one audit")
