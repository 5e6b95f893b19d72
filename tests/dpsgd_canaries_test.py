"""Tests for K fixed-gradient records (gradient canaries) per model in
dpjax.dpsgd.train_many(fixed_gradients=dpsgd.FixedGradients(G, keep_MxK)).

With no noise, the canaries' unused coordinates of each privatized update show each
canary's inclusion bit exactly (C / B per included canary), so the bits are checked
against their documented draw `prng.poisson_mask(fold_in(k_fixed, t), q, K) & keep`,
for rate q, for independence across canaries, and for the single-canary case K = 1
(model i of train_many equals train_one with model i's key and keep bit).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from dpjax import dpsgd
from dpjax import models
from dpjax import prng
from dpjax import sampling
from dpjax.audit import variants
from tests import helpers

def _data(n=12, f=3, k=4, seed=0):
  """n records with f random features and k trailing zero columns (the canaries' own)."""
  x = jax.random.normal(jax.random.key(seed), (n, f + k))
  x = x.at[:, f:].set(0.0)
  y = (x[:, 0] > 0).astype(jnp.int32)
  return x, y

def _dirac(d, k, c=1.0, scale=1.0):
  """{"w": [K, D]}: canary j = scale * c * e_{D-K+j}."""
  return {"w": jnp.zeros((k, d)).at[jnp.arange(k), d - k + jnp.arange(k)].set(scale * c)}

def _last(k):
  def observe(u):
    return u["w"][-k:]
  return observe

_OBS4 = _last(4)

class MultiCanaryTest(absltest.TestCase):

  @pytest.mark.slow  # about 25 s; test_train_one_with_a_canary_vector_equals_model_i stays in the default set
  def test_single_canary_is_the_k1_case(self):
    # The one-canary spelling (the record g with a leading axis K = 1, keep bool[M, 1]):
    # model i equals train_one with model i's key and its keep bit as bool[K].
    x, y = _data(k=1)
    cfg = helpers.small_config(dataset_size=12, sampling_prob=0.3, num_steps=15,
                               noise_multiplier=1.0)
    model = models.logistic_regression(4)
    keep = jnp.ones((6, 12), bool)
    ck = np.arange(6) % 2 == 0
    g = {"w": jnp.array([0.0, 0.0, 0.0, 2.5])}
    g_k = jax.tree.map(lambda v: v[None], g)
    a = dpsgd.train_many(jax.random.key(3), x, y, keep, cfg, model,
                         fixed_gradients=dpsgd.FixedGradients(g_k, ck[:, None]),
                         observe_fn=_last(1), perf=helpers.QUIET)
    keys = jax.random.split(jax.random.key(3), 6)
    for i in (0, 1, 4):
      one = dpsgd.train_one(keys[i], x, y, keep[i], cfg, model,
                            fixed_gradients=dpsgd.FixedGradients(g_k, np.array([ck[i]])),
                            observe_fn=_last(1))
      helpers.assert_trees_close(one.params, jax.tree.map(lambda v, i=i: v[i], a.params))
      np.testing.assert_allclose(one.observations, a.observations[i], rtol=1e-5, atol=1e-7)
    # the canary shows (o != the no-canary run) only in models that keep it
    c = dpsgd.train_many(jax.random.key(3), x, y, keep, cfg, model, observe_fn=_last(1),
                         perf=helpers.QUIET)
    differs = np.any(np.asarray(a.observations) != np.asarray(c.observations), axis=(1, 2))
    np.testing.assert_array_equal(differs, np.asarray(ck))

  def test_bits_are_the_documented_draws(self):
    """o[i, t, j] * B / C = poisson_mask(fold_in(k_canary_i, t), q, K)[j] & keep[i, j]."""
    k, m, t, q = 4, 5, 30, 0.3
    x, y = _data(k=k)
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=q, num_steps=t,
                            noise_multiplier=0.0, l2_clip_norm=2.0)
    keep_c = np.random.default_rng(0).random((m, k)) < 0.7
    out = dpsgd.train_many(jax.random.key(7), x, y, jnp.ones((m, 12), bool), cfg,
                           models.logistic_regression(3 + k),
                           fixed_gradients=dpsgd.FixedGradients(   # clipped to C
                               _dirac(3 + k, k, c=2.0, scale=3.0), jnp.asarray(keep_c)),
                           observe_fn=_OBS4,
                           perf=helpers.QUIET)
    bits = np.asarray(out.observations) * cfg.expected_batch_size / cfg.l2_clip_norm
    np.testing.assert_allclose(bits, np.rint(bits), atol=1e-5)
    model_keys = jax.random.split(jax.random.key(7), m)

    def draws(model_key):   # [T, K]: model key -> (init, sample, noise, fixed-record) keys
      k_canary = jax.random.split(model_key, 4)[3]
      return jax.vmap(lambda s: prng.poisson_mask(prng.fold_in(k_canary, s), q, k))(
          jnp.arange(t))
    want = np.asarray(jax.jit(jax.vmap(draws))(model_keys)) & keep_c[:, None, :]
    np.testing.assert_array_equal(np.rint(bits).astype(bool), want)
    self.assertGreater(want.sum(), 0)

  def test_bits_at_rate_q_and_uncorrelated_across_canaries(self):
    k, m, t, q = 6, 40, 200, 0.3
    x, y = _data(k=k)
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=q, num_steps=t, noise_multiplier=0.0)
    out = dpsgd.train_many(jax.random.key(1), x, y, jnp.ones((m, 12), bool), cfg,
                           models.logistic_regression(3 + k),
                           fixed_gradients=dpsgd.FixedGradients(_dirac(3 + k, k),
                                                                jnp.ones((m, k), bool)),
                           observe_fn=_last(k),
                           perf=helpers.QUIET)
    b = np.asarray(out.observations).reshape(m * t, k) * cfg.expected_batch_size > 0.5
    n = m * t
    # rate of each canary within 4 sd of q (n Bernoulli(q) draws per canary)
    np.testing.assert_allclose(b.mean(0), q, atol=4 * math.sqrt(q * (1 - q) / n))
    corr = np.corrcoef(b.T.astype(float))
    off = corr[~np.eye(k, dtype=bool)]
    # independent bits: each sample correlation ~ N(0, 1/n); 15 pairs, 4.5 sd
    self.assertLess(np.max(np.abs(off)), 4.5 / math.sqrt(n))

  def test_counted_in_the_realised_batch_only_by_the_faulty_variant(self):
    """q = 1, no noise, all n records and K canaries in every step: the correct
    privatizer divides by B = n, RealisedBatchDenominator by n + (canaries in)."""
    k, n = 3, 12
    x, y = _data(n=n, k=k)
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=1.0, num_steps=1,
                            noise_multiplier=0.0)
    model = models.logistic_regression(3 + k)
    keep_c = jnp.array([[True, True, True], [True, False, False]])
    kw = dict(fixed_gradients=dpsgd.FixedGradients(_dirac(3 + k, k), keep_c),
              observe_fn=_last(k), perf=helpers.QUIET)
    good = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, n), bool), cfg, model, **kw)
    np.testing.assert_allclose(np.asarray(good.observations)[:, 0],
                               np.asarray(keep_c, float) / n, atol=1e-7)
    var = variants.variant("realised_batch_denominator", cfg, model)
    with self.assertWarns(UserWarning):
      bad = dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, n), bool), var.config, model,
                             **var.components, **kw)
    in_count = np.asarray(keep_c).sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(bad.observations)[:, 0],
                               np.asarray(keep_c, float) / (n + in_count), atol=1e-7)

  def test_train_one_with_a_canary_vector_equals_model_i(self):
    k = 4
    x, y = _data(k=k)
    cfg = helpers.small_config(dataset_size=12, noise_multiplier=1.0, num_steps=5)
    model = models.logistic_regression(3 + k)
    ck = jnp.array([[True, False, True, False], [False, True, True, True]])
    g = _dirac(3 + k, k)
    many = dpsgd.train_many(jax.random.key(2), x, y, jnp.ones((2, 12), bool), cfg, model,
                            fixed_gradients=dpsgd.FixedGradients(g, ck), observe_fn=_OBS4,
                            perf=helpers.QUIET)
    keys = jax.random.split(jax.random.key(2), 2)
    # train_one takes the model's keep as bool[K] or bool[1, K].
    for keep_k in (np.asarray(ck[1]), np.asarray(ck[1:2])):
      one = dpsgd.train_one(keys[1], x, y, jnp.ones((12,), bool), cfg, model,
                            fixed_gradients=dpsgd.FixedGradients(g, keep_k), observe_fn=_OBS4)
      helpers.assert_trees_close(one.params, jax.tree.map(lambda a: a[1], many.params))

  def test_bad_canary_arguments_are_refused_by_name(self):
    x, y = _data(k=2)
    cfg = helpers.small_config(dataset_size=12)
    model = models.logistic_regression(5)
    keep = jnp.ones((2, 12), bool)
    g = _dirac(5, 2)
    ck = jnp.ones((2, 2), bool)
    keep_name, grad_name = r"fixed_gradients\.keep_MxK", r"fixed_gradients\.gradients_K"
    fg = dpsgd.FixedGradients
    cases = [
        (keep_name, fg(g, None)),
        (grad_name, fg(None, ck)),
        (keep_name, fg(g, jnp.ones((2, 3), bool))),
        (keep_name, fg(g, jnp.ones((2, 2)))),           # not bool
        (keep_name, fg(g, jnp.ones((2,), bool))),        # train_many needs bool[M, K]
        (grad_name, fg({"w": jnp.zeros((0, 5))}, jnp.ones((2, 0), bool))),
        (grad_name, fg({"w": jnp.zeros((2, 4))}, ck)),
        (grad_name, fg({"v": jnp.zeros((2, 5))}, ck)),
        (grad_name, fg({"w": g["w"].at[1, 0].set(jnp.nan)}, ck)),
        (grad_name, fg({"w": np.full((2, 5), "x")}, ck)),
        (grad_name, fg({"w": jnp.zeros(5)}, jnp.ones((2, 1), bool))),   # no leading K axis
    ]
    for name, fixed in cases:
      with self.subTest(name=name, fixed=repr(fixed)[:80]):
        with self.assertRaisesRegex(ValueError, name):
          dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=helpers.QUIET,
                           fixed_gradients=fixed)
    # Anything but a FixedGradients (a plain tuple, the gradients alone) is a TypeError.
    for bad in ((g, ck), g, [g, ck]):
      with self.assertRaisesRegex(TypeError, "fixed_gradients must be a FixedGradients"):
        dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model, perf=helpers.QUIET,
                         fixed_gradients=bad)

  def test_more_canaries_than_memory_refused(self):
    x, y = _data(k=2)
    model = models.logistic_regression(5)
    huge = jax.ShapeDtypeStruct((10**12, 5), jnp.float32)

    class Lazy:  # a leaf that reports a huge shape without allocating it
      shape, dtype = huge.shape, np.dtype(np.float32)

      def __array__(self, dtype=None, copy=None):
        raise AssertionError("the size check must come before any conversion")
    with self.assertRaisesRegex(ValueError, r"fixed_gradients\.gradients_K"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 12), bool),
                       helpers.small_config(dataset_size=12), model,
                       fixed_gradients=dpsgd.FixedGradients({"w": Lazy()},
                                                            np.ones((2, 1), bool)),
                       perf=helpers.QUIET)

