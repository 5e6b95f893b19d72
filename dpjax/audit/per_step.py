"""Per-step white-box audit of DP-SGD: each step's privatized update is a trial.

With a Dirac gradient canary (C e_j on a coordinate no record touches) the canary's
coordinate of step t's update, in units of C / B (`per_step_run.step_observations`), is
for DP-SGD as claimed o_t = b_t + sigma z_t, b_t ~ Bernoulli(q) if the canary is IN, 0 if
OUT, with fresh noise and Poisson bits each step: the T steps are i.i.d. copies of ONE
step pair (OUT N(0, s^2), IN (1 - q) N(0, s^2) + q N(1, s^2)), so M runs with K canaries
give M K T per-step trials, far more than the M K run-level trials of `run.evaluate`.

(a) `step_estimate`: PARAMETRIC; assumes the (subsampled) Gaussian family with q known
    (OUT N(c, s^2), IN (1 - q) N(c, s^2) + q N(c + a, s^2)); sigma_eff = s / a composed
    over T (GDP at q = 1, the PLD accountant at q < 1), a point estimate and a one-sided
    lower limit (normal approximation). Not a bound outside the family.
(b) `composed_bound`: no parametric assumption. Clopper-Pearson upper limits (Bonferroni
    over J thresholds fixed in advance) on FPR_j = P_OUT(o > tau_j), FNR_j = P_IN(o <=
    tau_j) lie above the step's convex trade-off curve, so below their lower convex
    envelope: a finite channel Q the step dominates (Blackwell). If the T steps are i.i.d.
    copies of one step pair they dominate Q^T, whose eps(delta) `composed_epsilon_lower`
    bounds from below (losses rounded down, mass dropped). Steps that are not i.i.d.
    (reused noise, a model-dependent coordinate) leave only run-level bounds.

Coverage of both: `per_step_run.step_mechanism`.

Shape letters: M models (runs), T steps, K canaries per run, J thresholds.

References: Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023,
https://arxiv.org/abs/2302.07956; Dong, Roth & Su 2019, https://arxiv.org/abs/1905.02383.

Examples:
  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> st = step_statistics(1 + 2 * rng.standard_normal(100_000), 2 * rng.standard_normal(100_000),
  ...                      design_thresholds(1.0, 2.0))
  >>> est = step_estimate(st, sampling_prob=1.0, num_steps=10, delta=1e-5)
  >>> exact = gdp.gaussian_epsilon(1e-5, 10 ** 0.5 / 2)  # mu = sqrt(T) / sigma
  >>> bool(0.95 * exact < est.epsilon_point < 1.05 * exact), bool(est.epsilon < exact)
  (True, True)
  >>> bound = composed_bound(st, num_steps=10, delta=1e-5)
  >>> bool(0 < bound.epsilon_lower < est.epsilon_point)
  True
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from dpjax import _validate, accounting
from dpjax.accounting import gdp
from dpjax.audit import stats

__all__ = ["ASSUMPTION_GDP", "ASSUMPTION_SUBSAMPLED_GAUSSIAN", "ASSUMPTION_IID_STEPS",
           "StepStatistics", "step_statistics", "observation_statistics", "design_thresholds",
           "StepEstimate", "family_epsilon", "step_estimate", "ComposedBound", "composed_bound",
           "composed_epsilon_lower"]

ASSUMPTION_GDP = (
    "Gaussian step (q = 1): each step's canary coordinate is OUT N(c, s^2), IN N(c + a, "
    "s^2), i.i.d. over steps; mu = sqrt(T) a / s composed exactly (GDP); lower limit by a "
    "normal approximation of the moment estimator")
ASSUMPTION_SUBSAMPLED_GAUSSIAN = (
    "Poisson-subsampled Gaussian step with q known from the config: OUT N(c, s^2), IN "
    "(1 - q) N(c, s^2) + q N(c + a, s^2), i.i.d. over steps; sigma_eff = s / a composed "
    "over T steps by the PLD accountant; lower limit by a normal approximation of the "
    "moment estimator")
ASSUMPTION_IID_STEPS = (
    "no parametric assumption on the step; ASSUMES the T steps are i.i.d. copies of one "
    "step pair and the per-step trials are independent (the white-box Dirac canary on an "
    "unused coordinate, fresh noise and fresh Poisson bits each step); Clopper-Pearson "
    "upper limits on both error rates at J thresholds (Bonferroni), the certified "
    "trade-off curve composed T-fold (rounded down)")

# Float64 rounding allowance of the FFT composition, per grid point (see
# `composed_epsilon_lower`).
_FFT_EPS = 2.0 ** -52


# ----------------------------------------------------------------------------------
# Per-step statistics: error counts at fixed thresholds and moments.


@dataclasses.dataclass(frozen=True)
class StepStatistics:
  """Sufficient statistics of per-step scores (IN / OUT), additive over chunks.

  Attributes:
    thresholds_J: float64[J] increasing thresholds, fixed before the trials.
    n_in, n_out: per-step trials with the canary IN / OUT.
    false_positives_J: int64[J], #{OUT scores > tau_j}.
    false_negatives_J: int64[J], #{IN scores <= tau_j}.
    sum_in, sumsq_in, sum_out, sumsq_out: float64 sums of the scores and squares.
  """
  thresholds_J: np.ndarray
  n_in: int
  n_out: int
  false_positives_J: np.ndarray
  false_negatives_J: np.ndarray
  sum_in: float
  sumsq_in: float
  sum_out: float
  sumsq_out: float

  def __add__(self, other: "StepStatistics") -> "StepStatistics":
    _validate.check_instance(other, StepStatistics, "other")
    if not np.array_equal(self.thresholds_J, other.thresholds_J):
      raise ValueError("other: StepStatistics with different thresholds cannot be added")
    return StepStatistics(
        self.thresholds_J, self.n_in + other.n_in, self.n_out + other.n_out,
        self.false_positives_J + other.false_positives_J,
        self.false_negatives_J + other.false_negatives_J, self.sum_in + other.sum_in,
        self.sumsq_in + other.sumsq_in, self.sum_out + other.sum_out,
        self.sumsq_out + other.sumsq_out)

  def moments(self) -> tuple[float, float, float, float]:
    """(mean_in, var_in, mean_out, var_out), unbiased variances."""
    if self.n_in < 2 or self.n_out < 2:
      raise ValueError(f"moments need >= 2 trials per side, got n_in = {self.n_in}, "
                       f"n_out = {self.n_out}")
    m_in, m_out = self.sum_in / self.n_in, self.sum_out / self.n_out
    v_in = max(0.0, (self.sumsq_in - self.n_in * m_in * m_in) / (self.n_in - 1))
    v_out = max(0.0, (self.sumsq_out - self.n_out * m_out * m_out) / (self.n_out - 1))
    return m_in, v_in, m_out, v_out


def _check_thresholds(thresholds_J) -> np.ndarray:
  t = _validate.check_array(thresholds_J, "thresholds_J", ndim=1, min_size=1)
  if np.any(np.diff(t) <= 0):
    raise ValueError("thresholds_J must be strictly increasing")
  return t


def step_statistics(scores_in, scores_out, thresholds_J) -> StepStatistics:
  """StepStatistics of two samples of per-step scores (host NumPy).

  Args:
    scores_in: float[...] per-step scores of trials with the canary IN (any shape,
      flattened), e.g. o_t ~ N(1, s^2) at q = 1; finite, at least 2.
    scores_out: float[...] per-step scores with the canary OUT; finite, at least 2.
    thresholds_J: float[J] strictly increasing, fixed before the scores were seen
      (`design_thresholds`).
  Returns:
    StepStatistics.

  Examples:
    >>> st = step_statistics([0.9, 1.2, -0.1], [0.1, -0.3, 0.6], [0.5])
    >>> st.false_positives_J.tolist(), st.false_negatives_J.tolist()
    ([1], [1])
  """
  s_in = np.ravel(_validate.check_array(scores_in, "scores_in", min_size=2))
  s_out = np.ravel(_validate.check_array(scores_out, "scores_out", min_size=2))
  t = _check_thresholds(thresholds_J)
  fp, fn = stats.error_counts(s_in, s_out, t)
  return StepStatistics(t, int(s_in.size), int(s_out.size), fp, fn, float(np.sum(s_in)),
                        float(np.sum(s_in * s_in)), float(np.sum(s_out)),
                        float(np.sum(s_out * s_out)))


@jax.jit
def _chunk_counts(o_MxTxK, thresholds_J):
  """(above int32[J, M, K] = #{t : o[m, t, k] > tau_j}, the float32 sums over T of o and
  o^2, all finite); the counts and the finiteness accumulate step by step (a loop over T
  of vector compares, an order of magnitude cheaper on XLA:CPU than J reductions over the
  middle axis)."""
  m, t, k = o_MxTxK.shape

  def count(i, carry):
    above, finite = carry
    o_MxK = jax.lax.dynamic_index_in_dim(o_MxTxK, i, 1, keepdims=False)
    return (above + (o_MxK[None] > thresholds_J[:, None, None]).astype(jnp.int32),
            finite & jnp.all(jnp.isfinite(o_MxK)))
  above, finite = jax.lax.fori_loop(
      0, t, count, (jnp.zeros((thresholds_J.shape[0], m, k), jnp.int32), jnp.array(True)))
  return (above, jnp.sum(o_MxTxK, axis=1), jnp.sum(o_MxTxK * o_MxTxK, axis=1), finite)


def observation_statistics(o_MxTxK, in_MxK, thresholds_J) -> StepStatistics:
  """StepStatistics of normalized white-box observations, counted in XLA.

  One XLA program per shape: per (run, canary) the number of steps above each threshold
  and the float32 sums over T; only these J M K counts and M K sums reach the host. A `jax.Array` stays on the device (shape,
  dtype and finiteness checked there); other inputs are checked on the host first.

  Args:
    o_MxTxK: float32[M, T, K] canary coordinates in units of C / B
      (`dpjax.audit.per_step_run.step_observations`); finite.
    in_MxK: bool[M, K], canary k of run m IN.
    thresholds_J: float[J] strictly increasing, fixed in advance (compared in float32).
  Returns:
    StepStatistics over the M T K per-step trials (counts exact; sums over T in
    float32, then over runs and canaries in float64).
  """
  if isinstance(o_MxTxK, jax.Array) and not _validate.is_tracer(o_MxTxK):
    _validate.check_shape(o_MxTxK, "o_MxTxK", ndim=3, min_size=1)
    if o_MxTxK.dtype != jnp.float32:
      raise ValueError(f"o_MxTxK must be float32, got {o_MxTxK.dtype}")
  elif not _validate.is_tracer(o_MxTxK):
    o_MxTxK = _validate.check_array(o_MxTxK, "o_MxTxK", np.float32, ndim=3, min_size=1)
  m, t_steps, k = o_MxTxK.shape
  inc = _validate.check_binary(in_MxK, "in_MxK", ndim=2)
  if np.shape(inc) != (m, k):
    raise ValueError(f"in_MxK must have shape {(m, k)} (M, K of o_MxTxK), got "
                     f"{np.shape(inc)}")
  thr = _check_thresholds(thresholds_J)
  above, s1, s2, finite = _chunk_counts(jnp.asarray(o_MxTxK), jnp.asarray(thr, jnp.float32))
  if not bool(finite):
    raise ValueError("o_MxTxK must be finite (no NaN or inf)")
  inc = np.asarray(inc, bool)
  n_in = int(inc.sum()) * t_steps
  n_out = inc.size * t_steps - n_in
  above = np.asarray(above, np.int64)                                       # [J, M, K]
  s1, s2 = np.asarray(s1, np.float64), np.asarray(s2, np.float64)
  # FP_j = #{OUT scores > tau_j}, FN_j = #{IN scores <= tau_j}
  fp = above[:, ~inc].sum(axis=1)
  fn = n_in - above[:, inc].sum(axis=1)
  return StepStatistics(thr, n_in, n_out, fp, fn, float(s1[inc].sum()), float(s2[inc].sum()),
                        float(s1[~inc].sum()), float(s2[~inc].sum()))


def design_thresholds(sampling_prob: float, noise_multiplier: float, num_thresholds: int = 7,
                      spread: float = 2.0) -> np.ndarray:
  """Thresholds fixed in advance from the claim: q/2 + sigma * linspace(-spread, spread, J).

  Any fixed choice keeps `composed_bound` valid; this one (J = 7, +-2 sigma)
  loses about 2% of eps to quantisation on the claimed mechanism (BUILD_NOTES.md).

  Args:
    sampling_prob: the claimed q in (0, 1].
    noise_multiplier: the claimed sigma > 0.
    num_thresholds: J >= 1 (J = 1: the single threshold q / 2).
    spread: > 0, half-width in units of sigma.
  Returns:
    float64[J].

  Examples:
    >>> design_thresholds(1.0, 2.0, 3).tolist()
    [-3.5, 0.5, 4.5]
  """
  q = _validate.check_sampling_prob(sampling_prob)
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  j = _validate.check_int(num_thresholds, "num_thresholds", 1, 1000)
  w = _validate.check_positive(spread, "spread")
  grid = np.linspace(-w, w, j) if j > 1 else np.zeros(1)
  return q / 2.0 + s * grid


# ----------------------------------------------------------------------------------
# (a) the parametric estimate.


@dataclasses.dataclass(frozen=True)
class StepEstimate:
  """Estimate (a): eps of T steps of the fitted step mechanism.

  Attributes:
    epsilon: the lower confidence limit of eps (at `confidence`, under `assumption`).
    epsilon_point: the point estimate (exceeds the true eps about half the time).
    noise_multiplier: fitted sigma_eff = s / a (point).
    noise_multiplier_upper: sigma_eff at the confidence limit (inf: nothing shown).
    shift, scale: fitted a and s.
    num_steps, sampling_prob, delta, confidence: as passed.
    trials_in, trials_out: per-step trials used.
    assumption: what the numbers rest on.
  """
  epsilon: float
  epsilon_point: float
  noise_multiplier: float
  noise_multiplier_upper: float
  shift: float
  scale: float
  num_steps: int
  sampling_prob: float
  delta: float
  confidence: float
  trials_in: int
  trials_out: int
  assumption: str


@_validate.names_extreme_arguments
def family_epsilon(noise_multiplier: float, sampling_prob: float, num_steps: int,
                   delta: float) -> float:
  """eps at delta of T Poisson-subsampled Gaussian steps at (sigma, q): the family of (a).

  GDP with mu = sqrt(T) / sigma at q = 1; the PLD accountant at q < 1, or past sigma =
  1e4 the CLT scale q sqrt(T (e^(1/sigma^2) - 1))-GDP; 0 at sigma = inf.

  Examples:
    >>> round(family_epsilon(2.0, 1.0, 4, 1e-5), 4)          # 1-GDP
    4.3772
  """
  sigma = _validate.check_range(noise_multiplier, "noise_multiplier", 0.0, open_low=True,
                                allow_inf=True)
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  delta = _validate.check_delta(delta)
  if not math.isfinite(sigma):
    return 0.0
  if q == 1.0:
    return gdp.gaussian_epsilon(delta, math.sqrt(t) / sigma)
  if sigma > 1e4:      # q sqrt(T) / sigma-GDP bounds eps ~ 0 (CLT scale) here
    mu = q * math.sqrt(t * math.expm1(sigma ** -2))
    return gdp.gaussian_epsilon(delta, mu) if mu > 0 else 0.0   # mu underflows: eps = 0
  return float(accounting.dpsgd_epsilon(sigma, q, t, delta, accountant="pld"))


@_validate.names_extreme_arguments
def step_estimate(statistics: StepStatistics, *, sampling_prob: float, num_steps: int,
                  delta: float, confidence: float = 0.95) -> StepEstimate:
  """Estimate (a): the fitted step mechanism composed over T steps (ASSUMES its family).

  Fit (moments): at q = 1, a = mean_in - mean_out and s^2 the pooled variance;
  at q < 1, a = (mean_in - mean_out) / q and s^2 = var_out (var_in = s^2 +
  q (1 - q) a^2 under the family). r = a / s has standard error
  se^2 = se_a^2 / s^2 + r^2 se_s^2 / s^2 (se_s^2 = s^2 / (2 n)); the lower limit is
  r - z se with z = Phi^-1(confidence), and sigma_eff = 1 / r. eps is that of T
  steps at (sigma_eff, q): GDP with mu = sqrt(T) / sigma_eff at q = 1, the PLD
  accountant (`accounting.dpsgd_epsilon(..., accountant="pld")`) at q < 1.

  Warning: an estimate under `assumption` (ASSUMPTION_GDP at q = 1, else
  ASSUMPTION_SUBSAMPLED_GAUSSIAN), with an asymptotic (normal) confidence limit;
  not a bound for mechanisms outside the family.

  Args:
    statistics: `step_statistics` / `observation_statistics` of the per-step scores.
    sampling_prob: q in (0, 1], known from the config.
    num_steps: T >= 1 steps composed.
    delta: in (0, 1).
    confidence: of the lower limit, in (0, 1), one-sided.
  Returns:
    StepEstimate.
  """
  _validate.check_instance(statistics, StepStatistics, "statistics")
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps")
  delta = _validate.check_delta(delta)
  conf = _validate.check_confidence(confidence)
  st = statistics
  m_in, v_in, m_out, v_out = st.moments()
  if q == 1.0:
    s2 = ((st.n_in - 1) * v_in + (st.n_out - 1) * v_out) / (st.n_in + st.n_out - 2)
    a = m_in - m_out
    se_a2 = s2 * (1.0 / st.n_in + 1.0 / st.n_out)
    se_s2 = s2 / (2.0 * (st.n_in + st.n_out - 2))
  else:
    s2 = v_out
    a = (m_in - m_out) / q
    se_a2 = (v_in / st.n_in + v_out / st.n_out) / (q * q)
    se_s2 = s2 / (2.0 * (st.n_out - 1))
  if s2 <= 0:
    raise ValueError("statistics: the OUT scores have zero variance (no noise): the "
                     "Gaussian family does not apply")
  s = math.sqrt(s2)
  r = a / s
  se_r = math.sqrt(se_a2 / s2 + r * r * se_s2 / s2)
  r_low = r - float(special.ndtri(conf)) * se_r
  sig = 1.0 / r if r > 0 else math.inf
  sig_up = 1.0 / r_low if r_low > 0 else math.inf
  return StepEstimate(
      epsilon=family_epsilon(sig_up, q, t, delta),
      epsilon_point=family_epsilon(sig, q, t, delta), noise_multiplier=sig,
      noise_multiplier_upper=sig_up, shift=a, scale=s, num_steps=t, sampling_prob=q,
      delta=delta, confidence=conf, trials_in=st.n_in, trials_out=st.n_out,
      assumption=ASSUMPTION_GDP if q == 1.0 else ASSUMPTION_SUBSAMPLED_GAUSSIAN)


# ----------------------------------------------------------------------------------
# (b) the composed Clopper-Pearson bound.


def _channel(fpr_J: np.ndarray, fnr_J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(p_in, p_out) of the finite channel whose trade-off curve is the lower convex
  envelope of (0, 1), the points and (1, 0)."""
  pts = sorted(set(zip(np.r_[0.0, fpr_J, 1.0].tolist(), np.r_[1.0, fnr_J, 0.0].tolist())))
  hull = []
  for p in pts:                     # ascending FPR: lower hull (monotone chain)
    while len(hull) >= 2:
      (x1, y1), (x2, y2) = hull[-2], hull[-1]
      if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:
        hull.pop()
      else:
        break
    hull.append(p)
  h = np.array(hull)
  # keep the non-increasing part (a trade-off curve): drop vertices after FNR hits 0
  p_out, p_in = np.diff(h[:, 0]), -np.diff(h[:, 1])
  keep = (p_out > 0) | (p_in > 0)
  p_in, p_out = np.maximum(p_in[keep], 0.0), np.maximum(p_out[keep], 0.0)
  return p_in / p_in.sum(), p_out / p_out.sum()


