"""experiments/pate_credit.py: its sigma calibration, its config and a shrunken run."""

import json
import math
import os
import tempfile

import pytest
from absl.testing import absltest

from dpjax import pate
from dpjax.accounting import rdp
from dpjax.audit import pate_audit
from experiments import pate_credit


class HelpersTest(absltest.TestCase):

  def test_calibrated_gnmax_sigma_hits_the_target(self):
    orders = rdp.DEFAULT_ORDERS
    for eps, q in ((1.0, 100), (8.0, 3000)):
      with self.subTest(eps=eps, q=q):
        s = pate_audit.calibrate_sigma(eps, q, delta=1e-5, orders=orders)
        at = pate.epsilon(orders, q * orders / s ** 2, 1e-5)
        below = pate.epsilon(orders, q * orders / (0.999 * s) ** 2, 1e-5)
        self.assertLessEqual(at, eps)
        self.assertGreater(at, eps * (1 - 1e-4))
        self.assertGreater(below, eps)     # a smaller sigma would exceed the target

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(teachers=1), dict(per_teacher=0), dict(public=1),
               dict(test=0), dict(epsilons=(0.0,)), dict(delta=1.0), dict(queries=(0,)),
               dict(queries=(5000,)), dict(confident_thresholds=(1.5,)),
               dict(confident_sigma_thresholds=(0.0,)), dict(confident_sigmas=(-1.0,)),
               dict(release_margin=0.0), dict(release_margin=1.5), dict(fit_steps=0),
               dict(dpsgd_seeds=0), dict(dpsgd_batch=0), dict(dpsgd_batch=10 ** 6),
               dict(dpsgd_epochs=0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          pate_credit.PateCreditConfig(**kw)


class PateCreditRunTest(absltest.TestCase):

  # End-to-end (tens of CPU seconds: compiles for every shape): behind slow; ./run.sh all
  # runs the experiment at its default scale.
  @pytest.mark.slow
  def test_run_small(self):
    out = tempfile.mkdtemp()
    cfg = pate_credit.PateCreditConfig(
        seed=0, teachers=40, per_teacher=60, public=300, test=1000, epsilons=(2.0, 8.0),
        queries=(50, 150, 300), confident_thresholds=(0.75,),
        confident_sigma_thresholds=(0.3, 0.5), confident_sigmas=(0.1,), fit_steps=100,
        dpsgd_seeds=2, dpsgd_batch=200, dpsgd_epochs=1)
    res = pate_credit.run(cfg, out, progress=False, quiet=True)
    r = res["record"]
    self.assertTrue(r["partitions_disjoint"])
    self.assertEqual(r["partition_sizes"], [60, 60])
    self.assertEqual(r["n_private"], 2400)
    cells = r["cells"]
    self.assertEqual([c["aggregator"] for c in cells],
                     ["GNMax", "Confident-GNMax"] * 2 + ["Confident-GNMax (paper's Adult setting)"])
    for c in cells:
      if c["queries"] is None:
        continue
      self.assertBetween(c["answered"], 0, c["queries"])
      self.assertLessEqual(c["epsilon_data_dependent"], c["epsilon_data_independent"] + 1e-9)
      self.assertLessEqual(c["epsilon_data_independent"], c["epsilon_all_answered"] + 1e-9)
      for k in ("student_accuracy", "label_accuracy"):
        if c[k] is not None:
          self.assertBetween(c[k], 0.0, 1.0)
      if c["aggregator"] == "GNMax":
        self.assertEqual(c["answered"], c["queries"])
        self.assertBetween(c["epsilon_data_independent"], c["target_epsilon"] * (1 - 1e-4),
                           c["target_epsilon"])
        self.assertIsNone(c["epsilon_releasable"])
      elif c["epsilon_releasable"] is not None:
        # The released total bounds the true data-dependent total (except with
        # probability 0.01), which is at least the data-dependent eps.
        # The release charges every query both steps: at least that data-dependent
        # curve, which is at least the paper's answered-only one.
        self.assertGreaterEqual(c["epsilon_data_dependent_all"],
                                c["epsilon_data_dependent"] - 1e-9)
        self.assertLessEqual(c["epsilon_data_dependent_all"], c["epsilon_all_answered"] + 1e-9)
        self.assertGreaterEqual(c["release_true_total_epsilon"],
                                c["epsilon_data_dependent_all"] - 1e-9)
        self.assertGreaterEqual(c["epsilon_releasable"], c["epsilon_data_dependent_all"] - 1e-9)
        if c["target_epsilon"] is not None:
          self.assertLessEqual(c["proxy_epsilon"], cfg.release_margin * c["target_epsilon"])
    # The paper's setting is always released, so the release checks above ran.
    self.assertTrue(any(c["epsilon_releasable"] is not None for c in cells))
    for e, d in r["dpsgd"].items():
      self.assertLessEqual(d["epsilon"], float(e) * 1.001)
      self.assertGreater(d["epsilon"], 0.9 * float(e))
      self.assertBetween(d["accuracy"], 0.0, 1.0)
    self.assertTrue(math.isfinite(r["non_private_accuracy"]))
    self.assertTrue(os.path.exists(os.path.join(out, "pate_credit.png")))
    with open(res["path"]) as f:
      self.assertEqual(json.load(f)["flags"]["teachers"], 40)


if __name__ == "__main__":
  absltest.main()
