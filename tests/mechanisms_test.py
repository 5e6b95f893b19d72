"""Tests for dpjax.mechanisms: privacy ratios against e^eps, calibration, unbiasedness.

Monte Carlo tolerances are stated next to each check; all keys are fixed, so the
tests are deterministic.
"""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats

from dpjax import mechanisms as mech


def _balle_wang_delta(eps, sigma, sens=1.0):
  """delta(eps) of a Gaussian mechanism, written out independently of dpjax.gdp."""
  a = sens / (2 * sigma) - eps * sigma / sens
  b = -sens / (2 * sigma) - eps * sigma / sens
  return stats.norm.cdf(a) - math.exp(eps) * stats.norm.cdf(b)


class RandomizedResponseTest(parameterized.TestCase):

  @parameterized.parameters(0.1, 0.5, 1.0, 2.0, 8.0)
  def test_worst_case_ratio_is_exactly_e_eps(self, eps):
    # Output space {0, 1}: the exact likelihood ratio of each output between the
    # neighbouring inputs bit=1 and bit=0 is p/(1-p) or (1-p)/p.
    p = mech.rr_truth_prob(eps)
    ratios = [p / (1 - p), (1 - p) / p]
    self.assertAlmostEqual(max(ratios), math.exp(eps), delta=1e-12 * math.exp(eps))
    self.assertAlmostEqual(min(ratios), math.exp(-eps), delta=1e-12)

  @parameterized.parameters(0.5, 2.0)
  def test_sampler_uses_truth_prob(self, eps):
    # 400k reports per input bit: SE of each frequency < 8e-4; tolerance 5 SE.
    n = 400_000
    k0, k1 = jax.random.split(jax.random.key(1))
    f1 = float(jnp.mean(mech.randomized_response(k1, jnp.ones(n, jnp.int32), eps)))
    f0 = float(jnp.mean(mech.randomized_response(k0, jnp.zeros(n, jnp.int32), eps)))
    p = mech.rr_truth_prob(eps)
    se = math.sqrt(p * (1 - p) / n)
    self.assertAlmostEqual(f1, p, delta=5 * se)
    self.assertAlmostEqual(f0, 1 - p, delta=5 * se)
    # Empirical worst-case ratio of P[report = 1] is e^eps within MC error.
    self.assertAlmostEqual(math.log(f1 / f0), eps, delta=10 * se / (1 - p))

  @parameterized.product(rate=(0.3, 0.548, 0.9), eps=(0.1, 1.0, 3.0),
                         population=("fixed", "sampled"))
  def test_rate_estimate_unbiased_and_std(self, rate, eps, population):
    # K = 4000 repetitions of n = 1000 people: the mean of pi_hat has SE sd/sqrt(K)
    # (tolerance 4 SE); the sample sd is within 6% of the exact sd (its relative SE
    # is about 1/sqrt(2K) = 1.1%).
    n, k = 1000, 4000
    kb, kr = jax.random.split(jax.random.key(2))
    if population == "fixed":   # the same people, fresh coins
      bits = jnp.broadcast_to((jnp.arange(n) < round(rate * n)).astype(jnp.int32), (k, n))
      sd = mech.rr_estimate_std(n, eps)
    else:                       # a fresh i.i.d. population each time
      bits = jax.random.bernoulli(kb, rate, (k, n)).astype(jnp.int32)
      sd = mech.rr_estimate_std(n, eps, rate=rate)
    est = np.asarray(mech.rr_estimate_rate(mech.randomized_response(kr, bits, eps), eps),
                     np.float64)
    self.assertEqual(est.shape, (k,))
    self.assertLess(abs(est.mean() - rate), 4 * sd / math.sqrt(k))
    self.assertAlmostEqual(est.std() / sd, 1.0, delta=0.06)

  def test_posterior_lecture_figures_and_bayes(self):
    # Pure math the lecture printed: prior 0.548 -> 0.767 (eps=1), 0.572 (eps=0.1).
    # At exactly 0.548 the eps=0.1 posterior is 0.5726; the lecture's 0.572 comes from
    # its unrounded rate (0.5475 gives 0.5721 and still 0.767), hence 1e-3.
    self.assertAlmostEqual(mech.rr_posterior(0.548, 1.0), 0.767, delta=1e-3)
    self.assertAlmostEqual(mech.rr_posterior(0.548, 0.1), 0.572, delta=1e-3)
    self.assertAlmostEqual(mech.rr_posterior(0.5475, 0.1), 0.572, delta=5e-4)
    self.assertAlmostEqual(mech.rr_posterior(0.5475, 1.0), 0.767, delta=5e-4)
    for eps in (0.1, 1.0, 4.0):
      post1 = mech.rr_posterior(0.3, eps, report=1)
      post0 = mech.rr_posterior(0.3, eps, report=0)
      odds = lambda q: q / (1 - q)
      self.assertAlmostEqual(odds(post1) / odds(0.3), math.exp(eps), places=9)
      self.assertAlmostEqual(odds(post0) / odds(0.3), math.exp(-eps), places=9)
    # Monte Carlo: among 200k people with prior 0.3 reporting 1, the share of true
    # ones matches the posterior (SE < 2e-3; tolerance 5 SE).
    kb, kr = jax.random.split(jax.random.key(3))
    bits = jax.random.bernoulli(kb, 0.3, (200_000,)).astype(jnp.int32)
    rep = np.asarray(mech.randomized_response(kr, bits, 1.0))
    share = np.asarray(bits)[rep == 1].mean()
    self.assertAlmostEqual(share, mech.rr_posterior(0.3, 1.0), delta=5 * 0.5 / math.sqrt((rep == 1).sum()))
    np.testing.assert_allclose(mech.rr_posterior(np.array([0.0, 1.0]), 1.0), [0.0, 1.0])


