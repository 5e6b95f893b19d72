"""benchmarks/peer_cases.py: the peers' cases are well-formed, and ours <= dp_accounting.

The default tests check every case's data and build both libraries' events, then evaluate a
handful of cheap cases (one per kind of event and query) against dp_accounting 0.6.0; the
slow test evaluates every case. dp_accounting is an optional oracle: without it the
evaluations skip.
"""

import math
import os
import sys
import tempfile
from unittest import mock

import pytest
from absl.testing import absltest, parameterized

from benchmarks import peer_cases as pc
from benchmarks import report
from dpjax.accounting import events as ev

try:
  import dp_accounting  # noqa: F401
except ImportError:  # pragma: no cover - optional oracle
  dp_accounting = None

_BY_NAME = {c.name: c for c in pc.CASES}
# Cheap rows, one per kind: RDP DP-SGD, RDP curves (randomized response under replace-special,
# tree aggregation, repeat-and-select), PLD delta / eps of Gaussians, subsampled Laplace,
# randomized response, discrete Laplace, DP-SGD eps, and a calibration.
_CHEAP = ("opacus rdp q=0.04 s=1.5 T=2250", "dpa rdp rr replace_special p=0.3 k=10",
          "tfp tree restart s=1.13 T=1600", "dpa rdp repeat-select gaussian med1",
          "dpa rdp laplace eps=1.0 x100", "dpa pld gaussian sqrt3 x3 delta",
          "dpa pld poisson laplace q=0.2 b=0.5 x3 delta", "dpa pld rr replace_one p=0.6995 k=4",
          "dpa pld discrete laplace 1x3 + 0.5x2 delta",
          "opacus prv s=3.0 q=0.001 T=1000",
          "opacus calibrate rdp_steps eps=8 q=0.04 T=2000")


