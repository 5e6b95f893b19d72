"""dpjax.pate.labelling: the epsilons of one labelling against closed forms and each other."""

import jax
import numpy as np
from absl.testing import absltest

from dpjax import pate, pate_release
from dpjax.pate import labelling

_ORDERS = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])


def _votes(q=40, k=100):
  rng = np.random.default_rng(0)
  top = rng.integers(55, 100, q)
  return np.stack([top, k - top], axis=1).astype(np.float64)


class LabellingEpsilonsTest(absltest.TestCase):

  def test_gnmax_data_independent_is_the_closed_form(self):
    # GNMax answers every query: Q Gaussian mechanisms of sensitivity sqrt(2),
    # RDP Q alpha / sigma^2; with every query answered both accountings agree.
    votes, sigma = _votes(), 20.0
    e = labelling.labelling_epsilons(None, votes, np.ones(40, bool), sigma=sigma, delta=1e-5,
                                     orders=_ORDERS)
    want = pate.epsilon(_ORDERS, 40 * _ORDERS / sigma ** 2, 1e-5)
    self.assertAlmostEqual(e["epsilon_data_independent"], want, places=12)
    self.assertEqual(e["epsilon_all_answered"], e["epsilon_data_independent"])
    self.assertEqual(e["epsilon_data_dependent_all"], e["epsilon_data_dependent"])
    self.assertLess(e["epsilon_data_dependent"], want)       # clear majorities cost less
    self.assertIsNone(e["epsilon_releasable"])

  def test_confident_gnmax_orders_and_release(self):
    votes = _votes()
    kw = dict(sigma=10.0, threshold=80.0, sigma_threshold=30.0)
    answered = votes[:, 0] >= 80
    self.assertBetween(int(answered.sum()), 1, 39)
    plan = pate_release.plan_release(votes, None, delta=1e-5, **kw)
    e = labelling.labelling_epsilons(jax.random.key(0), votes, answered, delta=1e-5,
                                     orders=_ORDERS, plan=plan, **kw)
    # Charging the answer on answered queries only costs less than charging every query;
    # data-dependent <= data-independent; the released bound is at least the true total,
    # which is at least the data-dependent epsilon of every query charged.
    self.assertLess(e["epsilon_data_independent"], e["epsilon_all_answered"])
    self.assertLessEqual(e["epsilon_data_dependent"], e["epsilon_data_dependent_all"] + 1e-12)
    self.assertLessEqual(e["epsilon_data_dependent_all"], e["epsilon_all_answered"] + 1e-12)
    self.assertGreaterEqual(e["release_true_total_epsilon"], e["epsilon_data_dependent_all"])
    self.assertGreaterEqual(e["epsilon_releasable"], e["release_true_total_epsilon"])
    self.assertEqual(list(e), ["epsilon_data_independent", "epsilon_data_dependent",
                               "epsilon_all_answered", "epsilon_data_dependent_all"]
                     + [f for f, _ in labelling.RELEASE_FIELDS])
    rel = pate_release.release(jax.random.key(0), votes, None, params=plan, delta=1e-5, **kw)
    self.assertEqual(e["epsilon_releasable"], rel.epsilon)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "answered_Q"):
      labelling.labelling_epsilons(None, _votes(), np.ones(3, bool), sigma=1.0, delta=1e-5,
                                   orders=_ORDERS)
    with self.assertRaisesRegex(ValueError, "plan"):
      labelling.labelling_epsilons(None, _votes(), np.ones(40, bool), sigma=1.0, delta=1e-5,
                                   orders=_ORDERS, plan="x")


if __name__ == "__main__":
  absltest.main()
