"""Canary audits of DP-SGD: a black-box and a white-box (Nasr et al. 2021) adversary.

The experiment (lecture §6.2, code 04 demo 3): a fixed base set of 150 credit
records plus canaries; many models are trained with and without a canary and an
adversary guesses which; its errors give an eps lower bound (`stats`).

Two canaries ride in every training run, each with its own inclusion bit:

* the lecture's record canary (income 250k, debt ratio 0.05, 25 years of history,
  no delinquency -- and yet defaulted), bit r_m. The BLACK-BOX adversary sees only
  the final model and scores -logit(canary) (training on a defaulted record lowers
  its logit); its threshold is chosen on half of the trials and evaluated on the
  other half.
* a Nasr-style gradient canary, bit s_m: an extra "record" whose gradient is C
  times a unit vector e in a coordinate that no other record uses (a feature
  column that is 0 for every record, the record canary included). The WHITE-BOX
  adversary sees every privatized update, as DP-SGD's analysis assumes. Its
  projection on e, in units of C and multiplied by the public batch size B,
  is o_t = b_t + sigma z_t (b_t ~ Bernoulli(q) if the canary is in, 0 if not;
  z_t ~ N(0, 1)) for the claimed algorithm, so the exact log-likelihood ratio is

      L = sum_t log(1 - q + q exp((2 o_t - 1) / (2 sigma^2))),

  the Neyman-Pearson optimal statistic for the worst-case pair that the
  accountant analyses. Its distribution under the CLAIMED (q, sigma, T) is known
  (`LlrDistribution`), so the threshold is fixed in advance from it and every trial
  is used for evaluation. The same distribution is the mechanism's privacy-loss
  distribution: its ROC is the accounted mechanism's trade-off curve, which gives
  the best bound that ANY adversary could certify with the same trials and
  confidence procedure (`LlrDistribution.best_certifiable`).

Sharing runs between the two adversaries is sound: for the black-box test the
gradient canary is part of the "rest of the data", present in half of the IN and
half of the OUT runs alike, so each side is the same mixture of neighbouring
datasets and FPR + e^eps FNR >= 1 - delta still holds (it is linear in the output
distributions); symmetrically for the white-box test. With the balanced design the
error counts are sums of two binomials, for which the Clopper-Pearson upper
limit stays conservative (Hoeffding 1956). For the correct algorithm the two
canaries touch disjoint coordinates, so the two experiments are exactly independent.

Shape letters: M models (trials), T steps, N records, D features.

Examples:
  >>> dist = LlrDistribution.compute(sampling_prob=0.2, noise_multiplier=2.0, num_steps=50)
  >>> thr, ceiling = dist.best_threshold(trials=1000, delta=1e-5)
  >>> bool(0 < ceiling < perfect_ceiling(1000))
  True
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats as sps

from dpjax.accounting import gdp
from dpjax.audit import stats
from dpjax.data import credit


def perfect_ceiling(trials: int, delta: float = 0.0, confidence: float = 0.95) -> float:
  """Trials' ceiling: the bound of a perfect attack with `trials` evaluation trials per side."""
  return stats.perfect_attack_ceiling(trials, delta, confidence)


# ----------------------------------------------------------------------------------
# The audit's data set.


class AuditData(NamedTuple):
  """Base set + record canary, with an unused last feature column for the gradient canary.

  Attributes:
    x_NxD: float32[N, D]: cubic features of the base records, then the record
      canary as the last row; the last column is 0 everywhere.
    y_N: int32[N] labels (the canary's is 0, defaulted).
    canary_index: index of the record canary (N - 1).
    num_features: D (= 56 cubic + 1 unused).
  """
  x_NxD: jax.Array
  y_N: jax.Array
  canary_index: int
  num_features: int


def audit_data(key: jax.Array, base_size: int = 150) -> AuditData:
  """The lecture's audit set: `base_size` credit records plus the lecture canary.

  Args:
    key: jax.random key (one half fits the public scaler on a separate sample,
      the other draws the base set).
    base_size: number of base records, >= 1.
  Returns:
    AuditData.
  """
  if int(base_size) != base_size or base_size < 1:
    raise ValueError(f"base_size must be an integer >= 1, got {base_size}")
  k_pub, k_base = jax.random.split(key)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 2000).x_NxF)
  base = credit.sample(k_base, int(base_size))
  can = credit.lecture_canary()
  x = jnp.concatenate([credit.cubic_features(base.x_NxF, scaler),
                       credit.cubic_features(can.x_NxF, scaler)], axis=0)
  x = jnp.concatenate([x, jnp.zeros((x.shape[0], 1), x.dtype)], axis=1)
  y = jnp.concatenate([base.y_N, can.y_N]).astype(jnp.int32)
  return AuditData(x, y, int(x.shape[0] - 1), int(x.shape[1]))


