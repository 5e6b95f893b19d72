"""Property-based tests (hypothesis) of the accountants: monotonicity, composition, exact cases.

Parameters are drawn in the ranges DP-SGD is used in: sigma in [0.5, 20], q in
[1e-4, 1] (log-uniform, q = 1 included), T in [1, 10^4], delta in [1e-10, 1e-2]
(log-uniform). Each property runs a fixed number of examples (the "ci" profile of
conftest.py, derandomized); DPJAX_HYPOTHESIS_PROFILE=thorough runs 20 times as many.

Tolerances, and why:
* RDP answers are a minimum over orders of closed forms or a 1e-12-accurate
  quadrature: monotone up to _RTOL = 1e-9 relative (plus 1e-12 absolute at eps ~ 0).
* The adaptive PLD answer v (`pld.dpsgd_epsilon_bound`) is documented as an upper
  bound with truth in [v - error, v]. Monotonicity of the truth then only implies
  v(worse) >= v(better) - error(better); that is what is asserted (plus _RTOL).
  The same reasoning gives RDP >= PLD - error. Strict monotonicity does not hold:
  each call picks its own grid, and parameters 1e-6 apart can give answers in the
  wrong order by up to ~2e-6 relative, always within `error`.
* A fixed-grid PLD object reads delta(eps) as a sum of non-negative terms that
  shrink with eps: monotone up to float rounding (_RTOL), as is every closed form
  evaluated in floating point (gdp.gaussian_delta at eps and eps + 2.2e-16 can
  differ by one ulp the wrong way).
* gdp.gaussian_epsilon and gdp.mu_for_epsilon step to the safe side of their root:
  delta(eps(delta)) <= delta exactly. The RDP and PLD read-outs solve for eps in
  closed form per order / grid interval: delta(eps(delta)) <= delta (1 + _RTOL)
  (plus the FFT rounding noise the PLD reports).
"""

import math
import warnings

import hypothesis
from absl.testing import absltest
from hypothesis import strategies as st

from dpjax import accounting
from dpjax.accounting import composition, gdp, pld, rdp
from tests import helpers

given = hypothesis.given

_RTOL = 1e-9
_ATOL = 1e-12

SIGMAS = st.floats(0.5, 20.0)
SAMPLING_PROBS = st.one_of(st.just(1.0), st.floats(-4.0, 0.0).map(lambda e: min(1.0, 10.0 ** e)))
STEPS = st.integers(1, 10_000)
DELTAS = st.floats(-10.0, -2.0).map(lambda e: 10.0 ** e)
# A factor >= 1 that moves one parameter to its "more private" or "less private" side.
FACTORS = st.floats(1.0, 4.0)


def _rdp_eps(sigma, q, t, delta):
  return accounting.dpsgd_epsilon(sigma, q, t, delta, "rdp")


def _pld_bound(sigma, q, t, delta):
  with warnings.catch_warnings():
    # A memory-limited grid warns and still returns an upper bound with its error.
    warnings.simplefilter("ignore", RuntimeWarning)
    return pld.dpsgd_epsilon_bound(sigma, q, t, delta)


def _assert_le(test, small, big, msg="", rtol=_RTOL, atol=_ATOL):
  """small <= big up to rtol * |big| + atol (inf allowed on the right)."""
  test.assertLessEqual(small, big + rtol * abs(big) + atol if math.isfinite(big) else big,
                       msg)


class RdpMonotonicityTest(absltest.TestCase):
  """eps of the RDP accountant falls with sigma and rises with q and T; delta falls with eps."""

  @helpers.property_settings(40)
  @given(sigma=SIGMAS, factor=FACTORS, q=SAMPLING_PROBS, t=STEPS, delta=DELTAS)
  def test_epsilon_falls_with_sigma(self, sigma, factor, q, t, delta):
    more_noise = min(20.0, sigma * factor)
    _assert_le(self, _rdp_eps(more_noise, q, t, delta), _rdp_eps(sigma, q, t, delta))

  @helpers.property_settings(40)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, factor=FACTORS, t=STEPS, delta=DELTAS)
  def test_epsilon_rises_with_sampling_prob(self, sigma, q, factor, t, delta):
    _assert_le(self, _rdp_eps(sigma, q, t, delta), _rdp_eps(sigma, min(1.0, q * factor), t, delta))

  @helpers.property_settings(40)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, t=STEPS, extra=st.integers(0, 10_000), delta=DELTAS)
  def test_epsilon_rises_with_steps(self, sigma, q, t, extra, delta):
    _assert_le(self, _rdp_eps(sigma, q, t, delta), _rdp_eps(sigma, q, min(10_000, t + extra), delta))

  @helpers.property_settings(40)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, t=STEPS, eps=st.floats(0.0, 50.0),
         gap=st.floats(0.0, 10.0))
  def test_delta_falls_with_epsilon(self, sigma, q, t, eps, gap):
    orders, curve = rdp.dpsgd_rdp(sigma, q, t)
    d_lo, _ = rdp.rdp_to_delta(orders, curve, eps)
    d_hi, _ = rdp.rdp_to_delta(orders, curve, eps + gap)
    _assert_le(self, d_hi, d_lo)

  @helpers.property_settings(40)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, t=STEPS, delta=DELTAS)
  def test_epsilon_meets_its_delta(self, sigma, q, t, delta):
    orders, curve = rdp.dpsgd_rdp(sigma, q, t)
    eps, _ = rdp.rdp_to_epsilon(orders, curve, delta)
    d, _ = rdp.rdp_to_delta(orders, curve, eps)
    _assert_le(self, d, delta, f"eps={eps}")


