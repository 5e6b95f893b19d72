"""Membership-inference attacks: global loss threshold, Shokri shadow models, LiRA.

As in LiRA's code (Carlini et al. 2022), M models train on one pool of N records (model
m on keep_MxN[m]); each model in turn is the target, the others its shadows, so
`metrics.roc_curve(scores.ravel(), keep.ravel())` is the attack's ROC. Higher score =
"member". `loss_attack_scores` (Yeom et al. 2018), `shokri_attack_scores` (Shokri et al.
2017), `lira_scores` (online / offline on phi = log(p(y|x) / (1 - p(y|x)))). Host float64.

Shape letters: M models, N records, K classes.

Examples:
  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> keep = rng.random((64, 50)) < 0.5
  >>> offset = rng.normal(0, 3, 50)[None, :]                 # per-record difficulty
  >>> phi = offset + 1.5 * keep + rng.normal(0, 0.5, keep.shape)
  >>> from dpjax import metrics
  >>> lira = metrics.roc_auc(lira_scores(phi, keep), keep)
  >>> glob = metrics.roc_auc(phi, keep)                      # one global threshold
  >>> bool(lira > 0.95 > glob)
  True
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from dpjax import _validate

_MIN_STD = 1e-6


def _check_phi(phi_MxN) -> np.ndarray:
  """Confidences of M >= 2 models (every other model is a shadow) on N >= 1 records."""
  phi = _validate.check_array(phi_MxN, "phi_MxN", ndim=2)
  if phi.shape[0] < 2 or phi.shape[1] < 1:
    raise ValueError(f"phi_MxN must have shape [M >= 2, N >= 1], got {phi.shape}")
  return phi


def logit_confidence(logits, labels_N) -> np.ndarray:
  """phi = log p(y|x) - log(1 - p(y|x)), stably from logits float[M, N] (binary, p(y=1|x) =
  sigmoid) or float[M, N, K] (softmax): float64[M, N].

  Examples:
    >>> logit_confidence(np.array([[2.0, 2.0]]), np.array([1, 0]))
    array([[ 2., -2.]])
  """
  z = _validate.check_array(logits, "logits", ndim=(2, 3), min_size=1)
  y = _validate.check_array(labels_N, "labels_N", np.int64, ndim=1, low=0, integer=True)
  if z.ndim == 3 and z.shape[2] == 1:
    z = z[:, :, 0]
  if z.ndim == 2:
    if y.shape != (z.shape[1],) or not np.all((y == 0) | (y == 1)):
      raise ValueError(f"labels_N must be 0/1 of shape ({z.shape[1]},)")
    return np.where(y[None, :] == 1, z, -z)
  if z.ndim != 3:
    raise ValueError(f"logits must be [M, N] or [M, N, K], got {z.shape}")
  k = z.shape[2]
  if y.shape != (z.shape[1],) or np.any(y < 0) or np.any(y >= k):
    raise ValueError(f"labels_N must be ints in [0, {k}) of shape ({z.shape[1]},)")
  zy = np.take_along_axis(z, y[None, :, None].repeat(z.shape[0], 0), axis=2)[:, :, 0]
  others = np.where(np.arange(k)[None, None, :] == y[None, :, None], -np.inf, z)
  return zy - special.logsumexp(others, axis=2)


def loss_attack_scores(losses_MxN) -> np.ndarray:
  """Yeom et al.'s global loss-threshold attack: score = -loss (low loss = member)."""
  x = _validate.check_array(losses_MxN, "losses_MxN", ndim=2, min_size=1)
  return -x


def _leave_one_out_moments(phi, mask):
  """Per (target m, record n): count, mean and variance of phi over models != m in mask."""
  w = mask.astype(np.float64)
  c = w.sum(0)[None, :] - w
  s1 = (w * phi).sum(0)[None, :] - w * phi
  s2 = (w * phi * phi).sum(0)[None, :] - w * phi * phi
  with np.errstate(invalid="ignore", divide="ignore"):
    mean = s1 / c
    var = np.maximum(s2 / c - mean * mean, 0.0)
  return c, mean, var


