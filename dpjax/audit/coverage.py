"""Coverage of the audit estimators on mechanisms whose exact privacy is known.

A bound at confidence 1 - alpha promises P[eps_lower > eps_true(delta)] <= alpha (GDP bounds:
for mu-GDP mechanisms). `measure` simulates A audits of a `Mechanism` and counts violations;
`Coverage.p_value` = P[Binomial(A, alpha) >= violations] (small = over-confident).
`overfit_estimator` is a deliberately invalid estimator the measurement must catch.
Shape letters: A audits, K trials per side, M one-run canaries, J thresholds.

References: Jagielski, Ullman & Oprea 2020 (arXiv:2006.07709); Nasr et al. 2023
(arXiv:2302.07956); Steinke, Nasr & Jagielski 2023 (arXiv:2305.08846); Balle & Wang 2018.

Examples:
  >>> mech = Mechanism("gaussian", 1.0)
  >>> round(mech.true_epsilon(1e-5), 4)
  4.3772
  >>> est = threshold_estimators(mech, trials=200, delta=1e-5)[1]       # the split
  >>> cov, = measure(est, mech, audits=50, trials=200, delta=1e-5,
  ...                rng=np.random.default_rng(0))
  >>> cov.estimator, cov.audits, cov.violations
  ('split', 50, 0)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Callable, Optional

import numpy as np
from scipy import special
from scipy import stats as sps

from dpjax import _validate
from dpjax.accounting import gdp
from dpjax.audit import one_run, one_run_fdp, parametric, score_audit, stats, thresholds

__all__ = ["MECHANISM_KINDS", "INPUTS", "Mechanism", "gaussian_at", "optimal_threshold",
           "optimal_guesses", "Estimator", "threshold_estimators", "one_run_estimators",
           "score_bounds_estimator", "overfit_estimator", "Coverage", "violation_p_value",
           "measure"]

MECHANISM_KINDS = ("gaussian", "randomized_response", "laplace")
INPUTS = ("two_sample", "one_run")
# A bound counts as exceeding the true eps only beyond this relative slack (the
# root finders behind the bounds and gaussian_epsilon stop within ~1e-10).
_SLACK = 1e-9
# Audits drawn at once: about this many scores per side in memory.
_CHUNK_SCORES = 2_000_000


# Mechanisms of known privacy.


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """A neighbour pair (OUT, IN) of score distributions with exactly known privacy.

  kind "gaussian": OUT N(0, 1), IN N(mu, 1), strength = mu, exactly mu-GDP.
  "randomized_response": a bit, 1 w.p. p = e^eps/(1+e^eps) under IN, 1 - p under OUT;
    eps(delta) = ln((p - delta) / (1 - p)).
  "laplace": OUT Laplace(0, 1/eps), IN Laplace(1, 1/eps); eps(delta) = eps + 2 ln(1 - delta).
  strength 0 (finite, >= 0) is the null mechanism of that kind: eps = 0 for every delta.

  Examples:
    >>> m = Mechanism("laplace", 2.0)
    >>> round(m.true_epsilon(1e-5), 6)                 # 2 + 2 ln(1 - 1e-5)
    1.99998
  """
  kind: str
  strength: float

  def __post_init__(self):
    _validate.check_choice(self.kind, MECHANISM_KINDS, "kind")
    _validate.check_range(self.strength, "strength", low=0.0, high=700.0)

  @property
  def null(self) -> bool:
    """True when IN and OUT scores have the same distribution (eps = 0)."""
    return self.strength == 0.0

  @property
  def is_gdp(self) -> bool:
    """True when the pair is mu-GDP for its known mu (Gaussian; any null is 0-GDP)."""
    return self.kind == "gaussian" or self.null

  @property
  def label(self) -> str:
    """A short human-readable name, e.g. 'Gaussian mu=1' or 'null (Laplace)'."""
    name = {"gaussian": "Gaussian", "randomized_response": "RR", "laplace": "Laplace"}[self.kind]
    if self.null:
      return f"null ({name})"
    return f"{name} {'mu' if self.kind == 'gaussian' else 'eps'}={self.strength:.4g}"

  @property
  def _p(self) -> float:
    return float(special.expit(self.strength))       # RR truth probability

  @property
  def _scale(self) -> float:
    return 1.0 if self.null else 1.0 / self.strength  # Laplace scale

  @property
  def _shift(self) -> float:
    return 0.0 if self.null else 1.0                  # Laplace / RR location under IN

  def true_epsilon(self, delta: float) -> float:
    """The exact eps(delta) >= 0 of the pair, delta in (0, 1) (0 for a null mechanism)."""
    delta = _validate.check_delta(delta)
    if self.null:
      return 0.0
    if self.kind == "gaussian":
      return gdp.gaussian_epsilon(delta, self.strength)
    if self.kind == "randomized_response":
      p = self._p
      return max(0.0, math.log(p - delta) - math.log1p(-p)) if p > delta else 0.0
    return max(0.0, self.strength + 2.0 * math.log1p(-delta))

  def sample(self, rng: np.random.Generator, included) -> np.ndarray:
    """Scores of independent runs, IN iff included[i]; float64 of included's shape."""
    _validate.check_instance(rng, np.random.Generator, "rng")
    inc = np.asarray(_validate.check_binary(included, "included"))
    if inc.size == 0:
      raise ValueError("included must not be empty")
    if self.kind == "gaussian":
      return rng.standard_normal(inc.shape) + self.strength * inc
    if self.kind == "randomized_response":
      p = self._p if not self.null else 0.5
      return (rng.random(inc.shape) < np.where(inc, p, 1.0 - p)).astype(np.float64)
    return rng.laplace(0.0, self._scale, inc.shape) + self._shift * inc

  def roc(self, thresholds_J) -> tuple[np.ndarray, np.ndarray]:
    """Exact error rates (fpr_J, fnr_J) = (P_OUT(score > t), P_IN(score <= t)), float64[J].

    Examples:
      >>> fpr, fnr = Mechanism("randomized_response", math.log(3)).roc([0.5])
      >>> float(fpr[0]), float(fnr[0])                  # p = 3/4
      (0.25, 0.25)
    """
    t = _validate.check_array(thresholds_J, "thresholds_J", ndim=1, allow_inf=True, min_size=1)
    if self.kind == "gaussian":
      return sps.norm.sf(t), sps.norm.cdf(t - self.strength)
    if self.kind == "randomized_response":
      q = 1.0 - (self._p if not self.null else 0.5)   # P_OUT(1) = P_IN(0)
      fpr = np.where(t < 0, 1.0, np.where(t < 1, q, 0.0))
      fnr = np.where(t < 0, 0.0, np.where(t < 1, q, 1.0))
      return fpr, fnr
    lap = sps.laplace(scale=self._scale)
    return lap.sf(t), lap.cdf(t - self._shift)

  def _center(self) -> float:
    """The point the IN and OUT densities are mirror images about."""
    return (self.strength if self.kind == "gaussian" else self._shift) / 2.0

  def _spread(self) -> float:
    return {"gaussian": 1.0, "randomized_response": 0.5, "laplace": self._scale}[self.kind]


