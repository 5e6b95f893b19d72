"""A privacy statement for a DP-SGD run: everything a paper or a review needs.

`privacy_statement(...)` (`.text()`, `.to_dict()`): neighbouring relation and privacy unit
(example, or user with all records: McMahan et al. 2018); the sampler assumed and what is
not covered; eps at several delta by RDP, PLD (with discretisation error) and the GDP CLT
(Bu et al. 2020, APPROXIMATE); delta against 1/n; membership-inference TPR bounds; accountant
disagreements; and, given `noise_draws_per_step` d, the sampler's delta (1 + e^eps) T d tau.
With `max_batch_size` B (truncated Poisson sampling, `sampling.TruncatedPoissonSampler`)
the RDP and PLD rows bound `truncated_dpsgd_event` instead, the selection's distance from
uniform (`sampling.selection_tv_bound`) is added to delta, and the CLT is not given.

Examples:
  >>> s = privacy_statement(1.1, 256 / 60000, 1000, 60000, deltas=(1e-5,))
  >>> s.rows[0].pld_epsilon <= s.rows[0].rdp_epsilon
  True
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Sequence

import numpy as np

from dpjax import _validate, tradeoff
from dpjax.accounting import event_accounting, events
from dpjax.accounting import gdp, noise_support, pld, pld_dpsgd, pld_grid, rdp

DEFAULT_DELTAS = (1e-5, 1e-6, 1e-8)
DEFAULT_FPRS = (0.001, 0.01, 0.1)


@dataclasses.dataclass(frozen=True)
class EpsilonRow:
  """eps at one delta by each accountant: RDP (bound, order), PLD (bound; truth in
  [pld_epsilon - pld_error, pld_epsilon]), CLT (APPROXIMATE), the noise sampler's
  `sampler_delta` at the larger bound and, for truncated batches, the selection's
  `selection_delta` (the run is (eps, total_delta)-DP)."""
  delta: float
  rdp_epsilon: float
  rdp_order: float
  pld_epsilon: float
  pld_error: float
  pld_value_discretization: float
  clt_epsilon: float
  sampler_delta: float = 0.0
  selection_delta: float = 0.0

  @property
  def total_delta(self) -> float:
    """delta + sampler_delta + selection_delta: the delta that holds for the noise and
    batches actually drawn."""
    return self.delta + self.sampler_delta + self.selection_delta


@dataclasses.dataclass(frozen=True)
class PrivacyStatement:
  """The statement; see the module docstring. `text()` renders it."""
  noise_multiplier: float
  sampling_prob: float
  num_steps: int
  dataset_size: int
  clt_mu: float
  rows: tuple[EpsilonRow, ...]
  fprs: tuple[float, ...]
  tpr_pld: tuple[float, ...]
  tpr_clt: tuple[float, ...]
  delta_notes: tuple[str, ...]
  disagreements: tuple[str, ...]
  noise_draws_per_step: int | None = None
  sampler_support: tuple[float, float] | None = None
  sampler_tail_mass: float | None = None
  privacy_unit: str = "example"
  max_batch_size: int | None = None
  selection_tv: float = 0.0

  @property
  def unit_phrase(self) -> str:
    """"per example" or "per user": what each (eps, delta) row protects."""
    return f"per {self.privacy_unit}"

  @property
  def expected_batch_size(self) -> float:
    return self.sampling_prob * self.dataset_size

  @property
  def epochs(self) -> float:
    return self.num_steps * self.sampling_prob

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["expected_batch_size"] = self.expected_batch_size
    d["epochs"] = self.epochs
    d["guarantee_unit"] = self.unit_phrase
    for row, r in zip(d["rows"], self.rows):
      row["total_delta"] = r.total_delta
    if self.max_batch_size is None:   # untruncated: the keys of the Poisson statement only
      del d["max_batch_size"], d["selection_tv"]
      for row in d["rows"]:
        del row["selection_delta"]
    return d

  def text(self) -> str:
    """The statement as plain text (what `experiments.privacy_statement` prints)."""
    q, n = self.sampling_prob, self.dataset_size
    if self.privacy_unit == "user":
      unit_lines = [
          "Neighbouring relation: add/remove one user with ALL of their records",
          "  (unbounded DP, user level).",
          "Privacy unit: one user (every row of one person), whatever their number",
          "  of rows: the guarantee below holds per user.",
          f"Mechanism: T = {self.num_steps} steps; per step each of the n = {n} users",
          f"  is included independently with probability q = {q:.6g}, with all of their",
          f"  rows (user-level Poisson sampling; expected batch q*n = "
          f"{self.expected_batch_size:.1f} users; {self.epochs:.2f} epochs);",
          "  each sampled user's summed gradient clipped to L2 norm C, summed over users,",
          f"  plus N(0, sigma^2 C^2 I) noise with noise multiplier sigma = "
          f"{self.noise_multiplier:.6g};",
          "  divided by the fixed expected batch size q*n, never by the realised size."]
    else:
      unit_lines = [
          "Neighbouring relation: add/remove one example (unbounded DP).",
          "Privacy unit: one training example (one row). A person with several",
          "  rows is protected only by group privacy (eps grows ~k-fold for k rows).",
          f"Mechanism: T = {self.num_steps} steps; per step each of the n = {n} examples",
          f"  is included independently with probability q = {q:.6g} (Poisson",
          f"  sampling; expected batch q*n = {self.expected_batch_size:.1f}; "
          f"{self.epochs:.2f} epochs);",
          "  per-example gradients clipped to L2 norm C, summed, plus N(0, sigma^2 C^2 I)",
          f"  noise with noise multiplier sigma = {self.noise_multiplier:.6g}; divided by the",
          "  fixed expected batch size q*n, never by the realised batch size."]
      if self.max_batch_size is not None:
        b = self.max_batch_size
        unit_lines[6:6] = [
            f"  TRUNCATED at B = {b} records: a step that draws more keeps a uniformly",
            f"  random {b} of them (the others do not take part that step);"]
        unit_lines += [
            f"  Accounted for datasets of exactly n = {n} records and their neighbours",
            "  (n - 1 or n + 1 records): the bound depends on n (Poisson sampling's does not).",
            f"  The selection is uniform up to {self.selection_tv:.1e} in total variation",
            "  over the run (64-bit ranking keys); (1 + e^eps) times it is added to delta",
            "  (total_delta; not shown in the table)."]
    out = [
        "PRIVACY STATEMENT (DP-SGD)",
        "==========================",
        f"Guarantee: (eps, delta)-differential privacy {self.unit_phrase} of the whole",
        "  training run (every one of the T noisy gradients may be released; the final",
        "  model is post-processing).",
        *unit_lines,
        "NOT covered: shuffled or fixed-size batches (a different sampler; these",
        "  numbers do not apply), hyper-parameter tuning on the private data, any",
        "  other use of the data (preprocessing statistics, early stopping on it).",
        "",
        f"eps {self.unit_phrase} by accountant (all but the CLT are upper bounds):",
    ]
    hdr = (f"  {'delta':>8}  {'RDP eps':>9} {'(order)':>8}  {'PLD eps':>9} "
           f"{'± disc.':>9}  {'CLT eps (approx.)':>18}")
    if self.noise_draws_per_step is not None:
      hdr += f"  {'delta + sampler delta':>21}"
    out.append(hdr)
    for r in self.rows:
      line = (f"  {r.delta:8.0e}  {r.rdp_epsilon:9.4f} {r.rdp_order:8.3g}  "
              f"{r.pld_epsilon:9.4f} {r.pld_error:9.1e}  {r.clt_epsilon:18.4f}")
      if self.noise_draws_per_step is not None:
        line += f"  {r.delta:8.0e} + {r.sampler_delta:8.1e}"
      out.append(line)
    if self.max_batch_size is None:
      out += [
          "  RDP: exact Renyi DP of the subsampled Gaussian at integer and fractional",
          "    orders, Balle et al. 2020 conversion, optimal order shown.",
          "  PLD: discretised privacy-loss distribution composed by FFT (pessimistic,",
          "    connect-the-dots); the true eps lies in [PLD - disc., PLD].",
          f"  CLT: Bu et al. 2020 mu-GDP limit, mu = {self.clt_mu:.4f}; APPROXIMATE, not a "
          "bound.",
          "",
      ]
    else:
      out += [
          "  RDP and PLD: upper bounds of the truncated subsampled Gaussian (accounting.",
          "    truncated_sampling: the cut branches have sensitivity 2C at a reduced rate);",
          "    PLD at h = 1e-4, disc. estimated from the grid 2h (an estimate, not a bound).",
          "  CLT: not available for truncated sampling (nan).",
          "",
      ]
    if self.noise_draws_per_step is None:
      out += ["Noise sampler: the extra delta of its finite support is NOT included",
              "  (the number of noise coordinates per step was not given).", ""]
    else:
      lo, hi = self.sampler_support
      out += [
          f"Noise sampler: float32 N(0, 1) with support [{lo:.4f}, {hi:.4f}]; an exact",
          f"  Gaussian falls outside it with probability tau = {self.sampler_tail_mass:.3e}"
          " per draw.",
          f"  Over T*d = {self.num_steps} * {self.noise_draws_per_step} draws this adds "
          "(1 + e^eps) T d tau to delta:",
          "  the last column is the delta that holds for the noise actually drawn",
          "  (eps at the larger of RDP and PLD). Not covered: the float32 lattice of",
          "  the values inside the support.", ""]
    out += [f"delta against 1/n = {1.0 / n:.3g}:"]
    out += ["  " + s for s in self.delta_notes]
    out += ["", "Membership inference: the largest TPR any test reaches at a given FPR",
            f"  {'FPR':>7}  {'TPR bound (PLD)':>16}  {'TPR (CLT, approx.)':>19}"]
    for f, a, b in zip(self.fprs, self.tpr_pld, self.tpr_clt):
      out.append(f"  {f:7.3%}  {a:16.4f}  {b:19.4f}")
    out.append("  (PLD: from the whole delta(eps) curve, a bound; CLT: Phi(Phi^-1(FPR) + mu).)")
    out += ["", "Accountant agreement:"]
    out += ["  " + s for s in self.disagreements] or ["  all accountants agree within their stated errors"]
    return "\n".join(out)


@_validate.names_extreme_arguments
def privacy_statement(noise_multiplier: float, sampling_prob: float, num_steps: int,
                      dataset_size: int, deltas: Sequence[float] = DEFAULT_DELTAS,
                      fprs: Sequence[float] = DEFAULT_FPRS, pld_rtol: float = 1e-5,
                      noise_draws_per_step: int | None = None,
                      privacy_unit: str = "example",
                      max_batch_size: int | None = None) -> PrivacyStatement:
  """Builds the privacy statement of a DP-SGD run (Poisson sampling, add/remove).

  deltas [D], fprs [F] in (0, 1); noise_draws_per_step d (parameter count) adds
  `sampler_delta(eps, T d)` per row. privacy_unit ("example" or "user") only names the unit;
  "user" is correct only with user-level sampling and clipping (`DpSgdConfig(privacy_unit=)`).
  max_batch_size: None, or B >= 1 for batches truncated to B records
  (`DpSgdConfig(max_batch_size=)`; example level only): `truncated_dpsgd_event` is
  accounted (RDP; PLD at h = 1e-4 with the error estimated from 2h), each row's
  selection_delta is (1 + e^eps) `sampling.selection_tv_bound(n, q, T)`, the CLT columns
  are nan.
  Cost: each PLD composition stays within `pld_grid.MAX_WORK` (coarser grids, still upper
  bounds); a num_steps whose trade-off curve cannot fit is a GridTooLarge naming it.
  """
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  n = _validate.check_int(dataset_size, "dataset_size")
  deltas = tuple(float(d) for d in _validate.check_array(
      deltas, "deltas", ndim=1, low=0.0, high=1.0, open_low=True, open_high=True))
  if not deltas:
    raise ValueError("deltas must be non-empty")
  fprs = tuple(float(f) for f in _validate.check_array(
      fprs, "fprs", ndim=1, low=0.0, high=1.0, open_low=True, open_high=True))
  _validate.check_range(pld_rtol, "pld_rtol", pld_dpsgd.RTOL_MIN, 0.1)
  draws = (None if noise_draws_per_step is None
           else _validate.check_int(noise_draws_per_step, "noise_draws_per_step"))
  unit = _validate.check_choice(privacy_unit, ("example", "user"), "privacy_unit")
  if not fprs:
    raise ValueError("fprs must be non-empty, each in (0, 1)")
  if max_batch_size is not None:
    b = _validate.check_int(max_batch_size, "max_batch_size", 1, 2 ** 31 - 1)
    if unit != "example":
      raise ValueError("max_batch_size (truncated Poisson sampling) is accounted for "
                       f"example-level DP only; privacy_unit must be 'example', got {unit!r}")
    return _truncated_statement(sigma, q, t, n, b, deltas, fprs, draws)

  orders, rho = event_accounting.rdp_curve(events.dpsgd_event(sigma, q, t))
  mu_clt = gdp.dpsgd_clt_mu(sigma, q, t)
  rows = []
  finest = None
  for d in deltas:
    e_rdp, order = rdp.rdp_to_epsilon(orders, rho, d)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      res = pld.dpsgd_epsilon_bound(sigma, q, t, d, rtol=pld_rtol)
    extra = (0.0 if draws is None else
             noise_support.sampler_delta(max(e_rdp, res.value), t * draws))
    rows.append(EpsilonRow(d, e_rdp, order, res.value, res.error,
                           res.value_discretization, gdp.gaussian_epsilon(d, mu_clt), extra))
    if not res.exact and (finest is None or res.value_discretization < finest):
      finest = res.value_discretization

  # Trade-off curve from the PLD's delta(eps) profile on the finest grid used (<= 1e-3).
  h = min(finest, 1e-3) if finest is not None else None
  try:
    composed = pld.gaussian_pld(sigma, q, value_discretization=h).self_compose(t)
  except pld_grid.GridTooLarge as e:
    raise pld_grid.GridTooLarge(f"num_steps = {t}: the trade-off curve's PLD does not fit "
                                f"a grid ({e})") from e
  tpr_pld = _tpr_bound(composed, rows, fprs)
  tpr_clt = tradeoff.gaussian_tpr(np.asarray(fprs), mu_clt)
  support, tail = _sampler_support(draws)
  return PrivacyStatement(sigma, q, t, n, mu_clt, tuple(rows), fprs,
                          tuple(float(x) for x in tpr_pld), tuple(float(x) for x in tpr_clt),
                          tuple(_delta_notes(deltas, n, unit)),
                          tuple(_disagreements(rows, fprs, tpr_pld, tpr_clt)), draws, support,
                          tail, unit)


def truncated_dpsgd_event(noise_multiplier: float, sampling_prob: float, num_steps: int,
                          dataset_size: int, max_batch_size: int) -> events.SelfComposedEvent:
  """T steps of DP-SGD on Poisson batches truncated to B records
  (`sampling.TruncatedPoissonSampler`, add/remove-one): `events.SelfComposedEvent` of
  `events.TruncatedPoissonSampledGaussianEvent(sigma, q, n, B)`, for a dataset of
  n = dataset_size records and its neighbours.

  Examples:
    >>> e = truncated_dpsgd_event(1.0, 0.01, 100, 1000, 20)
    >>> e.count, e.event.max_batch_size
    (100, 20)
  """
  t = _validate.check_int(num_steps, "num_steps")
  step = events.TruncatedPoissonSampledGaussianEvent(noise_multiplier, sampling_prob,
                                                     dataset_size, max_batch_size)
  return events.SelfComposedEvent(step, t)


# The truncated statement's PLD grid (dp_accounting's default) and the coarser one of its
# error estimate.
_TRUNCATED_H = 1e-4


def _delta_notes(deltas, n, unit) -> list[str]:
  notes = []
  for d in deltas:
    if d >= 1.0 / n:
      notes.append(f"delta = {d:.0e} >= 1/n: VOID as a privacy guarantee (releasing "
                   f"one random {'user' if unit == 'user' else 'record'} in full "
                   "satisfies it).")
    elif d > 0.1 / n:
      notes.append(f"delta = {d:.0e} < 1/n but delta*n = {d * n:.2g} is not << 1; "
                   f"prefer delta <= 0.1/n = {0.1 / n:.1e}.")
    else:
      notes.append(f"delta = {d:.0e}: delta*n = {d * n:.2g} << 1, fine.")
  return notes


def _truncated_statement(sigma, q, t, n, b, deltas, fprs, draws) -> PrivacyStatement:
  """privacy_statement for batches truncated to b records (validated arguments)."""
  from dpjax import sampling  # pylint: disable=g-import-not-at-top  (jax only when needed)
  event = truncated_dpsgd_event(sigma, q, t, n, b)
  orders, rho = event_accounting.rdp_curve(event)
  try:
    composed = {h: event_accounting.privacy_loss_distribution(event, value_discretization=h)
                for h in (_TRUNCATED_H, 2 * _TRUNCATED_H)}
  except pld_grid.GridTooLarge as e:
    raise pld_grid.GridTooLarge(f"num_steps = {t}: the truncated PLD does not fit a grid "
                                f"of spacing {_TRUNCATED_H:g} ({e})") from e
  tv = sampling.selection_tv_bound(n, q, t)
  rows = []
  for d in deltas:
    e_rdp, order = rdp.rdp_to_epsilon(orders, rho, d)
    e_pld = float(composed[_TRUNCATED_H].epsilon(d))
    err = max(0.0, float(composed[2 * _TRUNCATED_H].epsilon(d)) - e_pld)
    e_max = max(e_rdp, e_pld)
    extra = (0.0 if draws is None else noise_support.sampler_delta(e_max, t * draws))
    select = min(1.0, tv * (1.0 + math.exp(min(e_max, 700.0))))
    rows.append(EpsilonRow(d, e_rdp, order, e_pld, err, _TRUNCATED_H, math.nan, extra,
                           select))
  tpr_pld = _tpr_bound(composed[_TRUNCATED_H], rows, fprs)
  support, tail = _sampler_support(draws)
  nan_f = tuple(math.nan for _ in fprs)
  return PrivacyStatement(sigma, q, t, n, math.nan, tuple(rows), fprs,
                          tuple(float(x) for x in tpr_pld), nan_f,
                          tuple(_delta_notes(deltas, n, "example")),
                          tuple(_disagreements(rows, fprs, tpr_pld, nan_f, rdp_looser=False)),
                          draws, support, tail, "example", b, tv)


def _tpr_bound(composed, rows, fprs):
  """`tradeoff.pld_tpr_bound` of the composed PLD, searched up to 2 max(eps) + 1 (or 50)."""
  e_max = max(r.pld_epsilon for r in rows)
  return tradeoff.pld_tpr_bound(composed, fprs, 2.0 * e_max + 1.0 if math.isfinite(e_max)
                                else 50.0)


def _sampler_support(draws):
  """(support, tail mass) of the float32 normal sampler when draws are counted, else Nones."""
  if draws is None:
    return None, None
  from dpjax import prng  # pylint: disable=g-import-not-at-top  (jax only when needed)
  return prng.normal_support(), prng.normal_tail_mass()


def _disagreements(rows, fprs, tpr_pld, tpr_clt, rdp_looser: bool = True) -> list[str]:
  """Where the accountants disagree beyond their stated errors (a NaN CLT never does)."""
  issues = []
  for r in rows:
    lo = r.pld_epsilon - r.pld_error
    slack = 1e-9 + 1e-9 * abs(r.pld_epsilon)
    if r.rdp_epsilon < lo - slack:
      issues.append(f"delta = {r.delta:.0e}: RDP eps {r.rdp_epsilon:.4f} is BELOW the PLD's "
                    f"lower end {lo:.4f}; both claim to be upper bounds, so one is wrong.")
    elif rdp_looser and r.rdp_epsilon > r.pld_epsilon + slack:
      issues.append(f"delta = {r.delta:.0e}: RDP is looser than PLD by "
                    f"{r.rdp_epsilon - r.pld_epsilon:.4f} "
                    f"({(r.rdp_epsilon / r.pld_epsilon - 1) * 100:.1f} %), more than the PLD's "
                    f"error {r.pld_error:.1e} (expected: the RDP-to-DP conversion is lossy).")
    if r.clt_epsilon < lo - slack:
      issues.append(f"delta = {r.delta:.0e}: CLT eps {r.clt_epsilon:.4f} is below the true "
                    f"eps (>= {lo:.4f} by the PLD): the approximation UNDER-reports "
                    f"privacy loss by {(1 - r.clt_epsilon / r.pld_epsilon) * 100:.1f} %.")
    elif r.clt_epsilon > r.pld_epsilon + slack:
      issues.append(f"delta = {r.delta:.0e}: CLT eps {r.clt_epsilon:.4f} is above the PLD "
                    f"upper bound {r.pld_epsilon:.4f} (over-reports).")
  for f, a, b in zip(fprs, tpr_pld, tpr_clt):
    if b > a + 1e-6 and a < 1 - 1e-9:
      issues.append(f"FPR = {f:.1%}: the CLT trade-off curve (TPR {b:.4f}) exceeds the "
                    f"PLD bound ({a:.4f}): the CLT is pessimistic there.")
  return issues
