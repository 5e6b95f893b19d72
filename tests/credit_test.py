"""Tests for dpjax.data.credit: the generative model's documented statistics."""

import jax
import numpy as np
import pytest
from absl.testing import absltest

from dpjax.data import credit


class CreditTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.big = credit.sample(jax.random.key(0), 100_000)   # immutable: drawn once

  def test_documented_marginals(self):
    x = np.asarray(self.big.x_NxF)
    # Monte Carlo with n = 1e5: standard errors are < 0.002 for the rates and
    # < 0.1 k$ for mean income, so these tolerances are > 5 standard errors.
    self.assertAlmostEqual(x[:, 0].mean(), 61.0, delta=1.5)
    self.assertAlmostEqual(x[:, 3].mean(), 0.55, delta=0.02)
    self.assertAlmostEqual(x[:, 4].mean(), 0.10, delta=0.01)
    self.assertGreater(np.mean(x[:, 0] > x[:, 0].mean()), 0.0)
    self.assertLess(np.median(x[:, 0]), x[:, 0].mean())  # right-skewed
    self.assertAlmostEqual(credit.bayes_accuracy(self.big), 0.79, delta=0.01)

  def test_labels_follow_true_probability(self):
    p = np.asarray(self.big.p_N)
    y = np.asarray(self.big.y_N)
    for lo, hi in [(0.0, 0.3), (0.3, 0.7), (0.7, 1.0)]:
      m = (p >= lo) & (p < hi)
      se = np.sqrt(p[m].mean() * (1 - p[m].mean()) / m.sum())
      self.assertLess(abs(y[m].mean() - p[m].mean()), 5 * se)

  def test_thin_file_effect(self):
    # History raises repayment odds in group 0 and lowers them in group 1.
    base = np.array([[55.0, 0.3, 5.0, 0.0, 0.0], [55.0, 0.3, 15.0, 0.0, 0.0]], np.float32)
    l0 = np.asarray(credit.true_logit(base))
    base[:, 4] = 1.0
    l1 = np.asarray(credit.true_logit(base))
    self.assertGreater(l0[1], l0[0])
    self.assertLess(l1[1], l1[0])

  def test_feature_maps(self):
    pub = credit.sample(jax.random.key(1), 3000)
    scaler = credit.PublicScaler.fit(pub.x_NxF)
    lin = np.asarray(credit.linear_features(pub.x_NxF, scaler))
    cub = np.asarray(credit.cubic_features(pub.x_NxF, scaler))
    self.assertEqual(lin.shape, (3000, 6))
    self.assertEqual(cub.shape, (3000, 56))
    np.testing.assert_allclose(lin[:, 1:].mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(lin[:, 1:].std(0), 1.0, atol=1e-4)
    np.testing.assert_allclose(np.sqrt((cub ** 2).mean(0)), 1.0, atol=1e-3)
    self.assertLen(credit.cubic_feature_names(), 56)
    # The linear columns are the degree-1 cubic columns up to their public RMS (1).
    np.testing.assert_allclose(cub[:, 1:6], lin[:, 1:], rtol=1e-4, atol=1e-4)

  def test_cubic_program_is_bit_identical_to_op_by_op(self):
    # One compiled program for the 56 columns, bit for bit the columns computed op by op
    # (no fusion may change a product or the division by the public RMS).
    rng = np.random.default_rng(0)
    scaler = credit.PublicScaler.fit(rng.gamma(2.0, 10.0, (500, 5)).astype(np.float32))
    wide = (rng.standard_normal((300, 5)) * 30).astype(np.float32)
    for x in (wide, credit.lecture_canary().x_NxF):
      got = np.asarray(credit.cubic_features(x, scaler))
      with jax.disable_jit():
        want = np.asarray(credit.cubic_features(x, scaler))
      np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))

  def test_draw_size_classes(self):
    self.assertEqual([credit._draw_size(n) for n in (1, 10, 2048, 2049, 4096, 100_000)],
                     [2048, 2048, 2048, 4096, 4096, 131_072])
    self.assertEqual(credit._draw_size(2 ** 22 + 1), 2 ** 22 + 1)   # large: drawn as is
    with jax.threefry_partitionable(False):
      self.assertEqual(credit._draw_size(10), 10)   # no index-wise streams: drawn as is

  def test_padded_draw_is_bit_identical(self):
    # Drawing m people and keeping the first n equals drawing n: here n = 2048 (the
    # unpadded program of every n <= 2048) against m = 4096 (the program of every
    # n in (2048, 4096]), so the check compiles nothing the suite does not already.
    # test_padded_draw_grid (slow) checks odd n against drawing exactly n.
    for share, seed in ((0.1, 0), (1.0, 7)):
      key = jax.random.key(seed)
      want = credit.sample(key, 2048, share)
      got = credit._sample(key, 2048, share, 4096)
      for a, b in zip(want, got):
        a, b = np.asarray(a), np.asarray(b)
        self.assertEqual((a.shape, a.dtype), (b.shape, b.dtype))
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))

  @pytest.mark.slow
  def test_padded_draw_grid(self):
    # `sample` (padded to its size class) against drawing exactly n, bit for bit.
    for n in (1, 37, 2000, 2049, 5000):
      for share, seed in ((0.1, 0), (0.5, 3), (1.0, 7)):
        key = jax.random.key(seed)
        want = credit._sample(key, n, share, n)
        got = credit.sample(key, n, share)
        for a, b in zip(want, got):
          a, b = np.asarray(a), np.asarray(b)
          self.assertEqual((a.shape, a.dtype), (b.shape, b.dtype), n)
          np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=str(n))

  def test_sample_split_is_the_one_draw_cut_in_order(self):
    key = jax.random.key(5)
    whole = credit.sample(key, 2048, 0.3)
    parts = credit.sample_split(key, (1000, 48, 1000), 0.3)
    self.assertEqual([len(p) for p in parts], [1000, 48, 1000])
    for part, lo in zip(parts, (0, 1000, 1048)):
      for a, b in zip(part, whole):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[lo:lo + len(part)])
    for bad in ((), (3, 0), (2.5,), 4):
      with self.assertRaisesRegex((ValueError, TypeError), "sizes"):
        credit.sample_split(key, bad)

  def test_linear_split_fits_the_scaler_on_the_public_part_only(self):
    key = jax.random.key(6)
    feats, parts = credit.sample_linear_split(key, (50, 30, 20), public=1)
    want = credit.sample_split(key, (50, 30, 20))
    scaler = credit.PublicScaler.fit(want[1].x_NxF)
    self.assertNotEqual(scaler, credit.PublicScaler.fit(want[0].x_NxF))
    for (x, y), part, raw in zip(feats, parts, want):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(credit.linear_features(
          raw.x_NxF, scaler)))
      np.testing.assert_array_equal(np.asarray(y), np.asarray(raw.y_N))
      np.testing.assert_array_equal(np.asarray(part.p_N), np.asarray(raw.p_N))
    # On the public part the features are standardised: mean 0, sd 1 (and the intercept 1).
    x_pub = np.asarray(feats[1][0], np.float64)
    np.testing.assert_allclose(x_pub[:, 1:].mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x_pub[:, 1:].std(0)[:4], 1.0, rtol=1e-5)
    for bad in (3, -1, 1.5):
      with self.assertRaisesRegex((ValueError, TypeError), "public"):
        credit.sample_linear_split(key, (5, 5, 5), public=bad)

  def test_customer_splits_follow_the_public_id_rule(self):
    key, u, u_test, every = jax.random.key(8), 40, 12, 4
    s = credit.sample_customer_splits(key, u, u_test, validation_every=every, max_loans=3,
                                      num_zip_codes=5)
    # The same draws by hand: a public draw for the scaler, then the customers.
    k_pub, k_cust = jax.random.split(key)
    draw = lambda k: credit.sample_customers(k, u + u_test, max_loans=3, num_zip_codes=5)
    world, scaler = draw(k_cust), credit.PublicScaler.fit(draw(k_pub).x_NxF)
    user, y = np.asarray(world.user_N), np.asarray(world.y_N)
    x = np.asarray(credit.linear_features(world.x_NxF, scaler))
    val, test = (user % every == 0) & (user < u), user >= u
    train = ~val & ~test
    np.testing.assert_array_equal(s.x_train, x[train])
    np.testing.assert_array_equal(s.y_val, y[val])
    np.testing.assert_array_equal(s.x_test, x[test])
    self.assertEqual((s.num_val_users, s.num_train_users), (u // every, u - u // every))
    self.assertEqual(s.num_loans, int((user < u).sum()))
    # Renumbered ids: the k-th validation customer is user every * k.
    np.testing.assert_array_equal(s.uid_val, user[val] // every)
    self.assertEqual((s.uid_train.dtype, s.uid_val.dtype), (np.int32, np.int64))
    self.assertEqual(s.uid_train.max() + 1, s.num_train_users)
    # Per private customer: the zip of its loans, delinquent iff some loan defaulted.
    zips = np.asarray(world.zip_N)
    for c in range(u):
      rows = user == c
      self.assertEqual(s.zip_U[c], zips[rows][0])
      self.assertEqual(s.delinquent_U[c], float(np.any(y[rows] == 0)))
    for kw, name in ((dict(validation_every=1), "validation_every"), (dict(num_private=0),
                                                                        "num_private")):
      with self.assertRaisesRegex(ValueError, name):
        credit.sample_customer_splits(key, **{"num_private": u, "num_test": u_test,
                                              "validation_every": every, **kw})

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, "minority_share"):
      credit.sample(jax.random.key(0), 10, minority_share=1.5)
    with self.assertRaisesRegex(ValueError, "n must"):
      credit.sample(jax.random.key(0), 0)
    scaler = credit.PublicScaler.fit(self.big.x_NxF[:100])
    bad = np.array(self.big.x_NxF[:3])
    bad[0, 0] = np.nan
    with self.assertRaisesRegex(ValueError, "NaN"):
      credit.linear_features(bad, scaler)
    with self.assertRaisesRegex(ValueError, "shape"):
      credit.cubic_features(np.zeros((3, 4)), scaler)

  def test_canary_is_an_outlier(self):
    c = credit.lecture_canary()
    self.assertEqual(int(c.y_N[0]), 0)
    self.assertGreater(float(c.p_N[0]), 0.95)  # the world says it should have repaid


if __name__ == "__main__":
  absltest.main()