class PldMonotonicityTest(absltest.TestCase):
  """The adaptive PLD answer is monotone up to its own error estimate (module docstring)."""

  @helpers.property_settings(6)
  @given(sigma=SIGMAS, factor=FACTORS, q=SAMPLING_PROBS, t=STEPS, delta=DELTAS)
  def test_epsilon_falls_with_sigma(self, sigma, factor, q, t, delta):
    worse = _pld_bound(sigma, q, t, delta)
    better = _pld_bound(min(20.0, sigma * factor), q, t, delta)
    _assert_le(self, better.value - better.error, worse.value, f"{better} vs {worse}")

  @helpers.property_settings(6)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, factor=FACTORS, t=STEPS, delta=DELTAS)
  def test_epsilon_rises_with_sampling_prob(self, sigma, q, factor, t, delta):
    better = _pld_bound(sigma, q, t, delta)
    worse = _pld_bound(sigma, min(1.0, q * factor), t, delta)
    _assert_le(self, better.value - better.error, worse.value, f"{better} vs {worse}")

  @helpers.property_settings(6)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, t=STEPS, extra=st.integers(0, 10_000), delta=DELTAS)
  def test_epsilon_rises_with_steps(self, sigma, q, t, extra, delta):
    better = _pld_bound(sigma, q, t, delta)
    worse = _pld_bound(sigma, q, min(10_000, t + extra), delta)
    _assert_le(self, better.value - better.error, worse.value, f"{better} vs {worse}")

  @helpers.property_settings(6)
  @given(sigma=SIGMAS, q=SAMPLING_PROBS, t=STEPS, delta=DELTAS)
  def test_rdp_is_never_below_pld(self, sigma, q, t, delta):
    # Both are upper bounds on the same truth and PLD is within `error` of it.
    p = _pld_bound(sigma, q, t, delta)
    _assert_le(self, p.value - p.error, _rdp_eps(sigma, q, t, delta), f"{p}")

  @helpers.property_settings(12)
  @given(sigma=st.floats(1.0, 20.0), q=st.floats(-3.0, -0.05).map(lambda e: 10.0 ** e),
         t=st.integers(1, 1000), eps=st.floats(0.0, 20.0), gap=st.floats(0.0, 5.0),
         delta=DELTAS, factor=st.floats(1.0, 1e3))
  def test_fixed_grid_profile_is_monotone(self, sigma, q, t, eps, gap, delta, factor):
    # One discretised PLD (h = 1e-3): delta(eps) non-increasing, eps(delta) non-increasing,
    # and eps(delta) meets delta.
    dist = pld.gaussian_pld(sigma, q, value_discretization=1e-3).self_compose(t)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)   # FFT-noise warning for tiny delta
      _assert_le(self, dist.delta(eps + gap), dist.delta(eps))
      looser = min(0.5, delta * factor)
      e_tight, e_loose = dist.epsilon(delta), dist.epsilon(looser)
      _assert_le(self, e_loose, e_tight)
      _assert_le(self, dist.delta(e_tight), delta + dist.rounding_noise(e_tight))


