"""Canary audits of DP-SGD: the canaries, the designs, and a black-box and a white-box adversary.

Models trained on a fixed base set with and without canaries (`dpjax.data.canaries.
audit_data`) are scored (higher = IN) and the scores bounded (`dpjax.audit.thresholds`).
Every run carries two canaries with their own bits (`balanced_design`): the record canary,
whose BLACK-BOX adversary scores -logit on the final model (`black_box_scores`), and a
gradient canary (Nasr et al.): a "record" whose gradient is C e, e a coordinate no record
uses (`gradient_canary`). The WHITE-BOX adversary sees every privatized update; its
projection on e times B / C (`normalized_observations`) is o_t = b_t + sigma z_t (b_t ~
Bernoulli(q) if IN, 0 if not) for the claimed algorithm, so the exact log-likelihood ratio
is L = sum_t log(1 - q + q exp((2 o_t - 1) / (2 sigma^2))) (`white_box_scores`,
`white_box_llr`). Under the claimed (q, sigma, T) its law (`LlrDistribution`) is the
accounted privacy-loss distribution, whose ROC fixes thresholds in advance.

With K gradient canaries per run (`gradient_canaries`), coordinate j of the update of
DP-SGD as claimed is (b_tj C + sigma C z_tj) / B, so a run gives K independent trials: a
property of the claimed algorithm (for an arbitrary (eps, delta)-DP mechanism use
`dpjax.audit.one_run`). Sharing runs between the two adversaries is sound: each side of
either test holds the other canary in half of its runs.

References: Nasr, Song, Thakurta, Papernot & Carlini 2021,
https://arxiv.org/abs/2101.04535; Jagielski, Ullman & Oprea 2020.

Shape letters: M models (trials), T steps, D features, K canaries, J grid points.

Examples:
  >>> from dpjax.audit import stats, thresholds
  >>> dist = LlrDistribution.compute(sampling_prob=0.2, noise_multiplier=2.0, num_steps=50)
  >>> thr, fpr, fnr = dist.roc()
  >>> best = thresholds.best_certifiable(fpr, fnr, 1000, delta=1e-5, thresholds_J=thr)
  >>> bool(0 < best.epsilon < stats.perfect_attack_ceiling(1000, 1e-5))
  True
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax.numpy as jnp
import numpy as np
from scipy import special

from dpjax import _validate, tradeoff


# ----------------------------------------------------------------------------------
# Canaries and the design.


_MAX_GRID = 2 ** 24          # largest FFT grid of LlrDistribution.compute


@_validate.names_extreme_arguments
def gradient_canary(num_features: int, l2_clip_norm: float) -> dict:
  """{"w": float32[D]} = C * e_last: a gradient canary of norm exactly C in the last coordinate,
  which no record may use (`dpjax.data.canaries.audit_data`).

  Examples:
    >>> gradient_canary(3, 2.0)["w"].tolist()
    [0.0, 0.0, 2.0]
  """
  d = _validate.check_size(num_features, "num_features", bytes_per_unit=8)   # zeros + .set copy
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  return {"w": jnp.zeros((d,), jnp.float32).at[-1].set(c)}


@_validate.names_extreme_arguments
def gradient_canaries(num_features: int, num_canaries: int, l2_clip_norm: float) -> dict:
  """{"w": float32[K, D]}: K gradient canaries, canary j = C * e_{D-K+j}, in the last K coordinates.

  The coordinates must be unused by every record (`audit_data(..., unused_features=K)`);
  D >= K >= 1. The gradients of `dpsgd.FixedGradients(g, keep_MxK)`.

  Examples:
    >>> gradient_canaries(3, 2, 1.0)["w"].tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  d = _validate.check_size(num_features, "num_features")
  k = _validate.check_size(num_canaries, "num_canaries", units=d, units_name="num_features")
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  if k > d:
    raise ValueError(f"num_canaries = {k} needs as many unused coordinates, but "
                     f"num_features = {d}")
  w = np.zeros((k, d), np.float32)
  w[np.arange(k), d - k + np.arange(k)] = c
  return {"w": jnp.asarray(w)}


def _project_last(update):
  """observe_fn for the white-box adversary: the update's unused last coordinate."""
  return update["w"][-1]


