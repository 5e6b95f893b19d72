"""The three components of a DP-SGD step (sampler, clipping, privatizer) and their accounted
defaults. Privacy unit "user" (McMahan et al. 2018): user-level Poisson sampling and
clipping of each user's summed gradient to C, so the same accountant call holds per user.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import numpy as np

from dpjax import clipping as clipping_lib
from dpjax import privatizer as privatizer_lib
from dpjax import sampling as sampling_lib


class UnaccountedComponentWarning(UserWarning):
  """Training uses a component (sampler, clipping, privatizer) the accountant does not model."""


class OtherAccountantWarning(UserWarning):
  """cfg.epsilon() is not this run's epsilon; the message states the one that holds."""


def _correlated_cyclic(cfg, sampler, path, privatizer) -> bool:
  """Correlated noise on cyclic batches (fixed or Poisson within the cycle), accounted
  clipping, example-level, T within the strategy: the combinations whose epsilon the engine
  can state (`CorrelatedNoisePrivatizer.epsilon`)."""
  return (type(sampler) in (sampling_lib.CyclicSampler, sampling_lib.CyclicPoissonSampler)
          and path.accounted
          and type(privatizer) is privatizer_lib.CorrelatedNoisePrivatizer
          and cfg.privacy_unit == "example"
          and int(cfg.num_steps) <= privatizer.stream.strategy.shape[0])


def _correlated_statement(cfg, sampler, privatizer) -> str:
  t = int(cfg.num_steps)
  k, sep = sampler.participation(t)
  sens = privatizer.sensitivity(sampler, t)
  eps = privatizer.epsilon(float(cfg.noise_multiplier), t, float(cfg.delta), sampler)
  how = ("no amplification" if type(sampler) is sampling_lib.CyclicSampler else
         "or, if smaller, the amplified cyclic-Poisson bound (matrix_factorization."
         "amplified_epsilon)")
  return (f"training with correlated noise on cyclic batches: DpSgdConfig.epsilon() (Poisson "
          f"sampling, amplified) does NOT hold. Each record takes part at most {k} times, "
          f"{sep} steps apart; the strategy's sensitivity is {sens:.6g}, so the run is the "
          f"Gaussian mechanism with multiplier sigma / {sens:.6g}, {how}: "
          f"eps = {eps:.6g} at delta = {float(cfg.delta):g} for sigma = "
          f"{float(cfg.noise_multiplier):g} (CorrelatedNoisePrivatizer.epsilon; in a "
          "train_sweep each config's own sigma).")


@functools.lru_cache(maxsize=16)
def _user_components(sampling_prob, ids_bytes, num_records, num_users, model):
  """The default user-level sampler and clipping path, memoised by their contents."""
  from dpjax.clipping import user as user_clipping  # pylint: disable=g-import-not-at-top
  ids = np.frombuffer(ids_bytes, np.int32, count=num_records)
  return (sampling_lib.UserPoissonSampler(sampling_prob, ids, num_users),
          user_clipping.user_level_path(model, ids, num_users))


def _check_units(cfg, sampler, path, n) -> None:
  """Refuses components whose privacy unit or user grouping disagrees with the data or cfg."""
  unit = cfg.privacy_unit
  for kind, comp in (("sampler", sampler), ("clipping", path)):
    got = getattr(comp, "privacy_unit", "example")
    if got == unit:
      continue
    if unit == "user":
      raise ValueError(
          f"cfg.privacy_unit = 'user' but the {kind} is {got}-level: that is not "
          "user-level DP (a user's records would be sampled or clipped one by one, so "
          "one user could move the noisy sum by k C for k records). Pass "
          "sampler=cfg.sampler(user_ids_N) for the user-level defaults, or user-level "
          "components.")
    raise ValueError(
        f"cfg.privacy_unit = {unit!r} but the {kind} is {got}-level: the accountant "
        "would be told the wrong unit (q per record, n records). Use "
        "DpSgdConfig(privacy_unit='user', dataset_size=<number of users>).")
  if unit != "user":
    return
  ids = None
  for kind, comp in (("sampler", sampler), ("clipping", path)):
    comp_ids = getattr(comp, "user_ids_N", None)
    if comp_ids is None:
      continue
    comp_ids = np.asarray(comp_ids)
    if comp_ids.shape != (n,):
      raise ValueError(f"the {kind}'s user_ids_N has shape {comp_ids.shape}, but the data "
                       f"has {n} records (one id per record)")
    if int(getattr(comp, "num_users")) != int(cfg.dataset_size):
      raise ValueError(f"the {kind}'s num_users = {getattr(comp, 'num_users')} but "
                       f"cfg.dataset_size = {cfg.dataset_size}: under privacy_unit 'user' "
                       "dataset_size is the number of users")
    if ids is not None and not np.array_equal(comp_ids, ids):
      raise ValueError(f"the {kind}'s user_ids_N differ from the sampler's")
    ids = comp_ids