def _logsumexp(x):
  m = np.max(x)
  return m + math.log(np.sum(np.exp(x - m))) if np.isfinite(m) else m


def _outside_mass(logp, k, t: int, lo: int, hi: int, scale: float, *, below: bool,
                  above: bool) -> float:
  """Chernoff upper bound on the mass of {S < lo} (if below) + {S >= hi} (if above),
  S = sum of T draws of the (unnormalised) atoms exp(logp) at integers k; any
  lambda >= 0 gives a valid bound, the grid's best is taken."""
  lam = np.geomspace(1e-3, 1e3, 121) / scale
  up = min(t * _logsumexp(logp + l * k) - l * hi for l in lam) if above else -math.inf
  dn = min(t * _logsumexp(logp - l * k) + l * (lo - 1) for l in lam) if below else -math.inf
  return math.exp(up) + math.exp(dn)


def _direction_epsilon(p, q, t: int, delta: float, n: int) -> float:
  """eps lower bound of T-fold composition of (P = p, Q = q): losses log p / q rounded
  DOWN to a grid, cyclic FFT power, aliased mass bounded (Chernoff) and subtracted."""
  inf_mass = float(p[(p > 0) & (q == 0)].sum())
  d_inf = -math.expm1(t * math.log1p(-inf_mass)) if inf_mass < 1 else 1.0
  if d_inf > delta:
    return math.inf
  fin = (p > 0) & (q > 0)
  pf, loss = p[fin], np.log(p[fin]) - np.log(q[fin])
  if pf.size == 0 or loss.max() <= 0:
    return 0.0
  w = pf / pf.sum()
  m1 = float(w @ loss)
  sd_t = math.sqrt(t * max(float(w @ (loss - m1) ** 2), 1e-300))
  lo = max(t * float(loss.min()), t * m1 - 15.0 * sd_t)
  hi = min(t * float(loss.max()), t * m1 + 30.0 * sd_t)
  if hi <= 0:
    hi = min(t * float(loss.max()), 1.0)
  h = (hi - lo) / (n - t - 2)
  # round each loss DOWN to the grid b + h Z; the common offset b (one of the losses
  # mod h) makes that atom exact and minimises the mean rounding error
  cand = np.mod(loss, h)
  err = [float(w @ np.mod(loss - b, h)) for b in cand]
  b = float(cand[int(np.argmin(err))])
  k = np.floor((loss - b) / h).astype(np.int64)
  c = int(math.floor((lo - t * b) / h)) // t       # per-step offset: window [t c, t c + n)
  f = np.zeros(n)
  np.add.at(f, (k - c) % n, pf)
  g = np.fft.irfft(np.fft.rfft(f) ** t, n)
  grid = (t * c + np.arange(n)) * h + t * b
  # no mass can alias from a side the window covers entirely (t c <= t k_min, and
  # t c + n > t k_max when hi = t max(loss)); otherwise bound it
  out = _outside_mass(np.log(pf), k, t, t * c, t * c + n, sd_t / h,
                      below=lo > t * float(loss.min()), above=hi < t * float(loss.max()))
  const = d_inf - out - n * _FFT_EPS * max(1.0, math.log2(t))
  pos = grid > 0
  gp, lp = g[pos], grid[pos]
  sp = np.cumsum(gp[::-1])[::-1]                   # sum_{j >= i} g_j
  sq = np.cumsum((gp * np.exp(-lp))[::-1])[::-1]   # sum_{j >= i} g_j e^{-L_j}
  if gp.size == 0 or const + sp[0] - sq[0] <= delta:
    return 0.0
  # delta'(eps) on [L_{i-1}, L_i): const + sp_i - e^eps sq_i, decreasing in eps
  at = const + np.r_[sp[1:], 0.0] - np.exp(lp) * np.r_[sq[1:], 0.0]   # delta'(L_i)
  i = int(np.argmax(at <= delta))
  if at[i] > delta:
    return float(lp[-1])
  left = 0.0 if i == 0 else float(lp[i - 1])
  val = (const + sp[i] - delta) / sq[i]
  return float(min(max(math.log(val), left), lp[i])) if val > 0 else left


