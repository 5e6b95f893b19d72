"""Private hyperparameter tuning on the credit world (lecture §5.5; Papernot & Steinke 2022).

    .venv/bin/python -m experiments.tuning                 # 8 settings, about a minute of CPU
    .venv/bin/python -m experiments.tuning --clip_norms 0.03,0.1,0.3,1,3 \
        --step_sizes 0.02,0.1,0.5,2.5                      # 20 settings, about 95 s of CPU

DP-SGD settings (C, lr) for logistic regression at one total eps (delta = 1e-5), disjoint
private training and validation splits. (1) Repeat and select (Papernot & Steinke, ICLR 2022):
K random runs, each releasing a validation count plus rounded Gaussian noise, sigma so that
`accounting.tuned_dpsgd_epsilon` is eps. (2) Exponential mechanism on the validation split
(`tuning.exponential_selection_epsilon`). (3) Naive: every setting at eps, the best by exact
validation accuracy: NOT DP (the selection reads validation records without noise). Also: eps
of repeat-and-select against E[K] for eta = 0, 1 (Liu & Talwar 2019) and Poisson.
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import numpy as np

from dpjax import accounting
from dpjax import dpsgd
from dpjax import models
from dpjax import tuning
from dpjax.accounting import rdp
from dpjax.data import credit
from experiments import _common, _plots

NAME = "tuning"
DELTA = 1e-5
CLIP_NORMS = (0.03, 0.1, 0.3, 1.0, 3.0)
STEP_SIZES = (0.02, 0.1, 0.5, 2.5)        # learning rate * C
# Default grid: 4 x 2 = 8 settings (each setting is one compiled program, ~4 s of CPU);
# the full 5 x 4 = 20 grid is --clip_norms / --step_sizes at the module constants.
DEFAULT_CLIP_NORMS = (0.03, 0.3, 1.0, 3.0)
DEFAULT_STEP_SIZES = (0.1, 0.5)
FIGURE_MEANS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
FIGURE_SHAPES = (0.0, 1.0, "poisson")
_PUBLIC = 5000   # people in the public sample that fits the feature scaler
_PAD = 4   # models per compiled program: every call for a setting reuses one program

LECTURE = {
    "naive": "not DP: accounting only the final model ignores the tuning (§5.5)",
    "em": "eps-DP selection (§3.4); parallel composition over the two splits",
    "rs": "Papernot & Steinke: (2 + eta) x eps_Q in the pure-DP limit",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuningConfig(_common.ExperimentConfig):
  """The tuning comparison's settings."""
  epsilon: float = _common.option(2.0, "Total eps of every method (delta = 1e-5).", bounds=">0")
  seeds: int = _common.option(3, "Independent repetitions of each tuning procedure.", bounds=">=1")
  train_size: int = _common.option(4000, "People in the private training split.", bounds=">=1")
  val_size: int = _common.option(1000, "People in the private validation split.", bounds=">=1")
  test_size: int = _common.option(10_000, "People in the test sample.", bounds=">=1")
  batch_size: int = _common.option(50, "Expected batch size B = q n.", bounds=">=1")
  epochs: float = _common.option(5.0, "Epochs per training run (T = epochs / q).", bounds=">0")
  mean_runs: float = _common.option(10.0, "Repeat and select: E[K].", bounds=">=1")
  shape: float = _common.option(1.0, "Repeat and select: eta (0 logarithmic, 1 geometric).",
                                bounds=">=0")
  score_noise: float = _common.option(
      10.0, "Repeat and select: std of the rounded Gaussian noise on each correct count.",
      bounds=">0")
  clip_norms: tuple[float, ...] = _common.option(DEFAULT_CLIP_NORMS, "Candidate clipping norms C.",
                                                 bounds=">0")
  step_sizes: tuple[float, ...] = _common.option(
      DEFAULT_STEP_SIZES, "Candidate learning rate x C values (candidates = clip_norms x "
      "step_sizes).", bounds=">0")

  def __post_init__(self):
    super().__post_init__()
    if self.batch_size > self.train_size:
      raise ValueError(f"batch_size must be <= train_size, got {self.batch_size}")