class LaplaceTest(parameterized.TestCase):

  @parameterized.parameters((0.1, 1.0), (1.0, 1.0), (2.0, 5.0))
  def test_density_ratio_bounded_by_e_eps(self, eps, sens):
    # Worst-case density ratio between outputs centred at 0 and at Delta_1.
    b = mech.laplace_scale(eps, sens)
    z = np.linspace(-20 * b, 20 * b, 40001)
    log_ratio = stats.laplace.logpdf(z, 0, b) - stats.laplace.logpdf(z, sens, b)
    self.assertAlmostEqual(np.max(np.abs(log_ratio)), eps, places=9)

  def test_ks_accepts_right_scale_and_rejects_wrong(self):
    # 20k draws: the KS test at alpha = 1e-3 accepts the true scale and rejects
    # 2/3 and 3/2 of it (power is essentially 1 at this n).
    # The release is on a grid gamma <= b / 1400 (discretisation moves the CDF by
    # < 2e-4, far below the KS critical value 0.014) with 0.1% more noise.
    eps, sens = 0.7, 2.0
    b = sens / eps
    keys = jax.random.split(jax.random.key(4), 20_000)
    x = np.asarray(jax.vmap(lambda k: mech.laplace_mechanism(k, 0.0, eps, sens))(keys),
                   np.float64)
    self.assertGreater(stats.kstest(x, "laplace", args=(0, b)).pvalue, 1e-3)
    self.assertLess(stats.kstest(x, "laplace", args=(0, 2 * b / 3)).pvalue, 1e-3)
    self.assertLess(stats.kstest(x, "laplace", args=(0, 1.5 * b)).pvalue, 1e-3)

  def test_noise_centred_on_value_and_vmap_equals_loop(self):
    keys = jax.random.split(jax.random.key(5), 3)
    v = jnp.array([1.0, 2.0, 3.0])
    batched = jax.vmap(lambda k: mech.laplace_mechanism(k, v, 1.0))(keys)
    looped = jnp.stack([mech.laplace_mechanism(k, v, 1.0) for k in keys])
    np.testing.assert_allclose(batched, looped, rtol=1e-6)
    jitted = jax.jit(lambda k: mech.laplace_mechanism(k, v, 1.0))(keys[0])
    np.testing.assert_allclose(jitted, looped[0], rtol=1e-6)

  def test_rounded_count_error_vs_monte_carlo(self):
    ex = mech.rounded_count_error(6.0, 0.5)
    self.assertAlmostEqual(ex["p_negative"], 0.5 * math.exp(-3), places=12)
    self.assertAlmostEqual(ex["rmse_raw"], 2 * math.sqrt(2), places=12)
    self.assertAlmostEqual(ex["mass"], 1.0, places=9)
    # 400k draws: SE of the MSE is ~ sd(err^2)/sqrt(K) < 0.05 -> RMSE within 0.02.
    rel = np.asarray(jax.vmap(lambda k: mech.laplace_mechanism(k, 6.0, 0.5))(
        jax.random.split(jax.random.key(3), 400_000)), np.float64)
    post = np.maximum(np.round(rel), 0.0)
    self.assertAlmostEqual(np.sqrt(np.mean((post - 6) ** 2)), ex["rmse_post"], delta=0.02)
    self.assertAlmostEqual(np.mean(rel < 0), ex["p_negative"], delta=5 * math.sqrt(0.025 / 4e5))
    self.assertLess(ex["rmse_post"], ex["rmse_raw"])
    self.assertGreater(ex["bias_post"], 0)

  def test_rounded_count_error_at_a_huge_count_is_named(self):
    # (k - c)^2 overflows past c ~ 1.3e154: 0 * inf was a NaN rmse_post
    for c in (1e200, 1e300):
      with self.assertRaisesRegex((OverflowError, ValueError), "true_count"):
        mech.rounded_count_error(c, 0.5)

  def test_rounded_count_error_refuses_a_truncated_support(self):
    # a count (or scale) far beyond max_k: the sums over k <= max_k hold almost no mass,
    # so rmse_post would read 0; named instead. Raising max_k answers.
    for c, eps in ((1e150, 0.5), (5_000.0, 0.5), (10.0, 1e-4)):
      with self.assertRaisesRegex(ValueError, "max_k"):
        mech.rounded_count_error(c, eps)
    ok = mech.rounded_count_error(5_000.0, 0.5, max_k=6_000)
    self.assertAlmostEqual(ok["rmse_post"], math.sqrt(8.0 + 1.0 / 12.0), delta=0.05)


