"""The truncated (capped-batch) Poisson-subsampled Gaussian: RDP and PLD upper bounds.

Mechanism: each record is drawn with probability q; if more than B (max_batch_size) are
drawn, a uniformly random subset of B is kept; the kept records' contributions (L2 norm
<= C) are summed and N(0, (sigma C)^2) is added per coordinate. Neighbours: add/remove one
record x. The bound depends on the dataset's size, so `neighbours` says which pairs it covers,
for n = dataset_size:

* "both" (default): a dataset of n records and both of its kinds of neighbour, a record
  removed (n - 1 records) or added (n + 1): the guarantee for the dataset trained on;
* "removal": the pairs whose larger dataset has n records (n - 1 others beside x), the
  convention of dp_accounting 0.6.0's TruncatedSubsampledGaussianDpEvent.

Bound. Let N be the number of drawn records among n - 1 fixed others, Z the draw of one more
other z (a real record when x is added to the n-record dataset; a fresh coin revealed to
nobody's loss when x is removed), and K the others drawn (N, or N + Z). Revealing a variable
whose law is the same on both datasets of a pair only loosens the bound (the released output
is a post-processing of output and variable).

* K < B: x is never cut; the pair is the subsampled Gaussian (1 - q) N(0, s^2) + q N(C, s^2)
  against N(0, s^2), s = sigma C.
* K >= B: with x drawn, x is kept with probability B / (K + 1), and then displaces a uniform
  record y of the B that the dataset without x keeps (S'). With (S', y) revealed the pair is
  (1 - r) N(0, s^2) + r N(v, s^2) against N(0, s^2), ||v|| = ||g_x - g_y|| <= 2 C, with r the
  conditional mean of q B / (K + 1) given (S', y). When the others are exchangeable (all n - 1
  when z is absent or not drawn), K is independent of (S', y), so r = E[q B / (K + 1) | cut]
  exactly: one branch, K not revealed. A shift of norm <= 2C and a rate <= r' are
  post-processings of the shift 2C at rate r' (Blackwell; mixing in fresh N(0) draws).

"removal": the uncut branch (N < B; weight P(Binomial(n - 1, q) < B)) at rate q, sensitivity
C, and the cut branch (N >= B) at sensitivity 2C and rate
r = E[q B / (N + 1) | N >= B] = B P(Binomial(n, q) > B) / (n P(Binomial(n - 1, q) >= B)).

"both" reveals the class of (N, Z): uncut (N + Z < B; rate q, sensitivity C); the edge
N = B - 1, Z = 1 (sensitivity 2C at rate q: it dominates the removed case's (C, q) and the
added case's (2C, q B / (B + 1))); and the cut N >= B, rate r as above, except where x is
added, z drawn (K = N + 1) and z is one of S'. That sub-branch (weight q E[B / (N + 1); N >= B],
a fresh coin of the same law when x is removed) has rate max(r, rho),
rho = q B E[1 / ((N + 1)(N + 2)); N >= B] / E[1 / (N + 1); N >= B]; where z is not in S' the
added case's rate, a mean of q B / (N + 2) under weights increasing in N, is at most r
(Chebyshev's association inequality), so that part joins the r branch. The closed forms use
sum_k C(m, k) q^k (1 - q)^(m - k) / (k + 1) = P(Binomial(m + 1, q) > k0) / ((m + 1) q) over
k >= k0 (and the same step twice for 1 / ((k + 1)(k + 2))); every rate is rounded up.

The per-step pair is the mixture of these, branches revealed. RDP: exp((a - 1) eps(a)) =
sum_i w_i exp((a - 1) eps_i(a)) (exact for revealed branches); PLD: the same mixture of the
loss pmfs, both directions (pessimistic, as each is). `tests/truncated_sampling_test.py`
checks both conventions against the exact delta of worst-case datasets, enumerated.
dp_accounting 0.6.0 bounds the cut branch by a replace-one pair of sensitivity 2C at the same
mean rate (https://arxiv.org/abs/2508.15089); the add/remove pair above is the tighter one.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from dpjax import _validate
from dpjax.accounting import pld, pld_grid, pld_pmfs, subsampled_rdp

# The pairs a bound covers (module docstring).
NEIGHBOURS = ("both", "removal")
# Rates are rounded up by this relative margin (the closed forms' float error is far below).
_RATE_ROUND_UP = 1e-12


def _check(noise_multiplier, sampling_prob, dataset_size, max_batch_size, neighbours):
  return (_validate.check_positive(noise_multiplier, "noise_multiplier"),
          _validate.check_sampling_prob(sampling_prob),
          _validate.check_int(dataset_size, "dataset_size", maximum=2 ** 53),
          _validate.check_int(max_batch_size, "max_batch_size", maximum=2 ** 53),
          _validate.check_choice(neighbours, NEIGHBOURS, "neighbours"))


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


def _sf(k: int, m: int, q: float) -> float:
  """P(Binomial(m, q) > k) as a float in [0, 1] (0 where k >= m)."""
  return 0.0 if k >= m else float(min(1.0, max(0.0, stats.binom.sf(k, m, q))))


def _up(rate: float, cap: float) -> float:
  return min(cap, rate * (1.0 + _RATE_ROUND_UP))


def branches(sampling_prob: float, dataset_size: int, max_batch_size: int,
             neighbours: str = "both") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(weights [G], rates [G], sensitivities [G]) of the revealed branches (module
  docstring): the uncut one (q, 1) first; for "both" then the edge (q, 2), the cut branch
  (r, 2) and the sub-branch where the added record's neighbour z is kept (max(r, rho), 2);
  for "removal" the cut branch (r, 2). Weights sum to 1 (zero weights dropped); G <= 4.

  Examples:
    >>> w, r, c = branches(0.5, 4, 2, "removal")   # 3 others; cut when >= 2 are drawn
    >>> w.tolist(), [round(float(x), 6) for x in r], c.tolist()
    ([0.5, 0.5], [0.5, 0.3125], [1.0, 2.0])
  """
  q = _validate.check_sampling_prob(sampling_prob)
  n = _validate.check_int(dataset_size, "dataset_size", maximum=2 ** 53)
  b = _validate.check_int(max_batch_size, "max_batch_size", maximum=2 ** 53)
  both = _validate.check_choice(neighbours, NEIGHBOURS, "neighbours") == "both"
  m = n - 1                                      # the fixed others
  cap = q * b / (b + 1.0)                        # no cut-branch rate exceeds it
  cut = _sf(b - 1, m, q)                         # P(N >= B)
  s1 = _sf(b, m + 1, q)                          # (m + 1) q E[1 / (N + 1); N >= B]
  rate = _up(b * s1 / ((m + 1) * cut), cap) if cut > 0.0 else 0.0
  if not both:
    weights, rates, sens = [1.0 - cut, cut], [q, rate], [1.0, 2.0]
  else:
    edge = float(stats.binom.pmf(b - 1, m, q)) * q if b - 1 <= m else 0.0
    kept_z = min(cut, b * s1 / (m + 1))          # q E[B / (N + 1); N >= B]
    rho = _up(b * _sf(b + 1, m + 2, q) / ((m + 2) * s1), cap) if s1 > 0.0 else 0.0
    weights = [1.0 - cut_probability(q, n, b), edge, cut - kept_z, kept_z]
    rates, sens = [q, q, rate, max(rate, rho)], [1.0, 2.0, 2.0, 2.0]
  w = np.array(weights)
  w[0] = max(0.0, 1.0 - w[1:].sum())            # the same value, summing exactly to 1
  keep = w > 0.0
  return w[keep], np.array(rates)[keep], np.array(sens)[keep]


