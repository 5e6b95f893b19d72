"""Tests for dpjax.sampling: the Poisson and shuffle samplers and what they declare."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import dpsgd
from dpjax import models
from dpjax import prng
from dpjax import sampling
from tests import helpers

_QUIET = dpsgd.PerformanceFlags(progress=False)


class PoissonSamplerTest(parameterized.TestCase):

  def test_mask_is_the_prng_stream_restricted_to_keep(self):
    keep = jax.random.bernoulli(jax.random.key(1), 0.5, (50,))
    k = jax.random.key(7)
    got = sampling.PoissonSampler(0.3).batch_mask(k, 4, keep)
    want = prng.poisson_mask(prng.fold_in(k, 4), 0.3, 50) & keep
    np.testing.assert_array_equal(got, want)

  def test_rate_one_takes_every_kept_record(self):
    keep = jnp.arange(10) < 6
    np.testing.assert_array_equal(
        sampling.PoissonSampler(1.0).batch_mask(jax.random.key(0), 0, keep), keep)

  def test_training_inclusion_rate_and_keep(self):
    x, y = helpers.binary_data()
    keep = jax.random.bernoulli(jax.random.key(2), 0.5, (50, 24))
    cfg = helpers.small_config(sampling_prob=0.25, num_steps=40)
    out = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, models.logistic_regression(4),
                           per_example_stats=True, perf=_QUIET)
    sampled = np.asarray(out.stats["times_sampled"])
    kept = np.asarray(keep)
    self.assertEqual(sampled[~kept].sum(), 0.0)
    rate = sampled[kept].sum() / (kept.sum() * 40)
    self.assertAlmostEqual(rate, 0.25, delta=4 * math.sqrt(0.25 * 0.75 / (kept.sum() * 40)))

  def test_declares_what_the_accountant_is_told(self):
    s = sampling.PoissonSampler(0.07)
    self.assertTrue(s.accounted)
    self.assertEqual(s.sampling_prob, 0.07)
    self.assertEqual(helpers.small_config(sampling_prob=0.07).sampler(), s)

  @parameterized.parameters(0.0, 1.5, -0.1, math.nan, True, "0.3")
  def test_bad_rate(self, q):
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      sampling.PoissonSampler(q)


class ShuffleSamplerTest(absltest.TestCase):

  def test_like_poisson(self):
    s = sampling.ShuffleSampler.like_poisson(0.25, 24)
    self.assertEqual((s.batch_size, s.steps_per_epoch, s.sampling_prob), (6, 4, 0.25))
    self.assertFalse(s.accounted)

  def test_fixed_batches_cover_each_record_once_per_epoch(self):
    x, y = helpers.binary_data()
    cfg = helpers.small_config(sampling_prob=0.25, num_steps=8)
    with self.assertWarns(dpsgd.UnaccountedComponentWarning):
      out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((3, 24), bool), cfg,
                             models.logistic_regression(4), per_example_stats=True,
                             perf=_QUIET,
                             sampler=sampling.ShuffleSampler.like_poisson(0.25, 24))
    # 4 batches of 6 per epoch, 2 epochs: every record exactly twice.
    np.testing.assert_array_equal(out.stats["times_sampled"], 2.0 * np.ones((3, 24)))

  def test_bad_sizes(self):
    with self.assertRaisesRegex(ValueError, "batch_size"):
      sampling.ShuffleSampler(batch_size=0, steps_per_epoch=1, sampling_prob=0.1)
    with self.assertRaisesRegex(ValueError, "dataset_size"):
      sampling.ShuffleSampler.like_poisson(0.1, 0)


class CheckSamplerTest(absltest.TestCase):

  def test_accounted_sampler_must_use_the_configs_rate(self):
    with self.assertRaisesRegex(ValueError, "another q"):
      sampling.check_sampler(sampling.PoissonSampler(0.2), 0.3)
    x, y = helpers.binary_data()
    with self.assertRaisesRegex(ValueError, "another q"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((1, 24), bool), helpers.small_config(),
                       models.logistic_regression(4), sampler=sampling.PoissonSampler(0.5))

  def test_interface_is_checked(self):
    with self.assertRaisesRegex(TypeError, "batch_mask"):
      sampling.check_sampler(object(), 0.3)

  def test_a_user_sampler_plugs_in(self):
    # Deterministic round-robin halves: an unaccounted sampler of the user's own.
    class Halves:
      sampling_prob = 0.5
      accounted = False

      def batch_mask(self, key, step, keep_N):
        del key
        return keep_N & ((jnp.arange(keep_N.shape[0]) % 2) == (step % 2))

    x, y = helpers.binary_data()
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      out = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool),
                             helpers.small_config(sampling_prob=0.5, num_steps=4),
                             models.logistic_regression(4), per_example_stats=True,
                             perf=_QUIET, sampler=Halves())
    self.assertTrue(any(issubclass(r.category, dpsgd.UnaccountedComponentWarning) for r in w))
    np.testing.assert_array_equal(out.stats["times_sampled"], 2.0 * np.ones((2, 24)))


if __name__ == "__main__":
  absltest.main()
