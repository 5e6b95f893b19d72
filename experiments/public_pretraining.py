"""Public pre-training, private fine-tuning: digits accuracy vs epsilon for three strategies.

The cost of privacy grows like sqrt(d) / (n eps), d the parameters learned privately (lecture
§5.3, §5.6; Tramèr & Boneh 2021, arXiv 2011.11660). An MLP pre-trained without privacy on public
digits, then DP-SGD on the private ones: `head` (last layer on frozen features, d = H K + K),
`full` (all layers from the pre-trained parameters), `scratch`. `--public classes` (default):
public digits 0-4, private task 5-9; `--public split`: a random `--public_fraction` of all
classes. Same accountant for all; the table gives the noise norm sigma C sqrt(d) / B. The
learning rates were picked by hand on this split (a use of private data not accounted).

Command:   python -m experiments.public_pretraining   (about 45 s of CPU)

Shape letters: M models, N images, F = 64 pixels, H hidden width, K classes.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import dpsgd, fitting, models
from dpjax.data import digits
from experiments import _common, _plots

NAME = "public_pretraining"
_opt = _common.option
_STRATEGIES = ("head", "full", "scratch")
_PUBLIC = ("classes", "split")
_LABELS = {"head": "last layer on public body", "full": "all layers from public init",
           "scratch": "all layers from scratch"}
_LECTURE_CLAIM = ("Fewer parameters to learn from private data, e.g. via public "
                  "pre-training, is the most effective lever (§5.3)")
_PAPER_CLAIM = ("Tramèr & Boneh 2021: differentially private learning needs better "
                "features (or much more data)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublicPretrainingConfig(_common.ExperimentConfig):
  """What `run` trains (defaults: the table in the module docstring)."""
  eps: tuple[float, ...] = _opt(
      (1.0, 2.0, 4.0, 8.0, math.inf), "Target epsilons ('inf' = clipped SGD without noise).")
  public: str = _opt("classes", "Public part: 'classes' (digits 0-4 public, fine-tune on 5-9) "
                     "or 'split' (a random share of all classes).", choices=_PUBLIC)
  strategies: tuple[str, ...] = _opt(_STRATEGIES, "Strategies: head, full, scratch.",
                                     choices=_STRATEGIES)
  seeds: int = _opt(3, "Models per (strategy, epsilon), vmapped.", bounds=">=1")
  steps: int = _opt(100, "DP-SGD steps T.", bounds=">=1")
  sampling_prob: float = _opt(0.1, "Poisson sampling probability q.", bounds="(0,1]")
  clip: float = _opt(1.0, "Per-example L2 clip norm C.", bounds=">0")
  delta: float = _opt(1e-5, "delta of the (epsilon, delta) guarantee.", bounds="(0,1)")
  hidden: int = _opt(128, "Hidden width H of the MLP 64 -> H -> K.", bounds=">=1")
  head_lr: float = _opt(1.0, "SGD learning rate of the head-only fine-tuning.", bounds=">0")
  full_lr: float = _opt(1.0, "SGD learning rate of the all-layer fine-tuning.", bounds=">0")
  scratch_lr: float = _opt(2.0, "SGD learning rate of training from scratch.", bounds=">0")
  pretrain_steps: int = _opt(300, "Full-batch Adam steps of the public pre-training.", bounds=">=1")
  pretrain_lr: float = _opt(0.01, "Adam learning rate of the public pre-training.", bounds=">0")
  public_fraction: float = _opt(
      0.5, "Share of the training images that is public (--public split only).", bounds="(0,1)")
  test_fraction: float = _opt(0.25, "Share of all images held out for testing.", bounds="(0,1)")

  def __post_init__(self):
    super().__post_init__()
    _common.check_positive(self, "eps", finite=False)
    if len(set(self.strategies)) != len(self.strategies):
      raise ValueError(f"strategies must not repeat, got {self.strategies!r}")


class _Split:
  """Public / private / test arrays of one run (numpy, labels 0..K-1)."""

  def __init__(self, cfg: PublicPretrainingConfig, key: jax.Array):
    key_load, key_split = jax.random.split(key)
    data = digits.load(key_load, test_fraction=cfg.test_fraction)
    x_tr, y_tr = np.asarray(data.x_train_NxF), np.asarray(data.y_train_N)
    x_te, y_te = np.asarray(data.x_test_NxF), np.asarray(data.y_test_N)
    if cfg.public == "classes":
      # Public: the digits 0-4; private task: 5-9 relabelled 0-4 (a new head).
      pub, priv, test = y_tr < 5, y_tr >= 5, y_te >= 5
      self.x_pub, self.y_pub = x_tr[pub], y_tr[pub]
      self.x_priv, self.y_priv = x_tr[priv], y_tr[priv] - 5
      self.x_test, self.y_test = x_te[test], y_te[test] - 5
      self.num_classes = 5
    else:
      perm = np.asarray(jax.random.permutation(key_split, x_tr.shape[0]))
      n_pub = int(round(cfg.public_fraction * x_tr.shape[0]))
      pub, priv = perm[:n_pub], perm[n_pub:]
      if n_pub < 1 or priv.size < 1:
        raise ValueError(f"public_fraction {cfg.public_fraction} leaves an empty public or "
                         "private part")
      self.x_pub, self.y_pub = x_tr[pub], y_tr[pub]
      self.x_priv, self.y_priv = x_tr[priv], y_tr[priv]
      self.x_test, self.y_test = x_te, y_te
      self.num_classes = digits.NUM_CLASSES
    # Test images of the public task (classes mode: the digits 0-4), to report how well
    # pre-training fitted it; in split mode the public task is the private task.
    pub_test = y_te < 5 if cfg.public == "classes" else np.ones_like(y_te, bool)
    self.x_pub_test, self.y_pub_test = x_te[pub_test], y_te[pub_test]


def _num_params(params) -> int:
  return int(sum(math.prod(l.shape) for l in jax.tree.leaves(params)))


def run(cfg: PublicPretrainingConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Pre-trains, then trains and tests every strategy at every epsilon; `_common.finish`'s dict."""
  del progress  # three programs, no long loop to report on
  key_data, key_pre, key_train = jax.random.split(jax.random.key(cfg.seed), 3)
  data = _Split(cfg, key_data)
  k = data.num_classes
  model = models.mlp(digits.NUM_FEATURES, (cfg.hidden,), k)
  # Non-private pre-training on public data: full-batch Adam on the mean loss.
  pre = jax.tree.map(lambda v: v[0], fitting.train_nonprivate(
      key_pre, data.x_pub, data.y_pub, model, optax.adam(cfg.pretrain_lr),
      num_epochs=cfg.pretrain_steps,
      init_params=jax.tree.map(lambda v: v[None], model.init(key_pre))).params)
  pre_acc = float(models.accuracy(model, jax.tree.map(lambda v: v[None], pre),
                                  data.x_pub_test, data.y_pub_test)[0])
  # The fine-tuning start: a fresh zero head for new classes, the public head otherwise.
  start = models.reset_head(model, pre) if cfg.public == "classes" else pre
  head, head0 = models.split_head(model, start)
  n = int(data.x_priv.shape[0])
  eps, seeds = list(cfg.eps), cfg.seeds
  idx = np.repeat(np.arange(len(eps)), seeds)
  keep = jnp.ones((len(idx), n), bool)
  lrs = {"head": cfg.head_lr, "full": cfg.full_lr, "scratch": cfg.scratch_lr}
  d = {"head": _num_params(head0), "full": _num_params(pre), "scratch": _num_params(pre)}
  record = {"public": cfg.public, "num_public": int(data.x_pub.shape[0]), "num_private": n,
            "num_test": int(data.x_test.shape[0]), "num_classes": k,
            "expected_batch_size": cfg.sampling_prob * n, "epochs": cfg.steps * cfg.sampling_prob,
            "pretrain_accuracy_public_task": pre_acc, "num_params": d, "cells": []}
  if cfg.public == "split":
    record["public_only_accuracy"] = pre_acc
  for strategy in cfg.strategies:
    common = dict(dataset_size=n, sampling_prob=cfg.sampling_prob, num_steps=cfg.steps,
                  delta=cfg.delta, l2_clip_norm=cfg.clip, learning_rate=float(lrs[strategy]))
    cfgs = [dpsgd.DpSgdConfig(noise_multiplier=0.0, **common) if math.isinf(e) else
            dpsgd.DpSgdConfig(**common).calibrate(e) for e in eps]
    key_s = jax.random.fold_in(key_train, _STRATEGIES.index(strategy))
    if strategy == "head":
      # The body is public: phi(x) is a fixed function of each private record alone.
      phi_priv = models.body_features(model, pre, data.x_priv)
      phi_test = models.body_features(model, pre, data.x_test)
      out = dpsgd.train_sweep(key_s, phi_priv, data.y_priv, keep, cfgs, idx, head,
                              init_params=head0, perf=dpsgd.PerformanceFlags(progress=False))
      acc = models.accuracy(head, out.params, phi_test, data.y_test)
    else:
      init = start if strategy == "full" else None
      out = dpsgd.train_sweep(key_s, data.x_priv, data.y_priv, keep, cfgs, idx, model,
                              init_params=init, perf=dpsgd.PerformanceFlags(progress=False))
      acc = models.accuracy(model, out.params, data.x_test, data.y_test)
    finite = np.asarray(out.finite)
    for ei, (e, c) in enumerate(zip(eps, cfgs)):
      a = acc[idx == ei]
      record["cells"].append({
          "strategy": strategy, "num_params": d[strategy], "target_epsilon": e,
          "epsilon_spent": c.epsilon(), "sigma": c.noise_multiplier,
          "noise_norm": c.noise_multiplier * cfg.clip * math.sqrt(d[strategy]) / c.expected_batch_size,
          "accuracy_mean": float(a.mean()),
          "accuracy_sd": float(a.std(ddof=1)) if seeds > 1 else 0.0,
          "accuracy_per_seed": a.tolist(), "all_finite": bool(finite[idx == ei].all())})
  return _common.finish(cfg, out_dir, NAME, record, tables=_tables(cfg, record),
                        figures=[_plot(out_dir, record, cfg)], summary=_summary(record, cfg),
                        quiet=quiet)


