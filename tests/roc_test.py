"""Tests for dpjax.audit.roc: empirical ROC, simultaneous band, plot helper."""

import math

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np
from absl.testing import absltest
from scipy import stats as sps

from dpjax import tradeoff
from dpjax.accounting import pld
from dpjax.audit import roc, stats


class EmpiricalRocTest(absltest.TestCase):

  def test_by_hand_and_against_error_counts(self):
    fpr, tpr, thr = roc.empirical_roc([1.0, 2.0, 2.0, 5.0], [0.0, 2.0, 3.0])
    self.assertEqual(thr.tolist(), [np.inf, 5.0, 3.0, 2.0, 1.0, 0.0, -np.inf])
    self.assertEqual(fpr.tolist(), [0, 0, 0, 1 / 3, 2 / 3, 2 / 3, 1])
    self.assertEqual(tpr.tolist(), [0, 0, 0.25, 0.25, 0.75, 1, 1])
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=70)
    fpr, tpr, thr = roc.empirical_roc(a, b)
    fp, fn = stats.error_counts(a, b, thr[1:-1])
    np.testing.assert_array_equal(fpr[1:-1], fp / 70)
    np.testing.assert_array_equal(tpr[1:-1], (50 - fn) / 50)
    self.assertTrue(np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0))


class RocBandTest(absltest.TestCase):

  def test_half_widths_are_dkw_massart(self):
    b = roc.roc_band(np.zeros(400), np.zeros(100), confidence=0.9)
    self.assertAlmostEqual(b.epsilon_out, math.sqrt(math.log(40) / 200), places=12)
    self.assertAlmostEqual(b.epsilon_in, math.sqrt(math.log(40) / 800), places=12)
    self.assertTrue(np.all(b.tpr_lower_G <= b.tpr_empirical_G)
                    and np.all(b.tpr_empirical_G <= b.tpr_upper_G))

  def test_simultaneous_coverage_by_monte_carlo(self):
    # 300 data sets of 1-GDP scores (200 per side): the true ROC Phi(Phi^-1(x) + 1)
    # must lie inside the 90% band at all 2,000 grid FPRs at once in >= 90% of them,
    # less three binomial standard errors (0.9 - 3 * 0.0173 = 0.848).
    mu, n, grid = 1.0, 200, np.linspace(0, 1, 2001)
    truth = tradeoff.gaussian_tpr(grid, mu)
    rng = np.random.default_rng(0)
    inside = []
    for _ in range(300):
      b = roc.roc_band(rng.normal(size=n) + mu, rng.normal(size=n), confidence=0.9, fpr_G=grid)
      inside.append(np.all((b.tpr_lower_G <= truth + 1e-12) & (truth <= b.tpr_upper_G + 1e-12)))
    self.assertGreaterEqual(np.mean(inside), 0.848)

  def test_coverage_with_atoms_randomized_response(self):
    # Binary scores of 1-randomized response: the true ROC (randomized tests at the
    # atoms) is the polyline (0, 0) - (p, 1 - p) - (1, 1), p = 1 / (1 + e). The band
    # must contain it everywhere in >= 90% - 3 s.e. (0.848) of 300 data sets.
    p, n, grid = 1 / (1 + math.e), 150, np.linspace(0, 1, 2001)
    truth = np.interp(grid, [0, p, 1], [0, 1 - p, 1])
    rng = np.random.default_rng(3)
    inside = []
    for _ in range(300):
      b = roc.roc_band((rng.random(n) > p).astype(float), (rng.random(n) < p).astype(float),
                       confidence=0.9, fpr_G=grid)
      inside.append(np.all((b.tpr_lower_G <= truth + 1e-12) & (truth <= b.tpr_upper_G + 1e-12)))
    self.assertGreaterEqual(np.mean(inside), 0.848)

  def test_vertical_segments(self):
    # A perfect attack: the empirical ROC jumps from (0, 0) to (0, 1); at FPR 0 the
    # band's upper end uses the top of the jump, the lower end its bottom.
    b = roc.roc_band(np.ones(1000), np.zeros(1000), fpr_G=[0.0, 0.5])
    self.assertEqual(b.tpr_empirical_G.tolist(), [1.0, 1.0])
    self.assertEqual(b.tpr_upper_G.tolist(), [1.0, 1.0])
    self.assertEqual(b.tpr_lower_G[0], 0.0)
    self.assertAlmostEqual(b.tpr_lower_G[1], 1 - b.epsilon_in, places=12)

  def test_band_is_informative_and_shrinks(self):
    rng = np.random.default_rng(1)
    grid = np.array([0.1, 0.5])
    widths = []
    for n in (1000, 16_000):
      b = roc.roc_band(rng.normal(size=n) + 1, rng.normal(size=n), fpr_G=grid)
      widths.append(b.tpr_upper_G - b.tpr_lower_G)
    self.assertTrue(np.all(widths[1] < widths[0] / 3))       # ~ 1 / sqrt(n)
    self.assertTrue(np.all(widths[1] < 0.1))

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "fpr_G"):
      roc.roc_band([1.0, 2.0], [0.0, 1.0], fpr_G=[0.5, 1.5])
    with self.assertRaisesRegex(ValueError, "confidence"):
      roc.roc_band([1.0, 2.0], [0.0, 1.0], confidence=1.0)
    with self.assertRaisesRegex(ValueError, "scores_in_K"):
      roc.empirical_roc([float("nan")], [0.0])


class PlotTest(absltest.TestCase):

  def test_draws_band_and_accounted_curves(self):
    rng = np.random.default_rng(2)
    b = roc.roc_band(rng.normal(size=500) + 1, rng.normal(size=500))
    fig, ax = plt.subplots()
    out = roc.plot_roc_band(ax, b, epsilon=2.0, delta=1e-5, mu=1.0,
                            privacy_loss=pld.gaussian_pld(1.0), max_epsilon=10.0)
    self.assertIs(out, ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    self.assertTrue(any("DP bound" in l for l in labels))
    self.assertTrue(any("GDP" in l for l in labels))
    self.assertTrue(any("PLD" in l for l in labels))
    self.assertEqual(ax.get_xscale(), "log")
    plt.close(fig)
    with self.assertRaisesRegex(TypeError, "band"):
      roc.plot_roc_band(ax, None)
    with self.assertRaisesRegex(TypeError, "ax"):
      roc.plot_roc_band(None, b)


if __name__ == "__main__":
  absltest.main()
