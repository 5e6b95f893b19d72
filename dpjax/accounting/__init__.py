"""Privacy accounting: composition, RDP, PLD and GDP, behind one front door.

`dpsgd_epsilon` (eps of T Poisson-sampled DP-SGD steps, add/remove-one) and
`calibrate_noise` (the smallest sigma meeting a target) take accountant "rdp" (Balle et al.
2020 conversion) or "pld" (usually tighter). `Accountant` composes heterogeneous events.
Submodules: `composition`, `rdp`, `pld`, `gdp`, `noise_support`, `events` /
`event_accounting`, `subsampled_rdp`, `bounded_range`, `mixture_pld`. Host float64.

Examples:
  >>> round(dpsgd_epsilon(1.0, 0.01, 10_000, 1e-5), 2)
  6.71
  >>> acct = Accountant().compose_subsampled_gaussian(1.0, 0.01, count=10_000)
  >>> round(acct.epsilon(1e-5), 2)
  6.71
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

from dpjax import _validate
from dpjax.accounting import composition  # noqa: F401  (re-exported submodule)
from dpjax.accounting.bisection import smallest_noise  # noqa: F401  (re-exported)
from dpjax.accounting import events  # noqa: F401  (re-exported submodule)
from dpjax.accounting import gdp
from dpjax.accounting import noise_support  # noqa: F401  (re-exported submodule)
from dpjax.accounting import rdp
from dpjax.accounting.noise_support import (  # noqa: F401  (re-exported helpers)
    max_epsilon_for_sampler_delta, sampler_delta)
from dpjax.accounting.gdp import (  # noqa: F401  (re-exported helpers)
    compose_mu, dpsgd_clt_epsilon, dpsgd_clt_mu, gaussian_delta, gaussian_epsilon,
    mu_for_epsilon)

_ACCOUNTANTS = ("rdp", "pld")
_RDP_METHODS = ("balle2020", "classic")
# calibrate_noise searches noise multipliers in this range.
NOISE_MULTIPLIER_RANGE = (0.1, 1e6)
# calibrate_noise's rtol (a smaller one cannot be met in float64).
_RTOL_RANGE = (1e-12, 1.0)


def _check_delta(delta, dataset_size: Optional[int] = None) -> float:
  """delta in (0, 1); warns when it is not small next to 1 / dataset_size."""
  d = _validate.check_delta(delta)
  if dataset_size is not None:
    n = _validate.check_int(dataset_size, "dataset_size")
    if d >= 1.0 / n:
      warnings.warn(
          f"delta = {d:g} >= 1/dataset_size = {1.0 / n:g}: a mechanism that publishes one "
          "random record in full satisfies this (eps, delta); use delta << 1/n.",
          UserWarning, stacklevel=3)
  return d


def _event_rdp(event, orders) -> tuple[np.ndarray, np.ndarray]:
  """(orders [A], RDP curve [A]) of an `events.Event` (add/remove), orders default
  rdp.DEFAULT_ORDERS."""
  from dpjax.accounting import event_accounting  # pylint: disable=import-outside-toplevel
  return event_accounting.rdp_curve(event, orders)


def _pld_module():
  """Imports the PLD accountant lazily (it is optional for the RDP path)."""
  from dpjax.accounting import pld  # pylint: disable=import-outside-toplevel
  return pld


@_validate.names_extreme_arguments
def dpsgd_epsilon(noise_multiplier: float, sampling_prob: float, num_steps: int,
                  delta: float, accountant: str = "rdp", *,
                  dataset_size: Optional[int] = None,
                  rdp_method: str = "balle2020", orders=None) -> float:
  """eps spent by T steps of DP-SGD with Poisson sampling (rate q, noise N(0, sigma^2 C^2 I)
  on the clipped sum; add/remove-one), at `delta`. Shuffling, fixed-size batches or tuning
  on private data are NOT modelled. dataset_size n warns when delta >= 1/n; rdp_method and
  orders apply to rdp only.

  Examples:
    >>> round(dpsgd_epsilon(1.5, 0.04, 2250, 1e-5), 6)   # Opacus's test setting
    7.329111
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  steps = _validate.check_int(num_steps, "num_steps")
  d = _check_delta(delta, dataset_size)
  _validate.check_choice(accountant, _ACCOUNTANTS, "accountant")
  _validate.check_choice(rdp_method, _RDP_METHODS, "rdp_method")
  if accountant == "pld":
    return float(_pld_module().dpsgd_epsilon(sigma, q, steps, d))
  o, r = _event_rdp(events.dpsgd_event(sigma, q, steps), orders)
  return rdp.rdp_to_epsilon(o, r, d, method=rdp_method)[0]


