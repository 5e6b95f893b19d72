"""Tests of the amplified matrix-factorization accountant (`matrix_factorization.amplified_event`)
and its sampler (`sampling.CyclicPoissonSampler`).

The accountant is checked against an independent brute force: for one record with a unit
gradient at each step, the released C x + sigma Z is the mixture over every participation
pattern S of its residue class (weight p^|S| (1 - p)^(k - |S|)) of N(C 1_S, sigma^2 I),
against N(0, sigma^2 I). Both are projected onto the span of the record's columns (the
orthogonal part is identical under both, so it cancels exactly; the basis comes from a QR
factorization and assumes nothing about the columns) and delta(eps) is integrated on a
grid (midpoint rule). The exact eps of the mechanism is at least this fixed-gradient one,
so "never below exact" means delta_brute(eps_accountant) <= delta.
"""

import itertools
import math
import re
import warnings

import jax
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from scipy import special

from dpjax import accounting
from dpjax import dpsgd
from dpjax import matrix_factorization as mf
from dpjax import models
from dpjax import privatizer
from dpjax import sampling
from dpjax.accounting import event_accounting as ea
from dpjax.accounting import events as ev
from tests import helpers

_H = 1e-3          # loss grid of the accountant in these tests (an upper bound at any h)
_QUAD_RTOL = 1e-3  # the midpoint rule's error on delta at the grid steps below (measured
                   # by halving the step: below 1e-4 relative)


def _brute_delta(c, sigma, p, steps, eps, h):
  """(delta_remove, delta_add) at eps of sum_S w_S N(C 1_S, sigma^2 I) vs N(0, sigma^2 I),
  S over the subsets of `steps` (each step in S independently with probability p)."""
  steps = list(steps)
  k = len(steps)
  _, r = np.linalg.qr(c[:, steps])
  pats = np.array(list(itertools.product((0.0, 1.0), repeat=k)))
  mus = pats @ r.T / sigma                                       # [2^k, k]
  n_in = pats.sum(axis=1)
  with np.errstate(divide="ignore", invalid="ignore"):
    logw = np.where(n_in == k, 0.0, (k - n_in) * np.log1p(-p)) + n_in * math.log(p)
  lo, hi = mus.min(axis=0) - 8.5, mus.max(axis=0) + 8.5
  axes = [np.arange(a, b + h, h) for a, b in zip(lo, hi)]
  grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, k)
  norm = k / 2 * math.log(2 * math.pi)
  lq = -0.5 * np.sum(grid ** 2, axis=1) - norm
  lp = special.logsumexp(logw - 0.5 * np.sum((grid[:, None] - mus) ** 2, -1), axis=1) - norm
  rem = np.sum(np.maximum(np.exp(lp) - np.exp(eps + lq), 0.0)) * h ** k
  add = np.sum(np.maximum(np.exp(lq) - np.exp(eps + lp), 0.0)) * h ** k
  return rem, add


def _worst_brute(c, sigma, p, s, eps, h):
  t = c.shape[0]
  return max(max(_brute_delta(c, sigma, p, range(j, t, s), eps, h)) for j in range(s))


class AmplifiedAccountantTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # (T, s, coefs, p, sigma, quadrature step); every residue class has k <= 2 steps.
      ("two_bands_k2", 4, 2, (1.0, 0.5), 0.3, 1.0, 0.03),
      ("negative_band_truncated", 3, 2, (1.0, -0.4), 0.4, 1.0, 0.03),
      ("three_bands_k2", 5, 3, (1.0, 0.5, 0.3), 0.6, 1.0, 0.03),
      ("dpsgd_full_batch", 2, 1, (1.0,), 1.0, 2.0, 0.03),
      ("one_step_each", 3, 3, (1.0, 0.7, 0.2), 0.2, 0.7, 0.002),
  )
  def test_never_below_the_exact_epsilon_by_enumeration(self, t, s, coefs, p, sigma, h):
    c = mf.banded_toeplitz(coefs, t)
    delta = 1e-3
    eps = mf.amplified_epsilon(c, sigma, p, s, delta, value_discretization=_H)
    self.assertLessEqual(_worst_brute(c, sigma, p, s, eps, h), delta * (1 + _QUAD_RTOL))
    # ... and tight: 0.05 below it the worst residue class already exceeds delta.
    self.assertGreater(_worst_brute(c, sigma, p, s, eps - 0.05, h), delta)

  def test_overlapping_bands_are_refused_and_amplifying_them_would_be_wrong(self):
    c = mf.banded_toeplitz([1.0, 0.9], 2)   # 2 bands, cycle 1: both steps move row 1
    with self.assertRaisesRegex(ValueError, "2 bands but cycle_length = 1"):
      mf.amplified_event(c, 1.0, 0.5, 1)
    # The formula of the banded case, applied anyway, is below the exact eps:
    naive = ev.SelfComposedEvent(ev.PoissonSampledEvent(
        0.5, ev.GaussianEvent(1.0 / np.linalg.norm(c[:, 0]))), 2)
    eps = ea.epsilon(naive, 1e-3)
    self.assertGreater(max(_brute_delta(c, 1.0, 0.5, [0, 1], eps, 0.03)), 2e-3)

  @parameterized.parameters((1, 0.05, 1.0, 200), (4, 0.2, 2.0, 100))
  def test_identity_strategy_is_poisson_subsampled_gaussian(self, s, p, sigma, t):
    """C = I (b = 1): ceil(T / s) Poisson-subsampled Gaussians (s = 1: DP-SGD)."""
    eps = mf.amplified_epsilon(np.eye(t), sigma, p, s, 1e-5)
    k = -(-t // s)
    ours = accounting.dpsgd_epsilon(sigma, p, k, 1e-5, accountant="pld")
    self.assertAlmostEqual(eps, ours, delta=1e-3 * ours)
    try:
      import dp_accounting  # pylint: disable=g-import-not-at-top
    except ImportError:
      return
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(p, dp_accounting.GaussianDpEvent(sigma)), k)
    ref = acc.get_epsilon(1e-5)
    self.assertAlmostEqual(eps, ref, delta=1e-3 * ref)

  def test_matches_dp_accountings_mixture_of_gaussians(self):
    c = mf.banded_toeplitz(mf.sqrt_toeplitz_coefs(3), 12)
    event = mf.amplified_event(c, 1.5, 0.3, 3)
    self.assertIsInstance(event, ev.SelfComposedEvent)
    self.assertEqual(event.count, 4)
    self.assertAlmostEqual(event.event.sensitivities[1],
                           np.linalg.norm(mf.sqrt_toeplitz_coefs(3)), places=12)
    eps = ea.epsilon(event, 1e-5, value_discretization=_H)
    try:
      import dp_accounting  # pylint: disable=g-import-not-at-top
    except ImportError:
      return
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=_H)
    acc.compose(dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
        1.5, list(event.event.sensitivities), list(event.event.probs)), 4)
    ref = acc.get_epsilon(1e-5)
    self.assertAlmostEqual(eps, ref, delta=2e-3 * ref)

  def test_monotone_in_the_sampling_probability_and_below_unamplified(self):
    c = mf.banded_toeplitz([1.0, 0.6, 0.3], 30)
    eps = [mf.amplified_epsilon(c, 2.0, p, 3, 1e-5, value_discretization=_H)
           for p in (0.01, 0.05, 0.2, 0.5, 0.9, 1.0)]
    self.assertTrue(np.all(np.diff(eps) > 0), eps)
    unamp = mf.epsilon(2.0, mf.cyclic_sensitivity(c, 3), 1e-5)
    self.assertLess(eps[-2], unamp)
    # At p = 1 the amplified bound pays max column norm per participation: never tighter.
    self.assertGreaterEqual(eps[-1], unamp * (1 - 1e-3))

  def test_truncated_columns_are_composed_at_their_own_norm(self):
    c = mf.banded_toeplitz([1.0, 1.0], 3)   # column 2 has norm 1, columns 0, 1 sqrt(2)
    event = mf.amplified_event(c, 1.0, 0.5, 2)
    parts = sorted((e.event.sensitivities[1], e.count) for e in event.events)
    self.assertEqual(len(parts), 2)
    self.assertAlmostEqual(parts[0][0], 1.0, places=12)
    self.assertAlmostEqual(parts[1][0], math.sqrt(2), places=12)
    self.assertEqual([n for _, n in parts], [1, 1])
    self.assertEqual(mf.num_bands(c), 2)
    self.assertEqual(mf.num_bands(np.eye(4)), 1)


