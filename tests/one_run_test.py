"""Tests for dpjax.audit.one_run (Steinke, Nasr & Jagielski 2023)."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats

from dpjax.audit import one_run


class OneRunTest(parameterized.TestCase):

  def test_all_correct_closed_form(self):
    # delta = 0, v = r: P[Bin(r, p) >= r] = p^r = alpha  =>  eps = logit(alpha^(1/r)).
    for r in (10, 100, 1000):
      p = 0.05 ** (1 / r)
      want = math.log(p / (1 - p))
      got = one_run.epsilon_lower_bound(num_canaries=2 * r, num_guesses=r, num_correct=r)
      self.assertAlmostEqual(got, want, places=6)

  def test_pure_dp_p_value_is_binomial_tail(self):
    for eps in (0.0, 0.5, 2.0):
      p = math.exp(eps) / (1 + math.exp(eps))
      self.assertAlmostEqual(one_run.p_value(500, 200, 130, eps, 0.0),
                             stats.binom.sf(129, 200, p), places=12)

  def test_delta_term_by_hand(self):
    m, r, v, eps, delta = 50, 10, 8, 1.0, 1e-3
    p = math.exp(eps) / (1 + math.exp(eps))
    pmf = stats.binom.pmf(np.arange(r + 1), r, p)
    best = max(sum(pmf[v - i:v]) / i for i in range(1, v + 1))
    want = stats.binom.sf(v - 1, r, p) + 2 * m * delta * best
    self.assertAlmostEqual(one_run.p_value(m, r, v, eps, delta), want, places=12)

  def test_randomized_response_is_valid_and_nearly_tight(self):
    # The extremal eps0-DP "training run": each canary's bit is seen through
    # eps0-randomized response. Over 40 audits the bound must not exceed eps0 more
    # than ~5% of the time, and with r = 5,000 guesses it comes within 20% of eps0.
    eps0, m = 1.0, 5000
    rng = np.random.default_rng(0)
    bounds = []
    for _ in range(40):
      inc = rng.random(m) < 0.5
      flip = rng.random(m) < 1 / (1 + math.exp(eps0))
      seen = inc ^ flip
      scores = seen + 0.01 * rng.random(m)     # tie-break, independent of the bits
      res = one_run.audit(scores, inc, num_positive_guesses=m // 2, num_negative_guesses=m // 2)
      bounds.append(res.epsilon_lower)
    bounds = np.array(bounds)
    self.assertLessEqual(np.mean(bounds > eps0), 0.15)
    self.assertGreater(np.median(bounds), 0.8 * eps0)

  def test_null_scores_give_no_bound(self):
    rng = np.random.default_rng(1)
    eps = [one_run.audit(rng.normal(size=2000), rng.random(2000) < 0.5,
                         num_positive_guesses=200, num_negative_guesses=200,
                         delta=1e-5).epsilon_lower for _ in range(30)]
    self.assertLess(max(eps), 0.35)
    self.assertLessEqual(np.mean(np.array(eps) > 0), 0.2)

  def test_monotone_in_correct_guesses(self):
    b = [one_run.epsilon_lower_bound(num_canaries=1000, num_guesses=200, num_correct=v,
                                     delta=1e-5) for v in (100, 130, 160, 190)]
    self.assertEqual(b[0], 0.0)
    self.assertTrue(all(x < y for x, y in zip(b[1:], b[2:])))

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "num_correct"):
      one_run.epsilon_lower_bound(num_canaries=10, num_guesses=5, num_correct=6)
    with self.assertRaisesRegex(ValueError, "confidence"):
      one_run.epsilon_lower_bound(num_canaries=10, num_guesses=5, num_correct=5, confidence=1.0)
    with self.assertRaisesRegex(ValueError, "num_positive_guesses"):
      one_run.audit([1.0, 2.0], [True, False], num_positive_guesses=2, num_negative_guesses=1)


class DpSgdOneRunTest(parameterized.TestCase):

  def test_one_training_run_with_many_gradient_canaries(self):
    import warnings

    import jax

    from dpjax import accounting, dpsgd
    from dpjax.data import canaries

    d = canaries.audit_data(jax.random.key(0), base_size=20)
    x, y = d.x_NxD[:20, :-1], d.y_N[:20]
    results = {}
    for sigma in (0.6, 60.0):
      cfg = dpsgd.DpSgdConfig(dataset_size=20, sampling_prob=0.2, num_steps=50,
                              noise_multiplier=sigma)
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results[sigma] = one_run.dpsgd_white_box(jax.random.key(1), cfg, x, y, num_canaries=200,
                                                 num_positive_guesses=20, num_negative_guesses=20)
      # never above the accountant's eps for the claimed mechanism (here: the true one)
      self.assertLessEqual(results[sigma]["epsilon_lower"],
                           accounting.dpsgd_epsilon(sigma, 0.2, 50, 1e-5, accountant="pld"))
    # little noise: (almost) every guess right, a clearly positive bound from ONE run;
    # sigma = 60 (eps ~ 0.03): guesses are coin flips, no bound.
    self.assertGreaterEqual(results[0.6]["num_correct"], 38)
    self.assertGreater(results[0.6]["epsilon_lower"], 1.5)
    self.assertLess(results[60.0]["epsilon_lower"], 0.3)


if __name__ == "__main__":
  absltest.main()
