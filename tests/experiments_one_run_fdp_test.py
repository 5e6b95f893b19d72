"""experiments/one_run_fdp.py on a tiny scale: shape of the record, validity, determinism."""

import json
import os
import tempfile

import math

import numpy as np
import pytest
from absl.testing import absltest
from scipy import optimize, stats

from dpjax.accounting import gdp
from dpjax.audit import one_run
from experiments import one_run_fdp
from tests import helpers


class OneRunFdpRunTest(absltest.TestCase):

  def test_run_small(self):
    out = tempfile.mkdtemp()
    cfg = one_run_fdp.OneRunFdpConfig(seed=1, noise_multipliers=(0.5, 2.0), num_canaries=400,
                                      repeats=2, paper_protocol=False)
    one_run_fdp.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "one_run_fdp")
    self.assertEqual(doc["flags"]["num_canaries"], 400)
    self.assertTrue(os.path.exists(os.path.join(out, "one_run_fdp.png")))
    rows = doc["results"]["per_sigma"]
    self.assertEqual([r["sigma"] for r in rows], [0.5, 2.0])
    for r in rows:
      self.assertAlmostEqual(r["exact_epsilon"], gdp.gaussian_epsilon(1e-5, 1 / r["sigma"]),
                             places=9)
      self.assertTrue(r["all_below_exact"])
      for m in one_run_fdp.METHODS:
        self.assertLen(r[m]["runs"], 2)
        self.assertLessEqual(r[m]["min"], r[m]["median"])
      # the Gaussian-curve analysis of the same guesses is the tighter one
      self.assertGreater(r["fdp_gdp"]["median"], r["steinke"]["median"])
    self.assertGreater(rows[0]["steinke"]["median"], 1.0)     # sigma = 0.5 carries signal
    # the paper columns hold Mahloujifar et al.'s printed Table 1 values
    self.assertEqual(doc["tables"][0]["rows"][0][-2:], [4.99, 8.16])
    self.assertNotIn("paper_protocol", doc["results"])
    # same seed, same numbers
    out2 = tempfile.mkdtemp()
    one_run_fdp.run(cfg, out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], doc["results"])

  def test_top_precision_closed_form(self):
    # top half: threshold 1/2 by symmetry, so the precision is Phi(1 / (2 sigma))
    for sigma in (0.5, 1.0, 4.0):
      self.assertAlmostEqual(one_run_fdp.top_precision(sigma, 0.5),
                             stats.norm.cdf(0.5 / sigma), places=10)
    # any fraction: P[x > t] = fraction and precision from Phi at the solved t
    sigma, frac = 2.0, 0.01
    t = optimize.brentq(lambda t: 0.5 * (stats.norm.sf((t - 1) / sigma)
                                         + stats.norm.sf(t / sigma)) - frac, -20, 20)
    a, b = stats.norm.sf((t - 1) / sigma), stats.norm.sf(t / sigma)
    self.assertAlmostEqual(one_run_fdp.top_precision(sigma, frac), a / (a + b), places=9)
    with self.assertRaisesRegex(ValueError, "fraction"):
      one_run_fdp.top_precision(1.0, 1.0)

  def test_expected_correct_matches_simulation(self):
    sigma, m, r = 1.0, 200_000, 2000
    c = one_run_fdp.expected_correct(sigma, m, r)
    self.assertEqual(c, math.ceil(r * one_run_fdp.top_precision(sigma, r / (2 * m))))
    rng = np.random.default_rng(0)
    got = []
    for _ in range(5):
      x, bits = one_run_fdp.one_run_game(rng, m, sigma)
      o = np.argsort(-x)
      got.append(bits[o[:r // 2]].sum() + (~bits[o[-r // 2:]]).sum())
    self.assertLess(abs(np.mean(got) - c), 4 * np.sqrt(r * 0.25 / 5) + 1)
    with self.assertRaisesRegex(ValueError, "even"):
      one_run_fdp.expected_correct(1.0, 100, 3)

  def test_paper_protocol_picks_c_prime_after_the_fact(self):
    sigma, m = 1.0, 2000
    out = one_run_fdp.paper_protocol(sigma, m, delta=1e-5, confidence=0.95, grid_points=10)
    grid = one_run_fdp.paper_guess_grid(m, 10)
    by_hand = {r: one_run.epsilon_lower_bound(
        num_canaries=m, num_guesses=r, num_correct=one_run_fdp.expected_correct(sigma, m, r),
        delta=1e-5) for r in grid}
    best = max(by_hand, key=by_hand.get)
    self.assertEqual(out["steinke"]["num_guesses"], best)        # the best c', no union bound
    self.assertAlmostEqual(out["steinke"]["epsilon_lower"], by_hand[best], places=12)
    self.assertGreater(out["steinke"]["epsilon_lower"], sorted(by_hand.values())[-2] - 1e-12)
    self.assertGreaterEqual(out["fdp_gdp"]["epsilon_lower"], out["steinke"]["epsilon_lower"])
    self.assertLessEqual(out["fdp_gdp"]["epsilon_lower"], gdp.gaussian_epsilon(1e-5, 1.0))

  @pytest.mark.slow
  def test_paper_table(self):
    cfg = one_run_fdp.OneRunFdpConfig(seed=1, noise_multipliers=(1.0,), num_canaries=400,
                                      repeats=1, paper_scale=0.01, paper_grid_points=8)
    out = tempfile.mkdtemp()
    one_run_fdp.run(cfg, out, progress=False, quiet=True)
    with open(os.path.join(out, "results.json")) as f:
      doc = json.load(f)
    (row,) = doc["results"]["paper_protocol"]
    self.assertEqual(row["num_canaries"], 1000)
    self.assertEqual(row["fdp_gdp"]["paper"], 3.61)
    self.assertIn("NOT a valid", doc["tables"][1]["title"])

  @pytest.mark.slow
  def test_command_line(self):
    # One subprocess (about 4 s): the flags reach the config.
    p = helpers.run_experiment("one_run_fdp", "--num_canaries", "100", "--repeats", "1",
                               "--nopaper_protocol",
                               "--noise_multipliers", "1.0")
    self.assertEqual(p.returncode, 0, p.stderr)
    # Bad flag values: tests/experiments_import_test.py (_BAD_FLAGS).


if __name__ == "__main__":
  absltest.main()
