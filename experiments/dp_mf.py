"""DP-SGD vs DP-FTRL (tree) vs banded matrix factorization on the credit world and digits.

    .venv/bin/python -m experiments.dp_mf          # about 6.5 min of CPU (both worlds)

Two worlds, C = 1, delta = 1e-5, SGD on the noisy clipped sum divided by B, at several
epochs and eps = 1, 2, 4, 8: credit, logistic regression on the cubic features of the
`dpsgd` experiment (n = 500 private people, 56 parameters, B = 50); digits, an MLP 64 ->
--digits_hidden -> 10 on the 8x8 digits of `dpsgd_digits` (n = 1,148 private images
centred on the public validation mean, B = --digits_batch). Methods, each at sigma
calibrated to the same eps:

  DP-SGD         Poisson sampling at q = B / n, amplified, RDP (`DpSgdConfig.calibrate`);
  BandMF b       cyclic fixed batches (`sampling.CyclicSampler`: each record once per
                 epoch, k = epochs participations E = n / B steps apart), banded
                 Toeplitz noise with b bands optimised for prefix sums
                 (`matrix_factorization.optimize_toeplitz`); b = 1 is DP-SGD without
                 amplification. No amplification: the Gaussian mechanism with multiplier
                 sigma / sens, sens = `cyclic_sensitivity` (the engine states this eps);
  DP-FTRL tree   the same batches, tree-aggregation noise (online Honaker estimator).

For MF, sigma = sens * sigma_1(eps), sigma_1 the unit-sensitivity Gaussian multiplier
found by `accounting.smallest_noise` on `matrix_factorization.epsilon` (PLD). The
learning rate is chosen per (method, epochs, eps) on a PUBLIC validation sample (mean
accuracy over seeds); the test sample scores the chosen one. "prefix error" is the
strategy's expected squared error of the noisy prefix sums at that sigma,
sigma^2 ||W C^-1||_F^2 / T (W = prefix sums, C = I for DP-SGD; units C^2 per coordinate).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tqdm import tqdm

from dpjax import accounting, dpsgd, models, privatizer, recipe, sampling
from dpjax import matrix_factorization as mf
from dpjax.data import credit, digits
from experiments import _common, _plots

NAME = "dp_mf"
DELTA = 1e-5
BATCH = 50
N_PRIVATE = 500


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpMfExperimentConfig(_common.ExperimentConfig):
  """Settings of the comparison (defaults: about 2-3 CPU minutes)."""
  seeds: int = _common.option(4, "Training seeds per setting.", bounds=">=2")
  epsilons: tuple[float, ...] = _common.option((1.0, 2.0, 4.0, 8.0), "Target epsilons.",
                                               bounds=">0")
  epochs: tuple[int, ...] = _common.option((4, 16), "Epochs (passes over the data).",
                                           bounds=">=1")
  bands: tuple[int, ...] = _common.option((1, 4, 10), "BandMF bands b (b = 1: DP-SGD "
                                          "noise without amplification).", bounds=">=1")
  lrs: tuple[float, ...] = _common.option((0.5, 2.0), "Candidate learning rates "
                                          "(chosen on the public validation sample).",
                                          bounds=">0")
  validation_size: int = _common.option(2000, "People in the public validation sample.",
                                        bounds=">=1")
  test_size: int = _common.option(20_000, "People in the test sample.", bounds=">=1")
  optimizer_iterations: int = _common.option(100, "L-BFGS iterations of optimize_toeplitz.",
                                             bounds=">=0")
  worlds: tuple[str, ...] = _common.option(("credit", "digits"), "Worlds compared.",
                                           choices=("credit", "digits"))
  digits_epochs: tuple[int, ...] = _common.option((4, 16), "Epochs on digits.", bounds=">=1")
  digits_lrs: tuple[float, ...] = _common.option((0.5, 2.0), "Candidate learning rates on "
                                                 "digits.", bounds=">0")
  digits_hidden: int = _common.option(64, "Hidden width of the digits MLP.", bounds=">=1")
  digits_batch: int = _common.option(128, "Cyclic batch size B on digits (Poisson DP-SGD: "
                                     "q = B / n).", bounds=">=1")


class _World(NamedTuple):
  """One comparison: data {"train", "val", "test": (x, y)}, model, B, epochs, lrs, and
  accuracy(params_M, x, y) -> float64[M]."""
  name: str
  data: dict
  model: models.Model
  batch: int
  epochs: tuple
  lrs: tuple
  accuracy: Callable


def _data(key, validation_size, test_size):
  k_pub, k_train, k_val, k_test = jax.random.split(key, 4)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 20_000).x_NxF)
  out = {}
  for name, k, size in (("train", k_train, N_PRIVATE), ("val", k_val, validation_size),
                        ("test", k_test, test_size)):
    d = credit.sample(k, size)
    out[name] = (credit.cubic_features(d.x_NxF, scaler), d.y_N)
  return out


def _accuracy(w_MxD, x, y):
  return models.accuracy(models.logistic_regression(x.shape[1]), {"w": w_MxD},
                         np.asarray(x, np.float64), np.asarray(y, np.float64), float64=True)


def _credit_world(key, cfg):
  data = _data(key, cfg.validation_size, cfg.test_size)
  return _World("credit", data, models.logistic_regression(data["train"][0].shape[1]), BATCH,
                cfg.epochs, cfg.lrs, lambda p, x, y: _accuracy(p["w"], x, y))


def _digits_world(key, cfg):
  d = digits.load_with_validation(key, 0.25, 200)
  c = lambda a: recipe.center_on_public(d.x_val_NxF, a)
  data = {"train": (c(d.x_train_NxF), d.y_train_N), "val": (c(d.x_val_NxF), d.y_val_N),
          "test": (c(d.x_test_NxF), d.y_test_N)}
  model = models.mlp(digits.NUM_FEATURES, (cfg.digits_hidden,), digits.NUM_CLASSES)
  acc = lambda p, x, y: np.asarray(models.accuracy(model, p, x, y), np.float64)
  return _World("digits", data, model, cfg.digits_batch, cfg.digits_epochs, cfg.digits_lrs,
                acc)


def _prefix_error(strategy, sigma):
  """sigma^2 ||W C^-1||_F^2 / T for prefix sums W."""
  t = strategy.shape[0]
  b = np.linalg.solve(strategy.T, mf.prefix_workload(t).T).T
  return float(sigma ** 2 * np.sum(b * b) / t)


def _methods(bands, steps, iterations):
  """[(name, privatizer or None, strategy)] for T steps; None is Poisson DP-SGD."""
  out = [("DP-SGD (Poisson)", None, np.eye(steps))]
  for b in bands:
    coefs = mf.optimize_toeplitz(steps, min(b, steps), num_iterations=iterations)
    stream = mf.toeplitz_stream(coefs, steps)
    out.append((f"BandMF b={b}", privatizer.CorrelatedNoisePrivatizer(stream),
                stream.strategy))
  stream = mf.tree_stream(steps)
  out.append(("DP-FTRL tree", privatizer.CorrelatedNoisePrivatizer(stream), stream.strategy))
  return out


def _unit_sigma(eps):
  """The Gaussian multiplier at sensitivity 1 meeting eps at DELTA (matrix_factorization's
  PLD epsilon, bisection in log sigma)."""
  return accounting.smallest_noise(lambda s: mf.epsilon(s, 1.0, DELTA), eps, 0.5, 2.0,
                                   factor=2.0, rtol=1e-5)


def _compare(world: _World, cfg, k_train, unit, progress):
  """(results, table) of every method at every (epochs, eps, lr, seed) of one world."""
  x, y = world.data["train"]
  n = x.shape[0]
  sampler = sampling.CyclicSampler.for_dataset(n, world.batch)
  q = sampler.sampling_prob
  results, rows = {}, []
  jobs = [(ep, m) for ep in world.epochs
          for m in _methods(cfg.bands, ep * sampler.steps_per_epoch, cfg.optimizer_iterations)]
  for ji, (epochs, (name, priv, strategy)) in enumerate(
      tqdm(jobs, desc=f"{NAME} {world.name}", leave=False, disable=not progress)):
    steps = epochs * sampler.steps_per_epoch
    base = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=q, num_steps=steps, delta=DELTA)
    if priv is None:
      cfgs = [base.calibrate(eps) for eps in cfg.epsilons]
      sens = 1.0
      spent = [c.epsilon() for c in cfgs]
    else:
      sens = priv.sensitivity(sampler, steps)
      cfgs = [dataclasses.replace(base, noise_multiplier=sens * unit[eps])
              for eps in cfg.epsilons]
      spent = [priv.epsilon(c.noise_multiplier, steps, DELTA, sampler) for c in cfgs]
    val_acc, test_acc = [], []
    for li, lr in enumerate(world.lrs):
      lr_cfgs = [dataclasses.replace(c, learning_rate=float(lr)) for c in cfgs]
      idx = np.repeat(np.arange(len(lr_cfgs)), cfg.seeds)
      kw = {} if priv is None else dict(sampler=sampler, privatizer=priv)
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsgd.OtherAccountantWarning)  # eps: `spent`
        out = dpsgd.train_sweep(jax.random.fold_in(k_train, ji * 100 + li), x, y,
                                jnp.ones((idx.size, n), bool), lr_cfgs, idx, world.model,
                                perf=dpsgd.PerformanceFlags(progress=False), **kw)
      for accs, split in ((val_acc, "val"), (test_acc, "test")):
        accs.append(world.accuracy(out.params, *world.data[split]).reshape(len(cfgs),
                                                                           cfg.seeds))
    val_acc, test_acc = np.stack(val_acc), np.stack(test_acc)   # [lr, eps, seed]
    for ei, eps in enumerate(cfg.epsilons):
      best = int(np.argmax(val_acc[:, ei].mean(axis=1)))
      a = test_acc[best, ei]
      sigma = cfgs[ei].noise_multiplier
      r = results[f"{epochs}/{name}/{eps}"] = {
          "epochs": epochs, "method": name, "epsilon": eps, "steps": steps,
          "sigma": sigma, "sensitivity": sens, "epsilon_spent": spent[ei],
          "prefix_error": _prefix_error(strategy, sigma), "learning_rate": world.lrs[best],
          "validation_accuracy": float(val_acc[best, ei].mean()),
          "acc_mean": float(a.mean()), "acc_sd": float(a.std(ddof=1)), "acc": a.tolist()}
      rows.append([epochs, name, eps, sigma, sens, r["epsilon_spent"], r["prefix_error"],
                   r["learning_rate"], r["acc_mean"], r["acc_sd"]])
  what = (f"cubic credit model, n = {n}" if world.name == "credit" else
          f"digits MLP 64-{cfg.digits_hidden}-10, n = {n}")
  table = _common.Table(
      f"Test accuracy of DP-SGD, BandMF and DP-FTRL at equal eps ({what}, B = "
      f"{world.batch}, {cfg.seeds} seeds, delta = {DELTA:g})",
      ["epochs", "method", "eps", "sigma", "sens", "eps spent", "prefix error", "lr",
       "accuracy", "sd"], rows,
      note="DP-SGD: Poisson, amplified (RDP). MF: cyclic batches, no amplification, "
           "eps spent = CorrelatedNoisePrivatizer.epsilon. prefix error = sigma^2 "
           "||W C^-1||_F^2 / T. lr chosen on the public validation sample.")
  return results, table


def run(cfg: DpMfExperimentConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Compares the methods on each world of cfg.worlds; returns `_common.finish`'s dict.

  Credit's keys are split(key(seed)); digits' are split(fold_in(key(seed), 1)).
  """
  unit = {eps: _unit_sigma(eps) for eps in cfg.epsilons}
  record, tables, figures, summary = {"unit_sigma": unit}, [], [], []
  for name, build in (("credit", _credit_world), ("digits", _digits_world)):
    if name not in cfg.worlds:
      continue
    root = jax.random.key(cfg.seed)
    k_data, k_train = jax.random.split(root if name == "credit" else
                                       jax.random.fold_in(root, 1))
    world = build(k_data, cfg)
    results, table = _compare(world, cfg, k_train, unit, progress)
    record["runs" if name == "credit" else "digits_runs"] = results
    tables.append(table)
    figures += _plot(out_dir, results, world)
    summary.append(f"{name.capitalize()}: " + _summary(results, cfg, world))
  return _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=figures,
                        summary=" ".join(summary), quiet=quiet)


