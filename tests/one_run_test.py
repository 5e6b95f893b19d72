"""Tests for dpjax.audit.one_run (Steinke, Nasr & Jagielski 2023)."""

import math

import numpy as np
from absl.testing import absltest, parameterized
from scipy import optimize, stats

from dpjax.accounting import gdp
from dpjax.audit import one_run, one_run_fdp


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
  """One DP-SGD run with many gradient canaries, through `dpjax.audit.runner`."""

  def test_one_training_run_with_many_gradient_canaries(self):
    import warnings

    import jax

    from dpjax import accounting, dpsgd, models
    from dpjax.audit import runner
    from dpjax.data import canaries

    d = canaries.audit_data(jax.random.key(0), base_size=20)
    x, y = d.x_NxD[:20, :-1], d.y_N[:20]
    model = models.logistic_regression(int(x.shape[1]))
    results = {}
    for sigma in (0.6, 60.0):
      cfg = dpsgd.DpSgdConfig(dataset_size=20, sampling_prob=0.2, num_steps=50,
                              noise_multiplier=sigma)
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = runner.audit_dpsgd(jax.random.key(1), cfg, model, x, y, num_runs=1,
                                 num_gradient_canaries=200, mode="one_run", progress=False)
      results[sigma] = {k: b.epsilon_lower for k, b in res.white_box.bounds.items()}
      # never above the exact eps of the claimed mechanism (here: the true one)
      exact = accounting.dpsgd_epsilon(sigma, 0.2, 50, 1e-5, accountant="pld")
      for name in ("one_run", "fdp_one_run"):
        self.assertLessEqual(results[sigma][name], exact, (sigma, name))
    # little noise: a clearly positive bound from ONE run; sigma = 60 (eps ~ 0.03):
    # guesses are coin flips, no bound.
    self.assertGreater(results[0.6]["one_run"], 1.0)
    self.assertLess(results[60.0]["one_run"], 0.3)
    self.assertLess(results[60.0]["fdp_one_run"], 0.3)


class DeclaredGuessesTest(parameterized.TestCase):

  def test_counts_by_hand(self):
    self.assertEqual(one_run.declared_guess_counts(1000), (1000, 500, 250, 124, 62, 30, 14, 6, 2))
    self.assertEqual(one_run.declared_guess_counts(3), (2,))
    self.assertEqual(one_run.declared_guess_counts(10**6, 2), (10**6, 500_000))

  @parameterized.parameters("steinke", "fdp", "fdp_gdp")
  def test_is_the_maximum_over_counts_at_bonferroni_confidence(self, method):
    rng = np.random.default_rng(9)
    inc = rng.random(600) < 0.5
    scores = inc + 0.7 * rng.normal(size=600)
    counts = (600, 200, 60, 20)
    res = one_run.audit_declared_guesses(scores, inc, delta=1e-5, method=method,
                                         guess_counts=counts)
    per = 1 - 0.05 / 4
    self.assertAlmostEqual(res.confidence_per_test, per, places=12)
    each = []
    for r in counts:
      a = one_run.audit(scores, inc, num_positive_guesses=r // 2, num_negative_guesses=r // 2,
                        delta=1e-5, confidence=per)
      if method == "steinke":
        each.append(a.epsilon_lower)
      else:
        each.append(one_run_fdp.fdp_epsilon_lower_bound(
            num_canaries=600, num_guesses=r, num_correct=a.num_correct, delta=1e-5,
            family="dp" if method == "fdp" else "gdp", confidence=per).epsilon_lower)
    self.assertAlmostEqual(res.epsilon_lower, max(each), delta=1e-4 * max(1.0, max(each)))
    self.assertEqual(res.num_guesses, counts[int(np.argmax(each))])
    self.assertGreater(res.epsilon_lower, 0.5)

  def test_validation(self):
    s, inc = np.arange(10.0), np.arange(10) % 2 == 0
    with self.assertRaisesRegex(ValueError, "guess_counts"):
      one_run.audit_declared_guesses(s, inc, delta=1e-5, guess_counts=[3])
    with self.assertRaisesRegex(ValueError, "guess_counts"):
      one_run.audit_declared_guesses(s, inc, delta=1e-5, guess_counts=[12])
    with self.assertRaisesRegex(ValueError, "method"):
      one_run.audit_declared_guesses(s, inc, delta=1e-5, method="rdp")
    with self.assertRaisesRegex(ValueError, "delta"):
      one_run.audit_declared_guesses(s, inc, delta=0.0, method="fdp_gdp")


if __name__ == "__main__":
  absltest.main()


