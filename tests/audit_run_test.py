"""Tests of dpjax.audit.run: the canary audit pipeline's pieces."""

import tempfile

import jax
import numpy as np
from absl.testing import absltest

from dpjax import models
from dpjax.audit import canary, stats, store, thresholds
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


if __name__ == "__main__":
  absltest.main()
