"""Tests for dpjax.audit.final_model: the final-model audit loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest, parameterized
from scipy import optimize, special, stats as sp_stats

from dpjax import accounting, dpsgd, models
from dpjax.accounting import gdp
from dpjax.audit import crafting, last_iterate, parametric, score_audit
from dpjax.audit import final_model as fm
from dpjax.data import digits
from tests import helpers


def _their_estimate(s_in, s_out, alpha, delta):
  """Annamalai & De Cristofaro's estimator as their paper states it, from SciPy alone:
  tests "IN iff score >= t" for t in the unique scores, one-sided CP upper limits at
  1 - alpha (two-sided 1 - 2 alpha), mu_t, the max over t, eps from Nasr et al.'s eq. 6."""
  best = 0.0
  for t in np.unique(np.r_[s_in, s_out]):
    fp, fn = int(np.sum(s_out >= t)), int(np.sum(s_in < t))
    up = lambda k, n: 1.0 if k == n else sp_stats.beta.ppf(1 - alpha, k + 1, n - k)
    mu = sp_stats.norm.ppf(1 - up(fp, s_out.size)) - sp_stats.norm.ppf(up(fn, s_in.size))
    if mu > 0:
      f = lambda e: (sp_stats.norm.cdf(-e / mu + mu / 2)
                     - math.exp(e) * sp_stats.norm.cdf(-e / mu - mu / 2) - delta)
      best = max(best, optimize.brentq(f, 0, 50) if f(0) > 0 else 0.0)
  return best


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
    with self.assertRaisesRegex(ValueError, "fixed_gradients is set by the audit"):
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


