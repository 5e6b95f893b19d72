"""Tests of dpjax.audit.run: the canary audit pipeline's pieces."""

import dataclasses
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from scipy import stats as sps

from dpjax import clipping, dpsgd, models
from dpjax.audit import canary, leaf, stats, store, thresholds
from dpjax.audit import run as audit_run
from dpjax.data import canaries


class PipelineTest(absltest.TestCase):

  def test_xla_scores_equal_the_float64_white_box_scores(self):
    obs = np.random.default_rng(0).normal(0.02, 0.1, (5, 40, 3)).astype(np.float32)
    for sigma in (0.0, 0.7, 3.0):
      got = np.asarray(audit_run.white_box_llr_scores(obs, 10.0, sampling_prob=0.2,
                                                      noise_multiplier=sigma))
      o = canary.normalized_observations(np.transpose(obs, (0, 2, 1)).reshape(15, 40),
                                         expected_batch_size=10.0, l2_clip_norm=1.0)
      want = canary.white_box_scores(o, 0.2, sigma).reshape(5, 3)
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

  def test_best_certifiable_on_unequal_sides_is_the_best_point(self):
    fpr = np.array([0.0, 0.01, 0.1, 0.5, 1.0])
    fnr = np.array([1.0, 0.6, 0.2, 0.05, 0.0])
    b = thresholds.best_certifiable(fpr, fnr, 300, trials_in=100, delta=1e-5,
                                    confidence=0.95, thresholds_J=np.arange(5.0))
    want = stats.epsilon_lower_bound(fpr * 300, 300, fnr * 100, 100, 1e-5, 0.95)
    self.assertEqual(b.epsilon, float(np.max(want)))
    self.assertEqual(b.threshold, float(np.argmax(want)))
    same = thresholds.best_certifiable(fpr, fnr, 300, trials_in=300, delta=1e-5)
    self.assertEqual(same.epsilon, thresholds.best_certifiable(fpr, fnr, 300,
                                                               delta=1e-5).epsilon)

  def test_models_per_chunk_fits_the_observation_budget(self):
    spec = audit_run.CanaryAuditSpec(trials=1000, sampling_prob=0.2, num_steps=100,
                                     delta=1e-5, canaries_per_run=10,
                                     observation_budget=100 * 10 * 37, chunk_models=2000)
    self.assertEqual(spec.models_per_chunk, 36)           # 37 models, rounded down to 4s
    self.assertEqual(spec.models_per_setting, 2000)
    one = audit_run.CanaryAuditSpec(trials=1000, sampling_prob=0.2, num_steps=100,
                                    delta=1e-5, chunk_models=400)
    self.assertEqual(one.models_per_chunk, 400)

  def test_resume_trains_only_missing_chunks_and_loads_the_same_arrays(self):
    spec = audit_run.CanaryAuditSpec(trials=8, sampling_prob=0.3, num_steps=6, delta=1e-5,
                                     chunk_models=8)
    sts = audit_run.settings((2.0,), spec.sampling_prob, spec.num_steps, spec.delta, False)
    data = canaries.audit_data(jax.random.key(0), 20)
    model = models.logistic_regression(data.num_features)
    d = tempfile.mkdtemp()
    s1 = store.ChunkStore(d, {"t": 1})
    trained, done = audit_run.run_chunks(jax.random.key(1), spec, sts, data, model, s1,
                                         progress=False, max_new_chunks=1)
    self.assertEqual((trained, done), (1, False))
    s2 = store.ChunkStore(d, {"t": 1}, resume=True)
    trained, done = audit_run.run_chunks(jax.random.key(1), spec, sts, data, model, s2,
                                         progress=False)
    self.assertEqual((trained, done), (1, True))
    r, s, bb, wb = audit_run.load_setting(jax.random.key(1), spec, sts, s2, 0)
    self.assertEqual((r.shape, s.shape, bb.shape, wb.shape), ((16,), (16,), (16,), (16,)))
    # the balanced design: 8 IN and 8 OUT for each canary
    self.assertEqual((int(r.sum()), int(s.sum())), (8, 8))
    fresh = store.ChunkStore(tempfile.mkdtemp(), {"t": 1})
    audit_run.run_chunks(jax.random.key(1), spec, sts, data, model, fresh, progress=False)
    for a, b in zip((r, s, bb, wb), audit_run.load_setting(jax.random.key(1), spec, sts, fresh, 0)):
      np.testing.assert_array_equal(a, b)
    row = audit_run.evaluate(spec, sts[0], r, s, bb, wb)
    self.assertLessEqual(row["epsilon_lower_white_box"], row["ceiling_white_box"])
    self.assertLessEqual(row["best_certifiable"], row["ceiling_white_box"] + 1e-12)



