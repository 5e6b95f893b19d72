"""Privacy events: immutable descriptions of what a pipeline releases, composed freely.

An event says which mechanism touched the data and how; an accountant
(`event_accounting`) turns it into eps(delta) or delta(eps) for a neighbouring relation
it names explicitly:

* `ADD_REMOVE`: datasets differ by adding or removing one record;
* `REPLACE_ONE`: datasets of equal size differ in one record;
* `REPLACE_SPECIAL`: one record is replaced by a fixed special record (dp_accounting's
  REPLACE_SPECIAL). Randomized response answers the special record uniformly over its k
  buckets; every other event treats the special record as contributing nothing (a zero row
  of a clipped sum, an empty leaf), so it is accounted as under add/remove.

A mechanism's noise parameter is relative to the query's sensitivity under the relation
the accountant is asked about (a clipped sum has L2 sensitivity C for add/remove and 2C
for replace-one). Every constructor validates its inputs and the dataclasses are frozen
(hashable), so an event can be built once, stored and composed:

    step = PoissonSampledEvent(0.01, GaussianEvent(1.1))
    run = ComposedEvent((SelfComposedEvent(step, 10_000), LaplaceEvent(2.0)))

Shapes: none (scalars); events nest. References: the data / algorithm split of
dp_accounting's `DpEvent` (Google, 2021); zCDP: Bun & Steinke 2016; discrete Gaussian:
Canonne, Kamath & Steinke 2020.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax import _validate
from dpjax.accounting import mixture_pld

ADD_REMOVE = "add_remove"
REPLACE_ONE = "replace_one"
REPLACE_SPECIAL = "replace_special"
RELATIONS = (ADD_REMOVE, REPLACE_ONE, REPLACE_SPECIAL)


class UnsupportedEventError(ValueError):
  """An accountant cannot account for this event (under this relation) with a proven bound."""

  def __init__(self, event, accountant: str, reason: str):
    self.event = event
    super().__init__(f"the {accountant} accountant does not support {type(event).__name__}"
                     f" ({event!r}): {reason}")


class Event:
  """Base class of every privacy event (immutable)."""


def _freeze(obj, **values) -> None:
  for k, v in values.items():
    object.__setattr__(obj, k, v)


@dataclasses.dataclass(frozen=True)
class GaussianEvent(Event):
  """Adds N(0, (noise_multiplier * sensitivity)^2) to each coordinate of a query of L2
  sensitivity `sensitivity` under the relation; noise_multiplier > 0 finite."""
  noise_multiplier: float

  def __post_init__(self):
    _freeze(self, noise_multiplier=_validate.check_positive(self.noise_multiplier,
                                                            "noise_multiplier"))


@dataclasses.dataclass(frozen=True)
class LaplaceEvent(Event):
  """Adds Lap(b) noise, b = noise_multiplier * L1 sensitivity, to a query; pure
  (1 / noise_multiplier)-DP. noise_multiplier > 0 finite."""
  noise_multiplier: float

  def __post_init__(self):
    _freeze(self, noise_multiplier=_validate.check_positive(self.noise_multiplier,
                                                            "noise_multiplier"))


@dataclasses.dataclass(frozen=True)
class RandomizedResponseEvent(Event):
  """k-ary randomized response on one record's value: the true value with probability
  e^eps / (e^eps + k - 1), each other value with 1 / (e^eps + k - 1). A replace-one
  guarantee (the record's value changes) or replace-special (the special value's answer is
  uniform over the k buckets). epsilon > 0 finite, num_buckets k >= 2."""
  epsilon: float
  num_buckets: int = 2

  def __post_init__(self):
    _freeze(self, epsilon=_validate.check_epsilon(self.epsilon),
            num_buckets=_validate.check_int(self.num_buckets, "num_buckets", minimum=2))


@dataclasses.dataclass(frozen=True)
class DiscreteGaussianEvent(Event):
  """Adds integer noise X with P(X = x) proportional to exp(-x^2 / (2 sigma^2)) to an
  integer query of sensitivity `sensitivity` (an integer >= 1); sigma > 0 finite."""
  sigma: float
  sensitivity: int = 1

  def __post_init__(self):
    _freeze(self, sigma=_validate.check_positive(self.sigma, "sigma"),
            sensitivity=_validate.check_int(self.sensitivity, "sensitivity",
                                            maximum=1_000_000))


@dataclasses.dataclass(frozen=True)
class DiscreteLaplaceEvent(Event):
  """Adds integer noise X with P(X = x) proportional to exp(-a |x|), a =
  noise_parameter > 0, to an integer query of sensitivity `sensitivity` (integer >= 1);
  pure (a * sensitivity)-DP."""
  noise_parameter: float
  sensitivity: int = 1

  def __post_init__(self):
    _freeze(self, noise_parameter=_validate.check_positive(self.noise_parameter,
                                                           "noise_parameter"),
            sensitivity=_validate.check_int(self.sensitivity, "sensitivity",
                                            maximum=1_000_000))


@dataclasses.dataclass(frozen=True)
class EpsilonDeltaEvent(Event):
  """Any (epsilon, delta)-DP mechanism, of which nothing else is known. epsilon >= 0
  finite, delta in [0, 1)."""
  epsilon: float
  delta: float = 0.0

  def __post_init__(self):
    _freeze(self, epsilon=_validate.check_epsilon(self.epsilon, allow_zero=True),
            delta=_validate.check_delta(self.delta, allow_zero=True))


@dataclasses.dataclass(frozen=True)
class ZCdpEvent(Event):
  """Any rho-zCDP mechanism: D_alpha(M(D) || M(D')) <= rho * alpha for all alpha > 1.
  rho > 0 finite."""
  rho: float

  def __post_init__(self):
    _freeze(self, rho=_validate.check_positive(self.rho, "rho"))


@dataclasses.dataclass(frozen=True)
class PoissonSampledEvent(Event):
  """Runs `event` on a Poisson sample: each record independently with probability
  sampling_prob in (0, 1]."""
  sampling_prob: float
  event: Event

  def __post_init__(self):
    _freeze(self, sampling_prob=_validate.check_sampling_prob(self.sampling_prob),
            event=_validate.check_instance(self.event, Event, "event"))


@dataclasses.dataclass(frozen=True)
class SampledWithoutReplacementEvent(Event):
  """Runs `event` on sample_size records drawn uniformly without replacement from
  dataset_size (integers, 1 <= sample_size <= dataset_size). Amplification is a replace-one
  guarantee (datasets of equal size; `without_replacement`); `event`'s noise is relative to
  its replace-one sensitivity."""
  dataset_size: int
  sample_size: int
  event: Event

  def __post_init__(self):
    n = _validate.check_int(self.dataset_size, "dataset_size")
    m = _validate.check_int(self.sample_size, "sample_size")
    if m > n:
      raise ValueError(f"sample_size must be <= dataset_size={n}, got {m}")
    _freeze(self, dataset_size=n, sample_size=m,
            event=_validate.check_instance(self.event, Event, "event"))


@dataclasses.dataclass(frozen=True)
class TruncatedPoissonSampledGaussianEvent(Event):
  """A Poisson sample (each record with probability sampling_prob in (0, 1]) truncated to at
  most max_batch_size >= 1 records (a uniformly random subset of that size is kept when
  more are drawn), then the sum of the kept records' contributions (L2 norm <= C) plus
  N(0, (noise_multiplier * C)^2) per coordinate. Add/remove (or replace-special) neighbours,
  for dataset_size = n >= 1 and `neighbours`: "both" (default) covers the dataset of n records
  and both of its neighbours (n - 1 and n + 1 records); "removal" the pairs whose larger
  dataset has n records (dp_accounting's TruncatedSubsampledGaussianDpEvent). See
  `truncated_sampling`."""
  noise_multiplier: float
  sampling_prob: float
  dataset_size: int
  max_batch_size: int
  neighbours: str = "both"

  def __post_init__(self):
    _freeze(self, noise_multiplier=_validate.check_positive(self.noise_multiplier,
                                                            "noise_multiplier"),
            sampling_prob=_validate.check_sampling_prob(self.sampling_prob),
            dataset_size=_validate.check_int(self.dataset_size, "dataset_size",
                                             maximum=2 ** 53),
            max_batch_size=_validate.check_int(self.max_batch_size, "max_batch_size",
                                               maximum=2 ** 53),
            neighbours=_validate.check_choice(self.neighbours, ("both", "removal"),
                                              "neighbours"))


@dataclasses.dataclass(frozen=True)
class SelfComposedEvent(Event):
  """`count` (an integer >= 1) adaptive runs of `event` on the same data."""
  event: Event
  count: int

  def __post_init__(self):
    _freeze(self, event=_validate.check_instance(self.event, Event, "event"),
            count=_validate.check_int(self.count, "count"))


@dataclasses.dataclass(frozen=True)
class ComposedEvent(Event):
  """Adaptive runs of each event in `events` (a non-empty tuple or list) on the same data."""
  events: tuple

  def __post_init__(self):
    if isinstance(self.events, Event) or not isinstance(self.events, (tuple, list)):
      raise TypeError(f"events must be a tuple of Events, got {type(self.events).__name__}")
    if not self.events:
      raise ValueError("events must hold at least one Event")
    _freeze(self, events=tuple(_validate.check_instance(e, Event, f"events[{i}]")
                               for i, e in enumerate(self.events)))


@dataclasses.dataclass(frozen=True)
class ExponentialMechanismEvent(Event):
  """The exponential mechanism, P(r) proportional to exp(eps u(D, r) / (2 Delta_u)) (or
  exp(eps u / Delta_u) for a utility monotone in the data): eps-DP and eps-bounded-range
  (Durfee & Rogers 2019). epsilon > 0 finite."""
  epsilon: float

  def __post_init__(self):
    _freeze(self, epsilon=_validate.check_epsilon(self.epsilon))


@dataclasses.dataclass(frozen=True)
class PermuteAndFlipEvent(Event):
  """Permute-and-flip selection (McKenna & Sheldon 2020) with parameter eps: candidates in
  random order, each kept with probability exp(eps (u_r - u_max) / (2 Delta_u)); eps-DP
  (accounted as pure eps-DP only). epsilon > 0 finite."""
  epsilon: float

  def __post_init__(self):
    _freeze(self, epsilon=_validate.check_epsilon(self.epsilon))


@dataclasses.dataclass(frozen=True)
class RepeatAndSelectEvent(Event):
  """Runs `event` K times on the same data and releases the best run (Papernot & Steinke
  2022): K truncated negative binomial with shape eta >= 0 (0 logarithmic, 1 geometric)
  or Poisson (shape = math.inf or "poisson"), E[K] = mean_runs >= 1. Each run's whole
  output, candidate and score, must be covered by `event`."""
  event: Event
  mean_runs: float
  shape: float

  def __post_init__(self):
    shape = self.shape
    if isinstance(shape, str) and shape == "poisson":
      shape = math.inf
    _freeze(self, event=_validate.check_instance(self.event, Event, "event"),
            mean_runs=_validate.check_range(self.mean_runs, "mean_runs", 1.0),
            shape=_validate.check_range(shape, "shape", 0.0, allow_inf=True))


@dataclasses.dataclass(frozen=True)
class MixtureOfGaussiansEvent(Event):
  """N(0, (noise_multiplier)^2) noise on a query whose change under one record is a
  random shift, sensitivities[i] >= 0 along one direction with probability probs[i]
  (finite law; capped user contributions, balls-in-bins). Add/remove only; the pair is
  sum_i p_i N(c_i, sigma^2) against N(0, sigma^2). Tuples; some c_i > 0; probs sum to 1."""
  noise_multiplier: float
  sensitivities: tuple
  probs: tuple

  def __post_init__(self):
    c = _validate.check_array(self.sensitivities, "sensitivities", ndim=1, low=0.0, min_size=1)
    p = _validate.check_array(self.probs, "probs", ndim=1, low=0.0, high=1.0, min_size=1)
    mixture_pld.check_mixture(c, p)
    _freeze(self, noise_multiplier=_validate.check_positive(self.noise_multiplier,
                                                            "noise_multiplier"),
            sensitivities=tuple(c.tolist()), probs=tuple(p.tolist()))


@dataclasses.dataclass(frozen=True)
class TreeAggregationEvent(Event):
  """Tree aggregation of a Gaussian-noised stream (DP-FTRL; Kairouz et al. 2021,
  https://arxiv.org/abs/2103.00039, App. D): one or more trees of step_counts[j] >= 1
  leaves each, every node noised with N(0, (noise_multiplier * sensitivity)^2), each
  record in at most one leaf across ALL the trees (one epoch). A record then touches at
  most depth = ceil(log2(max step_counts + 1)) nodes: a Gaussian of noise_multiplier /
  sqrt(depth). Several epochs (a record once per epoch): SelfComposedEvent. Streams keep
  their length, so "add/remove" here means a record's leaf set to zero (dp_accounting's
  REPLACE_SPECIAL); replace-one takes the noise relative to twice the clip norm."""
  noise_multiplier: float
  step_counts: tuple

  def __post_init__(self):
    counts = self.step_counts
    counts = (counts,) if isinstance(counts, (int, np.integer)) else counts
    _freeze(self, noise_multiplier=_validate.check_positive(self.noise_multiplier,
                                                            "noise_multiplier"),
            step_counts=_validate.check_sizes(counts, "step_counts"))
    if not self.step_counts:
      raise ValueError("step_counts must hold at least one tree size")

  @property
  def depth(self) -> int:
    """Nodes of one tree touched by one leaf: ceil(log2(max step_counts + 1))."""
    return math.ceil(math.log2(max(self.step_counts) + 1))


@dataclasses.dataclass(frozen=True)
class OutputPairEvent(Event):
  """A mechanism with K outputs whose laws on the two neighbouring datasets (in that order)
  are exp(log_probs_p) and exp(log_probs_q): tuples of K log-probabilities <= 0 (finite),
  each summing to 1 within 1e-6. Exact for one given pair of datasets (a per-instance
  analysis, e.g. PATE's outcome laws on two vote histograms), whatever the relation."""
  log_probs_p: tuple
  log_probs_q: tuple

  def __post_init__(self):
    a = _validate.check_array(self.log_probs_p, "log_probs_p", ndim=1, min_size=1, high=0.0)
    b = _validate.check_array(self.log_probs_q, "log_probs_q", shape=a.shape, high=0.0)
    for arr, name in ((a, "log_probs_p"), (b, "log_probs_q")):
      total = float(np.exp(arr).sum())
      if abs(total - 1.0) > 1e-6:
        raise ValueError(f"{name} must be log-probabilities summing to 1 (within 1e-6), "
                         f"got a total of {total:.9g}")
    _freeze(self, log_probs_p=tuple(a.tolist()), log_probs_q=tuple(b.tolist()))


def dpsgd_event(noise_multiplier: float, sampling_prob: float, num_steps: int
                ) -> SelfComposedEvent:
  """num_steps (integer >= 1) steps of DP-SGD: each a Poisson sample at sampling_prob, the
  clipped sum plus N(0, (noise_multiplier C)^2) per coordinate (add/remove).

  Examples:
    >>> dpsgd_event(1.0, 0.01, 100).count
    100
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  return SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(sigma)), t)


def check_relation(relation) -> str:
  """relation itself if it is one of RELATIONS (ValueError naming `relation` otherwise)."""
  return _validate.check_choice(relation, RELATIONS, "relation")


def flatten(event: Event) -> list[tuple[Event, int]]:
  """[(leaf event, count)] of a composition tree, counts multiplied through
  SelfComposedEvent; sampled events are leaves (their inner event is accounted with them).

  Examples:
    >>> flatten(SelfComposedEvent(ComposedEvent((GaussianEvent(1.0), LaplaceEvent(2.0))), 3))
    [(GaussianEvent(noise_multiplier=1.0), 3), (LaplaceEvent(noise_multiplier=2.0), 3)]
  """
  _validate.check_instance(event, Event, "event")
  out = []

  def walk(e, k):
    if isinstance(e, SelfComposedEvent):
      walk(e.event, k * e.count)
    elif isinstance(e, ComposedEvent):
      for sub in e.events:
        walk(sub, k)
    else:
      out.append((e, k))

  walk(event, 1)
  return out


def pure_epsilon(event: Event) -> float:
  """The pure-DP eps of a leaf event when it has one (Laplace, randomized response,
  discrete Laplace, (eps, 0), exponential mechanism, permute-and-flip), else math.inf."""
  _validate.check_instance(event, Event, "event")
  if isinstance(event, LaplaceEvent):
    return 1.0 / event.noise_multiplier
  if isinstance(event, RandomizedResponseEvent):
    return event.epsilon
  if isinstance(event, DiscreteLaplaceEvent):
    return event.noise_parameter * event.sensitivity
  if isinstance(event, EpsilonDeltaEvent) and event.delta == 0:
    return event.epsilon
  if isinstance(event, (ExponentialMechanismEvent, PermuteAndFlipEvent)):
    return event.epsilon
  return math.inf


__all__ = [
    "ADD_REMOVE", "ComposedEvent", "DiscreteGaussianEvent", "DiscreteLaplaceEvent",
    "EpsilonDeltaEvent", "Event", "ExponentialMechanismEvent", "GaussianEvent",
    "LaplaceEvent", "MixtureOfGaussiansEvent", "OutputPairEvent", "PermuteAndFlipEvent",
    "PoissonSampledEvent",
    "RELATIONS", "REPLACE_ONE", "REPLACE_SPECIAL", "RandomizedResponseEvent",
    "RepeatAndSelectEvent", "SampledWithoutReplacementEvent", "SelfComposedEvent",
    "TreeAggregationEvent", "TruncatedPoissonSampledGaussianEvent",
    "UnsupportedEventError", "ZCdpEvent", "check_relation", "dpsgd_event", "flatten",
    "pure_epsilon",
]
