"""Shrunken run of experiments/disparate_impact.py, plus its feature map."""

import json
import os
import tempfile

import jax
import numpy as np
import pytest
from absl.testing import absltest

from dpjax.data import credit
from experiments import disparate_impact as di


class DisparateImpactTest(absltest.TestCase):

  def test_features(self):
    scaler = credit.PublicScaler.fit(credit.sample(jax.random.key(0), 500).x_NxF)
    data = credit.sample(jax.random.key(1), 50)
    x = np.asarray(di.features(data.x_NxF, scaler, True))
    lin = np.asarray(credit.linear_features(data.x_NxF, scaler))
    g = np.asarray(data.x_NxF)[:, 4]
    self.assertEqual(x.shape, (50, 7))
    np.testing.assert_allclose(x[:, :5], lin[:, :5])
    np.testing.assert_allclose(x[:, 5], g)
    np.testing.assert_allclose(x[:, 6], g * lin[:, 3], rtol=1e-6)
    self.assertEqual(di.features(data.x_NxF, scaler, False).shape, (50, 5))

  # End-to-end run: behind slow for the CI budget; ./run.sh all runs the experiment at its
  # default scale.
  @pytest.mark.slow
  def test_run_small(self):
    out = tempfile.mkdtemp()
    cfg = di.DisparateImpactConfig(seed=0, n_train=200, n_test=2000, seeds=3,
                                   minority_share=0.2, epsilons=(1.0,), batch_size=50,
                                   epochs=2, learning_rate=0.5, l2_clip_norm=1.0, delta=1e-5,
                                   demo3=False)
    res = di.run(cfg, out, progress=False, quiet=True)
    rec = res["record"]
    self.assertEqual([e["setting"] for e in rec["settings"]], ["inf", "clip", "1"])
    for e in rec["settings"]:
      for k in ("clipped0", "clipped1"):
        self.assertBetween(e[k], 0.0, 1.0)
    self.assertEqual(rec["settings"][0]["clipped0"], 0.0)  # no clipping at eps = inf
    self.assertAlmostEqual(rec["settings"][2]["epsilon"], 1.0, delta=0.05)
    self.assertGreater(rec["settings"][2]["sigma"], 0.0)
    self.assertEmpty(rec["demo3"])
    self.assertTrue(os.path.exists(os.path.join(out, "accuracy_per_group.png")))
    with open(res["path"]) as f:
      doc = json.load(f)
    self.assertEqual(doc["flags"]["epsilons"], [1.0])
    self.assertFalse(doc["flags"]["demo3"])
    res2 = di.run(cfg, tempfile.mkdtemp(), progress=False, quiet=True)
    self.assertEqual(res2["record"], rec)

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(n_train=0), dict(n_test=0), dict(seeds=1),
               dict(minority_share=0.0), dict(minority_share=1.0), dict(epsilons=()),
               dict(epsilons=(1.0, -0.5)), dict(batch_size=0), dict(batch_size=2000),
               dict(epochs=0), dict(learning_rate=0.0), dict(l2_clip_norm=-1.0),
               dict(delta=0.0)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          di.DisparateImpactConfig(**kw)


if __name__ == "__main__":
  absltest.main()