def gaussian_at(epsilon: float, delta: float) -> Mechanism:
  """The Gaussian mechanism whose exact eps at `delta` is `epsilon` (mu from Balle-Wang).

  Examples:
    >>> m = gaussian_at(2.0, 1e-5)
    >>> round(m.true_epsilon(1e-5), 6)
    2.0
  """
  return Mechanism("gaussian", gdp.mu_for_epsilon(epsilon, delta))


def optimal_threshold(mechanism: Mechanism, trials: int, *, delta: float,
                      confidence: float = 0.95) -> float:
  """The threshold of the pair's best certifiable test (`best_certifiable` on its exact ROC).

  Examples:
    >>> optimal_threshold(Mechanism("randomized_response", 1.0), 100, delta=1e-5)
    0.5
  """
  _validate.check_instance(mechanism, Mechanism, "mechanism")
  trials = _validate.check_int(trials, "trials", 1, 2**53)   # counts exact in float64
  delta, confidence = _validate.check_delta_confidence(delta, confidence)
  if mechanism.kind == "randomized_response":
    grid = np.array([-0.5, 0.5, 1.5])
  else:
    grid = mechanism._center() + mechanism._spread() * np.linspace(-12.0, 12.0, 2401)
  fpr, fnr = mechanism.roc(grid)
  return float(thresholds.best_certifiable(fpr, fnr, trials, delta=delta, confidence=confidence,
                                           thresholds_J=grid).threshold)