def _best_mf(results, epochs, eps):
  cands = [r for r in results.values() if r["epochs"] == epochs and r["epsilon"] == eps
           and not r["method"].startswith("DP-SGD")]
  return max(cands, key=lambda r: r["acc_mean"])


def _summary(results, cfg, world):
  ahead, behind, tied, err_lower = [], [], [], 0
  n = world.data["train"][0].shape[0]
  for ep in world.epochs:
    for eps in cfg.epsilons:
      sgd = results[f"{ep}/DP-SGD (Poisson)/{eps}"]
      mfr = _best_mf(results, ep, eps)
      diff = mfr["acc_mean"] - sgd["acc_mean"]
      noise = 2.0 * math.hypot(sgd["acc_sd"], mfr["acc_sd"]) / math.sqrt(cfg.seeds)
      (ahead if diff > noise else behind if diff < -noise else tied).append(
          f"{ep} ep / eps {eps:g} ({mfr['method']} {diff:+.3f})")
      mins = min(r["prefix_error"] for r in results.values()
                 if r["epochs"] == ep and r["epsilon"] == eps and r["method"] != sgd["method"])
      err_lower += mins < sgd["prefix_error"]
  total = len(world.epochs) * len(cfg.epsilons)
  return (
      "Published direction (Choquette-Choo et al. 2023; McKenna 2024): in the multi-epoch "
      "regime banded MF beats DP-SGD at equal eps. Here the best MF method is ahead of "
      f"Poisson DP-SGD beyond two standard errors in {len(ahead)} of {total} settings "
      f"[{'; '.join(ahead) or 'none'}], behind in {len(behind)} "
      f"[{'; '.join(behind) or 'none'}], and within noise in {len(tied)}. An MF strategy "
      f"has a lower prefix error than amplified DP-SGD in {err_lower} of {total} settings. "
      "Candidate reasons for any disagreement (not tested here): our small-data regime, "
      f"where amplification by Poisson sampling at q = {world.batch / n:.2g} is strong, few "
      f"steps per epoch (E = {n // world.batch}) cap the bands that avoid overlapping "
      "participations" + (", and a 56-parameter logistic model near the credit world's "
                          "accuracy ceiling leaves little room between methods."
                          if world.name == "credit" else "."))


