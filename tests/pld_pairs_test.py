"""Tests for the pmf-pair PLDs and the GDP mu of dpjax.accounting.pld: closed forms."""

import math
import warnings

import numpy as np
from absl.testing import absltest, parameterized
from scipy import special

from dpjax.accounting import gdp, pld


def _binned(shift_p, shift_q, cdf, width=1e-3, lo=-14.0, hi=15.0):
  """Pmfs of two shifted continuous laws, binned on [lo, hi] (plus both tails)."""
  edges = np.concatenate([[-np.inf], np.arange(lo, hi, width), [np.inf]])
  p, q = np.diff(cdf(edges - shift_p)), np.diff(cdf(edges - shift_q))
  return p / p.sum(), q / q.sum()


def _laplace_cdf(x):
  return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0)), 1 - 0.5 * np.exp(-np.maximum(x, 0)))


def _hockey(p, q, eps):
  return float(np.maximum(p - math.exp(eps) * q, 0.0).sum())


class PairTest(parameterized.TestCase):

  @parameterized.parameters(0.0, 0.5, 1.5, 3.0)
  def test_binned_gaussian_pair_is_below_and_close_to_the_gaussian(self, eps):
    # Binning is post-processing: delta of the binned pair <= the Gaussian's; bins of
    # width 1e-3 lose almost nothing.
    p, q = _binned(1.0, 0.0, special.ndtr)
    got = pmf = pld.pmf_pair_pld(p, q).delta(eps)
    want = gdp.gaussian_delta(eps, 1.0)
    self.assertAlmostEqual(got, want, delta=1e-5 + 1e-4 * want)
    # and the PLD is an upper bound of the pair's own hockey-stick divergence
    self.assertGreaterEqual(pmf, _hockey(p, q, eps) - 1e-14)

  @parameterized.parameters(0.0, 0.4, 0.9)
  def test_binned_laplace_pair_matches_the_laplace_profile(self, eps):
    p, q = _binned(1.0, 0.0, _laplace_cdf)
    got = pld.pmf_pair_pld(p, q).delta(eps)
    self.assertAlmostEqual(got, -math.expm1((eps - 1.0) / 2), delta=2e-4)
    self.assertAlmostEqual(got, pld.laplace_pld(1.0).delta(eps), delta=2e-4)

  def test_disjoint_and_one_sided_outputs_go_to_infinity(self):
    d = pld.pmf_pair_pld([1.0, 0.0], [0.0, 1.0])
    self.assertEqual(d.delta(50.0), 1.0)
    one_sided = pld.pmf_pair_pld([0.5, 0.3, 0.2], [0.5, 0.5, 0.0])
    self.assertAlmostEqual(one_sided.infinity_mass, 0.2, places=15)
    for e in (0.0, 0.5, 3.0):
      want = max(_hockey(np.array([0.5, 0.3, 0.2]), np.array([0.5, 0.5, 0.0]), e),
                 _hockey(np.array([0.5, 0.5, 0.0]), np.array([0.5, 0.3, 0.2]), e))
      self.assertGreaterEqual(one_sided.delta(e), want - 1e-15)
      self.assertAlmostEqual(one_sided.delta(e), want, delta=1e-4)

  def test_poisson_mixture_matches_the_hockey_stick_of_the_mixture(self):
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.1, 0.3, 0.6])
    d = pld.pmf_pair_pld(p, q, sampling_prob=0.3)
    mix = 0.3 * p + 0.7 * q
    for e in (0.0, 0.2, 0.7):
      want = max(_hockey(mix, q, e), _hockey(q, mix, e))
      self.assertGreaterEqual(d.delta(e), want - 1e-15)
      self.assertAlmostEqual(d.delta(e), want, delta=1e-6)

  def test_epsilon_delta_pair_is_exactly_eps_delta(self):
    p, q = pld.epsilon_delta_pair(0.8, 1e-3)
    self.assertAlmostEqual(p.sum(), 1.0, places=15)
    self.assertAlmostEqual(_hockey(p, q, 0.8), 1e-3, places=15)
    self.assertAlmostEqual(pld.pmf_pair_pld(p, q).delta(0.8), 1e-3, places=12)

  @parameterized.parameters((0.3, 1), (0.7, 4))
  def test_discrete_laplace_pair_is_the_law_merged(self, a, sens):
    p, q = pld.discrete_laplace_pair(a, sens)
    x = np.arange(-400, 401)
    law = np.exp(-a * np.abs(x)) * math.tanh(a / 2)   # (1 - r) / (1 + r) = tanh(a / 2)
    shifted = np.exp(-a * np.abs(x - sens)) * math.tanh(a / 2)
    for e in (0.0, a / 2, a * sens):
      self.assertAlmostEqual(_hockey(p, q, e), _hockey(law, shifted, e), places=12)
    self.assertAlmostEqual(p.sum(), 1.0, places=14)

  def test_discrete_gaussian_pair_against_a_wide_window(self):
    p, q, tail = pld.discrete_gaussian_pair(1.7, 2, tail_mass=1e-12)
    self.assertLessEqual(tail, 1e-12)
    x = np.arange(-300, 301)
    w = np.exp(-x ** 2 / (2 * 1.7 ** 2))
    law, shifted = w / w.sum(), np.exp(-(x - 2) ** 2 / (2 * 1.7 ** 2)) / w.sum()
    d = pld.pmf_pair_pld(p, q, 1e-4, tail_mass=tail)
    for e in (0.0, 0.5, 2.0):
      want = _hockey(law, shifted, e)
      self.assertGreaterEqual(d.delta(e), want - 1e-15)
      self.assertAlmostEqual(d.delta(e), want, delta=1e-7)

  @parameterized.named_parameters(
      ("sum", lambda: pld.pmf_pair_pld([0.5, 0.4], [0.5, 0.5]), "probs_p_K"),
      ("shape", lambda: pld.pmf_pair_pld([0.5, 0.5], [1.0]), "probs_q_K"),
      ("negative", lambda: pld.pmf_pair_pld([1.5, -0.5], [0.5, 0.5]), "probs_p_K"),
      ("tail", lambda: pld.pmf_pair_pld([1.0], [1.0], tail_mass=0.1), "tail_mass"),
      ("dgauss_tail", lambda: pld.discrete_gaussian_pair(1.0, tail_mass=0.0), "tail_mass"),
      ("dlap", lambda: pld.discrete_laplace_pair(1.0, 0), "sensitivity"),
      ("epsdelta", lambda: pld.epsilon_delta_pair(1.0, 1.0), "delta"))
  def test_bad_input_is_named(self, call, name):
    with self.assertRaisesRegex((ValueError, TypeError), name):
      call()


