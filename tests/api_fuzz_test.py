"""Fuzz test of the public API: every entry point rejects bad input by name.

The public API is the `__all__` of every dpjax module (the lazy submodules of
`dpjax.__all__` and the modules of its subpackages); a module without `__all__`
contributes the public callables it defines. For each entry point the table below
gives a valid baseline call; the test first checks that the baseline succeeds (so
the table stays honest), then mutates one parameter at a time with every bad value
of its kind from `tests/fuzz_battery.py` (negative, zero, NaN, inf, 10**12 sizes,
strings, bools for numbers, wrong ranks, empty and mismatched arrays, unknown
choices, non-callables) and requires a ValueError or TypeError whose message names
the parameter. A silent result, another exception, or a call past its time limit
fails the test, which prints the table: per module, entry points tried, bad inputs
tried, and the share rejected with a named parameter.

Run alone: python -m pytest -q tests/api_fuzz_test.py -s  (prints the table).
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import json
import math
import os
import pkgutil
import queue
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest

import dpjax
from tests import fuzz_battery as fb
from tests import helpers

E = fb.Entry

# Entry points that take no input that could be bad, or are not called by users.
# name -> reason.
EXCLUDED = {
    # Result records: built by the library from validated values, not inputs.
    "dpjax.accounting.pld.PldResult": "result record returned by the PLD accountant",
    "dpjax.accounting.pld.CheckedEpsilon": "result record of dpsgd_epsilon_never_looser",
    "dpjax.accounting.events.Event": "abstract base class of the events (no inputs)",
    "dpjax.accounting.events.UnsupportedEventError": "exception raised by the accountants",
    "dpjax.accounting.pld_pmfs.subsampled_laplace_pmfs": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.atoms_to_grid": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.GridTooLarge": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.LossPmf": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_pmfs.atoms_pmf": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.compose_pmfs": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.blocked_self_compose": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.blocking_factor": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_pmfs.discretise": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_pmfs.laplace_pmf": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.self_compose": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_grid.trim": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.pld_pmfs.subsampled_gaussian_pmfs": "PLD internal (grid operation; pld validates its inputs)",
    "dpjax.accounting.statement.EpsilonRow": "result record of privacy_statement",
    "dpjax.accounting.statement.PrivacyStatement": "result record of privacy_statement",
    "dpjax.data.credit.CustomerData": "result record of sample_customers",
    "dpjax.data.credit.CustomerSplits": "result record of sample_customer_splits",
    "dpjax.audit.thresholds.ThresholdBound": "result record of the threshold strategies",
    "dpjax.audit.thresholds.BonferroniBound": "result record of Bonferroni",
    "dpjax.audit.thresholds.BootstrapSpread": "result record of bootstrap_spread",
    "dpjax.audit.thresholds.CertifiableBound": "result record of best_certifiable",
    "dpjax.audit.parametric.GdpEstimate": "result record of gdp_estimate",
    "dpjax.audit.one_run.OneRunResult": "result record of one_run.audit",
    "dpjax.audit.coverage.Coverage": "result record of coverage.measure",
    "dpjax.audit.coverage.overfit_estimator": "takes no arguments",
    "dpjax.audit.score_audit.ScoreBound": "result record of score_bounds",
    "dpjax.audit.roc.RocBand": "result record of roc_band",
    "dpjax.audit.one_run_fdp.FdpOneRunResult": "result record of one_run_fdp.fdp_epsilon_lower_bound",
    "dpjax.audit.one_run.DeclaredGuessResult": "result record of one_run.audit_declared_guesses",
    "dpjax.audit.canary.LlrDistribution": "result record of llr_distribution",
    "dpjax.data.canaries.AuditData": "result record of audit_data",
    "dpjax.data.credit.CreditData": "result record of credit.sample",
    "dpjax.data.digits.Digits": "result record of digits.load",
    "dpjax.dpsgd.TrainResult": "result record of train_many",
    # The engine's internals: train_many / train_one / train_sweep call them with
    # arguments they have already checked (dpjax.dpsgd.__all__ is the engine's API;
    # the same objects re-exported from the package are fuzzed under those names).
    "dpjax.dpsgd.config.noise_free": "engine internal (the config a compiled program sees)",
    "dpjax.dpsgd.components.resolve": "engine internal (train_many's component defaults)",
    "dpjax.dpsgd.components.check_sampler_delta": "engine internal (a warning of train_many)",
    "dpjax.dpsgd.components.check_truncated": ("engine internal (train_many's truncating-mode "
                                                "checks, fuzzed through train_many)"),
    "dpjax.dpsgd.inputs.check_numeric": "engine internal (train_many's dtype check)",
    "dpjax.dpsgd.inputs.fixed_records": ("engine internal (train_many's check of "
                                         "fixed_gradients, fuzzed as dpjax.dpsgd.FixedGradients)"),
    "dpjax.dpsgd.inputs.check_records": "engine internal (train_many's record check)",
    "dpjax.dpsgd.layout.capacity": "engine internal (resolves PerformanceFlags.batch_capacity)",
    "dpjax.dpsgd.layout.bytes_per_model": "engine internal (chunk sizing estimate)",
    "dpjax.dpsgd.layout.chunk_size": "engine internal (chunk sizing)",
    "dpjax.dpsgd.step.train_single": "engine internal (traced under jit by train_many)",
    "dpjax.dpsgd.step.padded_clipped_sum": "engine internal (traced under jit by train_many)",
    "dpjax.audit.store.StoreError": "an error category",
    "dpjax.clipping.ghost.Layer": "a NamedTuple record of the ghost pass",
    "dpjax.clipping.ghost.check_input_size": "shape check of the ghost paths (fuzzed through "
                                             "cnn_clipped_sum_fn and the Flax path)",
    "dpjax.clipping.ghost.conv3x3_patches": "traceable helper of the ghost paths (traced "
                                            "under jit by cnn_clipped_sum and the Flax path)",
    "dpjax.clipping.ghost.ghost_clipped_sum": ("the shared pass of mlp_clipped_sum / "
                                               "cnn_clipped_sum and the Flax ghost path, "
                                               "fuzzed through those"),
    "dpjax.prng.bits_to_normal": "traceable map of standard_normal (every uint32 word valid)",
    "dpjax.audit.store.InvalidChunkWarning": "a warning category",
    # The canary audit pipeline's stages after the design: they take the trained
    # data, a ChunkStore or the arrays of the stage before, and check their spec,
    # settings, store and indices by type and range (audit_run_test runs them end
    # to end; experiments_audit_test the resume, refusal and swap faults).
    "dpjax.audit.run.run_chunks": "pipeline stage (needs audit data and a store)",
    "dpjax.audit.run.load_setting": "pipeline stage (reads a store run_chunks filled)",
    "dpjax.audit.run.train_chunk": "pipeline stage (needs audit data and a variant)",
    "dpjax.audit.run.leaf_canary_training": ("train_chunk's K > 1 training (needs audit "
                                             "data and a variant; audit_run_test checks it)"),
    "dpjax.audit.leaf.canary_leaf_path": ("a clipping path built from a path (audit_run_test "
                                          "runs it through leaf_canary_training)"),
    "dpjax.audit.leaf.llr_accumulating_sgd": ("an optax transformation of the canary leaf "
                                              "(audit_run_test runs it through "
                                              "leaf_canary_training)"),
    "dpjax.audit.run.evaluate": "pipeline stage (takes load_setting's arrays)",
    "dpjax.audit.run.canary_audit": "pipeline stage (run_chunks, then evaluate)",
    "dpjax.audit.run.train": ("the pipeline's door to train_many (its design and config "
                              "checked by type, the rest by train_many)"),
    "dpjax.audit.run.audited_training": "pipeline stage (a spec's variant of a setting)",
    "dpjax.audit.run.Design": "a NamedTuple record (canary_design builds it from checked inputs)",
    "dpjax.mechanisms.PrivateMean": "result record of private_mean",
    "dpjax.mechanisms.GroupedRates": "result record of grouped_rates",
    "dpjax.pate.PateRdp": "result record of pate_rdp",
    "dpjax.models.Model": ("a NamedTuple (no constructor checks); its fields are checked "
                           "by models.check_model, which every function taking a model "
                           "calls (fuzzed as dpjax.models.check_model)"),
    "dpjax.audit.variants.Variant": "result record of variants.variant",
    "dpjax.privatizer.GaussianPrivatizerState": "optax state built by init",
    "dpjax.privatizer.CorrelatedPrivatizerState": "optax state built by init",
    # Types with no arguments.
    "dpjax.dpsgd.UnaccountedComponentWarning": "a warning category",
    "dpjax.dpsgd.OtherAccountantWarning": "a warning category",
    "dpjax.dpsgd.DivergenceWarning": "a warning category",
    # Norm helpers shared by the clipping paths: NaN / inf / huge values are what
    # they handle (no input is bad), tested in clipping_test.FloatLimitsTest.
    "dpjax.clipping.sqnorm.safe_norm": "overflow-safe norm helper of the clipping paths",
    "dpjax.clipping.vmap.combine_norms": "overflow-safe norm helper of the clipping paths",
    "dpjax.clipping.vmap.tree_norms": "overflow-safe norm helper of the clipping paths",
    "dpjax.clipping.vmap.sum_clipped_grads": "core of the vmap clipping paths (callers check C)",
    "dpjax.audit.variants.FaultyDpSgdWarning": "a warning category",
    "dpjax.sampling.Sampler": "a typing.Protocol (interface), not callable by users",
    "dpjax.privatizer.Privatizer": "a typing.Protocol (interface), not callable by users",
    "dpjax.matrix_factorization.NoiseStream": "result record of the stream constructors",
    "dpjax.privatizer.GaussianPrivatizer": "takes no arguments",
    "dpjax.audit.variants.RealisedBatchDenominator": "takes no arguments",
    "dpjax.audit.variants.NoiseWithoutClipNorm": "takes no arguments",
    "dpjax.audit.variants.NoiseOnMean": "takes no arguments",
    "dpjax.audit.variants.HalfNoise": "takes no arguments",
    "dpjax.audit.canary.observe_last_coordinate": "takes no arguments",
    "dpjax.data.credit.lecture_canary": "takes no arguments",
    "dpjax.data.credit.cubic_feature_names": "takes no arguments",
    "dpjax.attacks.floating_point.naive_laplace_atoms": "takes no arguments",
    "dpjax.attacks.floating_point.normal_body_atoms": "takes no arguments",
    "dpjax.prng.normal_support": "takes no arguments",
    "dpjax.prng.normal_tail_mass": "takes no arguments",
    "dpjax.dpsgd.DivergenceWarning": "a warning category",
    "dpjax.mechanisms.InsecureNoiseWarning": "a warning category",
    "dpjax.integer_noise.IntegerNoise": "result record of rounded_gaussian / rounded_laplace",
    "dpjax.privatizer.SecureGaussianPrivatizerState": "optax state built by init",
}


# (entry point, parameter) pairs with a case that is neither a named error nor a finite
# value: the class, the probes and the first detail. The default subset skips them (a
# known hang would cost minutes); the full sweep (-m slow) runs them and fails both on a
# failure not listed here and on a listed pair that no longer fails. Empty: every
# extreme of every declared kind is a named error or a finite value.
KNOWN_GAPS: dict = {}

# Probes that once failed (oom, hang, an unnamed error, NaN): the default subset runs
# them on every run, besides its core and rotating probes; each must stay a named
# error or a finite value.
REGRESSIONS = {
    ("dpjax.accounting.pld.dpsgd_delta", "num_steps"): ("int64_max", "int32_max"),
    ("dpjax.accounting.pld.dpsgd_delta_bound", "num_steps"): ("int32_max",),
    ("dpjax.accounting.statement.privacy_statement", "num_steps"): ("int32_max",),
    ("dpjax.audit.canary.llr_distribution", "num_steps"): ("int32_max", "2^31"),
    ("dpjax.audit.last_iterate.certifiable_epsilon", "trials"): ("int64_max", "2^63"),
    ("dpjax.mechanisms.rounded_count_error", "true_count"): ("1e300",),
    ("dpjax.accounting.pld.dpsgd_delta", "rtol"): ("subnormal",),
    ("dpjax.accounting.pld.dpsgd_epsilon_bound", "num_steps"): ("int32_max",),
    ("dpjax.accounting.pld.gaussian_pld", "noise_multiplier"): ("subnormal", "1e-300"),
    ("dpjax.accounting.pld.randomized_response_pld", "epsilon"): ("1e300",),
    ("dpjax.accounting.pld.dpsgd_epsilon_never_looser", "num_steps"): ("int32_max",),
    ("dpjax.audit.guard.check_claim", "num_filler"): ("int32_max", "int64_max"),
    ("dpjax.audit.last_iterate.last_iterate_roc", "num_points"): ("int32_max", "int64_max"),
    ("dpjax.audit.last_iterate.last_iterate_roc", "num_steps"): ("int32_max", "2^63"),
    ("dpjax.audit.per_step.composed_epsilon_lower", "num_steps"): ("2^31",),
    ("dpjax.dpsgd.batch_layout", "num_models"): ("2^31",),
    ("dpjax.fitting.train_nonprivate", "num_epochs"): ("int32_max", "2^63"),
    ("dpjax.pate.fit_non_private", "pad_to"): ("int32_max", "int64_max"),
    ("dpjax.pate.train_teachers", "num_steps"): ("int32_max",),
    ("dpjax.recommender.private_statistics", "beta_p"): ("+0", "-0"),
    ("dpjax.sampling.check_user_ids", "num_records"): ("0", "2^31"),
    ("dpjax.accounting.pld.gaussian_pld", "value_discretization"): ("subnormal",),
    ("dpjax.accounting.pld.gaussian_pld", "tail_mass"): ("subnormal",),
    ("dpjax.accounting.pld.finite_output_pld", "value_discretization"): ("subnormal",),
    ("dpjax.accounting.pld.dpsgd_epsilon_bound", "noise_multiplier"): ("1e-300",),
    ("dpjax.accounting.pld.dpsgd_epsilon_bound", "delta"): ("subnormal",),
    ("dpjax.accounting.pld.dpsgd_delta_bound", "noise_multiplier"): ("subnormal",),
    ("dpjax.accounting.pld.laplace_pld", "scale"): ("1e-300",),
    ("dpjax.accounting.pld.laplace_pld", "sensitivity"): ("1e300",),
    ("dpjax.accounting.pld.dpsgd_epsilon_never_looser", "delta"): ("1e-300",),
    ("dpjax.accounting.bounded_range.bounded_range_kl", "epsilon"): ("1e300",),
    ("dpjax.accounting.mixture_pld.replace_one_subsampled_gaussian_pld", "noise_multiplier"):
        ("1e-300",),
    ("dpjax.accounting.mixture_pld.mixture_of_gaussians_pld", "tail_mass"): ("subnormal",),
    ("dpjax.accounting.rdp.tree_aggregation_rdp", "noise_multiplier"): ("1e-300",),
    ("dpjax.accounting.rdp.repeat_shape", "shape"): ("inf",),
    ("dpjax.audit.canary.gradient_canary", "num_features"): ("int32_max",),
    ("dpjax.audit.last_iterate.last_iterate_epsilon", "tol"): ("subnormal",),
    ("dpjax.audit.guard.check_claim", "canary_scale"): ("1e300",),
    ("dpjax.audit.pate_audit.output_log_probs", "sigma"): ("1e-300",),
    ("dpjax.audit.pate_audit.output_log_probs", "threshold"): ("1e300",),
    ("dpjax.audit.coverage.optimal_guesses", "num_canaries"): ("int32_max",),
    ("dpjax.audit.coverage.one_run_estimators", "trials"): ("int32_max",),
    ("dpjax.audit.per_step.step_estimate", "sampling_prob"): ("1e-300",),
    ("dpjax.audit.run.canary_design", "num_runs"): ("int32_max",),
    ("dpjax.audit.one_run_fdp.parameter_epsilon", "parameter"): ("inf",),
    ("dpjax.audit.runner.audit_dpsgd", "num_gradient_canaries"): ("int32_max",),
    ("dpjax.clipping.glm.clipped_grad_sum", "l2"): ("1e300",),
    ("dpjax.data.credit.zip_code_shares", "num_zip_codes"): ("int32_max",),
    ("dpjax.mechanisms.gaussian_sigma", "epsilon"): ("subnormal",),
    ("dpjax.selection.exponential_probs", "epsilon"): ("1e300",),
    ("dpjax.selection.exponential_probs", "sensitivity"): ("1e-300",),
    ("dpjax.fitting.train_nonprivate", "num_models"): ("int32_max",),
    ("dpjax.pate.pate_rdp_grouped", "sigma_threshold"): ("1e-300",),
    ("dpjax.pate.partition", "num_records"): ("int32_max",),
    ("dpjax.pate.partition", "num_teachers"): ("int32_max",),
    ("dpjax.pate_release.gnss_rdp", "sigma_ss"): ("1e-300",),
    ("dpjax.pate_release.plan_release", "sigma"): ("1e-300",),
    ("dpjax.recommender.sensitivities", "clamp"): ("1e300",),
    ("dpjax.recommender.private_statistics[user]", "num_items"): ("int32_max",),
    ("dpjax.recommender.private_statistics[user]", "epsilon"): ("inf",),
    ("dpjax.audit.run.chunk_key", "si"): ("int64_max",),
    ("dpjax.audit.run.chunk_key", "c"): ("2^63",),
    ("dpjax.mechanisms.rr_estimate_rate", "epsilon"): ("subnormal",),
    ("dpjax.pate_release.local_sensitivity_threshold", "sigma_threshold"): ("subnormal",),
    ("dpjax.prng.poisson_mask", "num_records"): ("int32_max", "2^31"),
    ("dpjax.sampling.padded_batch", "capacity"): ("int32_max", "2^63"),
    ("dpjax.sampling.padded_batch", "chunk"): ("int32_max", "int64_max"),
    ("dpjax.parallel.process_models", "num_models"): ("int32_max",),
    ("dpjax.audit.variants.scale_min_log_rates", "base_records"): ("int32_max",),
    ("dpjax.audit.variants.realised_denominator_lower_bound", "base_records"): ("int32_max",),
    ("dpjax.data.ratings.sample", "num_items"): ("int32_max", "int64_max"),
    ("dpjax.data.ratings.sample", "rank"): ("int32_max", "2^63"),
    ("dpjax.audit.probe.scores", "steps_per_epoch"): ("2^63",),
    ("dpjax.audit.coverage.measure", "confidence"): ("subnormal",),
    ("dpjax.pate.gaussian_rdp_data_dependent", "log_q"): ("-inf",),
    ("dpjax.pate.gaussian_rdp_data_dependent", "sigma"): ("subnormal",),
    ("dpjax.pate.gnmax_rdp_data_independent", "sigma"): ("subnormal",),
    ("dpjax.pate.threshold_rdp_data_independent", "sigma_threshold"): ("1e-300",),
    ("dpjax.pate.lnmax_epsilon", "laplace_scale"): ("subnormal",),
    ("dpjax.pate.lnmax_rdp_data_independent", "laplace_scale"): ("subnormal",),
    ("dpjax.pate.lnmax_log_q", "laplace_scale"): ("subnormal",),
    ("dpjax.pate.lnmax_rdp_data_dependent", "laplace_scale"): ("1e-300",),
    ("dpjax.audit.pate_audit.claimed_epsilon", "sigma_threshold"): ("subnormal",),
    ("dpjax.accounting.noise_support.sampler_delta", "epsilon"): ("inf",),
    ("dpjax.mechanisms.grouped_rates", "num_groups"): ("int32_max", "2^31"),
    ("dpjax.mechanisms.grouped_rates", "count_fraction"): ("subnormal", "1e-300"),
    ("dpjax.tradeoff.posterior_bound", "epsilon"): ("1e300",),
    ("dpjax.integer_noise.rounded_gaussian", "sigma_grid"): ("subnormal", "1e300"),
    ("dpjax.clipping.grid.norm_threshold", "sensitivity_grid"): ("1e300",),
    ("dpjax.privatizer.default_grid", "l2_clip_norm"): ("subnormal",),
    ("dpjax.matrix_factorization.cyclic_sensitivity", "steps_per_epoch"): ("2^63",),
    ("dpjax.matrix_factorization.gaussian_event", "sensitivity_value"): ("subnormal",),
    ("dpjax.audit.per_step.family_epsilon", "noise_multiplier"): ("1e300",),
    ("dpjax.audit.final_model.audit", "num_runs"): ("int32_max", "2^31"),
    ("dpjax.prng.random_bits", "num_words"): ("int32_max", "2^31"),
    ("dpjax.recommender.item_statistics", "num_items"): ("int32_max", "2^31"),
    ("dpjax.audit.crafting.pretrain", "num_steps"): ("int32_max",),
    ("dpjax.fitting.fit_logistic_many", "num_iters"): ("int32_max", "2^31"),
    ("dpjax.parallel.gather_models", "num_models"): ("int32_max", "2^31", "int64_max", "2^63"),
    ("dpjax.mechanisms.laplace_grid", "epsilon"): ("subnormal",),
    ("dpjax.mechanisms.laplace_grid", "sensitivity"): ("subnormal",),
    ("dpjax.mechanisms.clipped_sum", "upper"): ("subnormal",),
    ("dpjax.mechanisms.laplace_scale", "epsilon"): ("subnormal",),
    ("dpjax.audit.run.settings", "epsilons"): ("1e300",),
    ("dpjax.tradeoff.advantage_bound", "epsilon"): ("1e300",),
    ("dpjax.matrix_factorization.epsilon", "noise_multiplier"): ("1e-300",),
    ("dpjax.matrix_factorization.epsilon", "sensitivity_value"): ("1e300",),
    ("dpjax.matrix_factorization.amplified_epsilon", "delta"): ("subnormal", "1e-300"),
    ("dpjax.matrix_factorization.amplified_epsilon", "value_discretization"): ("1e300",),
    ("dpjax.privatizer.gaussian_noise", "stddev"): ("1e300",),
    ("dpjax.pate.fit_non_private", "learning_rate"): ("1e300",),
    ("dpjax.pate.gnmax_log_q", "sigma"): ("subnormal", "1e-300"),
    ("dpjax.accounting.noise_support.max_epsilon_for_sampler_delta", "tail_mass"): ("+0", "-0"),
}


def default_cases(entry, full=False):
  """The probes of `entry` a run takes: the whole sweep, or the default subset plus
  the entry's REGRESSIONS; KNOWN_GAPS are left to the whole sweep."""
  cases = list(fb.inputs(entry, full))
  if full:
    return cases
  seen = {(p, label) for p, label, _, _ in cases}
  cases += [c for c in fb.inputs(entry, True) if (c[0], c[1]) not in seen
            and c[1] in REGRESSIONS.get((entry.name, c[0]), ())]
  return [c for c in cases if (entry.name, c[0]) not in KNOWN_GAPS]