class PeerCasesDataTest(absltest.TestCase):

  def test_every_case_is_well_formed(self):
    self.assertEqual(len(_BY_NAME), len(pc.CASES), "case names must be unique")
    for c in pc.CASES:
      with self.subTest(c.name):
        self.assertIn(c.source, pc.SOURCES)
        self.assertTrue(c.path.endswith(".py"), c.path)
        self.assertTrue(c.test)
        self.assertIn(c.relation, ev.RELATIONS)
        self.assertIn(c.accountant, ("rdp", "pld"))
        self.assertIn(c.query, pc.QUERIES)
        has_noise = pc.NOISE in repr(c.event)
        self.assertEqual(has_noise, c.query == "noise")
        if c.query == "epsilon":
          self.assertTrue(0 < c.value < 1)
        elif c.query == "delta":
          self.assertGreaterEqual(c.value, 0)
        elif c.query == "noise":
          eps, delta = c.value
          self.assertGreater(eps, 0)
          self.assertTrue(0 < delta < 1)
          self.assertIsNotNone(pc.dpsgd_params(c.event))
        else:
          self.assertIsNone(c.value)
        if c.orders is not None:
          self.assertTrue(all(1 < o < math.inf for o in c.orders))
        if c.query != "noise":   # both libraries' events build from the same spec
          pc.dpjax_event(c.event)
          if dp_accounting is not None:
            pc.dp_accounting_event(c.event)

  def test_every_source_is_pinned_and_used(self):
    for repo, commit in pc.SOURCES.values():
      self.assertIn("/", repo)
      self.assertLen(commit, 40)
    self.assertEqual({c.source for c in pc.CASES}, set(pc.SOURCES))
    for source, path, test, why in pc.NOT_SHARED:
      self.assertIn(source, pc.SOURCES)
      self.assertTrue(path and test and why)

  def test_randomized_response_parameter_maps_to_the_same_law(self):
    # dp_accounting's p (uniform bucket with probability p) against dpjax's eps:
    # P(true) / P(other) = (1 - p + p / k) / (p / k) = e^eps
    for p, k in ((0.3, 10), (0.05, 20), (0.01, 3)):
      e = pc.dpjax_event(("rr", p, k)).epsilon
      self.assertAlmostEqual(math.exp(e), (1 - p + p / k) / (p / k), places=9)

  def test_dpsgd_and_gaussian_shapes(self):
    self.assertEqual(pc.dpsgd_params(pc._dpsgd(1.5, 0.04, 10)), (1.5, 0.04, 10))
    self.assertIsNone(pc.dpsgd_params(("gaussian", 1.0)))
    mu = pc.gaussian_mu(("compose", (("self", ("gaussian", 10.0), 50),
                                     ("self", ("gaussian", 5.0), 50))))
    self.assertAlmostEqual(mu, math.sqrt(50 / 100 + 50 / 25))
    self.assertIsNone(pc.gaussian_mu(pc._dpsgd(1.0, 0.5, 3)))

  def test_section_renders_from_the_json(self):
    tmp = tempfile.mkdtemp()
    rows = [{"name": "a", "source": "opacus", "path": "opacus/tests/x_test.py",
             "test": "T.test_a", "accountant": "pld", "relation": "add_remove",
             "query": "epsilon", "value": 1e-5, "ours": 1.0, "dp_accounting": 1.5, "le": True,
             "rel_gap": -1 / 3, "ours_s": 0.1, "dp_accounting_s": 0.2, "time_ratio": 2.0,
             "front_door": 0.9, "front_door_le": True},
            {"name": "b", "source": "dp_accounting", "path": "p/y_test.py", "test": "test_b",
             "accountant": "rdp", "relation": "replace_one", "query": "rdp", "value": None,
             "ours": 2.0, "dp_accounting": 1.0, "le": False, "rel_gap": 1.0, "order": 2.0,
             "orders": 3, "ours_s": 0.1, "dp_accounting_s": 0.1, "time_ratio": 1.0,
             "certificate": "not certified (no lower bound for this event)"},
            {"name": "c", "source": "prv_accountant", "path": "t/z.py", "test": "test_c",
             "accountant": "rdp", "relation": "add_remove", "query": "epsilon",
             "value": 1e-5, "unsupported": "no"}]
    with mock.patch.object(sys, "argv", ["peer_cases.py"]):
      report.write("peer_cases", {"rows": rows, "not_shared": [["opacus", "p.py", "t", "why"]],
                                  "sources": {}}, os.path.join(tmp, "peer_cases.json"))
    text = report.render(tmp)
    self.assertIn("2 shared cases; ours ≤ dp_accounting 0.6.0 in 1, above in 1", text)
    self.assertIn("| a | opacus `x_test.py` test_a | pld, add-remove | ε at δ = 1e-05 | 1 | "
                  "1.5 | ≤ | -3.3e-01 | 0.9 ≤ | 2.00× |  |", text)
    self.assertIn("RDP at α = 2 (worst of 3)", text)
    self.assertIn("- c (prv_accountant `z.py` test_c): no", text)
    self.assertIn("- opacus `p.py` t: why", text)


@absltest.skipIf(dp_accounting is None, "dp_accounting is not installed")
class PeerCasesAgainstDpAccountingTest(parameterized.TestCase):

  def _check_row(self, row):
    self.assertTrue(row["le"], row)
    if "front_door" in row:   # DP-SGD: the event accountant is at most the front door
      self.assertTrue(row["front_door_le"], row)
      self.assertLessEqual(row["ours"], row["front_door"], row)

  @parameterized.parameters(*_CHEAP)
  def test_ours_is_at_most_dp_accountings(self, name):
    row = pc.evaluate(_BY_NAME[name], repeats=1, certify=False)
    self.assertNotIn("unsupported", row)
    self.assertTrue(math.isfinite(row["ours"]))
    self._check_row(row)

  @pytest.mark.slow   # every case: several minutes (DP-SGD PLD to T = 50,000, calibrations)
  def test_every_case(self):
    for case in pc.CASES:
      row = pc.evaluate(case, repeats=1, certify=False)
      with self.subTest(case.name):
        if "unsupported" in row:   # listed by name in the table
          continue
        if row["le"] or "front_door" in row:   # DP-SGD rows: always <=
          self._check_row(row)
        else:
          # the truncated Poisson Gaussian: dpjax bounds both neighbours of an n-record
          # dataset (n others when a record is added), dp_accounting n - 1 others only
          self.assertIn("truncated", case.name, row)


if __name__ == "__main__":
  absltest.main()
