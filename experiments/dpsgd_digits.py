"""DP-SGD done well on real images: MLP and CNN on scikit-learn's 8x8 digits vs epsilon.

The 1,797 digits split by the seed into 449 test, 200 PUBLIC validation and n = 1,148 private
training images; every choice is made on validation, test is scored once per final
configuration; inputs centred on the public mean. Per architecture (mlp 64 -> 512 -> 10; cnn
(8, 16), `--cnn_groups` for group norm): non-private (`fitting.train_nonprivate`, best epoch and
lr); DP-SGD (`dpjax.recipe`: Poisson, ghost clipping, momentum 0.9, EMA; one
`dpsgd.train_sweep` per (T, lr) trains every eps; best candidate and iterate on validation;
sigma by RDP at delta = 1e-5); clipped with sigma = 0 (clipping's cost alone). Second table
(`recipe.noise_for_batch_sizes`): sigma / B falls like 1 / sqrt(B) (Sander et al. 2023).

Command:   python -m experiments.dpsgd_digits      (quick: 6 programs, about 4 min of CPU)
Full:      python -m experiments.dpsgd_digits --steps 20,60,100 --mlp_lrs 0.1,0.2,0.5 \
             --cnn_lrs 0.5,1,4 --nonprivate_lrs 0.003,0.01     (22 programs, about 17 min)
Shape letters: M models (seeds), N images, F = 64 pixels.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from dpjax import dpsgd, fitting, models, recipe
from dpjax.clipping import ghost
from dpjax.data import digits
from experiments import _common, _plots

NAME = "dpsgd_digits"
_opt = _common.option
_ARCH_NAMES = ("mlp", "cnn")
_MOMENTUM = 0.9


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpsgdDigitsConfig(_common.ExperimentConfig):
  """What `run` trains (defaults: the quick run of the module docstring)."""
  eps: tuple[float, ...] = _opt((1.0, 2.0, 4.0, 8.0), "Target epsilons.", bounds=">0")
  archs: tuple[str, ...] = _opt(_ARCH_NAMES, "Architectures: mlp, cnn.", choices=_ARCH_NAMES)
  seeds: int = _opt(5, "Models per (architecture, candidate, epsilon), vmapped.", bounds=">=1")
  steps: tuple[int, ...] = _opt((60,), "Candidate numbers of DP-SGD steps T.", bounds=">=1")
  mlp_lrs: tuple[float, ...] = _opt((0.1, 0.5), "Candidate MLP learning rates (SGD, momentum "
                                    "0.9).", bounds=">0")
  cnn_lrs: tuple[float, ...] = _opt((0.5, 4.0), "Candidate CNN learning rates.", bounds=">0")
  sampling_prob: float = _opt(1.0, "Poisson sampling probability q (1: every record in every "
                              "step).", bounds="(0,1]")
  clip: float = _opt(1.0, "Per-example L2 clip norm C.", bounds=">0")
  ema_decay: float = _opt(0.9, "Decay of the parameter EMA (a candidate beside the last "
                          "iterate).", bounds="[0,1)")
  delta: float = _opt(1e-5, "delta of the (epsilon, delta) guarantee.", bounds="(0,1)")
  nonprivate_epochs: int = _opt(100, "Epochs of the non-private baseline.", bounds=">=1")
  nonprivate_batch: int = _opt(128, "Minibatch size of the non-private baseline.", bounds=">=1")
  nonprivate_lrs: tuple[float, ...] = _opt((1e-2,), "Candidate Adam learning rates of the "
                                           "non-private baseline.", bounds=">0")
  mlp_hidden: tuple[int, ...] = _opt((512,), "MLP hidden widths.", bounds=">=1")
  cnn_channels: tuple[int, ...] = _opt((8, 16), "CNN conv channels.", bounds=">=1")
  cnn_groups: int = _opt(0, "Group-norm groups per CNN conv layer (0: none, ghost clipping; "
                         "G >= 1: group norm, vmap clipping).", bounds=">=0")
  validation_size: int = _opt(200, "Public validation images (from the training part).",
                              bounds=">=1")
  center: bool = _opt(True, "Centre every split on the mean of the PUBLIC validation images "
                      "(recipe.center_on_public).")
  test_fraction: float = _opt(0.25, "Share of images held out for the test.", bounds="(0,1)")

  def __post_init__(self):
    super().__post_init__()
    if self.cnn_groups and any(c % self.cnn_groups for c in self.cnn_channels):
      raise ValueError(f"cnn_groups ({self.cnn_groups}) must divide every entry of "
                       f"cnn_channels {list(self.cnn_channels)}")


def _model(arch: str, cfg: DpsgdDigitsConfig) -> models.Model:
  if arch == "mlp":
    return models.mlp(digits.NUM_FEATURES, tuple(cfg.mlp_hidden), digits.NUM_CLASSES)
  return models.cnn(digits.IMAGE_SHAPE, tuple(cfg.cnn_channels), digits.NUM_CLASSES,
                    groups=cfg.cnn_groups or None)


def _stats(acc_M: np.ndarray) -> dict:
  return {"accuracy_mean": float(acc_M.mean()),
          "accuracy_sd": float(acc_M.std(ddof=1)) if acc_M.size > 1 else 0.0,
          "accuracy_min": float(acc_M.min()), "accuracy_per_seed": acc_M.tolist()}


def run(cfg: DpsgdDigitsConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Trains baselines and DP-SGD, selects on validation, tests once; `_common.finish`'s dict."""
  key_data, key_np, key_dp = jax.random.split(jax.random.key(cfg.seed), 3)
  data = digits.load_with_validation(key_data, cfg.test_fraction, cfg.validation_size)
  x, y = data.x_train_NxF, data.y_train_N
  x_val, x_test = data.x_val_NxF, data.x_test_NxF
  if cfg.center:
    x, x_test, x_val = (recipe.center_on_public(data.x_val_NxF, a) for a in (x, x_test, x_val))
  n = int(y.shape[0])
  eps = sorted(cfg.eps)
  q, m = cfg.sampling_prob, cfg.seeds
  record = {"num_train": n, "num_validation": int(data.y_val_N.shape[0]),
            "num_test": int(data.y_test_N.shape[0]), "expected_batch_size": q * n,
            "cells": [], "candidates": []}
  lrs = {"mlp": cfg.mlp_lrs, "cnn": cfg.cnn_lrs}
  jobs = [(a, ("adam", lr)) for a in cfg.archs for lr in cfg.nonprivate_lrs] + [
      (a, c) for a in cfg.archs for c in itertools.product(cfg.steps, lrs[a])]
  it = tqdm(jobs, desc="DP-SGD digits", unit="program") if progress else jobs
  # Validation accuracy of every (arch, T, lr, params kind) candidate per setting.
  val, trained, best_epochs = {}, {}, {}
  for arch, cand in it:
    model = _model(arch, cfg)
    if cand[0] == "adam":
      lr = cand[1]
      out = fitting.train_nonprivate(
          jax.random.fold_in(key_np, _ARCH_NAMES.index(arch)), x, y, model, _adam(float(lr)),
          batch_size=cfg.nonprivate_batch, num_epochs=cfg.nonprivate_epochs, num_models=m,
          x_val_NxF=x_val, y_val_N=data.y_val_N)
      v = float(models.accuracy(model, out.params, x_val, data.y_val_N).mean())
      record["candidates"].append({"arch": arch, "setting": "non-private", "steps": None,
                                   "learning_rate": float(lr), "params": "best epoch",
                                   "validation_accuracy": v})
      best = val.get((arch, "non-private"))
      if best is None or v > best[0]:
        val[(arch, "non-private")] = (v, None, lr, "best epoch", None)
        trained[(arch, "non-private")] = out.params
        best_epochs[arch] = np.asarray(out.best_epoch_M).tolist()
      continue
    steps, lr = cand
    common = dict(dataset_size=n, sampling_prob=q, num_steps=int(steps), delta=cfg.delta,
                  l2_clip_norm=cfg.clip, learning_rate=float(lr), ema_decay=cfg.ema_decay)
    cfgs = [dpsgd.DpSgdConfig(**common).calibrate(e) for e in eps]
    cfgs.append(dpsgd.DpSgdConfig(noise_multiplier=0.0, **common))
    index = np.repeat(np.arange(len(cfgs)), m)
    # Ghost clipping where the layers allow it; a group-norm CNN takes the engine's
    # default path for its kind (vmap(grad)).
    clipping = (None if arch == "cnn" and cfg.cnn_groups else
                ghost.clipped_sum_fn(model, input_shape=digits.IMAGE_SHAPE
                                     if arch == "cnn" else None))
    # Each (arch, candidate) gets its own stream; the settings of a candidate differ
    # only in their noise std.
    k = jax.random.fold_in(key_dp, jobs.index((arch, cand)))
    out = dpsgd.train_sweep(k, x, y, jnp.ones((len(index), n), bool), cfgs, index, model,
                            clipping=clipping, optimizer=_sgd(float(lr)),
                            perf=dpsgd.PerformanceFlags(progress=False))
    for kind, params in (("last", out.params), ("ema", out.ema_params)):
      acc_val = models.accuracy(model, params, x_val, data.y_val_N)
      for j, c in enumerate(cfgs):
        setting = "clipped, σ = 0" if j == len(eps) else f"ε = {eps[j]:g}"
        sel = index == j
        v = float(acc_val[sel].mean())
        record["candidates"].append({"arch": arch, "setting": setting, "steps": int(steps),
                                     "learning_rate": float(lr), "params": kind,
                                     "validation_accuracy": v})
        best = val.get((arch, setting))
        if best is None or v > best[0]:
          val[(arch, setting)] = (v, steps, lr, kind, c)
          trained[(arch, setting)] = jax.tree.map(lambda a: a[sel], params)  # noqa: B023
  # The test split, once per selected configuration.
  for arch in cfg.archs:
    model = _model(arch, cfg)
    v, _, lr, _, _ = val[(arch, "non-private")]
    acc = models.accuracy(model, trained[(arch, "non-private")], x_test, data.y_test_N)
    record["cells"].append({
        "arch": arch, "setting": "non-private", "target_epsilon": math.inf,
        "epsilon_spent": math.inf, "sigma": 0.0, "steps": None, "learning_rate": float(lr),
        "params": "best epoch", "best_epoch_per_seed": best_epochs[arch],
        "validation_accuracy": v, **_stats(acc)})
  for arch in cfg.archs:
    model = _model(arch, cfg)
    for target, setting in [(e, f"ε = {e:g}") for e in eps] + [(math.inf, "clipped, σ = 0")]:
      v, steps, lr, kind, c = val[(arch, setting)]
      acc = models.accuracy(model, trained[(arch, setting)], x_test, data.y_test_N)
      record["cells"].append({
          "arch": arch, "setting": setting,
          "target_epsilon": target,
          "epsilon_spent": c.epsilon(), "sigma": c.noise_multiplier, "steps": int(steps),
          "learning_rate": float(lr), "params": kind, "validation_accuracy": v,
          "noise_per_example": c.noise_multiplier / (q * n), **_stats(acc)})
  record["noise_for_batch_sizes"] = noise_rows = _noise_table_rows(cfg, n, eps)
  return _common.finish(cfg, out_dir, NAME, record,
                        tables=[_results_table(cfg, record), _noise_table(cfg, n, noise_rows)],
                        figures=[_plot(out_dir, record, cfg.archs)],
                        summary=_summary(record, cfg.archs), quiet=quiet)