def _gaussian_train_fn(key, included_K):
  """A train_fn for the runner's baseline: K Gaussian mechanisms (mu = 1)."""
  return included_K + jax.random.normal(key, included_K.shape)


def _identity_score(observation):
  return observation


# credit.sample runs op by op (one compile per op and input shape, seconds in all), so
# the table draws credit records lazily, once per process, at the two sizes that the
# baseline of canaries.audit_data draws too (its base set, 10 records, and its public
# sample): listing the table's names costs no draw, and the battery compiles each
# size once.
@functools.cache
def _credit10():
  from dpjax.data import credit  # pylint: disable=g-import-not-at-top
  return credit.sample(jax.random.key(0), 10)


@functools.cache
def _credit_scaler():
  from dpjax.data import canaries, credit  # pylint: disable=g-import-not-at-top
  return credit.PublicScaler.fit(
      credit.sample(jax.random.key(0), canaries._PUBLIC_SAMPLE).x_NxF)  # pylint: disable=protected-access


def public_modules():
  mods = []
  for name in dpjax.__all__:
    m = importlib.import_module(f"dpjax.{name}")
    mods.append(m)
    if hasattr(m, "__path__"):
      for sub in pkgutil.iter_modules(m.__path__):
        if not sub.name.startswith("_"):
          mods.append(importlib.import_module(f"dpjax.{name}.{sub.name}"))
  return mods


def public_entry_points():
  """'module.name' for every public callable (functions and classes), each object once.

  An object reached under several names (dpjax.dpsgd.train_many is
  dpjax.dpsgd.engine.train_many) is one entry point, listed under its first name
  (a package before its modules).
  """
  out, seen = [], {}
  for m in public_modules():
    names = getattr(m, "__all__", None)
    if names is None:
      names = [n for n, v in vars(m).items() if not n.startswith("_") and callable(v)
               and getattr(v, "__module__", "") == m.__name__]
    for n in names:
      v = getattr(m, n)
      if callable(v) and not inspect.ismodule(v):
        if id(v) in seen and seen[id(v)] is v:
          continue
        seen[id(v)] = v
        out.append(f"{m.__name__}.{n}")
  return out


_key = fb.Fresh(lambda: jax.random.key(0))


@functools.lru_cache(maxsize=1)
def _sgd():
  """One optax optimiser for the recipe's entries (the same object reuses a program)."""
  import optax  # pylint: disable=g-import-not-at-top
  return optax.sgd(0.1)


def _tuning_base_fn(keys_R, candidates_R):
  """A base algorithm for tuning.repeat_and_select: outputs and scores = the candidates."""
  del keys_R
  return {"c": np.asarray(candidates_R)}, np.asarray(candidates_R, np.float64)
_rng = fb.Fresh(lambda: np.random.default_rng(0))


