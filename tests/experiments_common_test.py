"""experiments/_common.py: table rows from records, and vmapped Monte Carlo draws."""

import jax
import numpy as np
from absl.testing import absltest

from experiments import _common


class RowsTest(absltest.TestCase):

  def test_keys_name_fields_and_callables_compute_cells(self):
    recs = [{"a": 1, "b": 2.5}, {"a": 3, "b": -1.0}]
    self.assertEqual(_common.rows(recs, "b", lambda r: r["a"] * 10, "a"),
                     [[2.5, 10, 1], [-1.0, 30, 3]])
    self.assertEqual(_common.rows([], "a"), [])


class TableTest(absltest.TestCase):

  def test_columns_pair_headers_with_cells(self):
    recs = [{"a": 1, "b": 2.5}, {"a": 3, "b": -1.0}]
    t = _common.table("T", recs, [("A", "a"), ("2b", lambda r: 2 * r["b"]), ("blank", None)],
                      note="n", digits=2, extra=[("sum", 3.5, None)])
    self.assertEqual(t.columns, ["A", "2b", "blank"])
    self.assertEqual(t.rows, [[1, 5.0, None], [3, -2.0, None], ["sum", 3.5, None]])
    self.assertEqual((t.title, t.note, t.digits), ("T", "n", 2))
    # The same table built by hand renders and records identically.
    by_hand = _common.Table("T", ["A", "2b", "blank"], t.rows, note="n", digits=2)
    self.assertEqual(t.to_json(), by_hand.to_json())
    self.assertEqual(t.text(), by_hand.text())


class MonteCarloTest(absltest.TestCase):

  def test_vmapped_draws_equal_a_loop_over_the_split_keys(self):
    key = jax.random.key(3)
    fn = lambda k: 2.0 * jax.random.normal(k)
    got = _common.monte_carlo(key, fn, 5)
    want = [float(fn(k)) for k in jax.random.split(key, 5)]
    self.assertEqual(got.dtype, np.float64)
    self.assertEqual(got.shape, (5,))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    self.assertGreater(np.unique(got).size, 1)   # independent keys, distinct draws


if __name__ == "__main__":
  absltest.main()