def _plot(out_dir, results, world):
  methods = list(dict.fromkeys(r["method"] for r in results.values()))
  eps_grid = sorted({r["epsilon"] for r in results.values()})
  png = "dp_mf_accuracy.png" if world.name == "credit" else f"dp_mf_{world.name}_accuracy.png"
  with _plots.figure(out_dir, png, ncols=len(world.epochs),
                     figsize=(5 * len(world.epochs), 3.8), dpi=110) as (fig, axes):
    axes = np.atleast_1d(axes)
    for ax, ep in zip(axes, world.epochs):
      for mi, m in enumerate(methods):
        rs = [results[f"{ep}/{m}/{e}"] for e in eps_grid]
        ax.errorbar(eps_grid, [r["acc_mean"] for r in rs],
                    yerr=[r["acc_sd"] for r in rs], marker="o", color=f"C{mi}", label=m)
      _plots.decorate(ax, xscale="log", xlabel="epsilon (delta = 1e-5)",
                      ylabel="test accuracy", title=f"{world.name}, {ep} epochs", legend=7)
      ax.set_xticks(eps_grid, [f"{e:g}" for e in eps_grid], minor=False)
      ax.minorticks_off()
  return [png]


def main():
  """`python -m experiments.dp_mf [--flags]`: flags from DpMfExperimentConfig."""
  warnings.simplefilter("ignore", category=FutureWarning)
  _common.app_run(NAME, DpMfExperimentConfig, run)


if __name__ == "__main__":
  main()