@_validate.names_extreme_arguments
def truncated_subsampled_gaussian_rdp(noise_multiplier: float, sampling_prob: float,
                                      dataset_size: int, max_batch_size: int,
                                      orders, neighbours: str = "both") -> np.ndarray:
  """RDP upper bound (float64[A]) of one truncated Poisson-subsampled Gaussian step
  (add/remove, over the pairs `neighbours` names); the module docstring gives the mechanism
  and the proof.

  Examples:
    >>> r = truncated_subsampled_gaussian_rdp(1.0, 0.01, 1000, 1000, [2.0])  # never cut
    >>> bool(r[0] == subsampled_rdp.subsampled_gaussian_rdp(0.01, 1.0, [2.0])[0])
    True
  """
  sigma, q, n, b, nb = _check(noise_multiplier, sampling_prob, dataset_size, max_batch_size,
                              neighbours)
  a = _validate.check_orders(orders)
  w, r, c = branches(q, n, b, nb)
  if w.size == 1 and c[0] == 1.0:               # never cut
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
                                      tail_mass: float = pld.DEFAULT_TAIL_MASS,
                                      neighbours: str = "both"
                                      ) -> pld.PrivacyLossDistribution:
  """PLD (both add/remove directions, pessimistic) of one truncated Poisson-subsampled
  Gaussian step over the pairs `neighbours` names; grid spacing h = value_discretization,
  tail_mass as in `pld.gaussian_pld`.

  Examples:
    >>> capped = truncated_subsampled_gaussian_pld(1.0, 0.01, 1000, 12, 1e-3)
    >>> free = pld.gaussian_pld(1.0, 0.01, value_discretization=1e-3)
    >>> round(cut_probability(0.01, 1000, 12), 4), capped.delta(1.0) > free.delta(1.0)
    (0.3026, True)
  """
  sigma, q, n, b, nb = _check(noise_multiplier, sampling_prob, dataset_size, max_batch_size,
                              neighbours)
  h = _validate.check_positive(value_discretization, "value_discretization")
  tail = _validate.check_range(tail_mass, "tail_mass", 0.0, 1e-3, open_low=True)
  w, r, c = branches(q, n, b, nb)
  if w.size == 1 and c[0] == 1.0:               # never cut
    return pld.gaussian_pld(sigma, q, value_discretization=h, tail_mass=tail)
  if not 2.0 / sigma < 1e150:
    raise pld_grid.GridTooLarge(f"noise_multiplier = {sigma!r} is too small: the losses "
                                "reach 2 / noise_multiplier^2, past any grid")
  per_branch = [pld_pmfs.subsampled_gaussian_pmfs(ci / sigma, ri, h, tail)
                for ri, ci in zip(r, c)]
  pmfs = tuple(_mix([p[d] for p in per_branch], w) for d in range(2))
  return pld.PrivacyLossDistribution(pmfs=pmfs, value_discretization=h)


__all__ = ["NEIGHBOURS", "branches", "cut_probability", "truncated_subsampled_gaussian_pld",
           "truncated_subsampled_gaussian_rdp"]
