"""Lecture 10, exercise 6 end to end: a bank's whole privacy budget, eps = 3 at delta = 1e-5.

The bank releases the delinquency rate of each of 50 zip codes, a DP-SGD credit model and the best
of 20 hyperparameter settings, the customer (1-10 loans) the unit: 1. the budget, by basic
composition and in one RDP account; 2. the zip rates (`mechanisms.grouped_rates`; unreliable by
noise sd > `--max_rate_sd` or the lecture's `--min_count`); 3. user-level DP-SGD vs example-level
and non-private; 4. selection among C x lr * C^2 on public training / validation customers:
naive, the exponential mechanism, repeat-and-select (Papernot & Steinke 2022); 5. a five-loan
customer by group privacy.

Command:  python -m experiments.exercise6      (about 50 s of CPU)
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import accounting, dpsgd, mechanisms, models, tuning
from dpjax import selection as selection_lib
from dpjax.accounting import composition, rdp
from dpjax.data import credit
from experiments import _common, _plots

NAME = "exercise6"
LECTURE = {"model": 2.0, "zip": 0.7, "selection": 0.3, "zip_each": 0.35}
_ORDERS = rdp.DEFAULT_ORDERS
_opt = _common.option


@dataclasses.dataclass(frozen=True, kw_only=True)
class Exercise6Config(_common.ExperimentConfig):
  """The bank, its budget and the three releases."""
  customers: int = _opt(2000, "Customers of the bank (the private data).", bounds=">=8")
  test_customers: int = _opt(1000, "Held-out customers for test accuracy.", bounds=">=1")
  zip_codes: int = _opt(50, "Number of zip codes.", bounds=">=1")
  max_loans: int = _opt(10, "Most loans one customer holds.", bounds=">=1")
  epsilon: float = _opt(3.0, "Total eps of the three releases.", bounds=">0")
  delta: float = _opt(1e-5, "Total delta.", bounds="(0,1)")
  model_epsilon: float = _opt(2.0, "Basic-composition share of the model.", bounds=">0")
  zip_epsilon: float = _opt(0.7, "Share of the zip release (half per histogram).", bounds=">0")
  selection_epsilon: float = _opt(0.3, "Share of the exponential-mechanism selection.", bounds=">0")
  validation_every: int = _opt(
      4, "Customer u is a validation customer iff u % this == 0 (a public rule).", bounds=">=2")
  min_count: float = _opt(30.0, "The lecture's reliability rule: fewer customers.", bounds=">=0")
  max_rate_sd: float = _opt(0.1, "Our rule: noise sd of the rate above this.", bounds=">0")
  clip_norms: tuple[float, ...] = _opt((0.1, 0.3, 1.0, 3.0, 10.0), "Candidate clip norms C.",
                                       bounds=">0")
  lr_c2: tuple[float, ...] = _opt(
      (0.1, 0.3, 1.0, 3.0), "Candidate values of lr * C^2 (setting (C, lr = value / C^2)).",
      bounds=">0")
  model_clip: float = _opt(1.0, "C of the user- vs example-level comparison.", bounds=">0")
  model_lr_c2: float = _opt(1.0, "lr * C^2 of that comparison.", bounds=">0")
  sampling_prob: float = _opt(0.1, "q: per customer (user-level) or per loan.", bounds="(0,1]")
  num_steps: int = _opt(100, "DP-SGD steps T of every training run.", bounds=">=1")
  rs_mean_runs: float = _opt(10.0, "Repeat-and-select: E[K].", bounds=">=1")
  rs_shape: float = _opt(1.0, "Repeat-and-select: eta (0 logarithmic, 1 geometric).", bounds=">=0")
  score_noise: float = _opt(10.0, "Repeat-and-select: sd of the score noise.", bounds=">0")

  def __post_init__(self):
    super().__post_init__()
    parts = self.model_epsilon + self.zip_epsilon + self.selection_epsilon
    if abs(parts - self.epsilon) > 1e-9 * self.epsilon:
      raise ValueError(f"epsilon must equal model_epsilon + zip_epsilon + selection_epsilon "
                       f"= {parts:g} (basic composition), got {self.epsilon}")
    if self.customers // self.validation_every < 2:
      raise ValueError(f"validation_every must leave >= 2 validation customers among "
                       f"{self.customers}, got {self.validation_every}")


def _budget(cfg: Exercise6Config) -> dict:
  """Every sigma and eps of the experiment, from the config alone (host RDP curves)."""
  q, steps, delta = cfg.sampling_prob, cfg.num_steps, cfg.delta
  eps = lambda curve: rdp.rdp_to_epsilon(_ORDERS, curve, delta)[0]
  dp = lambda s: steps * rdp.subsampled_gaussian_rdp(q, s, _ORDERS)
  # Smallest sigma <= 200 (to 1e-4 relative) whose curve meets the total.
  calibrate = lambda curve_of: accounting.smallest_noise(
      lambda s: eps(curve_of(s)), cfg.epsilon, 0.2, 200.0, factor=2.0, limits=(0.0, 200.0))
  b_zip = 2.0 / cfg.zip_epsilon                     # Laplace(1 / (zip_eps / 2)) each
  zip_rdp = 2.0 * rdp.laplace_rdp(b_zip, _ORDERS)
  sel_rdp = composition.pure_dp_rdp(cfg.selection_epsilon, _ORDERS, bounded_range=True)
  sigma_basic = accounting.calibrate_noise(cfg.model_epsilon, q, steps, delta)
  sigma_joint = calibrate(lambda s: zip_rdp + sel_rdp + dp(s))
  num_settings = len(cfg.clip_norms) * len(cfg.lr_c2)
  # Exponential mechanism with every candidate's training charged: training customers
  # see all trainings, validation customers the selection.
  sigma_em = calibrate(lambda s: zip_rdp + np.maximum(num_settings * dp(s), sel_rdp))
  score_rdp = _ORDERS / (2.0 * cfg.score_noise ** 2)
  rs_curve = lambda s: rdp.repeat_and_select_rdp(
      _ORDERS, np.maximum(dp(s), score_rdp), mean_runs=cfg.rs_mean_runs, shape=cfg.rs_shape)
  sigma_rs = calibrate(lambda s: zip_rdp + rs_curve(s))
  eps_joint = eps(zip_rdp + sel_rdp + dp(sigma_joint))
  return {
      "zip_laplace_scale": b_zip, "sigma_basic": sigma_basic,
      "eps_model_basic": eps(dp(sigma_basic)),
      "eps_joint_at_basic_sigma": eps(zip_rdp + sel_rdp + dp(sigma_basic)),
      "sigma_joint": sigma_joint, "eps_joint": eps_joint, "eps_zip_rdp": eps(zip_rdp),
      "eps_selection_rdp": eps(sel_rdp), "num_settings": num_settings, "sigma_em": sigma_em,
      "eps_em_train": eps(zip_rdp + num_settings * dp(sigma_em)),
      "eps_em_validation": eps(zip_rdp + sel_rdp), "sigma_rs": sigma_rs,
      "eps_rs": eps(zip_rdp + rs_curve(sigma_rs)),
      "eps_rs_one_run": eps(zip_rdp + np.maximum(dp(sigma_rs), score_rdp)),
      "eps_naive_claimed": eps_joint,
      "eps_naive_train": eps(zip_rdp + num_settings * dp(sigma_joint)),
  }


def _world(cfg: Exercise6Config, key: jax.Array) -> dict:
  """Private customers (split by the public id rule), held-out customers, public scaler."""
  k_pub, k_cust = jax.random.split(key)
  total = cfg.customers + cfg.test_customers
  draw = lambda k: credit.sample_customers(k, total, max_loans=cfg.max_loans,
                                           num_zip_codes=cfg.zip_codes)
  scaler = credit.PublicScaler.fit(draw(k_pub).x_NxF)   # a separate PUBLIC draw
  world = draw(k_cust)
  user, y = np.asarray(world.user_N), np.asarray(world.y_N, np.int32)
  x = np.asarray(credit.linear_features(world.x_NxF, scaler), np.float32)
  private = user < cfg.customers
  val = (user % cfg.validation_every == 0) & private
  train = private & ~val

  def renumber(rows):   # the customers of `rows` as 0..U-1
    ids, uid = np.unique(user[rows], return_inverse=True)
    return uid.astype(np.int64), int(ids.size)

  (uid_train, n_train), (uid_val, n_val) = renumber(train), renumber(val)
  first = np.searchsorted(user, np.arange(cfg.customers))   # rows are ordered by customer
  defaulted = np.zeros(total, np.float64)
  np.maximum.at(defaulted, user, (y == 0).astype(np.float64))
  return {"x_train": x[train], "y_train": y[train], "uid_train": uid_train.astype(np.int32),
          "num_train_users": n_train, "x_val": x[val], "y_val": y[val], "uid_val": uid_val,
          "num_val_users": n_val, "x_test": x[~private], "y_test": y[~private],
          "zip_U": np.asarray(world.zip_N)[first].astype(np.int32),
          "delinquent_U": defaulted[:cfg.customers],
          "loans_U": np.bincount(user[private], minlength=cfg.customers)}


def _train_settings(cfg: Exercise6Config, w: dict, bud: dict, key: jax.Array,
                    run_setting: np.ndarray, model, bar) -> dict:
  """Every user-level model of parts 3-4, as {kind: {setting or run: weights}}.

  Setting (C, lr_c2 / C^2) is trained as C = 1 and learning rate lr_c2 on x / C (weights
  v = C w; clip-to-1 plus N(0, sigma^2) on G / C is clip-to-C plus N(0, (sigma C)^2) over
  C), so one `train_sweep` per lr_c2 holds every C: copy j of the records is x / C_j and
  each model keeps only its copy, exactly the training customers' loans.
  """
  clips = list(cfg.clip_norms)
  n = w["x_train"].shape[0]
  x_all = np.concatenate([w["x_train"] / c for c in clips]).astype(np.float32)
  y_all, uid_all = np.tile(w["y_train"], len(clips)), np.tile(w["uid_train"], len(clips))
  out = {"em": {}, "naive": {}, "rs": {}, "compare": {}}
  for k, lr_c2 in enumerate(cfg.lr_c2):
    cfgs = [dpsgd.DpSgdConfig(dataset_size=w["num_train_users"], sampling_prob=cfg.sampling_prob,
                              num_steps=cfg.num_steps, l2_clip_norm=1.0, noise_multiplier=sg,
                              learning_rate=lr_c2, delta=cfg.delta, privacy_unit="user")
            for sg in (bud["sigma_em"], bud["sigma_joint"], bud["sigma_rs"], bud["sigma_basic"],
                       0.0)]
    models_ = []                        # (kind, setting or run, config index, clip copy)
    for j in range(len(clips)):
      s = j * len(cfg.lr_c2) + k
      models_ += [("em", s, 0, j), ("naive", s, 1, j)]
      models_ += [("rs", int(r), 2, j) for r in np.flatnonzero(run_setting == s)]
      if clips[j] == cfg.model_clip and lr_c2 == cfg.model_lr_c2:
        models_ += [("compare", "user", 3, j), ("compare", "non_private", 4, j)]
    keep = np.zeros((len(models_), n * len(clips)), bool)
    for m, (_, _, _, j) in enumerate(models_):
      keep[m, j * n:(j + 1) * n] = True
    res = dpsgd.train_sweep(jax.random.fold_in(key, k), x_all, y_all, keep, cfgs,
                            np.asarray([m[2] for m in models_]), model,
                            sampler=cfgs[0].sampler(uid_all),
                            perf=dpsgd.PerformanceFlags(progress=False))
    v = np.asarray(res.params["w"], np.float64)
    for m, (kind, tag, _, j) in enumerate(models_):
      out[kind][tag] = v[m] / clips[j]
    bar.update(1)
  return out


def run(cfg: Exercise6Config, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs the five parts; writes results.json and the zip figure (`_common.finish`'s dict)."""
  key = jax.random.key(cfg.seed)
  k_world, k_zip, k_train, k_ex, k_em, k_runs, k_pick, k_score = jax.random.split(key, 8)
  bud = _budget(cfg)
  w = _world(cfg, k_world)
  # Setting s = (C_j, lr_c2_k) with s = j * len(lr_c2) + k; its learning rate is lr_c2 / C^2.
  settings = [(c, l / (c * c)) for c, l in itertools.product(cfg.clip_norms, cfg.lr_c2)]
  num_settings = len(settings)
  model = models.logistic_regression(w["x_train"].shape[1])

  # 2. The zip release.
  z = mechanisms.grouped_rates(k_zip, w["zip_U"], w["delinquent_U"], cfg.zip_codes,
                               cfg.zip_epsilon, count_fraction=0.5, max_rate_sd=cfg.max_rate_sd)
  true_n = np.bincount(w["zip_U"], minlength=cfg.zip_codes)
  true_d = np.bincount(w["zip_U"], w["delinquent_U"], minlength=cfg.zip_codes)
  true_rate = np.where(true_n > 0, true_d / np.maximum(true_n, 1), np.nan)
  noisy_n, noisy_rate = np.asarray(z.noisy_counts, float), np.asarray(z.rate, float)
  rate_sd, ours = np.asarray(z.rate_sd, float), ~np.asarray(z.reliable)
  lecture_rule = noisy_n < cfg.min_count
  err = np.abs(noisy_rate - true_rate)
  zips = [{"zip": i, "customers": int(true_n[i]), "noisy_customers": float(noisy_n[i]),
           "true_rate": None if true_n[i] == 0 else float(true_rate[i]),
           "noisy_rate": float(noisy_rate[i]), "rate_sd": float(rate_sd[i]),
           "abs_error": None if true_n[i] == 0 else float(err[i]),
           "unreliable_ours": bool(ours[i]), "unreliable_lecture": bool(lecture_rule[i])}
          for i in range(cfg.zip_codes)]

  # 3 and 4. Repeat-and-select runs K uniformly drawn settings (public randomness).
  u = np.random.default_rng(int(jax.random.bits(k_runs, (), jnp.uint32))).random()
  num_runs = tuning.num_runs_quantile(u, cfg.rs_mean_runs, cfg.rs_shape)
  run_setting = np.asarray(jax.random.randint(k_pick, (num_runs,), 0, num_settings))
  n_train = w["x_train"].shape[0]
  bar = tqdm(total=len(cfg.lr_c2) + 1, desc=NAME, disable=not progress)
  trained = _train_settings(cfg, w, bud, k_train, run_setting, model, bar)
  compare = trained["compare"]
  if "user" not in compare:            # the comparison setting is outside the grid
    sub = dataclasses.replace(cfg, clip_norms=(cfg.model_clip,), lr_c2=(cfg.model_lr_c2,))
    compare = _train_settings(sub, w, bud, jax.random.fold_in(k_train, len(cfg.lr_c2)),
                              np.zeros(0, int), model, tqdm(disable=True))["compare"]
  em_params, naive_params, rs_params = (
      np.stack([trained[kind][i] for i in range(count)]) if count
      else np.zeros((0, w["x_test"].shape[1]))
      for kind, count in (("em", num_settings), ("naive", num_settings), ("rs", num_runs)))
  # Example-level contrast: every loan a unit, q per loan, same eps for the model.
  ex_cfg = dpsgd.DpSgdConfig(dataset_size=n_train, sampling_prob=cfg.sampling_prob,
                             num_steps=cfg.num_steps, l2_clip_norm=cfg.model_clip,
                             delta=cfg.delta, learning_rate=cfg.model_lr_c2 / cfg.model_clip ** 2
                             ).calibrate(cfg.model_epsilon)
  res = dpsgd.train_many(k_ex, w["x_train"], w["y_train"], np.ones((1, n_train), bool),
                         ex_cfg, model, perf=dpsgd.PerformanceFlags(progress=False))
  compare["example"] = np.asarray(res.params["w"], np.float64)[0]
  bar.update(1)
  bar.close()

  accuracy = lambda p_MxD: models.accuracy(model, {"w": p_MxD}, w["x_test"], w["y_test"],
                                           float64=True)
  acc = lambda p: float(accuracy(p[None, :])[0])
  utility = lambda p_MxD: tuning.user_accuracy_utility(models.correct_predictions(
      model, {"w": p_MxD}, w["x_val"], w["y_val"], float64=True), w["uid_val"], w["num_val_users"])
  pick_naive = int(np.argmax(utility(naive_params)))   # exact argmax
  pick_em = int(selection_lib.exponential_mechanism(   # monotone utility of sensitivity 1
      k_em, jnp.asarray(utility(em_params), jnp.float32),
      cfg.selection_epsilon, sensitivity=1.0, monotonic=True))
  # Repeat-and-select releases only the best run by noisy score (the argmax, so float
  # noise is not observable, as in report_noisy_max).
  noisy_scores = (utility(rs_params) if num_runs else np.zeros(0)) + cfg.score_noise * (
      np.asarray(jax.random.normal(k_score, (num_runs,)), np.float64))
  best_run = int(np.argmax(noisy_scores)) if num_runs else None
  fields = ("procedure", "sigma", "trainings", "chosen", "eps_claimed", "eps_train_customers",
            "eps_validation_customers", "test_accuracy")
  selection = [dict(zip(fields, v)) for v in (
      ("naive (tune freely, account the final model)", bud["sigma_joint"], num_settings,
       settings[pick_naive], bud["eps_naive_claimed"], bud["eps_naive_train"], math.inf,
       acc(naive_params[pick_naive])),
      (f"exponential mechanism, {num_settings} trainings charged", bud["sigma_em"],
       num_settings, settings[pick_em], cfg.epsilon, bud["eps_em_train"],
       bud["eps_em_validation"], acc(em_params[pick_em])),
      (f"repeat-and-select (E[K] = {cfg.rs_mean_runs:g}, eta = {cfg.rs_shape:g})",
       bud["sigma_rs"], int(num_runs),
       None if best_run is None else settings[int(run_setting[best_run])], cfg.epsilon,
       bud["eps_rs"], bud["eps_rs"], None if best_run is None else acc(rs_params[best_run])))]
  unit = lambda name, sigma, size, eps, p: {"unit": name, "sigma": sigma, "dataset_size": size,
                                            "epsilon": eps, "test_accuracy": acc(p)}
  model_rows = {
      "user": unit("customer (user-level)", bud["sigma_basic"], w["num_train_users"],
                   bud["eps_model_basic"], compare["user"]),
      "example": unit("loan (example-level)", ex_cfg.noise_multiplier, n_train,
                      ex_cfg.epsilon(), compare["example"]),
      "non_private": unit("none (sigma = 0)", 0.0, w["num_train_users"], math.inf,
                          compare["non_private"])}
  group = [dict(zip(("loans", "example_eps", "example_delta", "user_eps", "user_delta"),
                    (k, *composition.group_privacy(cfg.epsilon, cfg.delta, k), cfg.epsilon,
                     cfg.delta))) for k in (1, 5, cfg.max_loans)]   # 5. a customer's k loans
  record = {
      "budget": bud, "zips": zips,
      "num_customers": cfg.customers, "num_loans": int(w["loans_U"].sum()),
      "num_train_customers": w["num_train_users"], "num_train_loans": int(n_train),
      "num_validation_customers": w["num_val_users"], "num_test_loans": int(len(w["y_test"])),
      "unreliable_ours": [i for i in range(cfg.zip_codes) if ours[i]],
      "unreliable_lecture": [i for i in range(cfg.zip_codes) if lecture_rule[i]],
      "model": model_rows, "selection": selection, "num_runs": int(num_runs),
      "candidate_test_accuracy": [float(a) for a in accuracy(em_params)], "five_loans": group}
  return _common.finish(cfg, out_dir, NAME, record, tables=_tables(cfg, record),
                        figures=[_plots.exercise6_zips(out_dir, record, cfg)],
                        summary=_summary(cfg, record), quiet=quiet)


