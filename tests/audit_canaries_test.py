"""Many gradient canaries per run: the canaries, the design, and why the trials are independent.

In DP-SGD as claimed, canary j's coordinate of each privatized update is
(b_tj C + sigma C z_tj) / B: its own sampling bits and its own noise, nothing shared
with the other canaries (the denominator B is fixed). So the K white-box scores of a
run are independent, each distributed as a single canary's score. Measured here on
the engine's output: (a) the scores are uncorrelated across canaries, on null runs
(no canary ever included) and on runs with the design's inclusions; (b) each
canary's OUT and IN scores follow the exact likelihood-ratio distribution of the
claimed mechanism (`canary.LlrDistribution`, Kolmogorov-Smirnov); (c) they match
single-canary runs (two-sample KS).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from scipy import stats as sps

from dpjax import dpsgd, models
from dpjax.audit import canary
from dpjax.data import canaries

_QUIET = dpsgd.PerformanceFlags(progress=False)

_Q, _T, _SIGMA, _M, _K = 0.2, 20, 1.0, 400, 6


def _train(k, keep_MxK, seed=1):
  """White-box scores float64[M, K] of M audit models with k canaries (sigma = 1)."""
  data = canaries.audit_data(jax.random.key(0), base_size=20, unused_features=k)
  cfg = dpsgd.DpSgdConfig(dataset_size=21, sampling_prob=_Q, num_steps=_T,
                          noise_multiplier=_SIGMA)
  m = keep_MxK.shape[0]
  out = dpsgd.train_many(jax.random.key(seed), data.x_NxD, data.y_N, jnp.ones((m, 21), bool),
                         cfg, models.logistic_regression(data.num_features),
                         observe_fn=canary.observe_last_coordinates(k),
                         fixed_gradients=dpsgd.FixedGradients(
                             canary.gradient_canaries(data.num_features, k, 1.0),
                             jnp.asarray(keep_MxK)),
                         perf=_QUIET)
  o = np.asarray(out.observations, np.float64) * cfg.expected_batch_size   # [M, T, K]
  o_kt = np.transpose(o, (0, 2, 1)).reshape(m * k, _T)
  return canary.white_box_scores(o_kt, _Q, _SIGMA).reshape(m, k)


def _max_abs_corr(scores_MxK):
  c = np.corrcoef(scores_MxK.T)
  return float(np.max(np.abs(c[~np.eye(c.shape[0], dtype=bool)])))


def _exact_cdf(dist, pmf):
  cdf = np.cumsum(pmf)
  return lambda x: np.interp(x, dist.grid_J, cdf)


class CanariesTest(absltest.TestCase):

  @pytest.mark.slow  # about 25 s; canary_test checks the observations' law

  def test_gradient_canaries_are_diracs_in_the_last_coordinates(self):
    g = np.asarray(canary.gradient_canaries(6, 3, 2.0)["w"])
    np.testing.assert_array_equal(g, np.hstack([np.zeros((3, 3)), 2.0 * np.eye(3)]))
    np.testing.assert_array_equal(np.asarray(canary.gradient_canaries(4, 1, 2.0)["w"])[0],
                                  np.asarray(canary.gradient_canary(4, 2.0)["w"]))
    with self.assertRaisesRegex(ValueError, "num_canaries"):
      canary.gradient_canaries(2, 3, 1.0)
    data = canaries.audit_data(jax.random.key(0), base_size=5, unused_features=3)
    self.assertEqual(data.num_features, 59)
    np.testing.assert_array_equal(np.asarray(data.x_NxD[:, -3:]), 0.0)
    one = canaries.audit_data(jax.random.key(0), base_size=5)
    np.testing.assert_array_equal(np.asarray(one.x_NxD), np.asarray(data.x_NxD[:, :57]))

  def test_design_balanced_per_canary_and_paired_for_the_record_canary(self):
    r, g = canary.canaries_design(40, 7, 0.25, seed=3)
    np.testing.assert_array_equal(r, np.arange(40) % 2 == 0)
    np.testing.assert_array_equal(g.sum(axis=0), np.full(7, 10))   # 2 * round(0.25 * 20)
    np.testing.assert_array_equal(g[r], g[~r])          # same canary sets on both sides
    self.assertFalse(all(np.array_equal(g[:, 0], g[:, j]) for j in range(1, 7)))
    r2, g2 = canary.canaries_design(40, 7, 0.25, seed=3)
    np.testing.assert_array_equal(g, g2)
    for bad in (dict(num_models=42), dict(in_fraction=0.0), dict(in_fraction=0.01),
                dict(num_canaries=0)):
      kw = dict(num_models=40, num_canaries=7, in_fraction=0.25, seed=0) | bad
      with self.assertRaisesRegex(ValueError, next(iter(bad))):
        canary.canaries_design(**kw)

  @pytest.mark.slow
  def test_white_box_trials_independent_and_distributed_as_one_canary(self):
    dist = canary.llr_distribution(_Q, _SIGMA, _T)
    # (a) null runs: no canary ever included.
    null = _train(_K, np.zeros((_M, _K), bool))
    # sample correlations of independent scores ~ N(0, 1/M); 15 pairs, 4.5 sd
    self.assertLess(_max_abs_corr(null), 4.5 / math.sqrt(_M))
    # (b) runs with the design's inclusions: within each (IN/OUT) pattern the
    # scores of different canaries are independent; correlation across all runs
    # after removing each canary's IN / OUT mean.
    _, keep = canary.canaries_design(_M, _K, 0.5, seed=0)
    with_c = _train(_K, keep, seed=2)
    centred = with_c.copy()
    for j in range(_K):
      for side in (True, False):
        centred[keep[:, j] == side, j] -= centred[keep[:, j] == side, j].mean()
    self.assertLess(_max_abs_corr(centred), 4.5 / math.sqrt(_M))
    # (c) each canary's OUT and IN scores follow the claimed mechanism's exact law
    # (pooled over canaries: independent by (a)-(b)); alpha = 1e-3 per test.
    out_scores = np.concatenate([null.ravel(), with_c[~keep]])
    in_scores = with_c[keep]
    self.assertGreater(sps.kstest(out_scores, _exact_cdf(dist, dist.pmf_out_J)).pvalue, 1e-3)
    self.assertGreater(sps.kstest(in_scores, _exact_cdf(dist, dist.pmf_in_J)).pvalue, 1e-3)
    # the exact law separates IN from OUT at this size (the KS test can fail)
    self.assertLess(sps.kstest(in_scores, _exact_cdf(dist, dist.pmf_out_J)).pvalue, 1e-3)
    # ... and match single-canary runs (a different stream, same model and data)
    single = _train(1, np.zeros((_M, 1), bool), seed=3)[:, 0]
    self.assertGreater(sps.ks_2samp(null.ravel(), single).pvalue, 1e-3)


if __name__ == "__main__":
  absltest.main()