def _cell(record, strategy, e):
  return next((c for c in record["cells"]
               if c["strategy"] == strategy and c["target_epsilon"] == e), None)


def _tables(cfg, record) -> list:
  rows = []
  for c in record["cells"]:
    base = _cell(record, "scratch", c["target_epsilon"])
    gain = c["accuracy_mean"] - base["accuracy_mean"] if base is not None else None
    rows.append([_LABELS[c["strategy"]], c["num_params"], c["target_epsilon"],
                 c["epsilon_spent"], c["sigma"], c["noise_norm"], c["accuracy_mean"],
                 c["accuracy_sd"], gain])
  n, b = record["num_private"], record["expected_batch_size"]
  public = ("digits 0-4 (their own head); private task: 5-9 with a fresh head"
            if cfg.public == "classes" else
            f"a random {cfg.public_fraction:g} of all ten classes (public head kept)")
  note = (f"Public: {record['num_public']} images, {public}; pre-trained without privacy "
          f"(Adam, {cfg.pretrain_steps} full-batch steps; accuracy on the public task's test "
          f"images {record['pretrain_accuracy_public_task']:.3f}). Private: n = {n}, test "
          f"{record['num_test']} images. DP-SGD: q = {cfg.sampling_prob:g} (B = {b:.1f}), "
          f"T = {cfg.steps}, C = {cfg.clip:g}, δ = {cfg.delta:g}, RDP accountant, the same σ "
          "for every strategy at a given ε; ε = ∞: the same clipped SGD with σ = 0 (the "
          "non-private reference). d = parameters learned from private data; noise norm = "
          "σC√d/B, the L2 norm of the noise in one averaged update (lecture §5.2). 'vs "
          "scratch' = accuracy minus that of training from scratch at the same ε. The "
          "learning rates were picked by hand on this split, which the accountant does not "
          "model. The lecture and the paper give no digits figures.")
  if cfg.public == "split":
    note += (f" Public model alone (no private data, ε = 0): accuracy "
             f"{record['public_only_accuracy']:.3f}.")
  table = _common.Table(
      title=(f"Public pre-training, private fine-tuning on digits ({cfg.seeds} seeds, "
             "mean ± sd test accuracy)"),
      columns=["strategy", "d", "target ε", "ε spent", "σ", "noise norm", "accuracy", "sd",
               "vs scratch"],
      rows=rows, note=note)
  fin = sorted({c["target_epsilon"] for c in record["cells"] if math.isfinite(c["target_epsilon"])})
  claim_rows = []
  have = [st for st in _STRATEGIES if _cell(record, st, fin[0] if fin else None)]
  if fin and "scratch" in have and len(have) > 1:
    e0 = fin[0]
    ours = f"at ε = {e0:g}: " + ", ".join(
        f"{_LABELS[st]} (d = {record['num_params'][st]}) "
        f"{_cell(record, st, e0)['accuracy_mean']:.3f}" for st in have)
    claim_rows.append(["lecture §5.3", _LECTURE_CLAIM, ours])
    if "head" in have:
      h, s = record["num_params"]["head"], record["num_params"]["scratch"]
      claim_rows.append(["Tramèr & Boneh 2021 (arXiv:2011.11660)", _PAPER_CLAIM,
                         f"public features cut d {s / h:.1f}x and the noise norm "
                         f"{math.sqrt(s / h):.1f}x at the same (q, T, δ, σ)"])
  tables = [table]
  if claim_rows:
    tables.append(_common.Table(title="What the lecture and the paper say, beside ours",
                                columns=["source", "lecture / paper", "ours"],
                                rows=claim_rows,
                                note="Qualitative claims; neither source reports digits "
                                     "numbers."))
  return tables


