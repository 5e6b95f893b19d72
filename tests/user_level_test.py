"""Tests for user-level DP-SGD: the customers world, user sampling, user clipping, the unit checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import pytest

from dpjax import dpsgd
from dpjax import models
from dpjax import prng
from dpjax import sampling
from dpjax import clipping as clipping_lib
from dpjax.accounting import statement
from dpjax.clipping import vmap as cvmap
from dpjax.clipping import user as user_clipping
from dpjax.data import credit


def _grouped_data(seed=0, sizes=(1, 2, 6, 3, 1), d=3, scale=40.0):
  """Records of len(sizes) users (user u holds sizes[u] rows), features ~ scale N(0, 1)
  so that most gradients are far above C = 1, and labels opposite to the initial logit."""
  kx, ky = jax.random.split(jax.random.key(seed))
  n = sum(sizes)
  x = scale * jax.random.normal(kx, (n, d))
  y = jax.random.bernoulli(ky, 0.5, (n,)).astype(jnp.int32)
  ids = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
  return x, y, ids


def _reference_user_sum(model, params, x, y, w, ids, num_users, c):
  """sum_u clip(sum_{i in u} w_i grad loss_i, C), by a loop over users and records."""
  def one_loss(p, xi, yi):
    return models.per_example_loss(model, p, xi[None], yi[None])[0]
  grad_one = jax.jit(jax.grad(one_loss))
  flat = lambda g: np.concatenate([np.ravel(np.asarray(v, np.float64))
                                   for v in jax.tree.leaves(g)])
  total = None
  norms_u = np.zeros(num_users)
  for u in range(num_users):
    g_u = None
    for i in np.flatnonzero(ids == u):
      gi = w[i] * flat(grad_one(params, x[i], y[i]))
      g_u = gi if g_u is None else g_u + gi
    if g_u is None:
      continue
    norms_u[u] = np.linalg.norm(g_u)
    contrib = g_u * min(1.0, c / norms_u[u]) if norms_u[u] > 0 else g_u
    total = contrib if total is None else total + contrib
  return total, norms_u


def _flat(tree):
  return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in jax.tree.leaves(tree)])


class UserClippingTest(parameterized.TestCase):

  def test_matches_a_loop_over_users_logistic(self):
    self._check_against_loop(models.logistic_regression(3, l2=0.1))

  @pytest.mark.slow
  def test_matches_a_loop_over_users_mlp(self):
    self._check_against_loop(models.mlp(3, hidden=(4,), num_classes=2))

  def _check_against_loop(self, model):
    x, y, ids = _grouped_data()
    params = model.init(jax.random.key(3))
    w = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1], np.float32)
    path = user_clipping.user_level_path(model, ids, 6)   # user 5 holds no record
    self.assertEqual(path.privacy_unit, "user")
    got, norms = jax.jit(path.fn, static_argnums=4)(params, x, y, jnp.asarray(w), 1.0)
    want, norms_u = _reference_user_sum(model, params, np.asarray(x), np.asarray(y), w,
                                        ids, 6, 1.0)
    np.testing.assert_allclose(_flat(got), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(norms), norms_u[ids], rtol=2e-5, atol=1e-5)
    # Most users clip here, so the check covers the clipped branch.
    self.assertGreaterEqual(int(np.sum(norms_u > 1.0)), 3)

  def test_removing_one_user_moves_the_sum_by_at_most_c(self):
    model = models.logistic_regression(3)
    sizes = (1, 8, 10, 2, 9, 1)
    x, y, ids = _grouped_data(seed=1, sizes=sizes, scale=100.0)
    params = model.init(jax.random.key(0))
    c = 1.0
    path = user_clipping.user_level_path(model, ids, len(sizes))
    # Row u of the weights removes user u: an unsampled record contributes exactly 0,
    # so weight 0 on all of u's rows is the dataset without u (the engine's keep mask).
    removed_UxN = np.ones((len(sizes) + 1, len(ids)), np.float32)
    for u in range(len(sizes)):
      removed_UxN[u, ids == u] = 0.0                 # last row: nobody removed
    sums = jax.jit(jax.vmap(lambda p, a, b, w: path.fn(p, a, b, w, c),
                            in_axes=(None, None, None, 0)))(
        params, x, y, jnp.asarray(removed_UxN))[0]
    flat = np.asarray(sums["w"], np.float64)
    worst_user = np.max(np.linalg.norm(flat[:-1] - flat[-1], axis=1))
    # Per-EXAMPLE clipping of the same records: removing a user removes up to k
    # clipped gradients, moving the sum by up to k C (what user clipping rules out).
    ex_sums = jax.jit(jax.vmap(
        lambda p, a, b, w: cvmap.clipped_grad_sum(model, p, a, b, w, c),
        in_axes=(None, None, None, 0)))(params, x, y, jnp.asarray(removed_UxN))[0]
    ex_flat = np.asarray(ex_sums["w"], np.float64)
    worst_example_level = np.max(np.linalg.norm(ex_flat[:-1] - ex_flat[-1], axis=1))
    self.assertLessEqual(worst_user, c * (1 + 1e-5))
    self.assertGreater(worst_user, 0.9 * c)             # the bound is attained (users clip)
    self.assertGreater(worst_example_level, 3.0 * c)    # example-level: k C, not C

  def test_unsampled_and_nonfinite_records_add_nothing(self):
    model = models.logistic_regression(2)
    x = jnp.array([[1.0, 2.0], [3e38, 3e38], [0.5, -1.0], [2.0, 2.0]])
    y = jnp.array([1, 0, 0, 1])
    ids = np.array([0, 0, 1, 1], np.int32)
    path = user_clipping.user_level_path(model, ids, 2)
    params = {"w": jnp.array([0.1, -0.2])}
    got, norms = jax.jit(path.fn, static_argnums=4)(params, x, y, jnp.array([1.0, 1.0, 1.0, 0.0]), 1.0)
    self.assertTrue(np.all(np.isfinite(_flat(got))))
    # Record 1's gradient norm exceeds float32: it is left out of user 0's sum; record
    # 3 is unsampled. What remains equals the loop over the two remaining records.
    want, _ = _reference_user_sum(model, params, np.asarray(x[jnp.array([0, 2])]),
                                  np.asarray(y[jnp.array([0, 2])]), np.ones(2),
                                  np.array([0, 1]), 2, 1.0)
    np.testing.assert_allclose(_flat(got), want, rtol=1e-5, atol=1e-6)
    self.assertTrue(np.all(np.isfinite(np.asarray(norms))))


class UserSamplerTest(absltest.TestCase):

  def test_rate_per_user_and_users_move_together(self):
    num_users, q, steps = 300, 0.3, 200
    ids = np.repeat(np.arange(num_users), 1 + np.arange(num_users) % 4).astype(np.int32)
    keep = jnp.asarray(np.arange(ids.size) % 7 != 3)
    s = sampling.UserPoissonSampler(q, ids, num_users)
    key = jax.random.key(5)
    both = jax.jit(jax.vmap(lambda t: (s.batch_mask(key, t, keep), s.user_mask(key, t))))
    masks, users = (np.asarray(a) for a in both(jnp.arange(steps)))
    # Every record is in iff its user is in and the record is kept.
    np.testing.assert_array_equal(masks, users[:, ids] & np.asarray(keep)[None, :])
    # The per-user rate: 60,000 Bernoulli(q) draws, std sqrt(q(1-q)/60000) = 0.0019;
    # 5 standard deviations of tolerance.
    rate = users.mean()
    self.assertLess(abs(rate - q), 5 * math.sqrt(q * (1 - q) / users.size))
    # Per user: 200 draws each, every count within 5 sd of 200 q.
    sd = math.sqrt(steps * q * (1 - q))
    self.assertLess(np.max(np.abs(users.sum(0) - steps * q)), 5 * sd)
    # The stream is poisson_mask of fold_in(key, t) over users (as PoissonSampler's).
    np.testing.assert_array_equal(users[7], np.asarray(
        prng.poisson_mask(prng.fold_in(key, 7), q, num_users)))

  @pytest.mark.slow
  def test_engine_samples_whole_users(self):
    data = credit.sample_customers(jax.random.key(0), 12, max_loans=4)
    x = credit.linear_features(data.x_NxF, credit.PublicScaler.fit(
        credit.sample(jax.random.key(1), 200).x_NxF))
    n = x.shape[0]
    cfg = dpsgd.DpSgdConfig(dataset_size=12, sampling_prob=0.4, num_steps=30,
                            noise_multiplier=1.0, privacy_unit="user")
    keep = np.ones((2, n), bool)
    keep[1, np.asarray(data.user_N) == 3] = False     # model 1 lacks customer 3
    out = dpsgd.train_many(jax.random.key(2), x, data.y_N, jnp.asarray(keep), cfg,
                           models.logistic_regression(6), sampler=cfg.sampler(data.user_N),
                           per_example_stats=True,
                           perf=dpsgd.PerformanceFlags(progress=False))
    times = np.asarray(out.stats["times_sampled"])
    uid = np.asarray(data.user_N)
    for u in range(12):
      for m in range(2):
        self.assertLen(set(times[m, uid == u].tolist()), 1)
    self.assertTrue(np.all(times[1, uid == 3] == 0))
    self.assertGreater(times[0, uid == 3][0], 0)


class UnitChecksTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.x, self.y, self.ids = _grouped_data()
    self.n = len(self.ids)
    self.model = models.logistic_regression(3)
    self.user_cfg = dpsgd.DpSgdConfig(dataset_size=5, sampling_prob=0.5, num_steps=2,
                                      noise_multiplier=1.0, privacy_unit="user")
    self.ex_cfg = dpsgd.DpSgdConfig(dataset_size=self.n, sampling_prob=0.5, num_steps=2,
                                    noise_multiplier=1.0)

  def _train(self, cfg, **kw):
    return dpsgd.train_many(jax.random.key(0), self.x, self.y, jnp.ones((1, self.n), bool),
                            cfg, self.model, perf=dpsgd.PerformanceFlags(progress=False), **kw)

  def test_mismatched_units_are_refused(self):
    user_s = sampling.UserPoissonSampler(0.5, self.ids, 5)
    user_p = user_clipping.user_level_path(self.model, self.ids, 5)
    cases = [
        (self.user_cfg, dict(sampler=sampling.PoissonSampler(0.5), clipping=user_p),
         "not user-level DP"),
        (self.user_cfg, dict(sampler=sampling.PoissonSampler(0.5)), "not user-level DP"),
        (self.user_cfg, dict(sampler=user_s, clipping=clipping_lib.path_for(self.model)),
         "not user-level DP"),                        # example-level clipping
        (self.user_cfg, dict(), "needs the record owners"),
        (self.user_cfg, dict(clipping=user_p), "needs the record owners"),
        (self.ex_cfg, dict(clipping=user_p), "wrong unit"),
        (self.ex_cfg, dict(sampler=sampling.UserPoissonSampler(0.5, self.ids, self.n)),
         "wrong unit"),
    ]
    for cfg, kw, msg in cases:
      with self.assertRaisesRegex(ValueError, msg):
        self._train(cfg, **kw)
    # The owners come with the sampler: under example-level accounting the config
    # refuses to build a user-level one, and train_many has no user_ids_N keyword.
    with self.assertRaisesRegex(ValueError, "privacy_unit"):
      self.ex_cfg.sampler(self.ids)
    with self.assertRaises(TypeError):
      self._train(self.user_cfg, user_ids_N=self.ids)

  def test_user_sampler_brings_user_level_clipping(self):
    # A UserPoissonSampler without a clipping path gets user-level clipping over its
    # users: the same models as the pair spelled out, and as cfg.sampler(ids).
    user_s = sampling.UserPoissonSampler(0.5, self.ids, 5)
    user_p = user_clipping.user_level_path(self.model, self.ids, 5)
    a = self._train(self.user_cfg, sampler=self.user_cfg.sampler(self.ids),
                    per_example_stats=True)
    b = self._train(self.user_cfg, sampler=user_s, per_example_stats=True)
    c = self._train(self.user_cfg, sampler=user_s, clipping=user_p, per_example_stats=True)
    for other in (b, c):
      np.testing.assert_array_equal(a.params["w"], other.params["w"])
      np.testing.assert_array_equal(a.stats["times_sampled"], other.stats["times_sampled"])
    # Whole users are sampled: every record of a user has the same count.
    times = np.asarray(a.stats["times_sampled"])[0]
    for u in np.unique(self.ids):
      self.assertLen(set(times[self.ids == u].tolist()), 1)

  def test_component_grouping_must_match_config_and_data(self):
    with self.assertRaisesRegex(ValueError, "dataset_size"):
      self._train(self.user_cfg, sampler=sampling.UserPoissonSampler(0.5, self.ids, 6),
                  clipping=user_clipping.user_level_path(self.model, self.ids, 6))
    other = self.ids.copy()
    other[0] = 4
    with self.assertRaisesRegex(ValueError, "differ"):
      self._train(self.user_cfg, sampler=self.user_cfg.sampler(self.ids),
                  clipping=user_clipping.user_level_path(self.model, other, 5))

  @parameterized.named_parameters(
      ("short", lambda ids: ids[:-1]),
      ("long", lambda ids: np.concatenate([ids, ids[:1]])),
      ("too_large", lambda ids: np.where(np.arange(ids.size) == 2, 5, ids)),
      ("negative", lambda ids: np.where(np.arange(ids.size) == 0, -1, ids)),
      ("float", lambda ids: ids.astype(np.float32) + 0.5),
      ("matrix", lambda ids: ids[None, :]),
  )
  def test_bad_user_ids_name_the_parameter(self, bad):
    ids = bad(self.ids)
    with self.assertRaisesRegex(ValueError, "user_ids_N"):
      self._train(self.user_cfg, sampler=self.user_cfg.sampler(ids))
    if ids.ndim == 1 and ids.size == self.n:
      with self.assertRaisesRegex(ValueError, "user_ids_N"):
        sampling.UserPoissonSampler(0.5, ids, 5)
      with self.assertRaisesRegex(ValueError, "user_ids_N"):
        user_clipping.user_level_path(self.model, ids, 5)

  def test_config_sampler_and_statement_name_the_unit(self):
    self.assertIsInstance(self.user_cfg.sampler(self.ids), sampling.UserPoissonSampler)
    with self.assertRaisesRegex(ValueError, "user_ids_N"):
      self.user_cfg.sampler()
    with self.assertRaisesRegex(ValueError, "user_ids_N"):
      self.ex_cfg.sampler(self.ids)
    with self.assertRaisesRegex(ValueError, "privacy_unit"):
      dpsgd.DpSgdConfig(dataset_size=5, sampling_prob=0.5, num_steps=2,
                        noise_multiplier=1.0, privacy_unit="person")
    cfg = dpsgd.DpSgdConfig(dataset_size=1000, sampling_prob=0.05, num_steps=50,
                            noise_multiplier=1.2, privacy_unit="user")
    st_user = cfg.statement(deltas=(1e-5,), pld_rtol=1e-3)
    st_ex = statement.privacy_statement(1.2, 0.05, 50, 1000, deltas=(1e-5,), pld_rtol=1e-3)
    self.assertEqual(st_user.to_dict()["guarantee_unit"], "per user")
    self.assertEqual(st_ex.to_dict()["guarantee_unit"], "per example")
    self.assertIn("per user", st_user.text())
    self.assertIn("add/remove one user", st_user.text())
    self.assertNotIn("per user", st_ex.text())
    # Same accountant numbers: the unit changes what they protect, not their value,
    # and they are DpSgdConfig.epsilon()'s.
    self.assertEqual(st_user.rows[0].rdp_epsilon, st_ex.rows[0].rdp_epsilon)
    self.assertAlmostEqual(st_user.rows[0].rdp_epsilon, cfg.epsilon(), places=9)
    with self.assertRaisesRegex(ValueError, "privacy_unit"):
      statement.privacy_statement(1.2, 0.05, 50, 1000, privacy_unit="row")


class CustomersTest(absltest.TestCase):

  def test_structure_and_generative_model(self):
    u = 4000
    data = credit.sample_customers(jax.random.key(4), u)
    uid, z = np.asarray(data.user_N), np.asarray(data.zip_N)
    x = np.asarray(data.x_NxF)
    self.assertEqual(data.num_users, u)
    self.assertTrue(np.all(np.diff(uid) >= 0))
    loans = data.loans_U
    self.assertEqual(loans.sum(), len(data))
    self.assertTrue(loans.min() >= 1 and loans.max() <= 10)
    # Loan counts: P(k) proportional to 0.75^(k-1), k = 1..10; every frequency within
    # 5 binomial standard deviations.
    pk = 0.75 ** np.arange(10)
    pk /= pk.sum()
    freq = np.bincount(loans, minlength=11)[1:]
    np.testing.assert_array_less(np.abs(freq - u * pk), 5 * np.sqrt(u * pk * (1 - pk)))
    # Zip codes: one per customer, Zipf shares (within 5 sd).
    first = np.r_[True, np.diff(uid) != 0]
    for col in (0, 2, 3, 4):                       # customer traits shared by all loans
      per_user = x[:, col]
      np.testing.assert_array_equal(per_user, per_user[first][uid])
    np.testing.assert_array_equal(z, z[first][uid])
    shares = credit.zip_code_shares(50)
    zf = np.bincount(z[first], minlength=50)
    np.testing.assert_array_less(np.abs(zf - u * shares), 5 * np.sqrt(u * shares * (1 - shares)))
    self.assertAlmostEqual(shares[0] / shares[-1], 50.0)
    np.testing.assert_allclose(np.asarray(data.p_N),
                               np.asarray(jax.nn.sigmoid(credit.true_logit(data.x_NxF))),
                               rtol=1e-6)
    self.assertTrue(np.all((x[:, 1] >= 0.01) & (x[:, 1] <= 0.99)))
    # A customer's loans differ in their debt ratio (per-loan draw).
    multi = np.flatnonzero(loans >= 2)[0]
    self.assertGreater(np.ptp(x[uid == multi, 1]), 0.0)
    again = credit.sample_customers(jax.random.key(4), u)
    np.testing.assert_array_equal(np.asarray(again.y_N), np.asarray(data.y_N))

  def test_bad_arguments_name_the_parameter(self):
    k = jax.random.key(0)
    for kw, name in ((dict(num_customers=0), "num_customers"),
                     (dict(num_customers=5, min_loans=0), "min_loans"),
                     (dict(num_customers=5, min_loans=3, max_loans=2), "max_loans"),
                     (dict(num_customers=5, num_zip_codes=0), "num_zip_codes"),
                     (dict(num_customers=5, minority_share=1.5), "minority_share")):
      with self.assertRaisesRegex(ValueError, name):
        credit.sample_customers(k, **kw)


if __name__ == "__main__":
  absltest.main()
