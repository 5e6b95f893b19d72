"""Shrunken run of experiments/exercise6.py: its accounting identities and its outputs."""

import json
import math
import os
import tempfile

import numpy as np
import pytest
from absl.testing import absltest

from dpjax import accounting
from dpjax.accounting import composition, rdp
from experiments import exercise6

_TINY = dict(seed=0, customers=40, test_customers=20, zip_codes=5, clip_norms=(0.5, 2.0),
             lr_c2=(1.0,), model_clip=0.5, model_lr_c2=1.0, sampling_prob=0.3, num_steps=5,
             rs_mean_runs=2.0, min_count=8.0, max_rate_sd=0.3)


class Exercise6ExperimentTest(absltest.TestCase):

  def test_budget(self):
    # The accounting of every part, from the config alone (host RDP, about a second).
    b = exercise6._budget(exercise6.Exercise6Config(**_TINY))
    # Basic composition: the model alone at 2.0. One RDP account of the same three
    # mechanisms spends less than 3, so at a total of 3 the model's sigma is smaller.
    self.assertAlmostEqual(b["eps_model_basic"], 2.0, delta=2e-3)
    self.assertAlmostEqual(accounting.dpsgd_epsilon(b["sigma_basic"], 0.3, 5, 1e-5), 2.0,
                           delta=2e-3)
    self.assertLess(b["eps_joint_at_basic_sigma"], 3.0)
    self.assertLess(b["sigma_joint"], b["sigma_basic"])
    # Every calibrated procedure lands at (not above) the total, to the bisection's 1e-4.
    for k in ("eps_joint", "eps_em_train", "eps_rs"):
      self.assertBetween(b[k], 2.99, 3.0 + 1e-9)
    # The zip release alone: two Laplace(1/0.35) curves composed, at delta, <= basic 0.7.
    zip_rdp = 2 * rdp.laplace_rdp(1 / 0.35, rdp.DEFAULT_ORDERS)
    self.assertAlmostEqual(b["eps_zip_rdp"],
                           rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, zip_rdp, 1e-5)[0], places=12)
    # Charging every candidate's training costs more noise than one model; the naive
    # procedure's real cost for training customers exceeds what it claims.
    self.assertGreater(b["sigma_em"], b["sigma_joint"])
    self.assertGreater(b["eps_naive_train"], 3.0)
    # The validation customers of the exponential-mechanism procedure pay the zip
    # release and the selection (0.3 as eps-bounded-range) only.
    sel_rdp = composition.pure_dp_rdp(0.3, rdp.DEFAULT_ORDERS, bounded_range=True)
    self.assertAlmostEqual(
        b["eps_em_validation"],
        rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, zip_rdp + sel_rdp, 1e-5)[0], places=12)
    self.assertLess(b["eps_em_validation"], b["eps_em_train"])

  @pytest.mark.slow
  def test_run_tiny(self):
    # About 30 s of CPU, almost all of it compiling the customer sampler and the two
    # DP-SGD programs.
    cfg = exercise6.Exercise6Config(**_TINY)
    out = tempfile.mkdtemp()
    res = exercise6.run(cfg, out, progress=False, quiet=True)
    r = res["record"]
    b = r["budget"]
    self.assertEqual(b, exercise6._budget(cfg))
    sel = r["selection"]
    self.assertEqual(sel[0]["eps_validation_customers"], math.inf)
    self.assertEqual([s["trainings"] for s in sel[:2]], [2, 2])
    self.assertEqual(sel[2]["trainings"], r["num_runs"])
    # Zip rows: both rules applied to the released values only.
    zips = r["zips"]
    self.assertLen(zips, 5)
    self.assertEqual(sum(z["customers"] for z in zips), 40)
    for z in zips:
      self.assertEqual(z["unreliable_ours"], z["rate_sd"] > 0.3)
      self.assertEqual(z["unreliable_lecture"], z["noisy_customers"] < 8.0)
      self.assertBetween(z["noisy_rate"], 0.0, 1.0)
    # The five-loan customer: group privacy's closed form (15, min(1, 5 e^12 1e-5)).
    five = r["five_loans"][1]
    self.assertEqual((five["loans"], five["example_eps"]), (5, 15.0))
    self.assertEqual(five["example_delta"], min(1.0, 5 * math.exp(12) * 1e-5))
    self.assertEqual(composition.group_privacy(3.0, 1e-5, 5), (15.0, five["example_delta"]))
    for v in r["model"].values():
      self.assertBetween(v["test_accuracy"], 0.0, 1.0)
    self.assertTrue(os.path.exists(os.path.join(out, "exercise6_zips.png")))
    # The same seed gives the same numbers.
    again = exercise6.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)["record"]
    self.assertEqual(json.dumps(again, default=str), json.dumps(r, default=str))
    with open(res["path"]) as f:
      self.assertEqual(json.load(f)["flags"]["clip_norms"], [0.5, 2.0])

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(customers=4), dict(zip_codes=0), dict(epsilon=2.0),
               dict(model_epsilon=-1.0), dict(delta=1.0), dict(validation_every=1),
               dict(clip_norms=(0.0,)), dict(lr_c2=()), dict(sampling_prob=0.0),
               dict(num_steps=0), dict(rs_mean_runs=0.5), dict(rs_shape=-1.0),
               dict(score_noise=0.0), dict(max_rate_sd=0.0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          exercise6.Exercise6Config(**kw)
    self.assertTrue(np.isclose(exercise6.Exercise6Config().epsilon, 3.0))


if __name__ == "__main__":
  absltest.main()
