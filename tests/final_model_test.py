"""dpjax/audit: last_iterate (the last-iterate law), crafting (the canaries, the crafted
init) and final_model (the audit)."""

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


def _per_example_grads(model, params, x, y):
  g = jax.vmap(lambda xi, yi: jax.grad(lambda p: models.per_example_loss(
      model, p, xi[None], yi[None])[0])(params))(x, y)
  return g


class LastIterateTest(parameterized.TestCase):

  @parameterized.named_parameters(("T1", 1, 1.0), ("T16", 16, 2.0), ("T100", 100, 3.0))
  def test_full_batch_is_gaussian(self, t, sigma):
    # q = 1: the sum of T steps is N(T, T sigma^2) vs N(0, T sigma^2): mu = sqrt(T)/sigma.
    mu = math.sqrt(t) / sigma
    for e in (0.0, 0.5, 2.0, 5.0):
      np.testing.assert_allclose(last_iterate.last_iterate_delta(e, 1.0, sigma, t),
                                 float(gdp.gaussian_delta(e, mu)), rtol=1e-9, atol=1e-15)
    self.assertAlmostEqual(last_iterate.last_iterate_epsilon(1.0, sigma, t, 1e-5),
                           gdp.gaussian_epsilon(1e-5, mu), delta=1e-8)

  @parameterized.named_parameters(("q03", 0.3, 5, 1.0), ("q01", 0.1, 20, 0.8))
  def test_monte_carlo(self, q, t, sigma):
    # delta_remove(eps) = E_IN[(1 - e^(eps - l(X)))_+], delta_add = E_OUT[(1 - e^(eps + l(X)))_+]
    rng = np.random.default_rng(0)
    m = 100_000
    s = sigma * math.sqrt(t)
    x_in = rng.binomial(t, q, m) + s * rng.standard_normal(m)
    x_out = s * rng.standard_normal(m)
    k = np.arange(t + 1.0)
    logw = sp_stats.binom.logpmf(k, t, q)

    def log_l(x):
      return special.logsumexp(logw + (2 * k * x[:, None] - k * k) / (2 * s * s), axis=1)
    l_in, l_out = log_l(x_in), log_l(x_out)
    for e in (0.2, 1.0):
      for direction, z in (("remove", np.maximum(0, 1 - np.exp(e - l_in))),
                           ("add", np.maximum(0, 1 - np.exp(e + l_out)))):
        exact = last_iterate.last_iterate_delta(e, q, sigma, t, direction=direction)
        tol = 5 * z.std() / math.sqrt(m) + 1e-6
        self.assertLess(abs(z.mean() - exact), tol, (direction, e, z.mean(), exact))

  @parameterized.named_parameters(("small_q", 0.01, 1.0, 500), ("mid_q", 0.2, 1.5, 50))
  def test_below_the_composition(self, q, sigma, t):
    # The final sum is a post-processing of the T updates: its eps is at most the
    # accountant's exact (PLD) eps of the composition.
    heur = last_iterate.last_iterate_epsilon(q, sigma, t, 1e-5)
    exact = accounting.dpsgd_epsilon(sigma, q, t, 1e-5, accountant="pld")
    self.assertLess(heur, exact + 1e-3)
    self.assertGreater(heur, 0.0)

  def test_epsilon_inverts_delta(self):
    e = last_iterate.last_iterate_epsilon(0.1, 1.0, 50, 1e-5, tol=1e-10)
    self.assertLessEqual(last_iterate.last_iterate_delta(e, 0.1, 1.0, 50), 1e-5 * (1 + 1e-9))
    self.assertGreater(last_iterate.last_iterate_delta(e - 1e-6, 0.1, 1.0, 50), 1e-5)

  def test_roc_is_the_laws(self):
    thr, fpr, fnr = last_iterate.last_iterate_roc(0.3, 1.0, 4, num_points=201)
    self.assertTrue(np.all(np.diff(fpr) <= 0) and np.all(np.diff(fnr) >= 0))
    rng = np.random.default_rng(1)
    x_in = rng.binomial(4, 0.3, 200_000) + 2.0 * rng.standard_normal(200_000)
    j = 100
    self.assertAlmostEqual(fnr[j], float(np.mean(x_in <= thr[j])), delta=0.005)
    self.assertAlmostEqual(fpr[j], float(special.ndtr(-thr[j] / 2.0)), places=12)

  def test_rejects(self):
    with self.assertRaisesRegex(ValueError, "direction"):
      last_iterate.last_iterate_delta(1.0, 0.5, 1.0, 2, direction="both_ways")
    with self.assertRaisesRegex(ValueError, "noise_multiplier"):
      last_iterate.last_iterate_epsilon(0.5, math.inf, 2, 1e-5)


class CanariesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    d = digits.load(jax.random.key(0))
    self.x, self.y = d.x_train_NxF[:100], d.y_train_N[:100]
    self.model = models.mlp(64, (6,), 10)
    self.params = self.model.init(jax.random.key(3))

  def test_unused_weights_are_untouched_by_records(self):
    unused = crafting.unused_features(self.x)
    self.assertGreaterEqual(unused.size, 3)
    self.assertTrue(np.all(np.asarray(self.x)[:, unused] == 0))
    g = crafting.input_weight_canaries(self.model, self.params, unused, 2.0, skip_units=(1,))
    w = np.asarray(g["layers"][0]["w"])
    self.assertEqual(w.shape[0], unused.size * 5)
    np.testing.assert_allclose(np.sqrt((w ** 2).sum(axis=(1, 2))), 2.0)
    self.assertTrue(np.all(w[:, :, 1] == 0))
    # every record's gradient is exactly 0 on every canary coordinate (N = 100)
    grads = _per_example_grads(self.model, self.params, self.x, self.y)
    gw = np.asarray(grads["layers"][0]["w"])              # [N, 64, 6]
    self.assertEqual(float(np.abs(np.einsum("nfh,kfh->nk", gw, w)).max()), 0.0)
    self.assertGreater(float(np.abs(gw).max()), 0.0)

  def test_worst_case_init(self):
    unused = crafting.unused_features(self.x)
    p, (xt, yt) = crafting.worst_case_init(self.model, self.params, int(unused[0]), 3, unit=2)
    w1, b1 = np.asarray(p["layers"][0]["w"]), np.asarray(p["layers"][0]["b"])
    pre = np.asarray(self.x) @ w1 + b1[None]
    self.assertTrue(np.all(pre[:, 2] <= -2.0 + 1e-6))          # no record activates it
    grads = _per_example_grads(self.model, p, self.x, self.y)
    for leaf in (grads["layers"][0]["w"][:, :, 2], grads["layers"][0]["b"][:, 2],
                 grads["layers"][1]["w"][:, 2, :]):
      self.assertEqual(float(jnp.abs(leaf).max()), 0.0)
    d = crafting.gradient_direction(self.model, p, xt, yt)
    private = (float(d["layers"][0]["w"][0, int(unused[0]), 2]) ** 2
               + float(d["layers"][0]["b"][0, 2]) ** 2)
    self.assertGreater(math.sqrt(private), 0.99)   # cos with the untouched block
    g = jax.grad(lambda q: models.per_example_loss(self.model, q, xt[None],
                                                   jnp.array([yt]))[0])(p)
    norm = math.sqrt(sum(float((l ** 2).sum()) for l in jax.tree.leaves(g)))
    self.assertGreater(norm, 10.0)                 # far above C = 1: clipped to C

  def test_input_canary_label_maximises_loss(self):
    unused = crafting.unused_features(self.x)
    xc, yc = crafting.input_canary(self.model, self.params, unused)
    self.assertTrue(np.all(xc[unused] == 0) and np.sum(xc == 1.0) == 64 - unused.size)
    losses = models.per_example_loss(self.model, self.params, jnp.asarray(np.tile(xc, (10, 1))),
                                     jnp.arange(10))
    self.assertEqual(yc, int(np.argmax(np.asarray(losses))))

  def test_pretrain_lowers_the_loss(self):
    p = crafting.pretrain(self.model, self.params, self.x, self.y, num_steps=50, learning_rate=0.5)
    before = float(jnp.mean(models.per_example_loss(self.model, self.params, self.x, self.y)))
    after = float(jnp.mean(models.per_example_loss(self.model, p, self.x, self.y)))
    self.assertLess(after, 0.7 * before)


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
