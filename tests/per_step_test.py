"""Tests for dpjax.audit.per_step: per-step statistics, estimate (a), bound (b).

Statistical checks use fixed seeds and state their tolerance:
  * estimate and bound on synthetic per-step scores of the claimed family: within
    their stated tolerance of the exact eps (tests/per_step_run_test.py: real runs and
    coverage).
"""

import math

import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as sps

from dpjax import accounting
from dpjax.accounting import gdp, pld
from dpjax.audit import per_step

_DELTA = 1e-5


def _binary_composed_epsilon(fpr, fnr, t, delta):
  """Exact eps(delta) of T i.i.d. binary channels (FPR, FNR), both directions, by
  enumerating the binomial count (the closed form the FFT must not exceed)."""
  k = np.arange(t + 1)
  best = 0.0
  for p1, q1 in ((1 - fnr, fpr), (fpr, 1 - fnr)):   # P(report IN) under P and under Q
    lp = sps.binom.logpmf(k, t, p1)
    lq = sps.binom.logpmf(k, t, q1)
    loss = lp - lq

    def d(e):
      return float(np.sum(np.exp(lp) * np.maximum(0.0, -np.expm1(e - loss))))
    lo, hi = 0.0, float(loss.max())
    if d(0.0) <= delta:
      continue
    for _ in range(200):
      mid = 0.5 * (lo + hi)
      lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    best = max(best, hi)
  return best


class ComposedEpsilonTest(parameterized.TestCase):

  def test_one_binary_step_is_randomized_response(self):
    self.assertAlmostEqual(per_step.composed_epsilon_lower([0.25], [0.25], 1, _DELTA),
                           math.log(3) + math.log1p(-4 * _DELTA / 3), places=5)

  @parameterized.named_parameters(("T50", 0.3, 0.4, 50), ("T500", 0.45, 0.48, 500),
                                  ("asym", 0.05, 0.6, 200))
  def test_binary_composition_below_and_close_to_exact(self, fpr, fnr, t):
    exact = _binary_composed_epsilon(fpr, fnr, t, _DELTA)
    got = per_step.composed_epsilon_lower([fpr], [fnr], t, _DELTA)
    self.assertLessEqual(got, exact + 1e-9)
    self.assertGreater(got, exact - 3e-3 * max(exact, 1.0))     # rounding: <= T h

  def test_below_the_pessimistic_pld_of_the_same_channel(self):
    fpr, fnr = np.array([0.6, 0.3, 0.1]), np.array([0.15, 0.4, 0.7])
    p_in, p_out = per_step._channel(fpr, fnr)
    upper = pld.finite_output_pld(np.log(p_in), np.log(p_out), 1e-4).self_compose(200).epsilon(
        _DELTA)
    got = per_step.composed_epsilon_lower(fpr, fnr, 200, _DELTA)
    self.assertLessEqual(got, upper)
    self.assertGreater(got, upper - 2e-3 * upper)

  def test_quantised_gaussian_step_below_gdp(self):
    # the exact error rates of 7 threshold tests of a N(0,1) vs N(mu,1) step: the
    # composed channel is dominated by mu sqrt(T)-GDP and loses little
    mu, t = 0.05, 400
    thr = per_step.design_thresholds(1.0, 1.0 / mu) * mu       # in units of the noise sd
    fpr, fnr = sps.norm.sf(thr), sps.norm.cdf(thr - mu)
    got = per_step.composed_epsilon_lower(fpr, fnr, t, _DELTA)
    exact = gdp.gaussian_epsilon(_DELTA, mu * math.sqrt(t))
    self.assertLessEqual(got, exact)
    self.assertGreater(got, 0.95 * exact)

  def test_no_information_certifies_nothing(self):
    self.assertEqual(per_step.composed_epsilon_lower([0.5, 0.2], [0.5, 0.8], 100, _DELTA), 0.0)

  def test_bad_inputs(self):
    for kw, name in ((dict(fpr_J=[1.5]), "fpr_J"), (dict(fnr_J=[0.2, 0.3]), "fnr_J"),
                     (dict(num_steps=0), "num_steps"), (dict(delta=1.0), "delta"),
                     (dict(fpr_J=[]), "fpr_J"), (dict(grid_points=10), "grid_points")):
      args = dict(fpr_J=[0.3], fnr_J=[0.4], num_steps=10, delta=_DELTA)
      args.update(kw)
      with self.subTest(name=name), self.assertRaisesRegex(ValueError, name):
        per_step.composed_epsilon_lower(**args)


def _synthetic(rng, sigma, q, n):
  s_out = sigma * rng.standard_normal(n)
  s_in = sigma * rng.standard_normal(n) + (rng.random(n) < q)
  return s_in, s_out