def lira_scores(phi_MxN, keep_MxN, *, online: bool = True,
                fixed_variance: bool = False) -> np.ndarray:
  """LiRA scores float64[M, N] for every (target model, record), the others as shadows.

  online: log-likelihood ratio of per-record Gaussians of phi fitted to the IN / OUT
  shadows; offline: log P(OUT <= phi). fixed_variance pools one std per side; records with
  < 2 shadows on a side use the pooled std too (0 shadows: score 0). |phi| > 2^480 is first
  scaled by an exact power of two (the ratio is scale-free) so moments cannot overflow.
  """
  phi = _check_phi(phi_MxN)
  online = _validate.check_bool(online, "online")
  fixed_variance = _validate.check_bool(fixed_variance, "fixed_variance")
  big = float(np.max(np.abs(phi)))
  if big > 2.0**480:
    phi = np.ldexp(phi, -int(np.ceil(np.log2(big))))
  keep = _validate.check_binary(keep_MxN, "keep_MxN", shape=phi.shape)
  c_out, m_out, v_out = _leave_one_out_moments(phi, ~keep)
  pooled_out = np.sqrt(np.nanmean(np.where(c_out >= 2, v_out, np.nan)))
  pooled_out = pooled_out if np.isfinite(pooled_out) else 1.0
  s_out = np.sqrt(v_out)
  if fixed_variance:
    s_out = np.full_like(s_out, pooled_out)
  s_out = np.maximum(np.where(c_out >= 2, s_out, pooled_out), _MIN_STD)
  if not online:
    z = (phi - m_out) / s_out
    return np.where(c_out >= 1, stats.norm.logcdf(z), 0.0)
  c_in, m_in, v_in = _leave_one_out_moments(phi, keep)
  pooled_in = np.sqrt(np.nanmean(np.where(c_in >= 2, v_in, np.nan)))
  pooled_in = pooled_in if np.isfinite(pooled_in) else pooled_out
  s_in = np.sqrt(v_in)
  if fixed_variance:
    s_in = np.full_like(s_in, pooled_in)
  s_in = np.maximum(np.where(c_in >= 2, s_in, pooled_in), _MIN_STD)
  score = (stats.norm.logpdf(phi, m_in, s_in) - stats.norm.logpdf(phi, m_out, s_out))
  return np.where((c_in >= 1) & (c_out >= 1), score, 0.0)


def _fit_logistic_1d(x_SxP, y_SxP, w_SxP, iters: int = 30):
  """Weighted 1-D logistic regressions (a + b x), one per row S, by Newton's method."""
  a = np.zeros(x_SxP.shape[0])
  b = np.zeros(x_SxP.shape[0])
  ridge = 1e-6 * w_SxP.sum(1)
  for _ in range(iters):
    p = special.expit(a[:, None] + b[:, None] * x_SxP)
    r = w_SxP * (p - y_SxP)
    h = w_SxP * p * (1 - p)
    g_a, g_b = r.sum(1) + ridge * a, (r * x_SxP).sum(1) + ridge * b
    h_aa = h.sum(1) + ridge
    h_ab = (h * x_SxP).sum(1)
    h_bb = (h * x_SxP * x_SxP).sum(1) + ridge
    det = h_aa * h_bb - h_ab * h_ab
    a = a - (h_bb * g_a - h_ab * g_b) / det
    b = b - (h_aa * g_b - h_ab * g_a) / det
  return a, b


def shokri_attack_scores(phi_MxN, labels_N, keep_MxN) -> np.ndarray:
  """Shokri et al.'s shadow-model attack for a binary (or one-confidence) model: float64[M, N].

  Per target m and class c, a logistic regression on phi fitted to the other models'
  (phi, member) pairs; the score is its membership log-odds on model m's records.
  """
  phi = _check_phi(phi_MxN)
  keep = _validate.check_binary(keep_MxN, "keep_MxN", shape=phi.shape)
  y = _validate.check_array(labels_N, "labels_N", np.int64, shape=(phi.shape[1],), low=0,
                            integer=True)
  m_models = phi.shape[0]
  out = np.zeros_like(phi)
  scale = np.std(phi) + 1e-12
  for c in np.unique(y):
    cols = y == c
    x = (phi[:, cols] / scale).reshape(1, -1)                       # [1, M * Nc]
    member = keep[:, cols].reshape(1, -1).astype(np.float64)
    owner = np.repeat(np.arange(m_models), cols.sum())[None, :]
    w = (owner != np.arange(m_models)[:, None]).astype(np.float64)  # [M, M * Nc]
    a, b = _fit_logistic_1d(np.broadcast_to(x, w.shape), np.broadcast_to(member, w.shape), w)
    out[:, cols] = a[:, None] + b[:, None] * phi[:, cols] / scale
  return out