def composed_epsilon_lower(fpr_J, fnr_J, num_steps: int, delta: float, *,
                           grid_points: int = 2 ** 20) -> float:
  """A lower bound on eps(delta) of T steps of ANY mechanism whose step has these errors.

  If one step's trade-off curve f (OUT vs IN) satisfies f(FPR_j) <= FNR_j for each j
  (e.g. Clopper-Pearson upper limits of tests' error rates), f lies below the lower
  convex envelope g of (0, 1), the points and (1, 0), the trade-off curve of a
  finite channel Q; the step dominates Q (Blackwell), so T i.i.d. steps dominate
  Q^T (Dong, Roth & Su 2019) and eps(delta) of T steps >= eps(delta) of Q^T in
  either neighbour direction. Q^T's eps is bounded from below: each step's loss
  log(p_in / p_out) is rounded DOWN to a grid b + h Z (spacing h ~ 45 sd /
  grid_points, the offset b chosen from the losses; the composed loss is at most
  T h low, about 0.2% of eps at the defaults), composed by a cyclic FFT power;
  the mass the cycle could alias is bounded by Chernoff's inequality and
  subtracted from delta(eps), as is a float64 allowance n 2^-52 log2(T).

  Args:
    fpr_J, fnr_J: float[J] points in [0, 1] (J >= 1).
    num_steps: T in [1, 2^26 - 1024].
    delta: in (0, 1).
    grid_points: n >= 1024 + T, grid size of the composed loss.
  Returns:
    eps_lower >= 0 (the larger of the two directions; inf when a step has an
    output impossible under one side with enough mass).

  Examples:
    >>> round(composed_epsilon_lower([0.25], [0.25], 1, 1e-5), 4)    # RR at ln 3
    1.0986
  """
  fpr = _validate.check_array(fpr_J, "fpr_J", ndim=1, low=0.0, high=1.0, min_size=1)
  fnr = _validate.check_array(fnr_J, "fnr_J", shape=fpr.shape, low=0.0, high=1.0)
  t = _validate.check_int(num_steps, "num_steps", 1, 2 ** 26 - 1024)   # grid_points >= 1024 + T
  delta = _validate.check_delta(delta)
  n = _validate.check_int(grid_points, "grid_points", 1024, 2 ** 26)
  if n < 1024 + t:
    raise ValueError(f"grid_points must be at least 1024 + num_steps = {1024 + t}, got {n}")
  p_in, p_out = _channel(fpr, fnr)
  return max(_direction_epsilon(p_in, p_out, t, delta, n),
             _direction_epsilon(p_out, p_in, t, delta, n))