class GaussianTest(parameterized.TestCase):

  @parameterized.parameters(
      (0.1, 1e-5, 1.0), (0.5, 1e-5, 1.0), (0.9, 1e-6, 3.0), (1.0, 1e-5, 1.0),
      (4.0, 1e-5, 1.0), (8.0, 1e-5, 2.0), (20.0, 1e-9, 1.0))
  def test_analytic_sigma_balle_wang(self, eps, delta, sens):
    sigma = mech.gaussian_sigma(eps, delta, sens)
    self.assertLess(abs(_balle_wang_delta(eps, sigma, sens) - delta), 1e-9)
    # Exact: a slightly smaller sigma already violates delta.
    self.assertGreater(_balle_wang_delta(eps, sigma * (1 - 1e-4), sens), delta)
    # Oracle: dp_accounting's analytic Gaussian (sensitivity 1).
    self.assertAlmostEqual(sigma / sens, dp_accounting.get_sigma_gaussian(eps, delta),
                           delta=1e-7 * sigma)
    if eps < 1:
      classic = mech.gaussian_sigma(eps, delta, sens, calibration="classic")
      self.assertAlmostEqual(classic, sens * math.sqrt(2 * math.log(1.25 / delta)) / eps,
                             places=9)
      self.assertLess(sigma, classic)

  @parameterized.parameters(1.0, 2.0, 5.0)
  def test_classic_refuses_eps_at_least_one(self, eps):
    with self.assertRaisesRegex(ValueError, "epsilon < 1"):
      mech.gaussian_sigma(eps, 1e-5, calibration="classic")

  def test_lecture_error_ratio(self):
    # Lecture §3.3: a count at eps = 1, delta = 1e-5: Gaussian E|noise| 2.98 vs Laplace 1.00.
    mae_gauss = mech.gaussian_sigma(1.0, 1e-5) * math.sqrt(2 / math.pi)
    self.assertAlmostEqual(mae_gauss, 2.98, delta=5e-3)
    self.assertAlmostEqual(mech.laplace_scale(1.0), 1.0)

  @parameterized.parameters("analytic", "classic")
  def test_ks_accepts_right_sigma_and_rejects_wrong(self, calibration):
    eps, delta = 0.5, 1e-5
    sigma = mech.gaussian_sigma(eps, delta, calibration=calibration)
    keys = jax.random.split(jax.random.key(6), 20_000)
    x = np.asarray(jax.vmap(lambda k: mech.gaussian_mechanism(
        k, 0.0, eps, delta, calibration=calibration))(keys), np.float64)
    self.assertGreater(stats.kstest(x, "norm", args=(0, sigma)).pvalue, 1e-3)
    self.assertLess(stats.kstest(x, "norm", args=(0, 2 * sigma / 3)).pvalue, 1e-3)
    self.assertLess(stats.kstest(x, "norm", args=(0, 1.5 * sigma)).pvalue, 1e-3)


