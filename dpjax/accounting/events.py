"""Privacy events: immutable descriptions of what a pipeline releases, composed freely.

An event says which mechanism touched the data and how; an accountant
(`event_accounting`) turns it into eps(delta) or delta(eps) for a neighbouring relation
it names explicitly:

* `ADD_REMOVE`: datasets differ by adding or removing one record;
* `REPLACE_ONE`: datasets of equal size differ in one record.

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

from dpjax import _validate

ADD_REMOVE = "add_remove"
REPLACE_ONE = "replace_one"
RELATIONS = (ADD_REMOVE, REPLACE_ONE)


class UnsupportedEventError(ValueError):
  """An accountant cannot account for this event (under this relation) with a proven bound."""

  def __init__(self, event, accountant: str, reason: str):
    self.event = event
    super().__init__(f"the {accountant} accountant does not support {type(event).__name__}"
                     f" ({event!r}): {reason}")


class Event:
  """Base class of every privacy event (immutable)."""


def _check_event(e, name: str) -> "Event":
  if not isinstance(e, Event):
    raise TypeError(f"{name} must be an Event, got {type(e).__name__} {e!r:.80}")
  return e


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
  guarantee (the record's value changes). epsilon > 0 finite, num_buckets k >= 2."""
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
            event=_check_event(self.event, "event"))


@dataclasses.dataclass(frozen=True)
class SampledWithoutReplacementEvent(Event):
  """Runs `event` on sample_size records drawn uniformly without replacement from
  dataset_size (integers, 1 <= sample_size <= dataset_size)."""
  dataset_size: int
  sample_size: int
  event: Event

  def __post_init__(self):
    n = _validate.check_int(self.dataset_size, "dataset_size")
    m = _validate.check_int(self.sample_size, "sample_size")
    if m > n:
      raise ValueError(f"sample_size must be <= dataset_size={n}, got {m}")
    _freeze(self, dataset_size=n, sample_size=m, event=_check_event(self.event, "event"))


@dataclasses.dataclass(frozen=True)
class SelfComposedEvent(Event):
  """`count` (an integer >= 1) adaptive runs of `event` on the same data."""
  event: Event
  count: int

  def __post_init__(self):
    _freeze(self, event=_check_event(self.event, "event"),
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
    _freeze(self, events=tuple(_check_event(e, f"events[{i}]")
                               for i, e in enumerate(self.events)))


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
  _check_event(event, "event")
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
  discrete Laplace, (eps, 0)), else math.inf."""
  _check_event(event, "event")
  if isinstance(event, LaplaceEvent):
    return 1.0 / event.noise_multiplier
  if isinstance(event, RandomizedResponseEvent):
    return event.epsilon
  if isinstance(event, DiscreteLaplaceEvent):
    return event.noise_parameter * event.sensitivity
  if isinstance(event, EpsilonDeltaEvent) and event.delta == 0:
    return event.epsilon
  return math.inf


__all__ = [
    "ADD_REMOVE", "ComposedEvent", "DiscreteGaussianEvent", "DiscreteLaplaceEvent",
    "EpsilonDeltaEvent", "Event", "GaussianEvent", "LaplaceEvent", "PoissonSampledEvent",
    "RELATIONS", "REPLACE_ONE", "RandomizedResponseEvent", "SampledWithoutReplacementEvent",
    "SelfComposedEvent", "UnsupportedEventError", "ZCdpEvent", "check_relation", "flatten",
    "pure_epsilon",
]
