"""Canary audits of DP-SGD: the canaries, the designs, and a black-box and a white-box adversary.

Every run carries two canaries with their own bits (`balanced_design`): a record canary, scored
black-box by -logit on the final model, and a gradient canary C e (Nasr et al. 2021), e a
coordinate no record uses. The white-box adversary sees every privatized update; its projection
on e times B / C is o_t = b_t + sigma z_t (b_t ~ Bernoulli(q) if IN, 0 if not) for the claimed
algorithm, so the exact log-likelihood ratio is

    L = sum_t log(1 - q + q exp((2 o_t - 1) / (2 sigma^2)))   (`white_box_scores`),

whose law under the claim (`LlrDistribution`) is the accounted PLD. With K gradient canaries
(`gradient_canaries`) a run gives K independent trials for DP-SGD as claimed (for an arbitrary
DP mechanism use `dpjax.audit.one_run`).
Shape letters: M models (trials), T steps, D features, K canaries, J grid points.

References: Nasr, Song, Thakurta, Papernot & Carlini 2021 (arXiv:2101.04535); Jagielski,
Ullman & Oprea 2020.

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


# Canaries and the design.


_MAX_GRID = 2 ** 24          # largest FFT grid of LlrDistribution.compute
# Work budget of LlrDistribution.compute: grid points x log2(T) (the FFT power's squarings),
# checked before any FFT (seconds at most); audits at T <= 1e5 need ~4e6.
_MAX_WORK = 2 ** 26


@_validate.names_extreme_arguments
def gradient_canary(num_features: int, l2_clip_norm: float) -> dict:
  """{"w": float32[D]} = C e_last, a gradient canary of norm C in the last (unused) coordinate.

  Examples:
    >>> gradient_canary(3, 2.0)["w"].tolist()
    [0.0, 0.0, 2.0]
  """
  d = _validate.check_size(num_features, "num_features", bytes_per_unit=8)   # zeros + .set copy
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  return {"w": jnp.zeros((d,), jnp.float32).at[-1].set(c)}


@_validate.names_extreme_arguments
def gradient_canaries(num_features: int, num_canaries: int, l2_clip_norm: float) -> dict:
  """{"w": float32[K, D]}: canary j = C e_{D-K+j}, in the last K (unused) coordinates; D >= K >= 1.

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
  """The observe_fn of the update's last coordinate (one function object: compiled once)."""
  return _project_last


@functools.lru_cache(maxsize=64)
def _last_coordinates(k: int):
  def project(update):
    return update["w"][-k:]
  return project


def observe_last_coordinates(num_canaries: int):
  """The observe_fn of the update's last K coordinates, float[K] (one cached object per K).

  Examples:
    >>> observe_last_coordinates(2) is observe_last_coordinates(2)
    True
  """
  return _last_coordinates(_validate.check_int(num_canaries, "num_canaries"))


def _check_num_models(num_models) -> int:
  m = _validate.check_size(num_models, "num_models", minimum=4, bytes_per_unit=8)
  if m % 4:
    raise ValueError(f"num_models must be a positive multiple of 4, got {num_models!r}")
  return m


