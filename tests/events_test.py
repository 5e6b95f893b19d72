"""Tests for dpjax.accounting.events: validation, immutability, flattening."""

import dataclasses
import math

from absl.testing import absltest, parameterized

from dpjax.accounting import events as ev


class ConstructorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("gaussian_zero", lambda: ev.GaussianEvent(0.0), "noise_multiplier"),
      ("gaussian_nan", lambda: ev.GaussianEvent(float("nan")), "noise_multiplier"),
      ("gaussian_str", lambda: ev.GaussianEvent("1"), "noise_multiplier"),
      ("laplace_neg", lambda: ev.LaplaceEvent(-1.0), "noise_multiplier"),
      ("rr_eps_zero", lambda: ev.RandomizedResponseEvent(0.0), "epsilon"),
      ("rr_one_bucket", lambda: ev.RandomizedResponseEvent(1.0, 1), "num_buckets"),
      ("dgauss_sigma", lambda: ev.DiscreteGaussianEvent(-2.0), "sigma"),
      ("dgauss_sens_frac", lambda: ev.DiscreteGaussianEvent(2.0, 1.5), "sensitivity"),
      ("dlap_param", lambda: ev.DiscreteLaplaceEvent(0.0), "noise_parameter"),
      ("dlap_sens_zero", lambda: ev.DiscreteLaplaceEvent(1.0, 0), "sensitivity"),
      ("epsdelta_eps_inf", lambda: ev.EpsilonDeltaEvent(math.inf, 0.1), "epsilon"),
      ("epsdelta_delta_one", lambda: ev.EpsilonDeltaEvent(1.0, 1.0), "delta"),
      ("zcdp_rho", lambda: ev.ZCdpEvent(0.0), "rho"),
      ("poisson_q", lambda: ev.PoissonSampledEvent(0.0, ev.GaussianEvent(1.0)), "sampling_prob"),
      ("poisson_q_big", lambda: ev.PoissonSampledEvent(1.5, ev.GaussianEvent(1.0)),
       "sampling_prob"),
      ("poisson_event", lambda: ev.PoissonSampledEvent(0.5, 1.0), "event"),
      ("wor_sizes", lambda: ev.SampledWithoutReplacementEvent(10, 11, ev.GaussianEvent(1.0)),
       "sample_size"),
      ("wor_n", lambda: ev.SampledWithoutReplacementEvent(0, 0, ev.GaussianEvent(1.0)),
       "dataset_size"),
      ("self_count", lambda: ev.SelfComposedEvent(ev.GaussianEvent(1.0), 0), "count"),
      ("self_event", lambda: ev.SelfComposedEvent("gaussian", 2), "event"),
      ("composed_empty", lambda: ev.ComposedEvent(()), "events"),
      ("composed_bare", lambda: ev.ComposedEvent(ev.GaussianEvent(1.0)), "events"),
      ("composed_member", lambda: ev.ComposedEvent((ev.GaussianEvent(1.0), 3)), "events"),
  )
  def test_bad_input_is_rejected_by_name(self, build, name):
    with self.assertRaisesRegex((ValueError, TypeError), name):
      build()

  def test_events_are_frozen_and_hashable(self):
    e = ev.PoissonSampledEvent(0.01, ev.GaussianEvent(1.0))
    with self.assertRaises(dataclasses.FrozenInstanceError):
      e.sampling_prob = 0.5
    same = ev.PoissonSampledEvent(0.01, ev.GaussianEvent(1.0))
    self.assertEqual(e, same)
    self.assertEqual(len({e, same, ev.ComposedEvent([e, same])}), 2)

  def test_relation_is_checked(self):
    self.assertEqual(ev.check_relation("replace_one"), ev.REPLACE_ONE)
    self.assertEqual(ev.check_relation("replace_special"), ev.REPLACE_SPECIAL)
    with self.assertRaisesRegex(ValueError, "relation"):
      ev.check_relation("replace_any")


class FlattenTest(absltest.TestCase):

  def test_counts_multiply_through_nesting(self):
    g, l = ev.GaussianEvent(1.0), ev.LaplaceEvent(2.0)
    tree = ev.SelfComposedEvent(ev.ComposedEvent((ev.SelfComposedEvent(g, 3), l)), 5)
    self.assertEqual(ev.flatten(tree), [(g, 15), (l, 5)])

  def test_sampled_events_are_leaves(self):
    s = ev.PoissonSampledEvent(0.1, ev.SelfComposedEvent(ev.GaussianEvent(1.0), 2))
    self.assertEqual(ev.flatten(ev.SelfComposedEvent(s, 4)), [(s, 4)])

  def test_pure_epsilon_closed_forms(self):
    self.assertEqual(ev.pure_epsilon(ev.LaplaceEvent(4.0)), 0.25)
    self.assertEqual(ev.pure_epsilon(ev.DiscreteLaplaceEvent(0.5, 3)), 1.5)
    self.assertEqual(ev.pure_epsilon(ev.RandomizedResponseEvent(0.7, 4)), 0.7)
    self.assertEqual(ev.pure_epsilon(ev.EpsilonDeltaEvent(0.3)), 0.3)
    self.assertEqual(ev.pure_epsilon(ev.EpsilonDeltaEvent(0.3, 1e-6)), math.inf)
    self.assertEqual(ev.pure_epsilon(ev.GaussianEvent(1.0)), math.inf)


if __name__ == "__main__":
  absltest.main()
