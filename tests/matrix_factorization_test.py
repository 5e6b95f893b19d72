"""Tests of dpjax.matrix_factorization: noise streams, sensitivity, error, accounting.

Streams are checked exactly against the dense C^-1 Z built from the same draws, and by
Monte Carlo against sigma^2 C^-1 C^-T; sensitivity against an independent enumeration of
participation patterns; the tree against its closed-form variances.
"""

import itertools
import math
import re
import warnings

import jax
import numpy as np
from absl.testing import absltest

from dpjax import dpsgd
from dpjax import matrix_factorization as mf
from dpjax import models
from dpjax import privatizer
from dpjax import prng
from dpjax import sampling
from dpjax.accounting import gdp
from tests import helpers


def _draws(key, num_steps, shape):
  """Z[t] = prng.standard_normal(prng.fold_in(key, t), shape), float64[T, *shape]."""
  draw = jax.jit(jax.vmap(lambda t: prng.standard_normal(prng.fold_in(key, t), shape)))
  return np.asarray(draw(jax.numpy.arange(num_steps)), np.float64)


def _brute_force(c, k, sep):
  """max over patterns (subsets of <= k steps, gaps >= sep) and signs of ||C s||."""
  t = c.shape[0]
  best = 0.0
  for size in range(1, k + 1):
    for p in itertools.combinations(range(t), size):
      if any(b - a < sep for a, b in zip(p, p[1:])):
        continue
      for signs in itertools.product((1.0, -1.0), repeat=size - 1):
        u = np.zeros(t)
        u[list(p)] = (1.0,) + signs
        best = max(best, float(np.linalg.norm(c @ u)))
  return best


def _random_decreasing(rng, b):
  c = np.sort(rng.random(b))[::-1]
  c[0] = 1.0
  return c


class StreamTest(absltest.TestCase):

  def test_toeplitz_stream_equals_dense_inverse(self):
    key = jax.random.key(0)
    for coefs in ([1.0], [1.0, 0.5], [2.0, -0.3, 0.2, 0.1]):
      stream = mf.toeplitz_stream(coefs, 12)
      w = np.asarray(mf.stream_noise(stream, key, 12, (3,)))
      dense = np.linalg.solve(stream.strategy, _draws(key, 12, (3,)).reshape(12, -1))
      np.testing.assert_allclose(w.reshape(12, -1), dense, atol=1e-5, rtol=0)

  def test_matrix_stream_equals_dense_inverse(self):
    rng = np.random.default_rng(1)
    c = np.tril(rng.normal(size=(9, 9)) * 0.3) + np.diag(rng.uniform(0.5, 2.0, 9))
    key = jax.random.key(1)
    w = np.asarray(mf.stream_noise(mf.matrix_stream(c), key, 9, (2,)))
    np.testing.assert_allclose(w, np.linalg.solve(c, _draws(key, 9, (2,))), atol=2e-5)

  def test_one_band_is_the_plain_gaussian_draw(self):
    key = jax.random.key(2)
    w = np.asarray(mf.stream_noise(mf.toeplitz_stream([1.0], 6), key, 6, (4, 2)))
    np.testing.assert_array_equal(w, _draws(key, 6, (4, 2)).astype(np.float32))

  def test_tree_stream_equals_closed_form_weights(self):
    key = jax.random.key(3)
    for t in (1, 8, 13):
      for honaker in (True, False):
        levels = mf.tree_noise_weights(t, honaker).shape[2]
        y = _draws(key, t, (levels, 2))
        dense = np.einsum("tsl,slp->tp", mf.tree_noise_weights(t, honaker), y)
        w = np.asarray(mf.stream_noise(mf.tree_stream(t, honaker), key, t, (2,)))
        np.testing.assert_allclose(w, dense, atol=1e-5, err_msg=f"T={t} honaker={honaker}")

  def test_tree_prefix_variance_is_the_binary_tree_closed_form(self):
    # Plain tree: prefix s sums popcount(s) unit nodes. Honaker: sum over set bits l of
    # v_l, v_0 = 1, v_l = 1 / (1 + 1 / (2 v_{l-1})) (inverse-variance weighting).
    for t in (5, 16, 33):
      a = mf.prefix_workload(t)
      for honaker in (False, True):
        c_inv = np.linalg.inv(mf.tree_aggregation(t, honaker))
        var = np.diag(a @ c_inv @ c_inv.T @ a.T)
        v = [1.0]
        for _ in range(10):
          v.append(1.0 / (1.0 + 1.0 / (2.0 * v[-1])) if honaker else 1.0)
        want = [sum(v[l] for l in range(10) if (s >> l) & 1) for s in range(1, t + 1)]
        np.testing.assert_allclose(var, want, rtol=1e-10)

  def test_monte_carlo_covariance(self):
    """Empirical covariance of n = 20,000 streams within 5 standard errors of
    sigma^2 C^-1 C^-T entrywise (se_ij = sigma^2 sqrt((K_ii K_jj + K_ij^2) / n))."""
    n, t, sigma = 20_000, 8, 1.5
    keys = jax.random.split(jax.random.key(4), n)
    for stream in (mf.toeplitz_stream([1.0, 0.6, 0.3], t), mf.tree_stream(t),
                   mf.matrix_stream(mf.tree_aggregation(t, False))):
      w = sigma * np.asarray(jax.vmap(lambda k, s=stream: mf.stream_noise(s, k, t, ()))(keys),
                             np.float64)
      cov = w.T @ w / n
      c_inv = np.linalg.inv(stream.strategy)
      k = sigma ** 2 * c_inv @ c_inv.T
      se = np.sqrt((np.outer(np.diag(k), np.diag(k)) + k ** 2) / n)
      self.assertLess(np.max(np.abs(cov - k) / se), 5.0)


