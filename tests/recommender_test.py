"""Tests of dpjax/recommender.py (the ratings world itself: tests/ratings_test.py).

The sensitivities are checked by brute force: every neighbour of small random rating
matrices (each rating removed, each user removed) moves each statistic by at most
the stated L1 sensitivity, and a worst-case neighbour attains it, so a looser or a
wrong constant fails. The noise is checked against its calibration with a KS test
that accepts the stated scale and rejects 2/3 and 3/2 of it.
"""

import math
import warnings

import jax
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from scipy import stats as sps

from dpjax import accounting
from dpjax import mechanisms
from dpjax import recommender as rec
from dpjax.data import ratings


def _random_matrix(seed, num_users=6, num_items=5, density=0.6, integer=True):
  """COO lists of a random rating matrix, every user with >= 1 rating."""
  rng = np.random.default_rng(seed)
  mask = rng.random((num_users, num_items)) < density
  mask[np.arange(num_users), rng.integers(0, num_items, num_users)] = True
  users, items = np.nonzero(mask)
  r = (rng.integers(1, 6, users.shape[0]) if integer
       else rng.uniform(0.0, 6.0, users.shape[0]))   # off-scale values get clamped
  return users, items, r.astype(np.float64), num_users, num_items


def _upper_l1(a, b):
  iu = np.triu_indices(a.shape[0])
  return float(np.abs(a[iu] - b[iu]).sum())


def _all_stats(users, items, r, num_users, num_items, mavg, clamp):
  """Every statistic of the release, exact, with the item means fixed (released)."""
  s, n = rec.global_statistics(r)
  s_i, n_i = rec.item_statistics(items, r, num_items)
  cov, wgt = rec.covariance_statistics(users, items, np.clip(r, 1, 5) - mavg[items],
                                       num_users, num_items, clamp=clamp)
  return {"global_sum": np.array([s]), "global_count": np.array([n]), "item_sums": s_i,
          "item_counts": n_i, "covariance": cov, "weights": wgt}


def _distance(name, a, b):
  if name in ("covariance", "weights"):
    return _upper_l1(a, b)
  return float(np.abs(a - b).sum())


def _max_moves(unit, users, items, r, num_users, num_items, mavg, clamp):
  """Largest change of each statistic over all neighbours of one privacy unit."""
  base = _all_stats(users, items, r, num_users, num_items, mavg, clamp)
  worst = dict.fromkeys(rec.STATISTICS, 0.0)
  groups = (np.arange(r.shape[0])[:, None] if unit == "rating"
            else [np.flatnonzero(users == u) for u in range(num_users)])
  for drop in groups:
    keep = np.ones(r.shape[0], bool)
    keep[drop] = False
    if not keep.any():
      continue
    other = _all_stats(users[keep], items[keep], r[keep], num_users, num_items, mavg, clamp)
    for s in rec.STATISTICS:
      worst[s] = max(worst[s], _distance(s, base[s], other[s]))
  return worst