@_validate.names_extreme_arguments
def tuned_dpsgd_epsilon(noise_multiplier: float, sampling_prob: float, num_steps: int,
                        delta: float, *, mean_runs: float, shape, accountant: str = "rdp",
                        score_noise_multiplier: Optional[float] = None,
                        rdp_method: str = "balle2020", orders=None) -> float:
  """eps of private hyperparameter tuning by repeat-and-select over DP-SGD runs.

  Papernot & Steinke, ICLR 2022: K runs (truncated negative binomial with shape eta and
  E[K] = mean_runs, or Poisson for shape "poisson" / inf), best one released
  (`rdp.repeat_and_select_rdp`). A score released with `score_noise_multiplier` s adds
  alpha / (2 s^2) per run; without it the score must use public data. Only accountant="rdp"
  (the theorems bound Renyi divergences); "pld" raises ValueError.

  Examples:
    >>> one = dpsgd_epsilon(1.0, 0.01, 1_000, 1e-5)
    >>> tuned = tuned_dpsgd_epsilon(1.0, 0.01, 1_000, 1e-5, mean_runs=10, shape=1)
    >>> round(one, 2), round(tuned, 2)
    (2.1, 4.1)
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  steps = _validate.check_int(num_steps, "num_steps")
  d = _check_delta(delta)
  mu = _validate.check_range(mean_runs, "mean_runs", 1.0)
  eta = rdp.repeat_shape(shape)
  _validate.check_choice(accountant, _ACCOUNTANTS, "accountant")
  _validate.check_choice(rdp_method, _RDP_METHODS, "rdp_method")
  if accountant != "rdp":
    raise ValueError(
        f"accountant must be 'rdp' for repeat-and-select, got {accountant!r}: the "
        "Papernot-Steinke bounds are stated for Renyi DP, and no PLD version here is "
        "proven to be an upper bound")
  run = events.dpsgd_event(sigma, q, steps)
  if score_noise_multiplier is not None:
    s = _validate.check_positive(score_noise_multiplier, "score_noise_multiplier")
    run = events.ComposedEvent((run, events.GaussianEvent(s)))
  o, out = _event_rdp(events.RepeatAndSelectEvent(run, mu, eta), orders)
  return rdp.rdp_to_epsilon(o, out, d, method=rdp_method)[0]


@_validate.names_extreme_arguments
def calibrate_noise(target_epsilon: float, sampling_prob: float, num_steps: int,
                    delta: float, accountant: str = "rdp", *,
                    dataset_size: Optional[int] = None, rtol: float = 1e-4,
                    rdp_method: str = "balle2020") -> float:
  """Smallest noise multiplier with dpsgd_epsilon(...) <= target_epsilon (`smallest_noise`,
  rtol in [1e-12, 1)); ValueError when no sigma in NOISE_MULTIPLIER_RANGE is the answer.

  Examples:
    >>> round(calibrate_noise(1.0, 50 / 4000, 1600, 1e-5), 2)   # lecture: 2.19
    2.19
  """
  target = _validate.check_epsilon(target_epsilon, "target_epsilon")
  q = _validate.check_sampling_prob(sampling_prob)
  steps = _validate.check_int(num_steps, "num_steps")
  d = _check_delta(delta, dataset_size)
  _validate.check_choice(accountant, _ACCOUNTANTS, "accountant")
  _validate.check_choice(rdp_method, _RDP_METHODS, "rdp_method")
  rtol = _validate.check_range(rtol, "rtol", *_RTOL_RANGE, open_high=True)

  def eps(s):
    return dpsgd_epsilon(s, q, steps, d, accountant, rdp_method=rdp_method)

  s_min, s_max = NOISE_MULTIPLIER_RANGE
  if accountant == "pld":
    # PLD is at least as tight as RDP: bracket from the (cheap) RDP answer.
    hi = calibrate_noise(target, q, steps, d, "rdp", rtol=min(rtol, 1e-3))
    while eps(hi) > target:
      hi *= 1.25
      if hi > s_max:
        raise ValueError(f"target_epsilon={target} is not reached by any noise_multiplier "
                         f"<= {s_max:g} (accountant='pld')")
    lo = hi / 1.25
    while eps(lo) <= target:
      hi, lo = lo, lo / 1.25
      if lo < s_min:
        raise ValueError(f"target_epsilon={target} is already met at noise_multiplier "
                         f"{s_min:g}, the lower end of the supported range")
  else:
    if eps(s_max) > target:
      raise ValueError(f"target_epsilon={target} is not reached by any noise_multiplier in "
                       f"[{s_min:g}, {s_max:g}] (q={q}, T={steps}, delta={d:g})")
    if eps(s_min) <= target:
      raise ValueError(f"target_epsilon={target} is already met at noise_multiplier "
                       f"{s_min:g}, the lower end of the supported range")
    lo, hi = s_min, s_max
  return smallest_noise(eps, target, lo, hi, rtol=rtol)


class Accountant:
  """Composes privacy events and reports eps(delta) or delta(eps), by "rdp" or "pld".

  Relations: subsampled Gaussian add/remove-one; Gaussian and Laplace through the
  sensitivity passed (for the relation claimed); randomized response replace-one (mixing
  it with subsampled Gaussians warns).

  Examples:
    >>> acct = Accountant()
    >>> _ = acct.compose_gaussian(100.0, count=10_000)   # mu0 = 0.01, k = 1e4
    >>> round(acct.epsilon(1e-5), 2)                       # exact: 4.38
    4.73
  """

  def __init__(self, accountant: str = "rdp", orders=None, rdp_method: str = "balle2020"):
    self.accountant = _validate.check_choice(accountant, _ACCOUNTANTS, "accountant")
    self.rdp_method = _validate.check_choice(rdp_method, ("balle2020", "classic"), "rdp_method")
    self.orders = rdp.DEFAULT_ORDERS.copy() if orders is None else _validate.check_orders(orders)
    self._rdp = np.zeros_like(self.orders)
    self._pld = None
    self.events: list[tuple[str, dict, int]] = []

  def _add(self, name: str, params: dict, count, rdp_fn, pld_fn) -> "Accountant":
    k = _validate.check_int(count, "count")
    if self.accountant == "rdp":
      self._rdp = self._rdp + k * rdp_fn(self.orders)
    else:
      dist = pld_fn()
      if k > 1:
        dist = dist.self_compose(k)
      self._pld = dist if self._pld is None else self._pld.compose(dist)
    self.events.append((name, dict(params), k))
    return self

  @_validate.names_extreme_arguments
  def compose_gaussian(self, noise_multiplier: float, count: int = 1) -> "Accountant":
    """Adds `count` Gaussian mechanisms with noise std = noise_multiplier * L2 sensitivity."""
    s = _validate.check_positive(noise_multiplier, "noise_multiplier")
    return self._add("gaussian", {"noise_multiplier": s}, count,
                     lambda o: rdp.gaussian_rdp(s, o),
                     lambda: _pld_module().gaussian_pld(s, sampling_prob=1.0))

  @_validate.names_extreme_arguments
  def compose_subsampled_gaussian(self, noise_multiplier: float, sampling_prob: float,
                                  count: int = 1) -> "Accountant":
    """Adds `count` Poisson-subsampled Gaussian steps (DP-SGD steps)."""
    s = _validate.check_positive(noise_multiplier, "noise_multiplier")
    q = _validate.check_sampling_prob(sampling_prob)
    if any(e[0] == "randomized_response" for e in self.events):
      self._warn_mixed()
    return self._add("subsampled_gaussian", {"noise_multiplier": s, "sampling_prob": q}, count,
                     lambda o: rdp.subsampled_gaussian_rdp(q, s, o),
                     lambda: _pld_module().gaussian_pld(s, sampling_prob=q))

  @_validate.names_extreme_arguments
  def compose_laplace(self, scale: float, sensitivity: float = 1.0,
                      count: int = 1) -> "Accountant":
    """Adds `count` Laplace mechanisms with noise scale b and L1 sensitivity Delta."""
    b = _validate.check_positive(scale, "scale")
    dl = _validate.check_positive(sensitivity, "sensitivity")
    return self._add("laplace", {"scale": b, "sensitivity": dl}, count,
                     lambda o: rdp.laplace_rdp(b, o, sensitivity=dl),
                     lambda: _pld_module().laplace_pld(b, sensitivity=dl))

  @_validate.names_extreme_arguments
  def compose_randomized_response(self, epsilon: float, count: int = 1,
                                  num_buckets: int = 2) -> "Accountant":
    """Adds `count` k-ary randomized responses, each eps-DP (replace-one)."""
    e = _validate.check_epsilon(epsilon)
    if any(ev[0] == "subsampled_gaussian" for ev in self.events):
      self._warn_mixed()

    def pld_fn():
      return _pld_module().randomized_response_pld(e, num_buckets=num_buckets)

    return self._add("randomized_response", {"epsilon": e, "num_buckets": num_buckets}, count,
                     lambda o: rdp.randomized_response_rdp(e, o, num_buckets=num_buckets),
                     pld_fn)

  def compose_event(self, event, relation: str = "add_remove") -> "Accountant":
    """Adds an `events.Event` tree under `relation` (`events.RELATIONS`); one it
    cannot bound raises `events.UnsupportedEventError`. Mixing relations is the caller's."""
    from dpjax.accounting import event_accounting  # pylint: disable=import-outside-toplevel
    if self.accountant == "rdp":
      rdp_fn = lambda o: event_accounting.rdp_curve(event, o, relation)[1]
    else:
      rdp_fn = None
    pld_fn = lambda: event_accounting.privacy_loss_distribution(event, relation)
    event_accounting.check_supported(event, self.accountant, relation)
    return self._add("event", {"event": event, "relation": relation}, 1, rdp_fn, pld_fn)

  @staticmethod
  def _warn_mixed():
    warnings.warn("Accountant: randomized response (replace-one) composed with subsampled "
                  "Gaussian steps (add/remove-one); the total holds only for a relation "
                  "under which both guarantees are valid.", UserWarning, stacklevel=3)

  @_validate.names_extreme_arguments
  def epsilon(self, delta: float, dataset_size: Optional[int] = None) -> float:
    """eps of everything composed so far, at `delta` in (0, 1)."""
    d = _check_delta(delta, dataset_size)
    if not self.events:
      return 0.0
    if self.accountant == "rdp":
      return rdp.rdp_to_epsilon(self.orders, self._rdp, d, method=self.rdp_method)[0]
    return float(self._pld.epsilon(d))

  @_validate.names_extreme_arguments
  def delta(self, epsilon: float) -> float:
    """delta of everything composed so far, at `epsilon` >= 0."""
    e = _validate.check_epsilon(epsilon, allow_zero=True)
    if not self.events:
      return 0.0
    if self.accountant == "rdp":
      return rdp.rdp_to_delta(self.orders, self._rdp, e, method=self.rdp_method)[0]
    return float(self._pld.delta(e))

  def rdp_curve(self) -> tuple[np.ndarray, np.ndarray]:
    """(orders [A], composed RDP [A]); only for accountant="rdp"."""
    if self.accountant != "rdp":
      raise ValueError("rdp_curve is only available for accountant='rdp'")
    return self.orders.copy(), self._rdp.copy()


__all__ = [
    "Accountant", "NOISE_MULTIPLIER_RANGE", "calibrate_noise", "composition", "compose_mu",
    "dpsgd_clt_epsilon", "dpsgd_clt_mu", "dpsgd_epsilon", "gaussian_delta", "gaussian_epsilon",
    "gdp", "mu_for_epsilon", "rdp", "smallest_noise", "tuned_dpsgd_epsilon",
]
