"""Example-level vs user-level DP-SGD for customers with several loans (lecture §5.5, exercise 6(d)).

Customers of `data.credit.sample_customers` hold 1-10 loans, one row per loan. Example-level
DP-SGD gives a k-loan customer (k eps, k e^((k-1) eps) delta)-DP by group privacy (Dwork & Roth
2014, Thm 2.2); user-level DP-SGD (privacy_unit = "user") Poisson-samples customers and clips
their summed gradient (McMahan et al. 2018, arXiv 1710.06963). (a) The example-level guarantee
per customer for k = 1..10 beside the lecture's "about 5 eps = 15", and test accuracy of both at
each eps. (b) At `audit_epsilon`, `audit_models` models per side with a canary customer
(`canary_loans` loans on a feature column no one uses) through `dpjax.audit.run`, scored by that
column's weight, bounded by `score_audit.score_bounds`' "clopper_pearson".

Command:   python -m experiments.user_level          (about 40 s of CPU time)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import dpsgd, models
from dpjax.accounting.composition import group_privacy
from dpjax.audit import run as audit_run
from dpjax.audit import score_audit
from dpjax.data import credit
from experiments import _common, _plots

NAME = "user_level"
_opt = _common.option
# Exercise 6(d), the lecture's reasonable answer: a customer with five loans under an
# example-level eps = 3 gets "about 5 eps = 15" by group privacy.
LECTURE_LOANS = 5
LECTURE_EPSILON = 3.0
LECTURE_GROUP_EPSILON = 15.0
_PUBLIC_CUSTOMERS = 600
UNITS = ("example", "user")


@dataclasses.dataclass(frozen=True, kw_only=True)
class UserLevelConfig(_common.ExperimentConfig):
  """What `run` computes (defaults: about a minute of CPU)."""
  epsilons: tuple[float, ...] = _opt((1.0, 2.0, 4.0), "eps of the accuracy comparison.",
                                     bounds=">0")
  delta: float = _opt(1e-5, "delta of every guarantee.", bounds="(0,1)")
  num_customers: int = _opt(2000, "Customers in the training world (part a).", bounds=">=10")
  test_customers: int = _opt(2000, "Customers in the test world (part a).", bounds=">=10")
  sampling_prob: float = _opt(0.05, "q per loan (example) or per customer (user).", bounds="(0,1]")
  num_steps: int = _opt(200, "DP-SGD steps T (part a).", bounds=">=1")
  l2_clip_norm: float = _opt(1.0, "C.", bounds=">0")
  learning_rate: float = _opt(1.0, "SGD learning rate.", bounds=">0")
  seeds: int = _opt(4, "Models per (unit, eps) in part (a).", bounds=">=1")
  audit_epsilon: float = _opt(1.0, "eps of the audited trainings (part b).", bounds=">0")
  audit_customers: int = _opt(100, "Real customers in the audit world.", bounds=">=10")
  canary_loans: int = _opt(8, "Loans of the canary customer.", bounds=">=1")
  canary_feature: float = _opt(
      4.0, "Value of the canary's dedicated feature (its gradient is ~C up to a weight "
      "of 0.27 at C = 1).", bounds=">0")
  audit_models: int = _opt(1000, "Models per side (canary in / out) per unit.", bounds=">=4")
  audit_sampling_prob: float = _opt(0.1, "q of the audited trainings.", bounds="(0,1]")
  audit_steps: int = _opt(100, "T of the audited trainings.", bounds=">=1")
  audit_learning_rate: float = _opt(0.1, "Learning rate of the audited trainings.", bounds=">0")
  confidence: float = _opt(0.95, "Confidence of the audit lower bounds.", bounds="(0,1)")


def _public_scaler(key) -> credit.PublicScaler:
  """Standardisation fit on a separate public draw of customers, never the private data."""
  return credit.PublicScaler.fit(credit.sample_customers(key, _PUBLIC_CUSTOMERS).x_NxF)


def _configs(cfg: UserLevelConfig, n_records: int, n_users: int, eps: float | None, *,
             audit: bool) -> dict:
  """{unit: DpSgdConfig} at eps (None: the noiseless clipped baseline)."""
  q = cfg.audit_sampling_prob if audit else cfg.sampling_prob
  t = cfg.audit_steps if audit else cfg.num_steps
  lr = cfg.audit_learning_rate if audit else cfg.learning_rate
  common = dict(sampling_prob=q, num_steps=t, l2_clip_norm=cfg.l2_clip_norm, delta=cfg.delta,
                learning_rate=lr, noise_multiplier=0.0)
  cfgs = {"example": dpsgd.DpSgdConfig(dataset_size=n_records, **common),
          "user": dpsgd.DpSgdConfig(dataset_size=n_users, privacy_unit="user", **common)}
  return cfgs if eps is None else {u: c.calibrate(eps) for u, c in cfgs.items()}


def _accuracy_part(cfg: UserLevelConfig, key) -> dict:
  """Part (a): group-privacy table and accuracy of both units at each eps."""
  k_pub, k_train, k_test, k_models = jax.random.split(key, 4)
  scaler = _public_scaler(k_pub)
  train = credit.sample_customers(k_train, cfg.num_customers)
  test = credit.sample_customers(k_test, cfg.test_customers)
  x, xt = credit.linear_features(train.x_NxF, scaler), credit.linear_features(test.x_NxF, scaler)
  yt = np.asarray(test.y_N)
  n = x.shape[0]
  model = models.logistic_regression(x.shape[1])
  eps_list = [float(e) for e in cfg.epsilons]
  levels = eps_list + [None]
  m = cfg.seeds * len(levels)
  index = np.repeat(np.arange(len(levels)), cfg.seeds)
  keep = jnp.ones((m, n), bool)
  acc, sigmas = {}, {}
  for unit in UNITS:
    cfgs = [_configs(cfg, n, train.num_users, e, audit=False)[unit] for e in levels]
    sigmas[unit] = [c.noise_multiplier for c in cfgs]
    extra = dict(sampler=cfgs[0].sampler(train.user_N)) if unit == "user" else {}
    out = dpsgd.train_sweep(k_models, x, train.y_N, keep, cfgs, index, model, **extra,
                            perf=dpsgd.PerformanceFlags(progress=False))
    w = np.asarray(out.params["w"], np.float64)
    pred = (w @ np.asarray(xt, np.float64).T) > 0
    a = np.mean(pred == yt[None, :], axis=1)
    acc[unit] = [(float(a[index == j].mean()), float(a[index == j].std()))
                 for j in range(len(levels))]
  loans = train.loans_U
  return {"num_loans": n, "num_customers": train.num_users, "mean_loans": float(loans.mean()),
          "max_loans": int(loans.max()), "bayes_accuracy": credit.bayes_accuracy(test.records()),
          "levels": [("noiseless" if e is None else e) for e in levels],
          "sigma": sigmas, "accuracy": acc}


def _audit_part(cfg: UserLevelConfig, key) -> dict:
  """Part (b): M models with and M without the canary customer, per unit.

  The audit world: real customers (linear features + a zero column) plus the canary
  customer, whose loans are zero everywhere (no intercept) except the dedicated column, so
  its gradient lies on that column alone and no real row has a gradient there.
  """
  k_world, k_models = jax.random.split(key)
  k_pub, k_data = jax.random.split(k_world)
  world = credit.sample_customers(k_data, cfg.audit_customers)
  feats = np.asarray(credit.linear_features(world.x_NxF, _public_scaler(k_pub)))
  x_real = np.concatenate([feats, np.zeros((feats.shape[0], 1), feats.dtype)], axis=1)
  k, d, m = cfg.canary_loans, x_real.shape[1], cfg.audit_models
  x_canary = np.zeros((k, d), x_real.dtype)
  x_canary[:, d - 1] = cfg.canary_feature
  users = np.concatenate([np.asarray(world.user_N), np.full((k,), world.num_users, np.int32)])
  in_MxC = np.repeat((np.arange(2 * m) < m)[:, None], k, axis=1)    # models 0..m-1: IN
  design = audit_run.canary_design(x_real, np.asarray(world.y_N), 2 * m,
                                   records=(x_canary, np.ones((k,), np.int32), in_MxC))
  n, num_users = int(design.x_NxF.shape[0]), world.num_users + 1
  model = models.logistic_regression(d)
  out = {}
  for unit, k_unit in zip(UNITS, jax.random.split(k_models, len(UNITS))):
    c = _configs(cfg, n, num_users, cfg.audit_epsilon, audit=True)[unit]
    comps = dict(sampler=c.sampler(users)) if unit == "user" else {}
    res = audit_run.train(k_unit, design, c, model, components=dict(
        comps, perf=dpsgd.PerformanceFlags(progress=False)))
    score = np.asarray(res.params["w"], np.float64)[:, -1]
    s_in, s_out = score[:m], score[m:]
    bounds = score_audit.score_bounds(s_in, s_out, delta=cfg.delta, confidence=cfg.confidence,
                                     claimed_epsilon=cfg.audit_epsilon)
    rng = (float(np.min(score)), float(np.max(score)))
    out[unit] = {
        "epsilon": c.epsilon(), "sigma": c.noise_multiplier, "dataset_size": c.dataset_size,
        "expected_batch_size": c.expected_batch_size,
        "bounds": {name: b.epsilon_lower for name, b in bounds.items()},
        "score_in_mean": float(s_in.mean()), "score_out_mean": float(s_out.mean()),
        "score_out_sd": float(s_out.std()), "score_in_sd": float(s_in.std()),
        "hist_in": np.histogram(s_in, bins=40, range=rng)[0],
        "hist_out": np.histogram(s_out, bins=40, range=rng)[0],
        "bin_edges": np.histogram_bin_edges(score, bins=40, range=rng),
        "models_in": int(s_in.size), "models_out": int(s_out.size)}
  out["num_records"], out["num_users"] = n, num_users
  return out


def _plot(out_dir: str, audit: dict, cfg: UserLevelConfig) -> str:
  name = "canary_scores.png"
  with _plots.figure(out_dir, name, ncols=2, figsize=(10, 3.8), dpi=110) as (fig, axes):
    for ax, unit in zip(axes, UNITS):
      r = audit[unit]
      edges = np.asarray(r["bin_edges"])
      mid = 0.5 * (edges[1:] + edges[:-1])
      width = edges[1] - edges[0]
      ax.bar(mid, r["hist_out"], width=width, alpha=0.6, label="canary customer OUT")
      ax.bar(mid, r["hist_in"], width=width, alpha=0.6, label="canary customer IN")
      ax.set_title(f"{unit}-level DP-SGD, ε = {cfg.audit_epsilon:g}: lower bound "
                   f"{r['bounds']['clopper_pearson']:.2f}", fontsize=9)
      ax.set_xlabel("weight on the canary's feature (attack score)")
      ax.set_ylabel("models")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Audit with a canary customer of {cfg.canary_loans} loans", fontsize=10)
  return name


def run(cfg: UserLevelConfig, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs parts (a) and (b), writes the audit figure; returns `_common.finish`'s dict."""
  del progress  # two trainings per part, each one compiled program
  k_acc, k_audit = jax.random.split(jax.random.key(cfg.seed))
  delta = cfg.delta
  eps_group = sorted(set([float(e) for e in cfg.epsilons] + [LECTURE_EPSILON]))
  group_rows, group = [], []
  for e in eps_group:
    for k in (1, 2, 3, LECTURE_LOANS, 10):
      ge, gd = group_privacy(e, delta, k)
      lecture = LECTURE_GROUP_EPSILON if (e, k) == (LECTURE_EPSILON, LECTURE_LOANS) else None
      group_rows.append([e, k, ge, gd, "yes" if gd < 1.0 else "no (δ = 1)", lecture])
      group.append({"epsilon": e, "loans": k, "group_epsilon": ge, "group_delta": gd})

  acc = _accuracy_part(cfg, k_acc)
  acc_rows = []
  for j, level in enumerate(acc["levels"]):
    row = [level]
    for unit in UNITS:
      row += [acc["sigma"][unit][j], acc["accuracy"][unit][j][0], acc["accuracy"][unit][j][1]]
    if level == "noiseless":
      row += [None, None]
    else:
      ge, gd = group_privacy(level, delta, LECTURE_LOANS)
      row += [ge, level]
    acc_rows.append(row)

  audit = _audit_part(cfg, k_audit)
  audit_rows = [[u, audit[u]["epsilon"], audit[u]["sigma"]]
                + [audit[u]["bounds"][b] for b in ("clopper_pearson",
                                                   "clopper_pearson_bonferroni", "best", "gdp")]
                + [audit[u]["bounds"]["clopper_pearson"] > cfg.audit_epsilon] for u in UNITS]
  ex_lb, us_lb = (audit[u]["bounds"]["clopper_pearson"] for u in UNITS)
  k = cfg.canary_loans
  ge, gd = group_privacy(cfg.audit_epsilon, delta, k)

  tables = [
      _common.Table(
          title=f"Per-customer guarantee of an example-level (ε, δ = {delta:g}) model by "
                "group privacy: (k ε, min(1, k e^((k−1)ε) δ)) for k loans",
          columns=["example ε", "loans k", "customer ε", "customer δ", "meaningful?",
                   "lecture ε (6d)"],
          rows=group_rows, digits=3,
          note="The lecture's exercise 6(d) answer: about 5ε = 15 for five loans at ε = 3. "
               "The δ term makes it worse than the lecture says: 5 e^12 δ > 1, no guarantee "
               "(`accounting.composition.group_privacy`, δ capped at 1)."),
      _common.Table(
          title=f"Test accuracy, example-level vs user-level DP-SGD at the same (ε, δ) "
                f"({acc['num_customers']} customers, {acc['num_loans']} loans, q = "
                f"{cfg.sampling_prob:g}, T = {cfg.num_steps}, C = {cfg.l2_clip_norm:g}, "
                f"{cfg.seeds} seeds)",
          columns=["ε", "σ example", "acc example", "sd", "σ user", "acc user", "sd",
                   f"example: ε per {LECTURE_LOANS}-loan customer", "user: ε per customer"],
          rows=acc_rows, digits=3,
          note=f"Bayes accuracy {acc['bayes_accuracy']:.3f}. The example-level guarantee "
               "per customer is group privacy (with δ multiplied by k e^((k−1)ε)); the "
               "user-level one is the accountant's ε itself."),
      _common.Table(
          title=f"Audit with a canary customer of {k} loans at ε = {cfg.audit_epsilon:g}, "
                f"δ = {delta:g}: {cfg.audit_models} models per side, {cfg.confidence:.0%} "
                "confidence",
          columns=["unit", "accountant ε", "σ", "ε lower (Clopper-Pearson)",
                   "ε lower (CP, declared thresholds)", "ε lower (best, union bound)",
                   "ε (GDP assumption)", "exceeds ε?"],
          rows=audit_rows, digits=3,
          note="Clopper-Pearson: score_bounds' split-threshold test. The GDP column "
               "assumes the mechanism is μ-GDP and is not a guaranteed bound."),
  ]
  lecture_eps, lecture_delta = group_privacy(LECTURE_EPSILON, delta, LECTURE_LOANS)
  summary = (
      f"Group privacy turns an example-level ε = {LECTURE_EPSILON:g} into {lecture_eps:g} "
      f"for a {LECTURE_LOANS}-loan customer (lecture: about {LECTURE_GROUP_EPSILON:g}), "
      f"with δ {lecture_delta:.2g}, i.e. no guarantee. "
      "Test accuracy at ε = "
      + ", ".join(f"{lv:g}: example {acc['accuracy']['example'][j][0]:.3f} / user "
                  f"{acc['accuracy']['user'][j][0]:.3f}"
                  for j, lv in enumerate(acc["levels"]) if lv != "noiseless")
      + f". Audit at ε = {cfg.audit_epsilon:g} with a {k}-loan canary customer "
      f"(Clopper-Pearson, {cfg.confidence:.0%}): the example-level model's lower bound is "
      f"{ex_lb:.2f} ({'above' if ex_lb > cfg.audit_epsilon else 'not above'} its ε; "
      f"group privacy allows up to {ge:g} with δ {gd:.2g}), the user-level model's "
      f"{us_lb:.2f} ({'below' if us_lb <= cfg.audit_epsilon else 'ABOVE'} its ε).")
  record = {"delta": delta, "group_privacy": group, "accuracy": acc, "audit": audit,
            "lecture": {"loans": LECTURE_LOANS, "epsilon": LECTURE_EPSILON,
                        "group_epsilon": LECTURE_GROUP_EPSILON},
            "example_level_exceeds_epsilon": bool(ex_lb > cfg.audit_epsilon),
            "user_level_within_epsilon": bool(us_lb <= cfg.audit_epsilon)}
  fig = _plot(out_dir, audit, cfg)
  return _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=[fig],
                        summary=summary, quiet=quiet)


def main():
  _common.app_run(NAME, UserLevelConfig, run)


if __name__ == "__main__":
  main()
