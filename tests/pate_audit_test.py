"""Tests of dpjax/audit/pate_audit.py: exact output laws, the LLR, the exact eps, the audit."""

import math

import jax
import numpy as np
import pytest
from absl.testing import absltest
from scipy import integrate
from scipy import stats as sp_stats

from dpjax import pate
from dpjax.accounting import rdp
from dpjax.audit import pate_audit as pa

_DELTA = 1e-5


def _two_point_epsilon(p_in: float, p_out: float, delta: float) -> float:
  """Exact eps of Bernoulli(p_in) vs Bernoulli(p_out), both directions (hockey stick)."""
  cands = [math.log((p_in - delta) / p_out) if p_in > delta else 0.0,
           math.log((1 - p_out - delta) / (1 - p_in)) if 1 - p_out > delta else 0.0,
           math.log((p_out - delta) / p_in) if p_out > delta else 0.0,
           math.log((1 - p_in - delta) / (1 - p_out)) if 1 - p_in > delta else 0.0]
  return max(0.0, *cands)


def _binomial_epsilon(p_in: float, p_out: float, num_queries: int, delta: float) -> float:
  """Exact eps of Q i.i.d. Bernoulli releases (the count of label-0 answers is sufficient)."""
  k = np.arange(num_queries + 1)
  best = 0.0
  for a, b in ((p_in, p_out), (p_out, p_in)):
    log_pa = sp_stats.binom.logpmf(k, num_queries, a)
    loss = log_pa - sp_stats.binom.logpmf(k, num_queries, b)

    def delta_of(e, log_pa=log_pa, loss=loss):
      return float(np.sum(np.exp(log_pa) * np.maximum(0.0, -np.expm1(e - loss))))

    if delta_of(0.0) <= delta:
      continue
    lo, hi = 0.0, float(loss.max())
    for _ in range(100):
      mid = 0.5 * (lo + hi)
      lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    best = max(best, hi)
  return best


class OutputLawTest(absltest.TestCase):

  def test_two_classes_closed_form_and_monte_carlo(self):
    votes = np.array([[7, 3], [5, 5], [0, 4]])
    sigma = 2.0
    lp = pa.output_log_probs(votes, sigma=sigma)
    gap = (votes[:, 0] - votes[:, 1]) / (math.sqrt(2) * sigma)
    np.testing.assert_allclose(np.exp(lp[:, 0]), sp_stats.norm.cdf(gap), rtol=1e-12)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-12)
    n = 40_000
    labels = np.asarray(jax.jit(jax.vmap(lambda k: pate.gnmax(k, votes, sigma)))(
        jax.random.split(jax.random.key(1), n)))
    freq = (labels == 0).mean(axis=0)
    p = np.exp(lp[:, 0])
    # Binomial frequencies within 4.5 standard errors (family of 3 checks).
    np.testing.assert_array_less(np.abs(freq - p), 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12)

  def test_many_classes_quadrature_against_scipy_and_monte_carlo(self):
    votes = np.array([[6.0, 4.0, 3.0, 0.0]])
    sigma = 1.5
    p = np.exp(pa.output_log_probs(votes, sigma=sigma)[0])
    a = (votes[0][:, None] - votes[0][None, :]) / sigma
    for c in range(4):
      others = np.delete(a[c], c)
      ref, _ = integrate.quad(
          lambda z, o=others: sp_stats.norm.pdf(z) * np.prod(sp_stats.norm.cdf(o + z)),
          -15, 15, epsabs=1e-13, epsrel=1e-11, limit=200)
      self.assertAlmostEqual(p[c], ref, delta=1e-9 + 1e-7 * ref)
    n = 40_000
    labels = np.asarray(jax.jit(jax.vmap(lambda k: pate.gnmax(k, votes, sigma)))(
        jax.random.split(jax.random.key(2), n)))[:, 0]
    freq = np.bincount(labels, minlength=4) / n
    np.testing.assert_array_less(np.abs(freq - p), 4.5 * np.sqrt(p * (1 - p) / n) + 1e-9)

  def test_tail_of_unanimous_votes_in_log_space(self):
    # P(label 1) = Phi(-100 / sqrt(2)): far below float64's smallest normal.
    lp = pa.output_log_probs([[100, 0]], sigma=1.0)
    self.assertAlmostEqual(lp[0, 1], sp_stats.norm.logcdf(-100 / math.sqrt(2)), places=6)
    self.assertTrue(np.isfinite(lp).all())

  def test_confident_outcomes_and_monte_carlo(self):
    votes = np.array([[6, 4], [9, 1]])
    sigma, t, st = 1.0, 7.0, 2.0
    lp = pa.output_log_probs(votes, sigma=sigma, threshold=t, sigma_threshold=st)
    self.assertEqual(lp.shape, (2, 3))
    p_skip = sp_stats.norm.cdf((t - votes.max(axis=1)) / st)
    np.testing.assert_allclose(np.exp(lp[:, 2]), p_skip, rtol=1e-12)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-12)
    n = 20_000

    def one(k):
      labels, answered = pate.confident_gnmax(k, votes, threshold=t, sigma_threshold=st,
                                              sigma=sigma)
      return jax.numpy.where(answered, labels, 2)

    out = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(3), n)))
    for q in range(2):
      freq = np.bincount(out[:, q], minlength=3) / n
      p = np.exp(lp[q])
      np.testing.assert_array_less(np.abs(freq - p), 4.5 * np.sqrt(p * (1 - p) / n) + 1e-9)


