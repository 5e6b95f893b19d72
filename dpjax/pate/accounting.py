"""PATE's privacy accounting (host NumPy): events, data-independent and data-dependent RDP.

One record changes one teacher's vote. Per answer LNMax is (2/b)-DP and GNMax (alpha,
alpha / sigma^2)-RDP; the Confident-GNMax threshold check, (alpha, alpha / (2 sigma_t^2))-RDP,
is paid on EVERY query. The data-dependent RDP (Papernot et al. 2018, Thm 6) is smaller
when teachers agree. The data-independent statement is a privacy event (`answer_event`,
`threshold_event`, `aggregation_event`) for `dpjax.accounting.event_accounting`.

Warning: the data-dependent epsilon is a function of the private votes; publishing it
leaks unless released privately (`dpjax.pate_release`).

Shape letters: Q queries, C classes, A Renyi orders.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import special, stats

from dpjax import _validate


def check_votes(votes, name: str = "votes_QxC", ndim=(1, 2), integer: bool = False
                ) -> np.ndarray:
  """Vote counts as float64[C] or [Q, C], finite, >= 0 (whole if `integer`), C >= 2.

  Examples:
    >>> check_votes([[3, 1]]).tolist()
    [[3.0, 1.0]]
  """
  integer = _validate.check_bool(integer, "integer")
  v = _validate.check_array(votes, name, ndim=ndim, low=0.0, integer=integer)
  if v.ndim == 0 or v.shape[-1] < 2 or v.size == 0:
    raise ValueError(f"{name} must have shape [C] or [Q, C] with C >= 2, got {v.shape}")
  return v


def answer_event(sigma: float, aggregator: str = "gnmax"):
  """The privacy event of ONE aggregated answer (`dpjax.accounting.events`).

  A neighbour moves one vote: two counts change by 1. GNMax: SelfComposedEvent(
  GaussianEvent(sigma), 2) (RDP alpha / sigma^2); LNMax (sigma = the Laplace scale b):
  SelfComposedEvent(LaplaceEvent(b), 2), (2 / b)-DP. The argmax is post-processing.

  Examples:
    >>> answer_event(4.0).count
    2
  """
  from dpjax.accounting import events  # local imports: keep `import dpjax.pate` light
  s = _validate.check_positive(sigma, "sigma")
  agg = _validate.check_choice(aggregator, ("gnmax", "lnmax"), "aggregator")
  leaf = events.GaussianEvent(s) if agg == "gnmax" else events.LaplaceEvent(s)
  return events.SelfComposedEvent(leaf, 2)


def threshold_event(sigma_threshold: float):
  """One threshold check: max_c n_c (sensitivity 1) + N(0, sigma_t^2), GaussianEvent(sigma_t)."""
  from dpjax.accounting import events
  return events.GaussianEvent(_validate.check_positive(sigma_threshold, "sigma_threshold"))


def aggregation_event(num_queries: int, num_answered: int, *, sigma: float,
                      sigma_threshold: float | None = None, aggregator: str = "gnmax"):
  """The data-independent event of a PATE run: num_answered answers, then (with a
  threshold) num_queries checks; None when nothing was released.

  Examples:
    >>> from dpjax.accounting import event_accounting
    >>> e = aggregation_event(100, 40, sigma=40.0, sigma_threshold=150.0)
    >>> r = event_accounting.rdp_curve(e, [2.0])[1][0]   # 40 * 2 / 40^2 + 100 * 2 / (2 150^2)
    >>> bool(abs(r - (40 * 2 / 1600 + 100 / 22500)) < 1e-15)
    True
  """
  from dpjax.accounting import events
  q = _validate.check_int(num_queries, "num_queries", minimum=0)
  n = _validate.check_int(num_answered, "num_answered", minimum=0)
  if n > q:
    raise ValueError(f"num_answered must be <= num_queries = {q}, got {n}")
  parts = []
  if n:
    parts.append(events.SelfComposedEvent(answer_event(sigma, aggregator), n))
  if sigma_threshold is not None:
    if aggregator != "gnmax":
      raise ValueError("the threshold check is defined for aggregator='gnmax' only")
    if q:
      parts.append(events.SelfComposedEvent(threshold_event(sigma_threshold), q))
  return events.ComposedEvent(tuple(parts)) if parts else None


def _event_rdp(event, orders: np.ndarray) -> np.ndarray:
  """RDP curve float64[A] of `event` by the event accountant (zeros for None)."""
  from dpjax.accounting import event_accounting
  if event is None:
    return np.zeros_like(orders)
  return event_accounting.rdp_curve(event, orders)[1]


@_validate.names_extreme_arguments
def gnmax_rdp_data_independent(sigma: float, orders) -> np.ndarray:
  """alpha / sigma^2 per GNMax query (L2 sensitivity sqrt(2)): float64[A]."""
  s = _validate.check_positive(sigma, "sigma")
  return _validate.check_orders(orders) / (s * s)


def check_threshold(threshold, sigma_threshold) -> tuple[float | None, float | None]:
  """(threshold, sigma_threshold) as floats (both given), or (None, None) (GNMax).

  Examples:
    >>> check_threshold(None, None), check_threshold(3, 1)
    ((None, None), (3.0, 1.0))
  """
  if (threshold is None) != (sigma_threshold is None):
    raise ValueError("give both threshold and sigma_threshold (Confident-GNMax), or neither "
                     "(GNMax)")
  if threshold is None:
    return None, None
  return (_validate.check_finite(threshold, "threshold"),
          _validate.check_positive(sigma_threshold, "sigma_threshold"))


@_validate.names_extreme_arguments
def threshold_rdp_data_independent(sigma_threshold: float, orders) -> np.ndarray:
  """alpha / (2 sigma_t^2) per threshold check (max count has sensitivity 1): float64[A]."""
  s = _validate.check_positive(sigma_threshold, "sigma_threshold")
  return _validate.check_orders(orders) / (2.0 * s * s)


@_validate.names_extreme_arguments
def lnmax_epsilon(laplace_scale: float) -> float:
  """Pure epsilon of one LNMax answer: 2 / b (the histogram's L1 sensitivity is 2)."""
  return 2.0 / _validate.check_positive(laplace_scale, "laplace_scale")


@_validate.names_extreme_arguments
def lnmax_rdp_data_independent(laplace_scale: float, orders) -> np.ndarray:
  """RDP of one eps-DP answer, eps = 2 / b: min(eps, alpha eps^2 / 2) (Bun & Steinke 2016)."""
  e = lnmax_epsilon(laplace_scale)
  a = _validate.check_orders(orders)
  return np.minimum(e, 0.5 * a * e * e)


def log1mexp(x):
  """log(1 - exp(x)) elementwise for x in [-inf, 0] (-inf at 0), stable.

  A scalar x gives a float through `math` (libm's rounding), an array a float64 array
  through NumPy; the two may differ in the last bit.

  Examples:
    >>> bool(np.isclose(log1mexp(math.log(0.25)), math.log(0.75), rtol=1e-15))
    True
  """
  x = _validate.check_array(x, "x", high=0.0, allow_inf=True, min_size=1)
  if x.ndim == 0:
    v = float(x)
    if v == 0.0:
      return -math.inf
    return math.log(-math.expm1(v)) if v > -0.693 else math.log1p(-math.exp(v))
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(x > -0.693, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def gnmax_log_q(votes_C, sigma: float) -> float:
  """log of a bound on Pr[GNMax(votes) != plurality] (Prop. 7): a float.

  sum over non-plurality i of Phi(-(n_max - n_i) / (sqrt(2) sigma)), capped at 1 - 1/C.
  -inf where log q is below the float64 range (a vote gap over sigma past about 1e154, e.g.
  sigma = 1e-300): the correctly rounded log of a q that underflows;
  `gaussian_rdp_data_dependent` takes it as q = 0.
  """
  v = check_votes(votes_C, "votes_C", ndim=1)
  s = _validate.check_positive(sigma, "sigma")
  top = int(np.argmax(v))
  gaps = (v[top] - np.delete(v, top)) / (math.sqrt(2.0) * s)
  log_q = float(special.logsumexp(stats.norm.logsf(gaps)))
  return min(log_q, math.log1p(-1.0 / v.shape[0]))


@_validate.names_extreme_arguments
def lnmax_log_q(votes_C, laplace_scale: float) -> float:
  """log of a bound on Pr[LNMax(votes) != plurality] (Papernot et al. 2017, Lemma 4).

  sum_i (2 + d_i/b) exp(-d_i/b) / 4, d_i = n_max - n_i, capped at 1 - 1/C.
  """
  v = check_votes(votes_C, "votes_C", ndim=1)
  b = _validate.check_positive(laplace_scale, "laplace_scale")
  top = int(np.argmax(v))
  g = (v[top] - np.delete(v, top)) / b
  log_q = float(special.logsumexp(np.log(2.0 + g) - g + math.log(0.25)))
  return min(log_q, math.log1p(-1.0 / v.shape[0]))


@_validate.names_extreme_arguments
def gaussian_rdp_data_dependent(log_q: float, sigma: float, orders) -> np.ndarray:
  """Thm 6 of Papernot et al. 2018 for a noisy argmax of data-independent RDP alpha / sigma^2,
  given log_q >= log Pr[output != most likely outcome]: float64[A].

  With mu2 = sigma sqrt(log(1/q)), mu1 = mu2 + 1 (Prop. 10), eps_i = mu_i / sigma^2:

      (1 / (lambda - 1)) log((1 - q) A^(lambda - 1) + q B^(lambda - 1)),
      A = (1 - q) / (1 - (q e^eps2)^((mu2 - 1) / mu2)),  B = e^eps1 / q^(1 / (mu1 - 1)),

  used at lambda < mu1 when mu2 > 1, q e^eps2 < 1 and q <= e^((mu2 - 1) eps2) /
  (mu1/(mu1-1) * mu2/(mu2-1))^mu2; elsewhere, or where larger, alpha / sigma^2.
  """
  lq = _validate.check_range(log_q, "log_q", high=0.0, allow_inf=True)
  s = _validate.check_positive(sigma, "sigma")
  lam = _validate.check_orders(orders)
  var = s * s
  indep = lam / var
  if lq == -math.inf:
    return np.zeros_like(lam)  # the output is a constant
  mu2 = s * math.sqrt(-lq)
  mu1 = mu2 + 1.0
  if mu2 <= 1.0:
    return indep
  eps1, eps2 = mu1 / var, mu2 / var
  cond_monotone = lq <= (mu2 - 1.0) * eps2 - mu2 * (
      math.log1p(1.0 / (mu1 - 1.0)) + math.log1p(1.0 / (mu2 - 1.0)))
  if not (cond_monotone and lq + eps2 < 0):
    return indep
  log_1mq = log1mexp(lq)
  log_a = log_1mq - log1mexp((lq + eps2) * (1.0 - 1.0 / mu2))
  log_b = eps1 - lq / (mu1 - 1.0)
  with np.errstate(over="ignore"):
    log_s = np.logaddexp(log_1mq + (lam - 1.0) * log_a, lq + (lam - 1.0) * log_b)
    dep = log_s / (lam - 1.0)
  return np.where(lam < mu1, np.minimum(indep, dep), indep)


def gnmax_rdp_data_dependent(votes_C, sigma: float, orders) -> np.ndarray:
  """Data-dependent RDP of one GNMax answer, float64[A] (see the module's Warning)."""
  # The undecorated bound: an unbounded divergence is reported as inf (`confident_gnmax_rdp`).
  return gaussian_rdp_data_dependent.__wrapped__(gnmax_log_q(votes_C, sigma), sigma, orders)


@_validate.names_extreme_arguments
def threshold_log_pr_answered(votes_C, threshold: float, sigma_threshold: float) -> float:
  """log Pr[max_c n_c + N(0, sigma_t^2) >= T]."""
  v = check_votes(votes_C, "votes_C", ndim=1)
  t = _validate.check_finite(threshold, "threshold")
  st = _validate.check_positive(sigma_threshold, "sigma_threshold")
  return float(stats.norm.logsf((t - v.max()) / st))


def threshold_rdp_data_dependent(votes_C, threshold: float, sigma_threshold: float,
                                 orders) -> np.ndarray:
  """Data-dependent RDP of the threshold check: float64[A], Thm 6 with s = sqrt(2) sigma_t,
  q = min(Pr[answered], Pr[not answered]).
  """
  lp = threshold_log_pr_answered(votes_C, threshold, sigma_threshold)
  lq = min(lp, log1mexp(lp))
  return gaussian_rdp_data_dependent.__wrapped__(lq, math.sqrt(2.0) * sigma_threshold, orders)


@_validate.names_extreme_arguments
def lnmax_rdp_data_dependent(votes_C, laplace_scale: float, orders) -> np.ndarray:
  """Data-dependent RDP of one LNMax answer (Papernot et al. 2017, Thm 3): float64[A].

  With eps = 2/b, q of `lnmax_log_q` < 1/(e^eps + 1): (1/(lambda-1)) log((1-q)
  ((1-q)/(1-e^eps q))^(lambda-1) + q e^(eps (lambda-1))), capped at the data-independent RDP.
  """
  e = lnmax_epsilon(laplace_scale)
  lam = _validate.check_orders(orders)
  indep = lnmax_rdp_data_independent(laplace_scale, lam)
  lq = lnmax_log_q(votes_C, laplace_scale)
  if lq >= -math.log1p(math.exp(e)):
    return indep
  log_1mq = log1mexp(lq)
  log_t = np.logaddexp(log_1mq + (lam - 1.0) * (log_1mq - log1mexp(e + lq)),
                       lq + (lam - 1.0) * e)
  return np.minimum(indep, log_t / (lam - 1.0))


class PateRdp(NamedTuple):
  """RDP curves float64[A] of a PATE run, summed over queries.

  `data_independent` is releasable; `data_dependent` (<= it) is NOT releasable as is
  (`dpjax.pate_release`). `num_answered`: queries that paid for an answer.
  """
  orders: np.ndarray
  data_independent: np.ndarray
  data_dependent: np.ndarray
  num_answered: int


@_validate.names_extreme_arguments
def pate_rdp(votes_QxC, answered_Q=None, *, sigma: float, orders,
             threshold: float | None = None, sigma_threshold: float | None = None,
             aggregator: str = "gnmax") -> PateRdp:
  """Accounts for Q aggregated queries (GNMax, Confident-GNMax or LNMax): a PateRdp.

  answered_Q (default all) pay for the argmax; with a threshold every query pays the
  check. sigma is the Laplace scale b for aggregator "lnmax".

  Warning (Confident-GNMax): charging the argmax only on answered queries (Papernot et
  al. 2018) conditions on the answered mask, itself a random output of the private votes:
  an ex-post figure, not a worst-case guarantee (a query answered with probability 1/2
  can cost its full argmax divergence). The unconditional divergence is
  `confident_gnmax_rdp`; `answered_Q=None` charges every query both steps.
  """
  v, ans, lam = _check_accounting(votes_QxC, answered_Q, orders, threshold, sigma_threshold,
                                  aggregator)
  from dpjax.accounting import events
  dep = np.zeros_like(lam)
  gn = aggregator == "gnmax"
  answer = answer_event(sigma, aggregator)
  check = threshold_event(sigma_threshold) if threshold is not None else None
  per_dep = gnmax_rdp_data_dependent if gn else lnmax_rdp_data_dependent
  cap = np.inf if gn else _event_rdp(answer, lam)   # LNMax's bound is min(eps, .) only
  run = []   # the released sequence, query by query (its curve is the per-query sum)
  for q in range(v.shape[0]):
    if check is not None:
      run.append(check)
      dep += threshold_rdp_data_dependent(v[q], threshold, sigma_threshold, lam)
    if ans[q]:
      run.append(answer)
      dep += np.minimum(per_dep(v[q], sigma, lam), cap)
  indep = _event_rdp(events.ComposedEvent(tuple(run)) if run else None, lam)
  return PateRdp(lam, indep, dep, int(ans.sum()))


def _check_accounting(votes_QxC, answered_Q, orders, threshold, sigma_threshold, aggregator):
  """(votes float64[Q, C], answered bool[Q], orders float64[A]) after the shared checks."""
  v = check_votes(votes_QxC, "votes_QxC", ndim=2)
  lam = _validate.check_orders(orders)
  _validate.check_choice(aggregator, ("gnmax", "lnmax"), "aggregator")
  ans = (np.ones(v.shape[0], bool) if answered_Q is None
         else _validate.check_binary(answered_Q, "answered_Q", shape=(v.shape[0],)))
  if check_threshold(threshold, sigma_threshold)[0] is not None and aggregator != "gnmax":
    raise ValueError("the threshold check is defined for aggregator='gnmax' only")
  return v, ans, lam


@_validate.names_extreme_arguments
def pate_rdp_grouped(votes_QxC, answered_Q=None, *, sigma: float, orders,
                     threshold: float | None = None, sigma_threshold: float | None = None,
                     cache: dict | None = None) -> PateRdp:
  """`pate_rdp` of GNMax / Confident-GNMax, each DISTINCT vote histogram evaluated once
  (weighted by its count; equal up to rounding). `cache` (a dict) keeps curves across calls.

  Examples:
    >>> votes, orders = [[9, 1], [9, 1], [5, 5]], [2.0, 8.0]
    >>> a = pate_rdp_grouped(votes, sigma=2.0, orders=orders)
    >>> b = pate_rdp(votes, sigma=2.0, orders=orders)
    >>> bool(np.allclose(a.data_dependent, b.data_dependent, rtol=1e-12))
    True
  """
  v, ans, lam = _check_accounting(votes_QxC, answered_Q, orders, threshold, sigma_threshold,
                                  "gnmax")
  s = _validate.check_positive(sigma, "sigma")
  if cache is not None and not isinstance(cache, dict):
    raise TypeError(f"cache must be a dict or None, got {type(cache).__name__}")
  cache = {} if cache is None else cache
  rows, inverse = np.unique(v, axis=0, return_inverse=True)
  inverse = inverse.reshape(-1)
  n_all = np.bincount(inverse, minlength=rows.shape[0])
  n_ans = np.bincount(inverse[ans], minlength=rows.shape[0])
  indep = _event_rdp(aggregation_event(v.shape[0], int(ans.sum()), sigma=s,
                                       sigma_threshold=sigma_threshold), lam)
  dep = np.zeros_like(lam)
  for r, row in enumerate(rows):
    h = tuple(float(c) for c in row)
    if n_ans[r]:
      kg = ("gnmax", h, s, tuple(lam))
      if kg not in cache:
        cache[kg] = gnmax_rdp_data_dependent(row, s, lam)
      dep = dep + n_ans[r] * cache[kg]
    if threshold is not None:
      kt = ("threshold", h, float(threshold), float(sigma_threshold), tuple(lam))
      if kt not in cache:
        cache[kt] = threshold_rdp_data_dependent(row, threshold, sigma_threshold, lam)
      dep = dep + n_all[r] * cache[kt]
  return PateRdp(lam, indep, dep, int(ans.sum()))


@_validate.names_extreme_arguments(finite=False)
def confident_gnmax_rdp(votes_QxC, *, threshold: float, sigma_threshold: float,
                        sigma: float, orders) -> PateRdp:
  """RDP of Q Confident-GNMax queries without conditioning on what was answered.

  With v the top count, p(v) = Phi((v - T) / sigma_t), a neighbour's v' in {v - 1, v,
  v + 1} (<= M):

    exp((lambda - 1) D_lambda) = (1 - p(v))^lambda (1 - p(v'))^(1 - lambda)
        + p(v)^lambda p(v')^(1 - lambda) exp((lambda - 1) D_lambda(GNMax(D) || GNMax(D'))),

  the argmax term bounded by `gnmax_rdp_data_dependent` and lambda / sigma^2. The
  data-dependent curve depends on the private votes (`dpjax.pate_release`); the
  data-independent one is Q (lambda / (2 sigma_t^2) + lambda / sigma^2). num_answered=-1.

  Examples:
    >>> r = confident_gnmax_rdp([[240.0, 10.0], [130.0, 120.0]], threshold=200.0,
    ...                         sigma_threshold=150.0, sigma=40.0, orders=[8.0])
    >>> bool(r.data_dependent[0] < r.data_independent[0])
    True
  """
  v = check_votes(votes_QxC, "votes_QxC", ndim=2)
  lam = _validate.check_orders(orders)
  t = _validate.check_finite(threshold, "threshold")
  st = _validate.check_positive(sigma_threshold, "sigma_threshold")
  s = _validate.check_positive(sigma, "sigma")
  totals = v.sum(axis=1)
  if not np.allclose(totals, totals[0]):
    raise ValueError("every row of votes_QxC must sum to the same number of teachers")
  m = float(totals[0])
  try:
    per_ind = _event_rdp(aggregation_event(1, 1, sigma=s, sigma_threshold=st), lam)
  except OverflowError:   # sigma^2 or sigma_t^2 underflows: unbounded
    per_ind = np.full_like(lam, np.inf)
  dep = np.zeros_like(lam)
  a1 = lam - 1.0
  for row in v:
    top = float(row.max())
    g = gnmax_rdp_data_dependent(row, s, lam)
    lp, lp0 = stats.norm.logcdf((top - t) / st), stats.norm.logsf((top - t) / st)
    worst = np.full_like(lam, -np.inf)
    for vp in (top - 1.0, top, top + 1.0):
      if vp > m or vp < 0:
        continue
      lq, lq0 = stats.norm.logcdf((vp - t) / st), stats.norm.logsf((vp - t) / st)
      with np.errstate(over="ignore", invalid="ignore"):
        refuse = lam * lp0 - a1 * lq0
        answer = lam * lp - a1 * lq + a1 * g
      if vp == top:   # p(v') = p(v): exactly (1 - p) + p exp((lambda - 1) D_argmax)
        refuse = np.where(np.isnan(refuse), lp0, refuse)
        answer = np.where(np.isnan(answer), lp + a1 * g, answer)
      else:
        refuse = _resolve_tail_terms(refuse, lam, a1, top - t, vp - t)
        answer = _resolve_tail_terms(answer, lam, a1, top - t, vp - t)
      log_s = np.logaddexp(refuse, answer) / a1
      worst = np.maximum(worst, log_s)
    dep += np.minimum(np.maximum(worst, 0.0), per_ind)
  return PateRdp(lam, v.shape[0] * per_ind, dep, -1)


def _resolve_tail_terms(term, lam, a1, d, dp):
  """lambda log P(z) - (lambda - 1) log P(z') where both logs underflowed (NaN): to leading
  order -(lambda d^2 - (lambda - 1) dp^2) / (2 sigma_t^2), so -inf when clearly negative,
  else +inf (the data-independent bound is charged).
  """
  bad = np.isnan(term)
  if not np.any(bad):
    return term
  scale = max(abs(d), abs(dp))
  c = lam * (d / scale) ** 2 - a1 * (dp / scale) ** 2
  resolved = np.where(c > 1e-9 * lam, -np.inf, np.inf)
  return np.where(bad, resolved, term)


def epsilon(orders, rdp_values, delta: float) -> float:
  """(eps, delta) from an RDP curve via `dpjax.accounting.rdp.rdp_to_epsilon`."""
  from dpjax.accounting import rdp
  return rdp.rdp_to_epsilon(orders, rdp_values, delta)[0]