@dataclasses.dataclass(frozen=True)
class ComposedBound:
  """Bound (b): what the per-step trials certify for T composed steps.

  Attributes:
    epsilon_lower: with probability >= confidence over the per-step trials, IF the
      T steps are i.i.d. copies of one step pair (`assumption`), the T observed
      updates (so the training that released them) are not (eps, delta)-DP for any
      eps < epsilon_lower.
    fpr_upper_J, fnr_upper_J: the Clopper-Pearson upper limits (the certified points).
    thresholds_J: the tests' thresholds.
    num_steps, delta, confidence: as passed.
    trials_in, trials_out: per-step trials.
    assumption: what it rests on.
  """
  epsilon_lower: float
  fpr_upper_J: np.ndarray
  fnr_upper_J: np.ndarray
  thresholds_J: np.ndarray
  num_steps: int
  delta: float
  confidence: float
  trials_in: int
  trials_out: int
  assumption: str = ASSUMPTION_IID_STEPS


def composed_bound(statistics: StepStatistics, *, num_steps: int, delta: float,
                   confidence: float = 0.95, grid_points: int = 2 ** 20) -> ComposedBound:
  """Bound (b): Clopper-Pearson on the per-step errors, composed over T i.i.d. steps.

  Each of the 2J error rates gets its one-sided Clopper-Pearson upper limit at
  1 - alpha / (2J) (`stats.clopper_pearson` at two-sided 1 - alpha / J), so all
  hold together with probability >= 1 - alpha (union bound); then
  `composed_epsilon_lower`.

  Warning: valid only if the per-step trials are independent and the T steps are
  i.i.d. copies of one step pair (ASSUMPTION_IID_STEPS): true for the white-box
  Dirac canary of DP-SGD as claimed (fresh noise and fresh Poisson bits, an unused
  coordinate); for other mechanisms use run-level bounds.

  Args:
    statistics: per-step StepStatistics with thresholds fixed in advance.
    num_steps: T >= 1 steps composed.
    delta: in (0, 1).
    confidence: 1 - alpha in (0, 1).
    grid_points: as in `composed_epsilon_lower`.
  Returns:
    ComposedBound.
  """
  _validate.check_instance(statistics, StepStatistics, "statistics")
  t = _validate.check_int(num_steps, "num_steps")
  delta = _validate.check_delta(delta)
  conf = _validate.check_confidence(confidence)
  st = statistics
  j = st.thresholds_J.size
  per = 1.0 - (1.0 - conf) / j
  fpr_u = stats.clopper_pearson_upper(st.false_positives_J, st.n_out, per)
  fnr_u = stats.clopper_pearson_upper(st.false_negatives_J, st.n_in, per)
  fpr_u, fnr_u = np.atleast_1d(fpr_u), np.atleast_1d(fnr_u)
  eps = composed_epsilon_lower(fpr_u, fnr_u, t, delta, grid_points=grid_points)
  return ComposedBound(eps, fpr_u, fnr_u, st.thresholds_J, t, delta, conf, st.n_in, st.n_out)
