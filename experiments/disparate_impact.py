"""Disparate impact of DP-SGD: who pays for privacy? (lecture §7, code 05; Bagdasaryan et al. 2019)

1,000 credit-world training records (group 1 ~ 10 %), a logistic regression that SEES the group
(linear features plus group and group x history), 100 seeds in one vmapped DP-SGD program, a
40,000-person test set; q = 0.05, T = 400, C = 1, lr 0.5, delta = 1e-5, RDP. Demo 1: per-group
test accuracy and TPR gap at eps in {inf, clip only, 8, 4, 2, 1, 0.5}, and the ratio of accuracy
drops (group 1 / group 0). Demo 2: per-group loss, gradient norm, clipped fraction, seed-to-seed
std of the coefficients. Demo 3: the drop ratio at eps = 0.5 for 10 % and 30 % with group
features, and 10 % group-blind.

Command:  python -m experiments.disparate_impact        (about 30-60 s of CPU)
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import dpsgd, metrics, models
from dpjax.data import credit
from experiments import _common, _plots

NAME = "disparate_impact"
LECTURE = {"drop_ratio": 8.5, "tpr_gap": "+0.141 to +0.166",
           "loss": (0.456, 0.527), "grad_norm": (0.688, 1.004), "clipped": (0.248, 0.408),
           "std_history": 0.33, "std_group": 1.07, "std_group_history": 0.89,
           "demo3": {"10% sees group": 7.9, "30% sees group": 2.1, "10% group-blind": 2.6}}
FEATURE_NAMES = ("intercept", "income", "debt_ratio", "history", "delinquent", "group",
                 "group*history")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DisparateImpactConfig(_common.ExperimentConfig):
  """The world, DP-SGD and demo settings (defaults = the module docstring)."""
  n_train: int = _common.option(1000, "Training records.", bounds=">=1")
  n_test: int = _common.option(40_000, "Test records.", bounds=">=1")
  seeds: int = _common.option(100, "DP-SGD seeds trained together (vmapped; >= 2 for a "
                              "spread); the lecture used 20.", bounds=">=2")
  minority_share: float = _common.option(0.1, "Share of group 1 (demo 1, 2).", bounds="(0,1)")
  epsilons: tuple[float, ...] = _common.option((8.0, 4.0, 2.0, 1.0, 0.5), "Finite epsilons.",
                                               bounds=">0")
  batch_size: int = _common.option(50, "Expected batch size q*n.", bounds=">=1")
  epochs: int = _common.option(20, "Epochs (T = epochs * n / batch).", bounds=">=1")
  learning_rate: float = _common.option(0.5, "SGD learning rate.", bounds=">0")
  l2_clip_norm: float = _common.option(1.0, "Clipping norm C.", bounds=">0")
  delta: float = _common.option(1e-5, "Target delta.", bounds="(0,1)")
  demo3: bool = _common.option(True, "Also run demo 3 (three worlds at the last epsilon).")

  def __post_init__(self):
    super().__post_init__()
    if self.batch_size > self.n_train:
      raise ValueError(f"batch_size must be in [1, n_train], got {self.batch_size} "
                       f"(n_train={self.n_train})")


def _eps_text(e: float) -> str:
  """A setting's name in the record: short, and float(text) == e exactly."""
  return f"{e:g}" if float(f"{e:g}") == e else repr(e)


def features(x_NxF: jax.Array, scaler: credit.PublicScaler, group_aware: bool) -> jax.Array:
  """[1, z_income, z_debt, z_history, z_delinquent, group, group * z_history] (the first five
  if not group_aware), z_* standardised on the public sample."""
  lin = credit.linear_features(x_NxF, scaler)  # [N, 6]; column 5 = standardised group
  if not group_aware:
    return lin[:, :5]
  g = jnp.asarray(x_NxF, jnp.float32)[:, 4]
  return jnp.concatenate([lin[:, :5], g[:, None], (g * lin[:, 3])[:, None]], axis=1)


def _setting_label(s: str) -> str:
  """The table's name of setting s ("inf", "clip" or an epsilon's text)."""
  return {"inf": "∞ (no clip, no noise)", "clip": "clip only (σ = 0)"}.get(s) or f"{float(s):g}"


def _config(eps, n, batch, epochs, lr, clip, delta) -> dpsgd.DpSgdConfig:
  common = dict(dataset_size=n, sampling_prob=batch / n, num_steps=int(round(epochs * n / batch)),
                learning_rate=lr, delta=delta)
  if eps == "inf":
    return dpsgd.DpSgdConfig(l2_clip_norm=math.inf, noise_multiplier=0.0, **common)
  if eps == "clip":
    return dpsgd.DpSgdConfig(l2_clip_norm=clip, noise_multiplier=0.0, **common)
  return dpsgd.DpSgdConfig(l2_clip_norm=clip, **common).calibrate(float(eps))


