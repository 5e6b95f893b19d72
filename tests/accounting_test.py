"""Tests for the accounting front door: dpsgd_epsilon, calibrate_noise, Accountant."""

import warnings

import dp_accounting
import numpy as np
import pytest
from absl.testing import absltest, parameterized

from dpjax import accounting
from dpjax.accounting import composition, gdp, rdp

try:
  from dpjax.accounting import pld  # pylint: disable=g-import-not-at-top
  _PLD_ERROR = None
except Exception as e:  # pylint: disable=broad-except
  pld, _PLD_ERROR = None, repr(e)

_OPACUS_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


class DpsgdEpsilonTest(parameterized.TestCase):

  def test_opacus_constant(self):
    eps = accounting.dpsgd_epsilon(1.5, 0.04, 2250, 1e-5, orders=_OPACUS_ORDERS)
    self.assertAlmostEqual(eps, 7.32911117143, delta=1e-9)
    # Our default grid is finer, so never looser.
    self.assertLessEqual(accounting.dpsgd_epsilon(1.5, 0.04, 2250, 1e-5), eps)

  @parameterized.parameters((1.0, 0.01, 1000, 1e-5), (4.0, 0.3, 50, 1e-8), (0.7, 1e-3, 10**5, 1e-6))
  def test_is_composed_rdp_and_bounded_by_dp_accounting(self, sigma, q, t, delta):
    orders = rdp.DEFAULT_ORDERS
    want, _ = rdp.rdp_to_epsilon(orders, t * rdp.subsampled_gaussian_rdp(q, sigma, orders), delta)
    got = accounting.dpsgd_epsilon(sigma, q, t, delta)
    self.assertEqual(got, want)
    acct = dp_accounting.rdp.RdpAccountant()
    acct.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), t)
    self.assertLessEqual(got, acct.get_epsilon(delta) + 1e-12)
    self.assertGreaterEqual(
        accounting.dpsgd_epsilon(sigma, q, t, delta, rdp_method="classic"), got)

  def test_q_one_bounds_exact_gaussian(self):
    eps = accounting.dpsgd_epsilon(100.0, 1.0, 10_000, 1e-5)
    exact = gdp.gaussian_epsilon(1e-5, 1.0)
    self.assertGreater(eps, exact)
    self.assertLess(eps, 1.09 * exact)   # lecture: RDP within 9-11 % of exact

  @parameterized.named_parameters(
      ("q_zero", dict(sampling_prob=0.0), "sampling_prob"),
      ("q_above_one", dict(sampling_prob=1.01), "sampling_prob"),
      ("sigma_zero", dict(noise_multiplier=0.0), "noise_multiplier"),
      ("sigma_negative", dict(noise_multiplier=-1.0), "noise_multiplier"),
      ("steps_zero", dict(num_steps=0), "num_steps"),
      ("steps_fraction", dict(num_steps=10.5), "num_steps"),
      ("steps_bool", dict(num_steps=True), "num_steps"),
      ("delta_zero", dict(delta=0.0), "delta"),
      ("delta_one", dict(delta=1.0), "delta"),
      ("accountant", dict(accountant="moments"), "accountant"),
      ("dataset_size", dict(dataset_size=0), "dataset_size"),
  )
  def test_bad_input(self, override, name):
    kw = dict(noise_multiplier=1.0, sampling_prob=0.01, num_steps=100, delta=1e-5)
    kw.update(override)
    with self.assertRaisesRegex(ValueError, name):
      accounting.dpsgd_epsilon(**kw)

  def test_warns_when_delta_not_below_one_over_n(self):
    with self.assertWarnsRegex(UserWarning, "1/dataset_size"):
      accounting.dpsgd_epsilon(1.0, 0.01, 100, 1e-3, dataset_size=1000)
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      accounting.dpsgd_epsilon(1.0, 0.01, 100, 1e-5, dataset_size=1000)


