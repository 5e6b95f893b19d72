"""Every estimator's eps lower bound on one pair of score samples (`score_bounds`).

From K_in IN and K_out OUT scores (higher = IN; >= 2 per side, in an order independent of the
scores): the threshold tests, the mu-GDP estimate and the one-run tests on the trials taken as
canaries, each a `ScoreBound`. Shape letters: K trials (models).

References: Nasr et al. 2023 (arXiv:2302.07956); Steinke, Nasr & Jagielski 2023
(arXiv:2305.08846); Mahloujifar, Melis & Chaudhuri 2025 (arXiv:2410.22235).

Examples:
  >>> b = score_bounds(np.ones(50), np.zeros(50), delta=1e-5)
  >>> list(b) == [n for n in SCORE_BOUND_NAMES if n != "clopper_pearson_fixed"]
  True
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import tqdm

from dpjax import _validate
from dpjax.audit import parametric, stats
from dpjax.audit import thresholds as thresholds_lib

SCORE_BOUND_NAMES = ("clopper_pearson", "clopper_pearson_bonferroni", "clopper_pearson_fixed",
                     "gdp", "one_run", "fdp_one_run", "fdp_one_run_gdp", "best")
_GDP_ONLY = "valid only if the mechanism is mu-GDP (Gaussian trade-off curve); "
_MAX_LEVELS = 8        # quantile levels 2^-1 .. 2^-8 per side and sign (declared set)


@dataclasses.dataclass(frozen=True)
class ScoreBound:
  """One estimator's eps lower bound: with probability >= `confidence` (alone) the mechanism is not
  (eps, delta)-DP for eps < `epsilon_lower` if `assumptions` hold; `details` is strict JSON.
  """
  name: str
  epsilon_lower: float
  assumptions: str
  details: dict
  confidence: float
  delta: float


def _json_number(x) -> float | str | None:
  """A float for strict JSON: finite as is, +-inf as "inf" / "-inf", NaN as None."""
  x = float(x)
  if math.isnan(x):
    return None
  return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _threshold_details(b: thresholds_lib.ThresholdBound) -> dict:
  return {"threshold": _json_number(b.threshold), "sign": int(b.sign), **b.counts(),
          "selection_trials": list(b.selection_trials), "strategy": b.strategy}


def _declared_thresholds(sel_in, sel_out) -> list[tuple[float, int]]:
  """(threshold, sign) at the (1 - 2^-i) quantiles of s * OUT and 2^-i quantiles of s * IN of the
  selection scores, per sign s, i = 1..L, 2^L <= the selection size, L <= 8.
  """
  out = []
  for sign in (1, -1):
    a, b = np.sort(sign * sel_in), np.sort(sign * sel_out)
    for i in range(1, _MAX_LEVELS + 1):
      if 2**i > min(a.size, b.size):
        break
      out.append((float(b[int(math.ceil(b.size * (1 - 2.0**-i))) - 1]), sign))
      out.append((float(a[int(math.floor(a.size * 2.0**-i))]), sign))
  return sorted(set(out))


def _one_run_bound(name, s_in, s_out, delta, confidence, seed) -> ScoreBound:
  from dpjax.audit import one_run  # pylint: disable=g-import-not-at-top
  n = min(s_in.size, s_out.size)          # canary i: IN or OUT score i by a fair coin
  bits = np.random.default_rng(seed).random(n) < 0.5
  scores = np.where(bits, s_in[:n], s_out[:n])
  method = {"one_run": "steinke", "fdp_one_run": "fdp", "fdp_one_run_gdp": "fdp_gdp"}[name]
  res = one_run.audit_declared_guesses(scores, bits, delta=delta, confidence=confidence,
                                       method=method)
  counts, per = list(res.guess_counts), res.confidence_per_test
  best = (res.epsilon_lower, res.num_guesses, res.num_correct, res.mu_lower)
  base = ("trials as one-run canaries: canary i is IN score i or OUT score i by a fair "
          f"coin (seed {seed}) drawn independently of the scores; guesses IN for the top r/2 "
          "and OUT for the bottom r/2, r over the declared set "
          f"{counts} with a union bound (confidence {per:g} each); valid when the trials "
          "are independent runs in an order that does not depend on the scores")
  if name == "one_run":
    text = "Steinke, Nasr & Jagielski 2023 test of (eps, delta)-DP; " + base
  elif name == "fdp_one_run":
    text = ("Mahloujifar, Melis & Chaudhuri 2025 test with the (eps, delta)-DP trade-off "
            "function; " + base)
  else:
    text = (_GDP_ONLY + "Mahloujifar, Melis & Chaudhuri 2025 test with f = G_mu, largest "
            "mu rejected converted to eps at delta; " + base)
  details = {"num_canaries": int(n), "num_guesses": int(best[1]), "num_correct": int(best[2]),
             "guess_counts": [int(c) for c in counts], "seed": int(seed),
             "confidence_per_test": per}
  if name == "fdp_one_run_gdp":
    details["mu_lower"] = _json_number(best[3])
  return ScoreBound(name, best[0], text, details, confidence, delta)


def _cp(name, strategy, s_in, s_out, delta, confidence) -> ScoreBound:
  b = strategy.bound(s_in, s_out, delta=delta, confidence=confidence)
  return ScoreBound(name, b.epsilon_lower, "Clopper-Pearson (eps, delta) bound; " + b.assumptions,
                    _threshold_details(b), confidence, delta)


def _cp_declared(s_in, s_out, delta, confidence, thresholds) -> ScoreBound:
  if thresholds is None:
    h_in, h_out = s_in.size // 2, s_out.size // 2
    tests = _declared_thresholds(s_in[:h_in], s_out[:h_out])
    e_in, e_out, sel = s_in[h_in:], s_out[h_out:], (h_in, h_out)
    how = ("thresholds at quantile levels 2^-i of the first half of each side (both signs), "
           "every one evaluated on the second half")
  else:
    tests = [(float(t), 1) for t in thresholds]
    e_in, e_out, sel = s_in, s_out, (0, 0)
    how = "thresholds declared before seeing the scores, evaluated on every trial"
  if not tests:
    tests = [(float(np.median(np.r_[s_in[:1], s_out[:1]])), 1)]
  per = thresholds_lib.bonferroni_confidence(confidence, len(tests))
  eps_T = np.full(len(tests), -1.0)
  for sign in (1, -1):
    idx = [i for i, (_, sg) in enumerate(tests) if sg == sign]
    if idx:
      fp, fn = stats.error_counts(sign * e_in, sign * e_out, np.array([tests[i][0] for i in idx]))
      eps_T[idx] = stats.epsilon_lower_bound(fp, e_out.size, fn, e_in.size, delta, per)
  t, sign = tests[int(np.argmax(eps_T))]
  best_b = dataclasses.replace(
      thresholds_lib.FixedThreshold(t, sign).bound(e_in, e_out, delta=delta, confidence=per),
      selection_trials=sel, strategy="declared", assumptions=how)
  details = {**_threshold_details(best_b), "num_tests": len(tests),
             "confidence_per_test": per, "strategy": "bonferroni"}
  return ScoreBound("clopper_pearson_bonferroni", best_b.epsilon_lower,
                    f"Clopper-Pearson (eps, delta) bound, union bound over {len(tests)} tests "
                    f"at confidence {per:g} each; {how}; valid when the order of the trials "
                    "does not depend on the scores", details, confidence, delta)


def _gdp(s_in, s_out, delta, confidence) -> ScoreBound:
  g = parametric.gdp_estimate(s_in, s_out, delta, confidence)
  return ScoreBound("gdp", g.epsilon,
                    _GDP_ONLY + "Nasr et al. 2023: Clopper-Pearson upper limits on FPR and FNR "
                    "(jointly at the confidence) give mu >= Phi^-1(1 - FPR) - Phi^-1(FNR), "
                    "eps of that mu at delta; threshold chosen on the first half of each side, "
                    "evaluated on the second; a negative mu gives 0",
                    {"mu_lower": _json_number(g.mu), "threshold": _json_number(g.threshold)},
                    confidence, delta)


@_validate.names_extreme_arguments
def score_bounds(scores_in_K, scores_out_K, *, delta: float, confidence: float = 0.95,
                 claimed_epsilon: Optional[float] = None, threshold: Optional[float] = None,
                 thresholds: Optional[Sequence[float]] = None,
                 seed: int = 0, progress: bool = False) -> dict[str, ScoreBound]:
  """Every estimator's eps lower bound on one pair of score samples.

  Each entry is valid at `confidence` alone; their maximum is NOT. "best" is the valid maximum:
  the assumption-free entries rerun at 1 - (1 - confidence) / k each (union bound). Entries:
  "clopper_pearson" (`SplitThreshold(both_signs=True)`), "clopper_pearson_bonferroni" (union over
  `thresholds`, else over quantile levels 2^-i of the first halves), "clopper_pearson_fixed" (only
  with `threshold`), "gdp" (Nasr et al. 2023; mu-GDP only), "one_run" (Steinke et al. 2023),
  "fdp_one_run" / "fdp_one_run_gdp" (Mahloujifar et al. 2025; the latter mu-GDP only), "best"
  (all but the mu-GDP ones). With `claimed_epsilon`, details record "falsifies_claim".
  Cost O(K log K) per estimator.

  Examples:
    >>> rng = np.random.default_rng(0)
    >>> b = score_bounds(rng.normal(size=1000), rng.normal(size=1000), delta=1e-5)
    >>> sorted(b)[:3], b["clopper_pearson"].epsilon_lower   # null scores: nothing
    (['best', 'clopper_pearson', 'clopper_pearson_bonferroni'], 0.0)
  """
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  delta = _validate.check_delta(delta)
  confidence = _validate.check_confidence(confidence)
  if s_in.size < 2 or s_out.size < 2:
    raise ValueError("scores_in_K and scores_out_K need >= 2 trials each, got "
                     f"{s_in.size} and {s_out.size}")
  if claimed_epsilon is not None:
    claimed_epsilon = _validate.check_epsilon(claimed_epsilon, "claimed_epsilon", allow_zero=True)
  if threshold is not None:
    threshold = _validate.check_range(threshold, "threshold", allow_inf=True)
  if thresholds is not None:
    thresholds = _validate.check_array(thresholds, "thresholds", ndim=1, allow_inf=True,
                                       min_size=1).tolist()
  seed = _validate.check_int(seed, "seed", minimum=0)
  progress = _validate.check_bool(progress, "progress")

  free = {
      "clopper_pearson": lambda c: _cp("clopper_pearson", thresholds_lib.SplitThreshold(
          both_signs=True), s_in, s_out, delta, c),
      "clopper_pearson_bonferroni": lambda c: _cp_declared(s_in, s_out, delta, c, thresholds),
  }
  if threshold is not None:
    free["clopper_pearson_fixed"] = lambda c: _cp("clopper_pearson_fixed", thresholds_lib.
                                                  FixedThreshold(threshold), s_in, s_out, delta, c)
  free["one_run"] = lambda c: _one_run_bound("one_run", s_in, s_out, delta, c, seed)
  free["fdp_one_run"] = lambda c: _one_run_bound("fdp_one_run", s_in, s_out, delta, c, seed)
  bar = tqdm.tqdm(total=2 * len(free) + 2, desc="score bounds", unit="estimator",
                  disable=not progress)

  def step(name, fn, *args):
    bar.set_postfix_str(name)
    value = fn(*args)
    bar.update()
    return value

  with bar:
    out = {name: step(name, fn, confidence) for name, fn in free.items()}
    out["gdp"] = step("gdp", _gdp, s_in, s_out, delta, confidence)
    out["fdp_one_run_gdp"] = step("fdp_one_run_gdp", _one_run_bound, "fdp_one_run_gdp", s_in,
                                  s_out, delta, confidence, seed)
    per = thresholds_lib.bonferroni_confidence(confidence, len(free))
    parts = {name: step(name, fn, per) for name, fn in free.items()}
  top = max(parts, key=lambda k: parts[k].epsilon_lower)
  out["best"] = ScoreBound(
      "best", parts[top].epsilon_lower,
      f"union bound over {len(parts)} estimators ({', '.join(parts)}) at confidence "
      f"{per:g} each; the largest reported; each part's assumptions hold",
      {"estimator": top, "confidence_per_test": per,
       "parts": {k: _json_number(v.epsilon_lower) for k, v in parts.items()}}, confidence,
      delta)
  if claimed_epsilon is not None:
    for k, v in out.items():
      v.details["claimed_epsilon"] = claimed_epsilon
      v.details["falsifies_claim"] = bool(v.epsilon_lower > claimed_epsilon)
  return {k: out[k] for k in SCORE_BOUND_NAMES if k in out}