class SensitivityTest(absltest.TestCase):

  def test_single_epoch_is_the_largest_column_norm(self):
    rng = np.random.default_rng(5)
    c = np.tril(rng.normal(size=(7, 7))) + 3 * np.eye(7)
    self.assertAlmostEqual(mf.sensitivity(c), np.linalg.norm(c, axis=0).max(), places=12)
    self.assertAlmostEqual(mf.sensitivity(c), _brute_force(c, 1, 1), places=12)

  def test_enumeration_equals_brute_force(self):
    rng = np.random.default_rng(6)
    for _ in range(12):
      t = int(rng.integers(3, 9))
      k, sep = int(rng.integers(1, 4)), int(rng.integers(1, t))
      b = int(rng.integers(1, t + 1))
      c = mf.banded_toeplitz(_random_decreasing(rng, b), t)
      got = mf.sensitivity(c, k, sep)
      self.assertAlmostEqual(got, _brute_force(c, k, sep), places=10)
      self.assertAlmostEqual(
          mf.toeplitz_sensitivity(c[:b, 0], t, k, sep), got, places=10)
    for t in (4, 8):
      c = mf.tree_aggregation(t)
      self.assertAlmostEqual(mf.sensitivity(c, 2, 2), _brute_force(c, 2, 2), places=10)

  def test_signed_gram_gives_an_upper_bound(self):
    c = mf.banded_toeplitz([1.0, -0.8], 6)
    self.assertGreaterEqual(mf.sensitivity(c, 3, 1) + 1e-12, _brute_force(c, 3, 1))

  def test_closed_form_for_disjoint_bands(self):
    # b <= sep: columns do not overlap, sens = sqrt(k) ||coefs||.
    coefs = [1.0, 0.7, 0.2]
    self.assertAlmostEqual(mf.toeplitz_sensitivity(coefs, 64, 4, 16),
                           2.0 * np.linalg.norm(coefs), places=12)

  def test_invalid_inputs(self):
    with self.assertRaisesRegex(ValueError, "lower triangular"):
      mf.sensitivity(np.ones((3, 3)))
    with self.assertRaisesRegex(ValueError, "positive diagonal"):
      mf.sensitivity(np.diag([1.0, 0.0]))
    with self.assertRaisesRegex(ValueError, "non-increasing"):
      mf.toeplitz_sensitivity([1.0, 2.0], 8, 2, 1)
    with self.assertRaisesRegex(ValueError, "patterns"):
      mf.sensitivity(np.eye(200), 6, 1)
    with self.assertRaisesRegex(ValueError, "coefs"):
      mf.toeplitz_stream([0.0, 1.0], 4)


