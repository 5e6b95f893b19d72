"""Tests for dpjax.accounting.pld: exact cases, dp_accounting cross-checks, RDP."""

import math

import numpy as np
import pytest
from absl.testing import absltest, parameterized
from dp_accounting.pld import privacy_loss_distribution as dp_pld
from scipy import integrate, optimize, special, stats

from dpjax.accounting import gdp, pld, pld_grid


def _dp_accounting_eps(sigma, q, steps, delta, h):
  """dp_accounting's PLD (connect-the-dots, add/remove) at grid spacing h."""
  p = dp_pld.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=h)
  return p.self_compose(steps).get_epsilon_for_delta(delta)


def _rdp_eps(sigma, q, steps, delta):
  """Our RDP accountant (dpjax.accounting.rdp) if present, else dp_accounting's."""
  try:
    from dpjax.accounting import rdp
    orders, rho = rdp.dpsgd_rdp(sigma, q, steps)
    return rdp.rdp_to_epsilon(orders, rho, delta)[0]
  except ImportError:
    import dp_accounting
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return acc.get_epsilon(delta)


def _exact_eps(delta_fn, delta, hi):
  """Smallest eps >= 0 with delta_fn(eps) <= delta, by bisection on [0, hi]."""
  if delta_fn(0.0) <= delta:
    return 0.0
  return optimize.brentq(lambda e: delta_fn(e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-13)


def _subsampled_gaussian_delta_one_step(eps, sigma, q):
  """Exact delta(eps) of one Poisson-subsampled Gaussian step, worse direction."""
  # remove: P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2); {L > eps} = {x > x_r}.
  arg = (math.exp(eps) - (1 - q)) / q
  x_r = sigma ** 2 * math.log(arg) + 0.5
  d_rem = ((1 - q) * stats.norm.sf(x_r / sigma) + q * stats.norm.sf((x_r - 1) / sigma)
           - math.exp(eps) * stats.norm.sf(x_r / sigma))
  # add: the pair swapped; {L > eps} = {x < x_a}, empty when e^{-eps} <= 1 - q.
  arg = (math.exp(-eps) - (1 - q)) / q
  if arg <= 0:
    d_add = 0.0
  else:
    x_a = sigma ** 2 * math.log(arg) + 0.5
    d_add = (stats.norm.cdf(x_a / sigma) - math.exp(eps) * (
        (1 - q) * stats.norm.cdf(x_a / sigma) + q * stats.norm.cdf((x_a - 1) / sigma)))
  return max(d_rem, d_add, 0.0)


def _irwin_hall_pdf(x, c):
  """Density of the sum of c Uniform(0, 1) at x (exact formula; fine for c <= 10)."""
  if x < 0 or x > c:
    return 0.0
  j = np.arange(0, math.floor(x) + 1)
  return float(np.sum((-1.0) ** j * special.comb(c, j) * (x - j) ** (c - 1))
               / math.factorial(c - 1))


def _laplace_delta_exact(eps, eps0, k):
  """Exact delta(eps) of k Laplace mechanisms with eps0 = sensitivity / scale.

  One step's privacy loss is +eps0 w.p. 1/2, -eps0 w.p. e^{-eps0}/2, and has
  density e^{(l - eps0)/2} / 4 on (-eps0, eps0). Splitting k steps into a atoms
  at +eps0, b at -eps0 and c continuous ones (multinomial weights), the sum of
  the c continuous losses has density 4^{-c} e^{(s - c eps0)/2} (2 eps0)^{c-1}
  IH_c((s + c eps0) / (2 eps0)) with IH_c the Irwin-Hall density; delta(eps)
  = E[(1 - e^{eps - S})_+] is then a sum of one-dimensional integrals.
  """
  total = 0.0
  for a in range(k + 1):
    for b in range(k + 1 - a):
      c = k - a - b
      w = (math.factorial(k) / (math.factorial(a) * math.factorial(b) * math.factorial(c))
           * 0.5 ** a * (0.5 * math.exp(-eps0)) ** b)
      shift = (a - b) * eps0
      if c == 0:
        total += w * max(0.0, -math.expm1(eps - shift))
        continue
      lo, hi = max(-c * eps0, eps - shift), c * eps0
      if lo >= hi:
        continue

      def g(s, c=c, shift=shift):
        x = (s + c * eps0) / (2 * eps0)
        return (4.0 ** -c * math.exp((s - c * eps0) / 2) * (2 * eps0) ** (c - 1)
                * _irwin_hall_pdf(x, c) * -math.expm1(eps - shift - s))

      pts = [p for p in (-c * eps0 + 2 * eps0 * np.arange(1, c)) if lo < p < hi]
      val, _ = integrate.quad(g, lo, hi, points=pts or None, epsabs=1e-15,
                              epsrel=1e-12, limit=400)
      total += w * val
  return total


# (sigma, q, T, delta) spread over sigma in [0.5, 100], q in [1e-4, 1],
# T in [1, 1e5], delta in [1e-10, 1e-3]. Slow ones (dp_accounting's fine-grid
# reference takes seconds) are marked.
_FAST_POINTS = (
    ("s1_q1e-2_T1e3", 1.0, 0.01, 1000, 1e-5),
    ("s0.5_q0.1_T100", 0.5, 0.1, 100, 1e-5),
    ("s2_q0.05_T500", 2.0, 0.05, 500, 1e-6),
    ("s5_q0.2_T200_d1e-3", 5.0, 0.2, 200, 1e-3),
    ("s100_q1_T1000", 100.0, 1.0, 1000, 1e-5),
    ("s0.8_q1e-4_T1_d1e-10", 0.8, 1e-4, 1, 1e-10),
    ("s0.7_q0.02_T2000_d1e-4", 0.7, 0.02, 2000, 1e-4),
    ("s10_q0.5_T50_d1e-10", 10.0, 0.5, 50, 1e-10),
    ("s1.5_q0.04_T1", 1.5, 0.04, 1, 1e-5),
    ("s20_q1_T10_d1e-3", 20.0, 1.0, 10, 1e-3),
    ("s1.2_q3e-3_T3000_d1e-7", 1.2, 0.003, 3000, 1e-7),
)
_SLOW_POINTS = (
    ("s1_q1e-4_T1000_tiny_eps", 1.0, 1e-4, 1000, 1e-5),
    ("s1_q1e-2_T1e4", 1.0, 0.01, 10_000, 1e-5),
    ("s1_q1e-2_T1e5", 1.0, 0.01, 100_000, 1e-5),
    ("s3_q1e-3_T1e4_d1e-8", 3.0, 0.001, 10_000, 1e-8),
    ("s0.6_q1e-3_T1e5_d1e-6", 0.6, 0.001, 100_000, 1e-6),
    ("s50_q0.3_T2e4_d1e-9", 50.0, 0.3, 20_000, 1e-9),
    ("s4_q0.1_T1e5_d1e-10", 4.0, 0.1, 100_000, 1e-10),
)


def _check_point(test, sigma, q, steps, delta):
  """Adaptive eps within 0.5 % of dp_accounting's PLD on a fine grid; <= RDP."""
  ours = pld.dpsgd_epsilon_bound(sigma, q, steps, delta)
  # Reference grid fine relative to the answer (connect-the-dots error is
  # O(h) while h >> eps, O(h^2) after).
  h_ref = min(1e-4, max(ours.value, 1e-3) / 5000)
  ref = _dp_accounting_eps(sigma, q, steps, delta, h_ref)
  test.assertLessEqual(abs(ours.value - ref), 0.005 * ref, (ours, ref))
  # Our grid is at least as fine as the reference's, so ours should not be
  # looser than it beyond float noise (dp_accounting's answers at eps ~ 80,
  # delta = 1e-10 move by ~5e-4 relative between grids).
  test.assertLessEqual(ours.value, ref * (1 + 1e-3) + 1e-9, (ours, ref))
  if ours.value <= 20:
    test.assertLessEqual(ours.value, _rdp_eps(sigma, q, steps, delta) + 1e-9)


@pytest.mark.slow
class SlowDpsgdCrossCheckTest(parameterized.TestCase):
  """The expensive points (dp_accounting's reference takes seconds each)."""

  @parameterized.named_parameters(*_SLOW_POINTS)
  def test_against_dp_accounting_slow(self, sigma, q, steps, delta):
    _check_point(self, sigma, q, steps, delta)


class DpsgdCrossCheckTest(parameterized.TestCase):
  """Our adaptive eps against dp_accounting's PLD at a fine grid, and against RDP."""

  def _check(self, sigma, q, steps, delta):
    _check_point(self, sigma, q, steps, delta)

  @parameterized.named_parameters(*_FAST_POINTS)
  def test_against_dp_accounting(self, sigma, q, steps, delta):
    self._check(sigma, q, steps, delta)

  def test_never_looser_than_rdp_on_a_grid(self):
    # Every (sigma, q, T) of a 4 x 3 x 2 grid at delta = 1e-5 with eps <= 20.
    checked = 0
    for sigma in (0.5, 1.0, 2.0, 5.0):
      for q in (1e-3, 0.01, 0.1):
        for steps in (10, 1000):
          ours = pld.dpsgd_epsilon(sigma, q, steps, 1e-5, rtol=1e-4)
          ref = _rdp_eps(sigma, q, steps, 1e-5)
          if ref <= 20:
            checked += 1
            self.assertLessEqual(ours, ref + 1e-9, (sigma, q, steps))
    self.assertGreaterEqual(checked, 18)

  def test_fixed_grid_is_what_dp_accounting_computes(self):
    # Same algorithm, same grid: the two implementations agree to float precision.
    ours = pld.gaussian_pld(1.0, 0.01, value_discretization=1e-3).self_compose(1000)
    ref = _dp_accounting_eps(1.0, 0.01, 1000, 1e-5, 1e-3)
    self.assertAlmostEqual(ours.epsilon(1e-5), ref, delta=1e-7)

  def test_adaptive_grid_fixes_tiny_epsilon(self):
    # The example: a fixed 1e-4 grid is > 2 % high when eps is ~0.011.
    fixed = pld.gaussian_pld(1.0, 1e-4, value_discretization=1e-4).self_compose(1000)
    ref = _dp_accounting_eps(1.0, 1e-4, 1000, 1e-5, 1e-5)   # ~4e-4 above the truth
    adaptive = pld.dpsgd_epsilon_bound(1.0, 1e-4, 1000, 1e-5)
    self.assertGreater(fixed.epsilon(1e-5), 1.02 * ref)
    self.assertLess(abs(adaptive.value - ref), 1e-3 * ref)
    self.assertLess(adaptive.value_discretization, 1e-5)

  def test_error_estimate_covers_actual_error(self):
    # eps(h) - eps_true <= eps(h) - eps_ref(fine): the reported error must cover it.
    for sigma, q, steps in ((1.0, 0.01, 200), (0.7, 0.02, 100)):
      r = pld.dpsgd_epsilon_bound(sigma, q, steps, 1e-5, rtol=1e-3)
      ref = _dp_accounting_eps(sigma, q, steps, 1e-5, 2e-5)
      self.assertGreaterEqual(r.value, ref - 1e-6)
      self.assertGreaterEqual(r.error, r.value - ref - 1e-7, (r, ref))
      self.assertLessEqual(r.error, 1e-3 * r.value)

  def test_delta_inverts_epsilon(self):
    eps = pld.dpsgd_epsilon(1.0, 0.01, 1000, 1e-5)
    d = pld.dpsgd_delta(1.0, 0.01, 1000, eps)
    self.assertLessEqual(d, 1e-5 * (1 + 1e-6))
    self.assertGreater(d, 0.95e-5)
    d_ref = dp_pld.from_gaussian_mechanism(
        1.0, sampling_prob=0.01, value_discretization_interval=5e-5).self_compose(
            1000).get_delta_for_epsilon(eps)
    self.assertLess(abs(d - d_ref), 0.01 * d_ref)

  def test_q1_is_exact_gaussian(self):
    r = pld.dpsgd_epsilon_bound(2.0, 1.0, 400, 1e-6)
    self.assertTrue(r.exact)
    self.assertAlmostEqual(r.value, gdp.gaussian_epsilon(1e-6, 10.0), places=12)


class ExactCasesTest(parameterized.TestCase):
  """Discretised answers are upper bounds on closed forms, and close to them."""

  @parameterized.named_parameters(
      ("mu1_k1", 1.0, 1, 1e-5),
      ("mu0.1_k100", 10.0, 100, 1e-6),
      ("mu0.5_k1000", 2.0, 1000, 1e-8),
      ("mu2_k10", 0.5, 10, 1e-3),
  )
  def test_discretised_gaussian_is_upper_bound(self, sigma, k, delta):
    exact = gdp.gaussian_epsilon(delta, math.sqrt(k) / sigma)
    disc = pld.gaussian_pld(sigma).discretise(1e-3).self_compose(k)
    self.assertFalse(disc.is_exact)
    got = disc.epsilon(delta)
    self.assertGreaterEqual(got, exact - 1e-10)
    self.assertLessEqual(got, exact * 1.005)
    for e in (0.5 * exact, 0.9 * exact, exact):
      want = gdp.gaussian_delta(e, math.sqrt(k) / sigma)
      self.assertGreaterEqual(disc.delta(e), want * (1 - 1e-9) - 1e-15)

  @parameterized.named_parameters(
      ("mu5_d1e-14", 20.0, 10_000, 1e-14),
      ("mu5_d1e-15", 2.0, 100, 1e-15),
  )
  def test_tilted_fft_is_accurate_at_tiny_delta(self, sigma, k, delta):
    # At delta ~ 1e-14 a plain FFT power is dominated by rounding noise (here it is
    # 40 % high, or even below the exact value); tilting towards eps fixes it.
    exact = gdp.gaussian_epsilon(delta, math.sqrt(k) / sigma)
    step = pld.gaussian_pld(sigma).discretise(1e-3)._pmfs[0]  # pylint: disable=protected-access
    tilted = pld_grid.self_compose(step, k, 1e-30, exact)
    got = tilted.epsilon(delta)
    self.assertGreaterEqual(got, exact - 1e-9)
    self.assertLessEqual(got, exact * (1 + 1e-4))
    plain = pld.gaussian_pld(sigma).discretise(1e-3).self_compose(k)
    with self.assertWarnsRegex(RuntimeWarning, "rounding noise"):
      plain.epsilon(delta)

  def test_large_gaussian_composition_stays_exact(self):
    # sigma = 0.5, k = 1e4: mu = 200. A grid would need ~1e7+ points; we stay exact.
    p = pld.gaussian_pld(0.5).self_compose(10_000)
    self.assertTrue(p.is_exact)
    self.assertEqual(p.num_points, 0)
    self.assertAlmostEqual(p.mu, 200.0, places=9)
    self.assertEqual(p.epsilon(1e-5), gdp.gaussian_epsilon(1e-5, 200.0))
    q = pld.gaussian_pld(0.5).compose(pld.gaussian_pld(1.0))
    self.assertAlmostEqual(q.mu, math.hypot(2.0, 1.0), places=12)

  def test_laplace_helper_matches_closed_form(self):
    # One Laplace mechanism: delta(eps) = 1 - e^{(eps - eps0)/2} for 0 <= eps <= eps0.
    for eps in (0.0, 0.3, 0.9):
      self.assertAlmostEqual(_laplace_delta_exact(eps, 1.0, 1),
                             -math.expm1((eps - 1.0) / 2), places=12)

  @parameterized.named_parameters(
      ("eps0_1_k1", 1.0, 1, 1e-3),
      ("eps0_1_k3", 1.0, 3, 1e-5),
      ("eps0_0.5_k6", 2.0, 6, 1e-6),
      ("eps0_0.2_k8", 5.0, 8, 1e-4),
  )
  def test_laplace_composition_is_upper_bound(self, scale, k, delta):
    eps0 = 1.0 / scale
    exact = _exact_eps(lambda e: _laplace_delta_exact(e, eps0, k), delta, k * eps0)
    p = pld.laplace_pld(scale, value_discretization=1e-4).self_compose(k)
    got = p.epsilon(delta)
    self.assertGreaterEqual(got, exact - 1e-9)
    self.assertLessEqual(got, exact * 1.005 + 1e-9)
    for e in (0.25 * exact, 0.75 * exact):
      want = _laplace_delta_exact(e, eps0, k)
      self.assertGreaterEqual(p.delta(e), want * (1 - 1e-9))
      self.assertLessEqual(p.delta(e), want * 1.01 + 1e-12)

  @parameterized.named_parameters(
      ("s1_q0.01", 1.0, 0.01, 1e-5),
      ("s0.5_q0.3", 0.5, 0.3, 1e-6),
      ("s3_q0.9", 3.0, 0.9, 1e-3),
  )
  def test_one_subsampled_step_is_upper_bound(self, sigma, q, delta):
    exact = _exact_eps(lambda e: _subsampled_gaussian_delta_one_step(e, sigma, q), delta, 60.0)
    got = pld.gaussian_pld(sigma, q, value_discretization=1e-4).epsilon(delta)
    self.assertGreaterEqual(got, exact - 1e-9)
    self.assertLessEqual(got, exact * 1.005)


def _rr_delta_exact(eps, eps0, k, n):
  """Exact delta(eps) of n k-ary randomized responses (trinomial sum over outputs)."""
  z = math.exp(eps0) + k - 1
  pa, pb, pc = math.exp(eps0) / z, 1.0 / z, (k - 2) / z
  total = 0.0
  for a in range(n + 1):
    for b in range(n + 1 - a):
      c = n - a - b
      w = (math.factorial(n) / (math.factorial(a) * math.factorial(b) * math.factorial(c))
           * pa ** a * pb ** b * pc ** c)
      total += w * max(0.0, -math.expm1(eps - (a - b) * eps0))
  return total


class RandomizedResponseTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("binary_eps1_n10", 1.0, 2, 10),
      ("k4_eps0.5_n20", 0.5, 4, 20),
      ("binary_eps0.3_n60", 0.3, 2, 60),   # eps0 not on the grid: upper bound
  )
  def test_matches_exact_composition(self, eps0, k, n):
    p = pld.randomized_response_pld(eps0, k).self_compose(n)
    for e in (0.5, 1.0, 2.0):
      want = _rr_delta_exact(e, eps0, k, n)
      self.assertGreaterEqual(p.delta(e), want - 1e-12)
      self.assertLessEqual(p.delta(e), want * 1.01 + 1e-12)
    noise = k / (math.exp(eps0) + k - 1)   # dp_accounting's parametrisation
    ref = dp_pld.from_randomized_response(noise, k, value_discretization_interval=1e-4)
    ref = ref.self_compose(n)
    for d in (1e-3, 1e-6):
      self.assertAlmostEqual(p.epsilon(d), ref.get_epsilon_for_delta(d),
                             delta=5e-3 * ref.get_epsilon_for_delta(d))

  def test_large_epsilon_is_exact_and_past_the_grid_is_named(self):
    # e^eps overflows float64 at eps > 709.78: the masses are computed in log space.
    for k in (2, 3):
      p = pld.randomized_response_pld(800.0, k, value_discretization=1e-3)
      self.assertAlmostEqual(p.epsilon(1e-5), 800.0, delta=1e-3)
      self.assertEqual(p.delta(799.0), 1.0 - math.exp(-1.0))   # 1 - e^{eps' - eps}
    with self.assertRaisesRegex(ValueError, "epsilon = 1e\\+300"):
      pld.randomized_response_pld(1e300, value_discretization=1e-3)

  def test_rejects(self):
    with self.assertRaisesRegex(ValueError, "num_buckets"):
      pld.randomized_response_pld(1.0, num_buckets=1)
    with self.assertRaisesRegex(ValueError, "epsilon"):
      pld.randomized_response_pld(0.0)


