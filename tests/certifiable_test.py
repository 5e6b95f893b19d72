"""Tests for dpjax.audit.certifiable: a perfect adversary's bound on a known ROC."""

import collections
import json
import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax import tradeoff
from dpjax.accounting import gdp
from dpjax.audit import certifiable, estimators, one_run, parametric, score_audit, stats


class BestCertifiableTest(parameterized.TestCase):

  def test_best_certifiable_gaussian_scale(self):
    # A Gaussian mechanism with eps = 2 at delta = 1e-5 lets a perfect adversary
    # certify ~0.8 with 5,000 trials per side, ~0.9 with 10,000.
    mu = gdp.mu_for_epsilon(2.0, 1e-5)
    a = np.linspace(0, 1, 200_001)
    b = tradeoff.gaussian_fnr(a, mu)
    self.assertAlmostEqual(certifiable.best_certifiable(a, b, 5000, delta=1e-5).epsilon, 0.8,
                           delta=0.05)
    c = certifiable.best_certifiable(a, b, 10_000, delta=1e-5, thresholds_J=sps.norm.isf(a))
    self.assertAlmostEqual(c.epsilon, 0.9, delta=0.05)
    # the point it reports, and its bound by hand
    self.assertEqual((c.fpr, c.fnr), (a[c.index], b[c.index]))
    self.assertEqual(c.threshold, sps.norm.isf(a[c.index]))
    self.assertEqual(c.epsilon, stats.epsilon_lower_bound(c.fpr * 10_000, 10_000,
                                                          c.fnr * 10_000, 10_000, 1e-5))
    # below the trials' ceiling and the mechanism's exact eps
    self.assertLess(c.epsilon, stats.perfect_attack_ceiling(10_000, 1e-5))
    self.assertLess(c.epsilon, 2.0)

  def test_best_certifiable_skips_degenerate_points(self):
    c = certifiable.best_certifiable([0.0, 0.1, 0.5], [0.0, 0.2, 0.5], 100)
    self.assertEqual(c.index, 1)
    with self.assertRaisesRegex(ValueError, "no point"):
      certifiable.best_certifiable([0.0], [0.0], 100)
    with self.assertRaisesRegex(ValueError, "fnr_J"):
      certifiable.best_certifiable([0.1, 0.2], [0.1], 100)


if __name__ == "__main__":
  absltest.main()
