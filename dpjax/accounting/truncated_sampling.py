"""The truncated (capped-batch) Poisson-subsampled Gaussian: RDP and PLD upper bounds.

Mechanism: each record is drawn with probability q; if more than B (max_batch_size) are
drawn, a uniformly random subset of B is kept; the kept records' contributions (L2 norm
<= C) are summed and N(0, (sigma C)^2) is added per coordinate. Neighbours: add/remove one
record x.

Bound, for a dataset of n = dataset_size records and both of its kinds of neighbours (a
record removed: n - 1 others; a record added: n others). Let N be the number of drawn records
among n - 1 fixed others, Z the draw of one more other (present only when a record is added),
and reveal (N, Z): their law is the same on both datasets of a pair, and the released
mechanism is a post-processing of the one that also outputs them. With K the others drawn
(N, or N + Z):

* K < B: x is never cut; the pair is the subsampled Gaussian (1 - q) N(0, s^2) + q N(C, s^2)
  against N(0, s^2), s = sigma C.
* K >= B: with x drawn, x is kept with probability B / (K + 1) and then displaces one other
  record y of the kept B. Coupling the kept (B - 1)-subset and y on both sides gives the
  pair (1 - r) N(0, s^2) + r N(v, s^2) against N(0, s^2), ||v|| = ||g_x - g_y|| <= 2 C,
  r = q B / (K + 1). A shift of norm <= 2C and a rate <= r' are post-processings of the
  shift 2C at rate r' (Blackwell; mixing in fresh N(0) draws).

So branch (N, Z) is bounded, for both neighbours at once, by: the sensitivity-C subsampled
Gaussian at rate q when N < B - 1, or N = B - 1 and Z = 0; the sensitivity-2C one at rate q
when N = B - 1 and Z = 1 (it dominates both K = B - 1 and K = B); and the sensitivity-2C one
at rate q B / (k_i + 1) when N >= B, N cut into at most MAX_GROUPS groups [k_i, k_{i+1}).
The per-step pair is the mixture of these, branches revealed. RDP: exp((a - 1) eps(a)) =
sum_i w_i exp((a - 1) eps_i(a)) (exact for revealed branches); PLD: the same mixture of the
loss pmfs, both directions (pessimistic, as each is). The cut weight 1 - w_0 is
P(Binomial(n, q) >= B) (`cut_probability`).
dp_accounting 0.6.0's TruncatedSubsampledGaussianDpEvent bounds the same mechanism
(https://arxiv.org/abs/2508.15089) with a replace-one pair in the cut branch.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from dpjax import _validate
from dpjax.accounting import pld, pld_grid, pld_pmfs, subsampled_rdp

# Groups of N >= B given their own sampling rate (a finer split is tighter and slower).
MAX_GROUPS = 16


def _check(noise_multiplier, sampling_prob, dataset_size, max_batch_size):
  return (_validate.check_positive(noise_multiplier, "noise_multiplier"),
          _validate.check_sampling_prob(sampling_prob),
          _validate.check_int(dataset_size, "dataset_size", maximum=2 ** 53),
          _validate.check_int(max_batch_size, "max_batch_size", maximum=2 ** 53))


def cut_probability(sampling_prob: float, dataset_size: int, max_batch_size: int) -> float:
  """P(Binomial(dataset_size, q) >= max_batch_size): the chance that dataset_size other
  records alone fill the cap (float in [0, 1]).

  Examples:
    >>> cut_probability(0.5, 2, 2)   # both others drawn
    0.25
  """
  q = _validate.check_sampling_prob(sampling_prob)
  n = _validate.check_int(dataset_size, "dataset_size", maximum=2 ** 53)
  b = _validate.check_int(max_batch_size, "max_batch_size", maximum=2 ** 53)
  if b > n:
    return 0.0
  return float(min(1.0, max(0.0, stats.binom.sf(b - 1, n, q))))


def branches(sampling_prob: float, dataset_size: int, max_batch_size: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(weights [G], rates [G], sensitivities [G]) of the revealed branches (module
  docstring): the uncut one (q, 1) first, then (q, 2) for N = B - 1 with Z = 1, then the
  cut groups (q B / (k_i + 1), 2); weights sum to 1 (zero weights dropped).
  G <= MAX_GROUPS + 2."""
  q = _validate.check_sampling_prob(sampling_prob)
  n = _validate.check_int(dataset_size, "dataset_size", maximum=2 ** 53)
  b = _validate.check_int(max_batch_size, "max_batch_size", maximum=2 ** 53)
  m = n - 1                                      # the fixed others
  edge = float(stats.binom.pmf(b - 1, m, q)) * q if b - 1 <= m else 0.0
  weights, rates, sens = [1.0 - cut_probability(q, n, b)], [q], [1.0]
  if edge > 0.0:
    weights.append(edge)
    rates.append(q)
    sens.append(2.0)
  if b <= m:
    width = max(1, math.ceil(math.sqrt(m * q * (1.0 - q)) / 4.0))
    starts = [b + i * width for i in range(MAX_GROUPS) if b + i * width <= m]
    sf = [float(stats.binom.sf(k - 1, m, q)) for k in starts] + [0.0]
    for i, k in enumerate(starts):
      w = max(0.0, sf[i] - sf[i + 1])
      if w > 0.0:
        weights.append(w)
        rates.append(q * b / (k + 1.0))
        sens.append(2.0)
  w = np.array(weights)
  w[0] = max(0.0, 1.0 - w[1:].sum())            # the same value, summing exactly to 1
  keep = w > 0.0
  return w[keep], np.array(rates)[keep], np.array(sens)[keep]


