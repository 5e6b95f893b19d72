"""Tests for dpjax.accounting.pld_pmfs: the mechanisms' gridding against closed forms."""

import math

from absl.testing import absltest, parameterized

from dpjax.accounting import gdp, pld_grid, pld_pmfs


class DominatedDiscretiseTest(parameterized.TestCase):
  """`_dominated_discretise`: a lower bound on delta, composed or not, O(h^2)."""

  @parameterized.parameters((0.5, 100, 1e-3, 0.0), (0.5, 100, 1e-3, 3e-4), (2.0, 4, 1e-3, 0.0),
                            (0.5, 100, 1e-3, None))
  def test_gaussian_brackets_the_exact_profile(self, mu, t, h, shift):
    # q = 1: T steps compose to mu sqrt(T)-GDP exactly (closed form between the two grids)
    ((low, shift),) = pld_pmfs.subsampled_gaussian_pmfs(mu, 1.0, h, 1e-30, dominated=True,
                                                        shift=shift)
    (up,) = pld_pmfs.subsampled_gaussian_pmfs(mu, 1.0, h, 1e-30)
    low_t, up_t = pld_grid.self_compose(low, t), pld_grid.self_compose(up, t)
    for eps in (0.5, 2.0, 5.0, 10.0):
      exact = gdp.gaussian_delta(eps, mu * math.sqrt(t))
      lower = low_t.delta(eps - t * shift) - low_t.infinity_mass - 3e-22
      self.assertLessEqual(lower, exact * (1 + 1e-12))
      self.assertLessEqual(exact, up_t.delta(eps) * (1 + 1e-12))
      self.assertGreater(lower, exact * (1 - 2e-3) - 1e-15)   # O(h^2): close

  def test_subsampled_lower_is_below_the_upper_bound_and_close(self):
    ((low, shift),) = pld_pmfs.subsampled_gaussian_pmfs(1.0, 0.05, 1e-3, 1e-30, ("remove",),
                                                        dominated=True)
    (up,) = pld_pmfs.subsampled_gaussian_pmfs(1.0, 0.05, 1e-3, 1e-30, ("remove",))
    low_t, up_t = pld_grid.self_compose(low, 200), pld_grid.self_compose(up, 200)
    for eps in (0.2, 0.5, 1.0):
      lower = low_t.delta(eps - 200 * shift) - low_t.infinity_mass - 3e-22
      upper = up_t.delta(eps)
      self.assertLessEqual(lower, upper)
      self.assertGreater(lower, upper * (1 - 1e-2))


if __name__ == "__main__":
  absltest.main()