class LeafLayoutTest(absltest.TestCase):
  """K > 1 canaries in a parameter leaf, their likelihood ratios summed inside the scan."""

  _Q, _T, _SIGMA, _K = 0.2, 20, 1.0, 6

  def _spec(self, trials, **kw):
    return audit_run.CanaryAuditSpec(trials=trials, sampling_prob=self._Q, num_steps=self._T,
                                     delta=1e-5, canaries_per_run=self._K, **kw)

  def _parts(self, spec):
    data = canaries.audit_data(jax.random.key(0), 20, unused_features=self._K)
    model = models.logistic_regression(data.num_features)
    st = audit_run.Setting("s1", 5.0, self._SIGMA)
    return data, model, st, audit_run.audited_training(spec, st, int(data.x_NxD.shape[0]), model)

  def test_scores_in_the_scan_equal_the_float64_scores_of_the_observed_steps(self):
    spec = self._spec(8)
    data, model, st, var = self._parts(spec)
    r, s = canary.canaries_design(16, self._K, 0.25, 0)
    key = jax.random.key(3)
    out = audit_run.leaf_canary_training(key, data, var, model, r, s, sampling_prob=self._Q,
                                         noise_multiplier=self._SIGMA)
    # The same runs with the engine's default optimizer, every step's leaf observed.
    d, k, n = data.num_features, self._K, int(data.x_NxD.shape[0])
    keep = np.ones((16, n + k), bool)
    keep[:, data.canary_index] = r
    keep[:, n:] = s
    used = models.logistic_regression(d - k)
    ref = audit_run.train(
        key, audit_run.Design(jnp.concatenate([data.x_NxD[:, :d - k], jnp.zeros((k, d - k))]),
                              jnp.concatenate([data.y_N, jnp.zeros((k,), data.y_N.dtype)]),
                              keep), var.config, models.with_canary_leaf(used, k),
        observe_fn=lambda u: u["canary"],
        components=dict(clipping=leaf.canary_leaf_path(clipping.path_for(used), k),
                        perf=dpsgd.PerformanceFlags(max_chunk=16, progress=False,
                                                    batch_capacity=None)))
    np.testing.assert_array_equal(out.params["model"]["w"], ref.params["model"]["w"])
    want = canary.white_box_llr(np.asarray(ref.observations, np.float64),
                                expected_batch_size=var.config.expected_batch_size,
                                l2_clip_norm=1.0, sampling_prob=self._Q,
                                noise_multiplier=self._SIGMA)
    np.testing.assert_allclose(out.params["canary"], want, rtol=1e-5, atol=1e-5)
    self.assertIsNone(out.observations)
    # the chunk returns them, and the record canary's black-box score on the same weights
    r2, s2, bb, wb = audit_run.train_chunk(key, spec, st, data, var, model, 0, 16)
    np.testing.assert_array_equal(s2, s)
    np.testing.assert_allclose(wb, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bb, -(np.asarray(out.params["model"]["w"])
                                     @ np.asarray(data.x_NxD[data.canary_index, :d - k])),
                               rtol=1e-6)

  def _law(self, layouts):
    """KS against the exact law (LlrDistribution) per side and layout; the scores."""
    dist = canary.llr_distribution(self._Q, self._SIGMA, self._T)
    scores = {}
    for layout in layouts:
      spec = self._spec(200, canary_layout=layout)
      data, model, st, var = self._parts(spec)
      _, s, _, wb = audit_run.train_chunk(jax.random.key(7), spec, st, data, var, model, 0, 400)
      scores[layout] = (wb[s], wb[~s])
      for side, pmf, x in (("in", dist.pmf_in_J, wb[s]), ("out", dist.pmf_out_J, wb[~s])):
        cdf = np.cumsum(pmf)
        p = sps.kstest(x, lambda v, cdf=cdf: np.interp(v, dist.grid_J, cdf)).pvalue
        self.assertGreater(p, 1e-3, (layout, side))
    # the statistic separates the sides (the KS above is not vacuous)
    self.assertLess(sps.ks_2samp(*scores[layouts[0]]).pvalue, 1e-6)
    return scores

  def test_leaf_scores_follow_the_claimed_likelihood_ratio_law(self):
    self._law(("parameter_leaf",))

  @pytest.mark.slow
  def test_both_layouts_follow_the_law_and_agree(self):
    scores = self._law(audit_run.CANARY_LAYOUTS)
    for i in range(2):
      p = sps.ks_2samp(scores["parameter_leaf"][i], scores["fixed_gradients"][i]).pvalue
      self.assertGreater(p, 1e-3)

  def test_refusals_and_chunk_identity(self):
    with self.assertRaisesRegex(ValueError, "canary_layout"):
      self._spec(8, canary_layout="leaf")
    spec = self._spec(8)
    data, model, st, var = self._parts(spec)
    r, s = canary.canaries_design(16, self._K, 0.25, 0)
    kw = dict(sampling_prob=self._Q, noise_multiplier=self._SIGMA)
    with self.assertRaisesRegex(ValueError, "model"):
      audit_run.leaf_canary_training(jax.random.key(0), data, var,
                                     models.mlp(data.num_features, hidden=(2,), num_classes=2),
                                     r, s, **kw)
    used = data._replace(x_NxD=data.x_NxD.at[0, -1].set(1.0))
    with self.assertRaisesRegex(ValueError, "unused"):
      audit_run.leaf_canary_training(jax.random.key(0), used, var, model, r, s, **kw)
    with self.assertRaisesRegex(ValueError, "record_in_M"):
      audit_run.leaf_canary_training(jax.random.key(0), data, var, model, r[:4], s, **kw)
    ids = {lay: audit_run.chunk_identities(jax.random.key(1), self._spec(8, canary_layout=lay),
                                           [st]) for lay in audit_run.CANARY_LAYOUTS}
    self.assertNotEqual(ids["parameter_leaf"], ids["fixed_gradients"])
    one = dataclasses.replace(spec, canaries_per_run=1)
    self.assertNotIn("canary_layout", next(iter(audit_run.chunk_identities(
        jax.random.key(1), one, [st]).values())))


if __name__ == "__main__":
  absltest.main()