class ErrorAndAccountingTest(absltest.TestCase):

  def test_identity_error(self):
    for t in (8, 64):
      self.assertAlmostEqual(mf.expected_error(np.eye(t)), (t + 1) / 2, places=9)
      self.assertAlmostEqual(mf.expected_error(np.eye(t), None, 2, t // 2),
                             t + 1, places=9)

  def test_tree_error_closed_form(self):
    t = 32
    c = mf.tree_aggregation(t)
    v = [1.0]
    for _ in range(6):
      v.append(1.0 / (1.0 + 1.0 / (2.0 * v[-1])))
    total = sum(v[l] for s in range(1, t + 1) for l in range(6) if (s >> l) & 1)
    self.assertAlmostEqual(mf.expected_error(c), mf.sensitivity(c) ** 2 * total / t, places=9)
    self.assertLess(mf.expected_error(c), mf.expected_error(np.eye(t)))

  def test_momentum_workload(self):
    w = mf.momentum_workload(4, 0.5, [1.0, 1.0, 0.5, 0.5])
    # theta_3 - theta_0 collects g_0 with weight 1 + .5 + .5 * .25 + .5 * .125.
    self.assertAlmostEqual(w[3, 0], 1 + 0.5 + 0.5 * 0.25 + 0.5 * 0.125, places=12)
    np.testing.assert_array_equal(mf.momentum_workload(5, 0.0), mf.prefix_workload(5))

  def test_optimised_toeplitz_beats_identity_and_its_start(self):
    t = 32
    identity = mf.expected_error(np.eye(t))
    for b in (2, 4):
      start = mf.expected_error(mf.banded_toeplitz(mf.sqrt_toeplitz_coefs(b), t))
      coefs = mf.optimize_toeplitz(t, b, num_iterations=60)
      self.assertEqual(coefs[0], 1.0)
      got = mf.expected_error(mf.banded_toeplitz(coefs, t))
      self.assertLessEqual(got, start)
      self.assertLess(got, identity)
    w = mf.momentum_workload(t, 0.9)
    coefs = mf.optimize_toeplitz(t, 4, w, num_iterations=60)
    self.assertLess(mf.expected_error(mf.banded_toeplitz(coefs, t), w),
                    mf.expected_error(np.eye(t), w))

  def test_sqrt_coefs_are_the_series_of_inverse_sqrt(self):
    r = mf.sqrt_toeplitz_coefs(6)
    np.testing.assert_allclose(r, [math.comb(2 * j, j) / 4 ** j for j in range(6)], rtol=1e-14)
    # (sum r_j x^j)^2 = 1 / (1 - x): the Cauchy square of r is all ones.
    np.testing.assert_allclose(np.convolve(r, r)[:6], np.ones(6), rtol=1e-12)

  def test_epsilon_is_the_gaussian_mechanism(self):
    for sigma, sens in ((2.0, 1.0), (5.0, 2.5), (8.0, math.sqrt(6))):
      want = gdp.gaussian_epsilon(1e-6, sens / sigma)
      got = mf.epsilon(sigma, sens, 1e-6)
      self.assertGreaterEqual(got, want - 1e-9)
      self.assertLess(got - want, 1e-3)

  def test_epsilon_matches_dp_accounting(self):
    import dp_accounting  # pylint: disable=g-import-not-at-top
    acct = dp_accounting.pld.PLDAccountant()
    acct.compose(dp_accounting.GaussianDpEvent(4.0 / 2.0))
    self.assertAlmostEqual(mf.epsilon(4.0, 2.0, 1e-5), acct.get_epsilon(1e-5), delta=2e-3)

  def test_tree_epsilon_matches_dp_accounting_tree_event(self):
    """dp_accounting's single-epoch tree event (REPLACE_SPECIAL: one leaf's value changes
    by at most 1, as our clip-1 add/remove) gives the plain tree's RDP eps exactly; the
    online Honaker tree, a post-processing of the same node sums, is never looser."""
    import dp_accounting  # pylint: disable=g-import-not-at-top
    from dpjax.accounting import event_accounting  # pylint: disable=g-import-not-at-top
    orders = [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    for t in (5, 8, 13, 64):
      acct = dp_accounting.rdp.RdpAccountant(
          orders=orders,
          neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
      acct.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(4.0, t))
      want = acct.get_epsilon(1e-5)
      eps = {h: event_accounting.epsilon(
          mf.gaussian_event(4.0, mf.sensitivity(mf.tree_aggregation(t, h))), 1e-5,
          accountant="rdp", orders=orders) for h in (False, True)}
      self.assertAlmostEqual(eps[False], want, places=9)
      self.assertLessEqual(eps[True], want + 1e-12)


class PrivatizerTest(absltest.TestCase):

  def test_one_band_privatizer_is_the_gaussian_privatizer(self):
    key = jax.random.key(7)
    upd = {"a": np.ones(3, np.float32), "b": np.full((2, 2), 2.0, np.float32)}
    ours = privatizer.correlated_privatizer(mf.toeplitz_stream([1.0], 8), 1.3, key)
    ref = privatizer.gaussian_privatizer(1.3, key)
    s1, s2 = ours.init(upd), ref.init(upd)
    for _ in range(3):
      u1, s1 = ours.update(upd, s1)
      u2, s2 = ref.update(upd, s2)
      for a, b in zip(jax.tree.leaves(u1), jax.tree.leaves(u2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  def test_engine_adds_the_correlated_noise(self):
    """With x = 0 the clipped sums are 0, so B * update_t = sigma C (C^-1 Z)_t exactly."""
    t, n, sigma, clip = 6, 24, 1.5, 0.8
    model = models.logistic_regression(3)
    cfg = helpers.small_config(num_steps=t, noise_multiplier=sigma, l2_clip_norm=clip)
    key = jax.random.key(8)
    k_noise = jax.random.split(key, 4)[2]
    for kind, stream in (("toeplitz", mf.toeplitz_stream([1.0, -0.4, 0.3], t)),
                         ("tree", mf.tree_stream(t))):
      with self.assertWarns(dpsgd.UnaccountedComponentWarning):
        out = dpsgd.train_one(key, np.zeros((n, 3), np.float32), np.zeros(n, np.float32),
                              np.ones(n, bool), cfg, model, observe_fn=lambda u: u["w"],
                              privatizer=privatizer.CorrelatedNoisePrivatizer(stream),
                              perf=dpsgd.PerformanceFlags(progress=False))
      got = np.asarray(out.observations) * cfg.expected_batch_size
      if kind == "toeplitz":                 # exactly C^-1 Z for the same Z
        z = np.stack([np.asarray(prng.standard_normal(
            prng.split(prng.fold_in(k_noise, i), 1)[0], (3,)), np.float64) for i in range(t)])
        want = sigma * clip * np.linalg.solve(stream.strategy, z)
      else:                                  # tree: its closed-form weights on its draws
        levels = mf.tree_noise_weights(t).shape[2]
        y = np.stack([np.asarray(prng.standard_normal(
            prng.split(prng.fold_in(k_noise, i), 1)[0], (levels, 3)), np.float64)
                      for i in range(t)])
        want = sigma * clip * np.einsum("tsl,slp->tp", mf.tree_noise_weights(t), y)
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

  def test_past_the_strategy_the_noise_is_nan(self):
    w = mf.stream_noise(mf.tree_stream(4), jax.random.key(9), 4, (2,))
    self.assertTrue(np.all(np.isfinite(np.asarray(w))))
    stream = mf.matrix_stream(np.eye(3))
    state = stream.init((2,))
    noise, _ = stream.next(state, jax.random.key(0), 3)
    self.assertTrue(np.all(np.isnan(np.asarray(noise))))


class CyclicTest(absltest.TestCase):
  """Fixed batches in a fixed cycle: the sampler, its sensitivity and its epsilon."""

  def test_each_kept_record_is_in_one_batch_per_epoch(self):
    n, b, e = 23, 5, 4
    s = sampling.CyclicSampler(batch_size=b, steps_per_epoch=e, sampling_prob=b / n)
    keep = np.ones(n, bool)
    keep[[3, 7]] = False
    key = jax.random.key(3)
    masks = np.stack([np.asarray(s.batch_mask(key, t, keep)) for t in range(3 * e)])
    for epoch in range(3):
      block = masks[epoch * e:(epoch + 1) * e]
      np.testing.assert_array_equal(block, masks[:e])         # the same cycle every epoch
      self.assertTrue(np.all(block.sum(axis=0) <= 1))         # at most once per epoch
    self.assertEqual(int(masks[:e].sum()), e * b - int((~keep)[  # n - E B slots idle
        np.asarray(jax.random.permutation(key, n)) < e * b].sum()))
    self.assertFalse(np.any(masks[:, ~keep]))
    # Removing a record leaves every other record's batches as they were.
    keep2 = keep.copy()
    keep2[0] = False
    masks2 = np.stack([np.asarray(s.batch_mask(key, t, keep2)) for t in range(e)])
    np.testing.assert_array_equal(masks2[:, 1:], masks[:e, 1:])
    self.assertEqual(s.participation(3 * e), (3, e))
    self.assertEqual(s.participation(2 * e + 1), (3, e))
    s2 = sampling.CyclicSampler.for_dataset(23, 5)
    self.assertEqual((s2.steps_per_epoch, s2.sampling_prob), (4, 5 / 23))
    with self.assertRaises(ValueError):
      sampling.CyclicSampler.for_dataset(4, 5)

  def test_cyclic_sensitivity_matches_its_patterns(self):
    t, e = 12, 4
    rng = np.random.default_rng(0)
    for c in (mf.banded_toeplitz([1.0, 0.6, 0.3], t), mf.tree_aggregation(t),
              np.tril(rng.normal(size=(t, t))) + 3 * np.eye(t)):
      got = mf.cyclic_sensitivity(c, e)
      # Brute force over the E patterns {j, j + E, ...} and sign choices of the g_i.
      best = 0.0
      for j in range(e):
        idx = list(range(j, t, e))
        for signs in itertools.product((1.0, -1.0), repeat=len(idx)):
          u = np.zeros(t)
          u[idx] = signs
          best = max(best, float(np.linalg.norm(c @ u)))
      self.assertGreaterEqual(got, best - 1e-12)
      self.assertLessEqual(got, mf.sensitivity(c, -(-t // e), e) + 1e-12)
      if np.all(c.T @ c >= -1e-12):                 # X >= 0: the bound is attained
        self.assertAlmostEqual(got, best, places=10)
    coefs = [1.0, 0.6, 0.3]
    self.assertAlmostEqual(mf.cyclic_sensitivity(mf.banded_toeplitz(coefs, t), e),
                           mf.toeplitz_sensitivity(coefs, t, 3, e), places=12)
    self.assertAlmostEqual(mf.cyclic_sensitivity(np.eye(t), e), math.sqrt(3), places=12)

  def test_engine_states_the_epsilon_of_correlated_noise_on_cyclic_batches(self):
    t, n, sigma = 8, 24, 2.0
    model = models.logistic_regression(3)
    cfg = helpers.small_config(num_steps=t, noise_multiplier=sigma, sampling_prob=6 / 24,
                               dataset_size=n)
    sampler = sampling.CyclicSampler.for_dataset(n, 6)
    priv = privatizer.CorrelatedNoisePrivatizer(mf.toeplitz_stream([1.0, 0.5], t))
    sens = float(np.linalg.norm(mf.banded_toeplitz([1.0, 0.5], t) @ (np.eye(t)[0] +
                                                                      np.eye(t)[4])))
    self.assertAlmostEqual(priv.sensitivity(sampler, t), sens, places=12)  # k = 2, sep = 4
    eps = priv.epsilon(sigma, t, cfg.delta, sampler)
    want = gdp.gaussian_epsilon(cfg.delta, sens / sigma)   # the Gaussian mechanism, exact
    self.assertAlmostEqual(eps, want, delta=2e-3 * want)
    self.assertGreaterEqual(eps, want - 1e-9)              # the PLD is pessimistic
    x, y = np.zeros((n, 3), np.float32), np.zeros(n, np.float32)
    kw = dict(perf=dpsgd.PerformanceFlags(progress=False))
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      dpsgd.train_one(jax.random.key(0), x, y, np.ones(n, bool), cfg, model, sampler=sampler,
                      privatizer=priv, **kw)
    kinds = [w.category for w in caught]
    self.assertIn(dpsgd.OtherAccountantWarning, kinds)
    self.assertNotIn(dpsgd.UnaccountedComponentWarning, kinds)
    msg = str(next(w.message for w in caught if w.category is dpsgd.OtherAccountantWarning))
    stated = float(re.search(r"eps = (\S+) at delta", msg).group(1))
    self.assertAlmostEqual(stated, eps, delta=1e-5 * eps)
    # Any other combination keeps the generic warning, and no statement is made.
    for other in (dict(sampler=sampler),
                  dict(privatizer=priv),
                  dict(sampler=sampling.ShuffleSampler.like_poisson(cfg.sampling_prob, n),
                       privatizer=priv)):
      with self.assertWarns(dpsgd.UnaccountedComponentWarning):
        dpsgd.train_one(jax.random.key(0), x, y, np.ones(n, bool), cfg, model, **other, **kw)
    with self.assertRaisesRegex(ValueError, "no participation bound"):
      priv.epsilon(sigma, t, cfg.delta, cfg.sampler())
    self.assertEqual(priv.epsilon(0.0, t, cfg.delta, sampler), math.inf)


if __name__ == "__main__":
  absltest.main()
