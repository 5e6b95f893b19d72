"""Accountants over `events`: RDP and PLD, each saying which events it supports.

    from dpjax.accounting import events as ev, event_accounting as ea
    step = ev.PoissonSampledEvent(0.01, ev.GaussianEvent(1.0))
    ea.epsilon(ev.SelfComposedEvent(step, 1000), 1e-5, accountant="pld")   # 1.83

A composition tree is flattened to (leaf event, count) pairs (`events.flatten`); each
leaf becomes an RDP curve (added order by order, then converted: `rdp.rdp_to_epsilon`)
or a PLD (self-composed `count` times, then convolved: `pld`). An event an accountant
cannot bound under the requested relation raises `events.UnsupportedEventError` naming it;
nothing is approximated silently. Support (`SUPPORTED` lists the leaf types):

| leaf                                | rdp                     | pld                        |
|-------------------------------------|-------------------------|----------------------------|
| Gaussian, Laplace, discrete Laplace | both relations (exact)  | both relations             |
| discrete Gaussian                   | both (alpha D^2/2s^2)   | both (window, rest at inf) |
| randomized response                 | replace-one / -special  | replace-one / -special     |
| (eps, 0) / (eps, delta > 0)         | yes / no (infinite)     | yes / yes (exact pair)     |
| zCDP                                | yes (rho alpha)         | no (no dominating pair)    |
| Poisson-sampled Gaussian            | all (replace-one: grid) | all (replace-one: ±C pair) |
|   (or composed Gaussians: one       |                         |                            |
|   equivalent Gaussian)              |                         |                            |
| Poisson-sampled Laplace             | no                      | add/remove (exact tails)   |
| Poisson-sampled discrete Laplace,   | no                      | add/remove (pair mixture)  |
|   discrete Gaussian, (eps, delta)   |                         |                            |
| sampled without replacement         | replace-one (WBK 2019)  | replace-one: Gaussian,     |
|   (Gaussian / composed Gaussians:   |   Theorem 27, tighter)  |   Laplace, RR, pmf pairs   |
|                                     |                         |   (symmetrised pair)       |
| truncated Poisson-sampled Gaussian  | add/remove              | add/remove                 |
| exponential mechanism (eps-BR)      | both (exact BR curve)   | both (eps-DP pair)         |
| permute-and-flip                    | both (eps-DP curve)     | both (eps-DP pair)         |
| Poisson-sampled exp. mech. / P&F    | no                      | add/remove (pair mixture)  |
| repeat-and-select of any rdp event  | inner's relations       | no (RDP theorems only)     |
| tree aggregation (one epoch)        | both (exact)            | both (exact Gaussian)      |
| mixture of Gaussians                | add/remove (grid bound) | add/remove                 |
| output pair (K outputs, given laws) | all (exact pair)        | all (exact pair)           |

"Both" means all three relations: replace-special is accounted as add/remove (which in the
table covers it) except for randomized response (the special value answered uniformly).
PLD answers are upper bounds on a grid of spacing `value_discretization` (exact for
Gaussian-only compositions); at the default grid, eps of DP-SGD (T Poisson-sampled Gaussian
steps, q < 1, every leaf the same; add/remove or replace-special) is at most the front
door's `pld_dpsgd.dpsgd_epsilon` (adaptive grid ending at h <= 1e-4, `_dpsgd_steps`). RDP answers are upper bounds at the given orders. The gdp
accountant is exact and takes Gaussians, tree aggregation and composed Gaussians sampled
whole (no subsampling) only (`gdp_mu`).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy import special

from dpjax import _validate
from dpjax.accounting import bounded_range
from dpjax.accounting import composition
from dpjax.accounting import events as ev
from dpjax.accounting import gdp
from dpjax.accounting import mixture_pld
from dpjax.accounting import pld
from dpjax.accounting import pld_dpsgd
from dpjax.accounting import pld_grid
from dpjax.accounting import rdp
from dpjax.accounting import truncated_sampling
from dpjax.accounting import without_replacement

ACCOUNTANTS = ("rdp", "pld", "gdp")
SUPPORTED = {
    "rdp": (ev.GaussianEvent, ev.LaplaceEvent, ev.DiscreteLaplaceEvent,
            ev.DiscreteGaussianEvent, ev.RandomizedResponseEvent, ev.EpsilonDeltaEvent,
            ev.ZCdpEvent, ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent,
            ev.ExponentialMechanismEvent, ev.PermuteAndFlipEvent, ev.RepeatAndSelectEvent,
            ev.TreeAggregationEvent, ev.TruncatedPoissonSampledGaussianEvent,
            ev.OutputPairEvent, ev.MixtureOfGaussiansEvent),
    "pld": (ev.GaussianEvent, ev.LaplaceEvent, ev.DiscreteLaplaceEvent,
            ev.DiscreteGaussianEvent, ev.RandomizedResponseEvent, ev.EpsilonDeltaEvent,
            ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent,
            ev.ExponentialMechanismEvent, ev.PermuteAndFlipEvent, ev.TreeAggregationEvent,
            ev.MixtureOfGaussiansEvent, ev.TruncatedPoissonSampledGaussianEvent,
            ev.OutputPairEvent),
    # exactly mu-GDP: Gaussians, tree aggregation, samples of the whole dataset
    "gdp": (ev.GaussianEvent, ev.TreeAggregationEvent, ev.PoissonSampledEvent,
            ev.SampledWithoutReplacementEvent),
}
_PAIR_EVENTS = (ev.DiscreteLaplaceEvent, ev.DiscreteGaussianEvent, ev.EpsilonDeltaEvent,
                ev.ExponentialMechanismEvent, ev.PermuteAndFlipEvent)
# Inner events whose replace-one pair is symmetric: sampled without replacement under pld
_WOR_PLD_INNER = (ev.GaussianEvent, ev.LaplaceEvent, ev.RandomizedResponseEvent, *_PAIR_EVENTS)
_UNSUPPORTED_REASON = {
    "rdp": "no RDP curve is implemented",
    "pld": "no dominating pair is known (a zCDP or repeat-and-select guarantee bounds "
           "Renyi divergences only)",

    "gdp": "only Gaussian mechanisms and their compositions are exactly mu-GDP; use "
           "accountant='pld' (PrivacyLossDistribution.gdp_mu() is an upper bound on mu)",
}


def _pair(e) -> tuple[np.ndarray, np.ndarray, float]:
  """(p, q, tail) of a leaf event given by a pmf pair."""
  if isinstance(e, ev.DiscreteLaplaceEvent):
    return (*pld.discrete_laplace_pair(e.noise_parameter, e.sensitivity), 0.0)
  if isinstance(e, ev.DiscreteGaussianEvent):
    return pld.discrete_gaussian_pair(e.sigma, e.sensitivity)
  return (*pld.epsilon_delta_pair(e.epsilon, getattr(e, "delta", 0.0)), 0.0)


def _pair_rdp(p: np.ndarray, q: np.ndarray, orders: np.ndarray) -> np.ndarray:
  """max(D_a(P || Q), D_a(Q || P)) at each order a > 1 for pmfs p, q [K]."""
  def one(a_, b_):
    keep = a_ > 0
    if np.any(keep & (b_ == 0)):
      return np.full(orders.shape, math.inf)
    la, lb = np.log(a_[keep]), np.log(b_[keep])
    return special.logsumexp(orders[:, None] * la + (1 - orders[:, None]) * lb,
                             axis=1) / (orders - 1)
  return np.maximum(np.maximum(one(p, q), one(q, p)), 0.0)


def _rr_pair(e) -> tuple[np.ndarray, np.ndarray]:
  """Randomized response's replace-one pair as pmfs over (x, x', each other value)."""
  log_z = e.epsilon + math.log1p((e.num_buckets - 1) * math.exp(-e.epsilon))
  hi, lo = math.exp(e.epsilon - log_z), math.exp(-log_z)
  rest = [lo] * (e.num_buckets - 2)
  return np.array([hi, lo] + rest), np.array([lo, hi] + rest)


def _rr_special_pair(e) -> tuple[np.ndarray, np.ndarray]:
  """(randomized response on a value, the uniform answer to the special value) as pmfs
  over (the value, each of the k - 1 others)."""
  log_z = e.epsilon + math.log1p((e.num_buckets - 1) * math.exp(-e.epsilon))
  p = np.array([math.exp(e.epsilon - log_z)] + [math.exp(-log_z)] * (e.num_buckets - 1))
  return p, np.full(e.num_buckets, 1.0 / e.num_buckets)


def _leaf_check(e, accountant: str, relation: str) -> None:
  """Raises UnsupportedEventError when `accountant` cannot bound leaf `e` under `relation`."""
  if accountant == "gdp":
    sampled = isinstance(e, (ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent))
    whole = sampled and (getattr(e, "sampling_prob", 1.0) == 1.0
                         and getattr(e, "sample_size", 0) == getattr(e, "dataset_size", 0))
    if not isinstance(e, SUPPORTED["gdp"]) or (sampled and not (whole and (
        isinstance(_unwrap(e), (ev.GaussianEvent, ev.TreeAggregationEvent))
        or _gaussian_composition(e) is not None))):
      reason = _UNSUPPORTED_REASON["gdp"]
      if isinstance(e, (ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent)):
        reason = ("a subsampled Gaussian is not exactly mu-GDP (the CLT is an "
                  "approximation); " + reason)
      raise ev.UnsupportedEventError(e, accountant, reason)
    return
  add_remove = relation in (ev.ADD_REMOVE, ev.REPLACE_SPECIAL)
  if isinstance(e, (ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent)) and isinstance(
      e.event, (ev.SelfComposedEvent, ev.ComposedEvent)) and _gaussian_composition(e) is None:
    raise ev.UnsupportedEventError(e, accountant, "sampling once for a composition is not "
                                   "implemented; compose sampled events instead")
  if not isinstance(e, SUPPORTED[accountant]):
    raise ev.UnsupportedEventError(e, accountant, _UNSUPPORTED_REASON[accountant])
  if isinstance(e, (ev.MixtureOfGaussiansEvent, ev.TruncatedPoissonSampledGaussianEvent)
                ) and not add_remove:
    raise ev.UnsupportedEventError(e, accountant, "the pair is an add/remove guarantee; use "
                                   "relation='add_remove' (or 'replace_special')")
  if isinstance(e, ev.RepeatAndSelectEvent):
    check_supported(e.event, accountant, relation)
  if isinstance(e, ev.RandomizedResponseEvent) and relation == ev.ADD_REMOVE:
    raise ev.UnsupportedEventError(e, accountant, "randomized response protects one record's "
                                   "value, a replace-one guarantee; use relation='replace_one' "
                                   "or 'replace_special'")
  if accountant == "rdp" and isinstance(e, ev.EpsilonDeltaEvent) and e.delta > 0:
    raise ev.UnsupportedEventError(e, accountant, "an (eps, delta > 0) mechanism has "
                                   "infinite Renyi divergence; use accountant='pld'")
  if isinstance(e, ev.PoissonSampledEvent) and e.sampling_prob < 1:
    if not add_remove and not isinstance(e.event, ev.GaussianEvent):
      raise ev.UnsupportedEventError(e, accountant, "Poisson sampling is accounted for "
                                     "add/remove neighbours only (replace-one: the "
                                     "Gaussian)")
    inner = (ev.GaussianEvent if accountant == "rdp"
             else (ev.GaussianEvent, ev.LaplaceEvent, *_PAIR_EVENTS))
    if not isinstance(e.event, inner):
      raise ev.UnsupportedEventError(e, accountant, f"Poisson sampling of "
                                     f"{type(e.event).__name__} is not implemented")
  if isinstance(e, ev.PoissonSampledEvent) and e.sampling_prob == 1:
    _leaf_check(e.event, accountant, relation)
  if isinstance(e, ev.SampledWithoutReplacementEvent):
    if e.sample_size < e.dataset_size:
      if relation != ev.REPLACE_ONE:
        raise ev.UnsupportedEventError(e, accountant, "amplification by sampling without "
                                       "replacement is a replace-one guarantee; use "
                                       "relation='replace_one'")
      if isinstance(e.event, (ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent,
                              ev.TruncatedPoissonSampledGaussianEvent)):
        raise ev.UnsupportedEventError(e, accountant, "sampling a sampled event is not "
                                       "implemented")
      if accountant == "pld" and _gaussian_composition(e) is None and not isinstance(
          _unwrap(e.event), _WOR_PLD_INNER):
        raise ev.UnsupportedEventError(e, accountant, "a dominating pair of sampling "
                                       f"{type(_unwrap(e.event)).__name__} without replacement "
                                       "is not implemented; use accountant='rdp'")
    if _gaussian_composition(e) is None:
      _leaf_check(e.event, accountant, relation)


def _gaussian_composition(e) -> Optional[float]:
  """The noise multiplier (sum_i k_i / sigma_i^2)^(-1/2) of one Gaussian equivalent to the
  composition of Gaussians that the sampled event `e` (Poisson or without replacement)
  samples once, else None. k_i Gaussians of noise sigma_i on the same sample release
  f + N_j; their precision-weighted mean is f + N(0, sigma^2) at that sigma, and the
  differences N_j - N_1 are independent of it and of the data, so the release and the one
  Gaussian are post-processings of each other: equal for every relation and sampling."""
  if not (isinstance(e, (ev.PoissonSampledEvent, ev.SampledWithoutReplacementEvent))
          and isinstance(e.event, (ev.SelfComposedEvent, ev.ComposedEvent))):
    return None
  leaves = ev.flatten(e.event)
  if not all(isinstance(_unwrap(x), ev.GaussianEvent) for x, _ in leaves):
    return None
  return sum(k / _unwrap(x).noise_multiplier ** 2 for x, k in leaves) ** -0.5


def check_supported(event: ev.Event, accountant: str = "pld",
                    relation: str = ev.ADD_REMOVE) -> list[tuple[ev.Event, int]]:
  """The flattened (leaf, count) list of `event`, or UnsupportedEventError naming the first
  leaf that `accountant` ("rdp" or "pld") cannot bound under `relation`."""
  _validate.check_choice(accountant, ACCOUNTANTS, "accountant")
  relation = ev.check_relation(relation)
  leaves = [(_one_gaussian(e), k) for e, k in ev.flatten(event)]
  for e, _ in leaves:
    _leaf_check(e, accountant, relation)
  return leaves


def _one_gaussian(e):
  """A Poisson sample of a composition of Gaussians as the Poisson sample of its one
  equivalent Gaussian (`_gaussian_composition`); any other leaf unchanged."""
  sigma = _gaussian_composition(e) if isinstance(e, ev.PoissonSampledEvent) else None
  return e if sigma is None else ev.PoissonSampledEvent(e.sampling_prob, ev.GaussianEvent(sigma))


def _unwrap(e):
  """A sampled event that samples everything is its inner event (a leaf, not a composition)."""
  while ((isinstance(e, ev.PoissonSampledEvent) and e.sampling_prob == 1) or (
      isinstance(e, ev.SampledWithoutReplacementEvent) and e.sample_size == e.dataset_size)
         ) and not isinstance(e.event, (ev.SelfComposedEvent, ev.ComposedEvent)):
    e = e.event
  return e


def _leaf_rdp(e, orders: np.ndarray, relation: str) -> np.ndarray:
  e = _unwrap(e)
  if isinstance(e, ev.GaussianEvent):
    return rdp.gaussian_rdp(e.noise_multiplier, orders)
  if isinstance(e, ev.LaplaceEvent):
    return rdp.laplace_rdp(e.noise_multiplier, orders)
  if isinstance(e, ev.RandomizedResponseEvent) and relation == ev.REPLACE_SPECIAL:
    return _pair_rdp(*_rr_special_pair(e), orders)
  if isinstance(e, ev.RandomizedResponseEvent):
    return rdp.randomized_response_rdp(e.epsilon, orders, num_buckets=e.num_buckets)
  if isinstance(e, ev.SampledWithoutReplacementEvent) and (
      _gaussian_composition(e) is not None or isinstance(_unwrap(e.event), ev.GaussianEvent)):
    sigma = _gaussian_composition(e) or _unwrap(e.event).noise_multiplier
    return without_replacement.sampled_without_replacement_gaussian_rdp(
        e.sample_size / e.dataset_size, sigma, orders)
  if isinstance(e, ev.SampledWithoutReplacementEvent):
    return without_replacement.sampled_without_replacement_rdp(
        e.sample_size / e.dataset_size, lambda o: _leaf_rdp(e.event, o, relation), orders,
        ev.pure_epsilon(e.event))
  if isinstance(e, ev.TruncatedPoissonSampledGaussianEvent):
    return truncated_sampling.truncated_subsampled_gaussian_rdp(
        e.noise_multiplier, e.sampling_prob, e.dataset_size, e.max_batch_size, orders,
        e.neighbours)
  if isinstance(e, ev.DiscreteLaplaceEvent):
    return _pair_rdp(*_pair(e)[:2], orders)
  if isinstance(e, ev.DiscreteGaussianEvent):   # (D^2 / 2 s^2)-zCDP (Canonne et al. 2020)
    return orders * e.sensitivity ** 2 / (2.0 * e.sigma ** 2)
  if isinstance(e, ev.EpsilonDeltaEvent):
    return (composition.pure_dp_rdp(e.epsilon, orders) if e.epsilon > 0
            else np.zeros_like(orders))
  if isinstance(e, ev.ZCdpEvent):
    return e.rho * orders
  if isinstance(e, ev.ExponentialMechanismEvent):
    return bounded_range.bounded_range_rdp(e.epsilon, orders)
  if isinstance(e, ev.PermuteAndFlipEvent):
    return composition.pure_dp_rdp(e.epsilon, orders)
  if isinstance(e, ev.TreeAggregationEvent):
    return rdp.tree_aggregation_rdp(e.noise_multiplier, e.step_counts, orders)
  if isinstance(e, ev.MixtureOfGaussiansEvent):
    return mixture_pld.mixture_of_gaussians_rdp(e.noise_multiplier, e.sensitivities, e.probs,
                                                orders)
  if isinstance(e, ev.PoissonSampledEvent) and relation == ev.REPLACE_ONE:
    return mixture_pld.replace_one_subsampled_gaussian_rdp(e.event.noise_multiplier,
                                                           e.sampling_prob, orders)
  if isinstance(e, ev.OutputPairEvent):
    return _pair_rdp(np.exp(np.asarray(e.log_probs_p)), np.exp(np.asarray(e.log_probs_q)),
                     orders)
  if isinstance(e, ev.RepeatAndSelectEvent):
    inner = rdp_curve(e.event, orders, relation)[1]
    return rdp.repeat_and_select_rdp(orders, inner, mean_runs=e.mean_runs, shape=e.shape)
  return rdp.subsampled_gaussian_rdp(e.sampling_prob, e.event.noise_multiplier, orders)


def rdp_curve(event: ev.Event, orders=None, relation: str = ev.ADD_REMOVE
              ) -> tuple[np.ndarray, np.ndarray]:
  """(orders [A], the RDP curve of `event` [A]) under `relation`; orders default to
  `rdp.DEFAULT_ORDERS`. Raises UnsupportedEventError for an event RDP cannot bound."""
  o = rdp.DEFAULT_ORDERS.copy() if orders is None else _validate.check_orders(orders)
  total = np.zeros_like(o)
  for e, k in check_supported(event, "rdp", relation):
    total = total + k * _leaf_rdp(e, o, relation)
  return o, total


def _leaf_pld(e, h: float, relation: str) -> pld.PrivacyLossDistribution:
  e = _unwrap(e)
  if isinstance(e, ev.GaussianEvent):
    return pld.gaussian_pld(e.noise_multiplier, value_discretization=h)
  if isinstance(e, ev.LaplaceEvent):
    return pld.laplace_pld(e.noise_multiplier, value_discretization=h)
  if isinstance(e, ev.RandomizedResponseEvent) and relation == ev.REPLACE_SPECIAL:
    return pld.pmf_pair_pld(*_rr_special_pair(e), h)
  if isinstance(e, ev.RandomizedResponseEvent):
    return pld.randomized_response_pld(e.epsilon, e.num_buckets, value_discretization=h)
  if isinstance(e, ev.TruncatedPoissonSampledGaussianEvent):
    return truncated_sampling.truncated_subsampled_gaussian_pld(
        e.noise_multiplier, e.sampling_prob, e.dataset_size, e.max_batch_size,
        value_discretization=h, neighbours=e.neighbours)
  if isinstance(e, _PAIR_EVENTS):
    p, q, tail = _pair(e)
    return pld.pmf_pair_pld(p, q, h, tail_mass=tail)
  if isinstance(e, ev.TreeAggregationEvent):   # a Gaussian of sensitivity sqrt(depth)
    return pld.gaussian_pld(e.noise_multiplier / math.sqrt(e.depth), value_discretization=h)
  if isinstance(e, ev.SampledWithoutReplacementEvent):   # replace-one (checked)
    return _wor_pld(e, h)
  if isinstance(e, ev.OutputPairEvent):
    return pld.finite_output_pld(np.asarray(e.log_probs_p), np.asarray(e.log_probs_q), h)
  if isinstance(e, ev.MixtureOfGaussiansEvent):
    return mixture_pld.mixture_of_gaussians_pld(e.noise_multiplier, e.sensitivities, e.probs,
                                                value_discretization=h)
  inner = e.event                       # Poisson-sampled
  if isinstance(inner, ev.GaussianEvent) and relation == ev.REPLACE_ONE:
    return mixture_pld.replace_one_subsampled_gaussian_pld(
        inner.noise_multiplier, e.sampling_prob, value_discretization=h)
  if isinstance(inner, ev.GaussianEvent):
    return pld.gaussian_pld(inner.noise_multiplier, e.sampling_prob, value_discretization=h)
  if isinstance(inner, ev.LaplaceEvent):
    return pld.laplace_pld(inner.noise_multiplier, value_discretization=h,
                           sampling_prob=e.sampling_prob)
  p, q, tail = _pair(inner)
  return pld.pmf_pair_pld(p, q, h, sampling_prob=e.sampling_prob, tail_mass=tail)


def _wor_pld(e, h: float) -> pld.PrivacyLossDistribution:
  """A sample without replacement: the symmetric pair of `without_replacement` (gamma = 1:
  the inner PLD; a sampled composition of Gaussians is one Gaussian)."""
  gamma = e.sample_size / e.dataset_size
  sigma = _gaussian_composition(e)
  inner = _unwrap(e.event)
  if sigma is not None or isinstance(inner, ev.GaussianEvent):
    sigma = inner.noise_multiplier if sigma is None else sigma
    return without_replacement.sampled_without_replacement_gaussian_pld(gamma, sigma, h)
  if isinstance(inner, ev.LaplaceEvent):
    return without_replacement.sampled_without_replacement_laplace_pld(
        gamma, inner.noise_multiplier, h)
  p, q, tail = ((*_rr_pair(inner), 0.0) if isinstance(inner, ev.RandomizedResponseEvent)
                else _pair(inner))
  return without_replacement.sampled_without_replacement_pair_pld(gamma, p, q, h, tail)


@_validate.names_extreme_arguments(finite=False)
def privacy_loss_distribution(event: ev.Event, relation: str = ev.ADD_REMOVE,
                              value_discretization: float = pld.DEFAULT_VALUE_DISCRETIZATION
                              ) -> pld.PrivacyLossDistribution:
  """The composed PLD of `event` under `relation` on a grid of spacing h > 0 (Gaussian-only
  compositions stay exact). Raises UnsupportedEventError for an event PLD cannot bound."""
  h = _validate.check_positive(value_discretization, "value_discretization")
  out = None
  for e, k in check_supported(event, "pld", relation):
    d = _leaf_pld(e, h, relation)
    d = d.self_compose(k) if k > 1 else d
    out = d if out is None else out.compose(d)
  return out


def _leaf_mu_squared(e) -> float:
  """mu^2 of a leaf the gdp accountant supports (`_leaf_check` has passed)."""
  if _gaussian_composition(e) is not None:
    return _gaussian_composition(e) ** -2
  e = _unwrap(e)
  if isinstance(e, ev.TreeAggregationEvent):   # a Gaussian of sensitivity sqrt(depth)
    return e.depth / e.noise_multiplier ** 2
  return 1.0 / e.noise_multiplier ** 2


def gdp_mu(event: ev.Event, relation: str = ev.ADD_REMOVE) -> float:
  """The exact mu of a mu-GDP event (Dong, Roth & Su 2019): sqrt(sum_i k_i mu_i^2) over its
  Gaussian leaves (mu = 1 / noise_multiplier; tree aggregation sqrt(depth) / noise_multiplier),
  composed adaptively. Any other leaf raises UnsupportedEventError (use the pld accountant;
  `PrivacyLossDistribution.gdp_mu()` bounds mu for any PLD).

  Examples:
    >>> gdp_mu(ev.ComposedEvent((ev.SelfComposedEvent(ev.GaussianEvent(2.0), 12),
    ...                          ev.GaussianEvent(1.0))))    # sqrt(12 / 4 + 1)
    2.0
  """
  total = 0.0
  for e, k in check_supported(event, "gdp", relation):
    total += k * _leaf_mu_squared(e)
  return math.sqrt(total)


@_validate.names_extreme_arguments(finite=False)
def epsilon(event: ev.Event, delta: float, accountant: str = "pld",
            relation: str = ev.ADD_REMOVE, *, orders=None,
            value_discretization: Optional[float] = None) -> float:
  """eps (an upper bound) of `event` at delta in (0, 1) by `accountant` ("rdp", "pld", or
  "gdp": exact, Gaussian events only, `gdp_mu`).

  orders apply to rdp, value_discretization (default 1e-4) to pld. Left at None, DP-SGD's
  event (`_dpsgd_steps`: T Poisson-sampled Gaussian steps, q < 1, add/remove or
  replace-special) also goes through the front door's `pld_dpsgd.dpsgd_epsilon` (adaptive
  grid, ending at h <= 1e-4 where its error is below that grid's), and the smaller of the
  two upper bounds is returned; any other event, or a value_discretization given, composes
  on the fixed grid h only.

  Examples:
    >>> e = ev.ComposedEvent((ev.EpsilonDeltaEvent(1.0, 0.1), ev.EpsilonDeltaEvent(2.0, 0.2)))
    >>> round(delta(e, 3.0), 6)   # exact optimal composition: 1 - 0.9 * 0.8
    0.28
  """
  d = _validate.check_delta(delta)
  _validate.check_choice(accountant, ACCOUNTANTS, "accountant")
  if accountant == "rdp":
    o, r = rdp_curve(event, orders, relation)
    return rdp.rdp_to_epsilon(o, r, d)[0]
  if accountant == "gdp":
    return gdp.gaussian_epsilon(d, gdp_mu(event, relation))
  h = pld.DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else value_discretization
  steps = _dpsgd_steps(event, relation) if value_discretization is None else None
  if steps is None:
    return float(privacy_loss_distribution(event, relation, h).epsilon(d))
  adaptive = float(pld_dpsgd.dpsgd_epsilon(*steps, d))
  try:   # both are upper bounds: the smaller is one, and never above the fixed grid's
    return min(adaptive, float(privacy_loss_distribution(event, relation, h).epsilon(d)))
  except pld_grid.GridTooLarge:
    return adaptive


def _dpsgd_steps(event: ev.Event, relation: str) -> Optional[tuple[float, float, int]]:
  """(sigma, q, T) when `event` is T steps of DP-SGD, else None: every flattened leaf the
  same PoissonSampledEvent(q < 1, GaussianEvent(sigma)) (counts summed: composition is
  commutative), under add/remove or replace-special (accounted as add/remove for this leaf, as
  `_leaf_pld` does). Exactly the event `pld_dpsgd.dpsgd_epsilon` bounds; q = 1 (exact on the
  grid) and replace-one (the +-C pair) stay with `privacy_loss_distribution`."""
  if ev.check_relation(relation) == ev.REPLACE_ONE:
    return None
  leaves = [(_one_gaussian(e), k) for e, k in ev.flatten(event)]
  first = leaves[0][0]
  if not (isinstance(first, ev.PoissonSampledEvent) and first.sampling_prob < 1
          and type(first.event) is ev.GaussianEvent
          and all(e == first for e, _ in leaves)):
    return None
  return first.event.noise_multiplier, first.sampling_prob, sum(k for _, k in leaves)


def _to_dp_accounting(e, dpa):
  """dp_accounting's DpEvent for `e` where every leaf has a counterpart there (Gaussian,
  Laplace, discrete Laplace, their Poisson samples, mixture of Gaussians, truncated
  Poisson-sampled Gaussian over "removal" pairs, randomized response), composed alike; else
  None."""
  if isinstance(e, ev.SelfComposedEvent):
    inner = _to_dp_accounting(e.event, dpa)
    return None if inner is None else dpa.SelfComposedDpEvent(inner, e.count)
  if isinstance(e, ev.ComposedEvent):
    parts = [_to_dp_accounting(x, dpa) for x in e.events]
    return None if any(x is None for x in parts) else dpa.ComposedDpEvent(parts)
  if isinstance(e, ev.PoissonSampledEvent):
    inner = _to_dp_accounting(e.event, dpa)
    return None if inner is None else dpa.PoissonSampledDpEvent(e.sampling_prob, inner)
  if isinstance(e, ev.GaussianEvent):
    return dpa.GaussianDpEvent(e.noise_multiplier)
  if isinstance(e, ev.LaplaceEvent):
    return dpa.LaplaceDpEvent(e.noise_multiplier)
  if isinstance(e, ev.DiscreteLaplaceEvent):
    return dpa.DiscreteLaplaceDpEvent(e.noise_parameter, e.sensitivity)
  if isinstance(e, ev.MixtureOfGaussiansEvent):
    return dpa.dp_event.MixtureOfGaussiansDpEvent(e.noise_multiplier, e.sensitivities, e.probs)
  if isinstance(e, ev.TruncatedPoissonSampledGaussianEvent):   # its pairs: "removal"
    if e.neighbours != "removal":
      return None
    return dpa.dp_event.TruncatedSubsampledGaussianDpEvent(
        e.dataset_size, e.sampling_prob, e.max_batch_size, e.noise_multiplier)
  if isinstance(e, ev.RandomizedResponseEvent):   # noise k / (e^eps + k - 1): resampled
    k, r = e.num_buckets, math.exp(-e.epsilon)
    return dpa.RandomizedResponseDpEvent(k * r / (1.0 + (k - 1) * r), k)
  return None


def _dp_accounting_epsilon(event: ev.Event, delta: float, relation: str, h: float
                           ) -> Optional[float]:
  """dp_accounting's PLD eps of `event` at its grid h (optional; None where it is not
  installed, has no counterpart of the event, refuses it, or gives no finite answer)."""
  try:
    import dp_accounting as dpa  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  theirs = _to_dp_accounting(event, dpa)
  if theirs is None:
    return None
  rel = {ev.ADD_REMOVE: dpa.NeighboringRelation.ADD_OR_REMOVE_ONE,
         ev.REPLACE_ONE: dpa.NeighboringRelation.REPLACE_ONE,
         ev.REPLACE_SPECIAL: dpa.NeighboringRelation.REPLACE_SPECIAL}[relation]
  try:
    acct = dpa.pld.PLDAccountant(rel, h)
    if not acct.supports(theirs):
      return None
    acct.compose(theirs)
    ref = float(acct.get_epsilon(delta))
  except (ValueError, ArithmeticError):
    return None
  return ref if math.isfinite(ref) else None


@_validate.names_extreme_arguments(finite=False)
def epsilon_never_looser(event: ev.Event, delta: float, relation: str = ev.ADD_REMOVE, *,
                         value_discretization: Optional[float] = None) -> pld.CheckedEpsilon:
  """The pld accountant's eps of `event`, taking dp_accounting's answer only where certified.

  `ours` is `epsilon(event, delta, "pld", relation, value_discretization=)` (DP-SGD at the
  default grid: also the front door's adaptive eps); `reference` dp_accounting's
  PLDAccountant on the same event, relation and grid h (optional; events whose leaves it
  lacks, or whose eps / h passes pld_grid.MAX_POINTS, get none). At the default grid the two
  agree to ~1e-11 relative, the last digits set by float64 rounding: the FFT power's (ours:
  ~1e-15 in delta, `PrivacyLossDistribution.rounding_noise`) and dp_accounting's own
  inversion of delta (a sequential float sum: on a mixture of Gaussians x20 its eps has
  delta 1 + 6e-10 times the target on its own pmf). When the reference is below ours, our
  PLD is rebuilt on grids 2x then 4x finer: a pessimistic PLD whose delta at the reference,
  plus 10x its rounding estimate, is at most delta proves (reference, delta) for the event
  itself, and then the reference is taken ("dp_accounting"); else the smaller of ours and
  the finer eps ("dpjax_finer"; "dpjax" when ours stays). The value is thus always our
  upper bound or one our finer grid certifies, whatever dp_accounting computed.

  Examples:
    >>> e = ev.SelfComposedEvent(ev.PoissonSampledEvent(0.01, ev.LaplaceEvent(3.0)), 500)
    >>> r = epsilon_never_looser(e, 1e-5)
    >>> r.value <= r.ours
    True
  """
  d = _validate.check_delta(delta)
  relation = ev.check_relation(relation)
  h = pld.DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else (
      _validate.check_positive(value_discretization, "value_discretization"))
  ours = epsilon(event, d, "pld", relation, value_discretization=value_discretization)
  if not ours / h <= pld_grid.MAX_POINTS:   # dp_accounting's grid spans eps at spacing h
    return pld.CheckedEpsilon(ours, ours, None, "dpjax")
  ref = _dp_accounting_epsilon(event, d, relation, h)
  if ref is None or not ref < ours:
    return pld.CheckedEpsilon(ours, ours, ref, "dpjax")
  best = ours
  for factor in (2, 4):
    try:
      fine = privacy_loss_distribution(event, relation, h / factor)
    except pld_grid.GridTooLarge:
      break
    if fine.delta(ref) + 10.0 * fine.rounding_noise(ref) <= d:
      return pld.CheckedEpsilon(ref, ours, ref, "dp_accounting")
    best = min(best, fine.epsilon(d))
  return pld.CheckedEpsilon(best, ours, ref, "dpjax_finer" if best < ours else "dpjax")


@_validate.names_extreme_arguments(finite=False)
def delta(event: ev.Event, epsilon: float, accountant: str = "pld",
          relation: str = ev.ADD_REMOVE, *, orders=None,
          value_discretization: Optional[float] = None) -> float:
  """delta(eps) (an upper bound) of `event` at epsilon >= 0; arguments as in `epsilon`."""
  e = _validate.check_epsilon(epsilon, allow_zero=True)
  _validate.check_choice(accountant, ACCOUNTANTS, "accountant")
  if accountant == "rdp":
    o, r = rdp_curve(event, orders, relation)
    return rdp.rdp_to_delta(o, r, e)[0]
  if accountant == "gdp":
    return float(gdp.gaussian_delta(e, gdp_mu(event, relation)))
  h = pld.DEFAULT_VALUE_DISCRETIZATION if value_discretization is None else value_discretization
  return float(privacy_loss_distribution(event, relation, h).delta(e))


__all__ = ["ACCOUNTANTS", "SUPPORTED", "check_supported", "delta", "epsilon",
           "epsilon_never_looser", "gdp_mu", "privacy_loss_distribution", "rdp_curve"]