def canaries_design(num_models: int, num_canaries: int, in_fraction: float, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
  """Inclusion bits (record_in_M bool[M], gradient_in_MxK bool[M, K]), M a multiple of 4.

  The record canary is IN at even i; gradient rows come in identical pairs (2i, 2i+1), each
  column an independent random arrangement (Generator(seed)) of round(in_fraction M / 2) IN
  pairs, at least one IN and one OUT.

  Examples:
    >>> r, g = canaries_design(8, 3, 0.5, seed=0)
    >>> g.sum(axis=0).tolist(), bool((g[0::2] == g[1::2]).all())
    ([4, 4, 4], True)
  """
  m = _check_num_models(num_models)
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
  """Inclusion bits (record_in_M, gradient_in_M), M a multiple of 4: each (r, s) occurs M/4 times
  and each quarter of every side is balanced in the other bit.

  Examples:
    >>> r, s = balanced_design(4)
    >>> r.tolist(), s.tolist()
    ([True, False, True, False], [True, True, False, False])
  """
  m = _check_num_models(num_models)
  i = np.arange(m)
  return (i % 2 == 0), (i % 4 < 2)


# Scores.


def black_box_scores(params_w_MxD, x_canary_D) -> np.ndarray:
  """-logit of each final model (weights float[M, D]) on the record canary: float64[M], higher = IN.

  Examples:
    >>> black_box_scores([[1.0, 2.0], [0.0, -1.0]], [1.0, 1.0]).tolist()
    [-3.0, 1.0]
  """
  w = _validate.check_array(params_w_MxD, "params_w_MxD", ndim=2, min_size=1)
  x = _validate.check_array(x_canary_D, "x_canary_D", shape=(w.shape[1],))
  return -(w @ x)


@_validate.names_extreme_arguments
def normalized_observations(obs_MxT, *, expected_batch_size: float, l2_clip_norm: float):
  """o_t = B projection / C, float64[M, T]: b_t + sigma z_t for the claimed algorithm.

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
  """Exact per-step LLR log((1-q) N(o; 0, s^2) + q N(o; 1, s^2)) - log N(o; 0, s^2).

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
  """sum_t step_llr(o_t): float64[M] (higher = IN); sigma = 0: the number of steps with o_t > 1/2.

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
  """float64[M, K]: `white_box_scores` of each canary's coordinate of the recorded updates,
  normalized by B / C, under the claimed (q, sigma).

  Examples:
    >>> white_box_llr([[[0.05], [0.0]]], expected_batch_size=20.0, l2_clip_norm=1.0,
    ...               sampling_prob=1.0, noise_multiplier=0.0).tolist()
    [[1.0]]
  """
  obs = _validate.check_array(obs_MxTxK, "obs_MxTxK", ndim=3, min_size=1)
  m, t, k = obs.shape
  o = normalized_observations(np.transpose(obs, (0, 2, 1)).reshape(m * k, t),
                              expected_batch_size=expected_batch_size, l2_clip_norm=l2_clip_norm)
  return white_box_scores(o, sampling_prob, noise_multiplier).reshape(m, k)


# The exact distribution of the white-box statistic (= the privacy-loss distribution).


@dataclasses.dataclass(frozen=True)
class LlrDistribution:
  """Distribution of L = sum_t step_llr(o_t) under IN and OUT on an even grid_J (spacing h).

  L is the privacy loss of T Poisson-subsampled Gaussian steps (the "remove" pair), but each
  step's loss is rounded to the nearest grid point rather than pessimistically: the statistic's
  values for thresholds, not an upper bound on delta. FFT aliasing beyond +-30 sd is negligible.
  """
  grid_J: np.ndarray
  pmf_in_J: np.ndarray
  pmf_out_J: np.ndarray

  @classmethod
  def compute(cls, sampling_prob: float, noise_multiplier: float, num_steps: int,
              points_per_std: int = 2000, o_cells: int = 200_001) -> "LlrDistribution":
    """FFT self-convolution of one step; points_per_std and o_cells set the accuracy: the
    grid spacing is sd(L) / max(points_per_std, 32 sqrt T), at least 32 points per sd of
    one step's loss (each step is rounded to the grid).

    A grid past 2^24 points or past the work budget (2^26 grid points x log2 T; T past
    ~2^25 at the default accuracy) is a ValueError naming num_steps, raised before any FFT.
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
    # at least points_per_std points per sd of L, and 32 per sd of one step's loss: each
    # step rounds to the grid, so a coarser h biases the mean by up to T h / 2
    h = float(np.min(std)) / max(points_per_std, 32.0 * math.sqrt(t))
    lo = float(np.min(mean - 30.0 * std))
    hi = float(np.max(mean + 30.0 * std))
    size = int(2 ** math.ceil(math.log2((hi - lo) / h + 1)))
    _validate.check_size(size, f"the grid of num_steps = {t}, noise_multiplier = {s}",
                         bytes_per_unit=8, units=8)
    if size > _MAX_GRID:    # bounded FFT work: about 2000 sqrt(T) points per std
      raise ValueError(f"the grid of num_steps = {t}, noise_multiplier = {s} needs {size} "
                       f"points, more than {_MAX_GRID}")
    if size * math.log2(max(t, 2)) > _MAX_WORK:
      raise ValueError(f"the grid of num_steps = {t}, noise_multiplier = {s} needs {size} "
                       f"points x log2(num_steps) = {size * math.log2(t):.3g}, more than the "
                       f"work budget {_MAX_WORK}")
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
    return tradeoff.likelihood_ratio_roc(self.grid_J, self.pmf_in_J, self.pmf_out_J)

  def error_rates(self, thresholds_J) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, FNR) float64[J] of the tests "IN iff L > t_j": P_OUT(L > t_j), P_IN(L <= t_j)."""
    t = _validate.check_array(thresholds_J, "thresholds_J", ndim=1, allow_inf=True)
    return (np.array([self.pmf_out_J[self.grid_J > x].sum() for x in t]),
            np.array([self.pmf_in_J[~(self.grid_J > x)].sum() for x in t]))

  def delta(self, epsilon, direction: str = "both"):
    """Privacy profile delta(eps), eps >= 0 scalar or float[E]: "remove", "add" or "both" (max).

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
  """Cached `LlrDistribution.compute` (a ValueError naming num_steps past its work budget).

  Examples:
    >>> llr_distribution(0.2, 2.0, 10) is llr_distribution(0.2, 2.0, 10)
    True
  """
  # Validated before the cache: True and 1.0 hash alike.
  return _llr_distribution_cached(
      _validate.check_sampling_prob(sampling_prob),
      _validate.check_positive(noise_multiplier, "noise_multiplier"),
      _validate.check_int(num_steps, "num_steps"))


@functools.lru_cache(maxsize=64)
def _llr_distribution_cached(sampling_prob: float, noise_multiplier: float,
                             num_steps: int) -> LlrDistribution:
  return LlrDistribution.compute(sampling_prob, noise_multiplier, num_steps)