# One optimiser object per learning rate: the engine caches its program on it.
_OPTIMIZERS: dict = {}


def _sgd(lr: float) -> optax.GradientTransformation:
  return _OPTIMIZERS.setdefault(("sgd", lr), optax.sgd(lr, momentum=_MOMENTUM))


def _adam(lr: float) -> optax.GradientTransformation:
  return _OPTIMIZERS.setdefault(("adam", lr), optax.adam(lr))


def _noise_table_rows(cfg, n: int, eps) -> list[dict]:
  """sigma and sigma / B at the epochs of the longest candidate, per epsilon and B."""
  epochs = max(cfg.steps) * cfg.sampling_prob
  sizes = sorted({max(1, round(n * f)) for f in (1 / 8, 1 / 4, 1 / 2, 1.0)}
                 | {round(cfg.sampling_prob * n)})
  rows = []
  for e in eps:
    for r in recipe.noise_for_batch_sizes(e, cfg.delta, epochs, n, sizes):
      rows.append({"target_epsilon": e, "epochs": epochs, **r._asdict()})
  return rows


def _results_table(cfg, record) -> _common.Table:
  rows = [[c[k] for k in ("arch", "setting", "epsilon_spent", "sigma", "steps", "learning_rate",
                          "params", "validation_accuracy", "accuracy_mean", "accuracy_sd",
                          "accuracy_min")] for c in record["cells"]]
  n = record["num_train"]
  return _common.Table(
      title=(f"DP-SGD on scikit-learn digits with the recipe: test accuracy "
             f"({cfg.seeds} seeds, mean ± sd, worst seed)"),
      columns=["model", "setting", "ε spent", "σ", "T", "lr", "params", "val. acc.",
               "test acc.", "sd", "worst"],
      rows=rows,
      note=(f"n = {n} private training / {record['num_validation']} public validation / "
            f"{record['num_test']} test images"
            + (", every split centred on the mean of the public validation images"
               if cfg.center else "") + f". DP-SGD: q = {cfg.sampling_prob:g} "
            f"(B = {cfg.sampling_prob * n:.0f}), C = {cfg.clip:g}, δ = {cfg.delta:g}, RDP "
            f"accountant, Poisson sampling, SGD with momentum {_MOMENTUM:g}; per setting, "
            f"T ∈ {list(cfg.steps)}, the learning rate and the parameters (last iterate or "
            f"EMA, decay {cfg.ema_decay:g}) were chosen on the PUBLIC validation split "
            "(highest mean validation accuracy); the test split was scored once, for the "
            "chosen configuration. 'clipped, σ = 0': the same selection without noise (no "
            f"privacy). 'non-private': Adam (batch {cfg.nonprivate_batch}, "
            f"{cfg.nonprivate_epochs} epochs, lr ∈ {list(cfg.nonprivate_lrs)} chosen on the "
            "validation split), no clipping or noise, the epoch with the best validation "
            "accuracy. No published figure uses this split "
            "(the lecture has no digits numbers): the non-private rows are the reference."))


