"""PATE vs DP-SGD at equal epsilon on real digits (lecture §8.4; Papernot et al. 2017, 2018).

The digits split by the seed into test (25 %), a PUBLIC unlabeled pool of `--public` images and
the PRIVATE rest; softmax regression everywhere. Per k in `--teachers` and Q in `--queries`:
GNMax answers Q pool images with N(0, (`--sigma_per_teacher` k)^2) vote noise (Confident-GNMax,
`--confident_*`, only those clearing a threshold); the student trains on them; eps at
delta = 1e-5 data-independent (releasable) and data-dependent (Papernot et al. 2018, Thm 6; NOT
releasable without `dpjax.pate_release`); DP-SGD on the same images at the data-independent eps.
Hyperparameters were set by hand once (tuning on the private data would cost privacy).

Command:  python -m experiments.pate      (about 25-65 s of CPU)
Expected (seed 0; 848 private images, non-private 0.949; k = 10 / 50 / 100): one teacher 0.85 /
0.58 / 0.41, plurality vote 0.93 / 0.91 / 0.90. GNMax (sigma = 0.2 k): students 0.84-0.88 / 0.75
/ 0.51-0.63 at eps 57-199 / 7.1-19 / 3.2-8.1. Confident-GNMax answers 27-83 % of the queries,
87-99 % correctly; students 0.82-0.90 / 0.80-0.86 / 0.65-0.72. DP-SGD at each row's eps:
0.89-0.93, winning every row.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import dpsgd, models, pate
from dpjax.accounting import rdp
from dpjax.data import digits
from experiments import _common, _plots

NAME = "pate"
NUM_CLASSES = digits.NUM_CLASSES
_TEST_FRACTION = 0.25
# Training images left by the test split (digits.load's arithmetic): public + private.
_NUM_TRAIN = digits.NUM_EXAMPLES - int(round(_TEST_FRACTION * digits.NUM_EXAMPLES))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PateConfig(_common.ExperimentConfig):
  """The (k, Q) grid, the aggregators and DP-SGD (defaults = the module docstring)."""
  teachers: tuple[int, ...] = _common.option((10, 50, 100), "Numbers of teachers k.", bounds=">=1")
  queries: tuple[int, ...] = _common.option((100, 500), "Numbers of student queries Q.",
                                            bounds=">=1")
  public: int = _common.option(500, "Size of the public unlabeled pool (>= max Q).", bounds=">=1")
  sigma_per_teacher: float = _common.option(0.2, "GNMax sigma = this * k.", bounds=">0")
  delta: float = _common.option(1e-5, "Target delta.", bounds="(0,1)")
  dpsgd_seeds: int = _common.option(4, "DP-SGD seeds trained together.", bounds=">=1")
  fit_steps: int = _common.option(300, "Adam steps for teachers and students.", bounds=">=1")
  dpsgd_epochs: int = _common.option(20, "DP-SGD epochs.", bounds=">=1")
  confident_threshold: float = _common.option(
      0.6, "Confident-GNMax threshold / k (0 = GNMax only).", bounds=">=0")
  confident_sigma_threshold: float = _common.option(0.3, "Threshold-check sigma / k.", bounds=">0")
  confident_sigma: float = _common.option(0.1, "Confident-GNMax answer sigma / k.", bounds=">0")

  def __post_init__(self):
    super().__post_init__()
    if self.public < max(self.queries):
      raise ValueError(f"public must be >= max(queries) = {max(self.queries)}, got {self.public}")
    if self.public >= _NUM_TRAIN:
      raise ValueError(f"public must leave private images (< {_NUM_TRAIN}), got {self.public}")
    if max(self.teachers) > _NUM_TRAIN - self.public:
      raise ValueError(f"teachers must be <= the private set size {_NUM_TRAIN - self.public}, "
                       f"got {max(self.teachers)}")


def _dpsgd_config(n: int, eps: float, delta: float, epochs: int) -> dpsgd.DpSgdConfig:
  q = min(1.0, 100.0 / n)  # expected batch 100
  steps = max(1, int(round(epochs / q)))
  common = dict(dataset_size=n, sampling_prob=q, num_steps=steps, l2_clip_norm=1.0,
                learning_rate=2.0, delta=delta)
  if math.isinf(eps):
    return dpsgd.DpSgdConfig(noise_multiplier=0.0, **common)
  return dpsgd.DpSgdConfig(**common).calibrate(eps)


def run(cfg: PateConfig, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs every (k, Q) cell (and Confident-GNMax if enabled); returns `_common.finish`'s dict."""
  seed, teachers, queries, public = cfg.seed, list(cfg.teachers), list(cfg.queries), cfg.public
  sigma_per_teacher, delta, dpsgd_seeds = cfg.sigma_per_teacher, cfg.delta, cfg.dpsgd_seeds
  fit_steps, dpsgd_epochs = cfg.fit_steps, cfg.dpsgd_epochs
  confident_threshold = cfg.confident_threshold
  confident_sigma_threshold, confident_sigma = cfg.confident_sigma_threshold, cfg.confident_sigma
  aggregators = ["GNMax"] + (["Confident-GNMax"] if confident_threshold > 0 else [])
  key = jax.random.key(seed)
  k_split, k_pub, k_teach, k_agg, k_student, k_dp = jax.random.split(key, 6)
  data = digits.load(k_split, test_fraction=_TEST_FRACTION)
  perm = np.asarray(jax.random.permutation(k_pub, data.y_train_N.shape[0]))
  pub_idx, priv_idx = perm[:public], perm[public:]
  x_pub, y_pub = data.x_train_NxF[pub_idx], data.y_train_N[pub_idx]
  x_priv, y_priv = data.x_train_NxF[priv_idx], data.y_train_N[priv_idx]
  x_test, y_test = data.x_test_NxF, data.y_test_N
  n_priv = int(y_priv.shape[0])
  model = models.mlp(digits.NUM_FEATURES, hidden=(), num_classes=NUM_CLASSES)
  orders = rdp.DEFAULT_ORDERS
  bar = tqdm(total=len(teachers) * len(queries) + 1 + len(teachers), desc="pate",
             disable=not progress)

  # Non-private reference: the same model on all private images.
  ref = pate.fit_non_private(k_student, x_priv, y_priv, jnp.ones((1, n_priv), bool), model,
                             num_steps=fit_steps)
  ref_acc = float(models.accuracy(model, ref, x_test, y_test)[0])
  bar.update(1)

  record = {"n_private": n_priv, "n_public": public, "n_test": int(y_test.shape[0]),
            "non_private_accuracy": ref_acc, "cells": []}
  cells = []
  tkeys = jax.random.split(k_teach, len(teachers))
  for k, tk in zip(teachers, tkeys):
    params, keep = pate.train_teachers(tk, x_priv, y_priv, k, model, num_steps=fit_steps)
    if not np.all(np.asarray(keep).sum(axis=0) == 1):
      raise AssertionError("teacher partitions are not disjoint")
    votes_test = np.asarray(pate.teacher_votes(model, params, x_test, NUM_CLASSES))
    ens_acc = float(np.mean(votes_test.argmax(1) == np.asarray(y_test)))
    single = float(jnp.mean(models.accuracy(model, params, x_test, y_test)))
    votes_pub = np.asarray(pate.teacher_votes(model, params, x_pub, NUM_CLASSES))
    bar.update(1)
    sigma = sigma_per_teacher * k
    for qn in queries:
      v = votes_pub[:qn]
      for agg in aggregators:
        kk = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(k_agg, k), qn),
                                aggregators.index(agg))
        if agg == "GNMax":
          labels = np.asarray(pate.gnmax(kk, v, sigma))
          answered = np.ones(qn, bool)
          acct = pate.pate_rdp(v, sigma=sigma, orders=orders)
          agg_sigma = sigma
        else:
          agg_sigma = confident_sigma * k
          labels, answered = pate.confident_gnmax(
              kk, v, threshold=confident_threshold * k,
              sigma_threshold=confident_sigma_threshold * k, sigma=agg_sigma)
          labels, answered = np.asarray(labels), np.asarray(answered)
          acct = pate.pate_rdp(v, answered, sigma=agg_sigma, orders=orders,
                               threshold=confident_threshold * k,
                               sigma_threshold=confident_sigma_threshold * k)
        n_ans = int(answered.sum())
        label_acc = (float(np.mean(labels[answered] == np.asarray(y_pub[:qn])[answered]))
                     if n_ans else None)
        eps_ind = pate.epsilon(orders, acct.data_independent, delta)
        eps_dep = pate.epsilon(orders, acct.data_dependent, delta)
        stu_acc = None
        if n_ans:
          sk = jax.random.fold_in(k_student, k * 10_000 + qn)
          student = pate.fit_non_private(sk, x_pub[:qn], jnp.asarray(labels),
                                         jnp.asarray(answered)[None, :], model,
                                         num_steps=fit_steps, pad_to=qn)
          stu_acc = float(models.accuracy(model, student, x_test, y_test)[0])
        cells.append({"teachers": k, "queries": qn, "aggregator": agg, "sigma": agg_sigma,
                      "answered": n_ans, "teacher_accuracy": single,
                      "ensemble_accuracy": ens_acc, "label_accuracy": label_acc,
                      "student_accuracy": stu_acc, "epsilon_data_independent": eps_ind,
                      "epsilon_data_dependent": eps_dep,
                      "mean_plurality_share": float(np.mean(v.max(1) / k))})
      bar.update(1)

  # DP-SGD at the same (data-independent) epsilon, same private images, same model.
  dkeys = jax.random.split(k_dp, len(cells))
  for c, dk in zip(cells, dkeys):
    train_cfg = _dpsgd_config(n_priv, c["epsilon_data_independent"], delta, dpsgd_epochs)
    res = dpsgd.train_many(dk, x_priv, y_priv, jnp.ones((dpsgd_seeds, n_priv), bool),
                           train_cfg, model, perf=dpsgd.PerformanceFlags(progress=False))
    accs = jnp.asarray(models.accuracy(model, res.params, x_test, y_test))
    c["dpsgd_accuracy"] = float(jnp.mean(accs))
    c["dpsgd_accuracy_std"] = float(jnp.std(accs))
    c["dpsgd_sigma"] = train_cfg.noise_multiplier
    c["dpsgd_epsilon"] = train_cfg.epsilon()
  record["cells"] = cells
  bar.close()

  rows = [[c["teachers"], c["queries"], c["aggregator"], c["sigma"], c["answered"],
           c["teacher_accuracy"], c["ensemble_accuracy"], c["label_accuracy"],
           c["student_accuracy"], c["epsilon_data_independent"], c["epsilon_data_dependent"],
           c["dpsgd_accuracy"], c["dpsgd_sigma"]] for c in cells]
  tables = [_common.Table(
      title=(f"PATE vs DP-SGD at equal ε, δ = {delta:g}: digits, {n_priv} private / "
             f"{public} public / {record['n_test']} test images; non-private model "
             f"{ref_acc:.3f}"),
      columns=["teachers k", "queries Q", "aggregator", "σ", "answered", "one teacher",
               "ensemble (test)",
               "noisy labels correct", "student (test)", "ε (data-indep.)",
               "ε (data-dep.)*", "DP-SGD at same ε", "DP-SGD σ"],
      rows=rows,
      note=("*The data-dependent ε depends on the private votes; it is releasable only "
            "through a smooth-sensitivity step (Papernot et al. 2018; `dpjax.pate_release`, "
            "used in experiments.pate_credit). DP-SGD is matched to the data-independent ε. "
            "Confident-GNMax rows charge the answer on the answered queries only, the "
            "paper's accounting, which conditions on the answered mask and is not an upper "
            "bound on the privacy loss (`pate.pate_rdp`'s Warning; "
            "`pate.confident_gnmax_rdp` charges the whole step). Accuracies are on the "
            "test set; DP-SGD is the mean over seeds. The lecture gives no PATE numbers."))]

  figures = [_plot(out_dir, record)]
  best = max((c for c in cells if c["student_accuracy"] is not None),
             key=lambda c: c["student_accuracy"])
  summary = (
      f"Best PATE student: k = {best['teachers']}, Q = {best['queries']}, {best['aggregator']}: "
      f"test accuracy "
      f"{best['student_accuracy']:.3f} at ε = {best['epsilon_data_independent']:.2f} "
      f"(data-dependent {best['epsilon_data_dependent']:.2f}, not releasable as is); DP-SGD at the "
      f"same ε: {best['dpsgd_accuracy']:.3f}. Non-private: "
      f"{record['non_private_accuracy']:.3f}. See the table for every (k, Q).")
  return _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=figures,
                        summary=summary, quiet=quiet)