class EstimateAndBoundTest(parameterized.TestCase):

  @parameterized.named_parameters(("gdp", 1.0, 6.0, 100), ("subsampled", 0.2, 1.5, 100))
  def test_estimate_matches_exact_on_the_family(self, q, sigma, t):
    exact = accounting.dpsgd_epsilon(sigma, q, t, _DELTA, accountant="pld")
    rng = np.random.default_rng(1)
    s_in, s_out = _synthetic(rng, sigma, q, 2_000_000)
    st = per_step.step_statistics(s_in, s_out, per_step.design_thresholds(q, sigma))
    est = per_step.step_estimate(st, sampling_prob=q, num_steps=t, delta=_DELTA)
    self.assertBetween(est.epsilon_point, 0.95 * exact, 1.05 * exact)
    self.assertLess(est.epsilon, est.epsilon_point)
    self.assertGreater(est.epsilon, 0.85 * exact)
    self.assertIn("Gaussian", est.assumption)
    self.assertEqual(est.assumption, per_step.ASSUMPTION_GDP if q == 1 else
                     per_step.ASSUMPTION_SUBSAMPLED_GAUSSIAN)
    bnd = per_step.composed_bound(st, num_steps=t, delta=_DELTA)
    self.assertBetween(bnd.epsilon_lower, 0.5 * exact, exact)
    self.assertEqual(bnd.assumption, per_step.ASSUMPTION_IID_STEPS)
    self.assertTrue(np.all(bnd.fpr_upper_J >= st.false_positives_J / st.n_out))

  def test_bound_catches_half_the_noise(self):
    # a step with sigma / 2 (a broken implementation) certifies more than the claim's eps
    q, sigma, t = 0.2, 2.0, 200
    claimed = accounting.dpsgd_epsilon(sigma, q, t, _DELTA, accountant="pld")
    s_in, s_out = _synthetic(np.random.default_rng(2), sigma / 2, q, 1_000_000)
    st = per_step.step_statistics(s_in, s_out, per_step.design_thresholds(q, sigma))
    self.assertGreater(per_step.composed_bound(st, num_steps=t, delta=_DELTA).epsilon_lower,
                       claimed)

  def test_statistics_add_and_match_xla_counts(self):
    rng = np.random.default_rng(3)
    o = rng.standard_normal((4, 30, 5)).astype(np.float32) * 2 + 0.3
    g = rng.random((4, 5)) < 0.5
    thr = per_step.design_thresholds(0.5, 2.0, 5)
    st = per_step.observation_statistics(o, g, thr)
    ref = per_step.step_statistics(np.transpose(o, (0, 2, 1))[g], np.transpose(o, (0, 2, 1))[~g],
                                   thr)
    np.testing.assert_array_equal(st.false_positives_J, ref.false_positives_J)
    np.testing.assert_array_equal(st.false_negatives_J, ref.false_negatives_J)
    self.assertEqual((st.n_in, st.n_out), (ref.n_in, ref.n_out))
    np.testing.assert_allclose([st.sum_in, st.sumsq_in, st.sum_out, st.sumsq_out],
                               [ref.sum_in, ref.sumsq_in, ref.sum_out, ref.sumsq_out], rtol=1e-5)
    # a jax.Array stays on the device: the same counts, ties at a threshold included
    o[0, 0, :] = thr[2]
    on_host = per_step.observation_statistics(o, g, thr)
    on_device = per_step.observation_statistics(jnp.asarray(o), g, thr)
    np.testing.assert_array_equal(on_device.false_positives_J, on_host.false_positives_J)
    np.testing.assert_array_equal(on_device.false_negatives_J, on_host.false_negatives_J)
    ref2 = per_step.step_statistics(np.transpose(o, (0, 2, 1))[g], np.transpose(o, (0, 2, 1))[~g],
                                    thr)
    np.testing.assert_array_equal(on_device.false_negatives_J, ref2.false_negatives_J)
    with self.assertRaisesRegex(ValueError, "o_MxTxK must be finite"):
      per_step.observation_statistics(jnp.asarray(o).at[1, 2, 3].set(jnp.nan), g, thr)
    both = st + ref
    self.assertEqual(both.n_in, 2 * st.n_in)
    np.testing.assert_array_equal(both.false_negatives_J, 2 * st.false_negatives_J)

  def test_bad_inputs(self):
    thr = [0.0, 1.0]
    with self.assertRaisesRegex(ValueError, "thresholds_J"):
      per_step.step_statistics([1.0, 2.0], [0.0, 1.0], [1.0, 0.0])
    with self.assertRaisesRegex(ValueError, "scores_in"):
      per_step.step_statistics([1.0], [0.0, 1.0], thr)
    with self.assertRaisesRegex(ValueError, "scores_out"):
      per_step.step_statistics([1.0, 2.0], [0.0, float("nan")], thr)
    st = per_step.step_statistics([1.0, 2.0, 0.5], [0.0, 1.0, -1.0], thr)
    with self.assertRaisesRegex(ValueError, "other"):
      _ = st + per_step.step_statistics([1.0, 2.0], [0.0, 1.0], [0.0, 2.0])
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      per_step.step_estimate(st, sampling_prob=0.0, num_steps=10, delta=_DELTA)
    with self.assertRaisesRegex(ValueError, "num_steps"):
      per_step.composed_bound(st, num_steps=0, delta=_DELTA)
    with self.assertRaisesRegex(ValueError, "statistics"):
      per_step.step_estimate(per_step.step_statistics([1.0, 1.0], [0.0, 0.0], thr),
                             sampling_prob=1.0, num_steps=10, delta=_DELTA)
    with self.assertRaisesRegex(ValueError, "in_MxK"):
      per_step.observation_statistics(np.zeros((2, 3, 4), np.float32), np.zeros((2, 3), bool),
                                      thr)
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      per_step.design_thresholds(1.0, 0.0)


if __name__ == "__main__":
  absltest.main()