class ScoreTest(absltest.TestCase):

  def test_llr_is_the_product_likelihood_ratio(self):
    v_in, v_out = np.array([[3, 1], [2, 2]]), np.array([[2, 2], [1, 3]])
    sigma = 1.0
    lp_in = pa.output_log_probs(v_in, sigma=sigma)
    lp_out = pa.output_log_probs(v_out, sigma=sigma)
    outcomes = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    scores = pa.llr_scores(outcomes, lp_in, lp_out)
    for o, s in zip(outcomes, scores):
      p_in = np.prod([sp_stats.norm.cdf((v_in[q, o[q]] - v_in[q, 1 - o[q]]) / math.sqrt(2))
                      for q in range(2)])
      p_out = np.prod([sp_stats.norm.cdf((v_out[q, o[q]] - v_out[q, 1 - o[q]]) / math.sqrt(2))
                       for q in range(2)])
      self.assertAlmostEqual(s, math.log(p_in / p_out), places=10)
    # The LLR is a likelihood ratio: E_out[exp(L)] = 1 over all outcomes.
    p_out_all = np.exp(lp_out[0][outcomes[:, 0]] + lp_out[1][outcomes[:, 1]])
    self.assertAlmostEqual(float(np.sum(p_out_all * np.exp(scores))), 1.0, places=12)

  def test_outcomes_out_of_range_rejected(self):
    lp = np.log(np.full((1, 2), 0.5))
    with self.assertRaisesRegex(ValueError, "outcomes_KxQ"):
      pa.llr_scores([[2]], lp, lp)


class ExactEpsilonTest(absltest.TestCase):

  def test_one_query_closed_form(self):
    for v_in, v_out, sigma in (([5, 4], [4, 5], 1.0), ([10, 3], [9, 4], 2.0),
                               ([2, 2], [1, 3], 0.7)):
      p_in = sp_stats.norm.cdf((v_in[0] - v_in[1]) / (math.sqrt(2) * sigma))
      p_out = sp_stats.norm.cdf((v_out[0] - v_out[1]) / (math.sqrt(2) * sigma))
      ref = _two_point_epsilon(p_in, p_out, _DELTA)
      got = pa.exact_epsilon([v_in], [v_out], sigma=sigma, delta=_DELTA)
      # Pessimistic grid of 1e-4: at or above the truth, within a few grid steps.
      self.assertBetween(got - ref, -1e-9, 3e-4)

  def test_many_identical_queries_against_the_binomial(self):
    v_in, v_out = pa.crafted_pair(21, 25)
    sigma = 3.0
    p_in = sp_stats.norm.cdf(1 / (math.sqrt(2) * sigma))
    ref = _binomial_epsilon(p_in, 1 - p_in, 25, _DELTA)
    got = pa.exact_epsilon(v_in, v_out, sigma=sigma, delta=_DELTA)
    self.assertBetween(got - ref, -1e-9, 25 * 1e-4)

  def test_equal_histograms_cost_nothing(self):
    self.assertEqual(pa.exact_epsilon([[3, 1]], [[3, 1]], sigma=1.0, delta=_DELTA), 0.0)

  def test_exact_below_data_dependent_below_claim(self):
    # The data-dependent analysis (pate, Thm 6) must upper-bound the exact eps of
    # the pair, and the data-independent claim must upper-bound both.
    for others, sigma, q in (((20, 20), 4.0, 10), ((30, 10), 4.0, 10), ((38, 2), 3.0, 20)):
      base = np.tile(np.array(others), (q, 1))
      v_in, v_out = base + [1, 0], base + [0, 1]
      exact = pa.exact_epsilon(v_in, v_out, sigma=sigma, delta=_DELTA)
      dd = max(pate.epsilon(rdp.DEFAULT_ORDERS, pate.pate_rdp(
          v, sigma=sigma, orders=rdp.DEFAULT_ORDERS).data_dependent, _DELTA) for v in (v_in, v_out))
      claim = pa.claimed_epsilon(q, sigma=sigma, delta=_DELTA)
      self.assertLessEqual(exact, dd + 1e-9, (others, exact, dd))
      self.assertLessEqual(dd, claim + 1e-9)


