"""Tests for dpjax.accounting.noise_support: the delta the noise sampler's support adds,
reported by the privacy statement and checked by the engine."""

import decimal
import math
import warnings

import jax
import numpy as np
import scipy.stats
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import accounting
from dpjax import dpsgd
from dpjax import models
from dpjax import prng
from dpjax.accounting import noise_support
from dpjax.accounting import statement
from tests import helpers

_QUIET = dpsgd.PerformanceFlags(progress=False)


class SamplerDeltaTest(parameterized.TestCase):

  @parameterized.parameters((0.0, 1, 1e-20), (1.0, 28_500, 1e-36), (8.0, 10 ** 9, 1e-30),
                            (40.9, 28_500, 1.5e-36))
  def test_closed_form(self, eps, k, tau):
    want = (1.0 + math.exp(eps)) * k * tau
    self.assertAlmostEqual(noise_support.sampler_delta(eps, k, tail_mass=tau) / want, 1.0,
                           places=12)

  def test_large_epsilon_in_log_space(self):
    # e^750 overflows float64; the exact value from decimal arithmetic.
    eps, k, tau = 720.0, 10, 1e-320
    got = noise_support.sampler_delta(eps, k, tail_mass=tau)
    with decimal.localcontext() as ctx:
      ctx.prec = 40
      want = float((1 + decimal.Decimal(eps).exp()) * k * decimal.Decimal(tau))
    self.assertAlmostEqual(got / want, 1.0, places=9)
    self.assertEqual(noise_support.sampler_delta(750.0, 10, tail_mass=1e-300), 1.0)
    self.assertEqual(noise_support.sampler_delta(math.inf, 10, tail_mass=1e-300), 1.0)
    self.assertEqual(noise_support.sampler_delta(5.0, 10, tail_mass=0.0), 0.0)

  def test_default_is_this_librarys_sampler(self):
    tau = prng.normal_tail_mass()
    z_min, z_max = prng.normal_support()
    self.assertAlmostEqual(tau / (scipy.stats.norm.cdf(z_min) + scipy.stats.norm.sf(z_max)),
                           1.0, places=7)
    self.assertEqual(accounting.sampler_delta(2.0, 1000),
                     (1.0 + math.exp(2.0)) * 1000 * tau)

  def test_max_epsilon_is_the_boundary(self):
    for delta, k, tau in ((1e-5, 28_500, prng.normal_tail_mass()), (1e-8, 10 ** 9, 1e-30)):
      e = noise_support.max_epsilon_for_sampler_delta(delta, k, tail_mass=tau)
      self.assertLessEqual(noise_support.sampler_delta(e, k, tail_mass=tau), 1e-3 * delta)
      self.assertGreater(noise_support.sampler_delta(e + 1e-6, k, tail_mass=tau), 1e-3 * delta)
    self.assertEqual(noise_support.max_epsilon_for_sampler_delta(1e-5, 10, tail_mass=1e-3),
                     -math.inf)
    self.assertEqual(noise_support.max_epsilon_for_sampler_delta(1e-5, 10, tail_mass=0.0),
                     math.inf)

  @parameterized.parameters(
      dict(epsilon=-1.0, num_draws=1), dict(epsilon=float("nan"), num_draws=1),
      dict(epsilon=1.0, num_draws=0), dict(epsilon=1.0, num_draws=2.5),
      dict(epsilon=1.0, num_draws=1, tail_mass=1.5), dict(epsilon=1.0, num_draws=1,
                                                          tail_mass=-1e-9))
  def test_rejects_bad_input(self, **kw):
    with self.assertRaises(ValueError):
      noise_support.sampler_delta(**kw)

  def test_rejects_wrong_types(self):
    for kw in (dict(epsilon="1", num_draws=1), dict(epsilon=1.0, num_draws=True)):
      with self.assertRaises((TypeError, ValueError)):
        noise_support.sampler_delta(**kw)
    with self.assertRaises(ValueError):
      noise_support.max_epsilon_for_sampler_delta(0.0, 10)


class StatementSamplerDeltaTest(absltest.TestCase):

  def test_statement_adds_the_sampler_delta(self):
    sigma, q, t, n, d = 1.0, 0.2, 50, 150, 57
    plain = statement.privacy_statement(sigma, q, t, n, deltas=(1e-5, 1e-8))
    s = statement.privacy_statement(sigma, q, t, n, deltas=(1e-5, 1e-8),
                                    noise_draws_per_step=d)
    for r0, r in zip(plain.rows, s.rows):
      self.assertEqual(r0.sampler_delta, 0.0)
      self.assertEqual(r.rdp_epsilon, r0.rdp_epsilon)
      want = accounting.sampler_delta(max(r.rdp_epsilon, r.pld_epsilon), t * d)
      self.assertEqual(r.sampler_delta, want)
      self.assertGreater(r.sampler_delta, 0.0)
      self.assertEqual(r.total_delta, r.delta + want)
    self.assertIn("delta + sampler delta", s.text())
    self.assertIn(f"T*d = {t} * {d}", s.text())
    self.assertIn("NOT included", plain.text())
    self.assertEqual(s.to_dict()["rows"][0]["total_delta"], s.rows[0].total_delta)
    self.assertEqual(s.sampler_support, prng.normal_support())
    with self.assertRaises(ValueError):
      statement.privacy_statement(sigma, q, t, n, noise_draws_per_step=0)


class EngineCheckTest(absltest.TestCase):

  def _train(self, **cfg_overrides):
    x, y = helpers.binary_data()
    cfg = helpers.small_config(**cfg_overrides)
    keep = np.ones((2, x.shape[0]), bool)
    return dpsgd.train_many(jax.random.key(0), x, y, keep, cfg,
                            models.logistic_regression(x.shape[1]), perf=_QUIET)

  def test_warns_only_when_the_extra_delta_matters(self):
    with warnings.catch_warnings():
      warnings.simplefilter("error", dpsgd.UnaccountedComponentWarning)
      self._train()                              # delta = 1e-5: extra ~1e-34
    # delta = 1e-40: 2 T d tau ~ 1e-34 alone exceeds 1e-3 delta.
    with self.assertWarnsRegex(dpsgd.UnaccountedComponentWarning, "finite support"):
      self._train(delta=1e-40)


if __name__ == "__main__":
  absltest.main()