def _plot(out_dir: str, record: dict) -> str:
  """GNMax students and DP-SGD against the data-independent eps, drawn from the record."""
  cells = record["cells"]
  queries = list(dict.fromkeys(c["queries"] for c in cells))
  with _plots.figure(out_dir, "pate_vs_dpsgd.png", figsize=(5.5, 3.6)) as (fig, ax):
    for qn, mk in zip(queries, ("o", "s", "^", "v")):
      sel = [c for c in cells if c["queries"] == qn and c["aggregator"] == "GNMax"]
      ax.plot([c["epsilon_data_independent"] for c in sel], [c["student_accuracy"] for c in sel],
              marker=mk, label=f"PATE student, Q={qn}")
      ax.plot([c["epsilon_data_independent"] for c in sel], [c["dpsgd_accuracy"] for c in sel],
              marker=mk, ls="--", label=f"DP-SGD, same ε (Q={qn} cells)")
      for c in sel:
        ax.annotate(f"k={c['teachers']}", (c["epsilon_data_independent"], c["student_accuracy"]),
                    fontsize=7)
    ax.axhline(record["non_private_accuracy"], color="gray", ls=":", label="non-private")
    _plots.decorate(ax, xscale="log", xlabel="ε (data-independent, δ = 1e-5)",
                    ylabel="test accuracy", legend=7, title="PATE vs DP-SGD on digits")
  return "pate_vs_dpsgd.png"


def main():
  _common.app_run(NAME, PateConfig, run)


if __name__ == "__main__":
  main()