class HelpersTest(absltest.TestCase):

  def test_crafted_pair_is_a_neighbouring_tie(self):
    v_in, v_out = pa.crafted_pair(11, 3, num_classes=3)
    self.assertEqual(v_in.shape, (3, 3))
    np.testing.assert_array_equal(v_in.sum(axis=1), 11)
    np.testing.assert_array_equal(np.abs(v_in - v_out).sum(axis=1), 2)
    np.testing.assert_array_equal(v_in[:, 0] - v_in[:, 1], 1)
    np.testing.assert_array_equal(v_out[:, 0] - v_out[:, 1], -1)

  def test_event_language_gives_the_direct_numbers_bit_for_bit(self):
    # claimed: the RDP curve Q (alpha / sigma^2 [+ alpha / (2 sigma_t^2)]) written out;
    # the pair PLD: each distinct query's finite-output PLD, self-composed, then composed.
    from dpjax.accounting import pld  # pylint: disable=g-import-not-at-top
    lam = rdp.DEFAULT_ORDERS
    for q, s, st in ((1, 0.37, None), (30, 4.0, None), (7, 123.456, 0.9), (1000, 40.0, 150.0)):
      curve = q * pate.gnmax_rdp_data_independent(s, lam)
      if st is not None:
        curve = curve + q * pate.threshold_rdp_data_independent(st, lam)
      self.assertEqual(pa.claimed_epsilon(q, sigma=s, delta=_DELTA, sigma_threshold=st),
                       float(pate.epsilon(lam, curve, _DELTA)))
    v_in = np.array([[5, 3, 1], [5, 3, 1], [2, 2, 9], [4, 4, 4]])
    v_out = np.array([[4, 4, 1], [4, 4, 1], [2, 3, 8], [4, 4, 4]])
    for t, st in ((None, None), (6.0, 2.0)):
      lp_in = pa.output_log_probs(np.array([[2, 2, 9], [5, 3, 1]]), sigma=2.0, threshold=t,
                                  sigma_threshold=st)
      lp_out = pa.output_log_probs(np.array([[2, 3, 8], [4, 4, 1]]), sigma=2.0, threshold=t,
                                   sigma_threshold=st)
      direct = pld.finite_output_pld(lp_in[0], lp_out[0], 1e-4).compose(
          pld.finite_output_pld(lp_in[1], lp_out[1], 1e-4).self_compose(2))
      got = pa._pair_pld(v_in, v_out, 2.0, t, st)  # pylint: disable=protected-access
      for d in (0, 1):
        for a, b in zip(direct.loss_pmf(d), got.loss_pmf(d)):
          np.testing.assert_array_equal(a, b)

  def test_calibrate_sigma_round_trip(self):
    for e, q, ratio in ((1.0, 30, None), (8.0, 5, 1.5)):
      s = pa.calibrate_sigma(e, q, delta=_DELTA, threshold_ratio=ratio)
      got = pa.claimed_epsilon(q, sigma=s, delta=_DELTA,
                               sigma_threshold=None if ratio is None else ratio * s)
      self.assertBetween(got, e - 1e-6, e)
      # the claim is the pate accountant's, every query answered
      acct = pate.pate_rdp(np.tile([[9, 1]], (q, 1)), sigma=s, orders=rdp.DEFAULT_ORDERS,
                           threshold=None if ratio is None else 5.0,
                           sigma_threshold=None if ratio is None else ratio * s)
      self.assertAlmostEqual(pate.epsilon(rdp.DEFAULT_ORDERS, acct.data_independent, _DELTA), got,
                             places=9)


