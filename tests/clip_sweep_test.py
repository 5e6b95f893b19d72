"""dpjax.clip_sweep: a (C, lr) grid trained as rescaled copies equals each setting trained alone."""

import jax
import numpy as np
from absl.testing import absltest

from dpjax import clip_sweep, dpsgd, models

_QUIET = dpsgd.PerformanceFlags(progress=False)


def _data(n=30, users=10):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, 3)).astype(np.float32)
  y = (rng.random(n) < 0.5).astype(np.int32)
  return x, y, np.sort(rng.integers(0, users, n)).astype(np.int32)


class ClipSweepTest(absltest.TestCase):

  def test_each_model_equals_its_setting_trained_alone(self):
    # Setting (C, lr) trained directly is C = 1, lr * C^2 on the copy x / C of a stacked
    # pool, divided by C: the same noise draws and the same users sampled. Model 0 is the
    # first of rate k's sweep (keys split from fold_in(key, k)); the other copy is present;
    # rate 0 has no model, so no sweep.
    x, y, uid = _data()
    model, key = models.logistic_regression(3), jax.random.key(3)
    base = dpsgd.DpSgdConfig(dataset_size=10, sampling_prob=0.3, num_steps=4,
                             privacy_unit="user")
    clip, rate, grid = 0.5, 3.0, [[0, 1, 1], [1, 0, 1]]   # model 1: C = 2, sigma 0
    direct = dpsgd.DpSgdConfig(dataset_size=10, sampling_prob=0.3, num_steps=4,
                               noise_multiplier=1.3, l2_clip_norm=clip,
                               learning_rate=rate / clip ** 2, privacy_unit="user")
    keys = jax.random.split(jax.random.fold_in(key, 1), 2)[:1]      # model 0's, rate 1
    want = dpsgd.train_many(keys, x, y, np.ones((1, 30), bool), direct, model,
                            sampler=direct.sampler(uid), perf=_QUIET).params["w"]
    got = clip_sweep.train_clip_sweep(key, x, y, model, base, [1.3, 0.0], [2.0, clip],
                                      [1.0, rate], grid, user_N=uid)
    want = np.asarray(want)[0]
    self.assertGreater(float(np.abs(want).max()), 0.1)          # it moved
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    self.assertEqual(got.shape, (2, 3))
    self.assertGreater(float(np.abs(got[1] - got[0]).max()), 1e-3)   # a different setting


  def test_refuses_what_rescaling_does_not_preserve(self):
    x, y, _ = _data()
    base = dpsgd.DpSgdConfig(dataset_size=30, sampling_prob=0.3, num_steps=2)
    args = (jax.random.key(0), x, y)
    with self.assertRaisesRegex(ValueError, "model must be a models.logistic_regression"):
      clip_sweep.train_clip_sweep(*args, models.logistic_regression(3, l2=0.1), base, [1.0],
                                  [1.0], [1.0], [[0, 0, 0]])
    with self.assertRaisesRegex(ValueError, r"grid_Mx3\[:, 1\]"):
      clip_sweep.train_clip_sweep(*args, models.logistic_regression(3), base, [1.0], [1.0],
                                  [1.0], [[0, 1, 0]])
    with self.assertRaisesRegex(ValueError, "l2_clip_norms"):
      clip_sweep.train_clip_sweep(*args, models.logistic_regression(3), base, [1.0], [0.0],
                                  [1.0], [[0, 0, 0]])


if __name__ == "__main__":
  absltest.main()