def _plot(out_dir: str, record: dict, cfg) -> str:
  """Accuracy against the epsilon spent, one line per strategy, drawn from the record."""
  with _plots.figure(out_dir, "accuracy_vs_epsilon.png", figsize=(5.8, 3.8)) as (fig, ax):
    for strategy, color in zip(_STRATEGIES, ("C0", "C1", "C2")):
      cs = [c for c in record["cells"] if c["strategy"] == strategy]
      fin = sorted((c for c in cs if math.isfinite(c["target_epsilon"])),
                   key=lambda c: c["target_epsilon"])
      label = f"{_LABELS[strategy]} (d = {record['num_params'][strategy]})"
      if fin:
        ax.errorbar([c["epsilon_spent"] for c in fin], [c["accuracy_mean"] for c in fin],
                    yerr=[c["accuracy_sd"] for c in fin], marker="o", color=color, capsize=3,
                    label=label)
      for c in cs:
        if not math.isfinite(c["target_epsilon"]):
          ax.axhline(c["accuracy_mean"], color=color, ls="--", lw=1, label=None if fin else label)
    if "public_only_accuracy" in record:
      ax.axhline(record["public_only_accuracy"], color="k", ls=":", lw=1,
                 label="public model alone")
    _plots.decorate(ax, xscale="log2", xlabel=f"ε spent (δ = {cfg.delta:g}); dashed: ε = ∞",
                    ylabel="test accuracy", legend=None)
    ax.set_title("digits: " + ("public 0-4, private 5-9" if cfg.public == "classes" else
                               "public / private split of all classes"))
    ax.legend(fontsize=7)
  return "accuracy_vs_epsilon.png"