def entries():
  """The baseline table: one or more `Entry` per public entry point."""
  from dpjax import (accounting, fitting, mechanisms, metrics, models, parallel, pate,  # pylint: disable=g-import-not-at-top
                     privatizer, prng, sampling, selection, tradeoff, dpsgd)
  from dpjax.accounting import composition, gdp, pld, rdp, statement  # pylint: disable=g-import-not-at-top
  from dpjax.accounting import event_accounting as eacc, events as evs  # pylint: disable=g-import-not-at-top
  from dpjax.attacks import mia, reconstruction  # pylint: disable=g-import-not-at-top
  from dpjax.audit import canary, one_run, one_run_fdp, stats, store, thresholds, variants  # pylint: disable=g-import-not-at-top
  from dpjax.audit import parametric, score_audit  # pylint: disable=g-import-not-at-top
  from dpjax import audit, clipping  # pylint: disable=g-import-not-at-top
  from dpjax.clipping import ghost, glm, sqnorm  # pylint: disable=g-import-not-at-top
  from dpjax.clipping import vmap as cvmap  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries, credit, digits  # pylint: disable=g-import-not-at-top

  orders = np.array([2.0, 8.0, 32.0])
  x_nf, y_n = (np.asarray(a) for a in helpers.binary_data(n=12, d=3))
  y_n = y_n.astype(np.float32)
  keep_mn = np.array([[1, 0] * 6, [0, 1] * 6], bool)
  lr = models.logistic_regression(3)
  lr_params = lr.init(jax.random.key(1))
  cfg = helpers.small_config(dataset_size=12, num_steps=2)
  scores_in = np.linspace(0.5, 3.0, 20)
  scores_out = np.linspace(-1.0, 1.5, 20)
  fpr = np.array([0.01, 0.1, 0.5])
  votes_qc = np.array([[5.0, 1.0, 0.0], [2.0, 3.0, 1.0]])
  votes_c = np.array([8.0, 1.0, 1.0])
  mlp_m = models.mlp(3, hidden=(4,), num_classes=2)
  mlp_params = mlp_m.init(jax.random.key(2))
  y_int = y_n.astype(np.int32)
  queries = np.asarray(reconstruction.random_subset_queries(jax.random.key(0), 8, 6))
  secret = np.array([1, 0, 1, 1, 0, 0], np.float32)
  scaler = fb.Fresh(_credit_scaler) if hasattr(credit.PublicScaler, "fit") else None
  xc = fb.Fresh(lambda: np.asarray(_credit10().x_NxF))

  acct = lambda: accounting.Accountant().compose_gaussian(2.0)
  pos_kinds = {}
  t = []
  add = t.append

  # ---- accounting (front door)
  add(E("dpjax.accounting.Accountant", accounting.Accountant,
        dict(accountant="rdp", orders=orders, rdp_method="classic"), {"orders": "array"}))
  add(E("dpjax.accounting.Accountant.compose_gaussian",
        lambda noise_multiplier, count: accounting.Accountant().compose_gaussian(
            noise_multiplier, count), dict(noise_multiplier=1.0, count=3)))
  add(E("dpjax.accounting.Accountant.compose_subsampled_gaussian",
        lambda noise_multiplier, sampling_prob, count:
        accounting.Accountant().compose_subsampled_gaussian(noise_multiplier, sampling_prob,
                                                            count=count),
        dict(noise_multiplier=1.0, sampling_prob=0.1, count=3)))
  add(E("dpjax.accounting.Accountant.compose_laplace",
        lambda scale, sensitivity, count: accounting.Accountant().compose_laplace(
            scale, sensitivity, count=count), dict(scale=1.0, sensitivity=1.0, count=2)))
  add(E("dpjax.accounting.Accountant.compose_randomized_response",
        lambda epsilon, count: accounting.Accountant().compose_randomized_response(
            epsilon, count=count), dict(epsilon=1.0, count=2)))
  add(E("dpjax.accounting.Accountant.compose_event",
        lambda event, relation: accounting.Accountant("pld").compose_event(event, relation),
        dict(event=evs.LaplaceEvent(1.0), relation="add_remove"),
        {"event": "object", "relation": "choice"}))
  add(E("dpjax.accounting.Accountant.epsilon",
        lambda delta, dataset_size=None: acct().epsilon(delta, dataset_size=dataset_size),
        dict(delta=1e-5, dataset_size=1000)))
  add(E("dpjax.accounting.Accountant.delta", lambda epsilon: acct().delta(epsilon),
        dict(epsilon=1.0)))
  add(E("dpjax.accounting.dpsgd_epsilon", accounting.dpsgd_epsilon,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, delta=1e-5,
             accountant="rdp", dataset_size=1000, rdp_method="classic", orders=orders),
        {"orders": "array"}))
  add(E("dpjax.accounting.dpsgd_epsilon[pld]", accounting.dpsgd_epsilon,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, delta=1e-5,
             accountant="pld")))
  add(E("dpjax.accounting.calibrate_noise", accounting.calibrate_noise,
        dict(target_epsilon=2.0, sampling_prob=0.1, num_steps=10, delta=1e-5,
             accountant="rdp", dataset_size=1000, rtol=1e-3, rdp_method="classic")))
  add(E("dpjax.accounting.smallest_noise", accounting.smallest_noise,
        dict(eps_of_sigma=lambda s: 1.0 / s, target_epsilon=0.5, lo=1.0, hi=4.0, rtol=1e-3,
             factor=2.0, limits=(0.0, 100.0)),
        {"eps_of_sigma": "callable", "lo": "pos", "hi": "pos", "rtol": "prob",
         "factor": "pos", "limits": None}))
  for n in ("compose_mu",):
    add(E(f"dpjax.accounting.{n}", getattr(accounting, n), dict(mu0=0.5, k=4)))
  add(E("dpjax.accounting.dpsgd_clt_epsilon", accounting.dpsgd_clt_epsilon,
        dict(noise_multiplier=1.0, sampling_prob=0.01, num_steps=100, delta=1e-5,
             sampler="poisson")))
  add(E("dpjax.accounting.dpsgd_clt_mu", accounting.dpsgd_clt_mu,
        dict(noise_multiplier=1.0, sampling_prob=0.01, num_steps=100, sampler="poisson")))
  add(E("dpjax.accounting.gaussian_delta", accounting.gaussian_delta,
        dict(epsilon=1.0, mu=1.0), {"epsilon": "epsinf", "mu": "pos"}))
  add(E("dpjax.accounting.gaussian_epsilon", accounting.gaussian_epsilon,
        dict(delta=1e-5, mu=1.0)))
  add(E("dpjax.accounting.mu_for_epsilon", accounting.mu_for_epsilon,
        dict(epsilon=1.0, delta=1e-5)))
  for n in ("gaussian_delta", "gaussian_epsilon", "mu_for_epsilon", "compose_mu",
            "dpsgd_clt_mu", "dpsgd_clt_epsilon"):
    base = next(e for e in t if e.name == f"dpjax.accounting.{n}")
    add(E(f"dpjax.accounting.gdp.{n}", getattr(gdp, n), dict(base.kwargs), dict(base.kinds)))

  # ---- accounting.composition
  add(E("dpjax.accounting.composition.basic_composition", composition.basic_composition,
        dict(epsilon0=0.5, delta0=1e-6, k=3)))
  add(E("dpjax.accounting.composition.advanced_composition",
        composition.advanced_composition,
        dict(epsilon0=0.5, delta0=1e-6, k=3, delta_slack=1e-6)))
  add(E("dpjax.accounting.composition.optimal_composition_delta",
        composition.optimal_composition_delta,
        dict(epsilon0=0.5, delta0=1e-6, k=3, epsilon=1.0), {"epsilon": "epsinf"}))
  add(E("dpjax.accounting.composition.optimal_composition_epsilon",
        composition.optimal_composition_epsilon,
        dict(epsilon0=0.5, delta0=1e-6, k=3, delta=1e-5)))
  add(E("dpjax.accounting.composition.pure_dp_rdp", composition.pure_dp_rdp,
        dict(epsilon=0.3, orders=orders, bounded_range=True), {"orders": "array"}))
  add(E("dpjax.accounting.composition.group_privacy", composition.group_privacy,
        dict(epsilon=1.0, delta=1e-5, k=5)))

  # ---- accounting.pld
  add(E("dpjax.accounting.pld.PrivacyLossDistribution", pld.PrivacyLossDistribution,
        dict(mu=1.0, value_discretization=1e-3)))
  add(E("dpjax.accounting.pld.gaussian_pld", pld.gaussian_pld,
        dict(noise_multiplier=1.0, sampling_prob=0.5, sensitivity=1.0,
             value_discretization=1e-3, tail_mass=1e-15)))
  add(E("dpjax.accounting.pld.finite_output_pld", pld.finite_output_pld,
        dict(log_probs_in_K=np.log([0.75, 0.25]), log_probs_out_K=np.log([0.25, 0.75]),
             value_discretization=1e-3),
        {"log_probs_in_K": "array", "log_probs_out_K": "array", "value_discretization": "pos"}))
  add(E("dpjax.accounting.pld.laplace_pld", pld.laplace_pld,
        dict(scale=1.0, sensitivity=1.0, value_discretization=1e-3, sampling_prob=0.5)))
  add(E("dpjax.accounting.pld.randomized_response_pld", pld.randomized_response_pld,
        dict(epsilon=1.0, num_buckets=3, value_discretization=1e-3)))
  for n, last in (("dpsgd_epsilon_bound", "delta"), ("dpsgd_epsilon", "delta"),
                  ("dpsgd_delta_bound", "epsilon"), ("dpsgd_delta", "epsilon")):
    add(E(f"dpjax.accounting.pld.{n}", getattr(pld, n),
          {"noise_multiplier": 1.0, "sampling_prob": 0.1, "num_steps": 10,
           last: 1e-5 if last == "delta" else 1.0, "rtol": 1e-3}))

  add(E("dpjax.accounting.pld.dpsgd_epsilon_never_looser", pld.dpsgd_epsilon_never_looser,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, delta=1e-5, rtol=1e-3,
             value_discretization=1e-3)))
  add(E("dpjax.accounting.pld.pmf_pair_pld", pld.pmf_pair_pld,
        dict(probs_p_K=np.array([0.7, 0.2, 0.1]), probs_q_K=np.array([0.1, 0.2, 0.7]),
             value_discretization=1e-3, sampling_prob=0.5, tail_mass=1e-12),
        {"probs_p_K": "probarr", "probs_q_K": "probarr", "tail_mass": "nonneg"}))
  add(E("dpjax.accounting.pld.epsilon_delta_pair", pld.epsilon_delta_pair,
        dict(epsilon=1.0, delta=1e-3)))
  add(E("dpjax.accounting.pld.discrete_laplace_pair", pld.discrete_laplace_pair,
        dict(noise_parameter=0.5, sensitivity=3), {"noise_parameter": "pos"}))
  add(E("dpjax.accounting.pld.discrete_gaussian_pair", pld.discrete_gaussian_pair,
        dict(sigma=2.0, sensitivity=2, tail_mass=1e-15)))
  add(E("dpjax.accounting.pld.PrivacyLossDistribution.gdp_mu",
        lambda num_epsilons: pld.gaussian_pld(1.0, 0.5, value_discretization=1e-2).gdp_mu(
            num_epsilons), dict(num_epsilons=100)))

  # ---- accounting.events and event_accounting
  g_ev = evs.GaussianEvent(2.0)
  ev_kinds = {"event": "object", "events": "object", "relation": "choice",
              "noise_parameter": "pos", "rho": "pos", "sample_size": "count",
              "orders": "array", "log_probs_p": "array", "log_probs_q": "array"}
  for n, kw in (("GaussianEvent", dict(noise_multiplier=1.0)),
                ("LaplaceEvent", dict(noise_multiplier=1.0)),
                ("RandomizedResponseEvent", dict(epsilon=1.0, num_buckets=3)),
                ("DiscreteGaussianEvent", dict(sigma=2.0, sensitivity=2)),
                ("DiscreteLaplaceEvent", dict(noise_parameter=0.5, sensitivity=2)),
                ("EpsilonDeltaEvent", dict(epsilon=1.0, delta=1e-3)),
                ("ZCdpEvent", dict(rho=0.1)),
                ("PoissonSampledEvent", dict(sampling_prob=0.1, event=g_ev)),
                ("SampledWithoutReplacementEvent",
                 dict(dataset_size=100, sample_size=10, event=g_ev)),
                ("SelfComposedEvent", dict(event=g_ev, count=3)),
                ("TruncatedPoissonSampledGaussianEvent",
                 dict(noise_multiplier=1.0, sampling_prob=0.1, dataset_size=100,
                      max_batch_size=12)),
                ("ComposedEvent", dict(events=(g_ev, g_ev))),
                ("OutputPairEvent", dict(log_probs_p=tuple(np.log([0.75, 0.25]).tolist()),
                                         log_probs_q=tuple(np.log([0.25, 0.75]).tolist())))):
    add(E(f"dpjax.accounting.events.{n}", getattr(evs, n), kw, dict(ev_kinds)))
  for n, kw, extra in (
      ("ExponentialMechanismEvent", dict(epsilon=1.0), {}),
      ("PermuteAndFlipEvent", dict(epsilon=1.0), {}),
      ("RepeatAndSelectEvent", dict(event=g_ev, mean_runs=3.0, shape=1.0),
       {"mean_runs": "pos", "shape": "realinf"}),   # shape inf: the Poisson law (its field)
      ("MixtureOfGaussiansEvent",
       dict(noise_multiplier=1.0, sensitivities=(0.0, 1.0), probs=(0.5, 0.5)),
       {"sensitivities": "array", "probs": "probarr"}),
      ("TreeAggregationEvent", dict(noise_multiplier=2.0, step_counts=(10, 5)),
       {"step_counts": "sizes"})):
    add(E(f"dpjax.accounting.events.{n}", getattr(evs, n), kw, dict(ev_kinds, **extra),
          inf_ok=n == "RepeatAndSelectEvent"))
  add(E("dpjax.accounting.events.check_relation", evs.check_relation,
        dict(relation="add_remove"), dict(ev_kinds)))
  add(E("dpjax.accounting.events.dpsgd_event", evs.dpsgd_event,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10)))
  add(E("dpjax.accounting.events.flatten", evs.flatten, dict(event=g_ev), dict(ev_kinds)))
  add(E("dpjax.accounting.events.pure_epsilon", evs.pure_epsilon, dict(event=g_ev),
        dict(ev_kinds), inf_ok=True))   # inf: a Gaussian has no pure eps (documented)
  add(E("dpjax.accounting.event_accounting.check_supported", eacc.check_supported,
        dict(event=g_ev, accountant="rdp", relation="replace_one"), dict(ev_kinds)))
  add(E("dpjax.accounting.event_accounting.rdp_curve", eacc.rdp_curve,
        dict(event=g_ev, orders=orders, relation="add_remove"), dict(ev_kinds)))
  add(E("dpjax.accounting.event_accounting.privacy_loss_distribution",
        eacc.privacy_loss_distribution,
        dict(event=evs.LaplaceEvent(1.0), relation="add_remove", value_discretization=1e-3),
        dict(ev_kinds)))
  for n, last in (("epsilon", dict(delta=1e-5)), ("delta", dict(epsilon=1.0))):
    add(E(f"dpjax.accounting.event_accounting.{n}[rdp]", getattr(eacc, n),
          dict(event=g_ev, **last, accountant="rdp", relation="add_remove", orders=orders),
          dict(ev_kinds)))
    add(E(f"dpjax.accounting.event_accounting.{n}[pld]", getattr(eacc, n),
          dict(event=evs.LaplaceEvent(1.0), **last, accountant="pld", relation="add_remove",
               value_discretization=1e-3), dict(ev_kinds)))
    add(E(f"dpjax.accounting.event_accounting.{n}[gdp]", getattr(eacc, n),
          dict(event=g_ev, **last, accountant="gdp", relation="add_remove"), dict(ev_kinds)))
  add(E("dpjax.accounting.event_accounting.epsilon_never_looser", eacc.epsilon_never_looser,
        dict(event=evs.LaplaceEvent(1.0), delta=1e-5, relation="add_remove",
             value_discretization=1e-3), dict(ev_kinds)))
  add(E("dpjax.accounting.event_accounting.gdp_mu", eacc.gdp_mu,
        dict(event=g_ev, relation="replace_one"), dict(ev_kinds)))

  # ---- accounting.rdp
  add(E("dpjax.accounting.rdp.gaussian_rdp", rdp.gaussian_rdp,
        dict(noise_multiplier=1.0, orders=orders), {"orders": "array"}))
  add(E("dpjax.accounting.rdp.laplace_rdp", rdp.laplace_rdp,
        dict(scale=1.0, orders=orders, sensitivity=1.0), {"orders": "array"}))
  add(E("dpjax.accounting.rdp.randomized_response_rdp", rdp.randomized_response_rdp,
        dict(epsilon=1.0, orders=orders, num_buckets=2), {"orders": "array"}))
  add(E("dpjax.accounting.subsampled_rdp.subsampled_gaussian_rdp", rdp.subsampled_gaussian_rdp,
        dict(sampling_prob=0.1, noise_multiplier=1.0, orders=orders), {"orders": "array"}))
  rdp_vals = np.asarray(rdp.gaussian_rdp(1.0, orders))
  add(E("dpjax.accounting.rdp.rdp_to_epsilon", rdp.rdp_to_epsilon,
        dict(orders=orders, rdp_values=rdp_vals, delta=1e-5, method="classic"),
        {"orders": "array", "rdp_values": "arrayinf"}))
  add(E("dpjax.accounting.rdp.rdp_to_delta", rdp.rdp_to_delta,
        dict(orders=orders, rdp_values=rdp_vals, epsilon=1.0, method="classic"),
        {"orders": "array", "rdp_values": "arrayinf"}))
  add(E("dpjax.accounting.rdp.tree_aggregation_rdp", rdp.tree_aggregation_rdp,
        dict(noise_multiplier=1.0, step_counts=[7, 3], orders=orders),
        {"orders": "array", "step_counts": "sizes"}))
  from dpjax.accounting import bounded_range, mixture_pld  # pylint: disable=g-import-not-at-top
  add(E("dpjax.accounting.bounded_range.bounded_range_kl", bounded_range.bounded_range_kl,
        dict(epsilon=1.0)))
  add(E("dpjax.accounting.bounded_range.bounded_range_rdp", bounded_range.bounded_range_rdp,
        dict(epsilon=1.0, orders=orders), {"orders": "array"}))
  mog_kinds = {"sensitivities": "array", "probs": "probarr"}
  add(E("dpjax.accounting.mixture_pld.check_mixture", mixture_pld.check_mixture,
        dict(sensitivities=[0.0, 1.0], probs=[0.5, 0.5]), mog_kinds))
  add(E("dpjax.accounting.mixture_pld.mixture_of_gaussians_pld",
        mixture_pld.mixture_of_gaussians_pld,
        dict(noise_multiplier=1.0, sensitivities=[0.0, 1.0], probs=[0.5, 0.5],
             value_discretization=1e-2, tail_mass=1e-10), mog_kinds))
  add(E("dpjax.accounting.mixture_pld.replace_one_subsampled_gaussian_pld",
        mixture_pld.replace_one_subsampled_gaussian_pld,
        dict(noise_multiplier=1.0, sampling_prob=0.1, value_discretization=1e-2,
             tail_mass=1e-10)))
  from dpjax.accounting import density_pld, truncated_sampling, without_replacement  # pylint: disable=g-import-not-at-top
  add(E("dpjax.accounting.without_replacement.sampled_without_replacement_rdp",
        without_replacement.sampled_without_replacement_rdp,
        dict(sample_fraction=0.1, inner_rdp=lambda a: np.asarray(a) / 2.0, orders=orders,
             pure_epsilon=math.inf), {"orders": "array", "pure_epsilon": "epsinf"},
        inf_ok=False))
  add(E("dpjax.accounting.without_replacement.sampled_without_replacement_gaussian_rdp",
        without_replacement.sampled_without_replacement_gaussian_rdp,
        dict(sample_fraction=0.1, noise_multiplier=1.0, orders=orders), {"orders": "array"}))
  add(E("dpjax.accounting.without_replacement.sampled_without_replacement_gaussian_pld",
        without_replacement.sampled_without_replacement_gaussian_pld,
        dict(sample_fraction=0.1, noise_multiplier=1.0, value_discretization=1e-2,
             tail_mass=1e-10)))
  add(E("dpjax.accounting.without_replacement.sampled_without_replacement_laplace_pld",
        without_replacement.sampled_without_replacement_laplace_pld,
        dict(sample_fraction=0.1, noise_multiplier=1.0, value_discretization=1e-2)))
  add(E("dpjax.accounting.without_replacement.sampled_without_replacement_pair_pld",
        without_replacement.sampled_without_replacement_pair_pld,
        dict(sample_fraction=0.5, probs_p_K=np.array([0.7, 0.2, 0.1]),
             probs_q_K=np.array([0.1, 0.2, 0.7]), value_discretization=1e-3, tail_mass=1e-12),
        {"probs_p_K": "probarr", "probs_q_K": "probarr", "tail_mass": "nonneg"}))
  add(E("dpjax.accounting.mixture_pld.mixture_of_gaussians_rdp",
        mixture_pld.mixture_of_gaussians_rdp,
        dict(noise_multiplier=1.0, sensitivities=[0.0, 1.0], probs=[0.5, 0.5], orders=orders),
        dict(mog_kinds, orders="array")))
  add(E("dpjax.accounting.mixture_pld.replace_one_subsampled_gaussian_rdp",
        mixture_pld.replace_one_subsampled_gaussian_rdp,
        dict(noise_multiplier=1.0, sampling_prob=0.1, orders=orders), {"orders": "array"}))
  tr_kw = dict(noise_multiplier=1.0, sampling_prob=0.1, dataset_size=100, max_batch_size=12)
  add(E("dpjax.accounting.truncated_sampling.cut_probability",
        truncated_sampling.cut_probability,
        dict(sampling_prob=0.1, dataset_size=100, max_batch_size=12)))
  add(E("dpjax.accounting.truncated_sampling.branches", truncated_sampling.branches,
        dict(sampling_prob=0.1, dataset_size=100, max_batch_size=12)))
  add(E("dpjax.accounting.truncated_sampling.truncated_subsampled_gaussian_rdp",
        truncated_sampling.truncated_subsampled_gaussian_rdp, dict(tr_kw, orders=orders),
        {"orders": "array"}))
  add(E("dpjax.accounting.truncated_sampling.truncated_subsampled_gaussian_pld",
        truncated_sampling.truncated_subsampled_gaussian_pld,
        dict(tr_kw, value_discretization=1e-2, tail_mass=1e-10)))
  xs = np.linspace(-10.0, 11.0, 211)
  add(E("dpjax.accounting.density_pld.log_density_pair_pld", density_pld.log_density_pair_pld,
        dict(x_K=xs, log_p_K=-np.abs(xs), log_q_K=-np.abs(xs - 1.0), value_discretization=1e-3,
             tail_mass=1e-12),
        {"x_K": "array", "log_p_K": "arrayinf", "log_q_K": "arrayinf", "tail_mass": "nonneg"}))
  add(E("dpjax.accounting.rdp.dpsgd_rdp", rdp.dpsgd_rdp,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, orders=orders),
        {"orders": "array"}))

  # ---- repeat-and-select (private hyperparameter tuning) and dpjax.tuning
  from dpjax import tuning  # pylint: disable=g-import-not-at-top
  rs_kinds = {"mean_runs": "pos", "shape": "realinf"}
  add(E("dpjax.accounting.rdp.repeat_shape", rdp.repeat_shape, dict(shape=2.0),
        {"shape": "realinf"}, inf_ok=True))   # inf (or "poisson"): the Poisson law
  add(E("dpjax.accounting.rdp.repeat_and_select_rdp", rdp.repeat_and_select_rdp,
        dict(orders=orders, rdp_values=rdp_vals, mean_runs=5.0, shape=1.0),
        {"orders": "array", "rdp_values": "arrayinf", **rs_kinds}))
  add(E("dpjax.accounting.rdp.truncated_negative_binomial_log_gamma",
        rdp.truncated_negative_binomial_log_gamma, dict(mean_runs=5.0, shape=0.5),
        {"mean_runs": "pos", "shape": "nonneg"}))
  add(E("dpjax.accounting.tuned_dpsgd_epsilon", accounting.tuned_dpsgd_epsilon,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, delta=1e-5, mean_runs=5.0,
             shape=1.0, accountant="rdp", score_noise_multiplier=5.0, rdp_method="classic",
             orders=orders),
        {"orders": "array", "score_noise_multiplier": "pos", **rs_kinds}))
  add(E("dpjax.tuning.num_runs_log_pmf", tuning.num_runs_log_pmf,
        dict(k=np.array([1, 2]), mean_runs=3.0, shape=0.0), {"k": None, **rs_kinds}))
  add(E("dpjax.tuning.sample_num_runs", tuning.sample_num_runs,
        dict(key=_key, mean_runs=3.0, shape=1.0, size=4), rs_kinds))
  add(E("dpjax.tuning.num_runs_quantile", tuning.num_runs_quantile,
        dict(u=np.array([0.2, 0.9]), mean_runs=3.0, shape=1.0), {"u": "probany", **rs_kinds}))
  add(E("dpjax.tuning.repeat_and_select", tuning.repeat_and_select,
        dict(key=_key, base_fn=_tuning_base_fn, num_candidates=3, mean_runs=2.0, shape=1.0),
        {"base_fn": "callable", **rs_kinds}))
  add(E("dpjax.tuning.noisy_count_scores", tuning.noisy_count_scores,
        dict(key=_key, counts_R=np.array([3.0, 4.0]), noise_multiplier=2.0),
        {"counts_R": "array"}))
  add(E("dpjax.tuning.select_by_exponential_mechanism", tuning.select_by_exponential_mechanism,
        dict(key=_key, correct_counts_C=np.array([3.0, 4.0]), epsilon=1.0),
        {"correct_counts_C": "array"}))
  add(E("dpjax.tuning.user_accuracy_utility", tuning.user_accuracy_utility,
        dict(correct_MxN=np.array([[1, 0, 1]]), user_N=np.array([0, 0, 1]), num_users=2),
        {"correct_MxN": "array", "user_N": "array"}))
  add(E("dpjax.tuning.exponential_selection_epsilon", tuning.exponential_selection_epsilon,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, num_candidates=3,
             delta=1e-5, selection_epsilon=1.0)))
  add(E("dpjax.tuning.selection_rdp", tuning.selection_rdp,
        dict(orders=orders, noise_multiplier=2.0, sampling_prob=0.1, num_steps=10,
             num_candidates=4, selection_epsilon=0.5, score_noise_multiplier=5.0,
             mean_runs=3.0, shape=1.0, other_rdp=0.1 * orders),
        {"orders": "array", "score_noise_multiplier": "pos", "other_rdp": "arrayinf",
         **rs_kinds}, inf_ok=True))    # an RDP curve is inf where nothing constrains it
  add(E("dpjax.tuning.select_by_noisy_score", tuning.select_by_noisy_score,
        dict(key=_key, scores_R=np.array([1.0, 3.0]), noise_multiplier=2.0),
        {"scores_R": "array"}))
  proxy_votes = np.array([[9, 1], [2, 8], [10, 0]])
  add(E("dpjax.tuning.gnmax_grid", tuning.gnmax_grid,
        dict(key=_key, proxy_votes_QxK=proxy_votes, cells=[(2.0, 2), (1.0, 3)]),
        {"proxy_votes_QxK": "array", "cells": None}))
  add(E("dpjax.tuning.confident_gnmax_grid", tuning.confident_gnmax_grid,
        dict(key=_key, proxy_votes_QxK=proxy_votes, settings=[dict(
            threshold=6.0, sigma_threshold=2.0, sigma=1.0)], queries=[2, 3], delta=1e-5,
             orders=orders, cache=None),
        {"proxy_votes_QxK": "array", "settings": None, "queries": None, "orders": "array",
         "cache": None}))
  add(E("dpjax.tuning.proxy_release", tuning.proxy_release,
        dict(key=_key, proxy_votes_QxK=np.array([[9, 1], [8, 2]] * 3), delta=1e-5,
             sigma=4.0, threshold=6.0, sigma_threshold=2.0),
        {"proxy_votes_QxK": "array"}, inf_ok=True))   # inf: no plan possible
  EXCLUDED.update({
      "dpjax.tuning.TuningResult": "result record of repeat_and_select",
      "dpjax.tuning.dpsgd_runs": ("trains models with dpsgd.train_many (fuzzed), whose checks "
                                  "it reuses; its own checks are in tests/tuning_test.py")})

  # ---- accounting.statement
  add(E("dpjax.accounting.statement.privacy_statement", statement.privacy_statement,
        dict(noise_multiplier=2.0, sampling_prob=0.1, num_steps=10, dataset_size=1000,
             deltas=(1e-5,), fprs=(0.1,), pld_rtol=1e-2, privacy_unit="user"),
        {"deltas": "probarr", "fprs": "probarr", "pld_rtol": "pos", "privacy_unit": "choice"}))

  add(E("dpjax.accounting.statement.privacy_statement", statement.privacy_statement,
        dict(noise_multiplier=2.0, sampling_prob=0.1, num_steps=2, dataset_size=50,
             deltas=(1e-5,), fprs=(0.1,), max_batch_size=8),
        {"deltas": "probarr", "fprs": "probarr", "max_batch_size": "count"},
        inf_ok=True))   # nan CLT columns: not given for truncated batches (documented)
  add(E("dpjax.accounting.statement.truncated_dpsgd_event", statement.truncated_dpsgd_event,
        dict(noise_multiplier=1.0, sampling_prob=0.1, num_steps=10, dataset_size=100,
             max_batch_size=12), {"max_batch_size": "count"}))

  # ---- attacks
  phi = np.linspace(-1, 1, 24).reshape(2, 12)
  add(E("dpjax.attacks.mia.logit_confidence", mia.logit_confidence,
        dict(logits=phi, labels_N=y_int), {"logits": "anyrank", "labels_N": "labels"}))
  add(E("dpjax.attacks.mia.loss_attack_scores", mia.loss_attack_scores,
        dict(losses_MxN=np.abs(phi)), {"losses_MxN": "array"}))
  add(E("dpjax.attacks.mia.lira_scores", mia.lira_scores,
        dict(phi_MxN=np.linspace(-1, 1, 48).reshape(4, 12),
             keep_MxN=np.array([[1, 0] * 6, [0, 1] * 6] * 2, bool)),
        {"phi_MxN": "array", "keep_MxN": "binary"}))
  add(E("dpjax.attacks.mia.shokri_attack_scores", mia.shokri_attack_scores,
        dict(phi_MxN=phi, labels_N=y_int, keep_MxN=keep_mn),
        {"phi_MxN": "array", "labels_N": "labels", "keep_MxN": "binary"}))
  add(E("dpjax.attacks.reconstruction.noise_std", reconstruction.noise_std,
        dict(noise="gaussian", scale=1.0), {"scale": "nonneg"}))
  add(E("dpjax.attacks.reconstruction.dp_laplace_scale", reconstruction.dp_laplace_scale,
        dict(total_epsilon=1.0, num_queries=10)))
  add(E("dpjax.attacks.reconstruction.random_subset_queries",
        reconstruction.random_subset_queries,
        dict(key=_key, num_queries=8, num_people=6),
        {"num_queries": "size", "num_people": "size"}))
  add(E("dpjax.attacks.reconstruction.noisy_counts", reconstruction.noisy_counts,
        dict(key=_key, queries_QxN=queries, secret_N=secret, noise="gaussian", scale=1.0),
        {"queries_QxN": "binary", "secret_N": "binary", "scale": "nonneg"}))
  answers = queries.astype(np.float32) @ secret
  add(E("dpjax.attacks.reconstruction.least_squares_decode",
        reconstruction.least_squares_decode, dict(queries_QxN=queries, answers_Q=answers),
        {"queries_QxN": "binary", "answers_Q": "array"}))
  add(E("dpjax.attacks.reconstruction.lp_decode", reconstruction.lp_decode,
        dict(queries_QxN=queries, answers_Q=answers),
        {"queries_QxN": "binary", "answers_Q": "array"}))
  add(E("dpjax.attacks.reconstruction.reconstruction_trials",
        reconstruction.reconstruction_trials,
        dict(key=_key, secret_N=secret, num_queries=8, num_trials=2, noise="gaussian",
             scale=1.0), {"secret_N": "binary", "num_queries": "size", "num_trials": "size",
                          "scale": "nonneg"}))
  add(E("dpjax.attacks.reconstruction.majority_baseline", reconstruction.majority_baseline,
        dict(secret_N=secret), {"secret_N": "binary"}))
  add(E("dpjax.attacks.reconstruction.predicted_recovery",
        reconstruction.predicted_recovery, dict(num_queries=10, num_people=6, std=1.0),
        {"std": "nonneg"}))

  # ---- audit
  counts = dict(false_positives=2, negatives=100, false_negatives=3, positives=100)
  # Non-integer error counts are documented (expected counts); totals are integers.
  ckinds = {"false_positives": "nonneg", "negatives": "count", "false_negatives": "nonneg",
            "positives": "count"}
  for mod in ("audit", "audit.stats"):
    m = audit if mod == "audit" else stats
    add(E(f"dpjax.{mod}.clopper_pearson", m.clopper_pearson,
          dict(successes=3, trials=10, confidence=0.9),
          {"successes": "nonneg", "trials": "count"}))
    add(E(f"dpjax.{mod}.epsilon_lower_bound", m.epsilon_lower_bound,
          dict(counts, delta=1e-5, confidence=0.9), ckinds))
  add(E("dpjax.audit.stats.clopper_pearson_upper", stats.clopper_pearson_upper,
        dict(successes=3, trials=10, confidence=0.9),
        {"successes": "nonneg", "trials": "count"}))
  add(E("dpjax.audit.stats.epsilon_from_rates", stats.epsilon_from_rates,
        dict(fpr=0.01, fnr=0.2, delta=1e-5), {"fpr": "prob", "fnr": "prob"},
        inf_ok=True))                     # inf when a rate is 0 (documented)
  add(E("dpjax.audit.stats.perfect_attack_ceiling", stats.perfect_attack_ceiling,
        dict(trials=100, delta=1e-5, confidence=0.9)))
  add(E("dpjax.audit.stats.error_counts", stats.error_counts,
        dict(scores_in_K=scores_in, scores_out_K=scores_out,
             thresholds_J=np.array([0.0, 1.0])),
        {"scores_in_K": "arrayinf", "scores_out_K": "arrayinf", "thresholds_J": "arrayinf"},
        mismatch=False))
  add(E("dpjax.audit.stats.monotone_argmax", stats.monotone_argmax,
        dict(fp_J=np.array([5.0, 3.0, 1.0]), fn_J=np.array([0.0, 1.0, 2.0]),
             value_fn=lambda f, g: -(f + g), tolerance=0.0),
        {"fp_J": "array", "fn_J": "array", "value_fn": "callable", "tolerance": "nonneg"}))
  add(E("dpjax.audit.stats.check_scores", stats.check_scores,
        dict(scores_K=scores_in, name="scores_K"), {"scores_K": "arrayinf", "name": None}))

  add(E("dpjax.audit.canary.gradient_canary", canary.gradient_canary,
        dict(num_features=3, l2_clip_norm=1.0), {"num_features": "size", "l2_clip_norm": "pos"}))
  add(E("dpjax.audit.canary.gradient_canaries", canary.gradient_canaries,
        dict(num_features=3, num_canaries=2, l2_clip_norm=1.0),
        {"num_features": "size", "num_canaries": "size", "l2_clip_norm": "pos"}))
  add(E("dpjax.audit.canary.observe_last_coordinates", canary.observe_last_coordinates,
        dict(num_canaries=2)))
  add(E("dpjax.audit.canary.canaries_design", canary.canaries_design,
        dict(num_models=8, num_canaries=3, in_fraction=0.5, seed=0),
        {"num_models": "size", "num_canaries": "size", "in_fraction": "prob", "seed": "count"}))
  add(E("dpjax.audit.canary.balanced_design", canary.balanced_design,
        dict(num_models=4), {"num_models": "size"}))
  add(E("dpjax.audit.canary.black_box_scores", canary.black_box_scores,
        dict(params_w_MxD=np.ones((4, 3)), x_canary_D=np.ones(3)),
        {"params_w_MxD": "array", "x_canary_D": "array"}))
  obs = np.linspace(-1, 1, 12).reshape(4, 3)
  add(E("dpjax.audit.canary.normalized_observations", canary.normalized_observations,
        dict(obs_MxT=obs, expected_batch_size=3.0, l2_clip_norm=1.0),
        {"obs_MxT": "array", "l2_clip_norm": "pos"}))
  add(E("dpjax.audit.canary.step_llr", canary.step_llr,
        dict(o=obs, sampling_prob=0.1, noise_multiplier=1.0), {"o": "anyrank"}))
  add(E("dpjax.audit.canary.white_box_scores", canary.white_box_scores,
        dict(o_MxT=obs, sampling_prob=0.1, noise_multiplier=1.0),
        {"o_MxT": "array", "noise_multiplier": "nonneg"}))
  add(E("dpjax.audit.canary.white_box_llr", canary.white_box_llr,
        dict(obs_MxTxK=np.full((2, 3, 2), 0.1), expected_batch_size=10.0, l2_clip_norm=1.0,
             sampling_prob=0.5, noise_multiplier=1.0),
        {"obs_MxTxK": "array", "noise_multiplier": "nonneg"}))
  add(E("dpjax.audit.canary.llr_distribution", canary.llr_distribution,
        dict(sampling_prob=0.1, noise_multiplier=1.0, num_steps=3)))

  sk = {"scores_in_K": "arrayinf", "scores_out_K": "arrayinf"}
  add(E("dpjax.audit.thresholds.choose_threshold", thresholds.choose_threshold,
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9),
        sk, mismatch=False))
  add(E("dpjax.audit.thresholds.FixedThreshold", thresholds.FixedThreshold,
        dict(threshold=0.5, sign=1), {"sign": "choice", "threshold": "realinf"},
        inf_ok=True))                     # the record holds the threshold, +-inf allowed
  add(E("dpjax.audit.thresholds.FixedThreshold.bound",
        lambda scores_in_K, scores_out_K, delta, confidence: thresholds.FixedThreshold(
            0.5).bound(scores_in_K, scores_out_K, delta=delta, confidence=confidence),
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9),
        sk, mismatch=False))
  add(E("dpjax.audit.thresholds.SplitThreshold.bound",
        lambda scores_in_K, scores_out_K, delta, confidence: thresholds.SplitThreshold(
        ).bound(scores_in_K, scores_out_K, delta=delta, confidence=confidence),
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9),
        sk, mismatch=False))
  add(E("dpjax.audit.thresholds.SplitThreshold", thresholds.SplitThreshold,
        dict(both_signs=True), {"both_signs": None}))
  add(E("dpjax.audit.thresholds.bonferroni_confidence", thresholds.bonferroni_confidence,
        dict(confidence=0.95, num_tests=3)))
  add(E("dpjax.audit.thresholds.Bonferroni", thresholds.Bonferroni,
        dict(strategies=(thresholds.FixedThreshold(0.5), thresholds.SplitThreshold())),
        {"strategies": "object"}))
  add(E("dpjax.audit.thresholds.Bonferroni.bound",
        lambda scores_in_K, scores_out_K, delta, confidence: thresholds.Bonferroni(
            (thresholds.FixedThreshold(0.5), thresholds.SplitThreshold())).bound(
                scores_in_K, scores_out_K, delta=delta, confidence=confidence),
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9),
        sk, mismatch=False))
  tb = thresholds.FixedThreshold(0.5).bound(scores_in, scores_out)
  add(E("dpjax.audit.thresholds.bootstrap_spread", thresholds.bootstrap_spread,
        dict(result=tb, rng=_rng, num_replicates=20),
        {"result": "object", "rng": "object", "num_replicates": "size"}))
  add(E("dpjax.audit.thresholds.best_certifiable", thresholds.best_certifiable,
        dict(fpr_J=np.array([0.01, 0.1]), fnr_J=np.array([0.5, 0.2]), trials=1000,
             delta=1e-5, confidence=0.9, thresholds_J=np.array([1.0, 0.5])),
        {"fpr_J": "probarr", "fnr_J": "probarr", "thresholds_J": "arrayinf",
         "trials": "count"}))
  add(E("dpjax.audit.thresholds.declared_ladder", thresholds.declared_ladder,
        dict(thresholds_J=np.array([0.0, 1.0, 2.0]), fpr_J=np.array([0.6, 0.3, 0.1]),
             num_out=40),
        {"thresholds_J": "arrayinf", "fpr_J": "probarr", "num_out": "count"}))
  add(E("dpjax.audit.thresholds.best_exact_epsilon", thresholds.best_exact_epsilon,
        dict(log_fpr_J=np.log([0.5, 0.1]), log_tpr_J=np.log([0.9, 0.5]), delta=1e-5),
        {"log_fpr_J": None, "log_tpr_J": None}))
  add(E("dpjax.audit.parametric.gdp_estimate", parametric.gdp_estimate,
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9,
             threshold=0.5), dict(sk, threshold="realinf"), mismatch=False,
        inf_ok=True))                     # mu = -inf where no test separates (eps 0)

  add(E("dpjax.audit.score_audit.score_bounds", score_audit.score_bounds,
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9,
             claimed_epsilon=1.0, threshold=0.5, thresholds=np.array([0.2, 0.5]), seed=0),
        dict(sk, threshold="realinf", thresholds="arrayinf", seed="count"), mismatch=False))
  add(E("dpjax.audit.score_audit.score_bounds[progress]", score_audit.score_bounds,
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, progress=False),
        dict(sk, progress="flag"), mismatch=False))

  from dpjax.audit import roc  # pylint: disable=g-import-not-at-top
  add(E("dpjax.audit.roc.empirical_roc", roc.empirical_roc,
        dict(scores_in_K=scores_in, scores_out_K=scores_out), sk, mismatch=False, inf_ok=True))   # thresholds +-inf at the ends of the ROC
  add(E("dpjax.audit.roc.roc_band", roc.roc_band,
        dict(scores_in_K=scores_in, scores_out_K=scores_out, confidence=0.9,
             fpr_G=np.array([0.01, 0.5])), dict(sk, fpr_G="probarr"), mismatch=False))
  add(E("dpjax.audit.roc.plot_roc_band", roc.plot_roc_band,
        dict(ax=fb.Fresh(lambda: __import__("matplotlib.pyplot").pyplot.subplots()[1]),
             band=roc.roc_band(scores_in, scores_out), epsilon=1.0, delta=1e-5, mu=1.0,
             max_epsilon=10.0, log_scale=True, label="a"),
        {"ax": None, "band": "object", "log_scale": None, "label": None, "mu": "pos",
         "max_epsilon": "pos"}))
  add(E("dpjax.audit.one_run.declared_guess_counts", one_run.declared_guess_counts,
        dict(num_canaries=100, num_levels=3)))
  add(E("dpjax.audit.one_run.audit_declared_guesses", one_run.audit_declared_guesses,
        dict(scores_K=scores_in, included_K=np.arange(20) % 2 == 0, delta=1e-5,
             confidence=0.9, method="fdp", guess_counts=np.array([4, 10])),
        {"scores_K": "arrayinf", "included_K": "binary", "method": "choice",
         "guess_counts": "array"}, inf_ok=True))   # mu_lower NaN: only the GDP method has one
  add(E("dpjax.audit.one_run_fdp.fdp_rejects", one_run_fdp.fdp_rejects,
        dict(num_canaries=100, num_guesses=20, num_correct=15, family="gdp", parameter=1.0,
             delta=1e-5, confidence=0.9),
        {"num_guesses": "count", "num_correct": "count", "family": "choice",
         "parameter": "pos"}))
  add(E("dpjax.audit.one_run_fdp.fdp_p_value", one_run_fdp.fdp_p_value,
        dict(num_canaries=100, num_guesses=20, num_correct=15, family="dp", parameter=1.0,
             delta=1e-5),
        {"num_guesses": "count", "num_correct": "count", "family": "choice",
         "parameter": "nonneg"}))
  add(E("dpjax.audit.one_run_fdp.fdp_epsilon_lower_bound", one_run_fdp.fdp_epsilon_lower_bound,
        dict(num_canaries=100, num_guesses=20, num_correct=18, delta=1e-5, family="gdp",
             confidence=0.9), {"family": "choice"}, inf_ok=True))   # NaN fields: not applicable to the family
  add(E("dpjax.audit.one_run.steinke_pointwise_epsilon_lower_bound",
        one_run.steinke_pointwise_epsilon_lower_bound,
        dict(num_canaries=100, num_guesses=20, num_correct=18, delta=1e-5, confidence=0.9),
        {"num_guesses": "count", "num_correct": "count"}, inf_ok=True))   # NaN fields: not applicable
  add(E("dpjax.audit.one_run_fdp.fdp_epsilon_lower_bound[subsampled_gaussian]",
        one_run_fdp.fdp_epsilon_lower_bound,
        dict(num_canaries=100, num_guesses=20, num_correct=18, delta=1e-5,
             family="subsampled_gaussian", confidence=0.9, sampling_prob=0.5, num_steps=2),
        {"family": "choice", "num_steps": "count"}, inf_ok=True))   # NaN fields: not applicable to the family
  add(E("dpjax.audit.one_run.p_value", one_run.p_value,
        dict(num_canaries=100, num_guesses=20, num_correct=15, epsilon=1.0, delta=1e-5),
        {"num_guesses": "count", "num_correct": "count", "epsilon": "epsinf"}))
  add(E("dpjax.audit.one_run.epsilon_lower_bound", one_run.epsilon_lower_bound,
        dict(num_canaries=100, num_guesses=20, num_correct=18, delta=1e-5, confidence=0.9),
        inf_ok=True))                     # inf: every eps up to the search cap is rejected
  add(E("dpjax.audit.one_run.audit", one_run.audit,
        dict(scores_K=scores_in, included_K=np.arange(20) % 2 == 0,
             num_positive_guesses=5, num_negative_guesses=5, delta=1e-5, confidence=0.9),
        {"scores_K": "arrayinf", "included_K": "binary"}, inf_ok=True))
  add(E("dpjax.audit.one_run.one_run_game", one_run.one_run_game,
        dict(rng=_rng, num_canaries=10, sigma=1.0),
        {"rng": "object", "num_canaries": "size"}))
  add(E("dpjax.audit.one_run.top_precision", one_run.top_precision,
        dict(sigma=1.0, fraction=0.1), {"fraction": "prob", "sigma": "pos"}))
  add(E("dpjax.audit.one_run.expected_correct", one_run.expected_correct,
        dict(sigma=1.0, num_canaries=100, num_guesses=20), {"sigma": "pos"}))
  add(E("dpjax.audit.one_run.paper_guess_grid", one_run.paper_guess_grid,
        dict(num_canaries=100, points=4), {"points": "count"}))
  EXCLUDED["dpjax.audit.one_run.paper_protocol"] = (
      "a protocol of its checked pieces (expected_correct, paper_guess_grid and the tests)")
  add(E("dpjax.audit.one_run_fdp.check_guesses", one_run_fdp.check_guesses,
        dict(num_canaries=10, num_guesses=4, num_correct=3)))
  add(E("dpjax.audit.one_run_fdp.largest_rejected", one_run_fdp.largest_rejected,
        dict(num_canaries=100, num_guesses=20, num_correct=18, family="gdp", delta=1e-5,
             confidence=0.9, at_least=0.0), {"family": "choice", "at_least": "realinf"},
        inf_ok=True))
  add(E("dpjax.audit.one_run_fdp.parameter_epsilon", one_run_fdp.parameter_epsilon,
        dict(parameter=1.0, family="gdp", delta=1e-5),
        {"family": "choice", "parameter": "realinf"}, inf_ok=True))   # parameter inf: eps inf

  from dpjax.audit import runner  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({"dpjax.audit.runner.TrainingAudit": "result record of audit_training",
                   "dpjax.audit.runner.DpSgdAudit": "result record of audit_dpsgd",
                   "dpjax.audit.runner.union_best": ("takes TrainingAudit records (checked "
                                                     "by type), bounds_from_trials on each")})
  add(E("dpjax.audit.runner.inclusion_bits", runner.inclusion_bits,
        dict(key=_key, num_runs=6, num_canaries=3, mode="independent"),
        {"mode": "choice"}))
  inc_rk = np.arange(12).reshape(6, 2) % 3 == 0
  add(E("dpjax.audit.runner.bounds_from_trials", runner.bounds_from_trials,
        dict(scores_RxK=inc_rk + np.linspace(0, 1, 12).reshape(6, 2), included_RxK=inc_rk,
             delta=1e-5, confidence=0.9, mode="independent", claimed_epsilon=1.0, seed=0),
        {"scores_RxK": "arrayinf", "included_RxK": "binary", "mode": "choice",
         "seed": "count"}))
  add(E("dpjax.audit.runner.audit_training", runner.audit_training,
        dict(key=_key, train_fn=_gaussian_train_fn, num_runs=6, num_canaries=2,
             score_fn=_identity_score, delta=1e-5, confidence=0.9, claimed_epsilon=1.0,
             mode="independent", chunk_size=4, memory_budget_bytes=2**20, progress=False),
        {"train_fn": "callable", "score_fn": "callable", "mode": "choice",
         "chunk_size": "count", "memory_budget_bytes": "count", "progress": None}))
  add(E("dpjax.audit.runner.audit_dpsgd", runner.audit_dpsgd,
        dict(key=_key, cfg=helpers.small_config(dataset_size=12, num_steps=2), model=lr,
             x_NxF=x_nf, y_N=y_n, num_runs=4, num_gradient_canaries=2,
             record_canary=(x_nf[0], 1.0), confidence=0.9, mode="independent",
             progress=False),
        {"x_NxF": "array", "y_N": "binary", "record_canary": "object", "mode": "choice",
         "progress": None}))

  from dpjax.audit import crafting, last_iterate  # pylint: disable=g-import-not-at-top
  from dpjax.audit import final_model as fm  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({
      "dpjax.audit.crafting.projections": (
          "traceable helper of projection_score and of final_model.audit's white-box "
          "observer (traced under jit; projection_score checks the directions)"),
      "dpjax.audit.final_model.FinalModelAudit": "result record of final_model.audit",
      "dpjax.audit.final_model.FinalModelAdversary": (
          "a NamedTuple (no constructor checks); its fields are checked by "
          "final_model.audit (fuzzed with adversaries='object')")})
  mk_p = {"params": "object"}
  add(E("dpjax.audit.last_iterate.last_iterate_delta", last_iterate.last_iterate_delta,
        dict(epsilon=1.0, sampling_prob=0.5, noise_multiplier=1.0, num_steps=3,
             direction="both"), {"epsilon": "epsarr", "direction": "choice"}))
  add(E("dpjax.audit.last_iterate.last_iterate_epsilon", last_iterate.last_iterate_epsilon,
        dict(sampling_prob=0.5, noise_multiplier=1.0, num_steps=3, delta=1e-5, tol=1e-6)))
  add(E("dpjax.audit.last_iterate.last_iterate_roc", last_iterate.last_iterate_roc,
        dict(sampling_prob=0.5, noise_multiplier=1.0, num_steps=3, num_points=11), inf_ok=True))   # log rates -inf where a rate is 0
  add(E("dpjax.audit.last_iterate.certifiable_epsilon", last_iterate.certifiable_epsilon,
        dict(sampling_prob=0.5, noise_multiplier=1.0, num_steps=3, trials=100, delta=1e-5,
             confidence=0.95)))
  add(E("dpjax.audit.crafting.unused_features", crafting.unused_features,
        dict(x_NxF=x_nf), {"x_NxF": "anyrank"}))
  add(E("dpjax.audit.crafting.input_weight_canaries", crafting.input_weight_canaries,
        dict(model=mlp_m, params=mlp_params, features=np.array([0]), l2_clip_norm=1.0,
             skip_units=(1,)), {**mk_p, "features": "array", "skip_units": None}))
  add(E("dpjax.audit.crafting.quiet_coordinate_canary", crafting.quiet_coordinate_canary,
        dict(model=mlp_m, params=mlp_params, x_NxF=x_nf, y_N=y_int, l2_clip_norm=1.0),
        {**mk_p, "x_NxF": "array", "y_N": "labels"}))
  add(E("dpjax.audit.crafting.input_canary", crafting.input_canary,
        dict(model=mlp_m, params=mlp_params, exclude_features=(0,), value=1.0),
        {**mk_p, "exclude_features": None, "value": "real"}))
  add(E("dpjax.audit.crafting.pretrain", crafting.pretrain,
        dict(model=mlp_m, params=mlp_params, x_NxF=x_nf, y_N=y_int, num_steps=2,
             learning_rate=0.1), {**mk_p, "x_NxF": "array", "y_N": "labels"}))
  add(E("dpjax.audit.crafting.worst_case_init", crafting.worst_case_init,
        dict(model=mlp_m, params=mlp_params, feature=0, label=1, bias=2.0, gain=10.0,
             unit=0), {**mk_p, "feature": "count", "label": "count", "unit": "count",
                       "bias": "pos", "gain": "pos"}))
  add(E("dpjax.audit.crafting.gradient_direction", crafting.gradient_direction,
        dict(model=mlp_m, params=mlp_params, x_c=x_nf[0], y_c=1),
        {**mk_p, "x_c": "array", "y_c": None}))
  add(E("dpjax.audit.crafting.projection_score", crafting.projection_score,
        dict(directions={"w": np.eye(2)}), {"directions": "object"}))
  add(E("dpjax.audit.crafting.loss_score", crafting.loss_score,
        dict(model=mlp_m, x_c=x_nf[0], y_c=1), {"x_c": "array", "y_c": None}))
  EXCLUDED.update({
      "dpjax.audit.crafting.audit_inits": ("a recipe of its checked pieces (pretrain, "
                                           "worst_case_init, unused_features)"),
      "dpjax.audit.final_model.standard_adversaries": (
          "a recipe of its checked pieces (input_canary, input_weight_canaries, "
          "quiet_coordinate_canary, gradient_direction)")})
  add(E("dpjax.audit.final_model.audit", fm.audit,
        dict(key=_key, cfg=helpers.small_config(dataset_size=12, num_steps=2), model=lr,
             x_NxF=x_nf, y_N=y_n, init_params=lr_params,
             adversaries=[fm.FinalModelAdversary(
                 "r", {"loss": crafting.loss_score(lr, x_nf[0], 1.0)}, record=(x_nf[0], 1.0))],
             num_runs=4, confidence=0.9, white_box=True, progress=False),
        {"x_NxF": "array", "y_N": "binary", "init_params": "object",
         "adversaries": "object", "white_box": None, "progress": None}))
  EXCLUDED["dpjax.audit.final_model.PaperProtocolAudit"] = (
      "result record of final_model.paper_protocol_audit")
  add(E("dpjax.audit.final_model.blank_target", fm.blank_target,
        dict(record_shape=(3,), label=1), {"record_shape": "shape", "label": "count"}))
  add(E("dpjax.audit.final_model.gdp_epsilon_all_thresholds", fm.gdp_epsilon_all_thresholds,
        dict(scores_in_K=scores_in, scores_out_K=scores_out, delta=1e-5, confidence=0.9),
        {"scores_in_K": "arrayinf", "scores_out_K": "arrayinf"}, mismatch=False))
  add(E("dpjax.audit.final_model.paper_protocol_audit", fm.paper_protocol_audit,
        dict(key=_key, cfg=helpers.small_config(dataset_size=12, num_steps=2, sampling_prob=1.0),
             model=lr, x_NxF=x_nf, y_N=y_n, init_params=lr_params, target=(x_nf[0], 1.0),
             num_seeds=1, num_runs=4, confidence=0.9, progress=False),
        {"x_NxF": "array", "y_N": "binary", "init_params": "object", "target": "object",
         "progress": "flag"}))

  from dpjax.audit import guard  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({"dpjax.audit.guard.ClaimCheck": "result record of check_claim",
                   "dpjax.audit.guard.default_claim": "takes no arguments"})
  add(E("dpjax.audit.runner.seed_from_key", runner.seed_from_key, dict(key=_key)))
  add(E("dpjax.audit.guard.declared_thresholds", guard.declared_thresholds,
        dict(sampling_prob=0.5, noise_multiplier=2.0, num_steps=3, num_out=64),
        {"noise_multiplier": "pos", "num_out": "count"}))
  add(E("dpjax.audit.guard.check_claim", guard.check_claim,
        dict(key=_key, claim=helpers.small_config(dataset_size=12, num_steps=2),
             num_runs=4, num_canaries=4, num_filler=2, canary_scale=10.0, confidence=0.9,
             progress=False, variant="correct"),
        {"claim": "object", "num_runs": "count", "num_canaries": "size",
         "num_filler": "count", "canary_scale": "pos", "progress": None,
         "variant": "choice"}))

  from dpjax.audit import pate_audit  # pylint: disable=g-import-not-at-top
  EXCLUDED["dpjax.audit.pate_audit.LabelAudit"] = "result record of audit_labels"
  pv_in, pv_out = np.array([[3, 2], [3, 2]]), np.array([[2, 3], [2, 3]])
  pk = {"votes_in_QxC": "array", "votes_out_QxC": "array", "votes_QxC": "array",
        "orders": "array", "threshold_ratio": "pos"}
  add(E("dpjax.audit.pate_audit.output_log_probs", pate_audit.output_log_probs,
        dict(votes_QxC=votes_qc, sigma=1.0, threshold=3.0, sigma_threshold=1.0), pk,
        inf_ok=True))   # -inf: the exact log-probability of an impossible outcome
  add(E("dpjax.audit.pate_audit.llr_scores", pate_audit.llr_scores,
        dict(outcomes_KxQ=np.array([[0, 1], [1, 0]]), log_probs_in_QxO=np.log(np.full((2, 2), .5)),
             log_probs_out_QxO=np.log(np.array([[.3, .7], [.6, .4]]))),
        {"outcomes_KxQ": "labels", "log_probs_in_QxO": "array", "log_probs_out_QxO": "array"}))
  add(E("dpjax.audit.pate_audit.exact_epsilon", pate_audit.exact_epsilon,
        dict(votes_in_QxC=pv_in, votes_out_QxC=pv_out, sigma=1.0, delta=1e-5, threshold=3.0,
             sigma_threshold=1.0), pk))
  add(E("dpjax.audit.pate_audit.crafted_pair", pate_audit.crafted_pair,
        dict(num_teachers=5, num_queries=2, num_classes=3),
        {"num_queries": "size", "num_classes": "size"}))
  add(E("dpjax.audit.pate_audit.claimed_epsilon", pate_audit.claimed_epsilon,
        dict(num_queries=3, sigma=2.0, delta=1e-5, sigma_threshold=1.0, orders=orders), pk))
  add(E("dpjax.audit.pate_audit.calibrate_sigma", pate_audit.calibrate_sigma,
        dict(target_epsilon=2.0, num_queries=3, delta=1e-5, threshold_ratio=1.5,
             orders=orders), pk))
  add(E("dpjax.audit.pate_audit.audit_labels", pate_audit.audit_labels,
        dict(key=_key, votes_in_QxC=pv_in, votes_out_QxC=pv_out, sigma=1.0, threshold=3.0,
             sigma_threshold=1.0, num_trials=8, delta=1e-5, confidence=0.9,
             aggregator=pate.confident_gnmax, orders=orders),
        dict(pk, num_trials="size", aggregator="callable")))

  from dpjax.audit import coverage  # pylint: disable=g-import-not-at-top
  gmech = coverage.Mechanism("gaussian", 1.0)
  mk = {"mechanism": "object"}
  add(E("dpjax.audit.coverage.Mechanism", coverage.Mechanism,
        dict(kind="gaussian", strength=1.0), {"kind": "choice", "strength": "nonneg"}))
  add(E("dpjax.audit.coverage.Mechanism.true_epsilon",
        lambda delta: gmech.true_epsilon(delta), dict(delta=1e-5)))
  add(E("dpjax.audit.coverage.Mechanism.sample",
        lambda rng, included: gmech.sample(rng, included),
        dict(rng=_rng, included=np.array([True, False, True])),
        {"rng": "object", "included": "binaryany"}))
  add(E("dpjax.audit.coverage.Mechanism.roc", lambda thresholds_J: gmech.roc(thresholds_J),
        dict(thresholds_J=np.array([0.0, 1.0])), {"thresholds_J": "arrayinf"}))
  add(E("dpjax.audit.coverage.gaussian_at", coverage.gaussian_at, dict(epsilon=1.0, delta=1e-5)))
  for fn, n in ((coverage.optimal_threshold, "trials"), (coverage.optimal_guesses, "num_canaries"),
                (coverage.threshold_estimators, "trials"), (coverage.one_run_estimators, "trials")):
    add(E(f"dpjax.audit.coverage.{fn.__name__}", fn,
          {"mechanism": gmech, n: 50, "delta": 1e-5, "confidence": 0.9}, mk))
  add(E("dpjax.audit.coverage.score_bounds_estimator", coverage.score_bounds_estimator,
        dict(threshold=0.5), {"threshold": "realinf"}))
  add(E("dpjax.audit.coverage.Estimator", coverage.Estimator,
        dict(name="x", bound=lambda *a: 0.0, inputs="one_run", outputs=(), gdp_only=(),
             description=""),
        {"name": "pathlike", "bound": "callable", "inputs": "choice", "outputs": "object",
         "gdp_only": "object", "description": None}))
  add(E("dpjax.audit.coverage.violation_p_value", coverage.violation_p_value,
        dict(violations=3, audits=100, alpha=0.05),
        {"violations": "count", "audits": "count", "alpha": "prob"}))
  add(E("dpjax.audit.coverage.measure", coverage.measure,
        dict(estimator=coverage.overfit_estimator(), mechanism=gmech, audits=2, trials=10,
             delta=1e-5, confidence=0.9, rng=_rng),
        {"estimator": "object", "mechanism": "object", "audits": "size", "trials": "size",
         "rng": "object"}))

  from dpjax.audit import per_step  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({
      "dpjax.audit.per_step.StepEstimate": "result record of per_step.step_estimate",
      "dpjax.audit.per_step.ComposedBound": "result record of per_step.composed_bound",
      "dpjax.audit.per_step.StepStatistics": ("result record of step_statistics / "
                                              "observation_statistics (its + is tested in "
                                              "per_step_test)"),
      "dpjax.audit.per_step_run.per_step_statistics": "pipeline stage (needs audit data)",
      "dpjax.audit.per_step_run.per_step_audit": "pipeline stage (needs audit data and a model)",
      "dpjax.audit.per_step_run.step_observations": "pipeline stage (needs a variant)",
      "dpjax.audit.per_step_run.audit_claims": "pipeline stage (per_step_audit per claim)",
  })
  from dpjax.audit import per_step_run  # pylint: disable=g-import-not-at-top
  thr2 = np.array([0.0, 1.0])
  sk = {"scores_in": "anyrank", "scores_out": "anyrank", "thresholds_J": "array"}
  add(E("dpjax.audit.per_step.step_statistics", per_step.step_statistics,
        dict(scores_in=np.array([1.0, 2.0, 0.5]), scores_out=np.array([0.0, -1.0, 0.5, 1.5]),
             thresholds_J=thr2), sk, mismatch=False))
  add(E("dpjax.audit.per_step.observation_statistics", per_step.observation_statistics,
        dict(o_MxTxK=np.zeros((2, 3, 2), np.float32), in_MxK=np.array([[True, False]] * 2),
             thresholds_J=thr2),
        {"o_MxTxK": "array", "in_MxK": "binary", "thresholds_J": "array"}, mismatch=False))
  add(E("dpjax.audit.per_step.design_thresholds", per_step.design_thresholds,
        dict(sampling_prob=0.5, noise_multiplier=2.0, num_thresholds=3, spread=2.0),
        {"spread": "pos"}))
  pst = per_step.step_statistics(np.array([1.0, 2.0, 0.5, 1.5]), np.array([0.0, -1.0, 0.5, 0.2]),
                                 thr2)
  add(E("dpjax.audit.per_step.step_estimate", per_step.step_estimate,
        dict(statistics=pst, sampling_prob=0.5, num_steps=4, delta=1e-5, confidence=0.9),
        {"statistics": "object"}))
  add(E("dpjax.audit.per_step.composed_bound", per_step.composed_bound,
        dict(statistics=pst, num_steps=4, delta=1e-5, confidence=0.9, grid_points=2 ** 11),
        {"statistics": "object", "grid_points": "count"}))
  add(E("dpjax.audit.per_step.composed_epsilon_lower", per_step.composed_epsilon_lower,
        dict(fpr_J=np.array([0.3]), fnr_J=np.array([0.4]), num_steps=4, delta=1e-5,
             grid_points=2 ** 11),
        {"fpr_J": "probarr", "fnr_J": "probarr", "grid_points": "count"}))
  add(E("dpjax.audit.per_step.family_epsilon", per_step.family_epsilon,
        dict(noise_multiplier=2.0, sampling_prob=0.5, num_steps=4, delta=1e-5),
        {"noise_multiplier": "posinf"}))
  add(E("dpjax.audit.per_step_run.step_mechanism", per_step_run.step_mechanism,
        dict(noise_multiplier=2.0, sampling_prob=0.5, num_steps=4)))
  add(E("dpjax.audit.per_step_run.StepMechanism", per_step_run.StepMechanism,
        dict(kind="gaussian", strength=0.5, num_steps=4, sampling_prob=0.5),
        {"kind": "choice", "strength": "pos"}))
  add(E("dpjax.audit.per_step_run.coverage_estimators", per_step_run.coverage_estimators,
        dict(mechanism=per_step_run.step_mechanism(2.0, 0.5, 4), num_thresholds=3,
             grid_points=2 ** 11),
        {"mechanism": "object", "grid_points": "count"}))

  from dpjax.audit import run as arun  # pylint: disable=g-import-not-at-top
  spec_kw = dict(trials=8, sampling_prob=0.5, num_steps=2, delta=1e-5, confidence=0.95,
                 variant="correct", threat_model="both", canaries_per_run=1,
                 canary_in_fraction=0.25, chunk_models=8, observation_budget=2 ** 10,
                 design_seed=0, canary_layout="parameter_leaf")
  add(E("dpjax.audit.run.CanaryAuditSpec", arun.CanaryAuditSpec, spec_kw,
        {"variant": "choice", "threat_model": "choice", "canaries_per_run": "count",
         "canary_in_fraction": "prob", "chunk_models": "count", "observation_budget": "count",
         "design_seed": "count", "canary_layout": "choice"}))
  spec = arun.CanaryAuditSpec(**spec_kw)
  add(E("dpjax.audit.run.Setting", arun.Setting,
        dict(name="eps2", claimed_epsilon=2.0, sigma=1.0),
        {"name": "pathlike", "claimed_epsilon": "eps", "sigma": "nonneg"}))
  setting = arun.Setting("eps2", 2.0, 1.0)
  add(E("dpjax.audit.run.settings", arun.settings,
        dict(epsilons=[2.0], sampling_prob=0.5, num_steps=2, delta=1e-5, no_noise=True),
        {"epsilons": "epsarr", "no_noise": "flag"}, inf_ok=True))   # the noiseless setting claims eps = inf
  add(E("dpjax.audit.run.chunk_names", arun.chunk_names,
        dict(spec=spec, setting_list=[setting]), {"spec": "object", "setting_list": "object"}))
  add(E("dpjax.audit.run.chunk_identities", arun.chunk_identities,
        dict(key_train=_key, spec=spec, setting_list=[setting]),
        {"spec": "object", "setting_list": "object"}))
  add(E("dpjax.audit.run.chunk_key", arun.chunk_key, dict(key_train=_key, si=0, c=1),
        {"si": "count", "c": "count"}))
  add(E("dpjax.audit.run.white_box_llr_scores", arun.white_box_llr_scores,
        dict(obs_MxTxK=np.full((4, 2, 1), 0.1, np.float32), scale=2.0, sampling_prob=0.5,
             noise_multiplier=1.0),
        {"obs_MxTxK": "array", "noise_multiplier": "nonneg"}))
  add(E("dpjax.audit.per_step_run.PerStepSpec", per_step_run.PerStepSpec,
        dict(sampling_prob=0.5, num_steps=2, delta=1e-5, confidence=0.95, variant="correct",
             runs=4, canaries=2, num_thresholds=3, observation_budget=2 ** 10),
        {"variant": "choice", "runs": "count", "canaries": "count",
         "observation_budget": "count"}))
  add(E("dpjax.audit.per_step_run.canary_bits", per_step_run.canary_bits,
        dict(num_runs=3, num_canaries=4, seed=0),
        {"num_runs": "count", "num_canaries": "count", "seed": "count"}))
  add(E("dpjax.audit.run.canary_design", arun.canary_design,
        dict(x_NxF=np.zeros((3, 2)), y_N=np.zeros(3, np.int32), num_runs=2,
             records=(np.ones((1, 2)), np.ones(1), np.array([[True], [False]])),
             gradients=({"w": np.eye(2, dtype=np.float32)}, np.ones((2, 2), bool))),
        {"x_NxF": None, "y_N": None, "records": "object", "gradients": "object"}))
  add(E("dpjax.audit.run.claimed_roc", arun.claimed_roc, dict(spec=spec, setting=setting),
        {"spec": "object", "setting": "object"}))
  add(E("dpjax.audit.run.roc_record", arun.roc_record,
        dict(spec=spec, st=setting, s_in=np.linspace(0.0, 2.0, 6), s_out=np.linspace(-1.0, 1.0, 6)),
        {"spec": "object", "st": "object", "s_in": "array", "s_out": "array"}, mismatch=False))
  add(E("dpjax.audit.store.canonical", store.canonical, dict(x={"a": 1.0}), {"x": None}))
  add(E("dpjax.audit.store.ChunkStore",
        lambda directory, manifest: store.ChunkStore(directory, manifest),
        dict(directory=fb.Fresh(lambda: __import__("tempfile").mkdtemp()), manifest={"a": 1}),
        {"directory": "pathlike", "manifest": "object"}))
  from dpjax.audit import probe  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({
      "dpjax.audit.probe.audit_case": "pipeline stage (trains a probe world)"})
  case_kw = dict(key="k", label="k", variant="correct", sampling_prob=0.5, base_records=1,
                 steps=4, own_size=True, source="-", why="")
  add(E("dpjax.audit.probe.Case", probe.Case, case_kw,
        {"key": "pathlike", "label": "pathlike", "variant": "choice", "base_records": "count",
         "steps": "count", "own_size": "flag", "source": None, "why": None}))
  add(E("dpjax.audit.probe.steps_per_epoch", probe.steps_per_epoch,
        dict(case=probe.CASES[0]), {"case": "object"}))
  add(E("dpjax.audit.probe.true_epsilon", probe.true_epsilon,
        dict(case=probe.CASES[0], noise_multiplier=3.0, noise_coords=5, delta=1e-5),
        {"case": "object", "noise_coords": "count"}))
  add(E("dpjax.audit.probe.scores", probe.scores,
        dict(obs=np.full((2, 4, 3), 0.5), w=np.zeros((2, 5)), sampling_prob=0.5,
             noise_multiplier=1.0, expected_batch_size=2.0, steps_per_epoch=2),
        {"obs": "array", "w": "array", "expected_batch_size": "pos"}, mismatch=False, inf_ok=True))   # final_scale inf where a run is noiseless
  add(E("dpjax.audit.variants.clip_batch_mean", variants.clip_batch_mean,
        dict(base=clipping.path_for(lr)), {"base": "object"}))
  add(E("dpjax.audit.variants.variant", variants.variant,
        dict(name="realised_batch_denominator", cfg=cfg, model=lr), {"name": "choice"}))
  add(E("dpjax.audit.variants.exact_epsilon", variants.exact_epsilon,
        dict(name="noise_half", cfg=helpers.small_config(dataset_size=12, num_steps=2)),
        {"name": "choice"}))
  from dpjax.audit import mf_variants  # pylint: disable=g-import-not-at-top
  cyc = sampling.CyclicSampler(batch_size=3, steps_per_epoch=2, sampling_prob=0.25)
  mf_kinds = {"name": "choice", "coefs": "array", "sampler": "object"}
  add(E("dpjax.audit.mf_variants.mf_variant", mf_variants.mf_variant,
        dict(name="mf_noise_not_carried", cfg=helpers.small_config(), coefs=np.array([1.0, 0.5]),
             sampler=cyc), {**mf_kinds, "cfg": "object"}))
  add(E("dpjax.audit.mf_variants.mf_exact_epsilon", mf_variants.mf_exact_epsilon,
        dict(name="mf_one_participation", cfg=helpers.small_config(),
             coefs=np.array([1.0, 0.5]), sampler=cyc), {**mf_kinds, "cfg": "object"}))
  add(E("dpjax.audit.mf_variants.mf_claimed_sensitivity", mf_variants.mf_claimed_sensitivity,
        dict(name="mf_one_participation", coefs=np.array([1.0, 0.5]), sampler=cyc,
             num_steps=6), mf_kinds))
  from dpjax import matrix_factorization as mfv  # pylint: disable=g-import-not-at-top
  add(E("dpjax.audit.mf_variants.NoiseNotCarried", mf_variants.NoiseNotCarried,
        dict(stream=mfv.toeplitz_stream([1.0, 0.5], 4)), {"stream": "object"}))
  add(E("dpjax.audit.mf_variants.InverseWrongSide", mf_variants.InverseWrongSide,
        dict(stream=mfv.toeplitz_stream([1.0, 0.5], 4)), {"stream": "object"}))
  from dpjax.audit import mf_audit  # pylint: disable=g-import-not-at-top
  c3 = mfv.banded_toeplitz([1.0, 0.5], 3)
  add(E("dpjax.audit.mf_audit.whiten", mf_audit.whiten,
        dict(o_MxTxK=np.ones((2, 3, 2)), strategy_TxT=c3),
        {"o_MxTxK": "array", "strategy_TxT": "array"}, mismatch=False))
  add(E("dpjax.audit.mf_audit.iid_steps", mf_audit.iid_steps,
        dict(strategy_TxT=c3, participation_T=np.ones(3), rtol=1e-6),
        {"strategy_TxT": "array", "participation_T": "array", "rtol": "pos"}, mismatch=False))
  add(E("dpjax.audit.mf_audit.accountant_epsilon", mf_audit.accountant_epsilon,
        dict(strategy_TxT=c3, noise_multiplier=2.0, delta=1e-5), {"strategy_TxT": "array"}))
  add(E("dpjax.audit.mf_audit.full_batch_training", mf_audit.full_batch_training,
        dict(strategy_TxT=c3, noise_multiplier=2.0, dataset_size=10, delta=1e-5,
             privatizer=None, learning_rate=0.1, name="mf"),
        {"strategy_TxT": "array", "privatizer": None, "name": None}))
  add(E("dpjax.audit.mf_audit.audited_training", mf_audit.audited_training,
        dict(strategy_TxT=c3, noise_multiplier=2.0, dataset_size=10,
             sampler=sampling.CyclicPoissonSampler(0.5, 2), delta=1e-5, privatizer=None,
             learning_rate=0.1, name="mf"),
        {"strategy_TxT": "array", "sampler": "object", "privatizer": None, "name": None}))
  add(E("dpjax.audit.mf_audit.participation_columns", mf_audit.participation_columns,
        dict(strategy_TxT=c3, cycle_length=2, bins_K=np.array([0.0, 1.0]), rtol=1e-6),
        {"strategy_TxT": "array", "bins_K": "array", "rtol": "pos"}, mismatch=False))
  EXCLUDED.update({
      "dpjax.audit.mf_audit.observation_audit": "audit statistics of trained runs' observations "
                                                "(per_step_audit's stage; mf_audit_test)",
      "dpjax.audit.mf_audit.per_step_audit": "pipeline stage (needs audit data and a model)",
      "dpjax.audit.mf_audit.canary_audit": "pipeline stage (runner.audit_dpsgd on MF training)",
  })
  world = dict(noise_coords=3, base_records=2, sampling_prob=0.5, steps=4)
  wk = {"noise_coords": "count", "base_records": "count", "steps": "count"}
  add(E("dpjax.audit.variants.realised_denominator_lower_bound",
        variants.realised_denominator_lower_bound, dict(**world, delta=1e-5), wk))
  add(E("dpjax.audit.variants.floored_denominator_lower_bound",
        variants.floored_denominator_lower_bound, dict(**world, delta=1e-5), wk))
  add(E("dpjax.audit.variants.scale_min_log_rates", variants.scale_min_log_rates,
        dict(tau=np.array([0.5, 2.0]), **world), {**wk, "tau": "array"}))
  add(E("dpjax.audit.variants.shuffle_slot_mu", variants.shuffle_slot_mu,
        dict(noise_multiplier=2.0, steps=100, steps_per_epoch=10),
        {"steps": "count", "steps_per_epoch": "count"}))
  add(E("dpjax.audit.variants.clip_scaled", variants.clip_scaled,
        dict(base=clipping.path_for(lr), factor=4.0), {"base": "object", "factor": "pos"}))
  add(E("dpjax.audit.variants.floored_denominator", variants.floored_denominator,
        dict(sampling_prob=0.5, dataset_size=4)))
  add(E("dpjax.audit.variants.FlooredExpectedBatch", variants.FlooredExpectedBatch,
        dict(sampling_prob=0.5, dataset_size=4)))
  add(E("dpjax.audit.variants.OverRateSampler", variants.OverRateSampler,
        dict(sampling_prob=0.01, factor=10.0), {"factor": "pos"}))
  add(E("dpjax.audit.variants.backprop_clipping", variants.backprop_clipping,
        dict(grad_clip=0.1), {"grad_clip": "prob"}))

  # ---- clipping
  add(E("dpjax.clipping.ClippingPath", clipping.ClippingPath,
        dict(fn=clipping.path_for(lr).fn, name="p", scan_unroll=1,
             buffer_fn=clipping.path_for(lr).fn),
        {"fn": "callable", "name": None, "scan_unroll": "count", "buffer_fn": "callable"}))
  add(E("dpjax.clipping.register", clipping.register,
        dict(kind="fuzz-test-kind", factory=clipping.path_for), {"kind": "pathlike"}))
  add(E("dpjax.clipping.path_for", clipping.path_for, dict(model=lr)))
  add(E("dpjax.clipping.generic_path", clipping.generic_path, dict(model=lr)))
  add(E("dpjax.clipping.as_path", clipping.as_path, dict(clipping=clipping.path_for(lr).fn),
        {"clipping": "callable"}))
  bx, by, bw = x_nf[:4], y_n[:4], np.ones(4, np.float32)
  data_kinds = {"x_BxF": "array", "y_B": "labels", "weights_B": "binary", "x_BxD": "array",
                "params": None}
  add(E("dpjax.clipping.ghost.mlp_clipped_sum", ghost.mlp_clipped_sum,
        dict(params=mlp_params, x_BxF=bx, y_B=by.astype(np.int32), weights_B=bw,
             l2_clip_norm=1.0, l2=0.0, branch=False), data_kinds))
  add(E("dpjax.clipping.ghost.cnn_clipped_sum_fn", ghost.cnn_clipped_sum_fn,
        dict(input_shape=(8, 8, 1), l2=0.0, conv_mode="auto", branch=True),
        {"input_shape": None}))
  add(E("dpjax.clipping.ghost.clipped_sum_fn", ghost.clipped_sum_fn,
        dict(model=mlp_m, conv_mode="auto", branch=True)))
  add(E("dpjax.clipping.glm.clipped_grad_sum", glm.clipped_grad_sum,
        dict(l2=0.0, params=lr_params, x_BxD=bx, y_B=by, weights_B=bw, l2_clip_norm=1.0),
        data_kinds))
  loss_one = lambda p, x, y: models.per_example_loss(lr, p, x[None], y[None])[0]
  # sqnorm takes any loss_one: its y_B is any finite array, not labels.
  sq_kinds = dict(data_kinds, y_B="array")
  add(E("dpjax.clipping.sqnorm.per_example_grads", sqnorm.per_example_grads,
        dict(loss_one=loss_one, params=lr_params, x_BxF=bx, y_B=by), sq_kinds))
  add(E("dpjax.clipping.sqnorm.tree_sq_norm_per_example", sqnorm.tree_sq_norm_per_example,
        dict(grads={"w": np.ones((4, 3))}), {"grads": None}))
  add(E("dpjax.clipping.sqnorm.per_example_sq_norms", sqnorm.per_example_sq_norms,
        dict(loss_one=loss_one, params=lr_params, x_BxF=bx, y_B=by), sq_kinds))
  add(E("dpjax.clipping.vmap.clip_factor", cvmap.clip_factor,
        dict(norms_B=np.array([0.5, 2.0]), l2_clip_norm=1.0), {"norms_B": "elemwiseinf"}))
  add(E("dpjax.clipping.vmap.example_loss", cvmap.example_loss,
        dict(model=lr, params=lr_params, x_F=bx[0], y=by[0]),
        {"x_F": "array", "y": None, "params": None}))
  for n in ("per_example_grads",):
    add(E(f"dpjax.clipping.vmap.{n}", getattr(cvmap, n),
          dict(model=lr, params=lr_params, x_BxF=bx, y_B=by), data_kinds))
  for n in ("clipped_grad_sum", "two_pass_clipped_grad_sum"):
    add(E(f"dpjax.clipping.vmap.{n}", getattr(cvmap, n),
          dict(model=lr, params=lr_params, x_BxF=bx, y_B=by, weights_B=bw,
               l2_clip_norm=1.0), data_kinds))
  from dpjax.clipping import user as cuser  # pylint: disable=g-import-not-at-top
  user_kinds = {"x_NxF": "array", "y_N": "labels", "weights_N": "binary", "params": None,
                "user_ids_N": "labels"}
  add(E("dpjax.clipping.user.user_clipped_grad_sum", cuser.user_clipped_grad_sum,
        dict(model=lr, user_ids_N=np.array([0, 0, 1, 2]), num_users=3, params=lr_params,
             x_NxF=bx, y_N=by.astype(np.int32), weights_N=bw, l2_clip_norm=1.0), user_kinds))
  add(E("dpjax.clipping.user.user_level_path", cuser.user_level_path,
        dict(model=lr, user_ids_N=np.array([0, 0, 1, 2]), num_users=3),
        {"user_ids_N": "labels"}))

  # ---- data
  add(E("dpjax.data.canaries.audit_data", canaries.audit_data,
        dict(key=_key, base_size=10, unused_features=2),
        {"base_size": "size", "unused_features": "size"}))
  add(E("dpjax.data.credit.true_logit", credit.true_logit, dict(x_NxF=xc),
        {"x_NxF": "array"}))
  add(E("dpjax.data.credit.sample", credit.sample, dict(key=_key, n=10, minority_share=0.2),
        {"n": "size"}))
  add(E("dpjax.data.credit.sample_split", credit.sample_split,
        dict(key=_key, sizes=(3, 4), minority_share=0.2), {"sizes": "sizes"}))
  add(E("dpjax.data.credit.sample_customers", credit.sample_customers,
        dict(key=_key, num_customers=6, min_loans=1, max_loans=3, num_zip_codes=4,
             minority_share=0.2),
        {"num_customers": "size", "min_loans": "count", "max_loans": "count"}))
  add(E("dpjax.data.credit.sample_linear_split", credit.sample_linear_split,
        dict(key=_key, sizes=(3, 4), public=1, minority_share=0.2),
        {"sizes": "sizes", "public": "int"}))
  add(E("dpjax.data.credit.sample_customer_splits", credit.sample_customer_splits,
        dict(key=_key, num_private=8, num_test=3, validation_every=2, max_loans=3,
             num_zip_codes=4),
        {"num_private": "size", "num_test": "size", "validation_every": "count",
         "max_loans": "count"}))
  add(E("dpjax.data.credit.zip_code_shares", credit.zip_code_shares, dict(num_zip_codes=5)))
  add(E("dpjax.data.credit.bayes_accuracy", credit.bayes_accuracy,
        dict(data=fb.Fresh(_credit10)), {"data": "object"}))
  if scaler is not None:
    add(E("dpjax.data.credit.PublicScaler", credit.PublicScaler,
          dict(mean_F=fb.Fresh(lambda: _credit_scaler().mean_F),
               std_F=fb.Fresh(lambda: _credit_scaler().std_F),
               cubic_rms_D=fb.Fresh(lambda: _credit_scaler().cubic_rms_D)),
          {"mean_F": "array", "std_F": "array", "cubic_rms_D": "array"}))
    for n in ("linear_features", "cubic_features"):
      add(E(f"dpjax.data.credit.{n}", getattr(credit, n), dict(x_NxF=xc, scaler=scaler),
            {"x_NxF": "array", "scaler": "object"}))
  add(E("dpjax.data.digits.scale", digits.scale, dict(pixels_NxF=np.full((2, 64), 8.0)),
        {"pixels_NxF": "elemwise"}))
  add(E("dpjax.data.digits.load", digits.load, dict(key=_key, test_fraction=0.25)))
  add(E("dpjax.data.digits.as_images", digits.as_images, dict(x_NxF=np.zeros((2, 64))),
        {"x_NxF": "array"}))

  # ---- dpsgd
  add(E("dpjax.dpsgd.DpSgdConfig", dpsgd.DpSgdConfig,
        dict(dataset_size=100, sampling_prob=0.1, num_steps=10, l2_clip_norm=1.0,
             noise_multiplier=1.0, delta=1e-5, learning_rate=0.5, momentum=0.0,
             ema_decay=0.5, accountant="rdp", privacy_unit="example"),
        {"momentum": "prob", "dataset_size": "count", "noise_multiplier": "nonneg",
         "privacy_unit": "choice", "ema_decay": "prob"}))
  add(E("dpjax.dpsgd.DpSgdConfig", dpsgd.DpSgdConfig,
        dict(dataset_size=100, sampling_prob=0.1, num_steps=10, max_batch_size=12),
        {"dataset_size": "count", "max_batch_size": "count"}))
  add(E("dpjax.dpsgd.DpSgdConfig.calibrate",
        lambda target_epsilon: dpsgd.DpSgdConfig(
            dataset_size=100, sampling_prob=0.1, num_steps=5,
            max_batch_size=12).calibrate(target_epsilon), dict(target_epsilon=3.0)))
  add(E("dpjax.dpsgd.DpSgdConfig.calibrate",
        lambda target_epsilon: dpsgd.DpSgdConfig(
            dataset_size=100, sampling_prob=0.1, num_steps=10).calibrate(target_epsilon),
        dict(target_epsilon=3.0)))
  user_cfg = helpers.small_config(dataset_size=4, num_steps=2, privacy_unit="user")
  add(E("dpjax.dpsgd.DpSgdConfig.sampler",
        lambda user_ids_N: user_cfg.sampler(user_ids_N),
        dict(user_ids_N=np.repeat(np.arange(4), 3)), {"user_ids_N": "labels"}))
  add(E("dpjax.dpsgd.PerformanceFlags", dpsgd.PerformanceFlags,
        dict(memory_budget_bytes=2 ** 20, max_chunk=2,
             model_sharding=parallel.model_sharding(parallel.model_mesh()),
             batch_capacity=4, progress=False),
        {"memory_budget_bytes": "count", "max_chunk": "count", "model_sharding": "object",
         "batch_capacity": "count", "progress": "flag"}))
  quiet = dpsgd.PerformanceFlags(max_chunk=2, progress=False)
  tk = {"x_NxF": "array", "y_N": "labels", "keep_MxN": "binary", "keep_N": "binary",
        "perf": "object", "per_example_stats": "flag", "fixed_gradients": "object"}
  fixed = dpsgd.FixedGradients({"w": 2.0 * np.eye(3, dtype=np.float32)[1:]},
                               np.array([[True, False], [False, True]]))
  add(E("dpjax.dpsgd.train_many", dpsgd.train_many,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, cfg=cfg, model=lr,
             per_example_stats=False, fixed_gradients=fixed, perf=quiet), tk))

  def train_user(user_ids_N, **kw):   # the record owners come with the sampler
    return dpsgd.train_many(cfg=user_cfg, sampler=user_cfg.sampler(user_ids_N), **kw)
  add(E("dpjax.dpsgd.train_many[user]", train_user,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, model=lr,
             user_ids_N=np.repeat(np.arange(4), 3), perf=quiet),
        dict(tk, user_ids_N="labels")))

  def train_fixed(gradients_K, keep_MxK, **kw):
    return dpsgd.train_many(fixed_gradients=dpsgd.FixedGradients(gradients_K, keep_MxK), **kw)
  add(E("dpjax.dpsgd.FixedGradients[train_many]", train_fixed,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, cfg=cfg, model=lr,
             gradients_K={"w": 2.0 * np.eye(3, dtype=np.float32)[1:]},
             keep_MxK=np.array([[True, False], [False, True]]), perf=quiet),
        dict(tk, keep_MxK="binary")))
  add(E("dpjax.dpsgd.train_one", dpsgd.train_one,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_N=keep_mn[0], cfg=cfg, model=lr,
             perf=dpsgd.PerformanceFlags(progress=False, batch_capacity=4)), tk))
  add(E("dpjax.dpsgd.program", dpsgd.program,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, cfg=cfg, model=lr,
             per_example_stats=False, fixed_gradients=fixed, perf=quiet), tk))
  add(E("dpjax.dpsgd.model_keys", dpsgd.model_keys, dict(key=_key, m=3), {"m": "count"}))
  add(E("dpjax.dpsgd.batch_layout", dpsgd.batch_layout,
        dict(num_records=4096, sampling_prob=0.01, kept_max=4000, num_models=2,
             privacy_unit="example", num_params=2000),
        {"num_records": "count", "kept_max": "count", "num_models": "count",
         "privacy_unit": "choice", "num_params": "count"}))
  add(E("dpjax.dpsgd.train_sweep", dpsgd.train_sweep,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, cfgs=[cfg, cfg],
             config_index_M=np.array([0, 1]), model=lr, perf=quiet),
        dict(tk, cfgs="object", config_index_M="labels")))
  from dpjax import clip_sweep  # pylint: disable=g-import-not-at-top
  from dpjax.pate import labelling  # pylint: disable=g-import-not-at-top
  add(E("dpjax.pate.labelling.labelling_epsilons", labelling.labelling_epsilons,
        dict(key=_key, votes_QxC=votes_qc, answered_Q=np.array([True, False]), sigma=2.0,
             delta=1e-5, orders=orders, threshold=4.0, sigma_threshold=1.0, plan=None,
             cache=None),
        {"votes_QxC": "array", "answered_Q": "binary", "orders": "array", "plan": "object",
         "cache": "object"}))   # sigma, threshold, sigma_threshold, delta: by name
  add(E("dpjax.clip_sweep.train_clip_sweep", clip_sweep.train_clip_sweep,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, model=lr, base=cfg, noise_multipliers=[1.0, 0.0],
             l2_clip_norms=[0.5, 2.0], scaled_learning_rates=[1.0],
             grid_Mx3=[[0, 0, 0], [1, 1, 0]], user_N=None),
        {"x_NxF": "array", "y_N": "labels", "model": "object", "base": "object",
         "noise_multipliers": "array", "l2_clip_norms": "array",
         "scaled_learning_rates": "array", "grid_Mx3": "object", "user_N": "object"}))

  # ---- fitting
  add(E("dpjax.fitting.fit_logistic", fitting.fit_logistic,
        dict(x_NxD=x_nf, y_N=y_n, l2=1e-2, num_iters=5, tol=1e-6),
        {"x_NxD": "array", "y_N": "binary"}))
  add(E("dpjax.fitting.fit_logistic_many", fitting.fit_logistic_many,
        dict(x_NxD=x_nf, y_N=y_n, keep_MxN=keep_mn, l2=1e-2, num_iters=5, max_step_norm=1.0),
        {"x_NxD": "array", "y_N": "binary", "keep_MxN": "binary"}))

  # ---- mechanisms
  bits = np.array([1, 0, 1, 1], np.int32)
  util = np.array([1.0, 2.0, 0.5])
  add(E("dpjax.mechanisms.rr_truth_prob", mechanisms.rr_truth_prob, dict(epsilon=1.0)))
  add(E("dpjax.mechanisms.randomized_response", mechanisms.randomized_response,
        dict(key=_key, bits=bits, epsilon=1.0), {"bits": "binaryelem"}))
  add(E("dpjax.mechanisms.rr_estimate_rate", mechanisms.rr_estimate_rate,
        dict(reports=bits, epsilon=1.0, axis=-1), {"reports": "binaryany", "axis": None}))
  add(E("dpjax.mechanisms.rr_estimate_std", mechanisms.rr_estimate_std,
        dict(n=10, epsilon=1.0, rate=0.3)))
  add(E("dpjax.mechanisms.rr_posterior", mechanisms.rr_posterior,
        dict(prior=0.3, epsilon=1.0, report=1), {"report": "choice"}))
  add(E("dpjax.mechanisms.laplace_scale", mechanisms.laplace_scale,
        dict(epsilon=1.0, sensitivity=1.0)))
  add(E("dpjax.mechanisms.laplace_mechanism", mechanisms.laplace_mechanism,
        dict(key=_key, value=util, epsilon=1.0, sensitivity=1.0), {"value": "elemwise"}))
  add(E("dpjax.mechanisms.gaussian_sigma", mechanisms.gaussian_sigma,
        dict(epsilon=0.5, delta=1e-5, sensitivity=1.0, calibration="classic")))
  add(E("dpjax.mechanisms.gaussian_mechanism", mechanisms.gaussian_mechanism,
        dict(key=_key, value=util, epsilon=1.0, delta=1e-5, sensitivity=1.0,
             calibration="analytic"), {"value": "elemwise"}))
  add(E("dpjax.selection.exponential_probs", selection.exponential_probs,
        dict(utilities=util, epsilon=1.0, sensitivity=1.0), {"utilities": "anyrank"}))
  add(E("dpjax.selection.exponential_mechanism", selection.exponential_mechanism,
        dict(key=_key, utilities=util, epsilon=1.0, sensitivity=1.0, shape=(2,)),
        {"utilities": "anyrank", "shape": None}))
  add(E("dpjax.selection.report_noisy_max", selection.report_noisy_max,
        dict(key=_key, utilities=util, epsilon=1.0, sensitivity=1.0),
        {"utilities": "anyrank"}))
  add(E("dpjax.mechanisms.clipped_sum", mechanisms.clipped_sum,
        dict(key=_key, values=util, epsilon=1.0, upper=2.0, lower=0.0),
        {"values": "elemwise"}))
  add(E("dpjax.mechanisms.rounded_count_error", mechanisms.rounded_count_error,
        dict(true_count=6.0, epsilon=0.5, max_k=50), {"max_k": "size"}))
  add(E("dpjax.mechanisms.noisy_count", mechanisms.noisy_count,
        dict(key=_key, present=bits, epsilon=1.0), {"present": "binaryelem"}))
  add(E("dpjax.mechanisms.private_mean", mechanisms.private_mean,
        dict(key=_key, values=util, epsilon=1.0, upper=2.0, lower=0.0, count_fraction=0.5),
        {"values": "anyrank"}))
  add(E("dpjax.mechanisms.grouped_rates", mechanisms.grouped_rates,
        dict(key=_key, group_U=np.array([0, 1, 1, 2]), values_U=np.array([1.0, 0.0, 1.0, 0.5]),
             num_groups=3, epsilon=1.0, count_fraction=0.5, max_rate_sd=0.05),
        {"group_U": "labels", "values_U": "array", "max_rate_sd": "pos"}))

  # ---- metrics
  labels_k = np.arange(20) % 2
  sc = np.linspace(0, 1, 20)
  # Scores and labels are flattened (documented: scores of [M, N] models pooled).
  mk = {"scores_K": "anyrankinf", "labels_K": "binaryany"}
  for n in ("roc_counts", "roc_curve", "roc_auc", "advantage", "balanced_accuracy"):
    add(E(f"dpjax.metrics.{n}", getattr(metrics, n), dict(scores_K=sc, labels_K=labels_k),
          mk, inf_ok=n in ("roc_counts", "roc_curve")))   # thresholds +-inf at the ROC ends
  mk = {"labels_K": "binary", "predictions_K": "binary", "groups_K": "labels"}
  add(E("dpjax.metrics.auc", metrics.auc,
        dict(fpr=np.array([0.0, 0.5, 1.0]), tpr=np.array([0.0, 0.8, 1.0])),
        {"fpr": "probarr", "tpr": "probarr"}))
  add(E("dpjax.metrics.tpr_at_fpr", metrics.tpr_at_fpr,
        dict(scores_K=sc, labels_K=labels_k, fpr=0.1),
        {"scores_K": "anyrankinf", "labels_K": "binaryany", "fpr": "prob"}))
  add(E("dpjax.metrics.accuracy", metrics.accuracy,
        dict(predictions_K=labels_k, labels_K=labels_k),
        {"predictions_K": "labels", "labels_K": "labels"}))
  add(E("dpjax.metrics.per_group_rates", metrics.per_group_rates,
        dict(predictions_K=labels_k, labels_K=labels_k, groups_K=np.arange(20) % 3), mk))
  add(E("dpjax.metrics.plot_roc_loglog", metrics.plot_roc_loglog,
        dict(ax=fb.Fresh(lambda: __import__("matplotlib.pyplot").pyplot.subplots()[1]),
             curves={"a": (np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.8, 1.0]))},
             min_rate=1e-3), {"ax": None, "curves": "object", "min_rate": "pos"}))

  # ---- models
  add(E("dpjax.models.check_model",
        lambda init, apply, l2, num_outputs, input_shape=None: models.check_model(
            models.Model(init, apply, l2, "custom", num_outputs, input_shape)),
        dict(init=lr.init, apply=lr.apply, l2=0.0, num_outputs=1, input_shape=(2, 2, 1)),
        {"init": "callable", "apply": "callable", "num_outputs": "count",
         "input_shape": "sizes"},
        alias={"init": "model.init", "apply": "model.apply", "l2": "model.l2",
               "num_outputs": "model.num_outputs", "input_shape": "model.input_shape"}))
  add(E("dpjax.models.check_model[model]", models.check_model, dict(model=lr)))
  add(E("dpjax.models.check_params", models.check_params, dict(model=lr, params=lr_params),
        {"params": "object"}))
  add(E("dpjax.models.logistic_regression", models.logistic_regression,
        dict(num_features=3, l2=0.0), {"num_features": "size"}))
  add(E("dpjax.models.mlp", models.mlp,
        dict(num_inputs=3, hidden=(4,), num_classes=2, l2=0.0),
        {"num_inputs": "size", "num_classes": "size", "hidden": "sizes"}))
  add(E("dpjax.models.avg_pool2", models.avg_pool2, dict(a_BxHxWxC=np.ones((1, 4, 4, 1))),
        {"a_BxHxWxC": "array"}))
  add(E("dpjax.models.cnn", models.cnn,
        dict(input_shape=(8, 8, 1), channels=(2, 2), num_classes=2, l2=0.0),
        {"input_shape": "sizes", "channels": "sizes", "num_classes": "size"}))
  add(E("dpjax.models.l2_penalty", models.l2_penalty, dict(model=lr, params=lr_params),
        {"params": None}))
  add(E("dpjax.models.per_example_loss", models.per_example_loss,
        dict(model=lr, params=lr_params, x_BxF=bx, y_B=by), data_kinds))
  add(E("dpjax.models.logistic_loss", models.logistic_loss,
        dict(z=np.array([0.5, -1.0]), y=np.array([1.0, 0.0])),
        {"z": "anyrank", "y": "binary"}))
  add(E("dpjax.models.loss_from_logits", models.loss_from_logits,
        dict(logits_BxK=np.zeros((4, 3)), y_B=np.array([0, 1, 2, 1])),
        {"logits_BxK": "array", "y_B": "labels"}))
  add(E("dpjax.models.body_features", models.body_features,
        dict(model=mlp_m, params=mlp_params, x_BxF=np.ones((2, 3))),
        {"params": "object", "x_BxF": "array"}))
  add(E("dpjax.models.split_head", models.split_head, dict(model=mlp_m, params=mlp_params),
        {"params": "object"}))
  add(E("dpjax.models.join_head", models.join_head,
        dict(model=mlp_m, params=mlp_params,
             head_params={"layers": [mlp_params["layers"][-1]]}),
        {"params": "object", "head_params": "object"}))
  add(E("dpjax.models.reset_head", models.reset_head,
        dict(model=mlp_m, params=mlp_params, key=jax.random.key(3)), {"params": "object"}))
  add(E("dpjax.models.frozen_body", models.frozen_body,
        dict(model=mlp_m, params=mlp_params), {"params": "object"}))
  add(E("dpjax.models.with_canary_leaf", models.with_canary_leaf,
        dict(model=mlp_m, size=3), {"size": "size"}))
  add(E("dpjax.models.cnn[groups]", models.cnn,
        dict(input_shape=(8, 8, 1), channels=(2, 4), num_classes=2, groups=2),
        {"input_shape": "sizes", "channels": "sizes", "num_classes": "size",
         "groups": "count"}))
  add(E("dpjax.models.group_norm", models.group_norm,
        dict(a_BxHxWxC=np.ones((1, 2, 2, 4)), gamma_C=np.ones(4), beta_C=np.zeros(4),
             groups=2), {"a_BxHxWxC": "array", "gamma_C": "array", "beta_C": "array",
                         "groups": "count"}))

  # ---- recipe (the parameter average is DpSgdConfig.ema_decay, fuzzed above)
  from dpjax import recipe  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({"dpjax.recipe.NoiseAtBatchSize": "result record of noise_for_batch_sizes",
                   "dpjax.fitting.NonPrivateResult": "result record of train_nonprivate",
                   "dpjax.models.predict": "traceable helper of correct_predictions (no "
                                           "checks; fuzzed through it)",
                   "dpjax.data.digits.DigitsSplit": "result record of load_with_validation"})
  add(E("dpjax.dpsgd.train_many[ema_decay]", dpsgd.train_many,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn,
             cfg=helpers.small_config(dataset_size=12, num_steps=2, ema_decay=0.5), model=lr,
             perf=quiet), tk))
  add(E("dpjax.recipe.shift_images", recipe.shift_images,
        dict(x_BxF=np.ones((2, 4)), shift=(1, -1), image_shape=(2, 2, 1)),
        {"x_BxF": "array", "shift": "object", "image_shape": "sizes"}))
  add(E("dpjax.recipe.augmented_clipping", recipe.augmented_clipping,
        dict(model=mlp_m, shifts=((0, 0), (1, 0)), image_shape=(3, 1, 1)),
        {"shifts": "object", "image_shape": "sizes"}))
  add(E("dpjax.recipe.noise_for_batch_sizes", recipe.noise_for_batch_sizes,
        dict(target_epsilon=2.0, delta=1e-5, epochs=2.0, dataset_size=100,
             batch_sizes=np.array([10.0, 50.0]), accountant="rdp"),
        {"epochs": "pos", "batch_sizes": "array"}))
  add(E("dpjax.recipe.center_on_public", recipe.center_on_public,
        dict(x_public_PxF=x_nf[:4], x_NxF=x_nf), {"x_public_PxF": "array", "x_NxF": "array"}))
  for n in ("accuracy", "correct_predictions"):
    add(E(f"dpjax.models.{n}", getattr(models, n),
          dict(model=mlp_m, params_M=jax.tree.map(lambda v: v[None], mlp_params),
               x_NxF=x_nf, y_N=y_int), {"params_M": None, "x_NxF": "array", "y_N": "labels"}))
  add(E("dpjax.fitting.train_nonprivate", fitting.train_nonprivate,
        dict(key=_key, x_NxF=x_nf, y_N=y_int, x_val_NxF=x_nf[:4], y_val_N=y_int[:4],
             model=mlp_m, optimizer=fb.Fresh(_sgd), batch_size=4, num_epochs=2,
             num_models=2),
        {"x_NxF": "array", "y_N": "labels", "x_val_NxF": "array", "y_val_N": "labels",
         "optimizer": "object"}, mismatch=False))
  add(E("dpjax.data.digits.load_with_validation", digits.load_with_validation,
        dict(key=_key, test_fraction=0.25, validation_size=100),
        {"validation_size": "count"}))

  # ---- flax_model
  from dpjax import flax_model  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({"dpjax.flax_model.is_flax_module": (
      "a predicate: every object is a valid input (False for anything but a Flax module)")})
  add(E("dpjax.flax_model.from_flax", flax_model.from_flax,
        dict(module=nn.Dense(2), input_shape=(3,), num_outputs=2, l2=0.0),
        {"module": "object", "input_shape": "sizes", "num_outputs": "count"}))
  add(E("dpjax.flax_model.ghost_fallback_reason", flax_model.ghost_fallback_reason,
        dict(model=flax_model.from_flax(nn.Dense(2), (3,)))))

  # ---- parallel
  add(E("dpjax.parallel.model_mesh", parallel.model_mesh, dict(devices=jax.devices()),
        {"devices": "object"}))
  add(E("dpjax.parallel.model_sharding", parallel.model_sharding,
        dict(mesh=parallel.model_mesh()), {"mesh": "object"}))
  add(E("dpjax.parallel.train_many_sharded", parallel.train_many_sharded,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, cfg=cfg, model=lr,
             gather=True, perf=dpsgd.PerformanceFlags(progress=False)),
        dict(tk, gather="object")))
  add(E("dpjax.parallel.batch_mesh", parallel.batch_mesh, dict(devices=jax.devices()[:1]),
        {"devices": "object"}))
  add(E("dpjax.parallel.train_batch_sharded", parallel.train_batch_sharded,
        dict(key=_key, x_NxF=x_nf, y_N=y_n, keep_MxN=keep_mn, cfg=cfg, model=lr,
             devices=jax.devices()[:1], perf=dpsgd.PerformanceFlags(progress=False)),
        dict(tk, devices="object")))
  add(E("dpjax.parallel.process_models", parallel.process_models, dict(num_models=3)))
  add(E("dpjax.parallel.gather_models", parallel.gather_models,
        dict(tree={"w": np.zeros((3, 2), np.float32)}, num_models=3), {"tree": "object"}))

  # ---- pate
  preds = np.array([[0, 1], [0, 2], [1, 2]])
  add(E("dpjax.pate.vote_histogram", pate.vote_histogram,
        dict(teacher_preds_MxQ=preds, num_classes=3),
        {"teacher_preds_MxQ": "labels", "num_classes": "size"}))
  vk = {"votes_QxC": "array", "votes_C": "array", "orders": "array"}
  add(E("dpjax.pate.lnmax", pate.lnmax, dict(key=_key, votes_QxC=votes_qc, laplace_scale=1.0),
        vk))
  add(E("dpjax.pate.gnmax", pate.gnmax, dict(key=_key, votes_QxC=votes_qc, sigma=1.0), vk))
  add(E("dpjax.pate.confident_gnmax", pate.confident_gnmax,
        dict(key=_key, votes_QxC=votes_qc, threshold=2.0, sigma_threshold=1.0, sigma=1.0),
        vk))
  add(E("dpjax.pate.gnmax_rdp_data_independent", pate.gnmax_rdp_data_independent,
        dict(sigma=1.0, orders=orders), vk))
  add(E("dpjax.pate.check_votes", pate.check_votes, dict(votes=votes_qc, integer=True),
        {"votes": "array"}))
  add(E("dpjax.pate.check_threshold", pate.check_threshold,
        dict(threshold=2.0, sigma_threshold=1.0)))
  add(E("dpjax.pate.threshold_rdp_data_independent", pate.threshold_rdp_data_independent,
        dict(sigma_threshold=1.0, orders=orders), vk))
  add(E("dpjax.pate.lnmax_epsilon", pate.lnmax_epsilon, dict(laplace_scale=1.0)))
  add(E("dpjax.pate.lnmax_rdp_data_independent", pate.lnmax_rdp_data_independent,
        dict(laplace_scale=1.0, orders=orders), vk))
  add(E("dpjax.pate.gnmax_log_q", pate.gnmax_log_q, dict(votes_C=votes_c, sigma=1.0), vk,
        exact={"sigma": {"subnormal": -np.inf, "1e-300": -np.inf}}))   # log of q = 0
  add(E("dpjax.pate.log1mexp", pate.log1mexp, dict(x=np.array([-2.0, -0.1])),
        {"x": "anyrankinf"}, inf_ok=True))   # -inf at x = 0: log(1 - 1), exact
  add(E("dpjax.pate.lnmax_log_q", pate.lnmax_log_q, dict(votes_C=votes_c, laplace_scale=1.0),
        vk))
  add(E("dpjax.pate.gaussian_rdp_data_dependent", pate.gaussian_rdp_data_dependent,
        dict(log_q=-5.0, sigma=1.0, orders=orders), dict(vk, log_q="realinf")))   # -inf: q = 0
  add(E("dpjax.pate.gnmax_rdp_data_dependent", pate.gnmax_rdp_data_dependent,
        dict(votes_C=votes_c, sigma=1.0, orders=orders), vk))
  add(E("dpjax.pate.threshold_log_pr_answered", pate.threshold_log_pr_answered,
        dict(votes_C=votes_c, threshold=5.0, sigma_threshold=1.0), vk))
  add(E("dpjax.pate.threshold_rdp_data_dependent", pate.threshold_rdp_data_dependent,
        dict(votes_C=votes_c, threshold=5.0, sigma_threshold=1.0, orders=orders), vk))
  add(E("dpjax.pate.lnmax_rdp_data_dependent", pate.lnmax_rdp_data_dependent,
        dict(votes_C=votes_c, laplace_scale=1.0, orders=orders), vk))
  add(E("dpjax.pate.answer_event", pate.answer_event, dict(sigma=1.0, aggregator="lnmax")))
  add(E("dpjax.pate.threshold_event", pate.threshold_event, dict(sigma_threshold=1.0)))
  add(E("dpjax.pate.aggregation_event", pate.aggregation_event,
        dict(num_queries=5, num_answered=2, sigma=1.0, sigma_threshold=2.0, aggregator="gnmax"),
        {"num_queries": "count", "num_answered": "count"}))
  add(E("dpjax.pate.pate_rdp", pate.pate_rdp,
        dict(votes_QxC=votes_qc, answered_Q=np.array([True, False]), sigma=1.0,
             orders=orders, threshold=2.0, sigma_threshold=1.0, aggregator="gnmax"),
        dict(vk, answered_Q="binary")))
  add(E("dpjax.pate.pate_rdp_grouped", pate.pate_rdp_grouped,
        dict(votes_QxC=votes_qc, answered_Q=np.array([True, False]), sigma=1.0,
             orders=orders, threshold=2.0, sigma_threshold=1.0, cache={}),
        dict(vk, answered_Q="binary", cache="object")))
  add(E("dpjax.pate.confident_gnmax_rdp", pate.confident_gnmax_rdp,
        dict(votes_QxC=votes_qc, threshold=2.0, sigma_threshold=1.0, sigma=1.0,
             orders=orders), vk, inf_ok=True))   # inf: a noiseless check between votes (exact)
  add(E("dpjax.pate.epsilon", pate.epsilon,
        dict(orders=orders, rdp_values=rdp_vals, delta=1e-5),
        {"orders": "array", "rdp_values": "arrayinf"}))
  add(E("dpjax.pate.partition", pate.partition,
        dict(key=_key, num_records=12, num_teachers=3),
        {"num_records": "size", "num_teachers": "size"}))
  pk = dict(tk, y_N="labels", num_steps="count", pad_to="count")
  add(E("dpjax.pate.fit_non_private", pate.fit_non_private,
        dict(key=_key, x_NxF=x_nf, y_N=y_int, keep_MxN=keep_mn, model=lr, num_steps=2,
             learning_rate=0.1, pad_to=8), pk))
  add(E("dpjax.pate.train_teachers", pate.train_teachers,
        dict(key=_key, x_NxF=x_nf, y_N=y_int, num_teachers=2, model=lr, num_steps=2,
             learning_rate=0.1), dict(pk, num_teachers="size")))
  add(E("dpjax.pate.fit_students", pate.fit_students,
        dict(key=_key, x_QxF=x_nf, labels_GxQ=np.stack([y_int, y_int]),
             answered_GxQ=np.stack([keep_mn[0], keep_mn[0]]), model=lr, num_steps=2,
             learning_rate=0.1),
        {"x_QxF": "array", "labels_GxQ": "labels", "answered_GxQ": "binary",
         "num_steps": "count"}))
  teach_params = jax.tree.map(lambda a: jnp.stack([a, a]), lr_params)
  add(E("dpjax.pate.teacher_votes", pate.teacher_votes,
        dict(model=lr, params_M=teach_params, x_QxF=x_nf[:3], num_classes=2),
        {"params_M": None, "x_QxF": "array", "num_classes": "size"}))

  # ---- pate_release
  from dpjax import pate_release  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({"dpjax.pate_release.PateRelease": "result record of pate_release.release"})
  rel_votes = np.array([[5.0, 1.0, 0.0], [2.0, 3.0, 1.0]])   # 6 teachers
  rel_k = {"votes_QxC": "array", "order": "pos", "beta": "nonneg", "answered_Q": "binary",
           "orders": "array", "failure_prob": "prob", "num_stds": "nonneg",
           "params": "object", "ls_D": "array"}
  add(E("dpjax.pate_release.local_sensitivity_gnmax", pate_release.local_sensitivity_gnmax,
        dict(votes_QxC=rel_votes, sigma=1.0, order=3.0), rel_k))
  add(E("dpjax.pate_release.local_sensitivity_threshold",
        pate_release.local_sensitivity_threshold,
        dict(votes_QxC=rel_votes, threshold=4.0, sigma_threshold=1.0, order=3.0), rel_k))
  add(E("dpjax.pate_release.smooth_sensitivity", pate_release.smooth_sensitivity,
        dict(ls_D=np.array([0.1, 0.2, 0.2]), beta=0.1), rel_k))
  add(E("dpjax.pate_release.gnss_rdp", pate_release.gnss_rdp,
        dict(beta=0.01, sigma_ss=2.0, order=5.0), rel_k))
  add(E("dpjax.pate_release.ReleaseParams", pate_release.ReleaseParams,
        dict(order=5.0, beta=0.01, sigma_ss=2.0, num_stds=2.0), rel_k))
  add(E("dpjax.pate_release.plan_release", pate_release.plan_release,
        dict(votes_QxC=rel_votes, answered_Q=np.array([True, False]), sigma=1.0, delta=1e-5,
             threshold=4.0, sigma_threshold=1.0, orders=np.array([2.0, 4.0]),
             failure_prob=0.01), rel_k))
  add(E("dpjax.pate_release.release", pate_release.release,
        dict(key=_key, votes_QxC=rel_votes, answered_Q=np.array([True, False]), sigma=1.0,
             params=pate_release.ReleaseParams(order=5.0, beta=0.01, sigma_ss=2.0,
                                               num_stds=2.0),
             delta=1e-5, threshold=4.0, sigma_threshold=1.0), rel_k))

  # ---- recommender and its ratings world
  from dpjax import recommender  # pylint: disable=g-import-not-at-top
  from dpjax.data import ratings  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  EXCLUDED.update({"dpjax.data.ratings.Ratings": "result record of ratings.sample",
                   "dpjax.recommender.PrivateStatistics": "result record of private_statistics"})
  rt_u = np.array([0, 0, 1, 2, 2, 2])
  rt_i = np.array([0, 1, 1, 0, 1, 2])
  rt_r = np.array([5.0, 3.0, 4.0, 1.0, 2.0, 5.0])
  ids = {"user_R": "labels", "item_R": "labels", "rating_R": "array"}
  add(E("dpjax.data.ratings.sample", ratings.sample,
        dict(key=_key, num_users=6, num_items=4, rank=2, mean_ratings_per_user=2.0,
             activity_spread=0.5, popularity_exponent=1.0, global_mean=3.5,
             user_bias_std=0.3, item_bias_std=0.3, interaction_std=0.5, noise_std=0.5,
             test_fraction=0.2),
        {"rank": "count", "mean_ratings_per_user": "pos", "activity_spread": "nonneg",
         "popularity_exponent": "nonneg", "global_mean": "real", "user_bias_std": "nonneg",
         "item_bias_std": "nonneg", "interaction_std": "nonneg"}))
  add(E("dpjax.data.ratings.check_ratings", ratings.check_ratings,
        dict(user_R=rt_u, item_R=rt_i, rating_R=rt_r, num_users=3, num_items=3, lower=1.0,
             upper=5.0), ids))
  rk = {"privacy_unit": "choice", "clamp": "pos"}
  add(E("dpjax.recommender.sensitivities", recommender.sensitivities,
        dict(privacy_unit="user", lower=1.0, upper=5.0, clamp=1.0, max_ratings_per_user=4),
        dict(rk, max_ratings_per_user="count")))
  add(E("dpjax.recommender.global_statistics", recommender.global_statistics,
        dict(rating_R=rt_r, lower=1.0, upper=5.0), ids))
  add(E("dpjax.recommender.item_statistics", recommender.item_statistics,
        dict(item_R=rt_i, rating_R=rt_r, num_items=3, lower=1.0, upper=5.0), ids))
  add(E("dpjax.recommender.covariance_statistics", recommender.covariance_statistics,
        dict(user_R=rt_u, item_R=rt_i, residual_R=rt_r - 3.0, num_users=3, num_items=3,
             clamp=1.0), dict(ids, residual_R="array", clamp="pos")))
  add(E("dpjax.recommender.truncate_users", recommender.truncate_users,
        dict(key=_key, user_R=rt_u, item_R=rt_i, num_users=3, num_items=3,
             max_ratings_per_user=2), dict(ids, max_ratings_per_user="count")))
  pk_rec = dict(ids, **rk, split="array", beta_m="nonneg", beta_p="nonneg",
                max_ratings_per_user=None, epsilon="epsinf")   # inf: the exact statistics
  rec_call = dict(key=_key, user_R=rt_u, item_R=rt_i, rating_R=rt_r, num_users=3,
                  num_items=3, epsilon=1.0, privacy_unit="rating",
                  split=recommender.DEFAULT_SPLIT, lower=1.0, upper=5.0, clamp=1.0,
                  beta_m=5.0, beta_p=5.0)
  add(E("dpjax.recommender.private_statistics", recommender.private_statistics, rec_call,
        pk_rec, inf_ok=True))   # epsilon inf: the exact release, its epsilons inf
  add(E("dpjax.recommender.private_statistics[user]", recommender.private_statistics,
        dict(rec_call, privacy_unit="user", max_ratings_per_user=2),
        dict(pk_rec, max_ratings_per_user="count"), inf_ok=True))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    rec_stats = recommender.private_statistics(**dict(rec_call, key=jax.random.key(0)))
  add(E("dpjax.recommender.predict", recommender.predict,
        dict(stats=rec_stats, user_R=rt_u, item_R=rt_i, rating_R=rt_r,
             query_user_Q=np.array([0, 1]), query_item_Q=np.array([2, 0]), rank=2,
             beta_u=1.0, ridge=0.5),
        dict(ids, stats="object", query_user_Q="labels", query_item_Q="labels",
             rank="count", beta_u="nonneg", ridge="pos")))
  scales = dict.fromkeys(recommender.STATISTICS, 2.0)
  add(E("dpjax.recommender.epsilon_of_release", recommender.epsilon_of_release,
        dict(noise_scales=scales, sensitivities_by_statistic=scales),
        {"noise_scales": "object", "sensitivities_by_statistic": "object"}))
  add(E("dpjax.recommender.rmse", recommender.rmse,
        dict(predictions_Q=np.array([1.0, 2.0]), targets_Q=np.array([1.5, 2.0]))))

  # ---- privatizer
  add(E("dpjax.privatizer.gaussian_noise", privatizer.gaussian_noise,
        dict(key=_key, count=jnp.zeros((), jnp.int32), leaves=[np.zeros(3)], stddev=1.0),
        {"count": None, "leaves": None, "stddev": "nonneg"}))
  add(E("dpjax.privatizer.gaussian_privatizer", privatizer.gaussian_privatizer,
        dict(stddev=1.0, key=_key), {"stddev": "nonneg"}))
  add(E("dpjax.privatizer.dp_aggregate", privatizer.dp_aggregate,
        dict(noise_stddev=1.0, expected_batch_size=3.0, key=_key),
        {"noise_stddev": "nonneg"}))
  from dpjax import matrix_factorization as mf_  # pylint: disable=g-import-not-at-top
  add(E("dpjax.privatizer.correlated_privatizer", privatizer.correlated_privatizer,
        dict(stream=mf_.toeplitz_stream([1.0, 0.5], 4), stddev=1.0, key=_key),
        {"stream": "object", "stddev": "nonneg"}))
  add(E("dpjax.privatizer.CorrelatedNoisePrivatizer", privatizer.CorrelatedNoisePrivatizer,
        dict(stream=mf_.tree_stream(4)), {"stream": "object"}))
  add(E("dpjax.privatizer.check_privatizer", privatizer.check_privatizer,
        dict(privatizer=privatizer.GaussianPrivatizer()), {"privatizer": "object"}))

  # ---- matrix_factorization
  from dpjax import matrix_factorization as mfz  # pylint: disable=g-import-not-at-top
  tri = np.tril(np.ones((4, 4))) + np.eye(4)
  add(E("dpjax.matrix_factorization.check_strategy", mfz.check_strategy,
        dict(strategy_TxT=tri), {"strategy_TxT": "array"}))
  add(E("dpjax.matrix_factorization.banded_toeplitz", mfz.banded_toeplitz,
        dict(coefs=np.array([1.0, 0.5]), num_steps=4), {"coefs": "array"}))
  for n in ("tree_noise_weights", "tree_aggregation", "tree_stream"):
    add(E(f"dpjax.matrix_factorization.{n}", getattr(mfz, n),
          dict(num_steps=5, honaker=True), {"honaker": "flag"}))
  add(E("dpjax.matrix_factorization.toeplitz_stream", mfz.toeplitz_stream,
        dict(coefs=np.array([1.0, 0.5]), num_steps=4), {"coefs": "array"}))
  add(E("dpjax.matrix_factorization.matrix_stream", mfz.matrix_stream,
        dict(strategy_TxT=tri), {"strategy_TxT": "array"}))
  add(E("dpjax.matrix_factorization.stream_noise", mfz.stream_noise,
        dict(stream=mfz.toeplitz_stream([1.0, 0.5], 4), key=_key, num_steps=3, shape=(2,)),
        {"stream": "object", "shape": "shape"}))
  add(E("dpjax.matrix_factorization.sensitivity", mfz.sensitivity,
        dict(strategy_TxT=tri, num_participations=2, min_separation=2),
        {"strategy_TxT": "array", "min_separation": "count"}))
  add(E("dpjax.matrix_factorization.cyclic_sensitivity", mfz.cyclic_sensitivity,
        dict(strategy_TxT=tri, steps_per_epoch=2),
        {"strategy_TxT": "array", "steps_per_epoch": "count"}))
  add(E("dpjax.matrix_factorization.num_bands", mfz.num_bands, dict(strategy_TxT=tri),
        {"strategy_TxT": "array"}))
  add(E("dpjax.matrix_factorization.amplified_event", mfz.amplified_event,
        dict(strategy_TxT=np.eye(3), noise_multiplier=1.0, bin_prob=0.5, cycle_length=1),
        {"strategy_TxT": "array", "cycle_length": "count"}))
  add(E("dpjax.matrix_factorization.amplified_epsilon", mfz.amplified_epsilon,
        dict(strategy_TxT=np.eye(2), noise_multiplier=2.0, bin_prob=0.5, cycle_length=1,
             delta=1e-3, value_discretization=1e-2),
        {"strategy_TxT": "array", "cycle_length": "count"}))
  add(E("dpjax.matrix_factorization.toeplitz_sensitivity", mfz.toeplitz_sensitivity,
        dict(coefs=np.array([1.0, 0.5]), num_steps=6, num_participations=2, min_separation=2),
        {"coefs": "array", "min_separation": "count"}))
  add(E("dpjax.matrix_factorization.prefix_workload", mfz.prefix_workload, dict(num_steps=3)))
  add(E("dpjax.matrix_factorization.momentum_workload", mfz.momentum_workload,
        dict(num_steps=3, momentum=0.5, learning_rates=np.array([1.0, 0.5, 0.5])),
        {"momentum": "prob", "learning_rates": "array"}))
  add(E("dpjax.matrix_factorization.expected_error", mfz.expected_error,
        dict(strategy_TxT=tri, workload_TxT=np.tril(np.ones((4, 4))), num_participations=2,
             min_separation=2),
        {"strategy_TxT": "array", "workload_TxT": "array", "min_separation": "count"}))
  add(E("dpjax.matrix_factorization.sqrt_toeplitz_coefs", mfz.sqrt_toeplitz_coefs,
        dict(num_bands=3)))
  add(E("dpjax.matrix_factorization.optimize_toeplitz", mfz.optimize_toeplitz,
        dict(num_steps=6, num_bands=2, workload_TxT=np.tril(np.ones((6, 6))),
             num_iterations=3), {"workload_TxT": "array"}))
  add(E("dpjax.matrix_factorization.gaussian_event", mfz.gaussian_event,
        dict(noise_multiplier=2.0, sensitivity_value=1.5), {"sensitivity_value": "pos"}))
  add(E("dpjax.matrix_factorization.epsilon", mfz.epsilon,
        dict(noise_multiplier=2.0, sensitivity_value=1.5, delta=1e-5),
        {"sensitivity_value": "pos"}))

  # ---- prng
  u32 = lambda v: jnp.asarray(v, jnp.uint32)
  add(E("dpjax.prng.threefry2x32", prng.threefry2x32,
        dict(k0=u32(1), k1=u32(2), x0=u32([1, 2]), x1=u32([3, 4])),
        {"k0": None, "k1": None, "x0": None, "x1": None}))
  # fold_in mirrors jax.random.fold_in bit for bit, including its OverflowError for
  # data outside [0, 2^32) (prng_test); its only other argument is the key.
  add(E("dpjax.prng.fold_in", prng.fold_in, dict(key=_key, data=3), {"data": None}))
  add(E("dpjax.prng.split", prng.split, dict(key=_key, num=2), {"num": "size"}))
  add(E("dpjax.prng.random_bits", prng.random_bits, dict(key=_key, num_words=4),
        {"num_words": "size"}))
  add(E("dpjax.prng.standard_normal", prng.standard_normal, dict(key=_key, shape=(3,)),
        {"shape": "shape"}))
  add(E("dpjax.prng.standard_normals", prng.standard_normals,
        dict(keys=fb.Fresh(lambda: jax.random.split(jax.random.key(0), 2)),
             shapes=[(3,), (2, 2)]), {"keys": None, "shapes": None}))
  add(E("dpjax.prng.bernoulli_threshold", prng.bernoulli_threshold,
        dict(sampling_prob=0.3, bit_width=32), {"bit_width": "choice"}))
  add(E("dpjax.prng.poisson_mask", prng.poisson_mask,
        dict(key=_key, sampling_prob=0.3, num_records=8), {"num_records": "size"}))
  add(E("dpjax.prng.mask_bit_width", prng.mask_bit_width, dict(sampling_prob=0.3)))

  # ---- sampling
  add(E("dpjax.sampling.PoissonSampler", sampling.PoissonSampler, dict(sampling_prob=0.3)))
  add(E("dpjax.sampling.ShuffleSampler", sampling.ShuffleSampler,
        dict(batch_size=3, steps_per_epoch=4, sampling_prob=0.25)))
  add(E("dpjax.sampling.CyclicSampler", sampling.CyclicSampler,
        dict(batch_size=3, steps_per_epoch=4, sampling_prob=0.25),
        {"batch_size": "count", "steps_per_epoch": "count"}))
  add(E("dpjax.sampling.CyclicPoissonSampler", sampling.CyclicPoissonSampler,
        dict(bin_prob=0.5, cycle_length=3), {"cycle_length": "count"}))
  add(E("dpjax.sampling.UserPoissonSampler", sampling.UserPoissonSampler,
        dict(sampling_prob=0.3, user_ids_N=np.array([0, 0, 1, 2]), num_users=3),
        {"user_ids_N": "labels"}))
  add(E("dpjax.sampling.check_user_ids", sampling.check_user_ids,
        dict(user_ids_N=np.array([0, 0, 1, 2]), num_users=3, num_records=4),
        {"user_ids_N": "labels", "name": None, "num_records": "count"}))
  add(E("dpjax.sampling.default_batch_capacity", sampling.default_batch_capacity,
        dict(num_records=100, sampling_prob=0.3, num_models=2),
        {"num_records": "count", "num_models": "count"}))
  add(E("dpjax.sampling.padded_batch", sampling.padded_batch,
        dict(mask_N=np.array([0, 1, 1, 0], bool), capacity=2, chunk=1),
        {"mask_N": "binary", "capacity": "count", "chunk": "count"}))
  add(E("dpjax.sampling.check_sampler", sampling.check_sampler,
        dict(sampler=sampling.PoissonSampler(0.3), sampling_prob=0.3), {"sampler": "object"}))
  add(E("dpjax.sampling.check_sampler", sampling.check_sampler,
        dict(sampler=sampling.TruncatedPoissonSampler(0.3, 4), sampling_prob=0.3,
             max_batch_size=4), {"sampler": "object", "max_batch_size": "count"}))
  add(E("dpjax.sampling.TruncatedPoissonSampler", sampling.TruncatedPoissonSampler,
        dict(sampling_prob=0.3, max_batch_size=4), {"max_batch_size": "count"}))
  add(E("dpjax.sampling.truncate_mask", sampling.truncate_mask,
        dict(key=_key, mask_N=np.array([1, 1, 0, 1, 1], bool), max_batch_size=2),
        {"mask_N": "binary", "max_batch_size": "count"}))
  add(E("dpjax.sampling.selection_tv_bound", sampling.selection_tv_bound,
        dict(dataset_size=100, sampling_prob=0.3, num_steps=10)))

  # ---- tradeoff
  add(E("dpjax.tradeoff.dp_tpr_bound", tradeoff.dp_tpr_bound,
        dict(fpr_F=fpr, epsilon=1.0, delta=1e-5), {"fpr_F": "probany", "epsilon": "epsinf"}))
  add(E("dpjax.tradeoff.advantage_bound", tradeoff.advantage_bound,
        dict(epsilon=1.0, delta=1e-5)))
  add(E("dpjax.tradeoff.posterior_bound", tradeoff.posterior_bound,
        dict(prior=0.3, epsilon=1.0)))
  for n in ("gaussian_tpr", "gaussian_fnr"):
    add(E(f"dpjax.tradeoff.{n}", getattr(tradeoff, n), dict(fpr_F=fpr, mu=1.0),
          {"fpr_F": "probany", "mu": "nonneg"}))
  add(E("dpjax.tradeoff.gaussian_mu", tradeoff.gaussian_mu,
        dict(fpr_F=fpr, fnr_F=np.array([0.9, 0.6, 0.2])),
        {"fpr_F": "probany", "fnr_F": "probany"}))
  add(E("dpjax.tradeoff.gaussian_advantage", tradeoff.gaussian_advantage, dict(mu=1.0),
        {"mu": "nonneg"}))
  for n in ("randomized_response_tpr", "laplace_tpr"):
    add(E(f"dpjax.tradeoff.{n}", getattr(tradeoff, n), dict(fpr_F=fpr, epsilon=1.0),
          {"fpr_F": "probany"}))
  for n in ("randomized_response_advantage", "laplace_advantage"):
    add(E(f"dpjax.tradeoff.{n}", getattr(tradeoff, n), dict(epsilon=1.0)))
  add(E("dpjax.tradeoff.pld_tpr_bound", tradeoff.pld_tpr_bound,
        dict(privacy_loss=pld.gaussian_pld(1.0, value_discretization=1e-2), fpr_F=fpr,
             max_epsilon=5.0), {"privacy_loss": "object", "fpr_F": "probarr"}))
  add(E("dpjax.tradeoff.likelihood_ratio_roc", tradeoff.likelihood_ratio_roc,
        dict(values_J=np.array([-1.0, 0.0, 1.0]), pmf_in_J=np.array([0.2, 0.3, 0.5]),
             pmf_out_J=np.array([0.5, 0.3, 0.2])),
        {"values_J": "array", "pmf_in_J": "probarr", "pmf_out_J": "probarr"}))
  # ---- secure noise: integer_noise, clipping.grid, accounting.noise_support,
  # attacks.floating_point
  from dpjax import integer_noise  # pylint: disable=g-import-not-at-top
  from dpjax.accounting import noise_support  # pylint: disable=g-import-not-at-top
  from dpjax.attacks import floating_point  # pylint: disable=g-import-not-at-top
  from dpjax.clipping import grid as cgrid  # pylint: disable=g-import-not-at-top
  add(E("dpjax.integer_noise.rounded_gaussian", integer_noise.rounded_gaussian,
        dict(sigma_grid=3.0), {"sigma_grid": "pos"}))
  add(E("dpjax.integer_noise.rounded_laplace", integer_noise.rounded_laplace,
        dict(b_grid=2.0), {"b_grid": "pos"}))
  noise3 = integer_noise.rounded_gaussian(3.0)
  add(E("dpjax.integer_noise.sample", integer_noise.sample,
        dict(key=_key, noise=noise3, shape=(4,)), {"noise": "object", "shape": "shape"}))
  add(E("dpjax.integer_noise.table_pmf", integer_noise.table_pmf, dict(noise=noise3),
        {"noise": "object"}))
  add(E("dpjax.integer_noise.check_grid", integer_noise.check_grid,
        dict(grid=0.25, name="grid"), {"grid": "pos", "name": None}))
  add(E("dpjax.integer_noise.pow2_floor", integer_noise.pow2_floor, dict(x=0.3),
        {"x": "pos"}))
  add(E("dpjax.accounting.noise_support.sampler_delta", noise_support.sampler_delta,
        dict(epsilon=1.0, num_draws=100, tail_mass=1e-20),
        {"epsilon": "epsinf", "num_draws": "count", "tail_mass": "prob"}))   # delta(inf) = 1
  add(E("dpjax.accounting.noise_support.max_epsilon_for_sampler_delta",
        noise_support.max_epsilon_for_sampler_delta,
        dict(delta=1e-5, num_draws=100, rtol=1e-3, tail_mass=1e-30),
        {"num_draws": "count", "tail_mass": "prob"},
        exact={"tail_mass": {"+0": np.inf, "-0": np.inf}}))   # an exact sampler: no limit
  atoms = floating_point.naive_laplace_atoms()[:4]
  add(E("dpjax.attacks.floating_point.naive_laplace_noise",
        floating_point.naive_laplace_noise,
        dict(bits=jnp.array([1, 2, 3], jnp.uint32)), {"bits": None}))
  add(E("dpjax.attacks.floating_point.naive_laplace_outputs",
        floating_point.naive_laplace_outputs, dict(value=0.3, scale=1.0),
        {"value": "real"}))
  add(E("dpjax.attacks.floating_point.laplace_reachable", floating_point.laplace_reachable,
        dict(outputs=np.float32(0.3) + atoms, value=0.3, scale=1.0),
        {"outputs": "elemwise", "value": "real"}))
  obs_t = np.zeros((3, 4), np.float32)   # no length-1 axis: a truncated one cannot broadcast
  add(E("dpjax.attacks.floating_point.gaussian_update_reachable",
        floating_point.gaussian_update_reachable,
        dict(observed=obs_t, sum_without=obs_t, noise_stddev=1.0, expected_batch_size=10.0),
        {"observed": "elemwise", "sum_without": "elemwise", "noise_stddev": "nonneg"}))
  add(E("dpjax.attacks.floating_point.lattice_canary_flags",
        floating_point.lattice_canary_flags,
        dict(observed_MxT=obs_t, sum_without_MxT=obs_t, noise_stddev=1.0,
             expected_batch_size=10.0),
        {"observed_MxT": "array", "sum_without_MxT": "array", "noise_stddev": "nonneg"}))
  add(E("dpjax.attacks.floating_point.grid_reachable", floating_point.grid_reachable,
        dict(observed=np.array([0.5, 1.0]), center_units=np.array([2.0, 4.0]), grid=0.25,
             max_abs=100, expected_batch_size=None),
        {"observed": "elemwise", "center_units": "elemwise", "max_abs": "count"}))
  add(E("dpjax.clipping.grid.GridClippingPath", cgrid.GridClippingPath,
        dict(fn=clipping.path_for(lr).fn, grid=0.25), {"fn": "callable", "grid": "pos"}))
  add(E("dpjax.clipping.grid.grid_sensitivity", cgrid.grid_sensitivity,
        dict(l2_clip_norm=1.0, grid=2.0 ** -10, num_params=16),
        {"l2_clip_norm": "pos", "grid": "pos", "num_params": "count"}))
  add(E("dpjax.clipping.grid.norm_threshold", cgrid.norm_threshold,
        dict(sensitivity_grid=100.0, num_params=16),
        {"sensitivity_grid": "pos", "num_params": "count"}))
  add(E("dpjax.clipping.grid.round_clipped", cgrid.round_clipped,
        dict(clipped={"w": np.ones((4, 3), np.float32) * 0.1}, grid=2.0 ** -4,
             l2_clip_norm=1.0), {"clipped": None, "grid": "pos"}))
  add(E("dpjax.clipping.grid.grid_clipped_sum", cgrid.grid_clipped_sum,
        dict(model=lr, grid=2.0 ** -4, params=lr_params, x_BxF=bx, y_B=by, weights_B=bw,
             l2_clip_norm=1.0), dict(data_kinds, grid="pos")))
  add(E("dpjax.clipping.grid.path", cgrid.path, dict(model=lr, grid=2.0 ** -4),
        {"grid": "pos"}))
  sq2 = jnp.array([1.0, 4.0])
  add(E("dpjax.clipping.sqnorm.safe_norm", sqnorm.safe_norm,
        dict(sq_B=sq2, max_abs_B=jnp.array([1.0, 2.0]), scaled_sq_fn=lambda f: sq2),
        {"sq_B": None, "max_abs_B": None, "scaled_sq_fn": "callable"}))
  add(E("dpjax.clipping.vmap.combine_norms", cvmap.combine_norms,
        dict(norms=[jnp.array([1.0, 2.0]), jnp.array([2.0, 1.0])]), {"norms": None}))
  add(E("dpjax.clipping.vmap.tree_norms", cvmap.tree_norms,
        dict(grads={"w": np.ones((4, 3), np.float32)}), {"grads": None}))
  add(E("dpjax.mechanisms.laplace_grid", mechanisms.laplace_grid,
        dict(epsilon=1.0, sensitivity=1.0)))
  add(E("dpjax.mechanisms.gaussian_grid", mechanisms.gaussian_grid,
        dict(sigma=1.0, sensitivity=1.0)))
  add(E("dpjax.privatizer.default_grid", privatizer.default_grid, dict(l2_clip_norm=1.0),
        {"l2_clip_norm": "pos"}))
  add(E("dpjax.privatizer.secure_gaussian_privatizer", privatizer.secure_gaussian_privatizer,
        dict(noise_multiplier=1.0, l2_clip_norm=1.0, grid=2.0 ** -10, key=_key),
        {"noise_multiplier": "nonneg", "l2_clip_norm": "pos", "grid": "pos"}))
  add(E("dpjax.privatizer.SecureGaussianPrivatizer", privatizer.SecureGaussianPrivatizer,
        dict(noise_multiplier=1.0, l2_clip_norm=1.0, grid=2.0 ** -10),
        {"noise_multiplier": "nonneg", "l2_clip_norm": "pos", "grid": "pos"}))
  add(E("dpjax.privatizer.secure_components", privatizer.secure_components,
        dict(noise_multiplier=1.0, l2_clip_norm=1.0, model=lr, grid=2.0 ** -10),
        {"noise_multiplier": "nonneg", "l2_clip_norm": "pos", "grid": "pos"}))
  add(E("dpjax.privatizer.check_matching_grid", privatizer.check_matching_grid,
        dict(path=cgrid.path(lr, 2.0 ** -10),
             privatizer=privatizer.SecureGaussianPrivatizer(1.0, 1.0, 2.0 ** -10)),
        {"path": "object", "privatizer": "object"}))
  del pos_kinds
  return t


