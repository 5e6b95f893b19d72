"""Private hyperparameter tuning: repeat-and-select with a random number of runs.

Every trained candidate and every score read from private data is a release the
accountant must see (lecture §5.5). Two accounted procedures:
1. Repeat and select (Papernot & Steinke, ICLR 2022, https://arxiv.org/abs/2110.03620;
   Liu & Talwar, STOC 2019): run Q a public random K times, release only the best run.
   Scores must be private (public data, or `noisy_count_scores`, charged via
   `accounting.tuned_dpsgd_epsilon(..., score_noise_multiplier=s)`). K, the other runs
   and their scores are NOT released (releasing K voids the theorem).
2. Exponential-mechanism selection on a disjoint validation split
   (`select_by_exponential_mechanism`, `exponential_selection_epsilon`; user-level:
   `user_accuracy_utility`).
`selection_rdp` gives the RDP curves of both and of naive tuning (which claims one model),
each composed with the other releases of the same data; `select_by_noisy_score` releases
repeat-and-select's best run by Gaussian-noised score. PATE's aggregator can be tuned on a
PUBLIC proxy ensemble at no privacy cost: `gnmax_grid` and `confident_gnmax_grid` (labels
and eps of every setting on the proxy votes), `proxy_release` (the release planned there).

Shape letters: R runs, C candidates, N records, A orders, Q queries, K classes.

Examples:
  >>> import jax
  >>> k = sample_num_runs(jax.random.key(0), 10.0, 1.0)
  >>> isinstance(k, int) and k >= 1
  True
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from dpjax import _validate
from dpjax import accounting
from dpjax import dpsgd
from dpjax import integer_noise
from dpjax import pate
from dpjax import pate_release
from dpjax import selection
from dpjax.accounting import composition
from dpjax.accounting import rdp

PyTree = Any


# ----------------------------------------------------------------------------
# the number of runs


def _law(mean_runs, shape) -> tuple[float, float]:
  mu = _validate.check_range(mean_runs, "mean_runs", 1.0)
  eta = rdp.repeat_shape(shape)
  return mu, eta


@_validate.names_extreme_arguments
def num_runs_log_pmf(k, mean_runs: float, shape) -> np.ndarray:
  """log P[K = k] of the number of runs: float64 like k (-inf outside the support).

  Truncated negative binomial, shape eta, E[K] = mean_runs >= 1 (Papernot & Steinke 2022,
  Def. 1; gamma from `rdp.truncated_negative_binomial_log_gamma`): for k >= 1,
  (1 - gamma)^k / (gamma^-eta - 1) * Gamma(k + eta) / (Gamma(eta) k!); at eta = 0
  (1 - gamma)^k / (k log(1/gamma)); Poisson (shape "poisson" or inf) e^-mu mu^k / k!, k >= 0.

  Examples:
    >>> np.exp(num_runs_log_pmf([1, 2, 3], 2.0, 1.0)).round(4).tolist()   # geometric(1/2)
    [0.5, 0.25, 0.125]
  """
  mu, eta = _law(mean_runs, shape)
  kk = np.asarray(k, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    if math.isinf(eta):
      out = np.where(kk >= 0, kk * math.log(mu) - mu - special.gammaln(kk + 1.0), -np.inf)
      return np.where(np.isnan(out), -np.inf, out)
    lg = rdp.truncated_negative_binomial_log_gamma(mu, eta)
    if lg == 0.0:
      return np.where(kk == 1, 0.0, -np.inf)
    log1m_gamma = math.log(-math.expm1(lg))          # log(1 - gamma)
    if eta == 0.0:
      out = kk * log1m_gamma - np.log(kk) - math.log(-lg)
    else:
      out = (kk * log1m_gamma + special.gammaln(kk + eta) - special.gammaln(eta)
             - special.gammaln(kk + 1.0) - math.log(math.expm1(-eta * lg)))
  out = np.where((kk >= 1) & (kk == np.floor(kk)), out, -np.inf)
  return np.where(np.isnan(out), -np.inf, out)


def _pow2(n: int) -> int:
  return 1 << max(0, int(n) - 1).bit_length()


def _uniform53(key, size: int) -> np.ndarray:
  """size 53-bit uniforms in [0, 1) from one key (drawn for the next power of two)."""
  bits = np.asarray(jax.random.bits(key, (_pow2(size), 2), jnp.uint32))[:size]
  bits = bits.astype(np.uint64)
  hi = (bits[:, 0] >> np.uint64(6)).astype(np.float64)     # 26 bits
  lo = (bits[:, 1] >> np.uint64(5)).astype(np.float64)     # 27 bits
  return (hi * 2.0 ** 27 + lo) / 2.0 ** 53


@_validate.names_extreme_arguments
def sample_num_runs(key: jax.Array, mean_runs: float, shape, size: Optional[int] = None):
  """Draws K (law of `num_runs_log_pmf`; shape eta >= 0 or "poisson") by inversion.

  K = `num_runs_quantile`(u), u a 53-bit host uniform: public randomness, never released.
  size None: one Python int; else int64[size] iid draws.

  Examples:
    >>> sample_num_runs(jax.random.key(1), 1.0, 0.5)   # E[K] = 1: K = 1 surely
    1
  """
  mu, eta = _law(mean_runs, shape)
  n = 1 if size is None else _validate.check_int(size, "size")
  k = num_runs_quantile(_uniform53(key, n), mu, eta)
  return int(k[0]) if size is None else k


@_validate.names_extreme_arguments
def num_runs_quantile(u, mean_runs: float, shape):
  """Smallest k with P[K <= k] > u, u in [0, 1): int, or int64 of u's shape.

  Examples:
    >>> num_runs_quantile([0.0, 0.5, 0.75], 2.0, 1.0).tolist()   # geometric(1/2)
    [1, 2, 3]
  """
  mu, eta = _law(mean_runs, shape)
  uu = _validate.check_array(u, "u", low=0.0, high=1.0, open_high=True)
  start = 0 if math.isinf(eta) else 1
  block = max(1024, int(64 * mu))
  cdf_end, ks, cdfs = 0.0, [], []
  umax = float(uu.max()) if uu.size else 0.0
  while True:
    k = np.arange(start, start + block, dtype=np.float64)
    p = np.exp(num_runs_log_pmf(k, mu, eta))
    c = cdf_end + np.cumsum(p)
    ks.append(k)
    cdfs.append(c)
    cdf_end = float(c[-1])
    if cdf_end > umax or p[-1] == 0.0:
      break
    start += block
    block *= 2
  k_all, c_all = np.concatenate(ks), np.concatenate(cdfs)
  idx = np.minimum(np.searchsorted(c_all, uu, side="right"), k_all.size - 1)
  out = k_all[idx].astype(np.int64)
  return int(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------
# repeat and select


class TuningResult(NamedTuple):
  """What repeat-and-select releases (not K, not the other runs).

  candidate: index of the released run's setting (-1 when K = 0); score: its private
  score (nan if K = 0); output: its output pytree (None if K = 0).
  """
  candidate: int
  score: float
  output: PyTree


@_validate.names_extreme_arguments
def repeat_and_select(key: jax.Array,
                      base_fn: Callable[[jax.Array, np.ndarray], tuple[PyTree, Any]],
                      num_candidates: int, *, mean_runs: float, shape,
                      candidate_probs=None) -> TuningResult:
  """Runs the base algorithm Q a random K times and releases the best run.

  base_fn(keys_R, candidates_R) -> (outputs with leading axis R, private scores float[R]);
  candidates drawn from public `candidate_probs` (default uniform, float[C]); ties go to
  the earliest run. Privacy (Papernot & Steinke 2022, Thms 2 and 6): per-run RDP eps(alpha)
  gives `rdp.repeat_and_select_rdp(orders, eps, mean_runs=mean_runs, shape=shape)`
  (DP-SGD: `accounting.tuned_dpsgd_epsilon`).

  Examples:
    >>> import jax.numpy as jnp
    >>> def q_fn(keys, cand):   # scores: the candidate index, public
    ...   return {"c": jnp.asarray(cand)}, jnp.asarray(cand, jnp.float32)
    >>> res = repeat_and_select(jax.random.key(0), q_fn, 5, mean_runs=50, shape=1)
    >>> res.candidate, int(res.output["c"])
    (4, 4)
  """
  c = _validate.check_size(num_candidates, "num_candidates", bytes_per_unit=8)
  mu, eta = _law(mean_runs, shape)
  _validate.check_callable(base_fn, "base_fn")
  if candidate_probs is None:
    probs = np.full(c, 1.0 / c)
  else:
    probs = _validate.check_array(candidate_probs, "candidate_probs", shape=(c,), low=0.0)
    if not math.isclose(float(probs.sum()), 1.0, rel_tol=1e-6):
      raise ValueError(f"candidate_probs must sum to 1, got {probs.sum()!r}")
  k_num, k_cand, k_runs = jax.random.split(key, 3)
  k = sample_num_runs(k_num, mu, eta)
  if k == 0:
    return TuningResult(-1, math.nan, None)
  # Candidates by inversion of the float64 CDF with 53-bit uniforms, on the host.
  cdf = np.cumsum(probs)
  cands = np.minimum(np.searchsorted(cdf / cdf[-1], _uniform53(k_cand, k), side="right"), c - 1)
  keys = jax.random.split(k_runs, _pow2(k))[:k]   # padded: few distinct compiles
  outputs, scores = base_fn(keys, cands)
  s = np.asarray(scores, np.float64)
  if s.shape != (k,) or not np.all(np.isfinite(s)):
    raise ValueError(f"base_fn must return finite scores float[R] (R = {k} runs), got "
                     f"shape {s.shape}")
  best = int(np.argmax(s))
  return TuningResult(int(cands[best]), float(s[best]), jax.tree.map(lambda a: a[best], outputs))


@_validate.names_extreme_arguments
def noisy_count_scores(key: jax.Array, counts_R, noise_multiplier: float) -> np.ndarray:
  """Releases integer counts [R] (sensitivity 1) + round(s Z): float64[R].

  Noise `integer_noise.rounded_gaussian(s)` (post-processing of count + s Z): RDP
  alpha / (2 s^2) each, up to the table's TV distance (< 2^-100, not accounted). Pass s as
  `score_noise_multiplier` to `accounting.tuned_dpsgd_epsilon`.

  Examples:
    >>> noisy_count_scores(jax.random.key(0), [10, 20], 1e-3).tolist()
    [10.0, 20.0]
  """
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  cnt = _validate.check_array(counts_R, "counts_R", ndim=1)
  if cnt.size == 0 or not np.all(cnt == np.round(cnt)):
    raise ValueError(f"counts_R must be a non-empty array of integer counts, got {cnt!r:.80}")
  noise = integer_noise.sample(key, integer_noise.rounded_gaussian(s), cnt.shape)
  return cnt + np.asarray(noise, np.float64)


def dpsgd_runs(keys_R: jax.Array, candidates_R, x_NxF, y_N, cfgs: Sequence[dpsgd.DpSgdConfig],
               model, *, pad_to: Optional[int] = None, **train_kwargs) -> dpsgd.TrainResult:
  """Trains run r with cfgs[candidates_R[r]] and keys_R[r] (all records kept): leaves [R, ...].

  One vmapped `dpsgd.train_many` per setting; the settings must share sigma, q, T,
  dataset_size and privacy unit (refused otherwise). pad_to = P: each setting trains a
  multiple of P models (extras discarded) to reuse one program.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import models
    >>> cfgs = [dpsgd.DpSgdConfig(dataset_size=8, sampling_prob=0.5, num_steps=2,
    ...                           noise_multiplier=1.0, l2_clip_norm=c) for c in (0.5, 2.0)]
    >>> out = dpsgd_runs(jax.random.split(jax.random.key(0), 3), [1, 0, 1], jnp.ones((8, 2)),
    ...                  jnp.ones((8,), int), cfgs, models.logistic_regression(2))
    >>> out.params["w"].shape
    (3, 2)
  """
  cfgs = tuple(cfgs)
  if not cfgs or not all(isinstance(c, dpsgd.DpSgdConfig) for c in cfgs):
    raise ValueError("cfgs must be a non-empty sequence of DpSgdConfig")
  curve = lambda c: (c.noise_multiplier, c.sampling_prob, c.num_steps, c.dataset_size,  # noqa: E731
                     c.privacy_unit)
  for j, cf in enumerate(cfgs):
    if curve(cf) != curve(cfgs[0]):
      raise ValueError(f"cfgs[{j}] has a different privacy curve from cfgs[0] (sigma, q, T, "
                       "dataset_size and privacy_unit must agree)")
  cand = _validate.check_array(candidates_R, "candidates_R", np.int64, ndim=1,
                               low=0, high=len(cfgs) - 1)
  r = cand.shape[0]
  if r == 0:
    raise ValueError("candidates_R must hold at least one run")
  keys = dpsgd.model_keys(keys_R, r)
  n = np.shape(x_NxF)[0]
  train_kwargs.setdefault("perf", dpsgd.PerformanceFlags(progress=False))
  parts, order = [], []
  pad = 1 if pad_to is None else _validate.check_int(pad_to, "pad_to")
  for j in np.unique(cand):
    runs = np.nonzero(cand == j)[0]
    m = -(-runs.size // pad) * pad
    k_j = keys[runs]
    if m > runs.size:   # discarded padding models, keys distinct from the real ones
      extra = jax.random.split(jax.random.fold_in(k_j[0], 0x7AD), m - runs.size)
      k_j = jnp.concatenate([k_j, extra])
    out = dpsgd.train_many(k_j, x_NxF, y_N, jnp.ones((m, n), bool), cfgs[int(j)], model,
                           **train_kwargs)
    parts.append(jax.tree.map(lambda a, r=runs.size: None if a is None else a[:r], out))
    order.append(runs)
  inv = np.argsort(np.concatenate(order), kind="stable")
  return jax.tree.map(lambda *leaves: jnp.concatenate(leaves, axis=0)[inv], *parts)


# ----------------------------------------------------------------------------
# exponential-mechanism selection on a disjoint validation split


def select_by_exponential_mechanism(key: jax.Array, correct_counts_C, epsilon: float) -> int:
  """Picks candidate c with probability proportional to exp(eps * correct_counts_C[c]).

  Counts of C fixed models on a private validation split move by 0 or +-1 together per
  record: monotone utility, eps-DP (McSherry & Talwar 2007). Returns the index.

  Examples:
    >>> select_by_exponential_mechanism(jax.random.key(0), [0, 100], 1.0)
    1
  """
  e = _validate.check_epsilon(epsilon)
  u = _validate.check_array(correct_counts_C, "correct_counts_C", ndim=1)
  if u.size == 0 or not np.all(u == np.round(u)):
    raise ValueError("correct_counts_C must be a non-empty array of integer counts")
  return int(selection.exponential_mechanism(key, jnp.asarray(u, jnp.float32), e,
                                              sensitivity=1.0, monotonic=True))


def user_accuracy_utility(correct_MxN, user_N, num_users: int) -> np.ndarray:
  """float64[M]: per model, the sum over users of the share of their records it gets right.

  Adding or removing one user (all of their records) moves each entry by at most 1, and all
  in the same direction: a monotone utility of user-level sensitivity 1 for
  `selection.exponential_mechanism`. correct_MxN: bool or 0/1; user_N: ids in [0, U).

  Examples:
    >>> user_accuracy_utility([[1, 0, 1]], [0, 0, 1], 2).tolist()   # 1/2 + 1/1
    [1.5]
  """
  correct = _validate.check_array(correct_MxN, "correct_MxN", ndim=2, low=0, high=1, min_size=1)
  u = _validate.check_size(num_users, "num_users", bytes_per_unit=8, units=len(correct) + 1)
  ids = _validate.check_array(user_N, "user_N", np.int64, shape=(correct.shape[1],), low=0,
                              high=u - 1, integer=True)
  records_U = np.maximum(np.bincount(ids, minlength=u), 1).astype(float)   # 0 / 1 if none
  per_user_MxU = np.stack([np.bincount(ids, c, minlength=u) for c in correct])
  return (per_user_MxU / records_U[None, :]).sum(axis=1)


@_validate.names_extreme_arguments
def exponential_selection_epsilon(noise_multiplier: float, sampling_prob: float,
                                  num_steps: int, num_candidates: int, delta: float,
                                  selection_epsilon: float) -> float:
  """eps at delta of training C candidates by DP-SGD, then exponential-mechanism selection.

  Parallel composition over disjoint train / validation splits:
  max(dpsgd_epsilon(sigma, q, C T, delta), selection_epsilon).

  Examples:
    >>> e1 = accounting.dpsgd_epsilon(4.0, 0.01, 2_000, 1e-5)
    >>> exponential_selection_epsilon(4.0, 0.01, 100, 20, 1e-5, 0.5) == max(e1, 0.5)
    True
  """
  c = _validate.check_size(num_candidates, "num_candidates", bytes_per_unit=8)
  steps = _validate.check_int(num_steps, "num_steps")
  e_sel = _validate.check_epsilon(selection_epsilon, "selection_epsilon")
  e_train = accounting.dpsgd_epsilon(noise_multiplier, sampling_prob, c * steps, delta)
  return max(e_train, e_sel)


# ----------------------------------------------------------------------------
# the accounting of three selection procedures, and repeat-and-select's release


def selection_rdp(orders, noise_multiplier: float, *, sampling_prob: float, num_steps: int,
                  num_candidates: int, selection_epsilon: float, score_noise_multiplier: float,
                  mean_runs: float, shape, other_rdp=0.0) -> dict[str, np.ndarray]:
  """RDP curves float64[A] of DP-SGD tuned among C settings, training and validation units
  disjoint, each curve composed with `other_rdp` (other releases of the same units) but
  "run" and "selection".

  run = T * subsampled_gaussian_rdp(q, sigma): one training; selection: the exponential
  mechanism at selection_epsilon as eps-bounded range (`composition.pure_dp_rdp`); score:
  alpha / (2 s^2), a score with Gaussian noise s (`select_by_noisy_score`). Keys:
    naive_claimed              other + selection + run: what tuning freely, then accounting the
                               final model and the selection, claims
    all_trainings              other + C run: what the training units pay for C trainings (naive
                               tuning's validation units, read without noise, are unbounded)
    exponential                other + max(C run, selection): the exponential mechanism with every
                               training charged (parallel composition over the two splits)
    exponential_validation     other + selection
    repeat_and_select          other + `rdp.repeat_and_select_rdp`(max(run, score)): K random runs,
                               the best by noisy score (Papernot & Steinke 2022); every unit
    repeat_and_select_one_run  other + max(run, score)

  Examples:
    >>> o = rdp.DEFAULT_ORDERS
    >>> c = selection_rdp(o, 2.0, sampling_prob=0.1, num_steps=100, num_candidates=20,
    ...                   selection_epsilon=0.3, score_noise_multiplier=10.0, mean_runs=10,
    ...                   shape=1)
    >>> bool(np.all(c["exponential"] >= c["naive_claimed"] - c["selection"]))
    True
  """
  lam = _validate.check_orders(orders)
  sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
  q = _validate.check_sampling_prob(sampling_prob)
  steps = _validate.check_int(num_steps, "num_steps")
  c = _validate.check_int(num_candidates, "num_candidates")
  e_sel = _validate.check_epsilon(selection_epsilon, "selection_epsilon")
  s = _validate.check_positive(score_noise_multiplier, "score_noise_multiplier")
  mu, eta = _law(mean_runs, shape)
  other = _validate.check_array(other_rdp, "other_rdp", low=0.0, allow_inf=True)
  if other.ndim > 1 or (other.ndim == 1 and other.shape != lam.shape):
    raise ValueError(f"other_rdp must be a number or float[A] like orders (A = {lam.size}), "
                     f"got shape {other.shape}")
  run = steps * rdp.subsampled_gaussian_rdp(q, sigma, lam)
  sel = composition.pure_dp_rdp(e_sel, lam, bounded_range=True)
  one_run = np.maximum(run, lam / (2.0 * (s * s)))     # s * s: inf, not OverflowError, at 1e300
  return {"run": run, "selection": sel, "naive_claimed": other + sel + run,
          "all_trainings": other + c * run, "exponential": other + np.maximum(c * run, sel),
          "exponential_validation": other + sel,
          "repeat_and_select": other + rdp.repeat_and_select_rdp(lam, one_run, mean_runs=mu,
                                                                 shape=eta),
          "repeat_and_select_one_run": other + one_run}


def select_by_noisy_score(key: jax.Array, scores_R, noise_multiplier: float) -> int:
  """argmax_r scores_R[r] + s Z_r, Z_r ~ N(0, 1) float32 from `key`: the released run, R >= 1.

  With scores of sensitivity 1 (`user_accuracy_utility`), each score is an alpha / (2 s^2)
  RDP release (`selection_rdp`'s "score"); only the argmax is published, so the float
  rounding of the noise is not observable (as in report noisy max).

  Examples:
    >>> select_by_noisy_score(jax.random.key(0), [0.0, 100.0, 1.0], 1.0)
    1
  """
  sc = _validate.check_array(scores_R, "scores_R", ndim=1, min_size=1)
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  noise = np.asarray(jax.random.normal(key, sc.shape), np.float64)
  return int(np.argmax(sc + s * noise))


# ----------------------------------------------------------------------------
# PATE's aggregator tuned on a PUBLIC proxy ensemble


def _first(num_pool: int, num_queries: int) -> np.ndarray:
  return np.arange(num_pool) < num_queries


def gnmax_grid(key: jax.Array, proxy_votes_QxK, cells: Sequence[tuple[float, int]]
               ) -> tuple[np.ndarray, np.ndarray]:
  """GNMax labellings of PUBLIC proxy votes, one per cell (sigma, Q): (labels_GxQ, answered_GxQ).

  Cell i draws `pate.gnmax` with sigma over the whole pool from `jax.random.fold_in(key, i)`
  and keeps its first Q labels: labels int32[G, Q_pool] (0 after the first Q), answered
  bool[G, Q_pool] (the first Q), as `pate.fit_students` takes them.

  Examples:
    >>> import numpy as np
    >>> lab, ans = gnmax_grid(jax.random.key(0), np.array([[9, 0], [0, 9], [9, 0]]),
    ...                       [(0.1, 2), (0.1, 3)])
    >>> lab.tolist(), ans.sum(axis=1).tolist()
    ([[0, 1, 0], [0, 1, 0]], [2, 3])
  """
  pate.check_votes(proxy_votes_QxK, "proxy_votes_QxK", ndim=2)
  votes = np.asarray(proxy_votes_QxK)          # as given: the aggregator reads its dtype
  pool = votes.shape[0]
  cells = [(_validate.check_positive(sigma, "cells: sigma"),
            _validate.check_int(qn, "cells: Q", 1, pool)) for sigma, qn in cells]
  labels, answered = np.zeros((len(cells), pool), np.int32), np.zeros((len(cells), pool), bool)
  for i, (sigma, qn) in enumerate(cells):
    labels[i, :qn] = np.asarray(pate.gnmax(jax.random.fold_in(key, i), votes, sigma))[:qn]
    answered[i] = _first(pool, qn)
  return labels, answered


def confident_gnmax_grid(key: jax.Array, proxy_votes_QxK, settings: Sequence[dict],
                         queries: Sequence[int], *, delta: float, orders,
                         cache: dict | None = None
                         ) -> tuple[np.ndarray, np.ndarray, list[float], list[float]]:
  """Confident-GNMax of every setting on PUBLIC proxy votes, and its eps with Q queries.

  Setting a (a dict of threshold, sigma_threshold, sigma) runs once on the whole pool with
  `jax.random.fold_in(key, a)`; cell i = a * len(queries) + j keeps its first queries[j]
  answers, its eps charging every one of those queries both steps (`pate.pate_rdp_grouped`,
  at delta). Returns (labels_GxQ int32, answered_GxQ bool, eps_data_dependent,
  eps_data_independent), G cells, labels 0 and answered False after the first queries[j]
  (as `gnmax_grid`). The proxy's teachers see only public data, so nothing here is charged.

  Examples:
    >>> import numpy as np
    >>> votes = np.array([[9, 1], [6, 4], [10, 0]])
    >>> lab, ans, dep, ind = confident_gnmax_grid(jax.random.key(0), votes, [dict(
    ...     threshold=5.0, sigma_threshold=2.0, sigma=1.0)], [2, 3], delta=1e-5,
    ...     orders=np.array([2.0, 8.0, 32.0]))
    >>> lab.shape, bool(dep[0] <= ind[0] < ind[1])
    ((2, 3), True)
  """
  pate.check_votes(proxy_votes_QxK, "proxy_votes_QxK", ndim=2)
  votes = np.asarray(proxy_votes_QxK)
  queries = [_validate.check_int(qn, "queries", 1, votes.shape[0]) for qn in queries]
  _validate.check_delta(delta)
  pool, g = votes.shape[0], len(settings) * len(queries)
  labels, answered = np.zeros((g, pool), np.int32), np.zeros((g, pool), bool)
  eps_dep, eps_ind = [], []
  for a, kw in enumerate(settings):
    lab, ans = map(np.asarray, pate.confident_gnmax(jax.random.fold_in(key, a), votes, **kw))
    for j, qn in enumerate(queries):
      i = a * len(queries) + j
      labels[i, :qn], answered[i, :qn] = lab[:qn], ans[:qn]
      acct = pate.pate_rdp_grouped(votes[:qn], np.ones(qn, bool), orders=orders, cache=cache,
                                   **kw)
      eps_dep.append(pate.epsilon(orders, acct.data_dependent, delta))
      eps_ind.append(pate.epsilon(orders, acct.data_independent, delta))
  return labels, answered, eps_dep, eps_ind


def proxy_release(key: jax.Array | None, proxy_votes_QxK, *, delta: float, sigma: float,
                  threshold: float | None = None, sigma_threshold: float | None = None
                  ) -> tuple[pate_release.ReleaseParams | None, float | None]:
  """(plan, eps): `pate_release.plan_release` on PUBLIC proxy votes (every query charged) and
  the releasable eps of `pate_release.release` run there with `key` and that plan.

  A plan made on the proxy is fixed without the private votes, so the private release may
  use it. No order satisfying the release's conditions: (None, inf). key None: the plan only,
  (plan, None).

  Examples:
    >>> import numpy as np
    >>> plan, eps = proxy_release(jax.random.key(0), np.array([[50, 0]] * 20), delta=1e-5,
    ...                           sigma=20.0, threshold=40.0, sigma_threshold=10.0)
    >>> plan is not None and 0 < eps < 10
    True
  """
  pate.check_votes(proxy_votes_QxK, "proxy_votes_QxK", ndim=2)
  _validate.check_delta(delta)
  _validate.check_positive(sigma, "sigma")
  pate.check_threshold(threshold, sigma_threshold)
  kw = dict(sigma=sigma, threshold=threshold, sigma_threshold=sigma_threshold)
  try:      # the inputs are valid: what remains is "no order satisfies the conditions"
    plan = pate_release.plan_release(proxy_votes_QxK, None, delta=delta, **kw)
  except ValueError:
    return None, math.inf
  if key is None:
    return plan, None
  return plan, pate_release.release(key, proxy_votes_QxK, None, params=plan, delta=delta,
                                    **kw).epsilon