def resolve(cfg, model, sampler, clipping, privatizer, n):
  """(sampler, clipping path, privatizer): the caller's where given, else `cfg.sampler()`,
  `clipping.path_for(model)`, `GaussianPrivatizer()` (user level: sampler required, clipping
  per user). Raises ValueError/TypeError on mismatched components; warns
  UnaccountedComponentWarning for `accounted = False` ones (OtherAccountantWarning with the
  epsilon that holds for correlated noise on cyclic batches).
  """
  if cfg.privacy_unit == "user" and sampler is None:
    raise ValueError("cfg.privacy_unit = 'user' needs the record owners: pass "
                     "sampler=cfg.sampler(user_ids_N) (int[N], the user of each record) "
                     "or a user-level sampler of your own")
  if type(sampler) is sampling_lib.UserPoissonSampler and clipping is None:
    ids = sampling_lib.check_user_ids(sampler.user_ids_N, sampler.num_users, "user_ids_N",
                                      num_records=n)
    sampler, clipping = _user_components(
        float(sampler.sampling_prob), np.ascontiguousarray(ids, np.int32).tobytes(), int(n),
        int(sampler.num_users), model)
  sampler = cfg.sampler() if sampler is None else sampler
  sampling_lib.check_sampler(sampler, cfg.sampling_prob, cfg.max_batch_size)
  path = clipping_lib.path_for(model) if clipping is None else clipping_lib.as_path(clipping)
  _check_units(cfg, sampler, path, n)
  privatizer = privatizer_lib.GaussianPrivatizer() if privatizer is None else privatizer
  privatizer_lib.check_privatizer(privatizer)
  privatizer_lib.check_matching_grid(path, privatizer)
  off = [f"{kind} {c!r}" for kind, c in (("sampler", sampler), ("clipping", path.name),
                                        ("privatizer", privatizer))
         if not getattr(c if kind != "clipping" else path, "accounted")]
  if off and _correlated_cyclic(cfg, sampler, path, privatizer):
    warnings.warn(_correlated_statement(cfg, sampler, privatizer), OtherAccountantWarning,
                  stacklevel=4)
  elif off:
    warnings.warn("training with " + ", ".join(off) + ", which the accountant does NOT model: "
                  "DpSgdConfig.epsilon() is not a guarantee for this run.",
                  UnaccountedComponentWarning, stacklevel=4)
  return sampler, path, privatizer


def check_sampler_delta(cfg, params_shape) -> None:
  """Warns when `accounting.sampler_delta(cfg.epsilon(), T d)` (d parameters) exceeds
  1e-3 cfg.delta; skipped when the zCDP bound rho + 2 sqrt(rho log(1/delta)),
  rho = T / (2 sigma^2) (Bun & Steinke 2016), already settles it."""
  from dpjax import accounting  # pylint: disable=g-import-not-at-top
  d = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params_shape))
  k = int(cfg.num_steps) * max(1, d)
  delta, sigma = float(cfg.delta), float(cfg.noise_multiplier)
  eps_ok = accounting.max_epsilon_for_sampler_delta(delta, k)
  rho = int(cfg.num_steps) / (2.0 * sigma * sigma)
  if rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)) <= eps_ok:
    return
  eps = cfg.epsilon()
  if eps > eps_ok:
    extra = accounting.sampler_delta(eps, k)
    warnings.warn(f"the noise sampler's finite support adds {extra:.3g} to delta (eps = "
                  f"{eps:.4g}, T*d = {k} draws), more than 1e-3 * delta = {1e-3 * delta:.3g}: "
                  f"the guarantee is (eps, delta + {extra:.3g}), not (eps, delta) "
                  "(dpjax.accounting.sampler_delta).", UnaccountedComponentWarning,
                  stacklevel=4)


def check_truncated(cfg, keep, has_fixed) -> None:
  """Truncating mode (cfg.max_batch_size set): refuses fixed-gradient records (sampled
  outside the cap, so not the accounted mechanism) and warns UnaccountedComponentWarning
  when a model holds other than n - 1, n or n + 1 records (n = cfg.dataset_size: the
  truncated bound depends on n) or when the selection's distance from uniform,
  (1 + e^eps) `sampling.selection_tv_bound(n, q, T)`, exceeds 1e-3 cfg.delta."""
  if cfg.max_batch_size is None:
    return
  if has_fixed:
    raise ValueError("fixed_gradients with cfg.max_batch_size (truncated Poisson sampling): "
                     "fixed-gradient records are sampled outside the cap, which the "
                     "truncated accountant does not model; train them as records instead")
  n = int(cfg.dataset_size)
  counts = np.sum(np.asarray(keep), axis=1)
  lo, hi = int(counts.min()), int(counts.max())
  if lo < n - 1 or hi > n + 1:
    warnings.warn(f"cfg.max_batch_size = {cfg.max_batch_size}: the truncated accountant's "
                  f"bound holds for datasets of n = {n} records and their neighbours (n - 1, "
                  f"n + 1), but the models hold {lo} to {hi} records: DpSgdConfig.epsilon() "
                  "is not a guarantee for the others (the bound depends on n).",
                  UnaccountedComponentWarning, stacklevel=4)
  if float(cfg.noise_multiplier) > 0:
    tv = sampling_lib.selection_tv_bound(n, float(cfg.sampling_prob), int(cfg.num_steps))
    extra = tv * (1.0 + math.exp(min(cfg.epsilon(), 700.0)))
    if extra > 1e-3 * float(cfg.delta):
      warnings.warn(f"the truncation's selection is uniform up to {tv:.3g} in total "
                    f"variation over the run: the guarantee is (eps, delta + {extra:.3g}), "
                    f"not (eps, delta) (sampling.selection_tv_bound).",
                    UnaccountedComponentWarning, stacklevel=4)
