"""The pipelines that build their events through dpjax.accounting.events give the numbers
of the direct RDP formulas bit for bit (DP-SGD, repeat-and-select tuning, the privacy
statement's RDP rows)."""

import itertools

import numpy as np
from absl.testing import absltest

from dpjax import accounting
from dpjax.accounting import events as ev
from dpjax.accounting import rdp, statement

_GRID = list(itertools.product((0.5, 1.1, 4.0), (1e-4, 0.01, 1.0), (1, 1000), (1e-10, 1e-5)))


class PipelineEventsTest(absltest.TestCase):

  def test_dpsgd_epsilon_is_the_direct_formula(self):
    for sigma, q, t, d in _GRID:
      o, r = rdp.dpsgd_rdp(sigma, q, t)
      for method in ("balle2020", "classic"):
        self.assertEqual(accounting.dpsgd_epsilon(sigma, q, t, d, rdp_method=method),
                         rdp.rdp_to_epsilon(o, r, d, method=method)[0])

  def test_tuned_epsilon_is_the_direct_formula(self):
    for (sigma, q, t, d), (mean, shape, score) in itertools.product(
        _GRID[::5], ((10.0, 1.0, None), (3.0, 0.0, 2.0), (5.0, "poisson", 4.0))):
      o, r = rdp.dpsgd_rdp(sigma, q, t)
      if score is not None:
        r = r + rdp.gaussian_rdp(score, o)
      direct = rdp.rdp_to_epsilon(o, rdp.repeat_and_select_rdp(
          o, r, mean_runs=mean, shape=rdp.repeat_shape(shape)), d)[0]
      self.assertEqual(accounting.tuned_dpsgd_epsilon(
          sigma, q, t, d, mean_runs=mean, shape=shape, score_noise_multiplier=score), direct)

  def test_statement_rdp_rows_are_the_direct_formula(self):
    s = statement.privacy_statement(1.1, 256 / 60000, 1000, 60000, deltas=(1e-5, 1e-8))
    o, r = rdp.dpsgd_rdp(1.1, 256 / 60000, 1000)
    for row in s.rows:
      self.assertEqual((row.rdp_epsilon, row.rdp_order), rdp.rdp_to_epsilon(o, r, row.delta))

  def test_dpsgd_event_is_the_composed_step(self):
    e = ev.dpsgd_event(1.0, 0.01, 7)
    self.assertEqual(e, ev.SelfComposedEvent(ev.PoissonSampledEvent(0.01, ev.GaussianEvent(1.0)),
                                             7))
    with self.assertRaisesRegex(ValueError, "num_steps"):
      ev.dpsgd_event(1.0, 0.01, 0)


if __name__ == "__main__":
  absltest.main()
