"""Tests for the truncating sampler: sampling.truncate_mask, TruncatedPoissonSampler,
selection_tv_bound, and check_sampler's truncation rules."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from scipy import stats

from dpjax import prng
from dpjax import sampling

# A fixed batch of c = 8 sampled records among N = 12, cut to B = 3.
_MASK = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1], bool)
_B = 3
_R = 10_000   # Monte Carlo draws (fixed keys: the test is deterministic)


def _draws(fn, mask=_MASK, b=_B, r=_R, seed=0):
  keys = jax.random.split(jax.random.key(seed), r)
  return np.asarray(jax.jit(jax.vmap(lambda k: fn(k, jnp.asarray(mask), b)))(keys))


@functools.lru_cache(maxsize=1)
def _uniform_draws():
  """R truncations of _MASK to _B, one compiled program shared by the tests."""
  return _draws(sampling.truncate_mask)


def _index_order_cut(key, mask, b):
  """The wrong truncation (the first b sampled records in index order): a power check."""
  del key
  return mask & (jnp.cumsum(mask) <= b)


def _subset_chi2_pvalue(kept):
  """Chi-square p-value of the kept subsets against the uniform law on C(c, B) subsets."""
  idx = np.flatnonzero(_MASK)
  subsets = {s: i for i, s in enumerate(itertools.combinations(idx, _B))}
  counts = np.zeros(len(subsets))
  for row in kept:
    counts[subsets[tuple(np.flatnonzero(row))]] += 1
  return stats.chisquare(counts).pvalue


class TruncateMaskTest(absltest.TestCase):

  def test_exactly_b_sampled_records_when_more_are_drawn(self):
    kept = _uniform_draws()
    np.testing.assert_array_equal(kept.sum(axis=1), np.full(_R, _B))
    self.assertFalse(np.any(kept & ~_MASK))          # a subset of the batch

  def test_each_sampled_record_kept_with_probability_b_over_count(self):
    # Binomial(R, 3/8): sd 0.0048; 5 sd per record (8 records: false alarm < 1e-5).
    rate = _uniform_draws().mean(axis=0)
    c = _MASK.sum()
    tol = 5 * math.sqrt(_B / c * (1 - _B / c) / _R)
    np.testing.assert_allclose(rate[_MASK], _B / c, atol=tol)
    np.testing.assert_array_equal(rate[~_MASK], 0.0)

  def test_kept_subset_is_uniform_and_the_test_has_power(self):
    # All C(8, 3) = 56 subsets equally likely: chi-square at R = 10,000 (179 expected each).
    self.assertGreater(_subset_chi2_pvalue(_uniform_draws()), 1e-3)
    # The same test rejects truncation in index order (one subset always) ...
    self.assertLess(_subset_chi2_pvalue(_draws(_index_order_cut, r=2000)), 1e-12)
    # ... and a biased ranking: 32-bit keys of which only 2 bits vary (ties broken by index).
    def coarse(key, mask, b):
      u = jax.random.randint(key, mask.shape, 0, 4)
      order = jnp.lexsort((jnp.arange(mask.shape[0]), u, ~mask))
      return jnp.zeros(mask.shape, bool).at[order[:b]].set(True) & mask
    self.assertLess(_subset_chi2_pvalue(_draws(coarse, r=5000)), 1e-6)

  def test_two_passes_equal_the_full_64_bit_ranking(self):
    n, b = 300, 20

    def full_sort(key, mask):   # the reference: every record ranked by its 64-bit key
      words = prng.random_bits(key, 2 * n)
      _, _, _, order = jax.lax.sort(((~mask).astype(jnp.uint32), words[:n], words[n:],
                                     jnp.arange(n)), num_keys=3)
      return jnp.zeros((n,), bool).at[order[:b]].set(True) & mask

    keys = jax.random.split(jax.random.key(4), 100)
    masks = jax.random.bernoulli(jax.random.key(5), 0.3, (100, n))
    got, want = jax.jit(jax.vmap(lambda k, m: (sampling.truncate_mask(k, m, b),
                                               full_sort(k, m))))(keys, masks)
    np.testing.assert_array_equal(got, want)

  def test_batches_within_the_cap_are_returned_bit_for_bit(self):
    key = jax.random.key(3)
    masks = jnp.stack([jnp.asarray(_MASK), jnp.zeros(12, bool), jnp.arange(12) < 8])
    # count <= B = 8 < N: the ranking runs, the mask is returned (one compiled program)
    got = jax.jit(jax.vmap(lambda m: sampling.truncate_mask(key, m, 8)))(masks)
    np.testing.assert_array_equal(got, masks)
    np.testing.assert_array_equal(sampling.truncate_mask(key, _MASK, 12), _MASK)   # B >= N

  def test_validation_names_the_argument(self):
    key = jax.random.key(0)
    for bad in (0, -1, 2.5, "3", 2 ** 31):
      with self.assertRaisesRegex(ValueError, "max_batch_size"):
        sampling.truncate_mask(key, _MASK, bad)
    with self.assertRaisesRegex(ValueError, "mask_N"):
      sampling.truncate_mask(key, np.ones((2, 3), bool), 1)


class TruncatedPoissonSamplerTest(absltest.TestCase):

  def test_poisson_bits_when_no_step_overflows_and_the_cap_otherwise(self):
    q, n, b = 0.3, 40, 14
    keep = jnp.arange(n) < 37
    key = jax.random.key(5)
    trunc = sampling.TruncatedPoissonSampler(q, b)
    plain = sampling.PoissonSampler(q)
    masks = jax.jit(jax.vmap(lambda t: (trunc.batch_mask(key, t, keep),
                                        plain.batch_mask(key, t, keep))))(jnp.arange(200))
    got, want = (np.asarray(m) for m in masks)
    counts = want.sum(axis=1)
    self.assertTrue(np.any(counts > b) and np.any(counts <= b))   # both kinds of step
    small = counts <= b
    np.testing.assert_array_equal(got[small], want[small])
    np.testing.assert_array_equal(got.sum(axis=1), np.minimum(counts, b))
    self.assertFalse(np.any(got & ~want))

  def test_selection_stream_is_separate_from_the_poisson_bits(self):
    @jax.jit
    def both(key):
      keep = jnp.ones((30,), bool)
      sel = prng.fold_in(prng.fold_in(key, sampling._SELECT_STREAM), 4)  # pylint: disable=protected-access
      m = sampling.PoissonSampler(0.9).batch_mask(key, 4, keep)
      return (sampling.truncate_mask(sel, m, 5),
              sampling.TruncatedPoissonSampler(0.9, 5).batch_mask(key, 4, keep))
    want, got = both(jax.random.key(2))
    np.testing.assert_array_equal(got, want)

  def test_declares_and_validates(self):
    s = sampling.TruncatedPoissonSampler(0.25, 7.0)
    self.assertEqual((s.sampling_prob, s.max_batch_size, s.accounted, s.privacy_unit),
                     (0.25, 7, True, "example"))
    for bad in (0, -3, 1.5, "7"):
      with self.assertRaisesRegex(ValueError, "max_batch_size"):
        sampling.TruncatedPoissonSampler(0.25, bad)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      sampling.TruncatedPoissonSampler(0.0, 3)


class SelectionTvBoundTest(absltest.TestCase):

  def test_closed_form(self):
    # T (C(n + 1, 2) q^2 2^-64 + C(n + 1, 18) q^18 2^-527); the second term is ~1e-143 here
    got = sampling.selection_tv_bound(1000, 0.1, 50)
    self.assertAlmostEqual(got / (50 * 1001 * 1000 / 2 * 0.01 * 2.0 ** -64), 1.0, places=10)
    self.assertAlmostEqual(sampling.selection_tv_bound(17, 1.0, 1) / (18 * 17 / 2 * 2.0 ** -64
                                                                   + 2.0 ** -527), 1.0)
    self.assertEqual(sampling.selection_tv_bound(2 ** 53, 1.0, 2 ** 53), 1.0)
    with self.assertRaisesRegex(ValueError, "num_steps"):
      sampling.selection_tv_bound(10, 0.1, 0)


class CheckSamplerTruncationTest(absltest.TestCase):

  def test_truncation_must_match_on_both_sides(self):
    trunc = sampling.TruncatedPoissonSampler(0.3, 5)
    sampling.check_sampler(trunc, 0.3, 5)
    with self.assertRaisesRegex(ValueError, "max_batch_size is None"):
      sampling.check_sampler(trunc, 0.3)
    with self.assertRaisesRegex(ValueError, "TruncatedPoissonSampler"):
      sampling.check_sampler(trunc, 0.3, 6)
    for other in (sampling.PoissonSampler(0.3),
                  sampling.ShuffleSampler(batch_size=3, steps_per_epoch=2, sampling_prob=0.3),
                  sampling.CyclicPoissonSampler(0.6, 2)):
      with self.assertRaisesRegex(ValueError, "TruncatedPoissonSampler"):
        sampling.check_sampler(other, 0.3, 5)
    with self.assertRaisesRegex(ValueError, "max_batch_size"):
      sampling.check_sampler(trunc, 0.3, 0)


if __name__ == "__main__":
  absltest.main()
