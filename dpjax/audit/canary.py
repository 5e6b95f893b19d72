"""Canary audits of DP-SGD: the canaries, and a black-box and a white-box adversary.

The experiment (lecture §6.2, code 04 demo 3): a fixed base set of credit records
plus canaries (`dpjax.data.canaries.audit_data`); many models are trained with and
without a canary and an adversary scores each run (higher = IN); the scores become
an eps lower bound through `dpjax.audit.estimators`.

Two canaries ride in every training run, each with its own inclusion bit
(`balanced_design`):

* the lecture's record canary, bit r_m. The BLACK-BOX adversary sees only the final
  model and scores -logit(canary) (`black_box_scores`; training on a defaulted
  record lowers its logit).
* a Nasr-style gradient canary, bit s_m: an extra "record" whose gradient is C
  times a unit vector e in a coordinate that no other record uses
  (`gradient_canary`). The WHITE-BOX adversary sees every privatized update, as
  DP-SGD's analysis assumes. Its projection on e, in units of C and multiplied by
  the public batch size B (`normalized_observations`), is o_t = b_t + sigma z_t
  (b_t ~ Bernoulli(q) if the canary is in, 0 if not; z_t ~ N(0, 1)) for the
  claimed algorithm, so the exact log-likelihood ratio is

      L = sum_t log(1 - q + q exp((2 o_t - 1) / (2 sigma^2)))

  (`white_box_scores`), the Neyman-Pearson optimal statistic for the worst-case
  pair that the accountant analyses. Its distribution under the CLAIMED
  (q, sigma, T) is known (`LlrDistribution`): it is the privacy-loss distribution
  of the accounted mechanism, so its ROC (`dpjax.tradeoff.likelihood_ratio_roc`)
  is the accounted trade-off curve, which fixes the white-box threshold in advance
  and gives the best bound ANY adversary could certify with the same trials
  (`dpjax.audit.certifiable.best_certifiable`).

Many canaries per run (`gradient_canaries`, `canaries_design`): K gradient canaries,
canary j = C e_j in its own unused coordinate j, each with its own inclusion bit
and its own Poisson bits (`dpsgd.train_many(fixed_gradients=...)`). In DP-SGD as
claimed (fixed denominator B, noise independent across coordinates), coordinate j
of the update is (b_tj C + sigma C z_tj) / B, a function of canary j's bits and
noise only, so the K white-box scores of a run are K independent trials with the
single canary's distribution (tests/audit_canaries_test.py: uncorrelated across
canaries on null runs and with canaries, each canary's scores on the exact
likelihood-ratio law, and equal in law to single-canary runs). This independence
is a property of the claimed algorithm: the Clopper-Pearson bound on pooled
(run, canary) trials tests "this is DP-SGD as claimed, at eps", the hypothesis
of the audit. For an arbitrary mechanism claimed (eps, delta)-DP, K canaries of
one run need not be independent trials; `dpjax.audit.one_run` (Steinke, Nasr &
Jagielski 2023) is the bound for that case.

Sharing runs between the two adversaries is sound: for the black-box test the
gradient canary is part of the "rest of the data", present in half of the IN and
half of the OUT runs alike, so each side is the same mixture of neighbouring
datasets and FPR + e^eps FNR >= 1 - delta still holds (it is linear in the output
distributions); symmetrically for the white-box test. With the balanced design the
error counts are sums of two binomials, for which the Clopper-Pearson upper
limit stays conservative (Hoeffding 1956). For the correct algorithm the two
canaries touch disjoint coordinates, so the two experiments are exactly independent.

References: Nasr, Song, Thakurta, Papernot & Carlini 2021,
https://arxiv.org/abs/2101.04535; Jagielski, Ullman & Oprea 2020.

Shape letters: M models (trials), T steps, D features, J grid points.

Examples:
  >>> from dpjax import tradeoff
  >>> from dpjax.audit import certifiable, stats
  >>> dist = LlrDistribution.compute(sampling_prob=0.2, noise_multiplier=2.0, num_steps=50)
  >>> thr, fpr, fnr = tradeoff.likelihood_ratio_roc(dist.grid_J, dist.pmf_in_J, dist.pmf_out_J)
  >>> best = certifiable.best_certifiable(fpr, fnr, 1000, delta=1e-5, thresholds_J=thr)
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

from dpjax import _validate


# ----------------------------------------------------------------------------------
# Canaries and the design.


def gradient_canary(num_features: int, l2_clip_norm: float) -> dict:
  """{"w": C * e_last}: a gradient canary of norm exactly C in the unused last coordinate.

  Args:
    num_features: D >= 1 (the last coordinate must be one no record uses, as in
      `dpjax.data.canaries.audit_data`).
    l2_clip_norm: C, finite and > 0.
  Returns:
    {"w": float32[D]}; `gradient_canaries(D, 1, C)` is it with a leading axis K = 1.

  Examples:
    >>> gradient_canary(3, 2.0)["w"].tolist()
    [0.0, 0.0, 2.0]
  """
  d = _validate.check_size(num_features, "num_features")
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  return {"w": jnp.zeros((d,), jnp.float32).at[-1].set(c)}


def gradient_canaries(num_features: int, num_canaries: int, l2_clip_norm: float) -> dict:
  """{"w": [K, D]}: K gradient canaries, canary j = C * e_{D-K+j}, in the last K coordinates.

  Each canary has its own coordinate that no record uses (`dpjax.data.canaries
  .audit_data(..., unused_features=K)`), so in DP-SGD as claimed (fixed denominator
  B, independent Gaussian noise per coordinate) coordinate D-K+j of every
  privatized update is (b_tj C + sigma C z_tj) / B: it depends only on canary j's
  own sampling bits b_tj and its own noise z_tj, and the K canaries give K
  independent white-box trials per run (tests/canary_test.py measures this).

  Args:
    num_features: D >= K.
    num_canaries: K >= 1.
    l2_clip_norm: C, finite and > 0.
  Returns:
    {"w": float32[K, D]}, the gradients of `dpsgd.FixedGradients(g, keep_MxK)`; for
    K = 1 it is `gradient_canary(D, C)` with a leading axis.

  Examples:
    >>> gradient_canaries(3, 2, 1.0)["w"].tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  d = _validate.check_size(num_features, "num_features")
  k = _validate.check_size(num_canaries, "num_canaries", units=d)
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
  """The observe_fn handed to `dpsgd.train_many` (one function object, so the
  compiled program is reused across calls)."""
  return _project_last