class FixedRecordsFollowTheSamplerTest(absltest.TestCase):
  """Under any sampler but Poisson, the K fixed records are records N .. N + K - 1 of the
  sampler's index space: their bits are the tail of its batch_mask over N + K records."""

  def _bits(self, sampler, n=12, k=3, m=3, t=12):
    x, y = _data(n=n, k=k)
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=sampler.sampling_prob, num_steps=t,
                            noise_multiplier=0.0)
    keep_c = np.array([[True, True, True], [True, False, True], [False, True, True]])[:m]
    with self.assertWarns(dpsgd.UnaccountedComponentWarning):
      out = dpsgd.train_many(jax.random.key(5), x, y, jnp.ones((m, n), bool), cfg,
                             models.logistic_regression(3 + k), sampler=sampler,
                             fixed_gradients=dpsgd.FixedGradients(_dirac(3 + k, k),
                                                                  jnp.asarray(keep_c)),
                             observe_fn=_last(k), perf=helpers.QUIET)
    bits = np.asarray(out.observations) * cfg.expected_batch_size
    np.testing.assert_allclose(bits, np.rint(bits), atol=1e-5)
    bits = np.rint(bits).astype(bool)                                # [M, T, K]
    for i, mk in enumerate(jax.random.split(jax.random.key(5), m)):
      k_sample = jax.random.split(mk, 4)[1]
      keep_all = jnp.concatenate([jnp.ones((n,), bool), jnp.asarray(keep_c[i])])
      want = np.stack([np.asarray(sampler.batch_mask(k_sample, jnp.int32(s), keep_all))[n:]
                       for s in range(t)])
      np.testing.assert_array_equal(bits[i], want)
    return bits, keep_c

  def test_cyclic_poisson_bins(self):
    bits, keep_c = self._bits(sampling.CyclicPoissonSampler(0.9, 4))
    steps = np.arange(12)
    for j in range(3):     # canary j is record 12 + j: bin (12 + j) mod 4 = j
      self.assertFalse(bits[:, steps % 4 != j, j].any())
    self.assertTrue(bits.any())
    self.assertFalse(bits[~keep_c[:, None, :].repeat(12, 1)].any())

  def test_shuffle_fixed_size_batches_once_per_epoch(self):
    # 15 records (12 + 3 canaries) in batches of 3, 5 per epoch: every kept canary once
    # per epoch of 5 steps.
    bits, keep_c = self._bits(sampling.ShuffleSampler(batch_size=3, steps_per_epoch=5,
                                                      sampling_prob=0.25), t=10)
    per_epoch = bits.reshape(3, 2, 5, 3).sum(axis=2)                 # [M, epoch, K]
    np.testing.assert_array_equal(per_epoch, np.repeat(keep_c[:, None, :], 2, 1))

  def test_a_sampler_of_fixed_size_is_refused_by_name(self):
    class TwelveOnly(sampling.CyclicPoissonSampler):
      def batch_mask(self, key, step, keep_N):
        if keep_N.shape != (12,):
          raise ValueError("twelve records only")
        return super().batch_mask(key, step, keep_N)
    with self.assertRaisesRegex(ValueError, "index space"):
      self._bits(TwelveOnly(0.5, 2))


if __name__ == "__main__":
  absltest.main()