WORKER_MEMORY_BYTES = 8 * 2**30
STARTUP_S = 600


def _selects(pattern: str, name: str) -> bool:
  """An entry is selected by a substring of its name, or by its exact name + "$"."""
  return name == pattern[:-1] if pattern.endswith("$") else pattern in name


def _worker(skip: int, selected, timeout_s: int, full: bool = False, start: str = ""):
  """Child process: runs the cases from index `skip` on, one JSON line per event.

  Its address space is capped (WORKER_MEMORY_BYTES), so a probe that allocates more
  fails in this process (an "oom" outcome) rather than starving the machine.
  """
  import resource  # pylint: disable=g-import-not-at-top
  resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
  index = 0
  started = not start
  for entry in entries():
    started = started or entry.name == start
    if not started or (selected and not any(_selects(x, entry.name) for x in selected)):
      continue
    cases = default_cases(entry, full)
    if index + len(cases) <= skip:
      index += len(cases)
      continue
    try:
      out = fb.call(entry, {}, 5 * timeout_s)    # the first call also compiles
      where = None if entry.inf_ok else fb.nonfinite(out)
      if where:
        raise ValueError(f"the baseline released NaN/inf ({where}): declare inf_ok")
    except Exception as e:  # pylint: disable=broad-except
      print(json.dumps({"baseline": entry.name, "error": f"{type(e).__name__}: {e}"}),
            flush=True)
      index += len(cases)
      continue
    for p, label, bad, expect in cases:
      if index >= skip:
        print(json.dumps({"begin": index, "entry": entry.name, "param": p, "label": label,
                          "expect": expect}), flush=True)
        outcome, detail = fb.run_case(entry, p, label, bad, expect, timeout_s)
        print(json.dumps({"index": index, "entry": entry.name, "param": p, "label": label,
                          "expect": expect, "outcome": outcome, "detail": detail}),
              flush=True)
      index += 1
    if not cases:
      print(json.dumps({"entry_done": entry.name}), flush=True)
  print(json.dumps({"done": index}), flush=True)