class ExactCasesTest(absltest.TestCase):
  """RDP >= PLD >= the exact eps where it is known in closed form."""

  @helpers.property_settings(25)
  @given(sigma=SIGMAS, t=STEPS, delta=DELTAS)
  def test_full_batch_gaussian_is_gdp(self, sigma, t, delta):
    # q = 1: T Gaussian steps are exactly mu-GDP with mu = sqrt(T) / sigma.
    exact = gdp.gaussian_epsilon(delta, math.sqrt(t) / sigma)
    _assert_le(self, exact, _rdp_eps(sigma, 1.0, t, delta))
    self.assertAlmostEqual(accounting.dpsgd_epsilon(sigma, 1.0, t, delta, "pld"), exact,
                           delta=_RTOL * exact + _ATOL)
    acct = accounting.Accountant("pld").compose_gaussian(sigma, count=t)
    self.assertAlmostEqual(acct.epsilon(delta), exact, delta=_RTOL * exact + _ATOL)

  @helpers.property_settings(8)
  @given(sigma=SIGMAS, t=STEPS, delta=DELTAS)
  def test_full_batch_gaussian_on_a_grid_is_pessimistic(self, sigma, t, delta):
    # The same Gaussian composition, discretised (h = 1e-2) and composed by FFT:
    # connect-the-dots pessimism keeps it above the exact eps.
    exact = gdp.gaussian_epsilon(delta, math.sqrt(t) / sigma)
    grid = pld.gaussian_pld(sigma).discretise(1e-2).self_compose(t)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      _assert_le(self, exact, grid.epsilon(delta))

  @helpers.property_settings(25)
  @given(eps0_steps=st.integers(100, 10_000), t=st.integers(1, 500), delta=DELTAS)
  def test_randomized_response_composition(self, eps0_steps, t, delta):
    # T-fold binary randomized response is the worst case of Kairouz-Oh-Viswanath, so
    # its exact eps is optimal_composition_epsilon(eps0, 0, T, delta). With eps0 a
    # multiple of the PLD grid (1e-4) every loss lies on the grid and the PLD is exact
    # up to the FFT rounding noise n it reports: delta_pld(eps) is within n of the
    # exact delta(eps) for every eps, so eps_pld lies in [eps(delta + n), eps(delta - n)].
    eps0 = eps0_steps * pld.DEFAULT_VALUE_DISCRETIZATION
    exact = composition.optimal_composition_epsilon(eps0, 0.0, t, delta)
    by_rdp = accounting.Accountant("rdp").compose_randomized_response(eps0, count=t)
    dist = pld.randomized_response_pld(eps0).self_compose(t)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      e_pld = accounting.Accountant("pld").compose_randomized_response(eps0, count=t).epsilon(delta)
      self.assertEqual(e_pld, dist.epsilon(delta))
    noise = dist.rounding_noise(exact)
    lo = composition.optimal_composition_epsilon(eps0, 0.0, t, min(0.5, delta + noise))
    hi = (composition.optimal_composition_epsilon(eps0, 0.0, t, delta - noise)
          if noise < delta else t * eps0)
    _assert_le(self, lo, e_pld, f"exact={exact} noise={noise}")
    _assert_le(self, e_pld, hi, f"exact={exact} noise={noise}")
    _assert_le(self, e_pld, by_rdp.epsilon(delta))
    _assert_le(self, exact, by_rdp.epsilon(delta))

  @helpers.property_settings(25)
  @given(scale=st.floats(0.05, 20.0), sensitivity=st.floats(0.1, 5.0), delta=DELTAS)
  def test_single_laplace(self, scale, sensitivity, delta):
    # One Laplace mechanism with eps0 = sensitivity / scale: delta(eps) = 1 - e^{(eps - eps0)/2}
    # on [0, eps0], so eps(delta) = max(0, eps0 + 2 log(1 - delta)).
    eps0 = sensitivity / scale
    exact = max(0.0, eps0 + 2.0 * math.log1p(-delta))
    e_rdp = accounting.Accountant("rdp").compose_laplace(scale, sensitivity).epsilon(delta)
    e_pld = accounting.Accountant("pld").compose_laplace(scale, sensitivity).epsilon(delta)
    _assert_le(self, exact, e_pld)
    _assert_le(self, e_pld, e_rdp)
    # The grid moves each loss up by at most one spacing.
    _assert_le(self, e_pld, exact + pld.DEFAULT_VALUE_DISCRETIZATION)


