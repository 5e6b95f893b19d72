"""Valid but extreme inputs: a correct finite number or a ValueError naming the parameter.

Each case here once hung, allocated gigabytes, aborted the process or returned NaN /
inf. The inputs are the extreme ones themselves, and each check is cheap by
construction (bounded work in the code under test), so no timing asserts.
"""

import math
import warnings
from unittest import mock

import dp_accounting
import jax
import jax.numpy as jnp
import mpmath
import numpy as np
from absl.testing import absltest, parameterized
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from scipy import stats

from dpjax import accounting, mechanisms, pate, sampling, selection
from dpjax.accounting import gdp, rdp, subsampled_rdp


class RdpTinySigmaTest(parameterized.TestCase):
  """subsampled_gaussian_rdp caps its quadrature and bounds the orders it skips."""

  @parameterized.parameters(1e-3, 1e-4)
  def test_dpsgd_epsilon_finite_and_above_the_gaussian_closed_form(self, sigma):
    # Before: sigma = 1e-3 tried to allocate 11.3 GiB, 1e-4 1.1 TiB.
    eps = accounting.dpsgd_epsilon(sigma, 0.01, 1000, 1e-5)
    self.assertTrue(math.isfinite(eps))
    # At order 1.5 the quadrature is skipped and the bound is the Gaussian
    # 1.5 / (2 sigma^2); dp_accounting's series is a hair below it (its optimum is
    # also at 1.5): ours is never smaller, and within 1e-6 relative.
    orders = [1.5, 2.0, 3.0, 8.0]
    ours = accounting.dpsgd_epsilon(sigma, 0.01, 1000, 1e-5, orders=orders)
    acct = dp_rdp.RdpAccountant(orders)
    acct.compose(dp_accounting.PoissonSampledDpEvent(
        0.01, dp_accounting.GaussianDpEvent(sigma)), 1000)
    ref = acct.get_epsilon(1e-5)
    self.assertGreaterEqual(ours, ref * (1 - 1e-12))
    self.assertLess(ours, ref * (1 + 1e-6))

  def test_config_epsilon_at_tiny_sigma(self):
    # DpSgdConfig.epsilon() (so train_many's accounting) goes through the same accountant.
    from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
    cfg = dpsgd.DpSgdConfig(dataset_size=1000, sampling_prob=0.01, num_steps=1000,
                            noise_multiplier=1e-3)
    eps = cfg.epsilon()
    self.assertTrue(math.isfinite(eps))
    self.assertEqual(eps, accounting.dpsgd_epsilon(1e-3, 0.01, 1000, cfg.delta,
                                                   cfg.accountant))

  def test_fallback_never_below_the_exact_curve(self):
    sigma, q = 0.05, 0.01
    exact = rdp.subsampled_gaussian_rdp(q, sigma, rdp.DEFAULT_ORDERS)
    budget = subsampled_rdp._GRID_BUDGET
    try:
      subsampled_rdp._GRID_BUDGET = 2 ** 15        # forces the bound on most fractional orders
      bounded = rdp.subsampled_gaussian_rdp(q, sigma, rdp.DEFAULT_ORDERS)
    finally:
      subsampled_rdp._GRID_BUDGET = budget
    is_int = rdp.DEFAULT_ORDERS == np.round(rdp.DEFAULT_ORDERS)
    np.testing.assert_array_equal(bounded[is_int], exact[is_int])
    self.assertTrue(np.all(bounded >= exact * (1 - 1e-12)))
    self.assertGreater(np.sum(bounded > exact * (1 + 1e-9)), 10)  # the bound was used
    e_exact = rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, 100 * exact, 1e-5)[0]
    e_bound = rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, 100 * bounded, 1e-5)[0]
    self.assertGreaterEqual(e_bound, e_exact)

  def test_rdp_and_pld_agree_in_order_at_tiny_sigma(self):
    # PLD (tight) must stay below the RDP upper bound; both finite.
    e_rdp = accounting.dpsgd_epsilon(1e-3, 0.01, 1000, 1e-5, accountant="rdp")
    e_pld = accounting.dpsgd_epsilon(1e-3, 0.01, 1000, 1e-5, accountant="pld")
    self.assertTrue(math.isfinite(e_pld))
    self.assertLessEqual(e_pld, e_rdp)

  def test_huge_integer_order_gets_the_gaussian_bound(self):
    big = float(subsampled_rdp._MAX_EXACT_INT_ORDER * 4)
    out = rdp.subsampled_gaussian_rdp(0.01, 1.0, [2.0, big])
    self.assertEqual(out[1], big / 2.0)
    self.assertAlmostEqual(out[0], rdp.subsampled_gaussian_rdp(0.01, 1.0, [2.0])[0])