def observe_last_coordinate():
  """The observe_fn handed to `dpsgd.train_many` (one function object, so the compiled
  program is reused across calls)."""
  return _project_last


@functools.lru_cache(maxsize=64)
def _last_coordinates(k: int):
  def project(update):
    return update["w"][-k:]
  return project


def observe_last_coordinates(num_canaries: int):
  """The observe_fn for K gradient canaries: the update's last K coordinates, float[K] (one
  cached function object per K).

  Examples:
    >>> observe_last_coordinates(2) is observe_last_coordinates(2)
    True
  """
  return _last_coordinates(_validate.check_int(num_canaries, "num_canaries"))


def canaries_design(num_models: int, num_canaries: int, in_fraction: float, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
  """Inclusion bits (record_in_M bool[M], gradient_in_MxK bool[M, K]), M a multiple of 4.

  The record canary alternates (IN at even i). Gradient-canary rows come in identical pairs
  (models 2i, 2i+1), so the record canary's IN and OUT runs carry the same gradient-canary
  sets. Column j is an independent uniformly random arrangement (Generator(seed)) of
  exactly round(in_fraction * M / 2) IN pairs, with at least one IN and one OUT pair. The
  design is fixed before training, so the trials' order is independent of the scores.

  Examples:
    >>> r, g = canaries_design(8, 3, 0.5, seed=0)
    >>> g.sum(axis=0).tolist(), bool((g[0::2] == g[1::2]).all())
    ([4, 4, 4], True)
  """
  m = _validate.check_size(num_models, "num_models", minimum=4, bytes_per_unit=8)
  if m % 4:
    raise ValueError(f"num_models must be a positive multiple of 4, got {num_models!r}")
  k = _validate.check_size(num_canaries, "num_canaries", units=m, bytes_per_unit=2)
  p = _validate.check_probability(in_fraction, "in_fraction", open_low=True, open_high=True)
  seed = _validate.check_int(seed, "seed", minimum=0)
  pairs = m // 2
  n_in = int(round(p * pairs))
  if not 0 < n_in < pairs:
    raise ValueError(f"in_fraction = {p} leaves {n_in} of {pairs} model pairs IN: each "
                     "canary needs at least one IN and one OUT pair")
  rng = np.random.default_rng(seed)
  col = np.arange(pairs) < n_in
  rows = np.stack([rng.permutation(col) for _ in range(k)], axis=1)      # [M/2, K]
  return np.arange(m) % 2 == 0, np.repeat(rows, 2, axis=0)


def balanced_design(num_models: int) -> tuple[np.ndarray, np.ndarray]:
  """Inclusion bits (record_in_M, gradient_in_M) of the two canaries, M a multiple of 4.

  Every (r, s) combination occurs M/4 times and, in index order, each quarter of every side
  is balanced in the other bit (a "first half / second half" split keeps the mixture).

  Examples:
    >>> r, s = balanced_design(4)
    >>> r.tolist(), s.tolist()
    ([True, False, True, False], [True, True, False, False])
  """
  m = _validate.check_size(num_models, "num_models", minimum=4, bytes_per_unit=8)
  if m % 4:
    raise ValueError(f"num_models must be a positive multiple of 4, got {num_models!r}")
  i = np.arange(m)
  return (i % 2 == 0), (i % 4 < 2)


# ----------------------------------------------------------------------------------
# Scores.


def black_box_scores(params_w_MxD, x_canary_D) -> np.ndarray:
  """-logit of each final model (weights params_w_MxD) on the record canary: float64[M],
  higher = IN (training on the label-0 canary lowers its logit).

  Examples:
    >>> black_box_scores([[1.0, 2.0], [0.0, -1.0]], [1.0, 1.0]).tolist()
    [-3.0, 1.0]
  """
  w = _validate.check_array(params_w_MxD, "params_w_MxD", ndim=2, min_size=1)
  x = _validate.check_array(x_canary_D, "x_canary_D", shape=(w.shape[1],))
  return -(w @ x)


@_validate.names_extreme_arguments
def normalized_observations(obs_MxT, *, expected_batch_size: float, l2_clip_norm: float):
  """o_t = B * projection / C: the observed canary coordinate in units of one clipped gradient.

  obs_MxT as `observe_last_coordinate` records it (after the division by B); float64[M, T],
  b_t + sigma z_t for the claimed algorithm.

  Examples:
    >>> normalized_observations([[0.05]], expected_batch_size=20.0, l2_clip_norm=1.0).tolist()
    [[1.0]]
  """
  b = _validate.check_positive(expected_batch_size, "expected_batch_size")
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  obs = _validate.check_array(obs_MxT, "obs_MxT", ndim=2, min_size=1)
  return obs * (b / c)


@_validate.names_extreme_arguments
def step_llr(o, sampling_prob: float, noise_multiplier: float):
  """Exact per-step log-likelihood ratio log((1-q) N(o; 0, s^2) + q N(o; 1, s^2)) - log N(o; 0, s^2).

  Examples:
    >>> round(float(step_llr(0.5, 1.0, 1.0)), 12)          # q = 1: (2o - 1) / (2 s^2)
    0.0
  """
  q = _validate.check_sampling_prob(sampling_prob)
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  x = (2.0 * _validate.check_array(o, "o", min_size=1) - 1.0) / (2.0 * s * s)
  if q >= 1.0:
    return x
  return np.logaddexp(math.log1p(-q), math.log(q) + x)


@_validate.names_extreme_arguments
def white_box_scores(o_MxT, sampling_prob: float, noise_multiplier: float) -> np.ndarray:
  """sum_t step_llr(o_t) over o_MxT: float64[M] (higher = IN).

  With noise_multiplier = 0 the score is the number of steps with o_t > 1/2.

  Examples:
    >>> white_box_scores([[1.0, 0.0]], 1.0, 0.0).tolist()  # no noise: steps with o > 1/2
    [1.0]
  """
  o = _validate.check_array(o_MxT, "o_MxT", ndim=2, min_size=1)
  if _validate.check_nonnegative(noise_multiplier, "noise_multiplier") == 0:
    return np.sum(o > 0.5, axis=1).astype(np.float64)
  return np.sum(step_llr(o, sampling_prob, noise_multiplier), axis=1)


@_validate.names_extreme_arguments
def white_box_llr(obs_MxTxK, *, expected_batch_size: float, l2_clip_norm: float,
                  sampling_prob: float, noise_multiplier: float) -> np.ndarray:
  """float64[M, K]: `white_box_scores` of each of K observed canary coordinates.

  obs_MxTxK: each canary's coordinate of every privatized update, as `dpsgd.train_many`
  records it (after the division by B), normalized by B / C (`normalized_observations`)
  and scored under the claimed (q, sigma).

  Examples:
    >>> white_box_llr([[[0.05], [0.0]]], expected_batch_size=20.0, l2_clip_norm=1.0,
    ...               sampling_prob=1.0, noise_multiplier=0.0).tolist()
    [[1.0]]
  """
  obs = _validate.check_array(obs_MxTxK, "obs_MxTxK", ndim=3, min_size=1)
  m, t, k = obs.shape
  o = normalized_observations(np.transpose(obs, (0, 2, 1)).reshape(m * k, t),
                              expected_batch_size=expected_batch_size,
                              l2_clip_norm=l2_clip_norm)
  return white_box_scores(o, sampling_prob, noise_multiplier).reshape(m, k)


# ----------------------------------------------------------------------------------
# The exact distribution of the white-box statistic (= the privacy-loss distribution).


@dataclasses.dataclass(frozen=True)
class LlrDistribution:
  """Distribution of L = sum_t step_llr(o_t) under IN and OUT, on a grid.

  L is the privacy loss of T Poisson-subsampled Gaussian steps (the "remove" pair IN || OUT;
  its negative is the "add" pair's), as `dpjax.accounting.pld` composes it, but each step's
  loss is rounded to the nearest grid point (|error| <= h/2 per step) instead of moved
  pessimistically: not an upper bound on delta, but the statistic's values with both pmfs,
  for thresholds. Tails beyond +-30 standard deviations alias in the FFT (negligible).
  `roc()` is the ROC of the tests "IN iff L > threshold".

  Attributes:
    grid_J: float64[J] values of L, evenly spaced (spacing h).
    pmf_in_J, pmf_out_J: probabilities of each grid value under IN / OUT.
  """
  grid_J: np.ndarray
  pmf_in_J: np.ndarray
  pmf_out_J: np.ndarray

  @classmethod
  def compute(cls, sampling_prob: float, noise_multiplier: float, num_steps: int,
              points_per_std: int = 2000, o_cells: int = 200_001) -> "LlrDistribution":
    """Computes the distribution numerically (FFT self-convolution of one step).

    q in (0, 1], sigma > 0, T >= 1; points_per_std (grid points per standard deviation of L)
    and o_cells (cells of the one-step observation grid) set the accuracy.
    """
    q = _validate.check_sampling_prob(sampling_prob)
    s = _validate.check_positive(noise_multiplier, "noise_multiplier")
    t = _validate.check_int(num_steps, "num_steps")
    points_per_std = _validate.check_int(points_per_std, "points_per_std")
    o_cells = _validate.check_int(o_cells, "o_cells", minimum=2)
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
    _validate.check_size(size, f"the grid of num_steps = {t}, noise_multiplier = {s}",
                         bytes_per_unit=8, units=8)
    if size > _MAX_GRID:    # bounded FFT work: about 2000 sqrt(T) points per std
      raise ValueError(f"the grid of num_steps = {t}, noise_multiplier = {s} needs {size} "
                       f"points, more than {_MAX_GRID}")
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
    """(thresholds_J, fpr_J, fnr_J) of the tests "IN iff L > threshold"
    (`tradeoff.likelihood_ratio_roc` on this distribution)."""
    return tradeoff.likelihood_ratio_roc(self.grid_J, self.pmf_in_J, self.pmf_out_J)

  def error_rates(self, thresholds_J) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, FNR) float64[J] of the tests "IN iff L > t_j": P_OUT(L > t_j), P_IN(L <= t_j)."""
    t = _validate.check_array(thresholds_J, "thresholds_J", ndim=1, allow_inf=True)
    return (np.array([self.pmf_out_J[self.grid_J > x].sum() for x in t]),
            np.array([self.pmf_in_J[~(self.grid_J > x)].sum() for x in t]))

  def delta(self, epsilon, direction: str = "both"):
    """Privacy profile delta(eps) of this distribution, eps >= 0 scalar or float[E].

    direction: "remove" (sup_S P_IN(S) - e^eps P_OUT(S)), "add" (OUT || IN) or "both" (the
    larger, as an accountant reports). Returns a float, or float64[E] for an array.

    Examples:
      >>> d = LlrDistribution.compute(1.0, 2.0, 4)           # q = 1: 1-GDP
      >>> round(d.delta(0.0), 3)                              # 2 Phi(1/2) - 1
      0.383
    """
    _validate.check_choice(direction, ("remove", "add", "both"), "direction")
    e = _validate.check_array(np.atleast_1d(epsilon), "epsilon", low=0.0)[:, None]
    a = np.sum(np.maximum(self.pmf_in_J[None, :] - np.exp(e) * self.pmf_out_J[None, :], 0), 1)
    b = np.sum(np.maximum(self.pmf_out_J[None, :] - np.exp(e) * self.pmf_in_J[None, :], 0), 1)
    out = {"remove": a, "add": b, "both": np.maximum(a, b)}[direction]
    return float(out[0]) if np.ndim(epsilon) == 0 else out


@_validate.names_extreme_arguments
def llr_distribution(sampling_prob: float, noise_multiplier: float,
                     num_steps: int) -> LlrDistribution:
  """Cached `LlrDistribution.compute`.

  Examples:
    >>> llr_distribution(0.2, 2.0, 10) is llr_distribution(0.2, 2.0, 10)
    True
  """
  # Validated before the cache: True and 1.0 hash alike, so a cache hit would
  # otherwise accept a bool.
  return _llr_distribution_cached(
      _validate.check_sampling_prob(sampling_prob),
      _validate.check_positive(noise_multiplier, "noise_multiplier"),
      _validate.check_int(num_steps, "num_steps"))


@functools.lru_cache(maxsize=64)
def _llr_distribution_cached(sampling_prob: float, noise_multiplier: float,
                             num_steps: int) -> LlrDistribution:
  return LlrDistribution.compute(sampling_prob, noise_multiplier, num_steps)