def run_battery(selected=None, timeout_s=60, full=False, log=None, start=""):
  """{entry name: [(param, label, outcome, detail, expect), ...]} and baseline failures.

  The cases run in a child process, so a probe that aborts the process (an allocation
  XLA cannot serve) is recorded as "crash" ("oom" when it was killed by the kernel),
  and one that hangs where SIGALRM cannot interrupt it (inside XLA) is killed after
  6 * timeout_s and recorded as "hang"; the run resumes after it. full: the whole
  sweep, else the default subset (`fuzz_battery.inputs`). selected: substrings of the
  entry names to run (an exact name ends with "$"); start: skip the entries before the
  one of that name; log: called with a line per failing case.
  """
  results, baseline_errors = collections.defaultdict(list), {}
  skip, deaths = 0, 0
  while True:
    cmd = [sys.executable, "-c",
           "import sys, json; sys.path.insert(0, sys.argv[1]); "
           "from tests import api_fuzz_test as t; "
           "t._worker(int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), "
           "sys.argv[5] == '1', sys.argv[6])",
           helpers.ROOT, str(skip), json.dumps(selected or []), str(timeout_s),
           "1" if full else "0", start]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=helpers.ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    stderr = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
    begun, finished, killed, last = None, False, False, None
    while True:
      try:
        # The baseline of an entry (which compiles) may take up to 5 * timeout_s; starting
        # the process (imports, the table) up to STARTUP_S more on a loaded machine.
        line = lines.get(timeout=6 * timeout_s + (STARTUP_S if last is None else 0))
      except queue.Empty:
        proc.kill()
        killed = True
        break
      if line is None:
        break
      if not line.startswith("{"):
        continue
      event = last = json.loads(line)
      if "baseline" in event:
        baseline_errors[event["baseline"]] = event["error"]
      elif "entry_done" in event:
        results.setdefault(event["entry_done"], [])
      elif "begin" in event:
        begun = event
      elif "index" in event:
        begun, deaths = None, 0
        if log and event["outcome"] not in fb.PASSING:
          log(f"{event['entry']}({event['param']}={event['label']}): {event['outcome']}: "
              f"{event['detail'][:160]}")
        results[event["entry"]].append((event["param"], event["label"], event["outcome"],
                                        event["detail"], event["expect"]))
      elif "done" in event:
        finished = True
    proc.wait()
    if finished:
      return dict(results), baseline_errors
    err = "".join(stderr).strip()[-300:]
    if begun is None and last is None and deaths < 2:   # died starting up: once more
      deaths += 1
      continue
    if begun is None:
      raise RuntimeError(f"fuzz worker died outside a case (exit status {proc.returncode}, "
                         f"last event {last}): {err}")
    if killed:
      outcome, detail = "hang", f"no answer within {6 * timeout_s} s (killed)"
    elif proc.returncode == -9 or any(w in err for w in ("bad_alloc", "Out of memory",
                                                           "RESOURCE_EXHAUSTED")):
      outcome, detail = "oom", f"process died (exit status {proc.returncode}): {err}"
    else:
      outcome, detail = "crash", f"process died (exit status {proc.returncode}): {err}"
    results[begun["entry"]].append((begun["param"], begun["label"], outcome, detail,
                                    begun["expect"]))
    skip = begun["begin"] + 1


