"""A short white-box audit of the DP-SGD engine that fails when its guarantee regresses.

`check_claim` trains R logistic regressions through the engine's components (or those passed)
via `run.train`; `ClaimCheck.check()` raises when the eps lower bound exceeds the exact eps of
the claim. Canary j is a record x = s e_{F+j} (label 0, F = 4 filler features) IN or OUT by
`runner.inclusion_bits`; from w = 0 at learning rate 1e-6 its gradient x / 2 (norm s/2 > C) is
clipped to exactly C e_{F+j}, so coordinate F+j of each update is o_t = B u_t / C = b_t +
sigma z_t: the R K pairs are independent trials of the exact likelihood-ratio test, against
thresholds declared from the claim (union bound). A correct engine is falsified with probability
<= 1 - confidence. Blind to: bugs in other clipping paths unless passed as `clipping=`, a wrong
public denominator, bugs that add privacy. Regressions: `variants.REGRESSIONS`.
Shape letters: R runs (models), K canaries, T steps, N = num_filler + K records.
References: Nasr et al. 2021 (arXiv:2101.04535).

Examples (in a test suite; about 15 s of CPU):
  >>> c = check_claim(jax.random.key(0)).check()     # doctest: +SKIP
  >>> c.num_in, c.num_out, c.falsified               # doctest: +SKIP
  (262144, 262144, False)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from dpjax import _validate

# Filler features (the canaries live in the K features after them).
_FILLER_FEATURES = 4
# Params stay at w = 0 to ~1e-6: every canary's gradient is s e_j / 2, clipped to C e_j.
_LEARNING_RATE = 1e-6


def default_claim():
  """The guard's default claim: q = 1/2, T = 10, eps = 2 (RDP sigma), delta = 1e-5, C = 1.

  Examples:
    >>> c = default_claim()
    >>> c.sampling_prob, c.num_steps, round(c.noise_multiplier, 2)
    (0.5, 10, 3.72)
  """
  from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
  return dpsgd.DpSgdConfig(dataset_size=1024, sampling_prob=0.5, num_steps=10,
                           l2_clip_norm=1.0, delta=1e-5).calibrate(2.0)


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
  """The result of `check_claim`: the certified bound (union over the declared thresholds), the
  claim's exact (PLD) and accountant eps, the bound a correct engine should get (expected
  counts), falsified = epsilon_lower > exact_epsilon, IN / OUT trial counts, and the trained config.
  """
  epsilon_lower: float
  exact_epsilon: float
  claimed_epsilon: float
  expected_epsilon_lower: float
  falsified: bool
  num_in: int
  num_out: int
  confidence: float
  bound: Any
  config: Any

  def check(self) -> "ClaimCheck":
    """Raises AssertionError if the claim is falsified; returns self otherwise."""
    if self.falsified:
      raise AssertionError(
          f"DP-SGD guard: the audit certifies eps >= {self.epsilon_lower:.3f} at "
          f"{self.confidence:g} confidence, above the exact eps {self.exact_epsilon:.3f} of "
          f"the claim (q={self.config.sampling_prob:g}, sigma={self.config.noise_multiplier:.4g}, "
          f"T={self.config.num_steps}, delta={self.config.delta:g}); a correct engine "
          f"gives about {self.expected_epsilon_lower:.3f}")
    return self

  def to_json(self) -> dict:
    return {"epsilon_lower": self.epsilon_lower, "exact_epsilon": self.exact_epsilon,
            "claimed_epsilon": self.claimed_epsilon,
            "expected_epsilon_lower": self.expected_epsilon_lower, "falsified": self.falsified,
            "num_in": self.num_in, "num_out": self.num_out, "confidence": self.confidence,
            "tests": self.bound.tests()}


def declared_thresholds(sampling_prob: float, noise_multiplier: float, num_steps: int,
                        num_out: int) -> tuple[np.ndarray, np.ndarray]:
  """Thresholds on the white-box score fixed from the claimed (q, sigma, T) alone.

  `thresholds.declared_ladder` on the claimed LLR law: the smallest grid value L_j with
  P_OUT(L >= L_j) <= 2^-i, i = 1, 2, ... while num_out 2^-i >= 4 (num_out >= 8).
  Returns (thresholds float64[k], their false-positive rates 2^-i).

  Examples:
    >>> t, fpr = declared_thresholds(0.5, 3.0, 4, 64)
    >>> fpr.tolist(), bool(np.all(np.diff(t) > 0))
    ([0.5, 0.25, 0.125, 0.0625], True)
  """
  from dpjax.audit import canary, thresholds  # pylint: disable=g-import-not-at-top
  n = _validate.check_int(num_out, "num_out", minimum=8)
  dist = canary.llr_distribution(sampling_prob, noise_multiplier, num_steps)
  survival = np.cumsum(dist.pmf_out_J[::-1])[::-1]          # P_out(L >= grid_j)
  return thresholds.declared_ladder(dist.grid_J, np.minimum(survival, 1.0), n)


def check_claim(key: jax.Array, claim=None, *, num_runs: int = 512, num_canaries: int = 1024,
                num_filler: int = 16, canary_scale: float = 100.0, confidence: float = 0.99,
                progress: bool = False, variant: str = "correct", **train_kwargs
                ) -> ClaimCheck:
  """Audits the engine (or the components passed) against `claim` (see the module docstring).

  claim: a DpSgdConfig (default `default_claim()`; example level), whose dataset_size and
  learning_rate the guard replaces. R >= 2, R K / 2 >= 8; canary_scale s > 2 C; variant: one of
  `variants.VARIANTS` built on the claim; **train_kwargs: sampler, clipping, privatizer, perf.
  Raises ValueError on bad input, a claim without noise, or a diverged training.
  """
  from dpjax import accounting, dpsgd, models  # pylint: disable=g-import-not-at-top
  from dpjax.audit import canary, run, runner, thresholds, variants  # pylint: disable=g-import-not-at-top

  key = _validate.check_key(key)
  claim = default_claim() if claim is None else claim
  _validate.check_instance(claim, dpsgd.DpSgdConfig, "claim")
  if claim.privacy_unit != "example":
    raise ValueError("check_claim audits example-level DP-SGD; got privacy_unit="
                     f"{claim.privacy_unit!r}")
  r = _validate.check_int(num_runs, "num_runs", minimum=2)
  k = _validate.check_int(num_canaries, "num_canaries")
  f = _validate.check_int(num_filler, "num_filler", minimum=2)
  _validate.check_size(r * k, "num_runs * num_canaries")
  # The records: float32 features [f + k, _FILLER_FEATURES + k] and an R x (f + k) mask.
  _validate.check_size(f + k, "num_filler + num_canaries",
                       bytes_per_unit=4 * (_FILLER_FEATURES + k) + r)
  if (r // 2) * k < 8:
    raise ValueError(f"num_runs // 2 * num_canaries must be >= 8 (trials per side), got "
                     f"{(r // 2) * k}")
  c = float(claim.l2_clip_norm)
  if not math.isfinite(c):
    raise ValueError("the claim must clip (finite l2_clip_norm)")
  s = _validate.check_positive(canary_scale, "canary_scale")
  if not s <= float(np.finfo(np.float32).max):   # a feature of the float32 records
    raise ValueError(f"canary_scale must fit float32 (at most 3.4e38), got {s:g}")
  if not s > 2.0 * c:
    raise ValueError(f"canary_scale must exceed 2 * l2_clip_norm = {2.0 * c:g} (the canary's "
                     f"gradient norm is canary_scale / 2), got {s:g}")
  confidence = _validate.check_confidence(confidence)
  if "optimizer" in train_kwargs:
    raise ValueError("optimizer is set by check_claim (plain SGD at the guard's learning rate)")
  train_kwargs.setdefault("perf", dpsgd.PerformanceFlags(progress=progress))
  sigma = float(claim.noise_multiplier)
  if not sigma > 0:
    raise ValueError("the claim has no noise (sigma = 0): nothing to check")
  n = f + k
  cfg = dataclasses.replace(claim, dataset_size=n, learning_rate=_LEARNING_RATE)
  q, t_steps, delta = float(cfg.sampling_prob), int(cfg.num_steps), float(cfg.delta)

  d = _FILLER_FEATURES + k
  model = models.logistic_regression(d)
  var = variants.variant(variant, cfg, model)
  for name, component in var.components.items():
    if name in train_kwargs:
      raise ValueError(f"{name} is set both by variant={variant!r} and by the keyword {name}=")
    train_kwargs[name] = component
  cfg = var.config
  k_data, k_bits, k_train = jax.random.split(key, 3)
  x = np.zeros((n, d), np.float32)
  x[:f, :_FILLER_FEATURES] = np.asarray(jax.random.normal(k_data, (f, _FILLER_FEATURES)))
  x[f + np.arange(k), _FILLER_FEATURES + np.arange(k)] = s
  y = np.zeros((n,), np.int32)
  y[: f // 2] = 1                     # filler labels; canaries have label 0
  included = runner.inclusion_bits(k_bits, r, k)               # bool[R, K]
  design = run.canary_design(x[:f], y[:f], r, records=(x[f:], y[f:], included))
  out = run.train(k_train, design, cfg, model, observe_fn=_observe_canaries,
                  components=train_kwargs)
  scores = canary.white_box_llr(out.observations, expected_batch_size=cfg.expected_batch_size,
                                l2_clip_norm=c, sampling_prob=q, noise_multiplier=sigma)
  s_in, s_out = scores[included], scores[~included]
  tests, _ = declared_thresholds(q, sigma, t_steps, s_out.size)
  policy = thresholds.Bonferroni(tuple(thresholds.FixedThreshold(float(t)) for t in tests))
  bound = policy.bound(s_in, s_out, delta=delta, confidence=confidence)
  exact = float(accounting.dpsgd_epsilon(sigma, q, t_steps, delta, accountant="pld"))
  fpr, fnr = canary.llr_distribution(q, sigma, t_steps).error_rates(tests)
  expected = thresholds.best_certifiable(
      fpr, fnr, s_out.size, trials_in=s_in.size, delta=delta, integer_counts=True,
      confidence=thresholds.bonferroni_confidence(confidence, len(tests))).epsilon
  return ClaimCheck(float(bound.epsilon_lower), exact, float(cfg.epsilon()), expected,
                    bool(bound.epsilon_lower > exact), int(s_in.size), int(s_out.size),
                    confidence, bound, cfg)


def _observe_canaries(update):
  """The canary features' coordinates of a privatized update: float32[K]."""
  return update["w"][_FILLER_FEATURES:]