class ToeplitzStreamLayoutTest(parameterized.TestCase):

  @parameterized.parameters(((7,),), ((4100,),))   # the fused sum and the dot path
  def test_stream_is_the_dense_inverse_on_the_draws(self, shape):
    from dpjax import prng  # pylint: disable=g-import-not-at-top
    coefs, t = [1.0, 0.5, 0.25], 7
    key = jax.random.key(5)
    got = np.asarray(mf.stream_noise(mf.toeplitz_stream(coefs, t), key, t, shape), np.float64)
    z = np.stack([np.asarray(prng.standard_normal(prng.fold_in(key, i), shape), np.float64)
                  for i in range(t)])
    want = np.linalg.solve(mf.banded_toeplitz(coefs, t), z.reshape(t, -1)).reshape(got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class CyclicPoissonSamplerTest(absltest.TestCase):

  def test_records_take_part_only_in_their_bin_at_rate_p(self):
    n, s, p, t = 600, 3, 0.4, 60
    sampler = sampling.CyclicPoissonSampler(bin_prob=p, cycle_length=s)
    self.assertAlmostEqual(sampler.sampling_prob, p / s)
    key = jax.random.key(3)
    keep = np.ones(n, bool)
    keep[::7] = False
    masks = np.stack([np.asarray(sampler.batch_mask(key, i, keep)) for i in range(t)])
    self.assertFalse(np.any(masks[:, ~keep]))
    steps_of = [set(np.flatnonzero(masks[:, i]) % s) for i in range(n)]
    self.assertTrue(all(len(st) <= 1 for st in steps_of))   # one residue class per record
    bins = np.array([next(iter(st)) if st else -1 for st in steps_of])
    np.testing.assert_array_equal(bins[bins >= 0], (np.arange(n) % s)[bins >= 0])
    rate = masks[:, keep].sum() / (keep.sum() * t / s)
    self.assertAlmostEqual(rate, p, delta=4 * math.sqrt(p * (1 - p) / (keep.sum() * t / s)))
    self.assertEqual(sampler.participation(10), (4, 3))
    one = sampling.CyclicPoissonSampler(bin_prob=p, cycle_length=1)
    np.testing.assert_array_equal(one.batch_mask(key, 5, keep),
                                  sampling.PoissonSampler(p).batch_mask(key, 5, keep))
    with self.assertRaisesRegex(ValueError, "bin_prob"):
      sampling.CyclicPoissonSampler(bin_prob=0.0, cycle_length=2)
    with self.assertRaisesRegex((ValueError, TypeError), "cycle_length"):
      sampling.CyclicPoissonSampler(bin_prob=0.5, cycle_length=0)

  def test_engine_states_the_amplified_epsilon(self):
    t, n, s, p, sigma = 8, 24, 2, 0.5, 2.0
    sampler = sampling.CyclicPoissonSampler(bin_prob=p, cycle_length=s)
    cfg = helpers.small_config(num_steps=t, noise_multiplier=sigma,
                               sampling_prob=sampler.sampling_prob, dataset_size=n)
    priv = privatizer.CorrelatedNoisePrivatizer(mf.toeplitz_stream([1.0, 0.5], t))
    c = mf.banded_toeplitz([1.0, 0.5], t)
    eps = priv.epsilon(sigma, t, cfg.delta, sampler)
    amp = mf.amplified_epsilon(c, sigma, p, s, cfg.delta)
    unamp = mf.epsilon(sigma, mf.cyclic_sensitivity(c, s), cfg.delta)
    self.assertEqual(eps, min(amp, unamp))
    self.assertLess(amp, unamp)
    self.assertAlmostEqual(priv.sensitivity(sampler, t), mf.cyclic_sensitivity(c, s))
    model = models.logistic_regression(3)
    x, y = np.zeros((n, 3), np.float32), np.zeros(n, np.float32)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      dpsgd.train_one(jax.random.key(0), x, y, np.ones(n, bool), cfg, model, sampler=sampler,
                      privatizer=priv, perf=dpsgd.PerformanceFlags(progress=False))
    kinds = [w.category for w in caught]
    self.assertIn(dpsgd.OtherAccountantWarning, kinds)
    self.assertNotIn(dpsgd.UnaccountedComponentWarning, kinds)
    msg = str(next(w.message for w in caught if w.category is dpsgd.OtherAccountantWarning))
    self.assertIn("amplified", msg)
    stated = float(re.search(r"eps = (\S+) at delta", msg).group(1))
    self.assertAlmostEqual(stated, eps, delta=1e-5 * eps)
    # A strategy with more bands than the cycle gets the unamplified eps only.
    wide = privatizer.CorrelatedNoisePrivatizer(mf.toeplitz_stream([1.0, 0.5, 0.2], t))
    self.assertEqual(wide.epsilon(sigma, t, cfg.delta, sampler),
                     mf.epsilon(sigma, wide.sensitivity(sampler, t), cfg.delta))


if __name__ == "__main__":
  absltest.main()