class CalibrateNoiseTest(absltest.TestCase):

  def test_rtol_below_the_floor_is_refused_by_name(self):
    # Before: rtol = 5e-324 never ended (the bracket stalls at adjacent floats).
    for rtol in (5e-324, 1e-13, 0.0, 1.0):
      with self.assertRaisesRegex(ValueError, "rtol"):
        accounting.calibrate_noise(1.0, 0.01, 100, 1e-5, rtol=rtol)

  def test_smallest_rtol_meets_the_target_and_is_minimal(self):
    sigma = accounting.calibrate_noise(1.0, 0.01, 100, 1e-5, rtol=1e-12)
    self.assertLessEqual(accounting.dpsgd_epsilon(sigma, 0.01, 100, 1e-5), 1.0)
    self.assertGreater(accounting.dpsgd_epsilon(sigma * (1 - 1e-9), 0.01, 100, 1e-5), 1.0)


class GaussianMechanismTest(absltest.TestCase):

  def test_sigma_at_vanishing_epsilon_is_the_zero_epsilon_limit(self):
    # delta(0) = 2 Phi(mu / 2) - 1 = delta  =>  mu = 2 Phi^-1((1 + delta) / 2).
    mu0 = 2.0 * float(mpmath.sqrt(2) * mpmath.erfinv(mpmath.mpf(1e-5)))
    self.assertAlmostEqual(mechanisms.gaussian_sigma(1e-300, 1e-5) * mu0, 1.0, places=9)

  def test_release_at_vanishing_epsilon_is_a_named_error(self):
    # Before: > 20 s (a 481,000-entry mpmath table) before any answer.
    with self.assertRaisesRegex(ValueError, "^epsilon = 1e-300.*MAX_GAUSSIAN_TABLE_ENTRIES"):
      mechanisms.gaussian_mechanism(jax.random.key(0), 0.0, 1e-300, 1e-5)

  def test_ordinary_release_unchanged(self):
    x = mechanisms.gaussian_mechanism(jax.random.key(0), jnp.zeros(3), 1.0, 1e-5)
    self.assertTrue(np.all(np.isfinite(np.asarray(x))))


class LaplaceMechanismTest(absltest.TestCase):

  def test_huge_sensitivity_is_a_named_error(self):
    # Before: -inf (the default grid was 2^986, inf in float32), both modes.
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "^sensitivity = 1e\\+300"):
      mechanisms.laplace_mechanism(key, 0.0, 1.0, sensitivity=1e300)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", mechanisms.InsecureNoiseWarning)
      with self.assertRaisesRegex(ValueError, "^sensitivity = 1e\\+300"):
        mechanisms.laplace_mechanism(key, 0.0, 1.0, sensitivity=1e300, secure=False)
    with self.assertRaisesRegex(ValueError, "^epsilon = 1e-300"):
      mechanisms.laplace_mechanism(key, 0.0, 1e-300)
    with self.assertRaisesRegex(ValueError, "^sensitivity = 1e\\+300"):
      mechanisms.gaussian_mechanism(key, 0.0, 1.0, 1e-5, sensitivity=1e300)

  def test_clip_bounds_beyond_float32_are_named(self):
    # Before: clipped_sum(upper=1e39) released inf / NaN (the bound overflows float32).
    for kw, name in ((dict(upper=1e39), "upper"), (dict(upper=1.0, lower=-1e39), "lower")):
      with self.assertRaisesRegex(ValueError, f"^{name} must fit float32"):
        mechanisms.clipped_sum(jax.random.key(0), jnp.array([1.0, 2.0]), 1.0, **kw)
    out = mechanisms.clipped_sum(jax.random.key(0), jnp.array([1.0, 2.0]), 1.0, 1e30)
    self.assertTrue(np.isfinite(float(out)))

  def test_largest_allowed_scale_stays_finite(self):
    x = mechanisms.laplace_mechanism(jax.random.key(0), 0.0, 1.0, sensitivity=2.0 ** 100)
    self.assertTrue(np.isfinite(float(x)))