def _group_metrics(w_MxD, x_test, y_test, g_test):
  """Per-seed accuracy and TPR per group (`metrics.per_group_rates`): dict of float64[M]."""
  y = np.asarray(y_test) == 1
  ok = models.correct_predictions(models.logistic_regression(w_MxD.shape[1]), {"w": w_MxD},
                                  x_test, y_test)
  rates = [metrics.per_group_rates(np.where(y, ok_m, ~ok_m), y, g_test) for ok_m in ok]
  return {f"{k}{g}": np.array([r[g][name] for r in rates])
          for g in (0, 1) for k, name in (("acc", "accuracy"), ("tpr", "tpr"))}


def _mean_se(a) -> tuple[float, float]:
  a = np.asarray(a, np.float64)
  return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0


def _ratio_se(ratio, d0, se0, d1, se1):
  """Delta-method standard error of d1 / d0 (independent estimates)."""
  if ratio is None or d0 == 0 or d1 == 0:
    return None
  return float(abs(ratio) * math.hypot(se0 / d0, se1 / d1))


def _train(key, x, y, cfg, m, stats=False):
  return dpsgd.train_many(key, x, y, jnp.ones((m, x.shape[0]), bool), cfg,
                          models.logistic_regression(x.shape[1]),
                          per_example_stats=stats, perf=dpsgd.PerformanceFlags(progress=False))