def table(results):
  """Rows (module, entry points, inputs, passing: named error or finite value)."""
  per = collections.defaultdict(lambda: [0, 0, 0])
  for name, cases in results.items():
    module = name.rsplit(".", 1)[0].split("[")[0]
    while module.rsplit(".", 1)[-1][:1].isupper():   # Class.method -> module
      module = module.rsplit(".", 1)[0]
    row = per[module]
    row[0] += 1
    row[1] += len(cases)
    row[2] += sum(c[2] in fb.PASSING for c in cases)
  return sorted((m, *r) for m, r in per.items())


def format_table(rows):
  lines = ["| module | entry points | inputs | named error or finite value |",
           "|---|---:|---:|---:|"]
  tot = [0, 0, 0]
  for m, n, k, ok in rows:
    lines.append(f"| {m} | {n} | {k} | {ok} ({100.0 * ok / max(k, 1):.0f}%) |")
    tot = [tot[0] + n, tot[1] + k, tot[2] + ok]
  lines.append(f"| all | {tot[0]} | {tot[1]} | {tot[2]} ({100.0 * tot[2] / max(tot[1], 1):.1f}%) |")
  return "\n".join(lines)


def class_table(results):
  """Markdown: per outcome class, the number of cases (by expected outcome)."""
  counts = collections.Counter((c[2], c[4]) for cases in results.values() for c in cases)
  lines = ["| class | outside the domain | inside the domain | all |", "|---|---:|---:|---:|"]
  for cls in fb.PASSING + fb.FAILURE_CLASSES:
    a, b = counts[(cls, fb.NAMED)], counts[(cls, fb.EITHER)]
    lines.append(f"| {cls} | {a} | {b} | {a + b} |")
  total = sum(counts.values())
  lines.append(f"| all | {sum(v for (c, e), v in counts.items() if e == fb.NAMED)} | "
               f"{sum(v for (c, e), v in counts.items() if e == fb.EITHER)} | {total} |")
  return "\n".join(lines)