class RandomizedResponseTest(absltest.TestCase):

  def test_estimate_at_tiny_epsilon(self):
    # 2p - 1 = tanh(eps / 2): pi_hat = (lam - 1/2) / tanh(eps / 2) + 1/2.
    reports = jnp.array([1, 0, 1, 1])
    est = float(mechanisms.rr_estimate_rate(reports, 1e-20))
    self.assertAlmostEqual(est / (0.25 / math.tanh(5e-21) + 0.5), 1.0, places=6)
    self.assertEqual(float(mechanisms.rr_estimate_rate(jnp.array([1, 0]), 1e-20)), 0.5)
    # Before: inf at eps = 1e-300; the estimate is ~1e300, beyond float32.
    with self.assertRaisesRegex(ValueError, "^epsilon = 1e-300"):
      mechanisms.rr_estimate_rate(reports, 1e-300)

  def test_estimate_std_at_tiny_epsilon(self):
    # Before: ZeroDivisionError. Fixed bits: sd = sqrt(p (1 - p) / n) / (2p - 1).
    sd = mechanisms.rr_estimate_std(100, 1e-300)
    self.assertAlmostEqual(sd / (0.05 / math.tanh(5e-301)), 1.0, places=12)
    with self.assertRaisesRegex(ValueError, "^epsilon"):
      mechanisms.rr_estimate_std(100, 5e-324)

  def test_ordinary_epsilon_keeps_the_old_formula(self):
    reports = jnp.array([1, 0, 1, 1])
    p = mechanisms.rr_truth_prob(1.0)
    lam = jnp.mean(reports.astype(jnp.float32))
    self.assertEqual(float(mechanisms.rr_estimate_rate(reports, 1.0)),
                     float((lam - (1.0 - p)) / (2.0 * p - 1.0)))


class SizesTest(absltest.TestCase):

  def test_batch_capacity_of_an_impossible_dataset(self):
    # Before: hung in Boost's binomial quantile search.
    with self.assertRaisesRegex(ValueError, "^num_records"):
      sampling.default_batch_capacity(2 ** 63 - 1, 0.5)
    n = 10 ** 9
    k = sampling.default_batch_capacity(n, 1e-6)
    self.assertEqual(k, -(-int(stats.binom.ppf(0.975, n, 1e-6)) // 8) * 8)

  def test_exponential_mechanism_with_too_many_candidates(self):
    # Before: the process aborted inside XLA (shape) / a 7 TiB MemoryError (utilities).
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "^shape"):
      selection.exponential_mechanism(key, jnp.zeros(3), 1.0, shape=(10 ** 12,))
    huge = np.broadcast_to(np.float32(0.0), (10 ** 12,))   # no memory of its own
    with self.assertRaisesRegex(ValueError, "^utilities"):
      selection.exponential_mechanism(key, huge, 1.0)
    out = selection.exponential_mechanism(key, jnp.array([0.0, 50.0]), 10.0, shape=(5,))
    self.assertEqual(np.asarray(out).tolist(), [1] * 5)


class DeltaAtExtremesTest(parameterized.TestCase):

  @parameterized.parameters(math.inf, 1e300, 1.7e308)
  def test_gaussian_delta_at_huge_epsilon_is_zero(self, eps):
    # Before: NaN.
    self.assertEqual(gdp.gaussian_delta(eps, 1.0), 0.0)
    self.assertEqual(accounting.gaussian_delta(eps, 1e-300), 0.0)

  def test_gaussian_delta_at_tiny_mu(self):
    # delta(0) = erf(mu / sqrt 8) ~ mu / sqrt(2 pi); delta(eps = mu) by mpmath.
    self.assertAlmostEqual(gdp.gaussian_delta(0.0, 1e-300) / (1e-300 / math.sqrt(2 * math.pi)),
                           1.0, places=12)
    with mpmath.workprec(4000):
      e = m = mpmath.mpf(1e-300)
      ref = float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))
    self.assertAlmostEqual(gdp.gaussian_delta(1e-300, 1e-300) / ref, 1.0, places=12)
    self.assertEqual(gdp.gaussian_delta(1.0, 1e-300), 0.0)   # Phi(-1e300): below 5e-324

  def test_gaussian_delta_ordinary_values_unchanged(self):
    self.assertAlmostEqual(gdp.gaussian_delta(0.0, 1.0), 2 * stats.norm.cdf(0.5) - 1, places=15)
    ours = gdp.gaussian_delta(np.array([0.5, 1.0, 3.0]), 1.0)
    ref = stats.norm.cdf(-np.array([0.5, 1.0, 3.0]) + 0.5) - np.exp([0.5, 1.0, 3.0]) * (
        stats.norm.cdf(-np.array([0.5, 1.0, 3.0]) - 0.5))
    np.testing.assert_allclose(ours, ref, rtol=1e-12)

  @parameterized.parameters("rdp", "pld")
  def test_accountant_delta_at_huge_epsilon(self, kind):
    # Before (pld): OverflowError at 1.7e308. Answer 0, or PLD's truncated mass.
    acct = accounting.Accountant(kind).compose_laplace(1.0, count=3)
    self.assertEqual(acct.delta(1.7e308), 0.0)
    acct = accounting.Accountant(kind).compose_subsampled_gaussian(1.0, 0.01, count=100)
    for eps in (1e300, 1.7e308):
      d = acct.delta(eps)
      self.assertTrue(0.0 <= d < 1e-15)