def gradient_canary(num_features: int, l2_clip_norm: float) -> dict:
  """{"w": C * e_last}: a gradient canary of norm exactly C in the unused last coordinate."""
  if int(num_features) != num_features or num_features < 1:
    raise ValueError(f"num_features must be an integer >= 1, got {num_features}")
  if not (0 < l2_clip_norm < math.inf):
    raise ValueError(f"l2_clip_norm must be finite and > 0, got {l2_clip_norm}")
  return {"w": jnp.zeros((int(num_features),), jnp.float32).at[-1].set(float(l2_clip_norm))}


def _project_last(update):
  """observe_fn for the white-box adversary: the update's unused last coordinate."""
  return update["w"][-1]


def observe_last_coordinate():
  """The observe_fn handed to `dpsgd.train_many` (one function object, so the
  compiled program is reused across calls)."""
  return _project_last


def balanced_design(num_models: int) -> tuple[np.ndarray, np.ndarray]:
  """Inclusion bits of the two canaries for models 0..M-1 (M divisible by 4).

  Returns:
    (record_in_M, gradient_in_M): bool arrays; every (r, s) combination occurs
    M/4 times and, in index order, each quarter of every side is balanced in the
    other bit (so a "first half / second half" split keeps the mixture equal).
  """
  if int(num_models) != num_models or num_models < 4 or num_models % 4:
    raise ValueError(f"num_models must be a positive multiple of 4, got {num_models}")
  i = np.arange(int(num_models))
  return (i % 2 == 0), (i % 4 < 2)


# ----------------------------------------------------------------------------------
# Scores.


def black_box_scores(params_w_MxD, x_canary_D) -> np.ndarray:
  """-logit of each final model on the record canary: float64[M] (higher = IN)."""
  w = np.asarray(params_w_MxD, np.float64)
  x = np.asarray(x_canary_D, np.float64)
  if w.ndim != 2 or x.shape != (w.shape[1],):
    raise ValueError(f"params_w_MxD [M, D] and x_canary_D [D] expected, got {w.shape}, {x.shape}")
  return -(w @ x)


def normalized_observations(obs_MxT, *, expected_batch_size: float, l2_clip_norm: float):
  """o_t = B * projection / C: the observed canary coordinate in units of one clipped gradient."""
  if not (expected_batch_size > 0) or not (0 < l2_clip_norm < math.inf):
    raise ValueError("expected_batch_size must be > 0 and l2_clip_norm finite and > 0")
  return np.asarray(obs_MxT, np.float64) * (float(expected_batch_size) / float(l2_clip_norm))


def step_llr(o, sampling_prob: float, noise_multiplier: float):
  """Exact per-step log-likelihood ratio log((1-q) N(o; 0, s^2) + q N(o; 1, s^2)) - log N(o; 0, s^2)."""
  q, s = _check_qs(sampling_prob, noise_multiplier)
  x = (2.0 * np.asarray(o, np.float64) - 1.0) / (2.0 * s * s)
  if q >= 1.0:
    return x
  return np.logaddexp(math.log1p(-q), math.log(q) + x)


def white_box_scores(o_MxT, sampling_prob: float, noise_multiplier: float) -> np.ndarray:
  """sum_t step_llr(o_t): float64[M] (higher = IN).

  With noise_multiplier = 0 (no noise) the likelihood ratio is infinite whenever
  the canary shows up, and the score is the number of steps with o_t > 1/2.
  """
  o = np.asarray(o_MxT, np.float64)
  if o.ndim != 2:
    raise ValueError(f"o_MxT must be [M, T], got {o.shape}")
  if noise_multiplier == 0:
    return np.sum(o > 0.5, axis=1).astype(np.float64)
  return np.sum(step_llr(o, sampling_prob, noise_multiplier), axis=1)


def _check_qs(q, s):
  if not (0.0 < q <= 1.0):
    raise ValueError(f"sampling_prob must be in (0, 1], got {q}")
  if not (s > 0) or not math.isfinite(s):
    raise ValueError(f"noise_multiplier must be finite and > 0, got {s}")
  return float(q), float(s)


# ----------------------------------------------------------------------------------
# The exact distribution of the white-box statistic (= the privacy-loss distribution).