@_validate.names_extreme_arguments
def truncated_subsampled_gaussian_rdp(noise_multiplier: float, sampling_prob: float,
                                      dataset_size: int, max_batch_size: int,
                                      orders) -> np.ndarray:
  """RDP upper bound (float64[A]) of one truncated Poisson-subsampled Gaussian step
  (add/remove); the module docstring gives the mechanism and the proof.

  Examples:
    >>> r = truncated_subsampled_gaussian_rdp(1.0, 0.01, 1000, 1000, [2.0])  # never cut
    >>> bool(r[0] == subsampled_rdp.subsampled_gaussian_rdp(0.01, 1.0, [2.0])[0])
    True
  """
  sigma, q, n, b = _check(noise_multiplier, sampling_prob, dataset_size, max_batch_size)
  a = _validate.check_orders(orders)
  w, r, c = branches(q, n, b)
  if w.size == 1:
    return subsampled_rdp.subsampled_gaussian_rdp(q, sigma, a)
  curves = np.stack([(a - 1.0) * subsampled_rdp.subsampled_gaussian_rdp(ri, sigma / ci, a)
                     for ri, ci in zip(r, c)])
  with np.errstate(divide="ignore"):
    mixed = special.logsumexp(curves, axis=0, b=w[:, None])
  return mixed / (a - 1.0)


def _mix(pmfs: list, weights: np.ndarray) -> pld_grid.LossPmf:
  """sum_i w_i pmfs[i]: the loss pmf of the pair whose branch i (probability w_i) is
  revealed; same spacing h."""
  lo = min(p.offset for p in pmfs)
  hi = max(p.offset + p.probs.size for p in pmfs)
  probs = np.zeros(hi - lo)
  for p, w in zip(pmfs, weights):
    probs[p.offset - lo:p.offset - lo + p.probs.size] += w * p.probs
  inf = float(sum(w * p.infinity_mass for p, w in zip(pmfs, weights)))
  return pld_grid.LossPmf(pmfs[0].h, lo, probs, min(1.0, inf), max(p.noise for p in pmfs))


@_validate.names_extreme_arguments
def truncated_subsampled_gaussian_pld(noise_multiplier: float, sampling_prob: float,
                                      dataset_size: int, max_batch_size: int,
                                      value_discretization: float =
                                      pld.DEFAULT_VALUE_DISCRETIZATION,
                                      tail_mass: float = pld.DEFAULT_TAIL_MASS
                                      ) -> pld.PrivacyLossDistribution:
  """PLD (both add/remove directions, pessimistic) of one truncated Poisson-subsampled
  Gaussian step; grid spacing h = value_discretization, tail_mass as in `pld.gaussian_pld`.

  Examples:
    >>> capped = truncated_subsampled_gaussian_pld(1.0, 0.01, 1000, 12, 1e-3)
    >>> free = pld.gaussian_pld(1.0, 0.01, value_discretization=1e-3)
    >>> round(cut_probability(0.01, 1000, 12), 4), capped.delta(1.0) > free.delta(1.0)
    (0.3026, True)
  """
  sigma, q, n, b = _check(noise_multiplier, sampling_prob, dataset_size, max_batch_size)
  h = _validate.check_positive(value_discretization, "value_discretization")
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  w, r, c = branches(q, n, b)
  if w.size == 1:
    return pld.gaussian_pld(sigma, q, value_discretization=h, tail_mass=tail)
  if not 2.0 / sigma < 1e150:
    raise pld_grid.GridTooLarge(f"noise_multiplier = {sigma!r} is too small: the losses "
                                "reach 2 / noise_multiplier^2, past any grid")
  per_branch = [pld_pmfs.subsampled_gaussian_pmfs(ci / sigma, ri, h, tail)
                for ri, ci in zip(r, c)]
  pmfs = tuple(_mix([p[d] for p in per_branch], w) for d in range(2))
  return pld.PrivacyLossDistribution(pmfs=pmfs, value_discretization=h)


__all__ = ["MAX_GROUPS", "branches", "cut_probability", "truncated_subsampled_gaussian_pld",
           "truncated_subsampled_gaussian_rdp"]