def _bisect_sigma(eps_fn, target: float) -> float:
  """Smallest sigma (to 1e-4 relative) with eps_fn(sigma) <= target; eps_fn decreasing."""
  return accounting.smallest_noise(eps_fn, target, 0.1, 1.0, factor=2.0)


def _correct_counts(w_RxD, x, y) -> np.ndarray:
  """Correct predictions of each model on (x, y): int64[R]."""
  return models.correct_predictions(models.logistic_regression(x.shape[1]), {"w": w_RxD}, x, y,
                                    float64=True).sum(axis=1)


def _accounting_curves(sigma, q, steps, score_noise):
  """eps(delta) of repeat-and-select against E[K], per shape (the figure's numbers)."""
  orders = rdp.DEFAULT_ORDERS
  base = steps * rdp.subsampled_gaussian_rdp(q, sigma, orders) + rdp.gaussian_rdp(score_noise,
                                                                                  orders)
  one = rdp.rdp_to_epsilon(orders, base, DELTA)[0]
  curves = {}
  for shape in FIGURE_SHAPES:
    curves[str(shape)] = [rdp.rdp_to_epsilon(orders, rdp.repeat_and_select_rdp(
        orders, base, mean_runs=m, shape=shape), DELTA)[0] for m in FIGURE_MEANS]
  return one, curves


def _figure(out_dir, one, curves, name="tuning_epsilon.png"):
  os.makedirs(out_dir, exist_ok=True)
  with _plots.figure(out_dir, name, figsize=(6, 4)) as (fig, ax):
    labels = {"0.0": "eta = 0 (logarithmic)", "1.0": "eta = 1 (geometric)", "poisson": "Poisson"}
    for key, eps in curves.items():
      ax.plot(FIGURE_MEANS, eps, marker="o", label=labels[key])
    ax.axhline(one, color="gray", ls="--", label="one run (K = 1)")
    ax.set_xscale("log")
    ax.set_xlabel("mean number of runs E[K]")
    ax.set_ylabel(f"total eps at delta = {DELTA:g}")
    ax.set_title("Repeat and select: the cost of tuning")
    ax.legend()
  return name


