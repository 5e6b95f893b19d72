"""Tests for dpjax.attacks.mia on planted score arrays."""

import numpy as np
from absl.testing import absltest, parameterized
from scipy import special

from dpjax import metrics
from dpjax.attacks import mia


def _planted(seed=0, m=64, n=200, gap=1.5):
  rng = np.random.default_rng(seed)
  keep = rng.random((m, n)) < 0.5
  offset = rng.normal(0, 3, n)[None, :]            # per-record difficulty hides the gap globally
  scale = rng.uniform(0.3, 1.0, n)[None, :]
  phi = offset + gap * keep + scale * rng.normal(size=(m, n))
  return phi, keep


class LiraTest(parameterized.TestCase):

  @parameterized.named_parameters(("online", True, False), ("offline", False, False),
                                  ("fixed_var", True, True))
  def test_planted_easy_case(self, online, fixed):
    phi, keep = _planted()
    s = mia.lira_scores(phi, keep, online=online, fixed_variance=fixed)
    auc = metrics.roc_auc(s, keep)
    glob = metrics.roc_auc(phi, keep)
    self.assertGreater(auc, 0.9)
    self.assertLess(glob, 0.7)
    self.assertGreater(metrics.tpr_at_fpr(s, keep, 0.01), 0.2)

  def test_null_is_at_noise_floor(self):
    phi, keep = _planted(seed=3, gap=0.0)
    s = mia.lira_scores(phi, keep)
    self.assertAlmostEqual(metrics.roc_auc(s, keep), 0.5, delta=0.03)
    # TPR@1% at the floor: ~6,400 members, se ~0.0013.
    self.assertLess(metrics.tpr_at_fpr(s, keep, 0.01), 0.02)

  def test_leave_one_out_matches_loop(self):
    phi, keep = _planted(seed=5, m=6, n=4)
    s = mia.lira_scores(phi, keep)
    m, n = 2, 3
    others = np.arange(6) != m
    ins = phi[others & keep[:, n], n]
    outs = phi[others & ~keep[:, n], n]
    if ins.size >= 2 and outs.size >= 2:
      from scipy import stats
      want = (stats.norm.logpdf(phi[m, n], ins.mean(), ins.std())
              - stats.norm.logpdf(phi[m, n], outs.mean(), outs.std()))
      self.assertAlmostEqual(s[m, n], want, places=8)

  def test_logit_confidence(self):
    z = np.array([[0.3, -1.2]])
    y = np.array([1, 0])
    p = special.expit(z) ** y * (1 - special.expit(z)) ** (1 - y)
    np.testing.assert_allclose(mia.logit_confidence(z, y), np.log(p / (1 - p)), atol=1e-12)
    logits = np.random.default_rng(0).normal(size=(2, 3, 4))
    y = np.array([0, 3, 1])
    p = special.softmax(logits, axis=2)[:, np.arange(3), y]
    np.testing.assert_allclose(mia.logit_confidence(logits, y), np.log(p / (1 - p)), atol=1e-10)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "keep_MxN"):
      mia.lira_scores(np.zeros((3, 2)), np.zeros((3, 3), bool))
    with self.assertRaisesRegex(ValueError, "phi_MxN"):
      mia.lira_scores(np.zeros((1, 2)), np.zeros((1, 2), bool))
    for flag in ("no", "False", 1, None):   # a truthy string was read as online=True
      with self.assertRaisesRegex(TypeError, "online must be a bool"):
        mia.lira_scores(np.zeros((4, 3)), np.ones((4, 3), bool), online=flag)


class ShokriAndLossTest(absltest.TestCase):

  def test_shokri_learns_class_dependent_threshold(self):
    # Members of class 1 have higher confidence, members of class 0 LOWER (a case a
    # single global threshold cannot handle but per-class attack models can).
    rng = np.random.default_rng(0)
    m, n = 40, 100
    keep = rng.random((m, n)) < 0.5
    y = np.arange(n) % 2
    phi = np.where(y[None, :] == 1, 1.0, -1.0) * keep * 2.0 + rng.normal(size=(m, n))
    s = mia.shokri_attack_scores(phi, y, keep)
    self.assertGreater(metrics.roc_auc(s, keep), 0.85)
    self.assertLess(abs(metrics.roc_auc(phi, keep) - 0.5), 0.05)

  def test_loss_attack(self):
    losses = np.array([[0.1, 2.0], [1.0, 0.2]])
    keep = np.array([[1, 0], [0, 1]], bool)
    self.assertEqual(metrics.roc_auc(mia.loss_attack_scores(losses), keep), 1.0)
    with self.assertRaisesRegex(ValueError, "losses_MxN"):
      mia.loss_attack_scores(np.array([np.nan, 1.0]))


if __name__ == "__main__":
  absltest.main()
