"""Tests for dpjax.audit.final_model: the final-model audit loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest, parameterized
from scipy import special, stats as sp_stats

from dpjax import accounting, dpsgd, models
from dpjax.accounting import gdp
from dpjax.audit import crafting, last_iterate
from dpjax.audit import final_model as fm
from dpjax.data import digits


class AuditTest(absltest.TestCase):

  @pytest.mark.slow
  def test_final_model_score_is_the_last_iterate_sum(self):
    # At q = 1 with Dirac canaries on untouched weights, the final displacement
    # (times B / (lr C)) is X = sum_t o_t exactly, and the white-box LLR on the
    # same runs is (2 X - T) / (2 sigma^2): the same statistic. X follows the
    # last-iterate law: N(T, T s^2) IN, N(0, T s^2) OUT.
    d = digits.load(jax.random.key(0))
    x, y = d.x_train_NxF[:40], d.y_train_N[:40]
    model = models.mlp(64, (4,), 10)
    p0 = model.init(jax.random.key(5))
    c, lr, t, sigma = 1.0, 0.5, 3, 2.0
    g = crafting.input_weight_canaries(model, p0, crafting.unused_features(x), c)
    xi, yi = crafting.input_canary(model, p0, crafting.unused_features(x))
    advs = [fm.FinalModelAdversary("g", {"final": crafting.projection_score(g)},
                                   gradient_canaries=g),
            fm.FinalModelAdversary("in", {"loss": crafting.loss_score(model, xi, yi)},
                                   record=(xi, yi))]
    cfg = dpsgd.DpSgdConfig(dataset_size=40, sampling_prob=1.0, num_steps=t,
                            l2_clip_norm=c, noise_multiplier=sigma, learning_rate=lr)
    a = fm.audit(jax.random.key(7), cfg, model, x, y, init_params=p0, adversaries=advs,
                 num_runs=48, progress=False)
    s = a.audits["g/final"].scores_RxK * cfg.expected_batch_size / (lr * c)
    wb = a.white_box["g"].scores_RxK
    np.testing.assert_allclose(s, sigma ** 2 * wb + t / 2, rtol=1e-4, atol=1e-3)
    bits = a.audits["g/final"].included_RxK
    z_in = (s[bits] - t) / (sigma * math.sqrt(t))
    z_out = s[~bits] / (sigma * math.sqrt(t))
    for z in (z_in, z_out):
      self.assertGreater(sp_stats.kstest(z, "norm").pvalue, 1e-3)
    self.assertEqual(a.audits["in/loss"].scores_RxK.shape, (48, 1))
    # a correct configuration: every bound at or below the exact eps
    exact = accounting.dpsgd_epsilon(sigma, 1.0, t, 1e-5, accountant="pld")
    self.assertAlmostEqual(a.exact_epsilon, exact, places=9)
    self.assertAlmostEqual(a.last_iterate_epsilon, exact, delta=2e-2)
    for au in list(a.audits.values()) + list(a.white_box.values()):
      for v in au.epsilon_lower().values():
        self.assertLessEqual(v, exact)

  def test_rejects(self):
    model = models.mlp(3, (2,), 2)
    p0 = model.init(jax.random.key(0))
    x = np.zeros((8, 3), np.float32)
    y = np.zeros(8, np.int32)
    cfg = dpsgd.DpSgdConfig(dataset_size=8, sampling_prob=1.0, num_steps=2,
                            noise_multiplier=1.0, learning_rate=0.1)
    good = fm.FinalModelAdversary("a", {"s": crafting.loss_score(model, x[0], 1)},
                                  record=(x[0], 1))
    with self.assertRaisesRegex(ValueError, "named"):
      fm.audit(jax.random.key(0), cfg, model, x, y, init_params=p0,
               adversaries=[good, good], num_runs=8)
    with self.assertRaisesRegex(ValueError, "exactly one"):
      fm.audit(jax.random.key(0), cfg, model, x, y, init_params=p0,
               adversaries=[good._replace(record=None)], num_runs=8)
    with self.assertRaisesRegex(TypeError, "adversaries"):
      fm.audit(jax.random.key(0), cfg, model, x, y, init_params=p0, adversaries=[3],
               num_runs=8)
    with self.assertRaisesRegex(ValueError, "observe_fn"):
      fm.audit(jax.random.key(0), cfg, model, x, y, init_params=p0, adversaries=[good],
               num_runs=8, observe_fn=lambda u: u)
    with self.assertRaisesRegex(ValueError, "fixed_gradients is set by audit"):
      fm.audit(jax.random.key(0), cfg, model, x, y, init_params=p0, adversaries=[good],
               num_runs=8, fixed_gradients=dpsgd.FixedGradients(
                   jax.tree.map(lambda v: jnp.zeros((1,) + v.shape), p0),
                   np.ones((8, 1), bool)))
    with self.assertRaisesRegex(ValueError, "gradient_canaries"):
      bad = fm.FinalModelAdversary("g", {"s": lambda f, i: jnp.zeros(1)},
                                   gradient_canaries={"w": jnp.zeros((1, 3))})
      fm.audit(jax.random.key(0), cfg, model, x, y, init_params=p0, adversaries=[bad],
               num_runs=8)
    with self.assertRaisesRegex(ValueError, "mlp"):
      crafting.worst_case_init(models.cnn((8, 8, 1), (2,), 2),
                         models.cnn((8, 8, 1), (2,), 2).init(jax.random.key(0)), 0, 0)


if __name__ == "__main__":
  absltest.main()
