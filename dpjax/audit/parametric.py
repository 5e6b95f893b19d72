"""A parametric estimate: the eps lower bound of a mechanism assumed mu-GDP (Nasr et al. 2023).

If the mechanism is mu-GDP, one test's Clopper-Pearson upper limits give
mu >= Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) =: mu_lower. VALID ONLY UNDER THE GDP ASSUMPTION; a
negative mu_lower certifies nothing (eps 0). Shape letters: K trials (models).
References: Nasr et al. 2023 (arXiv:2302.07956).

Examples:
  >>> g = gdp_estimate(np.full(500, 1.0), np.zeros(500), 1e-5, threshold=0.5)
  >>> bool(g.mu > 0), g.threshold
  (True, 0.5)
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from dpjax import _validate, tradeoff
from dpjax.accounting import gdp
from dpjax.audit import stats


@dataclasses.dataclass(frozen=True)
class GdpEstimate:
  """A mu-GDP lower bound from one test: if the mechanism is mu-GDP, with probability >=
  `confidence` its mu >= `mu` and its eps at `delta` >= `epsilon` (0 when mu <= 0, never |mu|).
  """
  mu: float
  epsilon: float
  threshold: float
  delta: float
  confidence: float
  assumptions: str


@_validate.names_extreme_arguments(finite=False)
def gdp_estimate(scores_in_K, scores_out_K, delta: float, confidence: float = 0.95,
                 threshold: Optional[float] = None) -> GdpEstimate:
  """eps lower bound of Nasr et al. 2023, valid only if the mechanism is mu-GDP.

  FPR_u, FNR_u: Clopper-Pearson upper limits (jointly at `confidence`); eps >= eps_mu(mu_lower),
  0 if mu_lower < 0. `threshold`: fixed in advance, or None to choose the mu-maximising one on
  the first half of each side and evaluate on the second.

  Examples:
    >>> from scipy import stats as sps
    >>> q = sps.norm.ppf((np.arange(4000) + 0.5) / 4000)       # N(0, 1) by quantiles
    >>> g = gdp_estimate(q + 2.0, q, 1e-5, threshold=1.0)       # 2-GDP scores
    >>> bool(1.8 < g.mu < 2.0)
    True
  """
  delta = _validate.check_delta(delta)
  confidence = _validate.check_confidence(confidence)
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  if threshold is None:
    h_in, h_out = s_in.size // 2, s_out.size // 2
    cand = np.unique(np.r_[s_in[:h_in], s_out[:h_out]])
    fp, fn = stats.error_counts(s_in[:h_in], s_out[:h_out], cand)
    j, _ = stats.monotone_argmax(fp, fn, lambda f, g: _mu_lower(f, h_out, g, h_in, confidence))
    threshold = float(cand[j])
    s_in, s_out = s_in[h_in:], s_out[h_out:]
  else:
    threshold = _validate.check_range(threshold, "threshold", allow_inf=True)
  fp, fn = stats.error_counts(s_in, s_out, np.asarray([threshold]))
  mu = float(_mu_lower(fp, s_out.size, fn, s_in.size, confidence)[0])
  eps = gdp.gaussian_epsilon(delta, mu) if mu > 0 else 0.0
  return GdpEstimate(
      mu, float(eps), float(threshold), delta, confidence,
      "valid only if the mechanism is mu-GDP (Gaussian trade-off curve): mu >= "
      "Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) with Clopper-Pearson upper limits holding jointly "
      "at the confidence; a negative mu gives eps 0")


def _mu_lower(fp, neg, fn, pos, confidence):
  _, fpr_u = stats.clopper_pearson(fp, neg, confidence)
  _, fnr_u = stats.clopper_pearson(fn, pos, confidence)
  return np.atleast_1d(tradeoff.gaussian_mu(fpr_u, fnr_u))