def run(cfg: DisparateImpactConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Runs demos 1-3 (demo 3 only if `cfg.demo3`); returns `_common.finish`'s dict."""
  seed, n_train, n_test, seeds = cfg.seed, cfg.n_train, cfg.n_test, cfg.seeds
  minority_share, demo3 = cfg.minority_share, cfg.demo3
  epsilons = [_eps_text(e) for e in cfg.epsilons]   # setting names, as on the command line
  k_pub, k_train, k_test, k_dp, k_demo3, k_train30 = jax.random.split(jax.random.key(seed), 6)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 5000, minority_share).x_NxF)
  test = credit.sample(k_test, n_test, minority_share)
  test30 = credit.sample(k_test, n_test, 0.3)
  train = credit.sample(k_train, n_train, minority_share)
  train30 = credit.sample(k_train30, n_train, 0.3)
  hp = dict(n=n_train, batch=cfg.batch_size, epochs=cfg.epochs, lr=cfg.learning_rate,
            clip=cfg.l2_clip_norm, delta=cfg.delta)
  settings = ["inf", "clip"] + list(epsilons)
  x_tr, x_te = features(train.x_NxF, scaler, True), features(test.x_NxF, scaler, True)
  g_tr = np.asarray(train.group_N)
  record = {"n_group1_train": int(g_tr.sum()), "settings": []}
  demo1_rows, demo2_rows, coef_rows, per_setting = [], [], [], {}
  bar = tqdm(total=len(settings) + (6 if demo3 else 0), desc="disparate impact",
             disable=not progress)
  for s, k in zip(settings, jax.random.split(k_dp, len(settings))):
    train_cfg = _config(s, **hp)
    res = _train(k, x_tr, train.y_N, train_cfg, seeds, stats=True)
    w = np.asarray(res.params["w"])  # [M, D]
    per_setting[s] = met = _group_metrics(w, x_te, test.y_N, test.group_N)
    st = {k_: np.asarray(v) for k_, v in res.stats.items()}
    sampled = st["times_sampled"]
    lr_model = models.logistic_regression(x_tr.shape[1])
    loss = np.asarray(jax.vmap(lambda wi: models.per_example_loss(
        lr_model, {"w": wi}, x_tr, train.y_N))(jnp.asarray(w)))  # [M, N]
    row_stats = {}
    for gk in (0, 1):
      sel = g_tr == gk
      row_stats[f"loss{gk}"] = float(loss[:, sel].mean())
      row_stats[f"norm{gk}"] = float(st["norm_sum"][:, sel].sum() / sampled[:, sel].sum())
      row_stats[f"clipped{gk}"] = float(st["times_clipped"][:, sel].sum() / sampled[:, sel].sum())
    record["settings"].append({
        "setting": s, "sigma": train_cfg.noise_multiplier,
        "epsilon": train_cfg.epsilon() if s not in ("inf", "clip") else math.inf,
        **{k_: _mean_se(v) for k_, v in met.items()}, "coef_mean": w.mean(0).tolist(),
        "coef_std": w.std(0, ddof=1).tolist(), **row_stats})
    bar.update(1)

  base = per_setting["inf"]
  for e in record["settings"]:
    s = e["setting"]
    met = per_setting[s]
    d0 = base["acc0"].mean() - met["acc0"]
    d1 = base["acc1"].mean() - met["acc1"]
    # The ratio is only meaningful when group 0's drop is clearly positive (> 2 s.e.).
    se0 = math.hypot(_mean_se(base["acc0"])[1], _mean_se(met["acc0"])[1])
    se1 = math.hypot(_mean_se(base["acc1"])[1], _mean_se(met["acc1"])[1])
    ratio = float(d1.mean() / d0.mean()) if s != "inf" and d0.mean() > 2 * se0 else None
    ratio_se = _ratio_se(ratio, d0.mean(), se0, d1.mean(), se1)
    e.update(drop0=float(d0.mean()), drop1=float(d1.mean()), drop_ratio=ratio,
             drop_ratio_se=ratio_se, tpr_gap=_mean_se(met["tpr0"] - met["tpr1"]))
    demo1_rows.append([_setting_label(s), e["sigma"], e["acc0"][0], e["acc1"][0], e["acc1"][1],
                       e["drop0"], e["drop1"], ratio, ratio_se,
                       LECTURE["drop_ratio"] if s == epsilons[-1] else None,
                       e["tpr_gap"][0], LECTURE["tpr_gap"] if s not in ("inf",) else None])
    demo2_rows.append([_setting_label(s), e["loss0"], e["loss1"], e["norm0"], e["norm1"],
                       e["clipped0"], e["clipped1"]])
    coef_rows.append([_setting_label(s)] + [f"{m_:+.2f} ± {sd:.2f}" for m_, sd in
                                            zip(e["coef_mean"], e["coef_std"])])

  tables = [_common.Table(
      title=(f"Demo 1: test accuracy per group ({seeds} seeds; group 1 = "
             f"{record['n_group1_train']} of {n_train} training records)"),
      columns=["ε", "σ", "acc group 0", "acc group 1", "± s.e.", "drop 0", "drop 1",
               "drop ratio 1/0", "± s.e.", "lecture", "TPR gap (0 − 1)", "lecture"],
      rows=demo1_rows,
      note=("Drops are against ε = ∞ (no clipping, no noise), averaged over seeds; a ratio is "
            "shown only where group 0's drop exceeds 2 standard errors. The lecture reported "
            "the ratio at ε = 0.5 and the TPR gap's range over ε."))]
  l_ = LECTURE
  demo2_rows.append(["lecture (ε not stated)", l_["loss"][0], l_["loss"][1], l_["grad_norm"][0],
                     l_["grad_norm"][1], l_["clipped"][0], l_["clipped"][1]])
  tables.append(_common.Table(
      title="Demo 2a: clipping hits group 1 harder (training set, C = 1)",
      columns=["ε", "mean loss g0", "mean loss g1", "grad norm g0", "grad norm g1",
               "frac clipped g0", "frac clipped g1"],
      rows=demo2_rows,
      note=("Loss: final models on their training records; gradient norm and fraction "
            "clipped: over every step at which a record was sampled (per_example_stats).")))
  std = dict(zip(FEATURE_NAMES, record["settings"][-1]["coef_std"]))
  tables.append(_common.Table(
      title=f"Demo 2b: seed-to-seed std of the coefficients at ε = {float(epsilons[-1]):g}",
      columns=["parameter", "supported by", "std across seeds", "lecture"],
      rows=[["history", "everyone", std["history"], l_["std_history"]],
            ["group (intercept)", "group 1 only", std["group"], l_["std_group"]],
            ["group × history", "group 1 only", std["group*history"], l_["std_group_history"]]],
      note=("Both group columns use the raw 0/1 group bit (history is standardised on the "
            "public sample), so their coefficients are group-1 shifts of the intercept and "
            "of the history slope.")))
  tables.append(_common.Table(
      title="Coefficients (mean ± seed-to-seed std)", columns=["ε"] + list(FEATURE_NAMES),
      rows=coef_rows))

  # Demo 3: drop ratio at the smallest eps for three worlds.
  eps_last = float(epsilons[-1])
  worlds = [("10% sees group", train, test, True, minority_share),
            ("30% sees group", train30, test30, True, 0.3),
            ("10% group-blind", train, test, False, minority_share)] if demo3 else []
  demo3_rows, record["demo3"] = [], []
  wkeys = jax.random.split(k_demo3, max(1, 2 * len(worlds)))
  for i, (label, tr, te, aware, share) in enumerate(worlds):
    xtr, xte = features(tr.x_NxF, scaler, aware), features(te.x_NxF, scaler, aware)
    m_inf = _group_metrics(np.asarray(_train(wkeys[2 * i], xtr, tr.y_N, _config("inf", **hp),
                                             seeds).params["w"]), xte, te.y_N, te.group_N)
    bar.update(1)
    m_eps = _group_metrics(np.asarray(_train(wkeys[2 * i + 1], xtr, tr.y_N,
                                             _config(eps_last, **hp), seeds).params["w"]),
                           xte, te.y_N, te.group_N)
    bar.update(1)
    d0 = float(m_inf["acc0"].mean() - m_eps["acc0"].mean())
    d1 = float(m_inf["acc1"].mean() - m_eps["acc1"].mean())
    se0 = math.hypot(_mean_se(m_inf["acc0"])[1], _mean_se(m_eps["acc0"])[1])
    se1 = math.hypot(_mean_se(m_inf["acc1"])[1], _mean_se(m_eps["acc1"])[1])
    ratio = d1 / d0 if d0 != 0 else None
    ratio_se = _ratio_se(ratio, d0, se0, d1, se1)
    record["demo3"].append({"world": label, "share": share, "acc0_inf": float(m_inf["acc0"].mean()),
                            "acc1_inf": float(m_inf["acc1"].mean()), "drop0": d0, "drop1": d1,
                            "ratio": ratio, "ratio_se": ratio_se,
                            "n_group1_train": int(np.asarray(tr.group_N).sum())})
    demo3_rows.append([label, float(m_inf["acc0"].mean()), float(m_inf["acc1"].mean()), d0, d1,
                       ratio, ratio_se, LECTURE["demo3"][label]])
  bar.close()
  if worlds:
    tables.append(_common.Table(
        title=f"Demo 3: ratio of accuracy drops (group 1 / group 0) at ε = {eps_last:g} (fresh noise)",
        columns=["world", "acc g0 at ∞", "acc g1 at ∞", "drop g0", "drop g1", "ratio", "± s.e.",
                 "lecture"],
        rows=demo3_rows,
        note=("A ratio is unstable when group 0's drop is near zero; read it with the drops "
              "(± s.e.: delta method over seeds).")))

  return _common.finish(cfg, out_dir, NAME, record, tables=tables,
                        figures=[_plot(out_dir, record)], summary=_summary(record, epsilons),
                        quiet=quiet)