def _noise_table(cfg, n: int, rows) -> _common.Table:
  return _common.Table(
      title="Batch size at fixed ε and epochs: the noise on the averaged gradient",
      columns=["target ε", "epochs", "B", "q", "T", "σ", "σ / B", "η = σ / (q √T)"],
      rows=[[f"{r['target_epsilon']:g}", f"{r['epochs']:g}", int(round(r["batch_size"])),
             r["sampling_prob"], r["num_steps"], r["noise_multiplier"],
             r["noise_per_example"], r["total_amount_of_noise"]] for r in rows],
      note=(f"`recipe.noise_for_batch_sizes` (n = {n}, δ = {cfg.delta:g}, RDP): σ "
            "calibrated per batch size B at the same ε and number of epochs. σ / B, the "
            "noise std of the averaged gradient in units of C, falls like 1 / √B while "
            "the total amount of noise η stays nearly constant (Sander, Stock & "
            "Sablayrolles 2023), which is why the recipe uses large batches."),
      digits=4)


def _plot(out_dir: str, record: dict, archs) -> str:
  """Test accuracy against the epsilon spent per architecture, with both baselines."""
  with _plots.figure(out_dir, "accuracy_vs_epsilon.png", figsize=(5.8, 3.8)) as (fig, ax):
    for arch, color in zip(archs, ("C0", "C1")):
      cs = [c for c in record["cells"] if c["arch"] == arch]
      fin = sorted((c for c in cs if c["setting"].startswith("ε")),
                   key=lambda c: c["epsilon_spent"])
      ax.errorbar([c["epsilon_spent"] for c in fin], [c["accuracy_mean"] for c in fin],
                  yerr=[c["accuracy_sd"] for c in fin], marker="o", color=color, capsize=3,
                  label=f"{arch}, DP-SGD")
      for c in cs:
        if c["setting"] == "non-private":
          ax.axhline(c["accuracy_mean"], color=color, ls="-", lw=1, alpha=0.6,
                     label=f"{arch}, non-private")
        elif c["setting"].startswith("clipped"):
          ax.axhline(c["accuracy_mean"], color=color, ls="--", lw=1,
                     label=f"{arch}, clipped, σ = 0")
    _plots.decorate(ax, xscale="log2", xlabel="ε spent (δ = 1e-5)", ylabel="test accuracy",
                    title="DP-SGD recipe on 8×8 digits", legend=7)
  return "accuracy_vs_epsilon.png"


def _summary(record: dict, archs) -> str:
  parts = []
  for arch in archs:
    cs = {c["setting"]: c for c in record["cells"] if c["arch"] == arch}
    fin = sorted((c for c in cs.values() if c["setting"].startswith("ε")),
                 key=lambda c: c["epsilon_spent"])
    txt = (f"{arch.upper()}: non-private {cs['non-private']['accuracy_mean']:.3f}, "
           f"clipped without noise {cs['clipped, σ = 0']['accuracy_mean']:.3f}, DP-SGD "
           + ", ".join(f"{c['accuracy_mean']:.3f} at ε = {c['epsilon_spent']:.2g}"
                       for c in fin))
    parts.append(txt + ".")
  return " ".join(parts) + (
      " Hyper-parameters and checkpoints were chosen on the public validation split only;"
      " every ε is what the RDP accountant reports for the (q, σ, T, δ) used.")


def main():
  _common.app_run(NAME, DpsgdDigitsConfig, run)


if __name__ == "__main__":
  main()