def run(cfg: TuningConfig, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs the three tuning procedures `seeds` times each; returns `_common.finish`'s dict."""
  del progress   # a few seconds per method; no bar
  key = jax.random.key(cfg.seed)
  k_data, k_naive, k_em, k_rs = jax.random.split(key, 4)
  pub, tr, va, te = credit.sample_split(k_data, (_PUBLIC, cfg.train_size, cfg.val_size,
                                                 cfg.test_size))   # one draw of the world
  scaler = credit.PublicScaler.fit(pub.x_NxF)
  x, y = credit.linear_features(tr.x_NxF, scaler), tr.y_N
  x_val, y_val = np.asarray(credit.linear_features(va.x_NxF, scaler)), np.asarray(va.y_N)
  x_test, y_test = np.asarray(credit.linear_features(te.x_NxF, scaler)), np.asarray(te.y_N)
  n, dim = x.shape
  model = models.logistic_regression(dim)
  q = cfg.batch_size / n
  steps = max(1, int(round(cfg.epochs / q)))
  settings = [(c, s / c) for c in cfg.clip_norms for s in cfg.step_sizes]
  num_c = len(settings)

  def cfgs_at(sigma):
    return [dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=q, num_steps=steps, l2_clip_norm=c,
                              learning_rate=lr, noise_multiplier=sigma, delta=DELTA)
            for c, lr in settings]

  # Noise of each method at the same total eps.
  sigma_naive = accounting.calibrate_noise(cfg.epsilon, q, steps, DELTA)
  sigma_em = accounting.calibrate_noise(cfg.epsilon, q, num_c * steps, DELTA)
  sigma_rs = _bisect_sigma(lambda s: accounting.tuned_dpsgd_epsilon(
      s, q, steps, DELTA, mean_runs=cfg.mean_runs, shape=cfg.shape,
      score_noise_multiplier=cfg.score_noise), cfg.epsilon)
  eps_rs = accounting.tuned_dpsgd_epsilon(sigma_rs, q, steps, DELTA, mean_runs=cfg.mean_runs,
                                          shape=cfg.shape, score_noise_multiplier=cfg.score_noise)
  eps_em = tuning.exponential_selection_epsilon(sigma_em, q, steps, num_c, DELTA, cfg.epsilon)
  eps_naive_train = accounting.dpsgd_epsilon(sigma_naive, q, num_c * steps, DELTA)
  eps_rs_one_run = accounting.dpsgd_epsilon(sigma_rs, q, steps, DELTA)

  def train_all(k, sigma):
    """Every candidate once per repetition, all repetitions in one call: w [seeds, C, D]."""
    idx = np.tile(np.arange(num_c), cfg.seeds)
    out = tuning.dpsgd_runs(jax.random.split(k, idx.size), idx, x, y, cfgs_at(sigma), model,
                            pad_to=_PAD)
    return np.asarray(out.params["w"]).reshape(cfg.seeds, num_c, dim)

  acc = {"naive": [], "em": [], "rs": []}
  chosen = {"naive": [], "em": [], "rs": []}
  w_naive = train_all(k_naive, sigma_naive)
  k_em_train, k_em_sel = jax.random.split(k_em)
  w_em = train_all(k_em_train, sigma_em)
  for rep in range(cfg.seeds):
    # 3. naive: exact validation accuracy, no noise anywhere in the selection.
    w = w_naive[rep]
    j = int(np.argmax(_correct_counts(w, x_val, y_val)))
    acc["naive"].append(_correct_counts(w[j:j + 1], x_test, y_test)[0] / y_test.size)
    chosen["naive"].append(j)
    # 2. exponential mechanism on the validation counts.
    w = w_em[rep]
    j = tuning.select_by_exponential_mechanism(jax.random.fold_in(k_em_sel, rep),
                                               _correct_counts(w, x_val, y_val), cfg.epsilon)
    acc["em"].append(_correct_counts(w[j:j + 1], x_test, y_test)[0] / y_test.size)
    chosen["em"].append(j)
    # 1. repeat and select with noisy validation counts as the scores.
    k_rep = jax.random.fold_in(k_rs, rep)

    def base_fn(keys_R, cand_R, k_rep=k_rep):
      k_score = jax.random.fold_in(k_rep, 1)
      w_r = np.asarray(tuning.dpsgd_runs(keys_R, cand_R, x, y, cfgs_at(sigma_rs), model,
                                         pad_to=_PAD).params["w"])
      scores = tuning.noisy_count_scores(k_score, _correct_counts(w_r, x_val, y_val),
                                         cfg.score_noise)
      return {"w": w_r}, scores

    res = tuning.repeat_and_select(jax.random.fold_in(k_rep, 0), base_fn, num_c,
                                   mean_runs=cfg.mean_runs, shape=cfg.shape)
    acc["rs"].append(_correct_counts(res.output["w"][None], x_test, y_test)[0] / y_test.size)
    chosen["rs"].append(res.candidate)

  one, curves = _accounting_curves(sigma_rs, q, steps, cfg.score_noise)
  eta_label = f"eta = {cfg.shape:g}"
  methods = [
      ("repeat and select", "rs", sigma_rs, f"E[K] = {cfg.mean_runs:g}, {eta_label}", eps_rs,
       eps_rs, LECTURE["rs"]),
      ("exponential mechanism on validation split", "em", sigma_em, f"all {num_c}", eps_em,
       eps_em, LECTURE["em"]),
      ("naive (tune freely, account the final model)", "naive", sigma_naive, f"all {num_c}",
       math.inf, cfg.epsilon, LECTURE["naive"]),
  ]
  rows, rec_methods = [], {}
  for label, k, sigma, runs, total, claimed, lec in methods:
    a = np.asarray(acc[k], np.float64)
    rows.append([label, sigma, runs, total, claimed, float(a.mean()), float(a.std()), lec])
    rec_methods[k] = {"sigma": sigma, "total_epsilon": total, "claimed_epsilon": claimed,
                      "test_accuracy": a.tolist(), "chosen_candidate": chosen[k]}
  rec_methods["naive"]["training_records_epsilon"] = eps_naive_train
  rec_methods["rs"]["one_run_epsilon"] = eps_rs_one_run
  table1 = _common.Table(
      f"Tuning {num_c} (C, learning rate) settings at total ε = {cfg.epsilon:g}, δ = {DELTA:g} "
      f"(credit world, n = {n} train + {cfg.val_size} validation, B = {cfg.batch_size}, "
      f"T = {steps}; test accuracy over {cfg.seeds} repetitions)",
      ["method", "σ per run", "trainings", "total ε", "claimed ε", "test accuracy",
       "sd", "lecture / paper"], rows,
      note=(f"Naive: each run is ε = {cfg.epsilon:g}, but the validation records are read "
            f"without noise (total ε = ∞, not DP) and the training records are in {num_c} "
            f"trainings (ε = {eps_naive_train:.3g} for them alone). Repeat and select: one "
            f"run alone would be ε = {eps_rs_one_run:.3g}; its scores are correct counts on "
            f"the validation split plus rounded N(0, {cfg.score_noise:g}²), accounted in Q."))
  rows2 = [[m] + [curves[str(s)][i] for s in FIGURE_SHAPES] + [one]
           for i, m in enumerate(FIGURE_MEANS)]
  table2 = _common.Table(
      f"Repeat-and-select ε (δ = {DELTA:g}) against E[K], base run σ = {sigma_rs:.3g}, "
      f"q = {q:.4g}, T = {steps}, score noise {cfg.score_noise:g}",
      ["E[K]", "eta = 0 (logarithmic)", "eta = 1 (geometric)", "Poisson", "one run"], rows2,
      note=("Papernot & Steinke (Theorems 2, 6): the cost grows like log E[K] / (λ - 1) "
            "plus a constant; for pure ε-DP runs the limit is (2 + η) ε (3ε for the "
            "geometric law, Liu & Talwar 2019). At E[K] = 1 the truncated laws are K = 1 "
            "surely, so ε equals one run's."))
  figures = [_figure(out_dir, one, curves)]
  record = {"n_train": n, "n_val": cfg.val_size, "n_test": cfg.test_size, "q": q,
            "steps": steps, "settings": [list(s) for s in settings], "methods": rec_methods,
            "accounting": {"one_run_epsilon": one, "means": list(FIGURE_MEANS),
                           "epsilon_by_shape": curves}}
  ma = {k: float(np.mean(v)) for k, v in acc.items()}
  summary = (f"At total ε = {cfg.epsilon:g}: repeat and select (σ = {sigma_rs:.3g}) reaches "
             f"test accuracy {ma['rs']:.3f}, the exponential mechanism over {num_c} trainings "
             f"(σ = {sigma_em:.3g}, {num_c}-fold composition) {ma['em']:.3f}, and the naive way "
             f"{ma['naive']:.3f} while claiming ε = {cfg.epsilon:g} and in fact not being DP "
             f"(its training records alone spend ε = {eps_naive_train:.3g}).")
  return _common.finish(cfg, out_dir, NAME, record, tables=[table1, table2], figures=figures,
                        summary=summary, quiet=quiet)


def main():
  _common.app_run(NAME, TuningConfig, run)


if __name__ == "__main__":
  main()