def _tables(cfg: Exercise6Config, r: dict) -> list:
  b, m, half = r["budget"], r["model"], cfg.zip_epsilon / 2
  lap = f"Laplace(1/{half:g}) x {cfg.zip_codes}"
  t_split = _common.Table(
      title=(f"Exercise 6(a): the budget, eps = {cfg.epsilon:g} at delta = {cfg.delta:g} "
             f"(unit: the customer; DP-SGD q = {cfg.sampling_prob:g} per customer, "
             f"T = {cfg.num_steps})"),
      columns=["release", "mechanism", "sensitivity per customer", "eps (basic)",
               "eps alone (RDP)", "lecture"],
      rows=[["zip: customers per zip", lap, "L1 = 1 (one zip per customer)", half, None,
             LECTURE["zip_each"]],
            ["zip: delinquent customers", lap, "L1 = 1", half, None, LECTURE["zip_each"]],
            ["zip release (both)", "", "", cfg.zip_epsilon, b["eps_zip_rdp"], LECTURE["zip"]],
            ["model", f"DP-SGD, sigma = {b['sigma_basic']:.3f}", "L2 = C (customer's sum)",
             cfg.model_epsilon, b["eps_model_basic"], LECTURE["model"]],
            ["selection", "exponential mechanism", "1 (= 1/n_val in accuracy)",
             cfg.selection_epsilon, b["eps_selection_rdp"], LECTURE["selection"]],
            ["total", "", "", cfg.epsilon, b["eps_joint_at_basic_sigma"], 3.0]],
      note=("'eps alone (RDP)' converts each curve alone; the total composes the three in "
            "RDP (Laplace exact, the exponential mechanism as eps-bounded-range, DP-SGD's "
            f"subsampled Gaussian). Counting loans would give sensitivity {cfg.max_loans}."))
  t_joint = _common.Table(
      title="Exercise 6(a): basic composition vs one RDP account, same three mechanisms",
      columns=["accounting", "model sigma", "total eps", "eps left", "lecture"],
      rows=[["basic composition (lecture split)", b["sigma_basic"], cfg.epsilon, 0.0,
             "2.0 / 0.7 / 0.3"],
            ["RDP, same sigma", b["sigma_basic"], b["eps_joint_at_basic_sigma"],
             cfg.epsilon - b["eps_joint_at_basic_sigma"], "tighter"],
            ["RDP, total held at eps", b["sigma_joint"], b["eps_joint"], 0.0, "tighter"]],
      note=(f"At the same total, RDP lets the model use {b['sigma_joint'] / b['sigma_basic']:.3f}"
            " times the basic sigma (less noise)."))
  by_size = sorted(r["zips"], key=lambda zz: zz["customers"])
  differ = [zz for zz in by_size if zz["unreliable_ours"] != zz["unreliable_lecture"]]
  shown = by_size[:5] + [zz for zz in differ if zz not in by_size[:5]] + by_size[::-1][:3]
  flag = lambda bad: "unreliable" if bad else "ok"
  t_zip = _common.Table(
      title=(f"Exercise 6(b): zip codes flagged unreliable (of {cfg.zip_codes}; "
             f"{len(r['unreliable_ours'])} by ours: noise sd > {cfg.max_rate_sd:g}, "
             f"{len(r['unreliable_lecture'])} by the lecture's < {cfg.min_count:g} "
             "customers): the five smallest, those where the rules differ, the three largest"),
      columns=["zip", "customers", "noisy customers", "true rate", "noisy rate", "noise sd",
               "|error|", "ours", "lecture"],
      rows=[[zz[k] for k in ("zip", "customers", "noisy_customers", "true_rate", "noisy_rate",
                             "rate_sd", "abs_error")]
            + [flag(zz["unreliable_ours"]), flag(zz["unreliable_lecture"])] for zz in shown],
      note=("Both rules read only released values; 'customers' and 'true rate' are the "
            "private truth, shown for checking."))
  t_model = _common.Table(
      title=(f"Exercise 6(d): the model at eps = {cfg.model_epsilon:g} (C = {cfg.model_clip:g}, "
             f"lr = {cfg.model_lr_c2 / cfg.model_clip ** 2:g}, T = {cfg.num_steps}), test accuracy on "
             f"{r['num_test_loans']} held-out loans"),
      columns=["privacy unit", "sigma", "dataset size", "eps per unit", "test accuracy"],
      rows=[list(v.values()) for v in m.values()])
  t_sel = _common.Table(
      title=(f"Exercise 6(c): choosing among {b['num_settings']} (C, learning rate) settings, "
             f"every procedure with the zip release, total held at eps = {cfg.epsilon:g}"),
      columns=["procedure", "sigma per run", "trainings", "chosen (C, lr)", "eps claimed",
               "eps (training customers)", "eps (validation customers)", "test accuracy",
               "lecture"],
      rows=[[s["procedure"], s["sigma"], s["trainings"],
             None if s["chosen"] is None else f"({s['chosen'][0]:g}, {s['chosen'][1]:.3g})",
             s["eps_claimed"], s["eps_train_customers"], s["eps_validation_customers"],
             s["test_accuracy"], lec]
            for s, lec in zip(r["selection"], ("worst", "EM, sensitivity 1/n_val",
                                               "Papernot-Steinke in RDP"))],
      note=("Each procedure costs the worse of its two columns; every candidate trained on "
            "the training customers is a release they pay for."))
  t_five = _common.Table(
      title="Exercise 6(d): the guarantee of a customer with k loans",
      columns=["loans k", "example-level eps", "example-level delta", "user-level eps",
               "user-level delta", "lecture"],
      rows=[list(g.values()) + ["about 5 eps = 15" if g["loans"] == 5 else None]
            for g in r["five_loans"]],
      note="Group privacy: (k eps, k e^{(k-1) eps} delta); delta >= 1 promises nothing.")
  return [t_split, t_joint, t_zip, t_model, t_sel, t_five]