def _summary(record: dict, cfg) -> str:
  parts = []
  fin = sorted({c["target_epsilon"] for c in record["cells"] if math.isfinite(c["target_epsilon"])})
  for strategy in cfg.strategies:
    cs = [_cell(record, strategy, e) for e in fin]
    inf = _cell(record, strategy, math.inf)
    txt = f"{_LABELS[strategy]} (d = {record['num_params'][strategy]}):"
    if cs:
      txt += " " + ", ".join(f"{c['accuracy_mean']:.3f} at ε = {c['target_epsilon']:g}" for c in cs)
    if inf is not None:
      txt += f"{';' if cs else ''} {inf['accuracy_mean']:.3f} without noise"
    parts.append(txt + ".")
  if fin:
    # Which strategy wins at the smallest and at the largest finite epsilon.
    for e in sorted({fin[0], fin[-1]}):
      cs = [c for c in (_cell(record, st, e) for st in cfg.strategies) if c is not None]
      best = max(cs, key=lambda c: c["accuracy_mean"])
      parts.append(f"Best at ε = {e:g}: {_LABELS[best['strategy']]} ({best['accuracy_mean']:.3f}).")
  return (f"Private task: {record['num_private']} images ("
          + ("digits 5-9, body pre-trained on 0-4" if cfg.public == "classes" else
             "a split of all classes") + "). " + " ".join(parts) +
          " The same σ for every strategy at a given ε: the noise norm σC√d/B falls with "
          "the privately learned d (lecture §5.3).")


def main():
  _common.app_run(NAME, PublicPretrainingConfig, run)


if __name__ == "__main__":
  main()