class CompositionTest(parameterized.TestCase):

  def test_self_compose_equals_repeated_compose(self):
    p = pld.gaussian_pld(1.0, 0.1, value_discretization=1e-3)
    a = p.self_compose(4)
    b = p.compose(p).compose(p).compose(p)
    # Equal up to FFT rounding (~1e-15 in delta, ~1e-7 in eps at delta = 1e-9).
    for d in (1e-3, 1e-6, 1e-9):
      self.assertAlmostEqual(a.epsilon(d), b.epsilon(d), delta=1e-6 * a.epsilon(d))

  def test_heterogeneous_matches_dp_accounting(self):
    # Laplace release + DP-SGD phase + a plain Gaussian, composed together.
    h = 1e-4
    ours = (pld.laplace_pld(2.0, value_discretization=h)
            .compose(pld.gaussian_pld(1.0, 0.02, value_discretization=h).self_compose(300))
            .compose(pld.gaussian_pld(5.0)))
    ref = (dp_pld.from_laplace_mechanism(2.0, value_discretization_interval=h)
           .compose(dp_pld.from_gaussian_mechanism(
               1.0, sampling_prob=0.02, value_discretization_interval=h).self_compose(300))
           .compose(dp_pld.from_gaussian_mechanism(5.0, value_discretization_interval=h)))
    for d in (1e-3, 1e-6):
      self.assertAlmostEqual(ours.epsilon(d), ref.get_epsilon_for_delta(d),
                             delta=2e-3 * ref.get_epsilon_for_delta(d))

  def test_finer_nested_grid_is_never_looser(self):
    coarse = pld.gaussian_pld(0.8, 0.05, value_discretization=1e-2).self_compose(500)
    fine = pld.gaussian_pld(0.8, 0.05, value_discretization=1e-3).self_compose(500)
    for d in (1e-3, 1e-5, 1e-8):
      self.assertLessEqual(fine.epsilon(d), coarse.epsilon(d) + 1e-12)

  def test_delta_is_monotone_and_bounded(self):
    p = pld.gaussian_pld(1.0, 0.05, value_discretization=1e-3).self_compose(200)
    ds = [p.delta(e) for e in np.linspace(0, 5, 11)]
    self.assertTrue(all(0 <= x <= 1 for x in ds))
    self.assertTrue(all(a >= b for a, b in zip(ds, ds[1:])))

  def test_mismatched_grids_raise(self):
    a = pld.laplace_pld(1.0, value_discretization=1e-3)
    b = pld.laplace_pld(1.0, value_discretization=1e-4)
    with self.assertRaisesRegex(ValueError, "value_discretization"):
      a.compose(b)


class ValidationTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("q0", dict(sampling_prob=0.0), "sampling_prob"),
      ("q_big", dict(sampling_prob=1.5), "sampling_prob"),
      ("sigma0", dict(noise_multiplier=0.0), "noise_multiplier"),
      ("sigma_nan", dict(noise_multiplier=float("nan")), "noise_multiplier"),
      ("steps0", dict(num_steps=0), "num_steps"),
      ("steps_frac", dict(num_steps=2.5), "num_steps"),
      ("delta0", dict(delta=0.0), "delta"),
      ("delta1", dict(delta=1.0), "delta"),
      ("rtol", dict(rtol=0.5), "rtol"),
      ("rtol_below_its_floor", dict(rtol=1e-9), "rtol"),
      ("rtol_subnormal", dict(rtol=5e-324), "rtol"),
      ("steps_int64_max", dict(num_steps=2**63 - 1), "num_steps"),
  )
  def test_dpsgd_epsilon_rejects(self, override, name):
    kw = dict(noise_multiplier=1.0, sampling_prob=0.01, num_steps=10, delta=1e-5)
    kw.update(override)
    with self.assertRaisesRegex(ValueError, name):
      pld.dpsgd_epsilon(**kw)

  def test_other_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "scale"):
      pld.laplace_pld(-1.0)
    with self.assertRaisesRegex(ValueError, "value_discretization"):
      pld.gaussian_pld(1.0, 0.1, value_discretization=0.0)
    with self.assertRaisesRegex(ValueError, "epsilon"):
      pld.gaussian_pld(1.0).delta(-1.0)
    with self.assertRaisesRegex(ValueError, "epsilon"):
      pld.dpsgd_delta(1.0, 0.1, 10, float("inf"))
    with self.assertRaisesRegex(ValueError, "k"):
      pld.gaussian_pld(1.0).self_compose(0)
    with self.assertRaisesRegex(ValueError, "value_discretization"):
      # a grid that would need more than 2^23 points is refused, not allocated
      pld.gaussian_pld(0.3, 0.5, value_discretization=1e-7)
    for sigma in (5e-324, 1e-300):   # mu = 1 / sigma: losses up to mu^2 / 2 overflow
      with self.assertRaisesRegex(ValueError, "noise_multiplier"):
        pld.gaussian_pld(sigma, 0.5)
    with self.assertRaisesRegex(ValueError, "sensitivity"):
      pld.gaussian_pld(1.0, 0.5, sensitivity=1e300)
    self.assertEqual(pld.gaussian_pld(1e-300).mu, 1.0 / 1e-300)   # q = 1 stays exact
    for fn, last in ((pld.dpsgd_delta, 1.0), (pld.dpsgd_epsilon, 1e-5)):
      with self.assertRaisesRegex(ValueError, "num_steps = 9223372036854775807"):
        fn(1.0, 0.1, 2**63 - 1, last)
      with self.assertRaisesRegex(ValueError, "rtol"):
        fn(1.0, 0.1, 10, last, rtol=1e-300)

  def test_delta_at_many_steps_is_finite_with_a_finite_error(self):
    r = pld.dpsgd_delta_bound(1.0, 0.1, 2**31, 1.0, rtol=1e-3)
    self.assertTrue(math.isfinite(r.value) and math.isfinite(r.error))
    self.assertLessEqual(r.value, 1.0)
    self.assertGreater(r.value, 1.0 - 1e-6)   # mean loss ~ T q^2 / (2 sigma^2) >> eps


if __name__ == "__main__":
  absltest.main()