class CalibrateNoiseTest(parameterized.TestCase):

  @parameterized.parameters((50 / 4000, 1600, 2.19), (50 / 500, 200, 5.89))
  def test_lecture_sigmas(self, q, t, lecture):
    # Lecture sec. 5.2: eps = 1, delta = 1e-5, expected batch 50, 20 epochs.
    sigma = accounting.calibrate_noise(1.0, q, t, 1e-5)
    self.assertAlmostEqual(sigma, lecture, places=2)

  @parameterized.parameters((1.0, 0.01, 1000, 1e-5), (8.0, 0.04, 2250, 1e-5), (0.5, 1.0, 100, 1e-6))
  def test_smallest_sigma_to_relative_1e4(self, target, q, t, delta):
    sigma = accounting.calibrate_noise(target, q, t, delta)
    self.assertLessEqual(accounting.dpsgd_epsilon(sigma, q, t, delta), target)
    self.assertGreater(accounting.dpsgd_epsilon(sigma / (1 + 1e-4), q, t, delta), target)

  def test_rdp_gaussian_queries_lecture(self):
    # 1e4 Gaussian queries within (1, 1e-5): RDP needs sigma = 404.5 (lecture).
    self.assertAlmostEqual(accounting.calibrate_noise(1.0, 1.0, 10_000, 1e-5), 404.5, delta=0.05)

  @parameterized.named_parameters(
      ("unreachable", dict(target_epsilon=1e-7, sampling_prob=1.0, num_steps=10**5), "target_epsilon"),
      ("below_range", dict(target_epsilon=1e4, sampling_prob=0.01, num_steps=1), "target_epsilon"),
      ("target_zero", dict(target_epsilon=0.0), "target_epsilon"),
      ("q", dict(sampling_prob=2.0), "sampling_prob"),
      ("steps", dict(num_steps=-3), "num_steps"),
      ("delta", dict(delta=-1e-5), "delta"),
  )
  def test_bad_input(self, override, name):
    kw = dict(target_epsilon=1.0, sampling_prob=0.01, num_steps=100, delta=1e-5)
    kw.update(override)
    with self.assertRaisesRegex(ValueError, name):
      accounting.calibrate_noise(**kw)