def failures(results):
  return [f"{name}({p}={label}): {outcome}: {detail}"
          for name, cases in results.items()
          for p, label, outcome, detail, _ in cases
          if outcome not in fb.PASSING and (name, p) not in KNOWN_GAPS]


class ApiFuzzTest(absltest.TestCase):

  def test_regressions_name_real_probes(self):
    by_name = {e.name: e for e in entries()}
    for (name, param), labels in REGRESSIONS.items():
      probes = {label for p, label, _, _ in fb.inputs(by_name[name], True) if p == param}
      self.assertLessEqual(set(labels), probes, f"{name}({param})")

  def test_every_public_entry_point_is_in_the_table_or_excluded(self):
    tried = {e.name.split("[")[0] for e in entries()}
    missing = [n for n in public_entry_points() if n not in tried and n not in EXCLUDED]
    self.assertEqual(missing, [], "public entry points without a baseline call")

  def test_train_many_under_jit_or_vmap_names_the_traced_argument(self):
    from dpjax import dpsgd, models  # pylint: disable=g-import-not-at-top
    x, y = helpers.binary_data(n=12, d=3)
    keep = np.ones((1, 12), bool)
    cfg = helpers.small_config(dataset_size=12, num_steps=2)
    model = models.logistic_regression(3)
    train = lambda k, xx: dpsgd.train_many(k, xx, y, keep, cfg, model,
                                           perf=dpsgd.PerformanceFlags(progress=False)).params
    key = jax.random.key(0)     # closed over: concrete, so only x_NxF is traced
    with self.assertRaisesRegex(TypeError, "x_NxF is a traced value.*called from Python"):
      jax.jit(lambda xx: train(key, xx))(x)
    with self.assertRaisesRegex(TypeError, "key is a traced value"):
      jax.vmap(lambda k: train(k, x))(jax.random.split(jax.random.key(0), 2))

  def _check(self, full):
    results, baseline_errors = run_battery(full=full)
    self.assertEqual(baseline_errors, {}, "a valid baseline call failed")
    print("\n" + format_table(table(results)) + "\n\n" + class_table(results))
    bad = failures(results)
    self.assertEqual(bad, [], f"{len(bad)} inputs neither rejected by name nor answered "
                     "with a finite value:\n" + "\n".join(bad))
    if full:   # a known gap that is closed must leave the list (so the list stays true)
      still_failing = {(name, c[0]) for name, cases in results.items()
                       for c in cases if c[2] not in fb.PASSING}
      self.assertEqual(sorted(set(KNOWN_GAPS) - still_failing), [],
                       "known gaps that are now closed: remove them from KNOWN_GAPS")

  def test_inputs_by_kind_are_named_or_answered(self):
    """The default subset: every parameter's core probes and two rotating extremes."""
    self._check(full=False)

  @pytest.mark.slow
  def test_every_probe_of_every_kind(self):
    """The whole sweep: every probe of every declared kind."""
    self._check(full=True)

if __name__ == "__main__":
  absltest.main()
