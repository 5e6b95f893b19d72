"""Tests for dpjax.data.credit: the generative model's documented statistics."""

import jax
import numpy as np
from absl.testing import absltest

from dpjax.data import credit


class CreditTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.big = credit.sample(jax.random.key(0), 100_000)

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