class SensitivityTest(parameterized.TestCase):

  @parameterized.named_parameters(("integer", True), ("off_scale", False))
  def test_rating_level_bound_holds(self, integer):
    clamp = 1.3
    sens = rec.sensitivities("rating", clamp=clamp)
    for seed in range(12):
      users, items, r, u, i = _random_matrix(seed, integer=integer)
      mavg = np.random.default_rng(100 + seed).uniform(1, 5, i)
      moves = _max_moves("rating", users, items, r, u, i, mavg, clamp)
      for s in rec.STATISTICS:
        self.assertLessEqual(moves[s], sens[s] * (1 + 1e-12) + 1e-12, (seed, s))

  def test_user_level_bound_holds(self):
    clamp = 0.8
    for seed in range(12):
      users, items, r, u, i = _random_matrix(seed, num_users=5, num_items=6, density=0.7)
      m = int(np.bincount(users).max())
      sens = rec.sensitivities("user", clamp=clamp, max_ratings_per_user=m)
      mavg = np.random.default_rng(200 + seed).uniform(1, 5, i)
      moves = _max_moves("user", users, items, r, u, i, mavg, clamp)
      for s in rec.STATISTICS:
        self.assertLessEqual(moves[s], sens[s] * (1 + 1e-12) + 1e-12, (seed, s))

  @parameterized.parameters(2, 3, 5)
  def test_worst_case_neighbours_attain_the_bounds(self, m):
    # One user with m ratings of 5 on items whose released mean is 1: every residual
    # clamps to B, so removing one rating moves the covariance by exactly 3 B^2 / 2
    # and removing the user by B^2 (m + 1) / 2; a rating of 5 moves the sums by h = 2.
    clamp = 1.5
    num_items = m + 1
    users = np.array([0] * m + [1])
    items = np.array(list(range(m)) + [m])
    r = np.array([5.0] * m + [3.0])
    mavg = np.ones(num_items)
    for unit in ("rating", "user"):
      sens = rec.sensitivities(unit, clamp=clamp, max_ratings_per_user=(
          None if unit == "rating" else m))
      moves = _max_moves(unit, users, items, r, 2, num_items, mavg, clamp)
      for s in rec.STATISTICS:
        np.testing.assert_allclose(moves[s], sens[s], rtol=1e-12, err_msg=f"{unit} {s}")

  def test_user_level_is_the_rating_level_times_a_growing_factor(self):
    r = rec.sensitivities("rating", clamp=1.0)
    for m in (1, 10, 100):
      u = rec.sensitivities("user", clamp=1.0, max_ratings_per_user=m)
      self.assertEqual(u["item_counts"], m * r["item_counts"])
      self.assertEqual(u["covariance"], (m + 1) / 3 * r["covariance"])

  def test_truncation_caps_users_and_is_per_user(self):
    users, items, r, u, i = _random_matrix(3, num_users=8, num_items=9, density=0.8)
    key = jax.random.key(4)
    keep = rec.truncate_users(key, users, items, u, i, 3)
    counts = np.bincount(users, minlength=u)
    kept = np.bincount(users[keep], minlength=u)
    np.testing.assert_array_equal(kept, np.minimum(counts, 3))
    # Removing user 0 leaves every other user's kept subset unchanged.
    other = users != 0
    keep2 = rec.truncate_users(key, users[other], items[other], u, i, 3)
    np.testing.assert_array_equal(keep2, keep[other])


class ReleaseTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.data = ratings.sample(jax.random.key(0), num_users=120, num_items=40,
                               mean_ratings_per_user=10)

  def _release(self, **kw):
    d = self.data
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", mechanisms.InsecureNoiseWarning)
      return rec.private_statistics(jax.random.key(7), d.user_R, d.item_R, d.rating_R,
                                    d.num_users, d.num_items, **kw)

  def test_noise_matches_calibration(self):
    d = self.data
    st = self._release(epsilon=2.0)
    exact = self._release(epsilon=math.inf)
    sens = rec.sensitivities("rating")
    for s in rec.STATISTICS:
      self.assertAlmostEqual(st.noise_scales[s], sens[s] / st.epsilons[s], places=12)
    self.assertAlmostEqual(st.epsilon, 2.0, places=12)
    # The library's PLD accountant, composing the six Laplace releases, lands just
    # below the basic-composition total (pure DP composes almost tightly here).
    acct = accounting.Accountant(accountant="pld")
    for s in rec.STATISTICS:
      acct = acct.compose_laplace(st.noise_scales[s], sens[s])
    self.assertBetween(acct.epsilon(1e-9), 0.99 * st.epsilon, st.epsilon * (1 + 1e-9))
    # The covariance noise: Laplace(scale) on the upper triangle, mirrored. The
    # exact covariance is recomputed from the released item means.
    res = np.clip(d.rating_R, 1, 5) - st.item_means_I[d.item_R]
    cov, _ = rec.covariance_statistics(d.user_R, d.item_R, res, d.num_users, d.num_items)
    noise = st.noisy["covariance"] - cov
    np.testing.assert_array_equal(noise, noise.T)
    sample = noise[np.triu_indices(d.num_items)]
    b = st.noise_scales["covariance"]
    self.assertGreater(sps.kstest(sample, sps.laplace(scale=b).cdf).pvalue, 1e-3)
    for wrong in (2 / 3, 3 / 2):
      self.assertLess(sps.kstest(sample, sps.laplace(scale=wrong * b).cdf).pvalue, 1e-3)
    count_noise = st.noisy["item_counts"] - np.bincount(d.item_R, minlength=d.num_items)
    self.assertLess(np.max(np.abs(count_noise)), 40 * st.noise_scales["item_counts"])

  def test_large_epsilon_converges_to_the_non_private_system(self):
    d = self.data
    exact = self._release(epsilon=math.inf, beta_m=5.0, beta_p=5.0)
    self.assertEqual(exact.noise_scales, dict.fromkeys(rec.STATISTICS, 0.0))
    np.testing.assert_allclose(exact.global_mean, np.mean(d.rating_R))
    counts = np.bincount(d.item_R, minlength=d.num_items)
    sums = np.bincount(d.item_R, weights=d.rating_R, minlength=d.num_items)
    np.testing.assert_allclose(exact.item_means_I,
                               (sums + 5.0 * exact.global_mean) / (counts + 5.0))
    near = self._release(epsilon=1e7, beta_m=5.0, beta_p=5.0)
    np.testing.assert_allclose(near.item_means_I, exact.item_means_I, atol=1e-4)
    np.testing.assert_allclose(near.covariance_IxI, exact.covariance_IxI, atol=1e-3)
    q = (d.user_R[:50], d.item_R[:50])
    np.testing.assert_allclose(
        rec.predict(near, d.user_R, d.item_R, d.rating_R, *q, rank=3),
        rec.predict(exact, d.user_R, d.item_R, d.rating_R, *q, rank=3), atol=1e-2)
    far = self._release(epsilon=0.05, beta_m=5.0, beta_p=5.0)
    self.assertGreater(np.max(np.abs(far.item_means_I - exact.item_means_I)), 0.1)

  def test_user_level_release_uses_the_cap(self):
    st = self._release(epsilon=1.0, privacy_unit="user", max_ratings_per_user=4)
    self.assertEqual(st.sensitivities, rec.sensitivities("user", max_ratings_per_user=4))
    kept_users = self.data.user_R[st.kept_R]
    self.assertLessEqual(np.bincount(kept_users).max(), 4)
    # The same noise, read at user level with the cap, costs (m + 1) / 3 to m times more.
    rating = self._release(epsilon=1.0)
    eps_user = rec.epsilon_of_release(rating.noise_scales,
                                      rec.sensitivities("user", max_ratings_per_user=4))
    self.assertGreater(eps_user, 5 / 3)
    self.assertLessEqual(eps_user, 4.0 + 1e-9)

  def test_predict_fits_each_users_own_ratings(self):
    d = self.data
    st = self._release(epsilon=math.inf)
    base = rec.predict(st, d.user_R, d.item_R, d.rating_R, d.user_R, d.item_R, rank=0)
    # rank 0 is MAvg_i + b_u with b_u the shrunk mean residual of the user's ratings.
    e = d.rating_R - st.item_means_I[d.item_R]
    m = np.bincount(d.user_R, minlength=d.num_users)
    b_u = np.bincount(d.user_R, weights=e, minlength=d.num_users) / (m + 5.0)
    np.testing.assert_allclose(base, np.clip(st.item_means_I[d.item_R] + b_u[d.user_R], 1, 5),
                               atol=1e-9)
    full = rec.predict(st, d.user_R, d.item_R, d.rating_R, d.user_R, d.item_R, rank=6)
    self.assertLess(rec.rmse(full, d.rating_R), rec.rmse(base, d.rating_R))
    # Changing user 0's ratings changes only user 0's predictions.
    r2 = d.rating_R.copy()
    r2[d.user_R == 0] = 6.0 - r2[d.user_R == 0]
    full2 = rec.predict(st, d.user_R, d.item_R, r2, d.user_R, d.item_R, rank=6)
    np.testing.assert_allclose(full2[d.user_R != 0], full[d.user_R != 0])


