"""Membership inference, then DP as the defence (lecture §6.1, code 04 demo 2; HW4).

128 models of the lecture's overfitting cubic logistic regression, each on a random half of 300
credit records; each model in turn the target, the other 127 its shadows, one vmapped run. Rows:
overfit (Newton), lambda = 1e-2, clipped SGD without noise, DP-SGD at eps = 8, 4, 2, 1 (q = 0.2,
T = 500, C = 1, delta = 1e-5). Columns: test accuracy, loss-threshold attack (Yeom), Shokri's
shadow attack, online LiRA (Carlini et al. 2022) at 1% and 0.1% FPR, the DP bound on TPR at 1%.

Command:   python -m experiments.mia          (about 40-70 s of CPU)
Expected (seed 0): test accuracy 0.719 (overfit), 0.750 (lambda), 0.752 (clipped), 0.738 / 0.723
/ 0.700 / 0.669 at eps = 8 / 4 / 2 / 1; loss advantage 0.156 with TPR@1% 0.009 (overfit); LiRA
TPR@1% 0.049, 0.052, 0.040, then 0.015 / 0.013 / 0.009 / 0.010; DP bound 1.000 / 0.546 / 0.074 /
0.027: DP pushes LiRA to the floor by eps ~ 2, far below the bound.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import dpsgd, fitting, metrics, models, tradeoff
from dpjax.attacks import mia
from dpjax.data import credit
from experiments import _common, _plots

NAME = "mia"
# The lecture's printed numbers (§6.1), by row and column.
LECTURE = {
    ("overfit", "loss_advantage"): 0.261, ("overfit", "loss_tpr"): 0.009,
    ("overfit", "lira_tpr"): 0.067, ("overfit", "test_accuracy"): None,
    ("l2=1e-2", "lira_tpr"): 0.068, ("l2=1e-2", "test_accuracy"): 0.737,
    ("clipped", "lira_tpr"): 0.057, ("clipped", "test_accuracy"): 0.737,
    ("eps=8", "lira_tpr"): 0.018, ("eps=8", "test_accuracy"): 0.711, ("eps=8", "bound"): 1.000,
    ("eps=4", "test_accuracy"): 0.682,
    ("eps=2", "lira_tpr"): 0.011, ("eps=2", "test_accuracy"): 0.656, ("eps=2", "bound"): 0.074,
    ("eps=1", "test_accuracy"): 0.614,
}
_OVERFIT_L2 = 1e-4
# The ROC curves are recorded at these false-positive rates (the figure's log axis).
_ROC_FPR = np.geomspace(1e-4, 1.0, 201)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MiaConfig(_common.ExperimentConfig):
  """The pool, the models and the DP-SGD rows (defaults = the lecture's)."""
  num_models: int = _common.option(128, "Models (targets and shadows).", bounds=">=4")
  pool_size: int = _common.option(300, "Records in the pool.", bounds=">=4")
  epsilons: tuple[float, ...] = _common.option((8.0, 4.0, 2.0, 1.0), "DP-SGD eps rows.",
                                               bounds=">0")
  num_steps: int = _common.option(500, "DP-SGD steps T.", bounds=">=1")
  sampling_prob: float = _common.option(0.2, "DP-SGD Poisson sampling rate q.", bounds="(0,1]")
  delta: float = _common.option(1e-5, "delta of DP-SGD and of the DP bound.", bounds="(0,1)")
  test_size: int = _common.option(20_000, "People in the test sample.", bounds=">=1")

  def __post_init__(self):
    super().__post_init__()
    if self.num_models % 2:   # LiRA's design: every record in exactly half of the models
      raise ValueError(f"num_models must be an even integer >= 4, got {self.num_models}")


def _lira_keep(key, m, n):
  """bool[M, N]: every record in exactly M/2 models (LiRA's design), ~N/2 per model."""
  u = jax.random.uniform(key, (m, n))
  order = jnp.argsort(u, axis=0)
  return np.asarray(jnp.argsort(order, axis=0) < m // 2)


def _row_metrics(name, w_MxD, x, y, keep, x_test, y_test, eps, delta):
  model, params = models.logistic_regression(x.shape[1]), {"w": w_MxD}
  logits = np.asarray(x, np.float64) @ np.asarray(w_MxD, np.float64).T     # [N, M]
  phi = mia.logit_confidence(logits.T, np.asarray(y))          # [M, N]
  loss = np.logaddexp(0.0, -phi)
  acc = float(models.correct_predictions(model, params, x_test, y_test, float64=True).mean())
  loss_s = mia.loss_attack_scores(loss)
  lira_s = mia.lira_scores(phi, keep)
  shokri_s = mia.shokri_attack_scores(phi, np.asarray(y), keep)
  lab = keep.ravel()
  out = {
      "row": name, "epsilon": eps, "test_accuracy": acc,
      "train_accuracy": float(models.correct_predictions(model, params, x, y,
                                                          float64=True)[keep].mean()),
      "loss_advantage": metrics.advantage(loss_s.ravel(), lab),
      "loss_tpr": float(metrics.tpr_at_fpr(loss_s.ravel(), lab, 0.01)),
      "shokri_tpr": float(metrics.tpr_at_fpr(shokri_s.ravel(), lab, 0.01)),
      "lira_tpr": float(metrics.tpr_at_fpr(lira_s.ravel(), lab, 0.01)),
      "lira_tpr_0.1%": float(metrics.tpr_at_fpr(lira_s.ravel(), lab, 0.001)),
      "lira_auc": metrics.roc_auc(lira_s.ravel(), lab),
      "bound": (tradeoff.dp_tpr_bound(0.01, eps, delta) if eps is not None else 1.0),
      "floor": 0.01,
  }
  curves = {"lira": metrics.tpr_at_fpr(lira_s.ravel(), lab, _ROC_FPR).tolist(),
            "loss": metrics.tpr_at_fpr(loss_s.ravel(), lab, _ROC_FPR).tolist()}
  return out, curves


def run(cfg: MiaConfig, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs the attack-then-defend experiment; returns `_common.finish`'s dict."""
  seed, num_models, pool_size, epsilons = cfg.seed, cfg.num_models, cfg.pool_size, cfg.epsilons
  num_steps, sampling_prob, delta, test_size = (cfg.num_steps, cfg.sampling_prob, cfg.delta,
                                                cfg.test_size)
  key = jax.random.key(seed)
  k_pub, k_pool, k_test, k_keep, k_train = jax.random.split(key, 5)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 2000).x_NxF)
  pool = credit.sample(k_pool, pool_size)
  test = credit.sample(k_test, test_size)
  x = credit.cubic_features(pool.x_NxF, scaler)
  x_test = credit.cubic_features(test.x_NxF, scaler)
  y = pool.y_N
  keep = _lira_keep(k_keep, num_models, pool_size)
  n_private = pool_size // 2
  model = models.logistic_regression(x.shape[1])

  plan = [("overfit", None, "newton", _OVERFIT_L2), ("l2=1e-2", None, "newton", 1e-2),
          ("clipped", None, "dpsgd", 0.0)] + [(f"eps={e:g}", float(e), "dpsgd", None)
                                               for e in epsilons]
  rows, curves = [], {}
  for i, (name, eps, kind, arg) in enumerate(tqdm(plan, desc="MIA rows", disable=not progress)):
    if kind == "newton":
      w = fitting.fit_logistic_many(x, y, jnp.asarray(keep), l2=arg, num_iters=40,
                                    max_step_norm=10.0)
    else:
      train_cfg = dpsgd.DpSgdConfig(dataset_size=n_private, sampling_prob=sampling_prob,
                                    num_steps=num_steps, delta=delta,
                                    noise_multiplier=0.0)
      if eps is not None:
        train_cfg = train_cfg.calibrate(eps)
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = dpsgd.train_many(jax.random.fold_in(k_train, i), x, y, jnp.asarray(keep),
                             train_cfg, model,
                             perf=dpsgd.PerformanceFlags(progress=False)).params["w"]
    r, c = _row_metrics(name, w, x, y, keep, x_test, test.y_N, eps, delta)
    if eps is not None:
      r["sigma"] = train_cfg.noise_multiplier
    rows.append(r)
    curves[name] = c

  record = {"rows": rows, "roc": {"fpr": _ROC_FPR.tolist(), "tpr": curves},
            "lecture": {f"{a}/{b}": v for (a, b), v in LECTURE.items()}}
  fig_name = _plot(out_dir, record,
                   f"Membership inference, {num_models} models x {pool_size} records")

  def lec(row, col):
    return LECTURE.get((row, col))

  table = _common.Table(
      title=f"Attack, then defend: {num_models} models, each on half of {pool_size} records "
            f"(DP-SGD q = {sampling_prob}, T = {num_steps}, C = 1, delta = {delta:g})",
      columns=["row", "test acc", "lecture", "loss adv", "lecture", "loss TPR@1%", "lecture",
               "Shokri TPR@1%", "LiRA TPR@1%", "lecture", "LiRA TPR@0.1%", "DP bound TPR@1%",
               "lecture", "noise floor"],
      rows=[[r["row"], r["test_accuracy"], lec(r["row"], "test_accuracy"), r["loss_advantage"],
             lec(r["row"], "loss_advantage"), r["loss_tpr"], lec(r["row"], "loss_tpr"),
             r["shokri_tpr"], r["lira_tpr"], lec(r["row"], "lira_tpr"), r["lira_tpr_0.1%"],
             r["bound"], lec(r["row"], "bound"), r["floor"]] for r in rows],
      note=("TPR@FPR pools all (target model, record) pairs: "
            f"{keep.sum()} members, {keep.size - keep.sum()} non-members. The lecture used "
            "its own credit data, so accuracies differ; bounds are pure math."))
  by = {r["row"]: r for r in rows}
  summary = (
      f"(1) Overfit: loss-attack advantage {by['overfit']['loss_advantage']:.3f} but TPR@1% "
      f"{by['overfit']['loss_tpr']:.3f} (floor 0.010); LiRA {by['overfit']['lira_tpr']:.3f} "
      f"(lecture 0.261 / 0.009 / 0.067). (2) λ = 1e-2 and clipping: test accuracy "
      f"{by['l2=1e-2']['test_accuracy']:.3f} / {by['clipped']['test_accuracy']:.3f}, LiRA "
      f"{by['l2=1e-2']['lira_tpr']:.3f} / {by['clipped']['lira_tpr']:.3f} (lecture 0.068 / "
      "0.057). (3) DP: LiRA TPR@1% " + ", ".join(
          f"{r['lira_tpr']:.3f} at ε = {r['epsilon']:g}" for r in rows if r["epsilon"])
      + "; test accuracy " + ", ".join(f"{r['test_accuracy']:.3f}" for r in rows if r["epsilon"])
      + " (lecture 0.711, 0.682, 0.656, 0.614). (4) The DP bound on TPR@1% is "
      + ", ".join(f"{r['bound']:.3f}" for r in rows if r["epsilon"])
      + ": LiRA stays far below it.")
  tables = [table]
  return _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=[fig_name],
                        summary=summary, quiet=quiet)


def _plot(out_dir: str, record: dict, title: str) -> str:
  """LiRA's ROC per row and the loss attack's on the overfit model, from the record."""
  fpr, tpr = record["roc"]["fpr"], record["roc"]["tpr"]
  fig_name = "mia_roc.png"
  with _plots.figure(out_dir, fig_name, figsize=(5.2, 4.4), dpi=130) as (fig, ax):
    sel = {f"LiRA, {k}": (fpr, v["lira"]) for k, v in tpr.items()}
    sel["loss attack, overfit"] = (fpr, tpr["overfit"]["loss"])
    metrics.plot_roc_loglog(ax, sel, min_rate=1e-4, title=title)
  return fig_name


def main():
  _common.app_run(NAME, MiaConfig, run)


if __name__ == "__main__":
  main()