@dataclasses.dataclass(frozen=True)
class LlrDistribution:
  """Distribution of L = sum_t step_llr(o_t) under IN and OUT, on a grid.

  Attributes:
    grid_J: float64[J] values of L (spacing h).
    pmf_in_J, pmf_out_J: probabilities of each grid value under IN / OUT.
  It is the privacy-loss distribution of T-fold Poisson-subsampled Gaussian (the
  "remove" pair); `delta(eps)` is its privacy profile (both orders) and `roc()`
  the accounted mechanism's trade-off curve. Discretisation: L is rounded to the
  grid per step (|error| <= h/2 per step); tails beyond +-30 standard deviations
  are aliased by the circular FFT (negligible).
  """
  grid_J: np.ndarray
  pmf_in_J: np.ndarray
  pmf_out_J: np.ndarray

  @classmethod
  def compute(cls, sampling_prob: float, noise_multiplier: float, num_steps: int,
              points_per_std: int = 2000, o_cells: int = 200_001) -> "LlrDistribution":
    """Computes the distribution numerically (FFT self-convolution of one step).

    Args:
      sampling_prob: q in (0, 1].
      noise_multiplier: sigma > 0.
      num_steps: T >= 1.
      points_per_std: grid points per standard deviation of L (accuracy knob).
      o_cells: cells of the one-step observation grid.
    """
    q, s = _check_qs(sampling_prob, noise_multiplier)
    if int(num_steps) != num_steps or num_steps < 1:
      raise ValueError(f"num_steps must be an integer >= 1, got {num_steps}")
    t = int(num_steps)
    edges = np.linspace(-14.0 * s, 1.0 + 14.0 * s, o_cells + 1)
    mid = 0.5 * (edges[1:] + edges[:-1])
    p0 = np.diff(special.ndtr(edges / s))
    p1 = np.diff(special.ndtr((edges - 1.0) / s))
    # the tails outside the o-grid go to the end cells
    p0[0] += special.ndtr(edges[0] / s)
    p0[-1] += special.ndtr(-edges[-1] / s)
    p1[0] += special.ndtr((edges[0] - 1.0) / s)
    p1[-1] += special.ndtr(-(edges[-1] - 1.0) / s)
    pin = (1.0 - q) * p0 + q * p1
    l1 = step_llr(mid, q, s)
    mean = np.array([np.dot(pin, l1), np.dot(p0, l1)]) * t
    var = np.array([np.dot(pin, l1 * l1), np.dot(p0, l1 * l1)]) * t - mean ** 2 / t
    std = np.sqrt(np.maximum(var, 1e-300))
    h = float(np.min(std)) / points_per_std
    lo = float(np.min(mean - 30.0 * std))
    hi = float(np.max(mean + 30.0 * std))
    size = int(2 ** math.ceil(math.log2((hi - lo) / h + 1)))
    idx = np.rint((l1 - lo / t) / h).astype(np.int64) % size
    f_in = np.bincount(idx, weights=pin, minlength=size)
    f_out = np.bincount(idx, weights=p0, minlength=size)
    c_in = np.fft.irfft(np.fft.rfft(f_in) ** t, n=size)
    c_out = np.fft.irfft(np.fft.rfft(f_out) ** t, n=size)
    grid = lo + h * np.arange(size)
    keep = grid <= hi + h
    c_in, c_out, grid = c_in[keep], c_out[keep], grid[keep]
    c_in = np.maximum(c_in, 0.0)
    c_out = np.maximum(c_out, 0.0)
    return cls(grid, c_in / c_in.sum(), c_out / c_out.sum())

  def roc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds_J, fpr_J, fnr_J) of the tests "IN iff L > threshold"."""
    h = self.grid_J[1] - self.grid_J[0]
    thr = self.grid_J + 0.5 * h
    fnr = np.cumsum(self.pmf_in_J)                         # P_IN(L <= grid_j)
    # P_OUT(L > grid_j), summed from the top for accuracy at tiny rates
    fpr = np.r_[np.cumsum(self.pmf_out_J[::-1])[::-1][1:], 0.0]
    return thr, np.clip(fpr, 0, 1), np.clip(fnr, 0, 1)

  def delta(self, epsilon) -> np.ndarray:
    """Privacy profile max(delta_{IN||OUT}(eps), delta_{OUT||IN}(eps)) of this distribution."""
    e = np.atleast_1d(np.asarray(epsilon, np.float64))[:, None]
    a = np.sum(np.maximum(self.pmf_in_J[None, :] - np.exp(e) * self.pmf_out_J[None, :], 0), 1)
    b = np.sum(np.maximum(self.pmf_out_J[None, :] - np.exp(e) * self.pmf_in_J[None, :], 0), 1)
    out = np.maximum(a, b)
    return float(out[0]) if np.ndim(epsilon) == 0 else out

  def best_threshold(self, trials: int, delta: float = 0.0,
                     confidence: float = 0.95) -> tuple[float, float]:
    """Threshold maximising the bound on expected counts, and that bound (the ceiling).

    Args:
      trials: evaluation trials per side.
      delta, confidence: as in `stats.epsilon_lower_bound`.
    Returns:
      (threshold, best certifiable eps): no adversary, however strong, is expected
      to certify more than this with `trials` per side (its ROC lies above this one).
    """
    thr, fpr, fnr = self.roc()
    ok = (fpr > 0) | (fnr > 0)
    eps = stats.epsilon_lower_bound(fpr[ok] * trials, trials, fnr[ok] * trials, trials,
                                    delta, confidence)
    j = int(np.argmax(eps))
    return float(thr[ok][j]), float(eps[j])


@functools.lru_cache(maxsize=64)
def llr_distribution(sampling_prob: float, noise_multiplier: float,
                     num_steps: int) -> LlrDistribution:
  """Cached `LlrDistribution.compute`."""
  return LlrDistribution.compute(sampling_prob, noise_multiplier, num_steps)


def gaussian_ceiling(mu: float, trials: int, delta: float = 0.0,
                     confidence: float = 0.95) -> float:
  """Best certifiable eps against a mu-GDP mechanism (trade-off Phi(Phi^-1(1-a) - mu))."""
  a = np.r_[0.0, np.geomspace(1e-12, 1.0, 20_001)]
  b = sps.norm.cdf(sps.norm.ppf(1.0 - a) - mu)
  return stats.best_certifiable_epsilon(a, b, trials, delta, confidence)


# ----------------------------------------------------------------------------------
# Whole-distribution estimate (Nasr et al. 2023).


def gdp_epsilon_estimate(scores_in_K, scores_out_K, delta: float,
                         confidence: float = 0.95, threshold: float | None = None) -> dict:
  """eps estimate assuming the mechanism's trade-off curve is Gaussian (mu-GDP).

  Nasr, Hayes, Steinke, Balle et al. (2023) fit mu-GDP to the adversary's errors:
  at a threshold, mu >= Phi^-1(1 - FPR_u) - Phi^-1(FNR_u) with Clopper-Pearson
  upper limits, and eps = gaussian_epsilon(delta, mu). This is an ESTIMATE that
  is valid only if the mechanism really is GDP-shaped (DP-SGD with many steps is
  close to it, by the CLT); `stats.audit_scores` is the assumption-free bound.

  Args:
    scores_in_K, scores_out_K: scores (higher = IN).
    delta: in (0, 1).
    confidence: in (0, 1).
    threshold: fixed in advance; None = choose on the first half, evaluate on the second.
  Returns:
    {"mu": lower mu, "epsilon": eps at delta (0 if mu <= 0), "threshold": t}.
  """
  if not (0 < delta < 1):
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  s_in = np.asarray(scores_in_K, np.float64)
  s_out = np.asarray(scores_out_K, np.float64)
  if threshold is None:
    h_in, h_out = s_in.size // 2, s_out.size // 2
    cand = np.unique(np.r_[s_in[:h_in], s_out[:h_out]])
    fp, fn = stats.error_counts(s_in[:h_in], s_out[:h_out], cand)
    mu_c = _mu_lower(fp, h_out, fn, h_in, confidence)
    threshold = float(cand[int(np.argmax(mu_c))])
    s_in, s_out = s_in[h_in:], s_out[h_out:]
  fp, fn = stats.error_counts(s_in, s_out, np.asarray([threshold]))
  mu = float(_mu_lower(fp, s_out.size, fn, s_in.size, confidence)[0])
  eps = gdp.gaussian_epsilon(delta, mu) if mu > 0 else 0.0
  return {"mu": mu, "epsilon": float(eps), "threshold": float(threshold)}


def _mu_lower(fp, neg, fn, pos, confidence):
  _, fpr_u = stats.clopper_pearson(fp, neg, confidence)
  _, fnr_u = stats.clopper_pearson(fn, pos, confidence)
  return sps.norm.ppf(1.0 - np.asarray(fpr_u)) - sps.norm.ppf(np.asarray(fnr_u))
