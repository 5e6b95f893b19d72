"""Tests for dpjax.accounting.pld_grid: atom gridding and grid deltas against closed forms."""

import math

import numpy as np
from absl.testing import absltest, parameterized

from dpjax.accounting import pld_grid


def _atoms_delta(losses, p, eps, inf=0.0):
  return inf + float(np.sum(p * np.maximum(0.0, -np.expm1(eps - losses))))


class AtomsToGridTest(parameterized.TestCase):

  @parameterized.parameters(1e-2, 1e-3)
  def test_exact_at_grid_points_and_above_between(self, h):
    rng = np.random.default_rng(0)
    losses = rng.uniform(-2.0, 3.0, 40)
    p = rng.dirichlet(np.ones(40)) * 0.99
    pmf = pld_grid.atoms_to_grid(losses, p, h, infinity_mass=0.01)
    for eps in (0.0, 0.37, 1.0, 2.5, 5.0):
      exact = _atoms_delta(losses, p, eps, 0.01)
      self.assertGreaterEqual(pmf.delta(eps), exact - 1e-15)
      self.assertAlmostEqual(pmf.delta(eps), exact, delta=h * h)   # chord error O(h^2)
    for j in (3, 100, 250):
      l = pmf.losses[j]
      self.assertAlmostEqual(pmf.delta(l), _atoms_delta(losses, p, l, 0.01), places=13)

  def test_agrees_with_the_tail_discretisation(self):
    losses = np.array([-0.7, 0.0, 0.45, 1.2])
    p = np.array([0.1, 0.2, 0.3, 0.4])
    a = pld_grid.atoms_to_grid(losses, p, 1e-3)
    b = pld_grid.atoms_pmf(losses, p, 1e-3)
    for eps in np.linspace(0.0, 1.3, 27):
      self.assertAlmostEqual(a.delta(eps), b.delta(eps), places=12)

  def test_grid_deltas_equal_pointwise_deltas(self):
    pmf = pld_grid.atoms_to_grid(np.array([-1.0, 0.3, 2.0]), np.array([0.2, 0.5, 0.3]), 1e-2)
    d = pmf.grid_deltas()
    for j in range(0, pmf.probs.size, 37):
      self.assertAlmostEqual(d[j], pmf.delta(pmf.losses[j]), places=13)

  def test_huge_grid_is_refused(self):
    with self.assertRaises(pld_grid.GridTooLarge):
      pld_grid.atoms_to_grid(np.array([0.0, 1e4]), np.array([0.5, 0.5]), 1e-4)
    self.assertTrue(math.isfinite(pld_grid.MAX_POINTS))


if __name__ == "__main__":
  absltest.main()
