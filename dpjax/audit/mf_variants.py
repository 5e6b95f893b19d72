"""Deliberately faulty matrix-factorization (DP-MF) trainings, for audits and tests only.

The claim: `privatizer.CorrelatedNoisePrivatizer` with a banded Toeplitz stream on
`sampling.CyclicSampler` batches (k participations E steps apart), sigma calibrated to
the strategy's sensitivity. `MF_VARIANTS` (`mf_variant`, `mf_claimed_sensitivity`,
`mf_exact_epsilon`):

  mf_correct                  sigma calibrated to cyclic_sensitivity   the claim
  mf_one_participation        sigma calibrated to the ONE-participation sensitivity
                              while records take part k times         exact: sens_k
  mf_noise_not_carried        a banded Toeplitz stream whose state is reset every step:
                              noise z_t / c_0, independent            exact: C = c_0 I
  mf_inverse_wrong_side       noise (C^-T Z)_t, not (C^-1 Z)_t (uses later draws)
                                                    exact for gradients that ignore the
                                                    noise: the strategy C^T

A faulty privatizer declares `accounted = False`, so training warns; building a faulty
variant warns `variants.FaultyDpSgdWarning`. Shape letters: T steps, E steps per epoch.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import dpsgd
from dpjax import privatizer as privatizer_lib
from dpjax import sampling
from dpjax.audit import variants


MF_VARIANTS = ("mf_correct", "mf_one_participation", "mf_noise_not_carried",
               "mf_inverse_wrong_side")


@dataclasses.dataclass(frozen=True, eq=False)
class NoiseNotCarried(privatizer_lib.CorrelatedNoisePrivatizer):
  """`CorrelatedNoisePrivatizer` whose stream restarts from its initial state every step.

  For `matrix_factorization.toeplitz_stream(coefs, T)` the noise of step t is z_t / c_0:
  independent draws, the strategy c_0 I instead of the banded C. Privacy: NOT accounted.
  """
  accounted: ClassVar[bool] = False

  def transform(self, noise_stddev, expected_batch_size, key):
    from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
    inner = self.stream

    def next_fn(state, k, t):
      return inner.next(inner.init(tuple(state.shape[1:])), k, t)[0], state

    stream = mf.NoiseStream(inner.init, next_fn, inner.strategy)
    b = _validate.check_positive(expected_batch_size, "expected_batch_size")
    return optax.chain(privatizer_lib.correlated_privatizer(stream, noise_stddev, key),
                       optax.scale(1.0 / b))


@dataclasses.dataclass(frozen=True, eq=False)
class InverseWrongSide(privatizer_lib.CorrelatedNoisePrivatizer):
  """Noise sigma C (C^-T Z)_t: the strategy inverse applied from the wrong side.

  Z[s] is drawn with `correlated_privatizer`'s keys (leaf i of step s:
  prng.split(prng.fold_in(key, s), L)[i]), so step t also uses the draws of steps s > t
  (all T are drawn every step). Privacy: NOT accounted; the noise of step t correlates
  with later draws, so the lower-triangular argument for adaptive gradients fails.
  """
  accounted: ClassVar[bool] = False

  def transform(self, noise_stddev, expected_batch_size, key):
    from dpjax import prng  # pylint: disable=g-import-not-at-top
    strategy = self.stream.strategy
    t_max = strategy.shape[0]
    wrong = jnp.asarray(np.linalg.inv(strategy).T, jnp.float32)      # C^-T, upper
    b = _validate.check_positive(expected_batch_size, "expected_batch_size")

    def init_fn(params):
      del params
      return privatizer_lib.GaussianPrivatizerState(key, jnp.zeros((), jnp.int32))

    def update_fn(updates, state, params=None):
      del params
      leaves, treedef = jax.tree.flatten(updates)
      keys = jax.vmap(lambda s: prng.split(prng.fold_in(state.key, s), len(leaves)))(
          jnp.arange(t_max))
      out = []
      for i, leaf in enumerate(leaves):
        z = jax.vmap(lambda k, shape=leaf.shape: prng.standard_normal(k, shape))(keys[:, i])
        w = jnp.tensordot(wrong[jnp.minimum(state.count, t_max - 1)], z, axes=1)
        out.append(leaf + noise_stddev * w.astype(leaf.dtype))
      return (jax.tree.unflatten(treedef, out),
              privatizer_lib.GaussianPrivatizerState(state.key, state.count + 1))

    return optax.chain(optax.GradientTransformation(init_fn, update_fn),
                       optax.scale(1.0 / b))


def _cyclic_norm(matrix_TxT: np.ndarray, steps_per_epoch: int) -> float:
  """max over j of sqrt(sum |X| on {j, j + E, ...}), X = A^T A: `cyclic_sensitivity` for a
  matrix A that need not be lower triangular."""
  x = np.abs(matrix_TxT.T @ matrix_TxT)
  t = x.shape[0]
  return math.sqrt(max(float(x[np.ix_(i, i)].sum())
                       for i in (np.arange(j, t, steps_per_epoch)
                                 for j in range(min(steps_per_epoch, t)))))


def _check_mf(name, coefs, sampler, num_steps):
  from dpjax import matrix_factorization as mf  # pylint: disable=g-import-not-at-top
  if not isinstance(name, str) or name not in MF_VARIANTS:
    raise ValueError(f"name (the variant) must be one of {MF_VARIANTS}, got {name!r}")
  c = _validate.check_array(coefs, "coefs", ndim=1, min_size=1)
  _validate.check_instance(sampler, sampling.CyclicSampler, "sampler")
  t = _validate.check_int(num_steps, "num_steps", 1, mf.MAX_DENSE_STEPS)
  return mf, mf.toeplitz_stream(c, t), c


def mf_claimed_sensitivity(name: str, coefs, sampler, num_steps: int) -> float:
  """The sensitivity variant `name` calibrates sigma with (banded Toeplitz `coefs`, T steps).

  mf_correct and mf_noise_not_carried: `cyclic_sensitivity(C, E)`; mf_one_participation:
  `sensitivity(C, 1)` (the largest column norm), as if each record took part once.
  """
  mf, stream, _ = _check_mf(name, coefs, sampler, num_steps)
  if name == "mf_one_participation":
    return mf.sensitivity(stream.strategy, 1)
  return mf.cyclic_sensitivity(stream.strategy, sampler.steps_per_epoch)


def mf_variant(name: str, cfg: dpsgd.DpSgdConfig, coefs, sampler) -> variants.Variant:
  """Variant `name` of banded-Toeplitz MF training on cyclic batches, claim `cfg`.

  Train with `dpsgd.train_many(..., v.config, model, **v.components)`; the claimed eps is
  `matrix_factorization.epsilon(sigma, mf_claimed_sensitivity(...), delta)`. Warns
  FaultyDpSgdWarning for every variant but "mf_correct".
  """
  _, stream, _ = _check_mf(name, coefs, sampler, getattr(cfg, "num_steps", 1))
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  if name != "mf_correct":
    warnings.warn(f"MF variant {name!r}: a deliberately broken DP-MF; the claimed epsilon "
                  "does not hold for it.", variants.FaultyDpSgdWarning,
                  stacklevel=2)
  priv = {"mf_noise_not_carried": NoiseNotCarried,
          "mf_inverse_wrong_side": InverseWrongSide}.get(
              name, privatizer_lib.CorrelatedNoisePrivatizer)(stream)
  return variants.Variant(name, cfg, sampler=sampler, privatizer=priv)


def mf_exact_epsilon(name: str, cfg: dpsgd.DpSgdConfig, coefs, sampler) -> float:
  """The true eps at cfg.delta of `mf_variant(name, cfg, coefs, sampler)`.

  The Gaussian mechanism with multiplier sigma / sens_true (PLD): sens_true =
  `cyclic_sensitivity(C, E)` for mf_correct and mf_one_participation (the training is
  the correct one; only the claim is wrong), `cyclic_sensitivity(c_0 I, E)` = c_0
  sqrt(ceil(T / E)) for mf_noise_not_carried; for mf_inverse_wrong_side, x + C^-T Z is
  C^T x + Z post-processed, sens_true from X = C C^T, exact only when the gradients do
  not depend on the noise (as for a gradient canary at a fixed point).
  """
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  mf, stream, c = _check_mf(name, coefs, sampler, cfg.num_steps)
  strategy = {"mf_noise_not_carried": c[0] * np.eye(cfg.num_steps),
              "mf_inverse_wrong_side": stream.strategy.T}.get(name, stream.strategy)
  sens = _cyclic_norm(strategy, sampler.steps_per_epoch)
  return mf.epsilon(_validate.check_positive(cfg.noise_multiplier, "noise_multiplier"),
                    sens, cfg.delta)
