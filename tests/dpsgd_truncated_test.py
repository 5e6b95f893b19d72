"""Tests for DP-SGD's truncating mode (DpSgdConfig.max_batch_size): config, accounting,
training and the refusals."""

import dataclasses
import warnings
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest

from dpjax import accounting
from dpjax import dpsgd
from dpjax import models
from dpjax import sampling
from dpjax.accounting import event_accounting, rdp, statement, truncated_sampling
from tests import helpers

_QUIET = dpsgd.PerformanceFlags(progress=False, batch_capacity=None)
_PADDED = dpsgd.PerformanceFlags(progress=False, batch_capacity=32)


def _cfg(**kw):
  base = dict(dataset_size=400, sampling_prob=0.05, num_steps=20, noise_multiplier=1.0)
  base.update(kw)
  return dpsgd.DpSgdConfig(**base)


class TruncatedConfigTest(absltest.TestCase):

  def test_default_is_off_and_validation_names_the_field(self):
    self.assertIsNone(_cfg().max_batch_size)
    self.assertEqual(_cfg(max_batch_size=30.0).max_batch_size, 30)
    for bad in (0, -1, 2.5, "30", 2 ** 31):
      with self.assertRaisesRegex(ValueError, "max_batch_size"):
        _cfg(max_batch_size=bad)
    with self.assertRaisesRegex(ValueError, "privacy_unit must be 'example'"):
      _cfg(max_batch_size=30, privacy_unit="user")

  def test_sampler_and_event_follow_the_mode(self):
    cfg = _cfg(max_batch_size=30)
    self.assertEqual(cfg.sampler(), sampling.TruncatedPoissonSampler(0.05, 30))
    self.assertEqual(type(_cfg().sampler()), sampling.PoissonSampler)
    self.assertEqual(cfg.event(), statement.truncated_dpsgd_event(1.0, 0.05, 20, 400, 30))
    self.assertEqual(_cfg().event().event.event.noise_multiplier, 1.0)

  def test_epsilon_is_the_truncated_accountants_and_at_least_poisson(self):
    # Cap 25 above q n = 20: P(cut) = P(Binomial(400, 0.05) >= 25) ~ 0.13.
    cfg = _cfg(max_batch_size=25)
    self.assertGreater(truncated_sampling.cut_probability(0.05, 400, 25), 0.1)
    orders = rdp.DEFAULT_ORDERS
    curve = 20 * truncated_sampling.truncated_subsampled_gaussian_rdp(1.0, 0.05, 400, 25,
                                                                      orders)
    want = rdp.rdp_to_epsilon(orders, curve, 1e-5)[0]
    self.assertAlmostEqual(cfg.epsilon(), want, places=10)
    self.assertGreaterEqual(cfg.epsilon(), _cfg().epsilon())
    pld_cfg = _cfg(max_batch_size=25, accountant="pld", num_steps=3, noise_multiplier=2.0)
    self.assertEqual(pld_cfg.epsilon(), event_accounting.epsilon(pld_cfg.event(), 1e-5, "pld"))
    self.assertGreaterEqual(pld_cfg.epsilon(), _cfg(accountant="pld", num_steps=3,
                                                    noise_multiplier=2.0).epsilon())

  def test_a_cap_no_batch_can_reach_costs_nothing(self):
    self.assertEqual(_cfg(max_batch_size=401).epsilon(), _cfg().epsilon())   # B > n

  def test_calibrate_meets_the_target_tightly_with_a_cap_never_reached(self):
    cfg = _cfg(max_batch_size=401, num_steps=10).calibrate(2.0)   # the Poisson curve
    self.assertLessEqual(cfg.epsilon(), 2.0)
    lower = cfg.noise_multiplier / (1 + 2e-4)
    self.assertGreater(_cfg(max_batch_size=401, num_steps=10,
                            noise_multiplier=lower).epsilon(), 2.0)

  @pytest.mark.slow
  def test_calibrate_meets_the_truncated_target_tightly(self):
    cfg = _cfg(max_batch_size=25, num_steps=10).calibrate(2.0)
    self.assertLessEqual(cfg.epsilon(), 2.0)
    lower = cfg.noise_multiplier / (1 + 2e-4)
    self.assertGreater(_cfg(max_batch_size=25, num_steps=10,
                            noise_multiplier=lower).epsilon(), 2.0)
    self.assertEqual(cfg.max_batch_size, 25)

  def test_statement_is_the_truncated_one(self):
    cfg = _cfg(max_batch_size=25, num_steps=3, noise_multiplier=2.0)
    with mock.patch.object(statement, "privacy_statement") as st:
      cfg.statement(deltas=(1e-5,))
    st.assert_called_once_with(2.0, 0.05, 3, 400, privacy_unit="example", deltas=(1e-5,),
                               max_batch_size=25)