class AuditTest(absltest.TestCase):

  def test_correct_gnmax_stays_below_exact_and_claim(self):
    v_in, v_out = pa.crafted_pair(251, 1)
    sigma = pa.calibrate_sigma(8.0, 1, delta=_DELTA)
    r = pa.audit_labels(jax.random.key(0), v_in, v_out, sigma=sigma, num_trials=20_000,
                        delta=_DELTA)
    p_in = sp_stats.norm.cdf(1 / (math.sqrt(2) * sigma))
    exact = _two_point_epsilon(p_in, 1 - p_in, _DELTA)
    self.assertAlmostEqual(r.exact_epsilon, exact, delta=3e-4)
    self.assertLessEqual(r.epsilon_lower, exact)
    self.assertLessEqual(r.epsilon_lower, r.ceiling)
    self.assertFalse(r.falsified)
    self.assertFalse(r.exceeds_exact)
    self.assertAlmostEqual(r.claimed_epsilon, 8.0, delta=1e-6)
    # The LLR test of one tied binary query is the best test: with 20,000 trials
    # per side it certifies most of the exact eps (expected ~0.97 of it).
    self.assertGreater(r.epsilon_lower, 0.8 * exact)
    self.assertEqual({(p.positives, p.negatives) for p in r.bound.parts}, {(20_000, 20_000)})
    self.assertEqual(r.answered_in, 1.0)

  def test_half_noise_is_caught(self):
    # Noise at half scale: above the exact eps of the claimed aggregator on the pair.
    v_in, v_out = pa.crafted_pair(251, 1)
    sigma = pa.calibrate_sigma(8.0, 1, delta=_DELTA)
    r = pa.audit_labels(jax.random.key(1), v_in, v_out, sigma=sigma, num_trials=20_000,
                        delta=_DELTA,
                        aggregator=lambda k, v, sigma: pate.gnmax(k, v, sigma / 2))
    self.assertTrue(r.exceeds_exact, r)
    p_half = sp_stats.norm.cdf(1 / (math.sqrt(2) * sigma / 2))
    self.assertLessEqual(r.epsilon_lower, _two_point_epsilon(p_half, 1 - p_half, _DELTA))

  @pytest.mark.slow
  def test_quarter_noise_exceeds_the_claim(self):
    # Noise at a quarter scale on 10 queries: above the data-independent claim.
    v_in, v_out = pa.crafted_pair(251, 10)
    sigma = pa.calibrate_sigma(2.0, 10, delta=_DELTA)
    r = pa.audit_labels(jax.random.key(2), v_in, v_out, sigma=sigma, num_trials=10_000,
                        delta=_DELTA,
                        aggregator=lambda k, v, sigma: pate.gnmax(k, v, sigma / 4))
    self.assertTrue(r.falsified, r)
    self.assertLessEqual(r.epsilon_lower,
                         pa.exact_epsilon(v_in, v_out, sigma=sigma / 4, delta=_DELTA))

  def test_confident_gnmax(self):
    v_in, v_out = pa.crafted_pair(21, 4)
    sigma, t, st = 2.0, 12.0, 2.0
    r = pa.audit_labels(jax.random.key(3), v_in, v_out, sigma=sigma, threshold=t,
                        sigma_threshold=st, num_trials=10_000, delta=_DELTA)
    self.assertLessEqual(r.epsilon_lower, r.exact_epsilon)
    self.assertLessEqual(r.exact_epsilon, r.claimed_epsilon)
    self.assertAlmostEqual(r.claimed_epsilon,
                           pa.claimed_epsilon(4, sigma=sigma, delta=_DELTA, sigma_threshold=st))
    p_answer = sp_stats.norm.sf((t - 11) / st)       # max count 11 in both worlds
    se = math.sqrt(p_answer * (1 - p_answer) / (4 * 10_000))
    self.assertAlmostEqual(r.answered_in, p_answer, delta=5 * se)
    self.assertAlmostEqual(r.answered_out, p_answer, delta=5 * se)

  def test_validation(self):
    v_in, v_out = pa.crafted_pair(5, 2)
    kw = dict(sigma=1.0, num_trials=4, delta=_DELTA)
    with self.assertRaisesRegex(ValueError, "one teacher's vote"):
      pa.audit_labels(jax.random.key(0), v_in + [1, -1], v_out, **kw)
    with self.assertRaisesRegex(ValueError, "same number of teachers"):
      pa.audit_labels(jax.random.key(0), v_in + [1, 0], v_out, **kw)
    with self.assertRaisesRegex(ValueError, "same shape"):
      pa.audit_labels(jax.random.key(0), v_in, v_out[:1], **kw)
    with self.assertRaisesRegex(ValueError, "integers"):
      pa.audit_labels(jax.random.key(0), v_in + 0.5, v_out + 0.5, **kw)
    with self.assertRaisesRegex(ValueError, "threshold"):
      pa.audit_labels(jax.random.key(0), v_in, v_out, threshold=3.0, **kw)
    with self.assertRaisesRegex(TypeError, "aggregator"):
      pa.audit_labels(jax.random.key(0), v_in, v_out, aggregator=3, **kw)
    with self.assertRaisesRegex(ValueError, "aggregator"):
      pa.audit_labels(jax.random.key(0), v_in, v_out,
                      aggregator=lambda k, v, sigma: pate.gnmax(k, v, sigma)[:1], **kw)
    with self.assertRaisesRegex(ValueError, "aggregator"):
      pa.audit_labels(jax.random.key(0), v_in, v_out,
                      aggregator=lambda k, v, sigma: pate.gnmax(k, v, sigma) + 5, **kw)


if __name__ == "__main__":
  absltest.main()
