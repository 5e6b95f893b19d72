"""Shrunken run of experiments/disparate_impact.py, plus its feature map."""

import os
import tempfile

import jax
import numpy as np
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

  def test_run_small(self):
    out = tempfile.mkdtemp()
    res = di.run(seed=0, n_train=200, n_test=2000, seeds=3, minority_share=0.2,
                 epsilons=["1"], batch_size=50, epochs=2, learning_rate=0.5,
                 l2_clip_norm=1.0, delta=1e-5, out_dir=out, progress=False, demo3=False)
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
    res2 = di.run(seed=0, n_train=200, n_test=2000, seeds=3, minority_share=0.2,
                  epsilons=["1"], batch_size=50, epochs=2, learning_rate=0.5,
                  l2_clip_norm=1.0, delta=1e-5, out_dir=out, progress=False, demo3=False)
    self.assertEqual(res2["record"], rec)


if __name__ == "__main__":
  absltest.main()