class ConfidentGnmaxTest(absltest.TestCase):
  """Thresholds so far out that the Gaussian tails underflow (before: NaN)."""

  _V = [[240.0, 10.0], [130.0, 120.0]]
  _ORDERS = [2.0, 8.0, 64.0]

  def _dep(self, threshold, sigma_threshold=150.0):
    return pate.confident_gnmax_rdp(self._V, threshold=threshold, sigma_threshold=sigma_threshold,
                                    sigma=40.0, orders=self._ORDERS).data_dependent

  def test_never_answered_costs_nothing(self):
    np.testing.assert_array_equal(self._dep(1e300), 0.0)

  def test_always_answered_costs_the_argmax(self):
    g = sum(pate.gnmax_rdp_data_dependent(np.array(r), 40.0, np.array(self._ORDERS))
            for r in self._V)
    np.testing.assert_allclose(self._dep(-1e300), g, rtol=1e-12)

  def test_noiseless_check_between_votes_is_infinite(self):
    # p(240) = 0 but p(241) = 1: an unbounded divergence, reported as inf.
    self.assertTrue(np.all(np.isinf(self._dep(240.5, 1e-300))))


if __name__ == "__main__":
  absltest.main()


class UserIdLimitTest(absltest.TestCase):

  def test_user_ids_past_int32_are_refused_not_wrapped(self):
    from dpjax import sampling  # pylint: disable=g-import-not-at-top
    ids = np.array([0, 1, 2 ** 31], np.int64)
    with self.assertRaisesRegex(ValueError, "num_users"):
      sampling.UserPoissonSampler(0.5, ids, 2 ** 31 + 1)
    with self.assertRaisesRegex(ValueError, "num_users"):
      sampling.check_user_ids(ids, 2 ** 31 + 1)
    got = sampling.check_user_ids(np.array([0, 2 ** 31 - 2], np.int64), 2 ** 31 - 1)
    self.assertEqual(got.tolist(), [0, 2 ** 31 - 2])


class LiraHugeConfidenceTest(absltest.TestCase):

  def test_scores_are_finite_and_scale_free_up_to_float64_max(self):
    from dpjax.attacks import mia  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(0)
    phi = rng.normal(size=(16, 5)) + 3.0 * (rng.random((16, 5)) < 0.5)
    keep = rng.random((16, 5)) < 0.5
    for online in (True, False):
      ref = mia.lira_scores(phi, keep, online=online)
      for scale in (2.0 ** 600, 2.0 ** 1000):   # phi up to ~1e301: squares would overflow
        got = mia.lira_scores(phi * scale, keep, online=online)
        self.assertTrue(np.isfinite(got).all(), (online, scale))
        # the likelihood ratio (and the OUT-tail) does not depend on phi's scale
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