class SteinkePointwiseTest(parameterized.TestCase):

  def test_vectorised_p_values_match_p_value(self):
    eps, dl = [0.0, 0.7, 2.0], [1e-5, 1e-3, 0.0]
    got = one_run._p_values_over_eps(500, 100, 80, eps, dl)
    for g, e, d in zip(got, eps, dl):
      self.assertAlmostEqual(g, one_run.p_value(500, 100, 80, e, d), places=12)

  def test_truncated_window_errs_upwards(self):
    # v > 2,000: the delta term is bounded, never underestimated
    got = one_run._p_values_over_eps(100000, 5000, 4000, [1.0], [1e-5])[0]
    self.assertGreaterEqual(got, one_run.p_value(100000, 5000, 4000, 1.0, 1e-5) - 1e-12)

  def test_at_least_steinke_and_below_exact(self):
    kw = dict(num_canaries=100000, num_guesses=736, num_correct=709, delta=1e-5)
    pw = one_run.steinke_pointwise_epsilon_lower_bound(**kw)
    st = one_run.epsilon_lower_bound(**kw)
    self.assertGreater(pw.epsilon_lower, st)          # 2.71 against 2.53
    self.assertAlmostEqual(pw.epsilon_lower, gdp.gaussian_epsilon(1e-5, pw.mu_lower), places=9)
    self.assertEqual(one_run.steinke_pointwise_epsilon_lower_bound(
        num_canaries=1000, num_guesses=100, num_correct=50, delta=1e-5).epsilon_lower, 0.0)
    with self.assertRaisesRegex(ValueError, "delta"):
      one_run.steinke_pointwise_epsilon_lower_bound(num_canaries=10, num_guesses=4,
                                                    num_correct=4, delta=0.0)


class ValidProtocolCoverageTest(parameterized.TestCase):
  """The default (valid) protocol stays below the true eps of a mu-GDP mechanism."""

  def test_below_true_epsilon_over_seeds(self):
    mu, m, delta = 1.0, 4000, 1e-5
    exact = gdp.gaussian_epsilon(delta, mu)
    bounds = {"steinke": [], "fdp_gdp": []}
    for seed in range(8):
      rng = np.random.default_rng(seed)
      bits = rng.random(m) < 0.5
      x = bits + rng.normal(size=m) / mu
      for meth in bounds:
        bounds[meth].append(one_run.audit_declared_guesses(x, bits, delta=delta,
                                                           method=meth).epsilon_lower)
    for meth, b in bounds.items():
      self.assertLessEqual(max(b), exact, meth)
      self.assertGreater(min(b), 0.2, meth)             # and the audit has power
    self.assertGreater(np.mean(bounds["fdp_gdp"]), np.mean(bounds["steinke"]))


class PaperProtocolTest(parameterized.TestCase):
  """The idealized Gaussian game and Mahloujifar et al.'s Table 1 protocol."""

  def test_top_precision_closed_form(self):
    # top half: threshold 1/2 by symmetry, so the precision is Phi(1 / (2 sigma))
    for sigma in (0.5, 1.0, 4.0):
      self.assertAlmostEqual(one_run.top_precision(sigma, 0.5),
                             stats.norm.cdf(0.5 / sigma), places=10)
    # any fraction: P[x > t] = fraction and precision from Phi at the solved t
    sigma, frac = 2.0, 0.01
    t = optimize.brentq(lambda t: 0.5 * (stats.norm.sf((t - 1) / sigma)
                                         + stats.norm.sf(t / sigma)) - frac, -20, 20)
    a, b = stats.norm.sf((t - 1) / sigma), stats.norm.sf(t / sigma)
    self.assertAlmostEqual(one_run.top_precision(sigma, frac), a / (a + b), places=9)
    with self.assertRaisesRegex(ValueError, "fraction"):
      one_run.top_precision(1.0, 1.0)

  def test_expected_correct_matches_simulation(self):
    sigma, m, r = 1.0, 200_000, 2000
    c = one_run.expected_correct(sigma, m, r)
    self.assertEqual(c, math.ceil(r * one_run.top_precision(sigma, r / (2 * m))))
    rng = np.random.default_rng(0)
    got = []
    for _ in range(5):
      x, bits = one_run.one_run_game(rng, m, sigma)
      o = np.argsort(-x)
      got.append(bits[o[:r // 2]].sum() + (~bits[o[-r // 2:]]).sum())
    self.assertLess(abs(np.mean(got) - c), 4 * np.sqrt(r * 0.25 / 5) + 1)
    with self.assertRaisesRegex(ValueError, "even"):
      one_run.expected_correct(1.0, 100, 3)

  def test_paper_protocol_picks_c_prime_after_the_fact(self):
    sigma, m = 1.0, 2000
    out = one_run.paper_protocol(sigma, m, delta=1e-5, confidence=0.95, grid_points=10)
    grid = one_run.paper_guess_grid(m, 10)
    by_hand = {r: one_run.epsilon_lower_bound(
        num_canaries=m, num_guesses=r, num_correct=one_run.expected_correct(sigma, m, r),
        delta=1e-5) for r in grid}
    best = max(by_hand, key=by_hand.get)
    self.assertEqual(out["steinke"]["num_guesses"], best)        # the best c', no union bound
    self.assertAlmostEqual(out["steinke"]["epsilon_lower"], by_hand[best], places=12)
    self.assertGreater(out["steinke"]["epsilon_lower"], sorted(by_hand.values())[-2] - 1e-12)
    self.assertGreaterEqual(out["fdp_gdp"]["epsilon_lower"], out["steinke"]["epsilon_lower"])
    self.assertLessEqual(out["fdp_gdp"]["epsilon_lower"], gdp.gaussian_epsilon(1e-5, 1.0))