@functools.lru_cache(maxsize=64)
def _last_coordinates(k: int):
  def project(update):
    return update["w"][-k:]
  return project


def observe_last_coordinates(num_canaries: int):
  """The observe_fn for K gradient canaries: the update's last K coordinates, float[K].

  One function object per K (cached), so the compiled program is reused.

  Examples:
    >>> observe_last_coordinates(2) is observe_last_coordinates(2)
    True
  """
  return _last_coordinates(_validate.check_int(num_canaries, "num_canaries"))


def canaries_design(num_models: int, num_canaries: int, in_fraction: float, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
  """Inclusion bits of the record canary and of K gradient canaries (M divisible by 4).

  The record canary alternates (record_in_M[i] = i even, as `balanced_design`).
  The gradient canaries' rows come in identical pairs (models 2i and 2i+1 share
  row i), so the record canary's IN runs and OUT runs carry exactly the same
  multiset of gradient-canary sets: each side of the black-box test is the same
  mixture of neighbouring datasets. Column j is an independent uniformly random
  arrangement (numpy Generator(seed)) of exactly round(in_fraction * M / 2) IN
  pairs, so every canary is IN in exactly 2 round(in_fraction M / 2) models. The
  design is fixed before any training, so the trials' order (by model, then
  canary) is independent of the scores, as the split-threshold strategy needs.

  Args:
    num_models: M, a positive multiple of 4.
    num_canaries: K >= 1.
    in_fraction: the fraction of models in which each gradient canary is IN, in
      (0, 1), with at least one IN and one OUT pair.
    seed: an int seeding the arrangement.
  Returns:
    (record_in_M bool[M], gradient_in_MxK bool[M, K]).

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
  """Inclusion bits of the two canaries for models 0..M-1 (M divisible by 4).

  Args:
    num_models: M, a positive multiple of 4.
  Returns:
    (record_in_M, gradient_in_M): bool arrays; every (r, s) combination occurs
    M/4 times and, in index order, each quarter of every side is balanced in the
    other bit (so a "first half / second half" split keeps the mixture equal).

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
  """-logit of each final model on the record canary: float64[M] (higher = IN).

  Args:
    params_w_MxD: float[M, D] final weights of M logistic-regression models.
    x_canary_D: float[D] the record canary's features.
  Returns:
    float64[M]; training on the (defaulted, label 0) canary lowers its logit.

  Examples:
    >>> black_box_scores([[1.0, 2.0], [0.0, -1.0]], [1.0, 1.0]).tolist()
    [-3.0, 1.0]
  """
  w = _validate.check_array(params_w_MxD, "params_w_MxD", ndim=2, min_size=1)
  x = _validate.check_array(x_canary_D, "x_canary_D", shape=(w.shape[1],))
  return -(w @ x)


def normalized_observations(obs_MxT, *, expected_batch_size: float, l2_clip_norm: float):
  """o_t = B * projection / C: the observed canary coordinate in units of one clipped gradient.

  Args:
    obs_MxT: float[M, T] the privatized updates' canary coordinate (what
      `observe_last_coordinate` records), after the division by B.
    expected_batch_size: B > 0, the public divisor.
    l2_clip_norm: C, finite and > 0.
  Returns:
    float64[M, T]: b_t + sigma z_t for the claimed algorithm (b_t the canary's
    inclusion in step t).

  Examples:
    >>> normalized_observations([[0.05]], expected_batch_size=20.0, l2_clip_norm=1.0).tolist()
    [[1.0]]
  """
  b = _validate.check_positive(expected_batch_size, "expected_batch_size")
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  obs = _validate.check_array(obs_MxT, "obs_MxT", ndim=2, min_size=1)
  return obs * (b / c)


def step_llr(o, sampling_prob: float, noise_multiplier: float):
  """Exact per-step log-likelihood ratio log((1-q) N(o; 0, s^2) + q N(o; 1, s^2)) - log N(o; 0, s^2).

  Args:
    o: normalized observations, any shape.
    sampling_prob: q in (0, 1].
    noise_multiplier: sigma, finite and > 0.
  Returns:
    float64 array like `o`.

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


def white_box_scores(o_MxT, sampling_prob: float, noise_multiplier: float) -> np.ndarray:
  """sum_t step_llr(o_t): float64[M] (higher = IN).

  With noise_multiplier = 0 (no noise) the likelihood ratio is infinite whenever
  the canary shows up, and the score is the number of steps with o_t > 1/2.

  Args:
    o_MxT: float[M, T] normalized observations.
    sampling_prob: q in (0, 1].
    noise_multiplier: sigma >= 0, finite.
  Returns:
    float64[M].

  Examples:
    >>> white_box_scores([[1.0, 0.0]], 1.0, 0.0).tolist()  # no noise: steps with o > 1/2
    [1.0]
  """
  o = _validate.check_array(o_MxT, "o_MxT", ndim=2, min_size=1)
  if _validate.check_nonnegative(noise_multiplier, "noise_multiplier") == 0:
    return np.sum(o > 0.5, axis=1).astype(np.float64)
  return np.sum(step_llr(o, sampling_prob, noise_multiplier), axis=1)


# ----------------------------------------------------------------------------------
# The exact distribution of the white-box statistic (= the privacy-loss distribution).


@dataclasses.dataclass(frozen=True)
class LlrDistribution:
  """Distribution of L = sum_t step_llr(o_t) under IN and OUT, on a grid.

  L is the privacy loss of T steps of the Poisson-subsampled Gaussian (the
  "remove" pair IN || OUT; its negative is the "add" pair's), so this is the same
  distribution that `dpjax.accounting.pld` composes for the accountant.
  tests/canary_test.py checks the two against each other at the audit's four
  settings: the privacy profile `delta(eps)` (the worse of the two neighbour
  directions, as the accountant reports it) equals `pld.gaussian_pld(sigma, q)
  .self_compose(T).delta(eps)` on an eps grid in [0, 8] to within 1e-3 relative
  plus 1e-12 absolute, from above and from below; each direction separately
  matches the closed form for T = 1. It is kept as its own computation because
  the audit needs what the accountant's PLD does not expose: the statistic's
  values (in the units of `white_box_scores`, to fix a threshold on them) with
  both pmfs, each step's loss rounded to the nearest grid point. The accountant's
  PLD moves mass pessimistically to grid points instead (an upper bound on delta,
  as an accountant must), so thresholds chosen from it differ slightly (by up to
  ~2e-4 in L at the audit's settings), enough to change an error count.

  Attributes:
    grid_J: float64[J] values of L, evenly spaced (spacing h).
    pmf_in_J, pmf_out_J: probabilities of each grid value under IN / OUT.

  Discretisation: L is rounded to the grid per step (|error| <= h/2 per step);
  tails beyond +-30 standard deviations are aliased by the circular FFT
  (negligible). `dpjax.tradeoff.likelihood_ratio_roc(grid_J, pmf_in_J,
  pmf_out_J)` is the ROC of the tests "IN iff L > threshold".
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
    Returns:
      LlrDistribution.
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

  def delta(self, epsilon, direction: str = "both"):
    """Privacy profile delta(eps) of this distribution.

    Args:
      epsilon: eps >= 0, scalar or float[E].
      direction: "remove" (delta_{IN||OUT}: sup_S P_IN(S) - e^eps P_OUT(S)),
        "add" (delta_{OUT||IN}) or "both" (the larger, as an accountant reports).
    Returns:
      float, or float64[E] for an array `epsilon`.

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


def llr_distribution(sampling_prob: float, noise_multiplier: float,
                     num_steps: int) -> LlrDistribution:
  """Cached `LlrDistribution.compute` (the audit asks for each setting several times).

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
