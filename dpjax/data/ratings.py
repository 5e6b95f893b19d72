"""A synthetic ratings world for the private recommender (lecture §8.3).

Users rate items 1..5 under a biased low-rank model with known parameters:

    score_ui = mu + b_u + b_i + <p_u, q_i>,   true_ui = clip(score_ui, 1, 5)
    rating_ui = clip(round(score_ui + noise_std Z), 1, 5),   Z ~ N(0, 1)

b_u, b_i normal; p_u ~ N(0, I / rank) interaction_std, q_i ~ N(0, I). Item popularity is
Zipf in a random rank k_i, pop_i ~ (k_i + 1)^(-popularity_exponent); user u rates m_u =
clip(round(LogNormal), 1, I) distinct items (mean ~ `mean_ratings_per_user`, log-sd
`activity_spread`) drawn by pop_i. A rating is held out with probability `test_fraction`.

Shape letters: U users, I items, R observed ratings, K latent rank.

Examples:
  >>> import jax
  >>> data = sample(jax.random.key(0), num_users=50, num_items=20, mean_ratings_per_user=5)
  >>> data.user_R.shape == data.item_R.shape == data.rating_R.shape
  True
  >>> bool(set(np.unique(data.rating_R)) <= {1.0, 2.0, 3.0, 4.0, 5.0})
  True
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from dpjax import _validate

__all__ = ["Ratings", "sample", "check_ratings", "RATING_MIN", "RATING_MAX"]

RATING_MIN = 1.0
RATING_MAX = 5.0


class Ratings(NamedTuple):
  """Observed ratings (COO lists, distinct pairs, test_R True = held out) and the world's
  parameters (popularity_I, mu, b_u, b_i, p_u, q_i); U, I count unrated ones too.
  """
  user_R: np.ndarray
  item_R: np.ndarray
  rating_R: np.ndarray
  true_R: np.ndarray
  test_R: np.ndarray
  num_users: int
  num_items: int
  popularity_I: np.ndarray
  global_mean: float
  user_bias_U: np.ndarray
  item_bias_I: np.ndarray
  user_factors_UxK: np.ndarray
  item_factors_IxK: np.ndarray


def sample(key: jax.Array, num_users: int = 2000, num_items: int = 200, *, rank: int = 4,
           mean_ratings_per_user: float = 25.0, activity_spread: float = 0.8,
           popularity_exponent: float = 1.0, global_mean: float = 3.6,
           user_bias_std: float = 0.35, item_bias_std: float = 0.45,
           interaction_std: float = 0.7, noise_std: float = 0.6,
           test_fraction: float = 0.1) -> Ratings:
  """Draws a ratings world (module docstring) from one key; R = sum_u m_u."""
  u = _validate.check_int(num_users, "num_users")
  i_count = _validate.check_int(num_items, "num_items", 2)
  _validate.check_size(i_count, "num_items", bytes_per_unit=16, units=u, units_name="num_users")
  k = _validate.check_int(rank, "rank")
  m_mean = _validate.check_range(mean_ratings_per_user, "mean_ratings_per_user", 1.0, i_count)
  spread = _validate.check_range(activity_spread, "activity_spread", 0.0, 5.0)
  alpha = _validate.check_range(popularity_exponent, "popularity_exponent", 0.0, 10.0)
  mu = _validate.check_range(global_mean, "global_mean", RATING_MIN, RATING_MAX)
  stds = {n: _validate.check_nonnegative(v, n) for n, v in (
      ("user_bias_std", user_bias_std), ("item_bias_std", item_bias_std),
      ("interaction_std", interaction_std), ("noise_std", noise_std))}
  tf = _validate.check_range(test_fraction, "test_fraction", 0.0, 1.0, open_high=True)
  rng = np.random.default_rng(np.asarray(jax.random.key_data(key), np.uint32).ravel())
  rank_i = rng.permutation(i_count)
  pop = (rank_i + 1.0) ** (-alpha)
  pop = pop / pop.sum()
  z_act = rng.standard_normal(u)
  m_u = np.clip(np.round(np.exp(np.log(m_mean) - spread ** 2 / 2 + spread * z_act)), 1,
                i_count).astype(np.int64)
  g = np.log(pop)[None, :] + rng.gumbel(size=(u, i_count))
  # Position of each item in the user's Gumbel order: the m_u first are observed.
  position = np.argsort(np.argsort(-g, axis=1), axis=1)
  observed = position < m_u[:, None]
  user_R, item_R = np.nonzero(observed)          # row-major: grouped by user
  # float64 factors [U, K], [I, K] and three gathered [R, K] products.
  _validate.check_size(k, "rank", bytes_per_unit=8, units=u + i_count + 3 * user_R.size,
                       units_name="U + I + 3 R")
  b_u = stds["user_bias_std"] * rng.standard_normal(u)
  b_i = stds["item_bias_std"] * rng.standard_normal(i_count)
  p_uk = (stds["interaction_std"] / np.sqrt(k)) * rng.standard_normal((u, k))
  q_ik = rng.standard_normal((i_count, k))
  score = mu + b_u[user_R] + b_i[item_R] + np.sum(p_uk[user_R] * q_ik[item_R], axis=1)
  noise = stds["noise_std"] * rng.standard_normal(score.shape)
  rating = np.clip(np.round(score + noise), RATING_MIN, RATING_MAX)
  test = rng.random(score.shape) < tf
  return Ratings(user_R=user_R.astype(np.int32), item_R=item_R.astype(np.int32),
                 rating_R=rating.astype(np.float32),
                 true_R=np.clip(score, RATING_MIN, RATING_MAX).astype(np.float32),
                 test_R=test, num_users=u, num_items=i_count, popularity_I=pop,
                 global_mean=mu, user_bias_U=b_u, item_bias_I=b_i, user_factors_UxK=p_uk,
                 item_factors_IxK=q_ik)


def check_ratings(user_R, item_R, rating_R, num_users: int, num_items: int, *,
                  lower: Optional[float] = RATING_MIN, upper: Optional[float] = RATING_MAX
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
  """Validates COO ratings: (user_R int32[R], item_R int32[R], rating_R float64[R], U, I).

  ValueError for an empty matrix, unequal lengths, ids out of range, repeated pairs or
  ratings outside [lower, upper] (None: unchecked).

  Examples:
    >>> check_ratings([], [], [], 3, 3)
    Traceback (most recent call last):
    ...
    ValueError: rating_R must hold at least one rating (an empty rating matrix), got shape (0,)
  """
  u = _validate.check_size(num_users, "num_users", bytes_per_unit=16)        # per-user float64
  i_count = _validate.check_size(num_items, "num_items", bytes_per_unit=64)  # per-item float64
  lo = None if lower is None else _validate.check_finite(lower, "lower")
  hi = None if upper is None else _validate.check_finite(upper, "upper")
  if lo is not None and hi is not None and not hi > lo:
    raise ValueError(f"upper must be > lower = {lo:g}, got {hi:g}")
  if np.size(rating_R) == 0 and np.ndim(rating_R) == 1:
    raise ValueError("rating_R must hold at least one rating (an empty rating matrix), "
                     f"got shape {np.shape(rating_R)}")
  r = _validate.check_array(rating_R, "rating_R", ndim=1, min_size=1, low=lo, high=hi)
  n = r.shape[0]
  users = _validate.check_array(user_R, "user_R", np.int64, shape=(n,), low=0, high=u - 1,
                                integer=True)
  items = _validate.check_array(item_R, "item_R", np.int64, shape=(n,), low=0,
                                high=i_count - 1, integer=True)
  if np.unique(users * i_count + items).shape[0] != n:
    raise ValueError("item_R must not repeat an item for the same user (each (user_R, "
                     "item_R) pair is rated at most once)")
  return users.astype(np.int32), items.astype(np.int32), r, u, i_count
