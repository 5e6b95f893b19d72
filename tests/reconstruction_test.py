"""Tests for dpjax.attacks.reconstruction (Dinur–Nissim)."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from dpjax.attacks import reconstruction as rc


def _secret(n=60, seed=0):
  return (jax.random.uniform(jax.random.key(seed), (n,)) < 0.5).astype(jnp.float32)


class NoiseTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("rademacher", "rademacher", 3.0),
      ("uniform", "uniform", 3.0),
      ("rounded_uniform", "rounded_uniform", 3.7),
      ("gaussian", "gaussian", 2.0),
      ("laplace", "laplace", 2.0),
  )
  def test_noise_std_matches_samples(self, noise, scale):
    # 40,000 draws: the sample std's relative standard error is < 1.2% for all of
    # these (kurtosis <= 6), so 5% is > 4 standard errors.
    n = 40_000
    q = jnp.zeros((n, 1), jnp.float32)
    a = np.asarray(rc.noisy_counts(jax.random.key(1), q, jnp.ones((1,)), noise, scale))
    self.assertAlmostEqual(a.std() / rc.noise_std(noise, scale), 1.0, delta=0.05)
    self.assertAlmostEqual(a.mean(), 0.0, delta=5 * rc.noise_std(noise, scale) / np.sqrt(n))

  def test_rademacher_and_rounded_values(self):
    q = jnp.zeros((1000, 1), jnp.float32)
    a = np.asarray(rc.noisy_counts(jax.random.key(1), q, jnp.ones((1,)), "rademacher", 2.0))
    np.testing.assert_array_equal(np.unique(a), [-2.0, 2.0])
    a = np.asarray(rc.noisy_counts(jax.random.key(1), q, jnp.ones((1,)), "rounded_uniform", 2.5))
    np.testing.assert_array_equal(np.unique(a), [-2.0, -1.0, 0.0, 1.0, 2.0])


class AttackTest(parameterized.TestCase):

  def test_noiseless_answers_are_inverted_exactly(self):
    s = _secret()
    q = rc.random_subset_queries(jax.random.key(2), 150, 60)
    a = rc.noisy_counts(jax.random.key(3), q, s, "gaussian", 0.0)
    np.testing.assert_array_equal(np.asarray(rc.least_squares_decode(q, a)), np.asarray(s))
    np.testing.assert_array_equal(rc.lp_decode(q, a), np.asarray(s))

  def test_counts_are_subset_sums(self):
    s = _secret()
    q = rc.random_subset_queries(jax.random.key(2), 5, 60)
    a = rc.noisy_counts(jax.random.key(3), q, s, "uniform", 0.0)
    want = [sum(float(s[i]) for i in range(60) if q[j, i] == 1) for j in range(5)]
    np.testing.assert_allclose(np.asarray(a), want)
    self.assertTrue(np.all((np.asarray(q) == 0) | (np.asarray(q) == 1)))

  @parameterized.named_parameters(("q300", 300), ("q1200", 1200))
  def test_recovery_matches_gaussian_approximation(self, m):
    # 32 trials of 60 bits; per-trial std is <= 0.065, so the mean has SE <= 0.012;
    # 0.04 allows 3 SE plus ~0.005 of approximation error.
    s = _secret()
    frac = np.asarray(rc.reconstruction_trials(jax.random.key(4), s, num_queries=m,
                                               num_trials=32, noise="gaussian", scale=6.0))
    pred = rc.predicted_recovery(m, 60, 6.0)
    self.assertAlmostEqual(frac.mean(), pred, delta=0.04)
    self.assertLess(pred, 0.99)  # the check is not vacuous: some bits are lost

  def test_small_noise_recovers_nearly_all(self):
    s = _secret(100)
    frac = rc.reconstruction_trials(jax.random.key(5), s, num_queries=400, num_trials=8,
                                    noise="rademacher", scale=1.0)
    self.assertGreater(float(frac.min()), 0.98)

  def test_fixed_dp_budget_stays_at_guessing(self):
    # Laplace(m / eps) with eps = 1: predicted recovery 0.50-0.51; 16 trials of 100
    # bits have SE ~0.0125 on the mean, so 0.56 is 4 SE above 0.51.
    s = _secret(100)
    for m in (200, 800):
      frac = rc.reconstruction_trials(jax.random.key(6), s, num_queries=m, num_trials=16,
                                      noise="laplace", scale=rc.dp_laplace_scale(1.0, m))
      self.assertLess(float(frac.mean()), 0.56)
      self.assertLess(rc.predicted_recovery(m, 100, rc.noise_std("laplace", m / 1.0)), 0.52)

  def test_vmapped_trials_equal_one_at_a_time(self):
    s = _secret(40)
    key = jax.random.key(7)
    frac = np.asarray(rc.reconstruction_trials(key, s, num_queries=120, num_trials=3,
                                               noise="gaussian", scale=3.0))
    for k, fk in zip(jax.random.split(key, 3), frac):
      kq, kn = jax.random.split(k)
      q = rc.random_subset_queries(kq, 120, 40)
      a = rc.noisy_counts(kn, q, s, "gaussian", 3.0)
      self.assertAlmostEqual(float(jnp.mean(rc.least_squares_decode(q, a) == s)), float(fk),
                             places=6)

  def test_lp_decoding_works_with_gaussian_noise(self):
    s = _secret(40)
    q = rc.random_subset_queries(jax.random.key(8), 400, 40)
    a = rc.noisy_counts(jax.random.key(9), q, s, "gaussian", 1.0)
    self.assertGreater(float(np.mean(rc.lp_decode(q, a) == np.asarray(s))), 0.97)


class HelpersTest(parameterized.TestCase):

  def test_dp_scale_and_majority(self):
    self.assertEqual(rc.dp_laplace_scale(0.5, 100), 200.0)
    self.assertAlmostEqual(rc.majority_baseline(jnp.array([1.0, 1.0, 0.0, 1.0])), 0.75)
    self.assertAlmostEqual(rc.majority_baseline(jnp.array([0.0, 0.0, 0.0, 1.0])), 0.75)

  @parameterized.named_parameters(
      ("bad_noise", lambda: rc.noise_std("cauchy", 1.0), "noise"),
      ("neg_scale", lambda: rc.noise_std("uniform", -1.0), "scale"),
      ("eps", lambda: rc.dp_laplace_scale(0.0, 10), "total_epsilon"),
      ("queries", lambda: rc.random_subset_queries(jax.random.key(0), 0, 5), "num_queries"),
      ("secret", lambda: rc.majority_baseline(jnp.array([0.0, 2.0])), "secret_N"),
      ("trials", lambda: rc.reconstruction_trials(jax.random.key(0), _secret(), num_queries=100,
                                                   num_trials=0, noise="uniform", scale=1.0),
       "num_trials"),
      ("too_few_queries", lambda: rc.reconstruction_trials(
          jax.random.key(0), _secret(), num_queries=59, num_trials=1, noise="uniform",
          scale=1.0), "num_queries"),
      ("decode_shape", lambda: rc.least_squares_decode(jnp.ones((3, 4)), jnp.ones((3,))),
       "queries_QxN"),
      ("shape", lambda: rc.noisy_counts(jax.random.key(0), jnp.ones((3, 4)), jnp.ones((5,)),
                                        "uniform", 1.0), "queries_QxN"),
      ("pred", lambda: rc.predicted_recovery(50, 60, 1.0), "num_queries"),
  )
  def test_bad_inputs_raise(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


if __name__ == "__main__":
  absltest.main()
