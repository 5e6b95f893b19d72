"""dpjax.audit.mf_variants: broken DP-MF trainings, their exact eps, and a canary test."""

import math
import warnings

import jax
import numpy as np
from absl.testing import absltest

from dpjax import dpsgd
from dpjax import matrix_factorization as mf
from dpjax import models
from dpjax import sampling
from dpjax.audit import mf_variants


class MfVariantsTest(absltest.TestCase):
  """A white-box canary test on DP-MF: the canary's update coordinate, whitened.

  21 records, the canary x = 1e4 e_2 (y = 1, no other record uses coordinate 2), cyclic
  batches of 7 (E = 3), T = 12 (k = 4), learning rate 1e-6 so every gradient is taken at
  w = 0 and the canary's clipped gradient is exactly -e_2. With u the canary's
  participation indicator (from the model's sample key) and o = -B * update_2, o = u +
  sigma C^-1 z, so s = <A u, A o> / (sigma ||A u||) with the whitening A of the noise
  actually added is N(||A u|| / sigma, 1) IN and N(0, 1) OUT: its mean gap estimates the
  mechanism's mu, compared with the claim's mu = claimed sens / sigma.
  """

  def _audit(self, name, coefs, num_models=400):
    n, b, e, t, sigma = 21, 7, 3, 12, 1.0
    rng = np.random.default_rng(0)
    x = np.zeros((n, 3), np.float32)
    x[:-1, :2] = rng.normal(size=(n - 1, 2))
    x[-1, 2] = 1e4
    y = np.r_[rng.integers(0, 2, n - 1), 1].astype(np.float32)
    sampler = sampling.CyclicSampler(batch_size=b, steps_per_epoch=e, sampling_prob=b / n)
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=b / n, num_steps=t,
                            noise_multiplier=sigma, learning_rate=1e-6)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      v = mf_variants.mf_variant(name, cfg, coefs, sampler)
      keep = np.ones((num_models, n), bool)
      keep[num_models // 2:, -1] = False
      key = jax.random.key(11)
      out = dpsgd.train_many(key, x, y, keep, cfg, models.logistic_regression(3),
                             observe_fn=lambda upd: upd["w"][2],
                             perf=dpsgd.PerformanceFlags(progress=False), **v.components)
    o = -np.asarray(out.observations, np.float64) * b                   # [M, T]
    slots = np.stack([np.asarray(jax.random.permutation(jax.random.split(k, 4)[1], n))[-1]
                      for k in dpsgd.model_keys(key, num_models)])
    u = np.zeros((num_models, t))
    for m, slot in enumerate(slots):
      if slot < e * b:
        u[m, slot // b::e] = 1.0
    strategy = mf.banded_toeplitz(coefs, t)
    a = {"mf_noise_not_carried": coefs[0] * np.eye(t),
         "mf_inverse_wrong_side": strategy.T}.get(name, strategy)
    au, ao = u @ a.T, o @ a.T
    ok = np.linalg.norm(au, axis=1) > 0
    s = np.sum(au * ao, axis=1)[ok] / (sigma * np.linalg.norm(au, axis=1)[ok])
    inside = keep[ok, -1]
    gap = s[inside].mean() - s[~inside].mean()
    se = math.sqrt(1 / inside.sum() + 1 / (~inside).sum())
    # ||A u_j|| over the canary's E possible patterns (A >= 0 here, so all-ones is worst).
    true_mu = max(np.linalg.norm(a @ (np.arange(t) % e == j)) for j in range(e)) / sigma
    claimed_mu = mf_variants.mf_claimed_sensitivity(name, coefs, sampler, t) / sigma
    self.assertLess(abs(s[~inside].std() - 1.0), 0.15)                # whitened: unit noise
    self.assertLess(abs(gap - true_mu), 4 * se)                        # the mechanism's mu
    eps_true = mf_variants.mf_exact_epsilon(name, cfg, coefs, sampler)
    self.assertAlmostEqual(eps_true, mf.epsilon(sigma, true_mu * sigma, cfg.delta), places=9)
    return gap, se, claimed_mu, eps_true, mf.epsilon(sigma, claimed_mu * sigma, cfg.delta)

  def test_one_participation_sensitivity_is_caught(self):
    gap, se, claimed_mu, eps_true, eps_claim = self._audit("mf_one_participation",
                                                           np.array([1.0, 0.5]))
    self.assertGreater(gap - 4 * se, claimed_mu)                       # caught
    self.assertGreater(eps_true, 1.5 * eps_claim)

  def test_correct_and_noise_not_carried_are_not_caught(self):
    for name in ("mf_correct", "mf_noise_not_carried", "mf_inverse_wrong_side"):
      with self.subTest(name):
        gap, se, claimed_mu, eps_true, eps_claim = self._audit(name, np.array([1.0, 0.5]))
        self.assertLess(gap - 4 * se, claimed_mu)
        # Not carrying the state leaves independent noise; the wrong-side inverse adds
        # C^-T Z: both harmless for privacy here (true eps at most the claim's), both lose
        # the strategy's error.
        self.assertLessEqual(eps_true, eps_claim + 1e-9)


if __name__ == "__main__":
  absltest.main()