class ErrorsTest(absltest.TestCase):

  def test_exact_release_at_beta_p_zero_is_the_limit(self):
    # Two items never rated by one user: weight 0 and covariance 0. With beta_p = 0 the
    # shrunk entry is the limit beta_p -> 0 (the average), elsewhere cov / wgt exactly.
    users, items, r = np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2]), np.array(
        [5.0, 3.0, 4.0, 1.0])
    st = rec.private_statistics(jax.random.key(0), users, items, r, 3, 3,
                                epsilon=math.inf, beta_m=5.0, beta_p=0.0)
    self.assertTrue(np.all(np.isfinite(st.covariance_IxI)))
    for beta in (1e-6, 1e-9):
      near = rec.private_statistics(jax.random.key(0), users, items, r, 3, 3,
                                    epsilon=math.inf, beta_m=5.0, beta_p=beta)
      np.testing.assert_allclose(st.covariance_IxI, near.covariance_IxI, atol=1e-5)
    wgt = st.noisy["weights"]
    np.testing.assert_allclose(st.covariance_IxI[wgt > 0],
                               st.noisy["covariance"][wgt > 0] / wgt[wgt > 0])

  def test_empty_rating_matrix(self):
    for fn in (lambda: ratings.check_ratings([], [], [], 3, 3),
               lambda: rec.private_statistics(jax.random.key(0), [], [], [], 3, 3,
                                              epsilon=1.0)):
      with self.assertRaisesRegex(ValueError, "rating_R.*empty rating matrix"):
        fn()

  def test_bad_inputs_name_the_parameter(self):
    users, items, r, u, i = _random_matrix(0)
    key = jax.random.key(0)
    call = lambda **kw: rec.private_statistics(key, **{**dict(
        user_R=users, item_R=items, rating_R=r, num_users=u, num_items=i, epsilon=1.0), **kw})
    for kw, name in ((dict(user_R=users[:-1]), "user_R"), (dict(item_R=items + i), "item_R"),
                     (dict(rating_R=np.where(r > 3, np.nan, r)), "rating_R"),
                     (dict(epsilon=0.0), "epsilon"), (dict(privacy_unit="item"), "privacy_unit"),
                     (dict(privacy_unit="user"), "max_ratings_per_user"),
                     (dict(max_ratings_per_user=3), "max_ratings_per_user"),
                     (dict(split=(0.5, 0.5)), "split"), (dict(split=(0.2,) * 6), "split"),
                     (dict(clamp=0.0), "clamp"), (dict(beta_m=0.0), "beta_m"),
                     (dict(beta_p=0.0), "beta_p"), (dict(beta_p=-0.0), "beta_p"),
                     (dict(upper=1.0), "upper")):
      with self.subTest(name=name, kw=list(kw)):
        with self.assertRaisesRegex(ValueError, name):
          call(**kw)
    dup_users = np.concatenate([users, users[:1]])
    dup_items = np.concatenate([items, items[:1]])
    with self.assertRaisesRegex(ValueError, "item_R"):
      ratings.check_ratings(dup_users, dup_items, np.ones(dup_users.shape[0]), u, i)
    with self.assertRaisesRegex(ValueError, "num_items"):
      ratings.sample(key, num_users=5, num_items=1)
    with self.assertRaisesRegex(ValueError, "mean_ratings_per_user"):
      ratings.sample(key, num_users=5, num_items=4, mean_ratings_per_user=5)


if __name__ == "__main__":
  absltest.main()