class HugeClipNormTest(absltest.TestCase):

  def test_clip_norm_beyond_float32_is_no_clipping_not_nan(self):
    from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
    from dpjax.clipping import glm, vmap  # pylint: disable=g-import-not-at-top
    x = jnp.array([[3.0, 4.0], [1e3, 0.0], [0.0, 0.0]])
    y, w, p = jnp.array([0, 1, 1]), jnp.ones(3), {"w": jnp.array([0.5, -0.5])}
    no_clip = glm.clipped_grad_sum(0.0, p, x, y, w, math.inf)[0]["w"]
    for c in (1e39, 1e300):
      got = glm.clipped_grad_sum(0.0, p, x, y, w, c)[0]["w"]
      np.testing.assert_array_equal(got, no_clip)
      np.testing.assert_array_equal(vmap.clip_factor(jnp.array([1.0, 3e38]), c), [1.0, 1.0])
    # with noise, sigma * C must fit float32: refused by name rather than inf noise
    with self.assertRaisesRegex(ValueError, "noise_multiplier \\* l2_clip_norm"):
      dpsgd.DpSgdConfig(l2_clip_norm=1e39, noise_multiplier=1.0, dataset_size=10,
                        sampling_prob=0.5, num_steps=2)


class CountsPastMemoryTest(absltest.TestCase):
  """Counts whose arrays cannot exist are named before any allocation.

  Before: MemoryError (16-64 GiB requested), a hang (2^31 epochs) or an error that named
  another parameter. The process memory is taken to be 8 GiB, so the outcome does not
  depend on the machine.
  """

  def setUp(self):
    super().setUp()
    from dpjax import _validate  # pylint: disable=g-import-not-at-top
    patcher = mock.patch.object(_validate, "memory_bytes", return_value=8 * 2 ** 30)
    patcher.start()
    self.addCleanup(patcher.stop)

  def _raises(self, name, fn, **kw):
    with self.subTest(name=name, **{k: v for k, v in kw.items() if isinstance(v, int)}):
      with self.assertRaisesRegex(ValueError, name):
        fn(**kw)

  def test_last_iterate_roc(self):
    from dpjax.audit import last_iterate  # pylint: disable=g-import-not-at-top
    base = dict(sampling_prob=0.5, noise_multiplier=1.0, num_steps=3, num_points=11)
    roc = lambda **kw: last_iterate.last_iterate_roc(**{**base, **kw})
    for big in (2 ** 31 - 1, 2 ** 63 - 1):
      self._raises("num_steps", roc, num_steps=big)
      self._raises("num_points", roc, num_points=big)
    # q = 1 is one Gaussian (one atom): a huge T stays answerable, mu = sqrt(T) / sigma.
    thr, fpr, fnr = last_iterate.last_iterate_roc(1.0, 1.0, 2 ** 62, 11)
    s = 2.0 ** 31
    np.testing.assert_allclose(fnr[1:-1], stats.norm.cdf((thr[1:-1] - 2.0 ** 62) / s))

  def test_check_claim_num_filler(self):
    from dpjax.audit import guard  # pylint: disable=g-import-not-at-top
    for big in (2 ** 31 - 1, 2 ** 63 - 1):
      self._raises("num_filler", guard.check_claim, key=jax.random.key(0), num_runs=4,
                   num_canaries=4, num_filler=big, progress=False)

  def test_composed_epsilon_lower_num_steps(self):
    from dpjax.audit import per_step  # pylint: disable=g-import-not-at-top
    for big in (2 ** 26, 2 ** 31, 2 ** 63):   # no grid_points in [1024 + T, 2^26] exists
      self._raises("num_steps", per_step.composed_epsilon_lower, fpr_J=[0.3], fnr_J=[0.4],
                   num_steps=big, delta=1e-5)
    self.assertTrue(math.isfinite(per_step.composed_epsilon_lower(
        [0.3], [0.4], 2 ** 20, 1e-5, grid_points=2 ** 21)))

  def test_batch_layout_num_models(self):
    from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
    for big in (2 ** 31, 2 ** 63):
      self._raises("num_models", dpsgd.batch_layout, num_records=4096, sampling_prob=0.01,
                   kept_max=4000, num_models=big)

  def test_non_private_training_epochs_and_padding(self):
    import optax  # pylint: disable=g-import-not-at-top
    from dpjax import fitting, models  # pylint: disable=g-import-not-at-top
    x = np.asarray(jax.random.normal(jax.random.key(0), (8, 3)))
    y = (x[:, 0] > 0).astype(np.int32)
    model = models.logistic_regression(3)
    fit = lambda **kw: fitting.train_nonprivate(
        jax.random.key(1), x, y, model, optax.sgd(0.1), **{**dict(num_epochs=1), **kw})
    for big in (2 ** 31 - 1, 2 ** 31, 2 ** 63):
      self._raises("num_epochs", fit, num_epochs=big)
      self._raises("pad_to", fit, pad_to=big)
    keep = np.ones((2, 8), bool)
    for big in (2 ** 31 - 1, 2 ** 63):
      self._raises("num_steps", pate.fit_non_private, key=jax.random.key(0), x_NxF=x, y_N=y,
                   keep_MxN=keep, model=model, num_steps=big)
      self._raises("pad_to", pate.fit_non_private, key=jax.random.key(0), x_NxF=x, y_N=y,
                   keep_MxN=keep, model=model, num_steps=2, pad_to=big)
      self._raises("num_steps", pate.train_teachers, key=jax.random.key(0), x_NxF=x, y_N=y,
                   num_teachers=2, model=model, num_steps=big)

  def test_check_user_ids_names_num_records(self):
    for n in (0, 3, 2 ** 31, 2 ** 63):
      self._raises("num_records", sampling.check_user_ids, user_ids_N=np.array([0, 0, 1, 2]),
                   num_users=3, num_records=n)
    self.assertEqual(sampling.check_user_ids(np.array([0, 0, 1, 2]), 3, num_records=4).tolist(),
                     [0, 0, 1, 2])