def optimal_guesses(mechanism: Mechanism, num_canaries: int, *, delta: float,
                    confidence: float = 0.95) -> int:
  """Guesses k per side (IN on the top k scores, OUT on the bottom k), fixed in advance.

  Maximises `one_run.epsilon_lower_bound` at the expected counts (k = M (TPR + FPR) / 2, M TPR / 2
  correct per side) over thresholds t >= the pair's centre. Returns 1 <= k <= M / 2.

  Examples:
    >>> optimal_guesses(Mechanism("randomized_response", 1.0), 100, delta=1e-5)
    50
  """
  _validate.check_instance(mechanism, Mechanism, "mechanism")
  # The one-run bound's binomial terms run over the canaries (int64 / float64 arrays).
  m = _validate.check_size(num_canaries, "num_canaries", minimum=2, bytes_per_unit=32)
  delta, confidence = _validate.check_delta_confidence(delta, confidence)
  grid = mechanism._center() + mechanism._spread() * np.linspace(0.0, 8.0, 41)
  if mechanism.kind == "randomized_response":
    grid = np.array([0.5])
  fpr, fnr = mechanism.roc(grid)
  best = (-1.0, 1)
  for f, n in zip(fpr, fnr):
    k = int(min(m // 2, round(m * (1.0 - n + f) / 2.0)))
    if k < 1:
      continue
    v = int(min(2 * k, round(m * (1.0 - n))))
    eps = one_run.epsilon_lower_bound(num_canaries=m, num_guesses=2 * k, num_correct=v,
                                      delta=delta, confidence=confidence)
    if eps > best[0]:
      best = (eps, k)
  return best[1]


# Estimators.


@dataclasses.dataclass(frozen=True)
class Estimator:
  """An eps lower bound procedure, as `measure` calls it.

  bound: "two_sample": bound(scores_in_K, scores_out_K, delta, confidence); "one_run":
  bound(scores_M, included_M, delta, confidence) with fair inclusion bits. Returns a float, or
  {output: eps_lower} when `outputs` is set. gdp_only: outputs valid only for mu-GDP mechanisms.
  """
  name: str
  bound: Callable
  inputs: str = "two_sample"
  outputs: tuple = ()
  gdp_only: tuple = ()
  description: str = ""

  def __post_init__(self):
    _validate.check_instance(self.name, str, "name")
    _validate.check_callable(self.bound, "bound")
    _validate.check_choice(self.inputs, INPUTS, "inputs")
    _validate.check_instance(self.outputs, tuple, "outputs")
    _validate.check_instance(self.gdp_only, tuple, "gdp_only")

  def names(self) -> tuple:
    """The names of the results this estimator produces (one per output)."""
    return tuple(f"{self.name}.{o}" for o in self.outputs) if self.outputs else (self.name,)

  def _needs_gdp(self, full_name: str) -> bool:
    short = full_name[len(self.name) + 1:] if self.outputs else full_name
    return short in self.gdp_only or full_name in self.gdp_only


def threshold_estimators(mechanism: Mechanism, *, trials: int, delta: float,
                         confidence: float = 0.95) -> tuple[Estimator, ...]:
  """"fixed" (at `optimal_threshold`), "split", "split_both_signs", "bonferroni" (fixed + two-sign
  split) and "gdp" (mu-GDP only) from `dpjax.audit.thresholds`.
  """
  delta, confidence = _validate.check_delta_confidence(delta, confidence)
  t = optimal_threshold(mechanism, trials, delta=delta, confidence=confidence)
  fixed = thresholds.FixedThreshold(t)
  split1, split2 = thresholds.SplitThreshold(), thresholds.SplitThreshold(both_signs=True)
  policy = thresholds.Bonferroni((fixed, split2))

  def via(strategy):
    return lambda s_in, s_out, d, c: strategy.bound(s_in, s_out, delta=d,
                                                    confidence=c).epsilon_lower

  return (
      Estimator("fixed", via(fixed), description=f"FixedThreshold({t:.4g}) from the exact ROC"),
      Estimator("split", via(split1), description="SplitThreshold(), one sign"),
      Estimator("split_both_signs", via(split2), description="SplitThreshold(both_signs=True)"),
      Estimator("bonferroni", via(policy),
                description="Bonferroni(fixed, split both signs), alpha/2 each"),
      Estimator("gdp", lambda s_in, s_out, d, c: parametric.gdp_estimate(s_in, s_out, d, c).epsilon,
                gdp_only=("gdp",), description="gdp_estimate (Nasr et al. 2023), split threshold"),
  )


def one_run_estimators(mechanism: Mechanism, *, trials: int, delta: float,
                       confidence: float = 0.95) -> tuple[Estimator, ...]:
  """The one-run bounds played as the one-run game: M = 2 trials fair-coin canaries, k =
  `optimal_guesses` per side: "one_run", "fdp_one_run" ("dp"), "fdp_one_run_gdp" (mu-GDP only).
  """
  m = 2 * _validate.check_size(trials, "trials", bytes_per_unit=64)   # 2 canaries per trial
  delta, confidence = _validate.check_delta_confidence(delta, confidence)
  k = optimal_guesses(mechanism, m, delta=delta, confidence=confidence)

  def fdp(family):     # family None: the one-run (Steinke et al.) bound itself
    def bound(scores, included, d, c):
      r = one_run.audit(scores, included, num_positive_guesses=k, num_negative_guesses=k,
                        delta=d, confidence=c)
      if family is None:
        return r.epsilon_lower
      return one_run_fdp.fdp_epsilon_lower_bound(
          num_canaries=r.num_canaries, num_guesses=r.num_guesses, num_correct=r.num_correct,
          delta=d, family=family, confidence=c).epsilon_lower
    return bound

  return (
      Estimator("one_run", fdp(None), inputs="one_run",
                description=f"one_run.audit, {m} canaries, {k} + {k} guesses"),
      Estimator("fdp_one_run", fdp("dp"), inputs="one_run",
                description=f"fdp_epsilon_lower_bound(family='dp'), {k} + {k} guesses"),
      Estimator("fdp_one_run_gdp", fdp("gdp"), inputs="one_run", gdp_only=("fdp_one_run_gdp",),
                description=f"fdp_epsilon_lower_bound(family='gdp'), {k} + {k} guesses"),
  )


def score_bounds_estimator(threshold: Optional[float] = None) -> Estimator:
  """Every entry of `score_audit.score_bounds` as one estimator (a threshold adds the
  "clopper_pearson_fixed" entry)."""
  if threshold is not None:
    threshold = _validate.check_range(threshold, "threshold", allow_inf=True)
  outputs = tuple(n for n in score_audit.SCORE_BOUND_NAMES
                  if n != "clopper_pearson_fixed" or threshold is not None)

  def bound(s_in, s_out, d, c):
    res = score_audit.score_bounds(s_in, s_out, delta=d, confidence=c, threshold=threshold)
    return {k: v.epsilon_lower for k, v in res.items()}

  return Estimator("score_bounds", bound, outputs=outputs, gdp_only=("gdp", "fdp_one_run_gdp"),
                   description="score_audit.score_bounds, every entry")


def overfit_estimator() -> Estimator:
  """A deliberately INVALID estimator: the threshold chosen on the trials it is evaluated on."""
  def bound(s_in, s_out, d, c):
    t, sign = thresholds.choose_threshold(s_in, s_out, d, c, both_signs=True)
    return thresholds.FixedThreshold(t, sign).bound(s_in, s_out, delta=d,
                                                    confidence=c).epsilon_lower

  return Estimator("overfit (invalid)", bound,
                   description="threshold chosen on the trials it is evaluated on")


# Memoized pure functions of counts (same values, far fewer evaluations).


class _CpTable:
  """clopper_pearson(k, n, confidence) for integer k and one n, from a per-(n, c) table."""

  def __init__(self, original):
    self.original = original
    self.tables = {}

  def __call__(self, successes, trials, confidence=0.95):
    k, n = np.asarray(successes), np.asarray(trials)
    if self._tabulable(k, n, confidence):
      key = (int(n), float(confidence))
      if key not in self.tables:
        lo, hi = self.original(np.arange(int(n) + 1), int(n), confidence)
        self.tables[key] = (np.asarray(lo), np.asarray(hi))
      lo, hi = self.tables[key]
      idx = k.astype(np.int64)
      if idx.ndim == 0:
        return float(lo[idx]), float(hi[idx])
      return lo[idx], hi[idx]
    return self.original(successes, trials, confidence)

  @staticmethod
  def _tabulable(k, n, confidence) -> bool:
    """Integer counts 0 <= k <= n for one integer n, a float confidence in (0, 1)."""
    if n.ndim != 0 or n.dtype.kind not in "iuf" or k.dtype.kind not in "iuf" or k.size == 0:
      return False
    if not (np.isfinite(n) and n == np.floor(n) and 1 <= n <= 10**7):
      return False
    if not (isinstance(confidence, float) and 0.0 < confidence < 1.0):
      return False
    return bool(np.all(k == np.floor(k)) and k.min() >= 0 and k.max() <= n)


@contextlib.contextmanager
def _memoized_counts():
  """Memoizes stats.clopper_pearson and the one-run bounds for the duration."""
  saved = (stats.clopper_pearson, one_run.epsilon_lower_bound, one_run_fdp.fdp_epsilon_lower_bound)
  steinke = functools.lru_cache(maxsize=None)(
      lambda m, r, v, d, c: saved[1](num_canaries=m, num_guesses=r, num_correct=v, delta=d,
                                     confidence=c))
  fdp = functools.lru_cache(maxsize=None)(
      lambda m, r, v, d, f, c: saved[2](num_canaries=m, num_guesses=r, num_correct=v, delta=d,
                                        family=f, confidence=c))
  stats.clopper_pearson = _CpTable(saved[0])
  one_run.epsilon_lower_bound = lambda *, num_canaries, num_guesses, num_correct, delta=0.0, \
      confidence=0.95: steinke(num_canaries, num_guesses, num_correct, delta, confidence)
  one_run_fdp.fdp_epsilon_lower_bound = lambda *, num_canaries, num_guesses, num_correct, delta, \
      family="dp", confidence=0.95: fdp(num_canaries, num_guesses, num_correct, delta, family,
                                        confidence)
  try:
    yield
  finally:
    stats.clopper_pearson, one_run.epsilon_lower_bound, one_run_fdp.fdp_epsilon_lower_bound = saved


# Measuring.


@dataclasses.dataclass(frozen=True)
class Coverage:
  """How often one estimator's bound exceeded the true eps over A simulated audits.

  assumption_met: False for a GDP-only estimator on a non-GDP mechanism (reported, not a failure).
  violations: audits with epsilon_lower > true_epsilon (beyond 1e-9 relative); positives: > 0.
  violation_interval: two-sided 95% Clopper-Pearson; epsilon_lower_A: float64[A].
  """
  estimator: str
  mechanism: str
  kind: str
  strength: float
  audits: int
  trials: int
  delta: float
  confidence: float
  true_epsilon: float
  assumption_met: bool
  violations: int
  positives: int
  violation_interval: tuple[float, float]
  p_value: float
  median_epsilon_lower: float
  epsilon_lower_A: np.ndarray = dataclasses.field(repr=False, compare=False)

  @property
  def violation_rate(self) -> float:
    return self.violations / self.audits

  @property
  def positive_rate(self) -> float:
    return self.positives / self.audits

  @property
  def tightness(self) -> Optional[float]:
    """median bound / true eps (None on a null mechanism)."""
    return None if self.true_epsilon == 0 else self.median_epsilon_lower / self.true_epsilon

  def within_nominal(self, level: float = 1e-3) -> bool:
    """True unless the violation rate is significantly above alpha (p_value < level)."""
    level = _validate.check_probability(level, "level", open_low=True, open_high=True)
    return self.p_value >= level

  def record(self) -> dict:
    """A JSON-ready dict of the scalar fields and derived rates."""
    d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
         if f.name != "epsilon_lower_A"}
    d["violation_interval"] = list(self.violation_interval)
    d.update(violation_rate=self.violation_rate, positive_rate=self.positive_rate,
             tightness=self.tightness)
    return d


def violation_p_value(violations: int, audits: int, alpha: float) -> float:
  """P[Binomial(audits, alpha) >= violations], the one-sided test of rate <= alpha.

  Examples:
    >>> round(violation_p_value(1, 10, 0.05), 4)            # 1 - 0.95^10
    0.4013
  """
  a = _validate.check_int(audits, "audits")
  v = _validate.check_int(violations, "violations", minimum=0, maximum=a)
  alpha = _validate.check_probability(alpha, "alpha", open_low=True, open_high=True)
  return float(sps.binom.sf(v - 1, a, alpha)) if v > 0 else 1.0


def measure(estimator, mechanism: Mechanism, *, audits: int, trials: int, delta: float,
            confidence: float = 0.95, rng: np.random.Generator) -> list[Coverage]:
  """Runs A independent simulated audits and counts bounds above the true eps.

  Each audit draws K IN and K OUT scores (two-sample) or M = 2K fair-coin canaries (one-run);
  every estimator sees the same audits and a seed fixes the numbers. Returns one `Coverage` per
  result name of each estimator, in order.
  """
  try:
    ests = (estimator,) if isinstance(estimator, Estimator) else tuple(estimator)
  except TypeError:
    ests = ()
  if not ests or not all(isinstance(e, Estimator) for e in ests):
    raise TypeError(f"estimator must be an Estimator or a non-empty sequence of them, got "
                    f"{estimator!r:.80}")
  _validate.check_instance(mechanism, Mechanism, "mechanism")
  a = _validate.check_size(audits, "audits", bytes_per_unit=8, units=16)
  k = _validate.check_size(trials, "trials", minimum=2, bytes_per_unit=8, units=64)
  delta, confidence = _validate.check_delta_confidence(delta, confidence)
  if 1.0 - confidence == 1.0:
    raise ValueError(f"confidence = {confidence!r} is too small: alpha = 1 - confidence "
                     "rounds to 1 in float64")
  _validate.check_instance(rng, np.random.Generator, "rng")
  eps_true = mechanism.true_epsilon(delta)
  names = [n for e in ests for n in e.names()]
  out = {n: np.empty(a) for n in names}
  any_one_run = any(e.inputs == "one_run" for e in ests)
  any_two = any(e.inputs == "two_sample" for e in ests)
  chunk = max(1, _CHUNK_SCORES // k)
  with _memoized_counts():
    for start in range(0, a, chunk):
      n = min(chunk, a - start)
      s_in = mechanism.sample(rng, np.ones((n, k), bool)) if any_two else None
      s_out = mechanism.sample(rng, np.zeros((n, k), bool)) if any_two else None
      if any_one_run:
        bits = rng.random((n, 2 * k)) < 0.5
        s_can = mechanism.sample(rng, bits)
      for i in range(n):
        for e in ests:
          if e.inputs == "two_sample":
            r = e.bound(s_in[i], s_out[i], delta, confidence)
          else:
            r = e.bound(s_can[i], bits[i], delta, confidence)
          vals = [r[o] for o in e.outputs] if e.outputs else [r]
          for name, v in zip(e.names(), vals):
            out[name][start + i] = float(v)
  alpha = 1.0 - confidence
  results = []
  for e in ests:
    for name in e.names():
      eps_a = out[name]
      viol = int(np.sum(eps_a > eps_true + _SLACK * max(1.0, eps_true)))
      lo, hi = stats.clopper_pearson(viol, a, 0.95)
      results.append(Coverage(
          estimator=name, mechanism=mechanism.label, kind=mechanism.kind,
          strength=float(mechanism.strength), audits=a, trials=k, delta=delta,
          confidence=confidence, true_epsilon=float(eps_true),
          assumption_met=bool(mechanism.is_gdp or not e._needs_gdp(name)),
          violations=viol, positives=int(np.sum(eps_a > 0)), violation_interval=(lo, hi),
          p_value=violation_p_value(viol, a, alpha),
          median_epsilon_lower=float(np.median(eps_a)), epsilon_lower_A=eps_a))
  return results
