"""A parametric estimate: the eps lower bound of a mechanism assumed mu-GDP.

If the audited mechanism is mu-GDP for some mu (its trade-off curve is Gaussian,
FNR >= Phi(Phi^-1(1 - FPR) - mu) for every test), one test's error rates bound
mu from below, and so eps(delta) (Nasr et al. 2023):

    mu >= Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) =: mu_lower,

with FPR_u, FNR_u the Clopper-Pearson upper limits (jointly at the confidence).
`gdp_estimate` computes it, with a threshold fixed in advance or chosen on the
first half of each side. The Gaussian shape gives far tighter numbers than the
assumption-free threshold bounds of `dpjax.audit.estimators`, but only under
that assumption; a negative mu_lower certifies nothing (eps 0).

Contracts: host NumPy/SciPy only; scores as in `dpjax.audit.stats.check_scores`
(higher = IN, no NaN); the returned `GdpEstimate` says what it assumes.

References: Nasr et al. 2023, https://arxiv.org/abs/2302.07956.

Shape letters: K trials (models).

Examples:
  >>> import numpy as np
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
  """A mu-GDP lower bound from one test's error rates (Nasr et al. 2023).

  Valid only if the mechanism is mu-GDP for some mu: then, with probability >=
  `confidence`, its mu is >= `mu` and its eps at `delta` is >= `epsilon`.

  Attributes:
    mu: mu of the Gaussian trade-off curve through the rates' confidence limits
      (negative when FPR_u + FNR_u > 1).
    epsilon: eps at `delta` of a mu-GDP mechanism; 0 when mu <= 0 (a negative mu
      is clamped, never mirrored to |mu|).
    threshold: the threshold whose errors were used.
    delta, confidence: as passed.
    assumptions: what the bound assumes.
  """
  mu: float
  epsilon: float
  threshold: float
  delta: float
  confidence: float
  assumptions: str


def gdp_estimate(scores_in_K, scores_out_K, delta: float, confidence: float = 0.95,
                 threshold: Optional[float] = None) -> GdpEstimate:
  """eps lower bound of Nasr et al. 2023, valid only if the mechanism is mu-GDP.

  A mu-GDP mechanism has FNR >= Phi(Phi^-1(1 - FPR) - mu) for every test. With
  FPR <= FPR_u and FNR <= FNR_u (Clopper-Pearson upper limits; the two-sided
  interval at `confidence` puts each at 1 - alpha/2, so both hold together with
  probability >= 1 - alpha, as in `stats.epsilon_lower_bound`), and the right
  side decreasing in FPR,

      mu >= Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) =: mu_lower,

  and eps(delta) of mu-GDP increases in mu, so eps >= eps_mu(mu_lower). Using
  the Gaussian shape of the curve gives far tighter numbers than a threshold
  bound, but only under that assumption. mu_lower < 0 (FPR_u + FNR_u > 1, e.g.
  on scores without signal) certifies nothing: eps = 0. Mirroring it to |mu|
  would certify a positive eps from pure noise.

  Args:
    scores_in_K, scores_out_K: float[K_in], float[K_out] (higher = IN).
    delta: in (0, 1).
    confidence: in (0, 1).
    threshold: fixed in advance; None = choose the mu-maximising threshold on the
      first half of each side and evaluate on the second half.
  Returns:
    GdpEstimate.

  Examples:
    >>> import numpy as np
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
    mu_c = _mu_lower(fp, h_out, fn, h_in, confidence)
    threshold = float(cand[int(np.argmax(mu_c))])
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
