"""experiments/published.py: the CSV of published settings, and a run on four of its rows."""

import csv
import json
import tempfile

from absl.testing import absltest

from experiments import published


class PublishedExperimentTest(absltest.TestCase):

  def test_csv_has_sources(self):
    with open(published.CSV_PATH) as f:
      rows = list(csv.DictReader(f))
    self.assertGreaterEqual(len(rows), 15)
    for r in rows:
      self.assertTrue(r["source"].strip(), r)
      self.assertTrue(0 < float(r["sampling_prob"]) <= 1)

  def test_run_small(self):
    out = tempfile.mkdtemp()
    ids = tuple(r["id"] for r in published.load_rows()[:4])
    cfg = published.PublishedConfig(ids=ids, ours_pld=False, dp_pld=False)
    res = published.run(cfg, out, progress=False, quiet=True)
    self.assertEqual([r["id"] for r in res["record"]["rows"]], list(ids))
    for r in res["record"]["rows"]:
      # Exact fractional orders on a superset grid: never above dp_accounting's RDP.
      self.assertLessEqual(r["ours_rdp"], r["dp_accounting_rdp"] + 1e-9)
      self.assertIsNotNone(r["published"])
    self.assertLen(res["tables"], 1)
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["flags"]["ids"], list(ids))
    self.assertFalse(doc["flags"]["dp_pld"])

  def test_event_rows_reproduce_and_are_never_looser(self):
    # tree aggregation (DP-FTRL): the publisher's grid + classic conversion rounds to the
    # published eps; our RDP equals dp_accounting's (same exact curve), our PLD is lower
    rows = published._event_rows()   # pylint: disable=protected-access
    self.assertLen(rows, len(published.EVENT_ROWS))
    for r in rows:
      self.assertAlmostEqual(r["ours_publisher_method"], r["published"], delta=0.005)
      self.assertTrue(r["verdict"].startswith("reproduced"), r["verdict"])
      self.assertAlmostEqual(r["ours_rdp"], r["dp_accounting_rdp"], delta=1e-9 * r["ours_rdp"])
      self.assertLess(r["ours_pld"], r["ours_rdp"])
      self.assertLess(r["ours_rdp"], r["published"])

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(ids=("no_such_setting",))):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          published.PublishedConfig(**kw)


if __name__ == "__main__":
  absltest.main()
