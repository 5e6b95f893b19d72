"""Tests for dpjax.metrics against scikit-learn and closed forms."""

import numpy as np
from absl.testing import absltest, parameterized
from sklearn import metrics as skm

from dpjax import metrics


class RocTest(parameterized.TestCase):

  @parameterized.named_parameters(("continuous", False), ("ties", True))
  def test_auc_and_curve_match_sklearn(self, ties):
    rng = np.random.default_rng(0)
    y = rng.random(500) < 0.4
    s = rng.normal(size=500) + 0.8 * y
    if ties:
      s = np.round(s)
    self.assertAlmostEqual(metrics.roc_auc(s, y), skm.roc_auc_score(y, s), places=12)
    fpr, tpr, _ = metrics.roc_curve(s, y)
    f2, t2, _ = skm.roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, f2, atol=1e-12)
    np.testing.assert_allclose(tpr, t2, atol=1e-12)
    self.assertAlmostEqual(metrics.auc(fpr, tpr), skm.auc(f2, t2), places=12)

  def test_gaussian_auc_closed_form(self):
    # AUC of N(mu,1) vs N(0,1) is Phi(mu / sqrt 2); 40,000 samples give se < 0.003.
    from scipy import stats
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(20_000), np.zeros(20_000)]
    s = rng.normal(size=40_000) + 1.0 * y
    self.assertAlmostEqual(metrics.roc_auc(s, y), stats.norm.cdf(1 / np.sqrt(2)), delta=0.01)
    # advantage of the best threshold: 2 Phi(mu/2) - 1
    self.assertAlmostEqual(metrics.advantage(s, y), 2 * stats.norm.cdf(0.5) - 1, delta=0.015)
    self.assertAlmostEqual(metrics.balanced_accuracy(s, y), stats.norm.cdf(0.5), delta=0.01)
    # TPR at 1% FPR: Phi(Phi^-1(0.01) + mu)
    self.assertAlmostEqual(metrics.tpr_at_fpr(s, y, 0.01),
                           stats.norm.cdf(stats.norm.ppf(0.01) + 1.0), delta=0.015)

  def test_tpr_at_fpr_by_hand(self):
    s = np.array([10, 9, 8, 7, 6, 5, 4, 3, 2, 1.0])
    y = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 0])
    np.testing.assert_allclose(metrics.tpr_at_fpr(s, y, [0.0, 1 / 6, 0.5, 1.0]),
                               [0.25, 0.75, 1.0, 1.0])

  def test_noise_floor_for_random_scores(self):
    rng = np.random.default_rng(2)
    y = rng.random(100_000) < 0.5
    s = rng.random(100_000)
    # TPR at FPR f is ~f (se ~ sqrt(f/50000) ~ 0.0005 at f = 1%).
    self.assertAlmostEqual(metrics.tpr_at_fpr(s, y, 0.01), 0.01, delta=0.003)

  def test_per_group_rates(self):
    out = metrics.per_group_rates([1, 0, 1, 1], [1, 0, 0, 1], [0, 0, 1, 1])
    self.assertEqual(out[0]["accuracy"], 1.0)
    self.assertEqual(out[1]["fpr"], 1.0)
    self.assertEqual(out[1]["tpr"], 1.0)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "labels_K"):
      metrics.roc_auc([1.0, 2.0], [1, 1])
    with self.assertRaisesRegex(ValueError, "fpr"):
      metrics.tpr_at_fpr([1.0, 2.0], [0, 1], 1.5)
    with self.assertRaisesRegex(ValueError, "same size"):
      metrics.roc_curve([1.0, 2.0], [0, 1, 1])

  def test_plot(self):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    metrics.plot_roc_loglog(ax, {"a": ([0, 0.5, 1], [0, 0.7, 1])})
    self.assertEqual(ax.get_xscale(), "log")
    plt.close(fig)


if __name__ == "__main__":
  absltest.main()
