"""Tests for dpjax.audit.one_run_fdp: the f-DP one-run test and its trade-off families."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats

from dpjax.accounting import gdp
from dpjax.audit import one_run, one_run_fdp


def _gaussian_one_run(rng, m, mu, k):
  """One exactly mu-GDP one-run game: m canaries, bits ~ Bernoulli(1/2), score N(mu b, 1).

  Guesses IN for the top k scores and OUT for the bottom k; returns the correct count.
  """
  bits = rng.random(m) < 0.5
  order = np.argsort(-(mu * bits + rng.normal(size=m)))
  return int(bits[order[:k]].sum()) + int((~bits[order[m - k:]]).sum())


class FdpOneRunTest(parameterized.TestCase):
  """The f-DP one-run test of Mahloujifar, Melis & Chaudhuri 2025."""

  def test_all_correct_pure_dp_is_randomized_response_closed_form(self):
    # delta = 0, v = r: the rejection boundary is p^r = alpha with p = e^eps / (1 + e^eps),
    # the same closed form as Steinke et al.'s (all guesses right).
    for r in (10, 100):
      p = 0.05 ** (1 / r)
      want = math.log(p / (1 - p))
      got = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=2 * r, num_guesses=r, num_correct=r,
                                            delta=0.0).epsilon_lower
      self.assertAlmostEqual(got, want, delta=1e-4)
      self.assertLessEqual(got, want + 1e-9)          # the search never overshoots

  @parameterized.parameters((1000, 100, 90), (1000, 500, 400), (10_000, 1000, 900),
                            (1000, 1000, 700), (100, 50, 45))
  def test_against_steinke(self, m, r, v):
    # Pure DP: Steinke et al.'s test is the exact binomial tail of randomized
    # response, which the f-DP recursion (a bound for every f) cannot beat; it must
    # stay within 3% of it. With f = G_mu (the paper's Gaussian setting) the f-DP
    # bound is the tighter one, as the paper reports.
    steinke = one_run.epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v)
    fdp_dp = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                             delta=0.0).epsilon_lower
    fdp_gdp = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                              delta=1e-5, family="gdp").epsilon_lower
    steinke_d = one_run.epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                            delta=1e-5)
    self.assertLessEqual(fdp_dp, steinke + 1e-6)
    self.assertGreater(fdp_dp, 0.97 * steinke)
    self.assertGreater(fdp_gdp, steinke_d)

  def test_delta_does_not_scale_with_canaries(self):
    # Steinke et al. pay 2 m delta in the p-value; the f-DP test with the
    # (eps, delta) trade-off function does not, so with many canaries it wins.
    m, r, v, delta = 10_000, 200, 199, 1e-5
    steinke = one_run.epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                          delta=delta)
    fdp = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=m, num_guesses=r, num_correct=v,
                                          delta=delta).epsilon_lower
    self.assertGreater(fdp, steinke + 0.1)

  def test_monotone(self):
    # More correct guesses -> a larger bound; rejection monotone in mu (a prefix).
    eps = [one_run_fdp.fdp_epsilon_lower_bound(num_canaries=500, num_guesses=100, num_correct=v,
                                           delta=1e-5, family="gdp").epsilon_lower
           for v in range(50, 101, 5)]
    d = np.diff(eps)
    self.assertTrue(np.all(d >= 0) and np.all(d[np.array(eps[:-1]) > 0] > 0), eps)
    self.assertEqual(eps[0], 0.0)
    rej = [one_run_fdp.fdp_rejects(num_canaries=500, num_guesses=100, num_correct=90,
                               family="gdp", parameter=mu) for mu in np.linspace(0.05, 3, 60)]
    k = int(np.sum(rej))
    self.assertTrue(0 < k < 60 and all(rej[:k]) and not any(rej[k:]), rej)
    # the mu reported is rejected, and a little more is not
    res = one_run_fdp.fdp_epsilon_lower_bound(num_canaries=500, num_guesses=100, num_correct=90,
                                          delta=1e-5, family="gdp")
    kw = dict(num_canaries=500, num_guesses=100, num_correct=90, family="gdp")
    self.assertTrue(one_run_fdp.fdp_rejects(parameter=res.mu_lower, **kw))
    self.assertFalse(one_run_fdp.fdp_rejects(parameter=res.mu_lower * 1.001, **kw))
    self.assertAlmostEqual(res.epsilon_lower, gdp.gaussian_epsilon(1e-5, res.mu_lower),
                           places=9)

  def test_validity_by_monte_carlo(self):
    # 200 one-run games of an exactly mu-GDP mechanism (m = 400 canaries, 40 + 40
    # guesses fixed in advance): the mu bound may exceed the true mu in at most
    # 5% of them plus three binomial standard errors (0.05 + 3 * 0.0154 = 0.096);
    # and the bound must carry signal (median > 0.5 mu).
    mu, m, k, n_sim = 2.0, 400, 40, 200
    rng = np.random.default_rng(7)
    lows = np.array([one_run_fdp.fdp_epsilon_lower_bound(
        num_canaries=m, num_guesses=2 * k, num_correct=_gaussian_one_run(rng, m, mu, k),
        delta=1e-5, family="gdp").mu_lower for _ in range(n_sim)])
    self.assertLessEqual(np.mean(lows > mu), 0.096)
    self.assertGreater(np.median(lows), 0.5 * mu)

  def test_null_game_rejects_rarely(self):
    # mu = 0 (no signal): any positive bound is a false rejection; <= 5% + 3 s.e.
    rng = np.random.default_rng(8)
    lows = np.array([one_run_fdp.fdp_epsilon_lower_bound(
        num_canaries=300, num_guesses=60, num_correct=_gaussian_one_run(rng, 300, 0.0, 30),
        delta=1e-5).epsilon_lower for _ in range(200)])
    self.assertLessEqual(np.mean(lows > 0), 0.096)

  def test_p_value_never_below_the_randomized_response_tail(self):
    # eps-randomized response attains the (eps, 0)-DP curve, and for it P[V >= v] is
    # exactly the binomial tail of Steinke et al.: a valid bound can never be below it.
    for r, v, eps in ((10, 10, 0.0), (100, 90, 1.0), (100, 70, 0.5), (500, 300, 0.2),
                      (200, 150, 1.5)):
      exact = stats.binom.sf(v - 1, r, 1 / (1 + math.exp(-eps)))
      got = one_run_fdp.fdp_p_value(num_canaries=1000, num_guesses=r, num_correct=v, family="dp",
                                parameter=eps)
      self.assertGreaterEqual(got, exact * (1 - 1e-9), (r, v, eps))
      self.assertLess(got, 1.3 * exact + 1e-12, (r, v, eps))      # and close to it

  def test_p_value_bounds_the_gaussian_tail_by_monte_carlo(self):
    # 4,000 exactly 1-GDP games (m = 200, 20 + 20 guesses): the empirical P[V >= v]
    # stays below the f-DP bound (+ 3 binomial standard errors) at every v.
    rng = np.random.default_rng(10)
    v_games = np.array([_gaussian_one_run(rng, 200, 1.0, 20) for _ in range(4000)])
    for v in (26, 30, 34, 38):
      emp = np.mean(v_games >= v)
      bound = one_run_fdp.fdp_p_value(num_canaries=200, num_guesses=40, num_correct=v,
                                  family="gdp", parameter=1.0)
      self.assertLessEqual(emp, bound + 3 * math.sqrt(max(bound, 1e-4) * (1 - bound) / 4000),
                           (v, emp, bound))
    # and the test rejects at alpha exactly when the bound is below alpha (up to the grid)
    for v in (30, 34, 38):
      p = one_run_fdp.fdp_p_value(num_canaries=200, num_guesses=40, num_correct=v, family="gdp",
                              parameter=1.0)
      kw = dict(num_canaries=200, num_guesses=40, num_correct=v, family="gdp", parameter=1.0)
      if p < 0.9:
        self.assertTrue(one_run_fdp.fdp_rejects(confidence=1 - p * 1.001, **kw))
        self.assertFalse(one_run_fdp.fdp_rejects(confidence=1 - p * 0.99, **kw))

  def test_validation(self):
    kw = dict(num_canaries=10, num_guesses=5, num_correct=4)
    with self.assertRaisesRegex(ValueError, "family"):
      one_run_fdp.fdp_rejects(family="rdp", parameter=1.0, **kw)
    with self.assertRaisesRegex(ValueError, "parameter"):
      one_run_fdp.fdp_rejects(family="gdp", parameter=0.0, **kw)
    with self.assertRaisesRegex(ValueError, "delta"):
      one_run_fdp.fdp_epsilon_lower_bound(delta=0.0, family="gdp", **kw)
    with self.assertRaisesRegex(ValueError, "num_correct"):
      one_run_fdp.fdp_epsilon_lower_bound(num_canaries=10, num_guesses=5, num_correct=6,
                                      delta=1e-5)


class SubsampledGaussianFamilyTest(parameterized.TestCase):
  """The DP-SGD curve family ("subsampled_gaussian") of the f-DP one-run test."""

  KW = dict(num_canaries=1000, num_guesses=200, num_correct=170, delta=1e-5)

  def test_q1_t1_is_the_gaussian_family(self):
    # q = 1, T = 1: the Gaussian mechanism, mu = 1 / sigma. The profile-based curve is
    # a lower bound on G_mu (valid), so the bound is at most the "gdp" one, and close.
    g = one_run_fdp.fdp_epsilon_lower_bound(**self.KW, family="gdp")
    s = one_run_fdp.fdp_epsilon_lower_bound(**self.KW, family="subsampled_gaussian",
                                        sampling_prob=1.0, num_steps=1)
    self.assertLessEqual(s.epsilon_lower, g.epsilon_lower + 1e-9)
    self.assertGreater(s.epsilon_lower, 0.97 * g.epsilon_lower)
    self.assertAlmostEqual(1.0 / s.noise_multiplier_upper, g.mu_lower, delta=0.02)
    self.assertTrue(math.isnan(s.mu_lower))

  def test_monotone_in_sigma(self):
    kw = dict(num_canaries=1000, num_guesses=200, num_correct=170, family="subsampled_gaussian",
              sampling_prob=0.1, num_steps=100)
    sigmas = [0.8, 1.2, 1.6, 2.0, 2.5, 3.5, 5.0]
    rej = [one_run_fdp.fdp_rejects(**kw, parameter=s) for s in sigmas]
    self.assertFalse(rej[0])                    # a weakly private claim survives
    self.assertTrue(rej[-1])                    # a strongly private one is rejected
    self.assertEqual(rej, sorted(rej))          # rejected for all sigma above a crossing
    r = one_run_fdp.fdp_epsilon_lower_bound(**kw, delta=1e-5)
    self.assertTrue(one_run_fdp.fdp_rejects(**kw, parameter=r.noise_multiplier_upper))
    self.assertFalse(one_run_fdp.fdp_rejects(**kw, parameter=0.98 * r.noise_multiplier_upper))
    # the eps reported is that of DP-SGD at that sigma (our PLD accountant)
    from dpjax import accounting
    self.assertAlmostEqual(r.epsilon_lower, accounting.dpsgd_epsilon(
        r.noise_multiplier_upper, 0.1, 100, 1e-5, accountant="pld"), places=9)

  def test_profile_curve_is_the_dp_curve_for_one_pair(self):
    inv = one_run_fdp._profile_inverse_blowup(np.array([[1.0]]), np.array([[1e-3]]))
    ref = one_run_fdp._dp_inverse_blowup(np.array([1.0]), 1e-3)
    for x in (0.0, 0.01, 0.3, 0.9, 1.0):
      self.assertAlmostEqual(float(inv(np.array([x]))[0]), float(ref(np.array([x]))[0]),
                             places=12)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      one_run_fdp.fdp_epsilon_lower_bound(**self.KW, family="subsampled_gaussian")
    with self.assertRaisesRegex(ValueError, "subsampled_gaussian"):
      one_run_fdp.fdp_rejects(**self.KW, family="gdp", parameter=1.0, sampling_prob=0.1,
                          num_steps=10)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      one_run_fdp.fdp_rejects(**self.KW, family="subsampled_gaussian", parameter=1.0,
                          sampling_prob=1.5, num_steps=10)
    with self.assertRaisesRegex(ValueError, "num_steps"):
      one_run.audit_declared_guesses(np.arange(10.0), np.arange(10) % 2 == 0, delta=1e-5,
                                     method="fdp_subsampled_gaussian", sampling_prob=0.1,
                                     num_steps=0)


if __name__ == "__main__":
  absltest.main()