def _summary(cfg: Exercise6Config, r: dict) -> str:
  b, m, s, five = r["budget"], r["model"], r["selection"], r["five_loans"][1]
  return (
      f"Budget: the lecture's 2.0 / 0.7 / 0.3 split accounted in one RDP account spends "
      f"{b['eps_joint_at_basic_sigma']:.2f} of {cfg.epsilon:g}; at total {cfg.epsilon:g} the "
      f"model's sigma drops from {b['sigma_basic']:.2f} to {b['sigma_joint']:.2f}. Zip codes: "
      f"{len(r['unreliable_ours'])} of {cfg.zip_codes} unreliable by noise sd > "
      f"{cfg.max_rate_sd:g}, {len(r['unreliable_lecture'])} by the lecture's < "
      f"{cfg.min_count:g} customers. Model at eps = {cfg.model_epsilon:g}: user-level "
      f"{m['user']['test_accuracy']:.3f}, example-level {m['example']['test_accuracy']:.3f}, "
      f"non-private {m['non_private']['test_accuracy']:.3f}. Selection at total "
      f"{cfg.epsilon:g}: exponential mechanism with all {b['num_settings']} trainings charged "
      f"needs sigma {b['sigma_em']:.2f} (test {s[1]['test_accuracy']:.3f}), repeat-and-select "
      f"sigma {b['sigma_rs']:.2f} over {r['num_runs']} runs (test "
      f"{_common.fmt(s[2]['test_accuracy'])}); tuning freely at sigma {b['sigma_joint']:.2f} "
      f"really costs {b['eps_naive_train']:.1f} for training customers and is unbounded for "
      f"validation customers. A five-loan customer under example-level DP: "
      f"eps = {five['example_eps']:g} with delta {five['example_delta']:.3g}; user-level: "
      f"({cfg.epsilon:g}, {cfg.delta:g}).")


def main():
  _common.app_run(NAME, Exercise6Config, run)


if __name__ == "__main__":
  main()