def _plot(out_dir: str, record: dict) -> str:
  """Accuracy per group against the setting, drawn from the record."""
  settings = [e["setting"] for e in record["settings"]]
  with _plots.figure(out_dir, "accuracy_per_group.png", figsize=(6, 3.6)) as (fig, ax):
    labels = [_setting_label(s) if s in ("inf", "clip") else f"ε={float(s):g}" for s in settings]
    for gk, name in ((0, "group 0 (majority)"), (1, "group 1 (minority)")):
      ax.errorbar(range(len(settings)), [e[f"acc{gk}"][0] for e in record["settings"]],
                  yerr=[e[f"acc{gk}"][1] for e in record["settings"]], marker="o", capsize=3,
                  label=name)
    ax.set_xticks(range(len(settings)))
    ax.set_xticklabels([lb.split(" (")[0] for lb in labels], fontsize=8)
    _plots.decorate(ax, ylabel="test accuracy",
                    title="DP-SGD accuracy per group (mean ± s.e. over seeds)", legend=8)
  return "accuracy_per_group.png"


def _summary(rec: dict, epsilons: list[str]) -> str:
  last = rec["settings"][-1]
  d3 = {d["world"]: d["ratio"] for d in rec["demo3"]}
  std = dict(zip(FEATURE_NAMES, last["coef_std"]))
  f = lambda v: "n/a" if v is None else f"{v:.1f}"  # noqa: E731
  return (
      f"At ε = {float(epsilons[-1]):g} group 0 loses {last['drop0']:.3f} accuracy and group 1 "
      f"{last['drop1']:.3f} (ratio {f(last['drop_ratio'])}; lecture 8.5). Group 1 vs group 0: "
      f"mean loss {last['loss1']:.3f} vs {last['loss0']:.3f} (lecture 0.527 vs 0.456), gradient "
      f"norm {last['norm1']:.3f} vs {last['norm0']:.3f} (1.004 vs 0.688), fraction clipped "
      f"{last['clipped1']:.3f} vs {last['clipped0']:.3f} (0.408 vs 0.248). Seed-to-seed std: "
      f"history {std['history']:.2f}, group {std['group']:.2f}, group x history "
      f"{std['group*history']:.2f} (lecture 0.33, 1.07, 0.89). Demo 3 ratios: "
      f"10 % sees group {f(d3.get('10% sees group'))}, "
      f"30 % {f(d3.get('30% sees group'))}, 10 % group-blind {f(d3.get('10% group-blind'))} "
      f"(lecture 7.9, 2.1, 2.6).")


def main():
  _common.app_run(NAME, DisparateImpactConfig, run)


if __name__ == "__main__":
  main()