class AccountantTest(parameterized.TestCase):

  def test_heterogeneous_rdp_is_the_sum_of_curves(self):
    o = rdp.DEFAULT_ORDERS
    acct = (accounting.Accountant()
            .compose_subsampled_gaussian(1.0, 0.01, count=500)
            .compose_subsampled_gaussian(2.0, 0.02, count=300)
            .compose_laplace(5.0, count=3)
            .compose_gaussian(10.0, count=2))
    want = (500 * rdp.subsampled_gaussian_rdp(0.01, 1.0, o)
            + 300 * rdp.subsampled_gaussian_rdp(0.02, 2.0, o)
            + 3 * rdp.laplace_rdp(5.0, o) + 2 * rdp.gaussian_rdp(10.0, o))
    np.testing.assert_allclose(acct.rdp_curve()[1], want, rtol=1e-13)
    eps = acct.epsilon(1e-5)
    self.assertAlmostEqual(eps, rdp.rdp_to_epsilon(o, want, 1e-5)[0], places=12)
    self.assertLessEqual(acct.delta(eps), 1e-5 * (1 + 1e-9))
    self.assertEqual(len(acct.events), 4)

  def test_matches_dp_accounting_composed_events(self):
    o = list(rdp.DEFAULT_ORDERS)
    ours = (accounting.Accountant().compose_gaussian(3.0, count=4).compose_laplace(2.0, count=5)
            .compose_subsampled_gaussian(1.2, 0.05, count=200))
    theirs = dp_accounting.rdp.RdpAccountant(orders=o)
    theirs.compose(dp_accounting.GaussianDpEvent(3.0), 4)
    theirs.compose(dp_accounting.LaplaceDpEvent(2.0), 5)
    theirs.compose(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(1.2)), 200)
    self.assertLessEqual(ours.epsilon(1e-6), theirs.get_epsilon(1e-6) + 1e-12)
    self.assertAlmostEqual(ours.epsilon(1e-6), theirs.get_epsilon(1e-6), delta=1e-3)

  def test_lecture_gaussian_example(self):
    acct = accounting.Accountant(orders=np.arange(2, 257)).compose_gaussian(100.0, count=10_000)
    self.assertAlmostEqual(acct.epsilon(1e-5), 4.75, places=2)

  def test_randomized_response_and_mixing_warning(self):
    # k-fold binary randomized response IS the worst case of the optimal composition
    # theorem, so that theorem gives its exact eps; RDP must lie above it, and below
    # advanced composition.
    acct = accounting.Accountant().compose_randomized_response(0.1, count=1000)
    exact = composition.optimal_composition_epsilon(0.1, 0.0, 1000, 1e-5)
    self.assertGreaterEqual(acct.epsilon(1e-5), exact)
    self.assertLess(acct.epsilon(1e-5), composition.advanced_composition(0.1, 0.0, 1000, 1e-5)[0])
    self.assertLessEqual(acct.delta(exact), 1.0)
    self.assertGreaterEqual(acct.delta(exact), 1e-5)
    with self.assertWarnsRegex(UserWarning, "replace-one"):
      acct.compose_subsampled_gaussian(1.0, 0.01)

  def test_empty_and_validation(self):
    acct = accounting.Accountant()
    self.assertEqual(acct.epsilon(1e-5), 0.0)
    with self.assertRaisesRegex(ValueError, "count"):
      acct.compose_gaussian(1.0, count=0)
    with self.assertRaisesRegex(ValueError, "accountant"):
      accounting.Accountant("prv")
    with self.assertRaisesRegex(ValueError, "scale"):
      acct.compose_laplace(0.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      acct.epsilon(0.0)
    with self.assertRaisesRegex(ValueError, "epsilon"):
      acct.delta(-1.0)


@absltest.skipIf(pld is None, f"dpjax.accounting.pld not importable: {_PLD_ERROR}")
class PldDispatchTest(parameterized.TestCase):

  def test_dispatch_and_tighter_than_rdp(self):
    args = (1.0, 0.01, 1000, 1e-5)
    got = accounting.dpsgd_epsilon(*args, accountant="pld")
    self.assertEqual(got, pld.dpsgd_epsilon(*args))
    self.assertLessEqual(got, accounting.dpsgd_epsilon(*args))

  def test_accountant_pld_exact_gaussian(self):
    acct = accounting.Accountant("pld").compose_gaussian(100.0, count=10_000)
    exact = gdp.gaussian_epsilon(1e-5, 1.0)
    self.assertGreaterEqual(acct.epsilon(1e-5), exact - 1e-9)
    self.assertLess(acct.epsilon(1e-5), exact * 1.005)

  def test_accountant_pld_heterogeneous_tighter_than_rdp(self):
    def build(kind):
      return (accounting.Accountant(kind).compose_laplace(10.0, count=20)
              .compose_subsampled_gaussian(1.0, 0.01, count=300))
    self.assertLessEqual(build("pld").epsilon(1e-5), build("rdp").epsilon(1e-5))

  @pytest.mark.slow
  def test_calibrate_pld_below_rdp(self):
    s_pld = accounting.calibrate_noise(1.0, 50 / 4000, 1600, 1e-5, accountant="pld")
    s_rdp = accounting.calibrate_noise(1.0, 50 / 4000, 1600, 1e-5)
    self.assertLess(s_pld, s_rdp)
    self.assertLessEqual(accounting.dpsgd_epsilon(s_pld, 50 / 4000, 1600, 1e-5, "pld"), 1.0)


if __name__ == "__main__":
  absltest.main()