class GdpMuTest(parameterized.TestCase):

  def test_exact_gaussian(self):
    self.assertEqual(pld.gaussian_pld(4.0).self_compose(16).gdp_mu(), 1.0)

  @parameterized.parameters(1e-3, 1e-4)
  def test_discretised_gaussian_is_an_upper_bound_close_to_mu(self, h):
    mu = pld.gaussian_pld(2.0).discretise(h).gdp_mu()
    self.assertGreaterEqual(mu, 0.5)
    self.assertLess(mu, 0.5 * (1 + 5e-3))

  @parameterized.named_parameters(
      ("laplace", lambda: pld.laplace_pld(1.0, value_discretization=1e-3)),
      ("rr", lambda: pld.randomized_response_pld(0.5).self_compose(4)),
      ("sampled", lambda: pld.gaussian_pld(1.0, 0.1, value_discretization=1e-3).self_compose(20)))
  def test_profile_is_dominated_and_mu_is_nearly_tight(self, build):
    d = build()
    mu = d.gdp_mu()
    top = max(d.loss_pmf(i)[0][-1] for i in range(len(d._pmfs)))  # pylint: disable=protected-access
    eps = np.linspace(0.0, top, 2001)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)   # FFT noise note at tiny delta
      got = np.array([d.delta(e) for e in eps])
    bound = np.array([gdp.gaussian_delta(e, mu) for e in eps]) + d.infinity_mass
    self.assertTrue(np.all(got <= bound + 1e-15))
    # a mu 1 % smaller is violated somewhere: the answer is not loose by more
    smaller = np.array([gdp.gaussian_delta(e, 0.99 * mu) for e in eps]) + d.infinity_mass
    self.assertTrue(np.any(got > smaller))

  def test_bad_num_epsilons(self):
    with self.assertRaisesRegex(ValueError, "num_epsilons"):
      pld.laplace_pld(1.0).gdp_mu(num_epsilons=2)


if __name__ == "__main__":
  absltest.main()