class PaperProtocolTest(absltest.TestCase):
  """Annamalai & De Cristofaro's protocol: target, estimator, audit loop."""

  def test_blank_target_is_zeros_with_label_9(self):
    x, y = fm.blank_target((64,))
    self.assertEqual((x.shape, x.dtype, y), ((64,), np.float32, 9))
    np.testing.assert_array_equal(x, np.zeros(64))
    x, y = fm.blank_target(digits.IMAGE_SHAPE, label=3)
    self.assertEqual((x.shape, y, float(np.abs(x).sum())), ((8, 8, 1), 3, 0.0))
    with self.assertRaisesRegex(ValueError, "record_shape"):
      fm.blank_target((0,))
    with self.assertRaisesRegex(ValueError, "label"):
      fm.blank_target((4,), label=-1)

  def test_estimator_matches_their_procedure(self):
    rng = np.random.default_rng(3)
    s_in, s_out = rng.normal(1.5, 1, 60).round(1), rng.normal(0, 1, 50).round(1)  # ties
    for conf in (0.95, 0.9):
      g = fm.gdp_epsilon_all_thresholds(s_in, s_out, 1e-5, conf)
      self.assertAlmostEqual(g.epsilon, _their_estimate(s_in, s_out, 1 - conf, 1e-5),
                             places=5)
      # = the max over thresholds of gdp_estimate's fixed-threshold mu at the
      # two-sided level 2 conf - 1 (each limit one-sided at conf)
      mus = [parametric.gdp_estimate(s_in, s_out, 1e-5, 2 * conf - 1, threshold=t).mu
             for t in np.r_[-np.inf, np.unique(np.r_[s_in, s_out])]]
      self.assertAlmostEqual(g.mu, max(mus), places=9)
      self.assertIn("NOT a valid bound", g.assumptions)

  def test_estimator_on_gaussian_scores(self):
    # N(mu, 1) vs N(0, 1) by quantiles, 20,000 per side: close to the eps of mu-GDP,
    # below it, and at least the held-out estimate on the same scores
    for mu in (0.5, 1.0, 2.0):
      s_in, s_out = helpers.quantile_scores(mu, 20_000)
      g = fm.gdp_epsilon_all_thresholds(s_in, s_out, 1e-5)
      true = gdp.gaussian_epsilon(1e-5, mu)
      self.assertLess(g.mu, mu)
      self.assertGreater(g.mu, mu - 0.06)
      self.assertLess(g.epsilon, true)
      self.assertGreater(g.epsilon, 0.9 * true)
      held_out = parametric.gdp_estimate(s_in, s_out, 1e-5, 0.95)
      self.assertGreater(g.epsilon, held_out.epsilon)

  def test_estimator_is_not_a_valid_bound(self):
    # Null scores (eps = 0): a valid 95% bound is > 0 in at most 5% of audits. The
    # same-scores threshold makes theirs positive far more often; held-out never.
    rng = np.random.default_rng(0)
    paper = held = 0
    for _ in range(300):
      a, b = rng.normal(size=100), rng.normal(size=100)
      paper += fm.gdp_epsilon_all_thresholds(a, b, 1e-5).epsilon > 0
      held += parametric.gdp_estimate(a, b, 1e-5).epsilon > 0
    self.assertGreater(paper / 300, 0.09)
    self.assertLessEqual(held / 300, 0.05)

  def test_estimator_rejects(self):
    with self.assertRaisesRegex(ValueError, "confidence"):
      fm.gdp_epsilon_all_thresholds([1.0], [0.0], 1e-5, confidence=0.4)
    with self.assertRaisesRegex(ValueError, "scores_in_K"):
      fm.gdp_epsilon_all_thresholds([np.nan], [0.0], 1e-5)

  def test_summed_gradients_are_lr_over_n(self):
    # theta_1 = theta_0 - eta sum_i clip(g_i) (their update, sigma = 0) is
    # train_many with learning_rate = eta * n, also when the target makes n + 1 records.
    d = digits.load(jax.random.key(0))
    n, eta, c = 30, 0.01, 1.0
    xt, yt = fm.blank_target((64,))
    x = np.concatenate([np.asarray(d.x_train_NxF[:n]), xt[None]])
    y = np.concatenate([np.asarray(d.y_train_N[:n]), [yt]]).astype(np.int32)
    model = models.mlp(64, (4,), 10)
    p0 = model.init(jax.random.key(1))
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=1.0, num_steps=1, l2_clip_norm=c,
                            noise_multiplier=0.0, learning_rate=eta * n)
    out = dpsgd.train_many(jax.random.key(2), x, y, np.ones((1, n + 1), bool), cfg, model,
                           init_params=p0, perf=dpsgd.PerformanceFlags(progress=False))
    grad = jax.vmap(jax.grad(lambda p, xi, yi: models.per_example_loss(
        model, p, xi[None], yi[None])[0]), in_axes=(None, 0, 0))(p0, x, y)
    flat = jnp.concatenate([l.reshape(n + 1, -1) for l in jax.tree.leaves(grad)], 1)
    scale = jnp.minimum(1.0, c / jnp.linalg.norm(flat, axis=1))
    want = jax.tree.map(lambda p, g: p - eta * jnp.tensordot(scale, g, 1), p0, grad)
    helpers.assert_trees_close(jax.tree.map(lambda l: l[0], out.params), want,
                               rtol=1e-5, atol=1e-6)

  @pytest.mark.slow
  def test_paper_protocol_audit_small(self):
    d = digits.load(jax.random.key(0))
    x, y = d.x_train_NxF[:40], d.y_train_N[:40]
    model = models.mlp(64, (4,), 10)
    p0 = model.init(jax.random.key(5))
    cfg = dpsgd.DpSgdConfig(dataset_size=40, sampling_prob=1.0, num_steps=2,
                            noise_multiplier=0.5, learning_rate=0.5)
    run = lambda k: fm.paper_protocol_audit(jax.random.key(k), cfg, model, x, y,
                                            init_params=p0, num_seeds=2, num_runs=16)
    p = run(0)
    self.assertLen(p.paper, 2)
    for t, g in zip(p.audits, p.paper):
      self.assertEqual((int(t.included_RxK.sum()), int((~t.included_RxK).sum())), (8, 8))
      self.assertEqual(g.epsilon, fm.gdp_epsilon_all_thresholds(
          t.scores_in, t.scores_out, 1e-5).epsilon)
    self.assertFalse(np.array_equal(p.audits[0].scores_RxK, p.audits[1].scores_RxK))
    pooled = score_audit.score_bounds(
        np.r_[p.audits[0].scores_in, p.audits[1].scores_in],
        np.r_[p.audits[0].scores_out, p.audits[1].scores_out], delta=1e-5)["best"]
    self.assertEqual(p.pooled_strict, pooled.epsilon_lower)
    self.assertTrue(np.all(p.strict <= p.exact_epsilon))
    rec = p.to_json()
    self.assertEqual(rec["trials_per_seed"], [8, 8])
    self.assertLen(rec["paper_epsilon"], 2)
    self.assertAlmostEqual(rec["paper_mean"], np.mean([g.epsilon for g in p.paper]))
    q = run(0)                                   # the key reproduces every score
    for a, b in zip(p.audits, q.audits):
      np.testing.assert_array_equal(a.scores_RxK, b.scores_RxK)
    with self.assertRaisesRegex(ValueError, "sampling_prob"):
      fm.paper_protocol_audit(jax.random.key(0), cfg.__class__(
          dataset_size=40, sampling_prob=0.5, num_steps=2, noise_multiplier=0.5), model, x,
                              y, init_params=p0)


if __name__ == "__main__":
  absltest.main()
