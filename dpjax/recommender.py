"""A differentially private recommender in the style of McSherry & Mironov (KDD 2009).

A few aggregates over all users are released once with Laplace noise; a per-user step
then uses only the release and the user's own ratings (no accounting needed).

Released statistics (`private_statistics`), in order, each with Laplace noise of
scale sensitivity / eps_k (pure eps_k-DP), ratings first clamped to [lower, upper]
(c = (lower + upper) / 2, h = (upper - lower) / 2):

  global_sum     S = sum_r (r - c)                       -> G = c + S~ / max(N~, 1)
  global_count   N = number of ratings                      (clamped to [lower, upper])
  item_sums      S_i = sum_{u rated i} (r_ui - c), [I]   -> item means, stabilised with
  item_counts    N_i = number of ratings of item i, [I]     beta_m fictitious ratings at G:
                 MAvg_i = clip(c + (S~_i + beta_i (G - c)) / (max(N~_i, 0) + beta_i)),
                 beta_i = beta_m, or by default larger where the noise is large next
                 to the noisy count (`private_statistics`)
  covariance     Cov = sum_u w_u x_u x_u^T, [I, I]        with x_ui = clip(r_ui - MAvg_i,
  weights        Wgt = sum_u w_u e_u e_u^T, [I, I]          -B, B) (0 if unrated), e_u the
                 0/1 rated-indicator, w_u = 1 / m_u (m_u = user u's number of ratings)

The symmetric matrices get noise on the upper triangle with the diagonal (I (I + 1) / 2
numbers, the entries the L1 sensitivities are over), mirrored. The shrunk covariance is
post-processing: C_ij = (Cov~_ij + beta_p avg) / (max(Wgt~_ij, 0) + beta_p), with avg =
sum Cov~ / sum max(Wgt~, 0) taken separately over the diagonal and off-diagonal entries.

Sensitivities (L1, add/remove neighbours; `sensitivities`):

  statistic      rating level (one rating)    user level (one user, <= m ratings)
  global_sum     h                            h m
  global_count   1                            m
  item_sums      h                            h m
  item_counts    1                            m
  covariance     3 B^2 / 2                    B^2 (m + 1) / 2
  weights        3 / 2                        (m + 1) / 2

Rating level: removing rating (u, i) moves the entries involving i by at most B^2 and
the rest of user u's block by at most B^2 / 2 (the weight 1 / m bounds this); x_u depends
only on u's ratings and the released MAvg, so no other user moves. Removing a whole
user moves them by (1/m)(S^2 + Q)/2 with S = sum |x_i| <= m B, Q <= m B^2, which grows
with m: the paper's guarantee is per rating, and per user it degrades with the user's
activity (lecture §8.3). privacy_unit="user" first cuts each user to a random
subset of at most m = `max_ratings_per_user` ratings and uses the user-level column.

Accounting: six pure eps_k-DP releases in sequence (adaptively: x uses the released
MAvg) are (sum_k eps_k)-DP by basic composition (Dwork & Roth 2014, Thm 3.16).
`epsilon_of_release` reads the same noise under another sensitivity table;
`accounting.composition.group_privacy(eps, 0, k)` bounds a user with k ratings.

The per-user step (`predict`, not accounted): b_u = sum_i (r_ui - MAvg_i) / (m_u +
beta_u); q_i = rows of the top `rank` eigenvectors of C times sqrt(eigenvalue); p_u
minimises sum_i (r_ui - MAvg_i - b_u - <q_i, p>)^2 + ridge |p|^2 over u's ratings;
prediction clip(MAvg_i + b_u + <q_i, p_u>, lower, upper) (MAvg_i without ratings).

Differences from the paper: the covariance is of item-centred ratings only (removing
per-user effects first would let one rating move the whole row x_u, breaking the
rating-level bound), and the per-user step factorises the private covariance (no kNN).

Warning: the Laplace noise is float32 noise added in floating point (the paper's
idealised real-valued mechanism); the exact float output is not defended against
Mironov's (2012) lattice attack (the integer-grid defence of
`mechanisms.laplace_mechanism` would multiply the noise on the I (I + 1) / 2 covariance
entries). `private_statistics` warns with `mechanisms.InsecureNoiseWarning`.

References: McSherry & Mironov, "Differentially private recommender systems: building
privacy into the Netflix Prize contenders", KDD 2009,
https://doi.org/10.1145/1557019.1557090; Dwork & Roth, "The algorithmic foundations
of differential privacy", 2014.

Shape letters: U users, I items, R ratings, Q queried (user, item) pairs, K rank.

Examples:
  >>> import jax, warnings
  >>> from dpjax.data import ratings
  >>> d = ratings.sample(jax.random.key(0), num_users=200, num_items=20,
  ...                    mean_ratings_per_user=8)
  >>> with warnings.catch_warnings():
  ...   warnings.simplefilter("ignore")
  ...   st = private_statistics(jax.random.key(1), d.user_R, d.item_R, d.rating_R,
  ...                           d.num_users, d.num_items, epsilon=1.0)
  >>> round(st.epsilon, 6)
  1.0
  >>> sensitivities("rating", clamp=1.0)["covariance"]
  1.5
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import mechanisms
from dpjax.data import ratings as ratings_lib

__all__ = [
    "STATISTICS", "PRIVACY_UNITS", "DEFAULT_SPLIT", "sensitivities", "global_statistics",
    "item_statistics", "covariance_statistics", "truncate_users", "PrivateStatistics",
    "private_statistics", "epsilon_of_release", "predict", "rmse",
]

STATISTICS = ("global_sum", "global_count", "item_sums", "item_counts", "covariance",
              "weights")
PRIVACY_UNITS = ("rating", "user")
# Fractions of epsilon per statistic, in the order of STATISTICS.
DEFAULT_SPLIT = (0.02, 0.02, 0.13, 0.13, 0.4, 0.3)
# Default stabilisers. Item means (beta_m=None): the shrinkage a normal prior would
# give, with a public guess of the rating spread (h / 2) and of the item-mean spread
# (h / 4): beta_i = 4 + 32 b_S^2 / (h^2 max(N~_i, b_N)), b_S and b_N the sum and count
# noise scales (Laplace variance 2 b^2), so an item whose noisy count is small next
# to the noise leans on G. Covariance (beta_p=None): AUTO_BETA_P + AUTO_BETA_NOISE
# times the weight noise scale.
AUTO_BETA_P = 10.0
AUTO_BETA_NOISE = 4.0


def _check_scale(lower, upper) -> tuple[float, float]:
  lo = _validate.check_finite(lower, "lower")
  hi = _validate.check_finite(upper, "upper")
  if not hi > lo:
    raise ValueError(f"upper must be > lower = {lo:g}, got {hi:g}")
  return lo, hi


@_validate.names_extreme_arguments
def sensitivities(privacy_unit: str = "rating", *, lower: float = ratings_lib.RATING_MIN,
                  upper: float = ratings_lib.RATING_MAX, clamp: float = 1.0,
                  max_ratings_per_user: Optional[int] = None) -> dict[str, float]:
  """L1 sensitivity of each released statistic (module docstring table).

  privacy_unit "rating" or "user" (add/remove one); h = (upper - lower) / 2; clamp = B > 0
  bounds |r_ui - MAvg_i|; max_ratings_per_user = m >= 1 is required for "user". Returns
  {statistic: L1 sensitivity} over STATISTICS.

  Examples:
    >>> sensitivities("user", clamp=1.0, max_ratings_per_user=9)["covariance"]
    5.0
  """
  _validate.check_choice(privacy_unit, PRIVACY_UNITS, "privacy_unit")
  lo, hi = _check_scale(lower, upper)
  b = _validate.check_positive(clamp, "clamp")
  h = (hi - lo) / 2.0
  if privacy_unit == "rating":
    return {"global_sum": h, "global_count": 1.0, "item_sums": h, "item_counts": 1.0,
            "covariance": 1.5 * b * b, "weights": 1.5}
  if max_ratings_per_user is None:
    raise ValueError("max_ratings_per_user must be an integer >= 1 for privacy_unit='user' "
                     "(a user-level bound needs a cap on each user's ratings), got None")
  m = float(_validate.check_int(max_ratings_per_user, "max_ratings_per_user"))
  return {"global_sum": h * m, "global_count": m, "item_sums": h * m, "item_counts": m,
          "covariance": b * b * (m + 1.0) / 2.0, "weights": (m + 1.0) / 2.0}


def global_statistics(rating_R, *, lower: float = ratings_lib.RATING_MIN,
                      upper: float = ratings_lib.RATING_MAX) -> tuple[float, float]:
  """(S, N): sum of clip(r, lower, upper) - c over the ratings [R], and their number.

  c = (lower + upper) / 2; one rating moves S by at most h = (upper - lower) / 2 and N by 1.
  """
  lo, hi = _check_scale(lower, upper)
  r = _validate.check_array(rating_R, "rating_R", ndim=1, min_size=1)
  c = (lo + hi) / 2.0
  return float(np.sum(np.clip(r, lo, hi) - c)), float(r.shape[0])


@_validate.names_extreme_arguments
def item_statistics(item_R, rating_R, num_items: int, *,
                    lower: float = ratings_lib.RATING_MIN,
                    upper: float = ratings_lib.RATING_MAX) -> tuple[np.ndarray, np.ndarray]:
  """(S_I, N_I) float64[I]: per item, the sum of clip(r, lower, upper) - c and the count."""
  lo, hi = _check_scale(lower, upper)
  i_count = _validate.check_int(num_items, "num_items")
  r = _validate.check_array(rating_R, "rating_R", ndim=1, min_size=1)
  items = _validate.check_array(item_R, "item_R", np.int64, shape=(r.shape[0],), low=0,
                                high=i_count - 1, integer=True)
  c = (lo + hi) / 2.0
  sums = np.bincount(items, weights=np.clip(r, lo, hi) - c, minlength=i_count)
  counts = np.bincount(items, minlength=i_count).astype(np.float64)
  return sums, counts


def covariance_statistics(user_R, item_R, residual_R, num_users: int, num_items: int, *,
                          clamp: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
  """(Cov, Wgt): sum_u w_u x_u x_u^T and sum_u w_u e_u e_u^T with w_u = 1 / m_u.

  user_R, item_R: ids in [0, U) and [0, I), [R], pairs distinct; residual_R: r_ui - MAvg_i,
  [R], x_ui = clip(residual, -clamp, clamp); e_ui = 1 for rated pairs. Returns float64[I, I]
  symmetric Cov and Wgt.
  """
  b = _validate.check_positive(clamp, "clamp")
  res = _validate.check_array(residual_R, "residual_R", ndim=1, min_size=1)
  users, items, _, u, i_count = ratings_lib.check_ratings(
      user_R, item_R, res, num_users, num_items, lower=None, upper=None)
  _validate.check_size(u * i_count, "num_users", bytes_per_unit=16)
  x = np.zeros((u, i_count))
  e = np.zeros((u, i_count))
  x[users, items] = np.clip(res, -b, b)
  e[users, items] = 1.0
  m = e.sum(axis=1)
  w = np.where(m > 0, 1.0 / np.maximum(m, 1.0), 0.0)
  cov = (x * w[:, None]).T @ x
  wgt = (e * w[:, None]).T @ e
  return (cov + cov.T) / 2.0, (wgt + wgt.T) / 2.0     # exactly symmetric


def truncate_users(key: jax.Array, user_R, item_R, num_users: int, num_items: int,
                   max_ratings_per_user: int) -> np.ndarray:
  """Which ratings to keep so that no user has more than m: a random subset per user.

  Rating (u, i) gets the priority SplitMix64(seed, u, i) (seed = the key's data); each
  user keeps their m = max_ratings_per_user lowest-priority ratings (bool[R] keep mask).
  A user's subset depends only on the key and that user's own ratings, so adding or
  removing a user leaves every other user's subset unchanged.
  """
  u = _validate.check_int(num_users, "num_users")
  i_count = _validate.check_int(num_items, "num_items")
  m = _validate.check_int(max_ratings_per_user, "max_ratings_per_user")
  users = _validate.check_array(user_R, "user_R", np.int64, ndim=1, min_size=1, low=0,
                                high=u - 1, integer=True)
  items = _validate.check_array(item_R, "item_R", np.int64, shape=users.shape, low=0,
                                high=i_count - 1, integer=True)
  prio = _priorities(key, users, items)
  order = np.lexsort((prio, users))
  sorted_users = users[order]
  first = np.searchsorted(sorted_users, sorted_users, side="left")
  keep = np.zeros(users.shape[0], bool)
  keep[order] = (np.arange(users.shape[0]) - first) < m
  return keep


def _splitmix64(z: np.ndarray) -> np.ndarray:
  """The SplitMix64 finaliser (Steele, Lea & Flood 2014), a bijection of uint64."""
  with np.errstate(over="ignore"):
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _priorities(key, users: np.ndarray, items: np.ndarray) -> np.ndarray:
  """uint64[R] hash of (key data, user, item): each pair's priority, independent of R."""
  words = np.asarray(jax.random.key_data(key), np.uint64).ravel()
  seed = np.uint64(0)
  for w in words:
    seed = _splitmix64(np.asarray(seed ^ w, np.uint64))
  h = _splitmix64(seed ^ users.astype(np.uint64))
  return _splitmix64(h ^ items.astype(np.uint64))


class PrivateStatistics(NamedTuple):
  """What `private_statistics` releases, and its accounting.

  global_mean: G. item_means_I: float64[I] MAvg. covariance_IxI: float64[I, I] the
  shrunk C. noisy: {statistic: raw noisy release}. epsilons, noise_scales, sensitivities:
  {statistic: float}; epsilon: their total. privacy_unit: "rating" or "user";
  max_ratings_per_user: m (None at rating level). kept_R: bool[R], the ratings that
  entered the release: a record for the data holder, NOT publishable (it depends on the
  data). lower, upper: the rating scale. num_users: U. beta_m_I: float64[I] and beta_p:
  the stabilisers used.
  """
  global_mean: float
  item_means_I: np.ndarray
  covariance_IxI: np.ndarray
  noisy: dict
  epsilons: dict
  noise_scales: dict
  sensitivities: dict
  epsilon: float
  privacy_unit: str
  max_ratings_per_user: Optional[int]
  kept_R: np.ndarray
  lower: float
  upper: float
  num_users: int
  beta_m_I: np.ndarray
  beta_p: float


def _check_split(split) -> tuple[float, ...]:
  if isinstance(split, (str, bytes)) or not hasattr(split, "__len__"):
    raise ValueError(f"split must be {len(STATISTICS)} fractions > 0 summing to 1, got "
                     f"{split!r}")
  arr = _validate.check_array(split, "split", shape=(len(STATISTICS),), low=0.0,
                              open_low=True)
  if abs(float(arr.sum()) - 1.0) > 1e-9:
    raise ValueError(f"split must sum to 1, got {float(arr.sum()):.6g}")
  return tuple(float(v) for v in arr)


def _laplace(key, value, scale: float) -> np.ndarray:
  """value + Laplace(scale) in float32 (scale 0: value unchanged), as float64."""
  v = np.asarray(value, np.float64)
  if scale == 0.0:
    return v
  noise = np.asarray(jax.random.laplace(key, v.shape, jnp.float32), np.float64)
  return np.asarray(np.float32(v) + np.float32(scale) * np.float32(noise), np.float64)


def _symmetric_laplace(key, mat, scale: float) -> np.ndarray:
  """mat + symmetric Laplace noise: drawn for the upper triangle, mirrored."""
  n = mat.shape[0]
  iu = np.triu_indices(n)
  upper = _laplace(key, mat[iu], scale)
  out = np.zeros_like(mat)
  out[iu] = upper
  out.T[iu] = upper
  return out


def _shrink(cov, wgt, beta_p: float) -> np.ndarray:
  w = np.maximum(wgt, 0.0)
  diag = np.eye(cov.shape[0], dtype=bool)
  out = np.empty_like(cov)
  for part in (diag, ~diag):
    avg = float(cov[part].sum()) / max(float(w[part].sum()), 1.0)
    denom = w[part] + beta_p
    # denom = 0 only for beta_p = 0 and an exact weight of 0 (no co-ratings, so cov = 0):
    # the limit beta_p -> 0 is then avg.
    out[part] = np.where(denom > 0, (cov[part] + beta_p * avg) / np.where(denom > 0, denom,
                                                                          1.0), avg)
  return out


@_validate.names_extreme_arguments
def private_statistics(key: jax.Array, user_R, item_R, rating_R, num_users: int,
                       num_items: int, *, epsilon: float, privacy_unit: str = "rating",
                       split=DEFAULT_SPLIT, lower: float = ratings_lib.RATING_MIN,
                       upper: float = ratings_lib.RATING_MAX, clamp: float = 1.0,
                       beta_m: Optional[float] = None, beta_p: Optional[float] = None,
                       max_ratings_per_user: Optional[int] = None) -> PrivateStatistics:
  """Releases the private aggregates of the module docstring.

  Args:
    user_R, item_R, rating_R: the ratings as COO lists, [R], R >= 1; U, I public.
    epsilon: total eps > 0; inf releases the exact statistics (no noise).
    split: fractions of epsilon per statistic (order of STATISTICS), each > 0, sum 1.
    lower, upper, clamp: the rating scale, and B > 0 bounding |r_ui - MAvg_i|.
    beta_m: >= 0 fictitious ratings at G per item mean (0 only if epsilon = inf);
      None: per item 4 + 32 b_S^2 / (h^2 max(N~_i, b_N)), from public noise scales and
      released counts (no privacy cost).
    beta_p: >= 0 entries at the average covariance; None: AUTO_BETA_P + AUTO_BETA_NOISE x
      the weight noise scale.
    max_ratings_per_user: m, required for "user"; must be None at rating level (a cap
      there would let a removed rating pull in another).
  Returns:
    PrivateStatistics; `epsilon` is the total eps of the release for privacy_unit.
  Privacy: eps-DP for add/remove of one rating ("rating") or one user ("user"),
    by basic composition of six Laplace mechanisms, for the idealised real-valued
    Laplace noise (see the module Warning).
  """
  eps = _validate.check_epsilon(epsilon, allow_inf=True)
  _validate.check_choice(privacy_unit, PRIVACY_UNITS, "privacy_unit")
  fractions = _check_split(split)
  lo, hi = _check_scale(lower, upper)
  b = _validate.check_positive(clamp, "clamp")
  bm = None if beta_m is None else _validate.check_nonnegative(beta_m, "beta_m")
  bp = None if beta_p is None else _validate.check_nonnegative(beta_p, "beta_p")
  if privacy_unit == "rating" and max_ratings_per_user is not None:
    raise ValueError("max_ratings_per_user must be None for privacy_unit='rating', got "
                     f"{max_ratings_per_user!r}")
  users, items, r, u, i_count = ratings_lib.check_ratings(
      user_R, item_R, rating_R, num_users, num_items, lower=None, upper=None)
  sens = sensitivities(privacy_unit, lower=lo, upper=hi, clamp=b,
                       max_ratings_per_user=max_ratings_per_user)
  if math.isfinite(eps) and bm == 0.0:
    raise ValueError("beta_m must be > 0 when epsilon is finite (noisy item counts can be "
                     "near 0), got 0")
  if math.isfinite(eps) and bp == 0.0:
    raise ValueError("beta_p must be > 0 when epsilon is finite (noisy weights can be "
                     "<= 0 next to a noisy covariance), got 0")
  k_trunc, *k_stat = jax.random.split(key, 1 + len(STATISTICS))
  keep = (truncate_users(k_trunc, users, items, u, i_count, max_ratings_per_user)
          if privacy_unit == "user" else np.ones(r.shape[0], bool))
  users, items, r = users[keep], items[keep], r[keep]
  if r.shape[0] == 0:   # cannot happen: every user keeps >= 1 of their ratings
    raise AssertionError("truncation removed every rating")
  epsilons = {s: f * eps for s, f in zip(STATISTICS, fractions)}
  scales = {s: (0.0 if math.isinf(eps) else sens[s] / epsilons[s]) for s in STATISTICS}
  if bp is None:
    bp = AUTO_BETA_P + AUTO_BETA_NOISE * scales["weights"]
  if math.isfinite(eps):
    warnings.warn("recommender.private_statistics adds float32 Laplace noise: the exact "
                  "float output is not defended against Mironov's (2012) lattice attack",
                  mechanisms.InsecureNoiseWarning, stacklevel=2)
  c = (lo + hi) / 2.0
  keys = dict(zip(STATISTICS, k_stat))
  s_g, n_g = global_statistics(r, lower=lo, upper=hi)
  s_g = float(_laplace(keys["global_sum"], s_g, scales["global_sum"]))
  n_g = float(_laplace(keys["global_count"], n_g, scales["global_count"]))
  g = float(np.clip(c + s_g / max(n_g, 1.0), lo, hi))
  s_i, n_i = item_statistics(items, r, i_count, lower=lo, upper=hi)
  s_i = _laplace(keys["item_sums"], s_i, scales["item_sums"])
  n_i = _laplace(keys["item_counts"], n_i, scales["item_counts"])
  if bm is None:
    h = (hi - lo) / 2.0
    bm = 4.0 + 32.0 * scales["item_sums"] ** 2 / (
        h * h * np.maximum(n_i, max(scales["item_counts"], 1.0)))
  bm = np.broadcast_to(np.asarray(bm, np.float64), n_i.shape)
  denom = np.maximum(n_i, 0.0) + bm
  safe = np.where(denom > 0, denom, 1.0)
  mavg = np.clip(np.where(denom > 0, c + (s_i + bm * (g - c)) / safe, g), lo, hi)
  residual = np.clip(r, lo, hi) - mavg[items]
  cov, wgt = covariance_statistics(users, items, residual, u, i_count, clamp=b)
  cov = _symmetric_laplace(keys["covariance"], cov, scales["covariance"])
  wgt = _symmetric_laplace(keys["weights"], wgt, scales["weights"])
  noisy = {"global_sum": s_g, "global_count": n_g, "item_sums": s_i, "item_counts": n_i,
           "covariance": cov, "weights": wgt}
  return PrivateStatistics(
      global_mean=g, item_means_I=mavg, covariance_IxI=_shrink(cov, wgt, bp), noisy=noisy,
      epsilons=epsilons, noise_scales=scales, sensitivities=sens,
      epsilon=eps if math.isinf(eps) else math.fsum(epsilons.values()),
      privacy_unit=privacy_unit,
      max_ratings_per_user=None if privacy_unit == "rating" else int(max_ratings_per_user),
      kept_R=keep, lower=lo, upper=hi, num_users=u, beta_m_I=bm, beta_p=bp)


def epsilon_of_release(noise_scales: dict, sensitivities_by_statistic: dict) -> float:
  """Total eps of a Laplace release: sum over statistics of sensitivity / noise scale.

  Gives the epsilon of the same noise under another neighbouring relation (for example
  the user-level table of `sensitivities`), by basic composition. Both dicts are keyed
  by STATISTICS; returns inf if any scale is 0.

  Examples:
    >>> s = sensitivities("rating", clamp=1.0)
    >>> round(epsilon_of_release({k: v / 0.5 for k, v in s.items()}, s), 6)
    3.0
  """
  for name, table in (("noise_scales", noise_scales),
                      ("sensitivities_by_statistic", sensitivities_by_statistic)):
    if not isinstance(table, dict) or set(table) != set(STATISTICS):
      raise ValueError(f"{name} must be a dict with keys {STATISTICS}, got {table!r}")
  total = []
  for s in STATISTICS:
    scale = _validate.check_nonnegative(noise_scales[s], "noise_scales")
    sens = _validate.check_positive(sensitivities_by_statistic[s],
                                    "sensitivities_by_statistic")
    total.append(math.inf if scale == 0.0 else sens / scale)
  return math.fsum(total)


def predict(stats: PrivateStatistics, user_R, item_R, rating_R, query_user_Q,
            query_item_Q, *, rank: int = 4, beta_u: float = 5.0,
            ridge: float = 0.5) -> np.ndarray:
  """The per-user step: each user's predictions from the release and their own ratings.

  Math in the module docstring. user_R, item_R, rating_R: the users' own (training)
  ratings, [R] (clamped to the release's scale); query_user_Q, query_item_Q: the pairs to
  predict, [Q]; rank: K in [0, I] (0: MAvg_i + b_u); beta_u >= 0; ridge > 0.

  Returns:
    float64[Q] predictions clip(MAvg_i + b_u + <q_i, p_u>, stats.lower, stats.upper).
  Privacy: not a release; each user's prediction uses only the release and that
    user's own ratings.
  """
  if not isinstance(stats, PrivateStatistics):
    raise TypeError(f"stats must be a PrivateStatistics, got {type(stats).__name__}")
  mavg = stats.item_means_I
  i_count = mavg.shape[0]
  n_users = stats.num_users
  users, items, r, _, _ = ratings_lib.check_ratings(user_R, item_R, rating_R, n_users,
                                                    i_count, lower=None, upper=None)
  r = np.clip(r, stats.lower, stats.upper)
  k = _validate.check_int(rank, "rank", 0, i_count)
  bu = _validate.check_nonnegative(beta_u, "beta_u")
  lam = _validate.check_positive(ridge, "ridge")
  qu = _validate.check_array(query_user_Q, "query_user_Q", np.int64, ndim=1, min_size=1,
                             low=0, high=n_users - 1, integer=True)
  qi = _validate.check_array(query_item_Q, "query_item_Q", np.int64, shape=(qu.shape[0],),
                             low=0, high=i_count - 1, integer=True)
  e = r - mavg[items]
  m = np.bincount(users, minlength=n_users).astype(np.float64)
  b_u = np.bincount(users, weights=e, minlength=n_users) / np.maximum(m + bu, 1e-12)
  b_u = np.where(m > 0, b_u, 0.0)
  pred = mavg[qi] + b_u[qu]
  if k > 0:
    vals, vecs = np.linalg.eigh(stats.covariance_IxI)
    top = np.argsort(vals)[::-1][:k]
    q = vecs[:, top] * np.sqrt(np.maximum(vals[top], 0.0))[None, :]
    y = e - b_u[users]
    q_r = q[items]
    a = np.zeros((n_users, k, k))
    np.add.at(a, users, q_r[:, :, None] * q_r[:, None, :])
    rhs = np.zeros((n_users, k))
    np.add.at(rhs, users, q_r * y[:, None])
    p = np.linalg.solve(a + lam * np.eye(k)[None], rhs[..., None])[..., 0]
    pred = pred + np.sum(q[qi] * p[qu], axis=1)
  return np.clip(pred, stats.lower, stats.upper)


def rmse(predictions_Q, targets_Q) -> float:
  """Root mean squared error between two [Q] arrays (Q >= 1).

  Examples:
    >>> rmse([1.0, 3.0], [2.0, 3.0])
    0.7071067811865476
  """
  p = _validate.check_array(predictions_Q, "predictions_Q", ndim=1, min_size=1)
  t = _validate.check_array(targets_Q, "targets_Q", shape=p.shape)
  return float(np.sqrt(np.mean((p - t) ** 2)))
