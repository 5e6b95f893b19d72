"""experiments/_common.py: table rows from records, vmapped Monte Carlo draws, timing.json,
and the canary audit's tables."""

import json
import math
import os
import tempfile

import jax
import numpy as np
from absl.testing import absltest

from experiments import _audit_tables, _common


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


class TimingTest(absltest.TestCase):

  def test_timing_json_holds_the_dict_and_the_line_lists_the_parts(self):
    d = tempfile.mkdtemp()
    timing = {"start_cpu_seconds": 1.25, "rows": [{"q": 0.5, "cpu_seconds": 2.0}]}
    with absltest.mock.patch("builtins.print") as printed:
      path = _common.write_timing(d, "x", timing, [("start", 1.25), ("row q = 0.5:", 2.0)])
    self.assertEqual(path, os.path.join(d, "timing.json"))
    with open(path) as f:
      self.assertEqual(json.load(f), timing)
    printed.assert_called_once_with("[x] CPU seconds (timing.json): start 1.2; row q = 0.5: 2.0")
    with absltest.mock.patch("builtins.print") as printed:
      _common.write_timing(d, "x", timing, [("start", 1.0)], quiet=True)
    printed.assert_not_called()

  def test_reuse_freed_memory_reports_glibc(self):
    # True where glibc accepts both settings (Linux); False without glibc.
    self.assertIsInstance(_common.reuse_freed_memory(), bool)


class AuditTablesTest(absltest.TestCase):

  _ROW = {"epsilon": 2.0, "sigma": 1.5, "epsilon_pld": 1.9, "epsilon_lower_black_box": 0.3,
          "epsilon_lower_black_box_sd": 0.1, "best_certifiable_black_box": 0.5,
          "epsilon_lower_white_box": 0.6, "best_certifiable": 0.8,
          "white_box_fraction_of_best": 0.75, "ceiling": 5.6, "gdp_estimate_white_box": 0.9,
          "white_box_fraction_of_exact": 0.6 / 1.9, "white_box_trials_in": 100,
          "white_box_trials_out": 100, "white_box_fixed_threshold": 0.6,
          "white_box_held_out_threshold": 0.4, "ceiling_white_box": 5.0}

  def _cfg(self, k=1):
    from experiments import audit  # pylint: disable=g-import-not-at-top
    return audit.AuditConfig(trials=8, epsilons=(2.0,), chunk_models=4, canaries_per_run=k)

  def test_shares_split_alpha_as_the_audit_does(self):
    from dpjax.audit import run  # pylint: disable=g-import-not-at-top
    self.assertEqual(_audit_tables.audit_shares(1, 0.95), "each at 97.5%")
    s = run.FIXED_ALPHA_SHARE
    self.assertEqual(_audit_tables.audit_shares(4, 0.9),
                     f"at {1 - s * 0.1:g} and {1 - (1 - s) * 0.1:g}")

  def test_rows_carry_the_recorded_fields_and_the_ceiling_is_the_closed_form(self):
    main, ceil = _audit_tables.audit_tables(self._cfg(), [self._ROW], {500: 4.91})
    self.assertLen(main.columns, 13)
    self.assertEqual(main.rows, [[2.0, 1.5, 1.9, 0.3, 0.1, 0.5, 0.6, None, 0.8, 0.75, 5.6, 0.9,
                                  0.6 / 1.9]])     # no white-box sd recorded: an empty cell
    self.assertIn("each at 97.5%", main.note)
    # 0 errors in n trials per side, delta = 0: both rates' Clopper-Pearson upper limits at
    # 97.5% are p = 1 - 0.025^(1/n), eps = ln((1 - p) / p); the lecture's value beside n = 500.
    by_n = {r[0]: r for r in ceil.rows}
    self.assertEqual(sorted(by_n), [4, 8, 500, 10_000])
    self.assertAlmostEqual(by_n[500][2], 4.91)
    self.assertIsNone(by_n[8][2])
    p = 1 - 0.025 ** (1 / 500)
    self.assertAlmostEqual(by_n[500][1], math.log((1 - p) / p), places=9)

  def test_companion_and_per_step_tables(self):
    t = _audit_tables.audit_companion_table(self._cfg(), [self._ROW], 10)
    self.assertEqual(t.rows, [[2.0, 1.9, 0.6, 0.6, 0.4, 0.8, 0.6 / 1.9]])
    self.assertIn("100 IN / 100 OUT", t.title)
    self.assertIn(_audit_tables.audit_shares(10, 0.95), t.note)
    step = {"sampling_prob": 1.0, "epsilon": 2.0, "sigma": 1.1, "epsilon_pld": 2.0,
            "estimate": 1.5, "estimate_point": 1.8, "estimate_fraction_of_exact": 0.75,
            "bound": 1.0, "bound_fraction_of_exact": 0.5, "run_level_bound": 0.7,
            "run_level_fraction_of_exact": 0.35, "runs": 8, "canaries": 4}
    rows = _audit_tables.audit_per_step_table(self._cfg(), [step, dict(step, sampling_prob=0.2)]).rows
    self.assertEqual([r[-1] for r in rows], ["GDP", "subsampled Gaussian"])
    self.assertEqual(rows[0][:-1], list(step.values()))


if __name__ == "__main__":
  absltest.main()
