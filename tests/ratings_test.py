"""Tests of dpjax/data/ratings.py: the synthetic ratings world.

The drawn world is checked against its own definition (the stored truth equals the
clipped biased low-rank score, observed ratings are integers 1..5 within rounding
plus six noise standard deviations of it) and against the skews it promises (heavy-
tailed user activity, long-tailed item popularity, the test fraction). Input
errors of `sample` and `check_ratings` are checked in tests/recommender_test.py.
"""

import jax
import numpy as np
from absl.testing import absltest

from dpjax.data import ratings


class RatingsWorldTest(absltest.TestCase):

  def test_world_is_skewed_and_consistent(self):
    d = ratings.sample(jax.random.key(1), num_users=400, num_items=60,
                       mean_ratings_per_user=12, activity_spread=1.0, test_fraction=0.2)
    ratings.check_ratings(d.user_R, d.item_R, d.rating_R, d.num_users, d.num_items)
    self.assertTrue(set(np.unique(d.rating_R)) <= {1.0, 2.0, 3.0, 4.0, 5.0})
    score = (d.global_mean + d.user_bias_U[d.user_R] + d.item_bias_I[d.item_R]
             + np.sum(d.user_factors_UxK[d.user_R] * d.item_factors_IxK[d.item_R], 1))
    np.testing.assert_allclose(d.true_R, np.clip(score, 1, 5), atol=1e-5)
    self.assertLess(np.max(np.abs(d.rating_R - d.true_R)), 0.5 + 6 * 0.6)
    m = np.bincount(d.user_R, minlength=d.num_users)
    self.assertGreater(m.max(), 4 * np.median(m))                  # heavy-tailed activity
    self.assertBetween(m.mean(), 9, 15)
    counts = np.bincount(d.item_R, minlength=d.num_items)
    top = np.argsort(-d.popularity_I)
    self.assertGreater(counts[top[:6]].sum(), 3 * counts[top[-6:]].sum())  # long tail
    self.assertBetween(d.test_R.mean(), 0.15, 0.25)



if __name__ == "__main__":
  absltest.main()
