"""Tests for dpjax.pate: noisy-argmax privacy against exact output distributions,
the data-dependent bound against the data-independent one (the teachers and students:
pate_aggregation_test)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from scipy import special, stats

from dpjax import pate
from dpjax.accounting import rdp

ORDERS = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])

# A fine grid for the 1-D integrals below: z in [-14, 14], h = 2e-3, so the trapezoid
# error on these smooth Gaussian integrands is far below 1e-9 relative.
_Z = np.linspace(-14.0, 14.0, 14_001)
_LOG_H = math.log(_Z[1] - _Z[0])


def _gnmax_log_probs(votes, sigma):
  """Exact log Pr[GNMax(votes) = i] for every class i, by 1-D quadrature in log space:
  Pr[i] = int phi(z) prod_{j != i} Phi((n_i - n_j)/sigma + z) dz."""
  v = np.asarray(votes, np.float64)
  out = []
  for i in range(v.size):
    terms = stats.norm.logpdf(_Z)
    for j in range(v.size):
      if j != i:
        terms = terms + stats.norm.logcdf((v[i] - v[j]) / sigma + _Z)
    out.append(special.logsumexp(terms) + _LOG_H)
  return np.array(out)


def _lnmax_log_probs(votes, b):
  """Exact log Pr[LNMax(votes) = i]: int f_b(z) prod_{j != i} F_b(n_i - n_j + z) dz."""
  v = np.asarray(votes, np.float64)
  z = np.linspace(-60.0 * b, 60.0 * b, 120_001)
  log_h = math.log(z[1] - z[0])
  out = []
  for i in range(v.size):
    terms = stats.laplace.logpdf(z, scale=b)
    for j in range(v.size):
      if j != i:
        terms = terms + stats.laplace.logcdf(v[i] - v[j] + z, scale=b)
    out.append(special.logsumexp(terms) + log_h)
  return np.array(out)


def _renyi(logp, logq, alpha):
  return special.logsumexp(alpha * logp + (1.0 - alpha) * logq) / (alpha - 1.0)


def _neighbours(votes):
  """All histograms reachable by one teacher changing its vote."""
  v = list(votes)
  for i, j in itertools.permutations(range(len(v)), 2):
    if v[i] > 0:
      w = list(v)
      w[i] -= 1
      w[j] += 1
      yield w


class AggregatorTest(parameterized.TestCase):

  def test_vote_histogram_counts(self):
    preds = jnp.array([[0, 1, 2], [0, 1, 1], [2, 1, 1]])  # 3 teachers x 3 queries
    np.testing.assert_array_equal(np.asarray(pate.vote_histogram(preds, 3)),
                                  [[2, 0, 1], [0, 3, 0], [0, 2, 1]])

  @parameterized.named_parameters(
      ("gnmax", pate.gnmax, [6.0, 4.0, 1.0], 2.0, _gnmax_log_probs, 0, 6),
      ("lnmax", pate.lnmax, [5.0, 4.0, 2.0], 1.5, _lnmax_log_probs, 1, 5))
  def test_frequencies_match_exact_probabilities(self, aggregate, votes, scale, log_probs,
                                                 seed, places):
    votes, n = np.array(votes), 40_000
    out = np.asarray(aggregate(jax.random.key(seed), np.tile(votes, (n, 1)), scale))
    freq = np.bincount(out, minlength=3) / n
    p = np.exp(log_probs(votes, scale))
    self.assertAlmostEqual(p.sum(), 1.0, places=places)
    np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(0.25 / n))

  def test_confident_gnmax_answer_rate(self):
    votes = np.tile([30.0, 10.0, 10.0], (40_000, 1))
    _, answered = pate.confident_gnmax(jax.random.key(2), votes, threshold=33.0,
                                       sigma_threshold=4.0, sigma=2.0)
    want = stats.norm.sf((33.0 - 30.0) / 4.0)
    self.assertAlmostEqual(float(np.mean(answered)), want, delta=5 * np.sqrt(0.25 / 40_000))
    self.assertAlmostEqual(math.exp(pate.threshold_log_pr_answered([30, 10, 10], 33.0, 4.0)),
                           want, places=12)


class AccountingTest(parameterized.TestCase):

  def test_data_independent_equals_gaussian_mechanism_closed_form(self):
    # L2 sensitivity sqrt(2) -> a Gaussian mechanism with noise multiplier sigma / sqrt(2).
    for sigma in (0.7, 3.0, 40.0):
      np.testing.assert_allclose(pate.gnmax_rdp_data_independent(sigma, ORDERS),
                                 rdp.gaussian_rdp(sigma / math.sqrt(2.0), ORDERS), rtol=1e-12)
      np.testing.assert_allclose(pate.threshold_rdp_data_independent(sigma, ORDERS),
                                 rdp.gaussian_rdp(sigma, ORDERS), rtol=1e-12)

  @parameterized.named_parameters(
      ("split", [6, 4, 1], 2.0),
      ("close", [5, 5, 2], 1.0),
      ("consensus", [20, 1, 0], 1.5),
      ("strong", [30, 0, 0], 3.0),
  )
  def test_exact_divergence_below_both_bounds(self, votes, sigma):
    # The exact order-alpha divergence between GNMax's output distributions on a
    # histogram and on each of its neighbours is below the data-dependent bound at
    # that histogram, which is itself below the data-independent alpha / sigma^2.
    lp = _gnmax_log_probs(votes, sigma)
    ind = pate.gnmax_rdp_data_independent(sigma, ORDERS)
    dep = pate.gnmax_rdp_data_dependent(votes, sigma, ORDERS)
    self.assertTrue(np.all(dep <= ind + 1e-12))
    worst = np.zeros_like(ORDERS)
    for w in _neighbours(votes):
      lq = _gnmax_log_probs(w, sigma)
      worst = np.maximum(worst, [_renyi(lp, lq, a) for a in ORDERS])
    self.assertTrue(np.all(worst <= dep * (1 + 1e-6) + 1e-9), (worst, dep))

  def test_data_dependent_is_active_and_tight_enough_on_consensus(self):
    # Unanimous 30 of 30 with sigma = 3: q ~ 1e-12, so at moderate orders the
    # data-dependent bound is orders of magnitude below alpha / sigma^2 (a check that
    # the theorem's branch is actually taken, not just the fallback).
    dep = pate.gnmax_rdp_data_dependent([30, 0, 0], 3.0, ORDERS)
    ind = pate.gnmax_rdp_data_independent(3.0, ORDERS)
    self.assertLess(dep[3], 1e-3 * ind[3])

  def test_data_dependent_never_above_data_independent_random(self):
    rng = np.random.default_rng(0)
    orders = rdp.DEFAULT_ORDERS
    for _ in range(300):
      c = int(rng.integers(2, 11))
      m = int(rng.integers(1, 300))
      votes = rng.multinomial(m, rng.dirichlet(np.full(c, 0.3)))
      sigma = float(rng.uniform(0.5, 100.0))
      dep = pate.gnmax_rdp_data_dependent(votes, sigma, orders)
      self.assertTrue(np.all(dep <= pate.gnmax_rdp_data_independent(sigma, orders) + 1e-12))
      self.assertTrue(np.all(dep >= 0))
      t_dep = pate.threshold_rdp_data_dependent(votes, 0.6 * m, sigma, orders)
      self.assertTrue(np.all(t_dep <= pate.threshold_rdp_data_independent(sigma, orders) + 1e-12))
      b = float(rng.uniform(0.2, 50.0))
      l_dep = pate.lnmax_rdp_data_dependent(votes, b, orders)
      self.assertTrue(np.all(l_dep <= pate.lnmax_rdp_data_independent(b, orders) + 1e-12))

  def test_log_q_is_an_upper_bound_and_exact_for_two_classes(self):
    for votes, sigma in (([7, 3], 2.0), ([10, 9], 0.5)):
      lp = _gnmax_log_probs(votes, sigma)
      self.assertAlmostEqual(pate.gnmax_log_q(votes, sigma), lp[1], places=6)
    for votes, sigma in (([7, 3, 2, 1], 2.0), ([12, 11, 0], 1.0)):
      lp = _gnmax_log_probs(votes, sigma)
      p_not = -np.expm1(lp[int(np.argmax(votes))])
      self.assertLessEqual(p_not, math.exp(pate.gnmax_log_q(votes, sigma)) * (1 + 1e-9))
    for votes, b in (([7, 3, 2], 1.0), ([4, 4, 1], 2.0)):
      lp = _lnmax_log_probs(votes, b)
      p_not = -np.expm1(lp[int(np.argmax(votes))])
      self.assertLessEqual(p_not, math.exp(pate.lnmax_log_q(votes, b)) * (1 + 1e-6))

  @parameterized.named_parameters(("b1", 1.0), ("b3", 3.0))
  def test_lnmax_is_pure_dp_with_eps_2_over_b(self, b):
    eps = pate.lnmax_epsilon(b)
    self.assertAlmostEqual(eps, 2.0 / b)
    votes = [4, 2, 1]
    lp = _lnmax_log_probs(votes, b)
    worst = 0.0
    for w in _neighbours(votes):
      worst = max(worst, float(np.max(np.abs(lp - _lnmax_log_probs(w, b)))))
    self.assertLessEqual(worst, eps + 1e-6)
    self.assertGreater(worst, 0.3 * eps)  # the check is not vacuous

  def test_pate_rdp_composes_per_query(self):
    votes = np.array([[9, 1, 0], [5, 4, 1], [10, 0, 0]])
    answered = np.array([True, False, True])
    r = pate.pate_rdp(votes, answered, sigma=2.0, orders=ORDERS, threshold=7.0,
                      sigma_threshold=3.0)
    want_ind = (3 * pate.threshold_rdp_data_independent(3.0, ORDERS)
                + 2 * pate.gnmax_rdp_data_independent(2.0, ORDERS))
    np.testing.assert_allclose(r.data_independent, want_ind)
    want_dep = sum(pate.threshold_rdp_data_dependent(v, 7.0, 3.0, ORDERS) for v in votes)
    want_dep = want_dep + sum(pate.gnmax_rdp_data_dependent(votes[i], 2.0, ORDERS) for i in (0, 2))
    np.testing.assert_allclose(r.data_dependent, want_dep)
    self.assertEqual(r.num_answered, 2)
    e_ind = pate.epsilon(r.orders, r.data_independent, 1e-5)
    e_dep = pate.epsilon(r.orders, r.data_dependent, 1e-5)
    self.assertLessEqual(e_dep, e_ind)
    self.assertAlmostEqual(e_ind, rdp.rdp_to_epsilon(ORDERS, want_ind, 1e-5)[0])

  def test_grouped_accounting_equals_pate_rdp(self):
    rng = np.random.default_rng(0)
    top = rng.integers(6, 13, 60)
    votes = np.stack([top, 12 - top], axis=1)   # 60 queries, at most 7 distinct histograms
    answered = rng.random(60) < 0.6
    orders = rdp.DEFAULT_ORDERS
    cache = {}
    for kw in (dict(), dict(threshold=9.0, sigma_threshold=2.0)):
      with self.subTest(**kw):
        ans = answered if kw else np.ones(60, bool)
        ref = pate.pate_rdp(votes, ans, sigma=1.5, orders=orders, **kw)
        got = pate.pate_rdp_grouped(votes, ans, sigma=1.5, orders=orders, cache=cache, **kw)
        self.assertEqual(got.num_answered, ref.num_answered)
        np.testing.assert_allclose(got.data_independent, ref.data_independent, rtol=1e-12)
        np.testing.assert_allclose(got.data_dependent, ref.data_dependent, rtol=1e-10)
    self.assertNotEmpty(cache)

  @parameterized.named_parameters(
      ("sigma", lambda: pate.gnmax_rdp_data_independent(0.0, ORDERS), "sigma"),
      ("orders", lambda: pate.gnmax_rdp_data_independent(1.0, [1.0]), "orders"),
      ("log_q", lambda: pate.gaussian_rdp_data_dependent(0.5, 1.0, ORDERS), "log_q"),
      ("votes", lambda: pate.gnmax_log_q([3], 1.0), "votes"),
      ("neg_votes", lambda: pate.gnmax_log_q([3, -1], 1.0), "votes"),
      ("scale", lambda: pate.lnmax_epsilon(-1.0), "laplace_scale"),
      ("teachers", lambda: pate.partition(jax.random.key(0), 5, 6), "num_teachers"),
      ("agg", lambda: pate.pate_rdp([[1, 2]], sigma=1.0, orders=ORDERS, aggregator="x"),
       "aggregator"),
      ("thresh", lambda: pate.pate_rdp([[1, 2]], sigma=1.0, orders=ORDERS, threshold=1.0),
       "threshold"),
      ("answered", lambda: pate.pate_rdp([[1, 2]], [True, False], sigma=1.0, orders=ORDERS),
       "answered_Q"),
  )
  def test_bad_inputs_raise(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


class PateEventTest(parameterized.TestCase):
  """The releasable statement is built from events (`dpjax.accounting.events`)."""

  def test_gnmax_answer_event_is_the_histogram_gaussian(self):
    # the histogram pair N(n, s^2 I) vs N(n + e_i - e_j, s^2 I): shift norm sqrt(2), so
    # RDP alpha / s^2 and the exact profile of a Gaussian with mu = sqrt(2) / s
    from dpjax.accounting import event_accounting as ea, gdp  # pylint: disable=g-import-not-at-top
    e = pate.answer_event(3.0)
    np.testing.assert_array_equal(ea.rdp_curve(e, ORDERS)[1],
                                  pate.gnmax_rdp_data_independent(3.0, ORDERS))
    self.assertAlmostEqual(ea.epsilon(e, 1e-5), gdp.gaussian_epsilon(1e-5, math.sqrt(2) / 3.0),
                           delta=1e-9)

  @parameterized.parameters(0.7, 2.0)
  def test_lnmax_answer_event_is_two_laplace_counts(self, b):
    # two counts move by 1 under Lap(b) noise: twice the 1-D Renyi divergence (quadrature),
    # below the pure-DP bound min(eps, alpha eps^2 / 2) with eps = 2 / b
    from dpjax.accounting import event_accounting as ea  # pylint: disable=g-import-not-at-top
    x = np.linspace(-60.0 * b, 60.0 * b, 600_001)
    lp, lq = -np.abs(x) / b - math.log(2 * b), -np.abs(x - 1.0) / b - math.log(2 * b)
    one = np.array([special.logsumexp(a * lp + (1 - a) * lq) + math.log(x[1] - x[0])
                    for a in ORDERS]) / (ORDERS - 1)
    got = ea.rdp_curve(pate.answer_event(b, "lnmax"), ORDERS)[1]
    np.testing.assert_allclose(got, 2 * one, rtol=1e-6)
    self.assertTrue(np.all(got <= pate.lnmax_rdp_data_independent(b, ORDERS) + 1e-12))
    # pure (2 / b)-DP, up to one step (1e-4) of the PLD grid, which rounds losses up
    self.assertLessEqual(ea.epsilon(pate.answer_event(b, "lnmax"), 1e-12), 2.0 / b + 1e-4)

  def test_accounting_is_the_aggregation_event(self):
    from dpjax.accounting import event_accounting as ea, gdp  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    votes = rng.multinomial(20, [0.6, 0.3, 0.1], size=40)
    answered = rng.random(40) < 0.5
    kw = dict(sigma=4.0, threshold=12.0, sigma_threshold=6.0)
    event = pate.aggregation_event(40, int(answered.sum()), sigma=4.0, sigma_threshold=6.0)
    want = ea.rdp_curve(event, ORDERS)[1]
    grouped = pate.pate_rdp_grouped(votes, answered, orders=ORDERS, **kw)
    np.testing.assert_array_equal(grouped.data_independent, want)
    per_query = pate.pate_rdp(votes, answered, orders=ORDERS, **kw)
    np.testing.assert_allclose(per_query.data_independent, want, rtol=1e-13)
    # Gaussians only: the PLD is the exact GDP profile, below the RDP conversion
    mu = math.sqrt(2 * answered.sum() / 16.0 + 40 / 36.0)
    self.assertAlmostEqual(ea.epsilon(event, 1e-5), gdp.gaussian_epsilon(1e-5, mu), delta=1e-9)
    self.assertLess(ea.epsilon(event, 1e-5), pate.epsilon(ORDERS, want, 1e-5))
    one = pate.confident_gnmax_rdp(votes, orders=ORDERS, **kw)
    np.testing.assert_array_equal(one.data_independent, 40 * ea.rdp_curve(
        pate.aggregation_event(1, 1, sigma=4.0, sigma_threshold=6.0), ORDERS)[1])
    self.assertIsNone(pate.aggregation_event(5, 0, sigma=1.0))

  def test_lnmax_data_dependent_stays_below_the_event(self):
    rng = np.random.default_rng(4)
    votes = rng.multinomial(30, [0.8, 0.15, 0.05], size=20)
    r = pate.pate_rdp(votes, sigma=3.0, orders=ORDERS, aggregator="lnmax")
    self.assertTrue(np.all(r.data_dependent <= r.data_independent + 1e-12))

  @parameterized.named_parameters(
      ("answered", lambda: pate.aggregation_event(3, 4, sigma=1.0), "num_queries"),
      ("negative", lambda: pate.aggregation_event(-1, 0, sigma=1.0), "num_queries"),
      ("lnmax_threshold", lambda: pate.aggregation_event(3, 1, sigma=1.0, sigma_threshold=1.0,
                                                         aggregator="lnmax"), "threshold"),
      ("sigma", lambda: pate.answer_event(0.0), "sigma"),
      ("aggregator", lambda: pate.answer_event(1.0, "max"), "aggregator"),
      ("sigma_threshold", lambda: pate.threshold_event(-1.0), "sigma_threshold"))
  def test_event_inputs_are_named(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


def _confident_two_class_log_probs(v, m, threshold, sigma_t, sigma):
  """Exact log-probabilities of (refused, answered class 0, answered class 1) for the
  two-class histogram (v, m - v): the check (on max(v, m - v)) and the argmax use
  independent noise, and
  the argmax of two noisy counts is class 0 iff N(0, 2 sigma^2) > -(2 v - m)."""
  top = max(v, m - v)  # the check looks at the largest count
  lp_ans = stats.norm.logcdf((top - threshold) / sigma_t)
  lp_ref = stats.norm.logsf((top - threshold) / sigma_t)
  z = (2.0 * v - m) / (math.sqrt(2.0) * sigma)
  return np.array([lp_ref, lp_ans + stats.norm.logcdf(z), lp_ans + stats.norm.logsf(z)])


def _renyi_finite(logp, logq, orders):
  """Exact D_alpha(P || Q) of two finite distributions given in log space: float64[A]."""
  a = np.asarray(orders)[:, None]
  return special.logsumexp(a * logp[None, :] + (1.0 - a) * logq[None, :], axis=1) / (
      np.asarray(orders) - 1.0)


class ConfidentGnmaxRdpTest(parameterized.TestCase):

  @parameterized.parameters((30, 20.0, 6.0, 3.0), (30, 12.0, 40.0, 2.0), (250, 200.0, 150.0, 40.0))
  def test_bounds_the_exact_divergence_to_every_neighbour(self, m, threshold, sigma_t, sigma):
    # Two-class histograms (v, m - v) and both neighbours (v - 1 and v + 1 where
    # they exist): the exact Renyi divergence of the answer-or-refuse output never
    # exceeds the per-query bound, at every order.
    worst = 0.0
    for v in range(0, m + 1, max(1, m // 40)):  # every histogram, or every 6th of 250
      votes = np.array([[v, m - v]], np.float64)
      bound = pate.confident_gnmax_rdp(votes, threshold=threshold, sigma_threshold=sigma_t,
                                       sigma=sigma, orders=ORDERS).data_dependent
      lp = _confident_two_class_log_probs(v, m, threshold, sigma_t, sigma)
      for w in (v - 1, v + 1):
        if 0 <= w <= m:
          exact = _renyi_finite(lp, _confident_two_class_log_probs(w, m, threshold, sigma_t, sigma),
                         ORDERS)
          np.testing.assert_array_less(exact, bound * (1 + 1e-9) + 1e-12)
          worst = max(worst, float(np.max(exact / np.maximum(bound, 1e-300))))
    self.assertGreater(worst, 0.05)  # the bound is not vacuous somewhere on the grid

  def test_data_independent_curve_charges_every_query_both_steps(self):
    votes = np.array([[20.0, 5.0, 5.0], [10.0, 10.0, 10.0], [30.0, 0.0, 0.0]])
    r = pate.confident_gnmax_rdp(votes, threshold=18.0, sigma_threshold=4.0, sigma=2.0,
                                 orders=ORDERS)
    np.testing.assert_allclose(r.data_independent, 3 * (ORDERS / 32.0 + ORDERS / 4.0), rtol=1e-12)
    self.assertTrue(np.all(r.data_dependent <= r.data_independent))
    self.assertTrue(np.all(r.data_dependent >= 0.0))
    self.assertEqual(r.num_answered, -1)

  def test_answered_only_charge_is_below_the_exact_divergence_for_a_coin_flip_answer(self):
    # A contested two-class query answered with probability 1/2 (T = v, a check so
    # noisy it carries nothing): the paper's answered-only accounting charges the
    # argmax half the time, i.e. check + argmax / 2 in expectation; the exact Renyi
    # divergence of the whole step is larger at high orders, and the unconditional
    # bound covers it.
    m, v, sigma = 20, 10, 1.0
    order = np.array([32.0])
    lp = _confident_two_class_log_probs(v, m, float(v), 1e4, sigma)
    lq = _confident_two_class_log_probs(v + 1, m, float(v), 1e4, sigma)
    exact = _renyi_finite(lp, lq, order)[0]
    z0, z1 = 0.0, 2.0 / (math.sqrt(2.0) * sigma)
    argmax_exact = _renyi_finite(np.array([stats.norm.logcdf(z0), stats.norm.logsf(z0)]),
                          np.array([stats.norm.logcdf(z1), stats.norm.logsf(z1)]), order)[0]
    check_exact = _renyi_finite(np.array([lp[0], np.logaddexp(lp[1], lp[2])]),
                         np.array([lq[0], np.logaddexp(lq[1], lq[2])]), order)[0]
    self.assertGreater(exact, 1.5 * (check_exact + 0.5 * argmax_exact))
    bound = pate.confident_gnmax_rdp([[v, m - v]], threshold=float(v), sigma_threshold=1e4,
                                     sigma=sigma, orders=order).data_dependent[0]
    self.assertGreaterEqual(bound, exact)

  def test_rejects_bad_inputs(self):
    ok = dict(threshold=5.0, sigma_threshold=1.0, sigma=1.0, orders=[2.0])
    with self.assertRaisesRegex(ValueError, "sigma_threshold"):
      pate.confident_gnmax_rdp([[5.0, 1.0]], **{**ok, "sigma_threshold": 0.0})
    with self.assertRaisesRegex(ValueError, "same number of teachers"):
      pate.confident_gnmax_rdp([[5.0, 1.0], [3.0, 1.0]], **ok)
    with self.assertRaisesRegex(ValueError, "votes_QxC"):
      pate.confident_gnmax_rdp([5.0, 1.0], **ok)

if __name__ == "__main__":
  absltest.main()
