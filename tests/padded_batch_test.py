"""The padded step of DP-SGD (`dpsgd.PerformanceFlags(batch_capacity=...)`,
`sampling.padded_batch`, `sampling.default_batch_capacity`, `dpsgd.batch_layout`).

What is checked:
  * padded_batch's chunks hold exactly the sampled records, in index order, each
    once, against a NumPy reference on random masks;
  * default_batch_capacity is the smallest multiple of 8 whose Binomial tail is at
    most 0.025 / M (scipy's exact binomial survival function);
  * a padded run equals the full-mask run of the same keys (same batch bits) up to
    float summation order, for several models with their own membership, with
    capacities small enough that most steps overflow into further chunks; the
    per-record sample counts are equal exactly, so no sampled record is dropped;
  * the privatized update of both layouts has the closed-form mean and variance
    (Monte Carlo over 4,000 models, 5 standard errors);
  * the automatic layout choice and the refusals.
"""

import math
import unittest

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax import dpsgd
from dpjax import models
from dpjax import sampling


class PaddedBatchTest(unittest.TestCase):

  def test_chunks_partition_the_sampled_records_in_order(self):
    rng = np.random.default_rng(0)
    chunks = jax.jit(sampling.padded_batch, static_argnums=1)
    for n, q, k in ((1, 1.0, 1), (17, 0.5, 4), (50, 0.9, 7), (30, 0.0, 5)):
      mask = rng.random(n) < q
      want = np.flatnonzero(mask)
      got = []
      for j in range(max(1, -(-len(want) // k)) + 1):   # one chunk past the end
        idx, ok = chunks(jnp.asarray(mask), k, j)
        idx, ok = np.asarray(idx), np.asarray(ok)
        self.assertEqual(idx.shape, (k,))
        self.assertTrue(np.all((idx >= 0) & (idx < n)))
        # Valid rows come first, then padding.
        self.assertTrue(np.all(np.diff(ok.astype(int)) <= 0))
        got.extend(idx[ok].tolist())
      np.testing.assert_array_equal(got, want)

  def test_rows_equal_the_numpy_reference_across_word_boundaries(self):
    # Every row of every chunk, padding included (index N - 1), for N around multiples of
    # the 32-record words the search runs over, and dense, sparse and empty masks.
    rng = np.random.default_rng(1)
    chunks = jax.jit(sampling.padded_batch, static_argnums=1)
    for n in (32, 33, 95):
      for q in (0.0, 0.03, 0.5, 1.0):
        mask = rng.random(n) < q
        sampled = np.flatnonzero(mask)
        for k in (5, 32):
          for j in range(-(-len(sampled) // k) + 1):
            rows = sampled[j * k:(j + 1) * k]
            want_ok = np.arange(k) < len(rows)
            want_idx = np.full(k, n - 1)
            want_idx[:len(rows)] = rows
            idx, ok = chunks(jnp.asarray(mask), k, j)
            np.testing.assert_array_equal(np.asarray(ok), want_ok, err_msg=f"{n} {q} {k} {j}")
            np.testing.assert_array_equal(np.asarray(idx), want_idx, err_msg=f"{n} {q} {k} {j}")
            self.assertEqual(idx.dtype, jnp.int32)

  def test_padded_batch_refuses_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "capacity"):
      sampling.padded_batch(jnp.ones((4,), bool), 0, 0)
    with self.assertRaisesRegex(ValueError, "chunk"):
      sampling.padded_batch(jnp.ones((4,), bool), 2, -1)
    with self.assertRaisesRegex(ValueError, "mask_N"):
      sampling.padded_batch(jnp.ones((2, 2), bool), 2, 0)

  def test_default_capacity_is_the_smallest_multiple_of_8_over_the_tail(self):
    for n, q, m in ((60_000, 256 / 60_000, 1), (60_000, 256 / 60_000, 1000),
                    (5_000, 0.01, 7), (300, 0.5, 1), (40, 0.05, 1)):
      k = sampling.default_batch_capacity(n, q, m)
      self.assertEqual(k % 8 if k < n else 0, 0)
      self.assertLessEqual(k, n)
      self.assertLessEqual(stats.binom.sf(k, n, q), 0.025 / m + 1e-15)
      if 8 < k < n:
        self.assertGreater(stats.binom.sf(k - 8, n, q), 0.025 / m)
    self.assertEqual(sampling.default_batch_capacity(10, 1.0), 10)

  def test_auto_layout(self):
    # A large pool of a large model: padded, with the default capacity.
    self.assertEqual(dpsgd.batch_layout(60_000, 256 / 60_000, num_params=100_000),
                     sampling.default_batch_capacity(60_000, 256 / 60_000))
    # The capacity is sized for the largest kept count and the number of models.
    self.assertEqual(dpsgd.batch_layout(60_000, 0.01, kept_max=30_000, num_models=64),
                     sampling.default_batch_capacity(30_000, 0.01, 64))
    self.assertIsNone(dpsgd.batch_layout(151, 0.2))                       # small pool
    self.assertIsNone(dpsgd.batch_layout(60_000, 0.5))                    # K > N / 8
    self.assertIsNone(dpsgd.batch_layout(60_000, 0.001, num_params=57))   # cheap rows
    self.assertIsNone(dpsgd.batch_layout(60_000, 0.001, privacy_unit="user"))
    with self.assertRaisesRegex(ValueError, "kept_max"):
      dpsgd.batch_layout(10, 0.1, kept_max=11)


def _data(n, f, seed=0):
  x = jax.random.normal(jax.random.key(seed), (n, f))
  return x, (x[:, 0] + 0.3 * x[:, 1] > 0).astype(jnp.int32)


class PaddedTrainingTest(unittest.TestCase):

  def test_padded_equals_full_mask_with_overflowing_chunks(self):
    self._check_padded_equals_full_mask((models.logistic_regression(4),))

  @pytest.mark.slow
  def test_padded_equals_full_mask_mlp(self):
    self._check_padded_equals_full_mask((models.mlp(4, hidden=(8,), num_classes=2),))

  def _check_padded_equals_full_mask(self, model_list):
    n, f = 120, 4
    x, y = _data(n, f)
    keep = jax.random.bernoulli(jax.random.key(2), 0.8, (3, n))
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=0.2, num_steps=6,
                            noise_multiplier=1.0, l2_clip_norm=0.5)
    for model in model_list:
      params = jax.eval_shape(model.init, jax.random.key(0))
      canary = jax.tree.map(lambda s: jnp.full(s.shape, 0.1, jnp.float32), params)
      fixed = dpsgd.FixedGradients(jax.tree.map(lambda v: v[None], canary),
                                   np.array([[True], [False], [True]]))
      kw = dict(per_example_stats=True, fixed_gradients=fixed)
      full = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model,
                              perf=dpsgd.PerformanceFlags(batch_capacity=None, progress=False),
                              **kw)
      # ~19 sampled per step: capacity 8 needs 2-4 chunks on most steps.
      pad = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model,
                             perf=dpsgd.PerformanceFlags(batch_capacity=8, progress=False),
                             **kw)
      for a, b in zip(jax.tree.leaves(full.params), jax.tree.leaves(pad.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-5)
      np.testing.assert_array_equal(pad.stats["times_sampled"], full.stats["times_sampled"])
      np.testing.assert_array_equal(pad.stats["times_clipped"], full.stats["times_clipped"])
      np.testing.assert_allclose(pad.stats["norm_sum"], full.stats["norm_sum"], rtol=1e-5)
      self.assertGreater(float(np.sum(full.stats["times_sampled"])), 8 * 6 * 3)
      # Unkept records are never sampled.
      self.assertEqual(float(np.sum(np.where(keep, 0.0, pad.stats["times_sampled"]))), 0.0)

  def test_update_has_the_closed_form_mean_and_variance(self):
    self._check_closed_form(8)

  @pytest.mark.slow
  def test_full_mask_update_has_the_closed_form_mean_and_variance(self):
    self._check_closed_form(None)

  def _check_closed_form(self, cap):
    # One step from w = 0 (the model's init) of logistic regression: record i's gradient is
    # (1/2 - y_i) x_i, clipped to C. The released update is (S + N(0, s^2 C^2)) / B
    # with S = sum_i b_i clip(g_i), b_i ~ Bernoulli(q'): mean q' sum clip(g_i) / B,
    # variance per coordinate (q'(1 - q') sum clip(g_i)_d^2 + s^2 C^2) / B^2, with
    # q' = floor(q 2^16) / 2^16 the realised rate (`prng.poisson_mask`).
    n, f, m, q, c, s = 64, 2, 4000, 0.25, 1.0, 0.5
    x, y = _data(n, f, seed=3)
    x = 2.0 * x
    g = (0.5 - np.asarray(y, np.float64))[:, None] * np.asarray(x, np.float64)
    g *= np.minimum(1.0, c / np.linalg.norm(g, axis=1))[:, None]
    qr = math.floor(q * 2 ** 16) / 2 ** 16
    b = q * n
    mean = qr * g.sum(0) / b
    var = (qr * (1 - qr) * (g ** 2).sum(0) + (s * c) ** 2) / b ** 2
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=q, num_steps=1,
                            noise_multiplier=s, l2_clip_norm=c)
    model = models.logistic_regression(f)
    out = dpsgd.train_many(jax.random.key(7), x, y, jnp.ones((m, n), bool), cfg, model,
                           observe_fn=lambda u: u["w"],
                           perf=dpsgd.PerformanceFlags(batch_capacity=cap, progress=False))
    u = np.asarray(out.observations[:, 0], np.float64)   # [M, F]
    np.testing.assert_array_less(np.abs(u.mean(0) - mean), 5 * np.sqrt(var / m))
    # Sample variance: standard error ~ var sqrt(2 / M) for near-Gaussian updates.
    np.testing.assert_array_less(np.abs(u.var(0) - var), 5 * var * np.sqrt(2.0 / m))

  def test_refusals(self):
    x, y = _data(12, 2)
    cfg = dpsgd.DpSgdConfig(dataset_size=4, sampling_prob=0.5, num_steps=1,
                            noise_multiplier=1.0, privacy_unit="user")
    model = models.logistic_regression(2)
    ids = np.repeat(np.arange(4), 3)
    with self.assertRaisesRegex(ValueError, "batch_capacity"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((1, 12), bool), cfg, model,
                       sampler=cfg.sampler(ids),
                       perf=dpsgd.PerformanceFlags(batch_capacity=4, progress=False))
    # "auto" picks the full mask for user-level DP-SGD (no refusal).
    dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((1, 12), bool), cfg, model,
                     sampler=cfg.sampler(ids),
                     perf=dpsgd.PerformanceFlags(batch_capacity="auto", progress=False))
    for bad in (0, -3, "padded", 2.5):   # refused when the flags are built
      with self.assertRaisesRegex(ValueError, "batch_capacity"):
        dpsgd.PerformanceFlags(batch_capacity=bad)


if __name__ == "__main__":
  unittest.main()