class DefendedMechanismTest(parameterized.TestCase):
  """The grid mechanisms: exact multiples of gamma, the same support for neighbours."""

  def test_laplace_outputs_are_multiples_of_gamma_and_possible_under_neighbour(self):
    # Mironov's test asks, for each observed output, "is it possible under the
    # neighbouring input?". Defended: every output is gamma (k + X), |X| <= K, and
    # the neighbour's k' is within Delta / gamma + 1 of k, so every output within
    # K - (Delta / gamma + 1) grid units of k (all but mass < 2^-100) is possible
    # under the neighbour too. 50k draws: all of them pass.
    eps, sens = 1.0, 1.0
    v, v_nb = 100.3, 101.3                       # a count-like query and its neighbour
    gamma = mech.laplace_grid(eps, sens)
    out = np.asarray(jax.vmap(lambda k: mech.laplace_mechanism(k, v, eps, sens))(
        jax.random.split(jax.random.key(20), 50_000)), np.float64)
    units = out / gamma
    np.testing.assert_array_equal(units, np.round(units))
    noise = mech.integer_noise.rounded_laplace((sens / gamma + 1) / eps)
    k, k_nb = round(v / gamma), round(v_nb / gamma)
    self.assertLessEqual(abs(k_nb - k), sens / gamma + 1)
    self.assertTrue(np.all(np.abs(units - k) <= noise.max_abs))
    self.assertTrue(np.all(np.abs(units - k_nb) <= noise.max_abs))
    # The float mechanism's outputs are not on any such grid.
    with self.assertWarns(mech.InsecureNoiseWarning):
      raw = np.asarray(mech.laplace_mechanism(jax.random.key(21), jnp.full(1000, v), eps,
                                              secure=False), np.float64)
    self.assertGreater(np.mean(raw / gamma != np.round(raw / gamma)), 0.9)

  @parameterized.parameters(("laplace", 1), ("laplace", 5), ("gaussian", 1), ("gaussian", 9))
  def test_snapped_neighbours_within_inflated_sensitivity(self, kind, d):
    # With negligible noise (eps = 1e7: the table is {0}), the release is gamma k
    # exactly; for random neighbours with ||v - v'|| <= Delta (L1 / L2), the integer
    # vectors differ by at most Delta / gamma + d (L1) or + sqrt(d) (L2).
    rng = np.random.default_rng(d)
    sens, grid = 3.0, 2.0 ** -4
    for _ in range(20):
      v = rng.uniform(-50, 50, d)
      step = rng.normal(size=d)
      step *= sens / (np.abs(step).sum() if kind == "laplace" else np.linalg.norm(step))
      if kind == "laplace":
        rel = lambda x: mech.laplace_mechanism(jax.random.key(0), x, 1e7, sens, grid=grid)
        bound, norm = sens / grid + d, lambda u: np.abs(u).sum()
      else:
        rel = lambda x: mech.gaussian_mechanism(jax.random.key(0), x, 1e7, 0.5, sens, grid=grid)
        bound, norm = sens / grid + math.sqrt(d), np.linalg.norm
      a = np.asarray(rel(jnp.asarray(v, jnp.float32)), np.float64) / grid
      b = np.asarray(rel(jnp.asarray(v + step, jnp.float32)), np.float64) / grid
      np.testing.assert_array_equal(a, np.round(a))
      self.assertLessEqual(norm(a - b), bound)
      self.assertLessEqual(np.abs(a - np.asarray(v, np.float32) / grid).max(), 0.5)

  def test_gaussian_noise_multiplier_is_kept(self):
    # s / Delta_grid = sigma / Delta_2: the grid noise sd, in value units, is
    # sigma (1 + gamma sqrt(d) / Delta_2). 40k draws of a 4-vector: sd within 1.5%
    # (SE of the sd 0.35%).
    eps, delta, sens, grid = 1.0, 1e-5, 1.0, 2.0 ** -6
    sigma = mech.gaussian_sigma(eps, delta, sens)
    out = np.asarray(jax.vmap(lambda k: mech.gaussian_mechanism(
        k, jnp.zeros(4), eps, delta, sens, grid=grid))(jax.random.split(jax.random.key(22),
                                                                        10_000)))
    want = math.sqrt((sigma * (1 + grid * 2 / sens)) ** 2 + grid ** 2 / 12)
    self.assertAlmostEqual(out.std() / want, 1.0, delta=0.015)
    np.testing.assert_array_equal(out / grid, np.round(out / grid))

  def test_insecure_gaussian_warns(self):
    with self.assertWarns(mech.InsecureNoiseWarning):
      mech.gaussian_mechanism(jax.random.key(0), 1.0, 1.0, 1e-5, secure=False)

  @parameterized.named_parameters(
      ("grid_not_pow2", lambda: mech.laplace_mechanism(jax.random.key(0), 1.0, 1.0, grid=0.1),
       "grid"),
      ("grid_negative", lambda: mech.gaussian_mechanism(jax.random.key(0), 1.0, 1.0, 1e-5,
                                                        grid=-0.5), "grid"),
      ("value_off_range", lambda: mech.laplace_mechanism(jax.random.key(0), 2.0 ** 20, 1.0,
                                                         grid=2.0 ** -6), "value"),
      ("table_too_big", lambda: mech.laplace_mechanism(jax.random.key(0), 1.0, 1e-3,
                                                       grid=2.0 ** -12), "coarser grid"))
  def test_bad_grid_input(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()

  @parameterized.parameters("no", "False", 1, None)
  def test_secure_must_be_a_bool(self, flag):
    with self.assertRaisesRegex(TypeError, "secure must be a bool"):
      mech.laplace_mechanism(jax.random.key(0), jnp.zeros(2), 1.0, secure=flag)
    with self.assertRaisesRegex(TypeError, "secure must be a bool"):
      mech.gaussian_mechanism(jax.random.key(0), jnp.zeros(2), 1.0, 1e-5, secure=flag)


class ClippedStatisticsTest(parameterized.TestCase):

  def test_private_mean_clips_and_splits_budget(self):
    x = jnp.array([1.0, 5.0, 30.0, 250.0, -3.0])
    hand = (1.0 + 5.0 + 30.0 + 100.0 + 0.0) / 5
    out = mech.private_mean(jax.random.key(10), x, epsilon=1e7, upper=100.0)
    self.assertAlmostEqual(float(out.mean), hand, delta=1e-3)
    # Noise scales: sum ~ Laplace(B / (eps (1 - f))), count ~ Laplace(1 / (eps f)).
    # 40k repetitions: sample sd within 4% of sqrt(2) b (relative SE of the sd of a
    # Laplace sample is about sqrt(5/4)/sqrt(K) = 0.6%).
    eps, f, big_b, k = 1.0, 0.25, 200.0, 40_000
    outs = jax.vmap(lambda kk: mech.private_mean(kk, x, eps, big_b, count_fraction=f))(
        jax.random.split(jax.random.key(11), k))
    sum_sd = np.std(np.asarray(outs.noisy_sum))
    cnt_sd = np.std(np.asarray(outs.noisy_count))
    self.assertAlmostEqual(sum_sd / (math.sqrt(2) * big_b / (eps * (1 - f))), 1, delta=0.04)
    self.assertAlmostEqual(cnt_sd / (math.sqrt(2) / (eps * f)), 1, delta=0.04)
    np.testing.assert_allclose(
        outs.mean, outs.noisy_sum / np.maximum(np.asarray(outs.noisy_count), 1.0), rtol=1e-6)

  def test_clipped_sum_neighbours_differ_by_at_most_the_bound(self):
    # Adding one record (however extreme) moves the clipped sum by at most
    # max(|lower|, |upper|); the Laplace density ratio of the two releases is then
    # bounded by e^eps. eps = 1e7 makes the noise negligible, exposing the exact sums.
    d = jnp.array([3.0, 40.0, 7.5])
    for extra, lo, hi in ((1e6, 0.0, 10.0), (-1e6, -50.0, 10.0), (4.0, 0.0, 10.0)):
      s = float(mech.clipped_sum(jax.random.key(0), d, 1e7, hi, lo))
      s2 = float(mech.clipped_sum(jax.random.key(0), jnp.append(d, extra), 1e7, hi, lo))
      shift = abs(s2 - s)
      self.assertLessEqual(shift, max(abs(lo), abs(hi)) + 1e-3)
      eps, sens = 0.8, max(abs(lo), abs(hi))
      b = sens / eps
      z = np.linspace(-30 * b, 30 * b, 20001)
      log_ratio = stats.laplace.logpdf(z, 0, b) - stats.laplace.logpdf(z, shift, b)
      self.assertLessEqual(np.max(np.abs(log_ratio)), eps + 1e-6)

  def test_no_key_reuse(self):
    with jax.debug_key_reuse(True):
      k = jax.random.key(0)
      mech.private_mean(k, jnp.ones(5), 1.0, 2.0)
      mech.randomized_response(jax.random.key(1), jnp.ones(3, jnp.int32), 1.0)

  def test_clipped_sum_sensitivity_uses_both_bounds(self):
    # Values in [-50, 10]: add/remove sensitivity is 50; sd sqrt(2)*50/eps.
    outs = jax.vmap(lambda kk: mech.clipped_sum(kk, jnp.zeros(3), 2.0, 10.0, -50.0))(
        jax.random.split(jax.random.key(12), 40_000))
    self.assertAlmostEqual(np.std(np.asarray(outs)) / (math.sqrt(2) * 25.0), 1, delta=0.04)
    counts = mech.noisy_count(jax.random.key(13), jnp.ones((2, 7)), 1e7)
    np.testing.assert_allclose(counts, [7.0, 7.0], atol=1e-3)


class BadInputTest(parameterized.TestCase):

  _K = jax.random.key(0)

  def test_complex_bits_are_refused(self):
    # Complex bits were randomized as their real parts.
    with self.assertRaisesRegex(ValueError, "bits must be real numbers"):
      mech.randomized_response(self._K, np.array([0, 1]) + 0j, 1.0)

  @parameterized.named_parameters(
      ("eps_zero", lambda: mech.laplace_mechanism(BadInputTest._K, 1.0, 0.0), "epsilon"),
      ("eps_negative", lambda: mech.rr_truth_prob(-1.0), "epsilon"),
      ("eps_inf", lambda: mech.gaussian_sigma(math.inf, 1e-5), "epsilon"),
      ("delta_zero", lambda: mech.gaussian_sigma(1.0, 0.0), "delta"),
      ("delta_one", lambda: mech.gaussian_mechanism(BadInputTest._K, 0.0, 1.0, 1.0), "delta"),
      ("sens_zero", lambda: mech.laplace_scale(1.0, 0.0), "sensitivity"),
      ("sens_negative", lambda: mech.gaussian_sigma(1.0, 1e-5, -2.0), "sensitivity"),
      ("nan_value", lambda: mech.laplace_mechanism(BadInputTest._K, jnp.array([1.0, jnp.nan]), 1.0),
       "value"),
      ("inf_values", lambda: mech.private_mean(BadInputTest._K, jnp.array([jnp.inf]), 1.0, 10.0),
       "values"),
      ("prior_above_one", lambda: mech.rr_posterior(1.5, 1.0), "prior"),
      ("prior_negative", lambda: mech.rr_posterior(np.array([0.2, -0.1]), 1.0), "prior"),
      ("rate_nan", lambda: mech.rr_estimate_std(10, 1.0, rate=math.nan), "rate"),
      ("bits_not_binary", lambda: mech.randomized_response(BadInputTest._K, jnp.array([0, 2]), 1.0),
       "bits"),
      ("report_value", lambda: mech.rr_posterior(0.5, 1.0, report=2), "report"),
      ("no_reports", lambda: mech.rr_estimate_rate(jnp.zeros((0,)), 1.0), "reports"),
      ("bad_calibration", lambda: mech.gaussian_sigma(0.5, 1e-5, calibration="rdp"), "calibration"),
      ("clip_order", lambda: mech.clipped_sum(BadInputTest._K, jnp.ones(3), 1.0, upper=0.0), "lower"),
      ("clip_inf", lambda: mech.private_mean(BadInputTest._K, jnp.ones(3), 1.0, upper=math.inf), "upper"),
      ("count_fraction", lambda: mech.private_mean(BadInputTest._K, jnp.ones(3), 1.0, 10.0,
                                                   count_fraction=1.0), "count_fraction"),
      ("n_zero", lambda: mech.rr_estimate_std(0, 1.0), "n"),
  )
  def test_raises(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()

  def test_traced_epsilon_rejected(self):
    with self.assertRaisesRegex(ValueError, "epsilon"):
      jax.jit(lambda e: mech.laplace_mechanism(self._K, 1.0, e))(1.0)


class RrFloatTest(parameterized.TestCase):

  @parameterized.parameters(0.01, 1.0, 5.0, 12.0, 15.0, 17.0, 30.0, 50.0)
  def test_realised_ratio_never_above_e_eps(self, eps):
    # The realised lie probability on jax.random.uniform's 2^-23 grid.
    t = float(mech.rr_lie_threshold(eps))
    p_lie = math.ceil(t * 2.0 ** 23) / 2.0 ** 23
    self.assertGreaterEqual(p_lie, 1.0 / (1.0 + math.exp(eps)))
    self.assertLessEqual(math.log((1.0 - p_lie) / p_lie), eps + 1e-12)


if __name__ == "__main__":
  absltest.main()
