"""A differentially private recommender in the style of McSherry & Mironov (KDD 2009).

Aggregates over all users are released once with Laplace noise of scale sensitivity /
eps_k (`private_statistics`); a per-user step (`predict`, not accounted) uses only the
release and the user's own ratings. Ratings are clamped to [lower, upper], c = (lower +
upper) / 2, h = (upper - lower) / 2:

  global_sum, global_count   S = sum (r - c), N     -> G = c + S~ / max(N~, 1)
  item_sums, item_counts     S_i, N_i, [I]          -> MAvg_i = clip(c + (S~_i + beta_i
                             (G - c)) / (max(N~_i, 0) + beta_i)), beta_i = beta_m or auto
  covariance, weights        Cov = sum_u w_u x_u x_u^T, Wgt = sum_u w_u e_u e_u^T, [I, I],
                             x_ui = clip(r_ui - MAvg_i, -B, B) (0 if unrated), e_u the
                             rated indicator, w_u = 1 / m_u (m_u = u's number of ratings)

Symmetric matrices get noise on the upper triangle with the diagonal, mirrored. Shrunk
covariance (post-processing): C_ij = (Cov~_ij + beta_p avg) / (max(Wgt~_ij, 0) + beta_p),
avg = sum Cov~ / sum max(Wgt~, 0), separately over diagonal and off-diagonal entries.

L1 sensitivities (`sensitivities`), one rating / one user with <= m ratings:
global_sum h / h m; global_count 1 / m; item_sums h / h m; item_counts 1 / m;
covariance 3 B^2 / 2 / B^2 (m + 1) / 2; weights 3 / 2 / (m + 1) / 2.
Removing rating (u, i) moves entries involving i by <= B^2 and the rest of u's block by
<= B^2 / 2; x_u depends only on u's ratings and the released MAvg. Per user the bound
grows with m (lecture §8.3): privacy_unit="user" first cuts each user to a random subset
of at most m = `max_ratings_per_user` ratings.

Accounting: six pure eps_k-DP releases in sequence are (sum_k eps_k)-DP (basic
composition, Dwork & Roth 2014, Thm 3.16); `epsilon_of_release` reads the same noise
under another sensitivity table.

Per-user step: b_u = sum_i (r_ui - MAvg_i) / (m_u + beta_u); q_i = rows of the top
`rank` eigenvectors of C times sqrt(eigenvalue); p_u minimises sum_i (r_ui - MAvg_i - b_u
- <q_i, p>)^2 + ridge |p|^2; prediction clip(MAvg_i + b_u + <q_i, p_u>, lower, upper).
Unlike the paper: item-centred covariance only, and the per-user step factorises C (no kNN).

Warning: float32 Laplace noise (the idealised mechanism), not defended against Mironov's
(2012) lattice attack (the grid defence would multiply the noise on I (I + 1) / 2
entries); `private_statistics` warns with `mechanisms.InsecureNoiseWarning`.

References: McSherry & Mironov, KDD 2009, https://doi.org/10.1145/1557019.1557090.

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

STATISTICS = ("global_sum", "global_count", "item_sums", "item_counts", "covariance", "weights")
PRIVACY_UNITS = ("rating", "user")
# Fractions of epsilon per statistic, in the order of STATISTICS.
DEFAULT_SPLIT = (0.02, 0.02, 0.13, 0.13, 0.4, 0.3)
# Default stabilisers: beta_m=None is a normal prior's shrinkage with public guesses h / 2
# (rating spread) and h / 4 (item-mean spread); beta_p=None uses these two constants.
AUTO_BETA_P = 10.0
AUTO_BETA_NOISE = 4.0


@_validate.names_extreme_arguments
def sensitivities(privacy_unit: str = "rating", *, lower: float = ratings_lib.RATING_MIN,
                  upper: float = ratings_lib.RATING_MAX, clamp: float = 1.0,
                  max_ratings_per_user: Optional[int] = None) -> dict[str, float]:
  """{statistic: L1 sensitivity} over STATISTICS (module docstring table).

  clamp = B > 0 bounds |r_ui - MAvg_i|; max_ratings_per_user = m is required for "user".

  Examples:
    >>> sensitivities("user", clamp=1.0, max_ratings_per_user=9)["covariance"]
    5.0
  """
  _validate.check_choice(privacy_unit, PRIVACY_UNITS, "privacy_unit")
  lo, hi = _validate.check_interval(lower, upper)
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
  """(S, N): sum of clip(r, lower, upper) - c over the ratings [R], and their number."""
  lo, hi = _validate.check_interval(lower, upper)
  r = _validate.check_array(rating_R, "rating_R", ndim=1, min_size=1)
  c = (lo + hi) / 2.0
  return float(np.sum(np.clip(r, lo, hi) - c)), float(r.shape[0])


@_validate.names_extreme_arguments
def item_statistics(item_R, rating_R, num_items: int, *,
                    lower: float = ratings_lib.RATING_MIN,
                    upper: float = ratings_lib.RATING_MAX) -> tuple[np.ndarray, np.ndarray]:
  """(S_I, N_I) float64[I]: per item, the sum of clip(r, lower, upper) - c and the count."""
  lo, hi = _validate.check_interval(lower, upper)
  i_count = _validate.check_size(num_items, "num_items", bytes_per_unit=16)  # two float64[I]
  r = _validate.check_array(rating_R, "rating_R", ndim=1, min_size=1)
  items = _validate.check_array(item_R, "item_R", np.int64, shape=(r.shape[0],), low=0,
                                high=i_count - 1, integer=True)
  c = (lo + hi) / 2.0
  sums = np.bincount(items, weights=np.clip(r, lo, hi) - c, minlength=i_count)
  counts = np.bincount(items, minlength=i_count).astype(np.float64)
  return sums, counts


def covariance_statistics(user_R, item_R, residual_R, num_users: int, num_items: int, *,
                          clamp: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
  """(Cov, Wgt) float64[I, I], symmetric: sum_u w_u x_u x_u^T and sum_u w_u e_u e_u^T.

  user_R, item_R: distinct pairs [R]; residual_R: r_ui - MAvg_i, clipped to +-clamp.
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
  """bool[R] keep mask: each user's m = max_ratings_per_user lowest-priority ratings.

  Priority SplitMix64(key data, u, i): a user's subset depends only on the key and that
  user's ratings, so adding or removing a user leaves the others' subsets unchanged.
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

  global_mean G; item_means_I MAvg; covariance_IxI the shrunk C; noisy: raw noisy
  releases; epsilons, noise_scales, sensitivities per statistic, epsilon their total;
  max_ratings_per_user m (None at rating level); kept_R bool[R]: ratings that entered the
  release, NOT publishable; beta_m_I, beta_p: the stabilisers used.
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
  arr = _validate.check_array(split, "split", shape=(len(STATISTICS),), low=0.0, open_low=True)
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
  """Releases the private aggregates of the module docstring: PrivateStatistics.

  Ratings as COO lists [R], U and I public. epsilon: total (inf: exact statistics);
  split: fractions per statistic (order of STATISTICS), each > 0, summing to 1.
  beta_m: fictitious ratings at G per item mean (> 0 when eps is finite); None: 4 +
  32 b_S^2 / (h^2 max(N~_i, b_N)) from the noise scales. beta_p: None: AUTO_BETA_P +
  AUTO_BETA_NOISE x the weight noise scale. max_ratings_per_user: required for "user",
  None at rating level. Privacy: eps-DP for add/remove of one rating or one user (basic
  composition of six Laplace mechanisms; idealised noise, module Warning).
  """
  eps = _validate.check_epsilon(epsilon, allow_inf=True)
  _validate.check_choice(privacy_unit, PRIVACY_UNITS, "privacy_unit")
  fractions = _check_split(split)
  lo, hi = _validate.check_interval(lower, upper)
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
  """Total eps of a Laplace release: sum over STATISTICS of sensitivity / noise scale (inf
  if a scale is 0), e.g. the same noise under the user-level table.

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
    sens = _validate.check_positive(sensitivities_by_statistic[s], "sensitivities_by_statistic")
    total.append(math.inf if scale == 0.0 else sens / scale)
  return math.fsum(total)


def predict(stats: PrivateStatistics, user_R, item_R, rating_R, query_user_Q,
            query_item_Q, *, rank: int = 4, beta_u: float = 5.0,
            ridge: float = 0.5) -> np.ndarray:
  """The per-user step (module docstring): float64[Q] predictions, clipped to the scale.

  user_R, item_R, rating_R: the users' own ratings [R]; query_user_Q, query_item_Q: pairs
  to predict; rank K in [0, I] (0: MAvg_i + b_u). Not a release: each prediction uses only
  the release and that user's own ratings.
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