class CompositionTest(absltest.TestCase):
  """A composition is never tighter than its largest part."""

  @helpers.property_settings(10)
  @given(phases=st.lists(st.tuples(st.floats(0.8, 20.0),
                                   st.floats(-3.0, 0.0).map(lambda e: 10.0 ** e),
                                   st.integers(1, 300)), min_size=2, max_size=3),
         laplace_scale=st.one_of(st.none(), st.floats(0.5, 50.0)),
         delta=DELTAS, eps=st.floats(0.0, 10.0))
  def test_never_tighter_than_the_largest_part(self, phases, laplace_scale, delta, eps):
    def build(name, parts, lap):
      acct = accounting.Accountant(name)
      for sigma, q, t in parts:
        acct.compose_subsampled_gaussian(sigma, q, count=t)
      if lap is not None:
        acct.compose_laplace(lap)
      return acct

    parts = [(p, None) for p in phases] + ([] if laplace_scale is None else [(None, laplace_scale)])
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      for name in ("rdp", "pld"):
        whole = build(name, phases, laplace_scale)
        for gauss, lap in parts:
          part = build(name, [] if gauss is None else [gauss], lap)
          _assert_le(self, part.epsilon(delta), whole.epsilon(delta), f"{name} {gauss} {lap}")
          _assert_le(self, part.delta(eps), whole.delta(eps), f"{name} {gauss} {lap}")

  @helpers.property_settings(40)
  @given(eps0=st.floats(0.0, 2.0), delta0=st.one_of(st.just(0.0), DELTAS),
         k=st.integers(1, 2000), slack=DELTAS)
  def test_exact_composition_within_the_theorems(self, eps0, delta0, k, slack):
    # KOV's optimal composition is the exact profile; basic and advanced composition
    # are upper bounds on it: at their eps, the exact delta is at most their delta.
    basic_eps, basic_delta = composition.basic_composition(eps0, delta0, k)
    _assert_le(self, composition.optimal_composition_delta(eps0, delta0, k, basic_eps),
               basic_delta)
    adv_eps, adv_delta = composition.advanced_composition(eps0, delta0, k, slack)
    _assert_le(self, composition.optimal_composition_delta(eps0, delta0, k, adv_eps), adv_delta)

  @helpers.property_settings(40)
  @given(eps0=st.floats(0.001, 2.0), delta0=st.one_of(st.just(0.0), st.floats(0.0, 1e-9)),
         k=st.integers(1, 2000), extra=st.integers(0, 2000), delta=st.floats(1e-5, 1e-2))
  def test_exact_composition_rises_with_k(self, eps0, delta0, k, extra, delta):
    # delta0 <= 1e-9 and k + extra <= 4000 keep delta above the floor 1 - (1 - delta0)^k.
    _assert_le(self, composition.optimal_composition_epsilon(eps0, delta0, k, delta),
               composition.optimal_composition_epsilon(eps0, delta0, k + extra, delta))


class GdpTest(absltest.TestCase):
  """The exact Gaussian profile is monotone and its inverses meet their targets."""

  @helpers.property_settings(60)
  @given(mu=st.floats(-3.0, 2.5).map(lambda e: 10.0 ** e), eps=st.floats(0.0, 100.0),
         gap=st.floats(0.0, 10.0), factor=FACTORS)
  def test_delta_falls_with_epsilon_and_rises_with_mu(self, mu, eps, gap, factor):
    # Float evaluation is monotone only to rounding (eps and eps + 2.2e-16 at mu = 1.155
    # give delta 1 ulp apart, the wrong way): _RTOL.
    _assert_le(self, gdp.gaussian_delta(eps + gap, mu), gdp.gaussian_delta(eps, mu))
    _assert_le(self, gdp.gaussian_delta(eps, mu), gdp.gaussian_delta(eps, mu * factor))

  @helpers.property_settings(60)
  @given(mu=st.floats(-3.0, 2.5).map(lambda e: 10.0 ** e), delta=DELTAS)
  def test_epsilon_meets_delta(self, mu, delta):
    # Documented as the smallest eps with delta(eps) <= delta: no tolerance.
    eps = gdp.gaussian_epsilon(delta, mu)
    self.assertLessEqual(gdp.gaussian_delta(eps, mu), delta, f"eps={eps}")

  @helpers.property_settings(60)
  @given(eps=st.floats(0.01, 50.0), delta=DELTAS)
  def test_mu_for_epsilon_meets_delta(self, eps, delta):
    # Documented to step down until delta(eps) <= delta holds as evaluated: no tolerance.
    self.assertLessEqual(gdp.gaussian_delta(eps, gdp.mu_for_epsilon(eps, delta)), delta)


class CalibrateNoiseTest(absltest.TestCase):
  """calibrate_noise returns a sigma that meets the target and is minimal to rtol."""

  @helpers.property_settings(15)
  @given(target=st.floats(0.1, 20.0), q=SAMPLING_PROBS, t=STEPS, delta=DELTAS)
  def test_meets_target_and_is_minimal(self, target, q, t, delta):
    rtol = 1e-4
    try:
      sigma = accounting.calibrate_noise(target, q, t, delta, rtol=rtol)
    except ValueError as e:   # target outside what NOISE_MULTIPLIER_RANGE reaches
      hypothesis.assume("noise_multiplier" not in str(e))
      raise
    self.assertLessEqual(_rdp_eps(sigma, q, t, delta), target)
    self.assertGreater(_rdp_eps(sigma / (1.0 + 2.0 * rtol), q, t, delta), target)


if __name__ == "__main__":
  absltest.main()