class TruncatedStatementTest(absltest.TestCase):

  def test_rows_bound_the_truncated_event_and_delta_counts_the_selection(self):
    s = statement.privacy_statement(2.0, 0.05, 3, 400, deltas=(1e-5,), fprs=(0.1,),
                                    max_batch_size=25)
    event = statement.truncated_dpsgd_event(2.0, 0.05, 3, 400, 25)
    pld_event = event_accounting.privacy_loss_distribution(event, value_discretization=1e-4)
    for r in s.rows:
      self.assertEqual(r.rdp_epsilon, event_accounting.epsilon(event, r.delta, "rdp"))
      self.assertEqual(r.pld_epsilon, pld_event.epsilon(r.delta))
      self.assertGreaterEqual(r.rdp_epsilon, accounting.dpsgd_epsilon(2.0, 0.05, 3, r.delta))
      self.assertGreaterEqual(r.pld_epsilon,
                              accounting.dpsgd_epsilon(2.0, 0.05, 3, r.delta, "pld") - 1e-4)
      tv = sampling.selection_tv_bound(400, 0.05, 3)
      self.assertAlmostEqual(r.selection_delta,
                             tv * (1 + np.exp(max(r.rdp_epsilon, r.pld_epsilon))), delta=1e-28)
      self.assertEqual(r.total_delta, r.delta + r.sampler_delta + r.selection_delta)
    self.assertTrue(np.isnan(s.clt_mu) and np.isnan(s.tpr_clt[0]))
    self.assertIn("TRUNCATED at B = 25", s.text())
    self.assertIn("max_batch_size", s.to_dict())

  def test_untruncated_dict_is_unchanged_and_user_level_is_refused(self):
    d = statement.privacy_statement(1.0, 0.05, 5, 400, deltas=(1e-5,), fprs=(0.1,)).to_dict()
    self.assertNotIn("max_batch_size", d)
    self.assertNotIn("selection_delta", d["rows"][0])
    with self.assertRaisesRegex(ValueError, "privacy_unit must be 'example'"):
      statement.privacy_statement(1.0, 0.05, 5, 400, privacy_unit="user", max_batch_size=3)
    with self.assertRaisesRegex(ValueError, "max_batch_size"):
      statement.privacy_statement(1.0, 0.05, 5, 400, max_batch_size=0)


class TruncatedTrainingTest(absltest.TestCase):
  """80 records, q n = 20, T = 4; the default tests share one compiled program."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.x, cls.y = helpers.binary_data(n=80, d=3)
    cls.keep = jnp.ones((2, 80), bool)
    cls.model = models.logistic_regression(3)
    cls.base = _cfg(dataset_size=80, sampling_prob=0.25, num_steps=4)
    cls.small = dataclasses.replace(cls.base, max_batch_size=12)   # nearly every step cut
    cls.cut = cls._train(cls.small)

  @classmethod
  def _train(cls, cfg, perf=_QUIET, keep=None, **kw):
    keep = cls.keep if keep is None else keep
    return dpsgd.train_many(jax.random.key(1), cls.x, cls.y, keep, cfg, cls.model,
                            per_example_stats=True, perf=perf, **kw)

  def test_batches_never_exceed_the_cap(self):
    per_model = np.asarray(self.cut.stats["times_sampled"]).sum(axis=1)
    # 4 steps x 12 (Poisson: 4 x 20 expected, sd 7.7; <= 48 with probability ~1e-5)
    np.testing.assert_array_equal(per_model, np.full(2, 4 * 12))

  @pytest.mark.slow
  def test_bit_identical_to_poisson_when_no_batch_overflows(self):
    # B = n: no batch of the n kept records can exceed it (the default suite checks the
    # sampler's masks: TruncatedPoissonSamplerTest).
    a = self._train(self.base)
    b = self._train(dataclasses.replace(self.base, max_batch_size=80))
    for u, v in zip(jax.tree.leaves((a.params, a.stats)), jax.tree.leaves((b.params,
                                                                          b.stats))):
      np.testing.assert_array_equal(np.asarray(u), np.asarray(v))

  @pytest.mark.slow
  def test_padded_layout_truncates_alike(self):
    padded = self._train(self.small, _PADDED)    # buffers of min(32, B) = 12 rows
    np.testing.assert_array_equal(self.cut.stats["times_sampled"],
                                  padded.stats["times_sampled"])
    helpers.assert_trees_close(self.cut.params, padded.params)

  def test_refusals_and_warnings(self):
    with self.assertRaisesRegex(ValueError, "TruncatedPoissonSampler"):
      self._train(self.small, sampler=sampling.PoissonSampler(0.25))
    with self.assertRaisesRegex(ValueError, "TruncatedPoissonSampler"):
      self._train(self.small, sampler=sampling.ShuffleSampler.like_poisson(0.25, 80))
    with self.assertRaisesRegex(ValueError, "max_batch_size is None"):
      self._train(self.base, sampler=sampling.TruncatedPoissonSampler(0.25, 12))
    fixed = dpsgd.FixedGradients({"w": jnp.ones((1, 3)), "b": jnp.ones((1,))},
                                 np.ones((2, 1), bool))
    with self.assertRaisesRegex(ValueError, "fixed_gradients"):
      self._train(self.small, fixed_gradients=fixed)
    half = jnp.stack([jnp.arange(80) < 40, jnp.arange(80) < 79])
    with self.assertWarnsRegex(dpsgd.UnaccountedComponentWarning, "models hold 40 to 79"):
      self._train(self.small, keep=half)
    with warnings.catch_warnings():
      warnings.simplefilter("error", dpsgd.UnaccountedComponentWarning)
      self._train(self.small, keep=jnp.stack([jnp.arange(80) < 79] * 2))   # n - 1: covered


if __name__ == "__main__":
  absltest.main()