class SweepExtremesTest(absltest.TestCase):
  """The last extreme valid inputs of the full fuzz sweep: exact values checked against
  closed forms, other cases a ValueError naming the argument and its limit, raised before
  the allocation or the loop (memory taken to be 8 GiB, as in CountsPastMemoryTest)."""

  def setUp(self):
    super().setUp()
    from dpjax import _validate  # pylint: disable=g-import-not-at-top
    patcher = mock.patch.object(_validate, "memory_bytes", return_value=8 * 2 ** 30)
    patcher.start()
    self.addCleanup(patcher.stop)

  def test_sizes_past_memory_are_named(self):
    from dpjax import prng, recommender  # pylint: disable=g-import-not-at-top
    for big in (2 ** 31 - 1, 2 ** 31):
      with self.assertRaisesRegex(ValueError, "num_words = .* bytes"):
        prng.random_bits(jax.random.key(0), big)
      with self.assertRaisesRegex(ValueError, "num_items = .* bytes"):
        recommender.item_statistics([0, 1], [1.0, 5.0], big)
    sums, counts = recommender.item_statistics([0, 1, 1], [1.0, 5.0, 4.0], 3)
    np.testing.assert_array_equal(sums, [-2.0, 3.0, 0.0])    # clip(r) - 3 summed per item
    np.testing.assert_array_equal(counts, [1.0, 2.0, 0.0])

  def test_final_model_audit_num_runs(self):
    from dpjax import dpsgd, models  # pylint: disable=g-import-not-at-top
    from dpjax.audit import final_model  # pylint: disable=g-import-not-at-top
    cfg = dpsgd.DpSgdConfig(dataset_size=4, sampling_prob=0.5, num_steps=2)
    model = models.logistic_regression(2)
    for big in (2 ** 31 - 1, 2 ** 31):
      with self.assertRaisesRegex(ValueError, "num_runs = .* bytes"):
        final_model.audit(jax.random.key(0), cfg, model, np.ones((4, 2)), np.array([0, 1, 0, 1]),
                          init_params=model.init(jax.random.key(1)), adversaries=[],
                          num_runs=big)

  def test_iteration_counts_above_the_bound_are_named(self):
    from dpjax import _validate, fitting, models  # pylint: disable=g-import-not-at-top
    from dpjax.audit import crafting  # pylint: disable=g-import-not-at-top
    x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    y = np.array([0, 1, 0, 1])
    m = models.logistic_regression(2)
    for big in (_validate.MAX_ITERATIONS + 1, 2 ** 31 - 1, 2 ** 31, 2 ** 63):
      with self.assertRaisesRegex(ValueError, r"num_iters must be an integer in \[1, 1000000\]"):
        fitting.fit_logistic_many(x, y, np.ones((1, 4), bool), l2=1.0, num_iters=big)
      with self.assertRaisesRegex(ValueError, r"num_steps must be an integer in \[1, 1000000\]"):
        crafting.pretrain(m, m.init(jax.random.key(0)), x.astype(np.float32), y,
                          num_steps=big, learning_rate=0.1)
    # Below the bound nothing changed: the Newton fit still matches the host fit.
    w = fitting.fit_logistic_many(x, y, np.ones((1, 4), bool), l2=1.0, num_iters=40)
    np.testing.assert_allclose(w[0], fitting.fit_logistic(x, y, l2=1.0, num_iters=40),
                               atol=1e-5)

  def test_laplace_scale_outside_float64_is_named(self):
    with self.assertRaisesRegex(ValueError, "epsilon = 5e-324.*1.8e308"):
      mechanisms.laplace_scale(5e-324)
    with self.assertRaisesRegex(ValueError, "epsilon = 5e-324"):
      mechanisms.laplace_grid(5e-324)
    with self.assertRaisesRegex(ValueError, "sensitivity = 5e-324.*smallest float64"):
      mechanisms.laplace_grid(1.0, 5e-324)
    with self.assertRaisesRegex(OverflowError, "upper = 5e-324"):
      mechanisms.clipped_sum(jax.random.key(0), np.ones(3), 1.0, upper=5e-324)
    self.assertEqual(mechanisms.laplace_scale(1e-300, 1e-10), 1e290)
    self.assertEqual(mechanisms.laplace_grid(1.0, 1e-300), 2.0 ** math.floor(
        math.log2(1e-300 / 2 ** 10)))

  def test_advantage_bound_at_huge_epsilon_is_exact(self):
    from dpjax import tradeoff  # pylint: disable=g-import-not-at-top
    for eps, delta in ((700.0, 0.0), (701.0, 0.0), (1e300, 0.0), (1e300, 0.5), (40.0, 1e-5)):
      with mpmath.workprec(2000):
        e = mpmath.exp(mpmath.mpf(eps))
        want = float((e - 1 + 2 * mpmath.mpf(delta)) / (e + 1))
      self.assertEqual(tradeoff.advantage_bound(eps, delta), want, (eps, delta))

  def test_gaussian_epsilon_past_float64_is_named(self):
    from dpjax import matrix_factorization  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(ValueError, "mu = .*1.9e154"):
      gdp.gaussian_epsilon(1e-5, 1e200)
    for kw in (dict(noise_multiplier=1e-300, sensitivity_value=1.0),
               dict(noise_multiplier=1.0, sensitivity_value=1e300)):
      with self.assertRaisesRegex(OverflowError, next(iter(k for k, v in kw.items()
                                                           if v != 1.0))):
        matrix_factorization.epsilon(delta=1e-5, **kw)
    # Just below the limit the answer is finite and mu^2 / 2 + mu z to float64 precision.
    mu, delta = 1e150, 1e-5
    want = mu * mu / 2 + mu * stats.norm.isf(delta)
    self.assertAlmostEqual(gdp.gaussian_epsilon(delta, mu) / want, 1.0, places=12)

  def test_amplified_epsilon_without_a_finite_bound_is_named(self):
    from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
    args = (np.eye(2), 2.0, 0.5, 1)
    for kw in (dict(delta=1e-300, value_discretization=0.01),
               dict(delta=1e-3, value_discretization=1e300)):
      with self.assertRaisesRegex(ValueError, "delta = .* value_discretization = .*no finite"):
        mf.amplified_epsilon(*args, **kw)
    eps = mf.amplified_epsilon(*args, delta=1e-3, value_discretization=0.01)
    # DP-SGD's subsampled Gaussian at q = 1/2, sigma = 2, T = 2 (C = I, s = 1), by dp_accounting.
    acct = dp_accounting.pld.PLDAccountant(value_discretization_interval=0.01)
    acct.compose(dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(2.0)), 2)
    self.assertAlmostEqual(eps, acct.get_epsilon(1e-3), delta=0.03)

  def test_gaussian_noise_scale_must_fit_the_leaf_dtype(self):
    from dpjax import privatizer  # pylint: disable=g-import-not-at-top
    count, leaves = jnp.zeros((), jnp.int32), [jnp.zeros(4, jnp.float32)]
    with self.assertRaisesRegex(ValueError, "stddev = 1e\\+300.*<= 2.13e\\+37"):
      privatizer.gaussian_noise(jax.random.key(0), count, leaves, 1e300)
    top = float(np.finfo(np.float32).max) / 16
    z = privatizer.gaussian_noise(jax.random.key(0), count, leaves, 1.0)[0]
    big = privatizer.gaussian_noise(jax.random.key(0), count, leaves, top)[0]
    self.assertTrue(np.all(np.isfinite(big)))
    np.testing.assert_allclose(big / top, z, rtol=1e-6)    # the same draw, scaled

  def test_fit_non_private_learning_rate(self):
    from dpjax import models  # pylint: disable=g-import-not-at-top
    x = np.asarray(jax.random.normal(jax.random.key(0), (8, 3)))
    y = (x[:, 0] > 0).astype(np.int32)
    fit = lambda lr: pate.fit_non_private(jax.random.key(0), x, y, np.ones((2, 8), bool),
                                          models.logistic_regression(3), num_steps=5,
                                          learning_rate=lr)
    with self.assertRaisesRegex(ValueError, "learning_rate must be in \\(0, 3.40282e\\+38\\]"):
      fit(1e300)
    with self.assertRaisesRegex(ValueError, "learning_rate = 1e\\+38: Adam diverged"):
      fit(1e38)

  def test_documented_infinities(self):
    from dpjax.accounting import noise_support  # pylint: disable=g-import-not-at-top
    # An exact sampler (tail mass 0) adds no delta at any eps: the largest eps is inf.
    self.assertEqual(noise_support.max_epsilon_for_sampler_delta(1e-5, 100, tail_mass=0.0),
                     math.inf)
    self.assertEqual(noise_support.sampler_delta(1e6, 100, tail_mass=0.0), 0.0)
    # log q below the float64 range rounds to -inf; the data-dependent bound reads q = 0.
    votes = np.array([10.0, 2.0, 1.0])
    self.assertEqual(pate.gnmax_log_q(votes, 1e-300), -math.inf)
    with mpmath.workprec(200):     # at an ordinary sigma it is the exact log of the sum
      s = mpmath.mpf(1.5)
      want = mpmath.log(sum(mpmath.ncdf(-(10 - n) / (mpmath.sqrt(2) * s)) for n in (2, 1)))
    self.assertAlmostEqual(pate.gnmax_log_q(votes, 1.5), float(want), places=10)
    orders = np.array([2.0, 8.0])
    np.testing.assert_array_equal(
        pate.gaussian_rdp_data_dependent(-math.inf, 1.0, orders),
        pate.gaussian_rdp_data_dependent(-1e5, 1.0, orders))

  def test_errors_name_the_argument(self):
    from dpjax import parallel  # pylint: disable=g-import-not-at-top
    from dpjax.audit import run  # pylint: disable=g-import-not-at-top
    for big in (2 ** 31 - 1, 2 ** 63):
      with self.assertRaisesRegex(ValueError, "num_models"):
        parallel.gather_models({"w": np.zeros((3, 2))}, big)
    with self.assertRaisesRegex(ValueError, "epsilons\\[1\\] = 1e\\+300: target_epsilon"):
      run.settings([2.0, 1e300], 0.5, 2, 1e-5, False)
