"""The privacy statement (library function and experiment) on small settings."""

import json
import math
import os
import tempfile

import dp_accounting
from absl.testing import absltest, parameterized
from scipy import stats

from dpjax import tradeoff
from dpjax.accounting import gdp, pld, statement
from experiments import privacy_statement as ps


class PrivacyStatementTest(parameterized.TestCase):

  def test_numbers_match_the_accountants(self):
    st = statement.privacy_statement(1.1, 0.01, 500, 10_000, deltas=(1e-5, 1e-7))
    self.assertLen(st.rows, 2)
    for r in st.rows:
      # PLD row is the PLD accountant's answer; RDP is never tighter than PLD.
      self.assertAlmostEqual(r.pld_epsilon, pld.dpsgd_epsilon(1.1, 0.01, 500, r.delta),
                             places=9)
      self.assertLessEqual(r.pld_epsilon, r.rdp_epsilon)
      # dp_accounting's RDP (integer orders, abs-value series) is never tighter than ours.
      acc = dp_accounting.rdp.RdpAccountant()
      acc.compose(dp_accounting.PoissonSampledDpEvent(
          0.01, dp_accounting.GaussianDpEvent(1.1)), 500)
      self.assertLessEqual(r.rdp_epsilon, acc.get_epsilon(r.delta) + 1e-9)
      mu = 0.01 * math.sqrt(500 * math.expm1(1 / 1.1 ** 2))
      self.assertAlmostEqual(st.clt_mu, mu, places=12)
      self.assertAlmostEqual(r.clt_epsilon, gdp.gaussian_epsilon(r.delta, mu), places=9)
    self.assertAlmostEqual(st.expected_batch_size, 100.0)
    self.assertAlmostEqual(st.epochs, 5.0)

  def test_tradeoff_bound_is_valid_and_near_the_gaussian(self):
    # For a plain Gaussian (q = 1) the PLD profile is the exact mu-GDP profile, so the
    # bound from it must be >= the exact trade-off curve and close to it.
    mu = 1.0
    p = pld.gaussian_pld(1.0 / mu)
    fprs = [0.001, 0.01, 0.1]
    got = tradeoff.pld_tpr_bound(p, fprs, 10.0)
    want = stats.norm.cdf(stats.norm.ppf(fprs) + mu)
    for g, w in zip(got, want):
      self.assertGreaterEqual(g, w - 1e-12)
      self.assertLessEqual(g, w + 0.01)

  def test_flags_delta_against_n_and_disagreements(self):
    st = statement.privacy_statement(0.8, 0.1, 300, 1000, deltas=(1e-3, 1e-6))
    self.assertIn("VOID", st.delta_notes[0])          # delta = 1/n
    self.assertIn("<< 1", st.delta_notes[1])
    text = st.text()
    for needle in ("add/remove one example", "Poisson", "APPROXIMATE", "1/n", "FPR"):
      self.assertIn(needle, text)
    # RDP is loose here by much more than the PLD's error: the statement says so.
    self.assertTrue(any("RDP is looser" in s for s in st.disagreements), st.disagreements)

  @parameterized.named_parameters(
      ("n0", dict(dataset_size=0), "dataset_size"),
      ("q", dict(sampling_prob=2.0), "sampling_prob"),
      ("delta", dict(deltas=(0.0,)), "delta"),
      ("fpr", dict(fprs=(1.5,)), "fprs"),
  )
  def test_rejects(self, override, name):
    kw = dict(noise_multiplier=1.0, sampling_prob=0.01, num_steps=10, dataset_size=100)
    kw.update(override)
    with self.assertRaisesRegex(ValueError, name):
      statement.privacy_statement(**kw)

  def test_experiment_writes_results(self):
    out = tempfile.mkdtemp()
    cfg = ps.PrivacyStatementConfig(noise_multiplier=1.0, sampling_prob=0.02, num_steps=200,
                                    dataset_size=5000, deltas=(1e-5,))
    res = ps.run(cfg, out, quiet=True)
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["experiment"], "privacy_statement")
    row = doc["results"]["statement"]["rows"][0]
    self.assertAlmostEqual(row["pld_epsilon"], res["statement"].rows[0].pld_epsilon)
    self.assertTrue(os.path.exists(os.path.join(out, "tradeoff.png")))
    # Same flags -> identical file.
    with open(res["path"]) as f:
      first = f.read()
    ps.run(cfg, out, quiet=True)
    with open(res["path"]) as f:
      self.assertEqual(first, f.read())
    # The figure's curves are in the record; the PLD bound lies above the diagonal.
    curve = doc["results"]["tradeoff_curve"]
    self.assertLen(curve["fpr"], 60)
    for f, t in zip(curve["fpr"], curve["tpr_pld"]):
      self.assertGreaterEqual(t, f - 1e-12)
    self.assertEqual(doc["flags"]["deltas"], [1e-5])

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(noise_multiplier=0.0), dict(sampling_prob=0.0),
               dict(sampling_prob=1.01), dict(num_steps=0), dict(dataset_size=0),
               dict(deltas=()), dict(deltas=(1e-5, 1.0))):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          ps.PrivacyStatementConfig(**kw)


if __name__ == "__main__":
  absltest.main()
