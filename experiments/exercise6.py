"""Lecture 10, exercise 6 end to end: a bank's whole privacy budget, eps = 3 at delta = 1e-5.

The bank releases the delinquency rate of each of 50 zip codes, a DP-SGD credit model and the best
of 20 settings, the customer (1-10 loans) the unit: 1. the budget, basic vs one RDP account;
2. the zip rates (`mechanisms.grouped_rates`; unreliable: noise sd > --max_rate_sd, or the
lecture's < --min_count); 3. user- vs example-level DP-SGD and non-private; 4. selection among
C x lr * C^2 on public-rule training / validation customers: naive, the exponential mechanism,
repeat-and-select (Papernot & Steinke 2022); 5. a five-loan customer by group privacy.
Command: python -m experiments.exercise6 (about 50 s of CPU).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import accounting, clip_sweep, dpsgd, mechanisms, models, tuning
from dpjax import selection as selection_lib
from dpjax.accounting import composition, rdp
from dpjax.data import credit
from experiments import _common, _plots

NAME = "exercise6"
LECTURE = {"model": 2.0, "zip": 0.7, "selection": 0.3, "zip_each": 0.35}
_ORDERS, _opt = rdp.DEFAULT_ORDERS, _common.option


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
  validation_every: int = _opt(4, "Customer u validates iff u % this == 0 (public).", bounds=">=2")
  min_count: float = _opt(30.0, "The lecture's reliability rule: fewer customers.", bounds=">=0")
  max_rate_sd: float = _opt(0.1, "Our rule: noise sd of the rate above this.", bounds=">0")
  clip_norms: tuple[float, ...] = _opt((0.1, 0.3, 1.0, 3.0, 10.0), "Candidate clip norms C.",
                                       bounds=">0")
  lr_c2: tuple[float, ...] = _opt((0.1, 0.3, 1.0, 3.0), "Candidate lr * C^2 (lr = it / C^2).",
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
  n_set = len(cfg.clip_norms) * len(cfg.lr_c2)
  eps = lambda curve: rdp.rdp_to_epsilon(_ORDERS, curve, delta)[0]
  b_zip = 2.0 / cfg.zip_epsilon                     # Laplace(1 / (zip_eps / 2)) each
  zip_rdp = 2.0 * rdp.laplace_rdp(b_zip, _ORDERS)
  # Each procedure with the zip release: training customers see every training, validation
  # customers the selection; repeat-and-select: K runs (`tuning.selection_rdp`).
  curves = lambda s: tuning.selection_rdp(
      _ORDERS, s, sampling_prob=q, num_steps=steps, num_candidates=n_set,
      selection_epsilon=cfg.selection_epsilon, score_noise_multiplier=cfg.score_noise,
      mean_runs=cfg.rs_mean_runs, shape=cfg.rs_shape, other_rdp=zip_rdp)
  # Smallest sigma <= 200 (to 1e-4 relative) whose curve meets the total.
  calibrate = lambda name: accounting.smallest_noise(
      lambda s: eps(curves(s)[name]), cfg.epsilon, 0.2, 200.0, factor=2.0, limits=(0.0, 200.0))
  s_basic = accounting.calibrate_noise(cfg.model_epsilon, q, steps, delta)
  s_joint, s_em, s_rs = map(calibrate, ("naive_claimed", "exponential", "repeat_and_select"))
  basic, joint, em, rs = map(curves, (s_basic, s_joint, s_em, s_rs))
  return {"zip_laplace_scale": b_zip, "sigma_basic": s_basic, "eps_model_basic": eps(basic["run"]),
          "eps_joint_at_basic_sigma": eps(basic["naive_claimed"]), "sigma_joint": s_joint,
          "eps_joint": eps(joint["naive_claimed"]), "eps_zip_rdp": eps(zip_rdp),
          "eps_selection_rdp": eps(basic["selection"]), "num_settings": n_set, "sigma_em": s_em,
          "eps_em_train": eps(em["all_trainings"]),
          "eps_em_validation": eps(em["exponential_validation"]),
          "sigma_rs": s_rs, "eps_rs": eps(rs["repeat_and_select"]),
          "eps_rs_one_run": eps(rs["repeat_and_select_one_run"]),
          "eps_naive_claimed": eps(joint["naive_claimed"]),
          "eps_naive_train": eps(joint["all_trainings"])}


def _train_settings(cfg: Exercise6Config, w: credit.CustomerSplits, bud: dict, key, run_setting,
                    model) -> dict:
  """Every user-level model of parts 3-4 as {kind: {setting or run: weights}} (`clip_sweep`)."""
  grid = []                           # (kind, setting or run, (sigma, C, lr_c2 indices))
  for k, lr_c2 in enumerate(cfg.lr_c2):
    for j, c in enumerate(cfg.clip_norms):
      s = j * len(cfg.lr_c2) + k
      grid += [("em", s, (0, j, k)), ("naive", s, (1, j, k))]
      grid += [("rs", int(r), (2, j, k)) for r in np.flatnonzero(run_setting == s)]
      if c == cfg.model_clip and lr_c2 == cfg.model_lr_c2:
        grid += [("compare", "user", (3, j, k)), ("compare", "non_private", (4, j, k))]
  base = dpsgd.DpSgdConfig(dataset_size=w.num_train_users, sampling_prob=cfg.sampling_prob,
                           num_steps=cfg.num_steps, delta=cfg.delta, privacy_unit="user")
  sigmas = [bud[f"sigma_{v}"] for v in ("em", "joint", "rs", "basic")] + [0.0]
  v = clip_sweep.train_clip_sweep(key, w.x_train, w.y_train, model, base, sigmas,
                                  cfg.clip_norms, cfg.lr_c2, [g[2] for g in grid],
                                  user_N=w.uid_train)
  out = {"em": {}, "naive": {}, "rs": {}, "compare": {}}
  for (kind, tag, _), weights in zip(grid, v):
    out[kind][tag] = weights
  return out


def run(cfg: Exercise6Config, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs the five parts; writes results.json and the zip figure (`_common.finish`'s dict)."""
  k_world, k_zip, k_train, k_ex, k_em, k_runs, k_pick, k_score = jax.random.split(
      jax.random.key(cfg.seed), 8)
  bud = _budget(cfg)
  w = credit.sample_customer_splits(k_world, cfg.customers, cfg.test_customers,
                                    validation_every=cfg.validation_every,
                                    max_loans=cfg.max_loans, num_zip_codes=cfg.zip_codes)
  # Setting s = (C_j, lr_c2_k) with s = j * len(lr_c2) + k; its learning rate is lr_c2 / C^2.
  settings = [(c, l / (c * c)) for c in cfg.clip_norms for l in cfg.lr_c2]
  n_set, n_train = len(settings), w.x_train.shape[0]
  model = models.logistic_regression(w.x_train.shape[1])
  # 2. The zip release; both unreliability rules read only released values.
  z = mechanisms.grouped_rates(k_zip, w.zip_U, w.delinquent_U, cfg.zip_codes,
                               cfg.zip_epsilon, count_fraction=0.5, max_rate_sd=cfg.max_rate_sd)
  true_n = np.bincount(w.zip_U, minlength=cfg.zip_codes)
  true_d = np.bincount(w.zip_U, w.delinquent_U, minlength=cfg.zip_codes)
  true_rate = np.where(true_n > 0, true_d / np.maximum(true_n, 1), np.nan)
  noisy_n, noisy_rate, rate_sd = (np.asarray(a, float) for a in (z.noisy_counts, z.rate, z.rate_sd))
  ours, lecture_rule = ~np.asarray(z.reliable), noisy_n < cfg.min_count
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
  run_setting = np.asarray(jax.random.randint(k_pick, (num_runs,), 0, n_set))
  bar = tqdm(total=2, desc=NAME, disable=not progress)
  trained = _train_settings(cfg, w, bud, k_train, run_setting, model)
  compare = trained["compare"]
  if "user" not in compare:            # the comparison setting is outside the grid
    sub = dataclasses.replace(cfg, clip_norms=(cfg.model_clip,), lr_c2=(cfg.model_lr_c2,))
    compare = _train_settings(sub, w, bud, jax.random.fold_in(k_train, len(cfg.lr_c2)),
                              np.zeros(0, int), model)["compare"]
  bar.update(1)
  em_params, naive_params, rs_params = (
      np.stack([trained[kind][i] for i in range(count)]) if count
      else np.zeros((0, w.x_test.shape[1]))
      for kind, count in (("em", n_set), ("naive", n_set), ("rs", num_runs)))
  # Example-level contrast: every loan a unit, q per loan, same eps for the model.
  ex_cfg = dpsgd.DpSgdConfig(dataset_size=n_train, sampling_prob=cfg.sampling_prob,
                             num_steps=cfg.num_steps, l2_clip_norm=cfg.model_clip, delta=cfg.delta,
                             learning_rate=cfg.model_lr_c2 / cfg.model_clip ** 2
                             ).calibrate(cfg.model_epsilon)
  res = dpsgd.train_many(k_ex, w.x_train, w.y_train, np.ones((1, n_train), bool), ex_cfg,
                         model, perf=dpsgd.PerformanceFlags(progress=False))
  compare["example"] = np.asarray(res.params["w"], np.float64)[0]
  bar.update(1)
  bar.close()
  accuracy = lambda p_MxD: models.accuracy(model, {"w": p_MxD}, w.x_test, w.y_test,
                                           float64=True)
  acc = lambda p: float(accuracy(p[None, :])[0])
  utility = lambda p_MxD: tuning.user_accuracy_utility(models.correct_predictions(
      model, {"w": p_MxD}, w.x_val, w.y_val, float64=True), w.uid_val, w.num_val_users)
  pick_naive = int(np.argmax(utility(naive_params)))   # exact argmax
  pick_em = int(selection_lib.exponential_mechanism(   # monotone utility of sensitivity 1
      k_em, jnp.asarray(utility(em_params), jnp.float32), cfg.selection_epsilon,
      sensitivity=1.0, monotonic=True))
  # Repeat-and-select releases only the best run by noisy score (the argmax, so float
  # noise is not observable, as in report_noisy_max).
  best = (tuning.select_by_noisy_score(k_score, utility(rs_params), cfg.score_noise)
          if num_runs else None)
  fields = ("procedure", "sigma", "trainings", "chosen", "eps_claimed", "eps_train_customers",
            "eps_validation_customers", "test_accuracy")
  selection = [dict(zip(fields, v)) for v in (
      ("naive (tune freely, account the final model)", bud["sigma_joint"], n_set,
       settings[pick_naive], bud["eps_naive_claimed"], bud["eps_naive_train"], math.inf,
       acc(naive_params[pick_naive])),
      (f"exponential mechanism, {n_set} trainings charged", bud["sigma_em"], n_set,
       settings[pick_em], cfg.epsilon, bud["eps_em_train"], bud["eps_em_validation"],
       acc(em_params[pick_em])),
      (f"repeat-and-select (E[K] = {cfg.rs_mean_runs:g}, eta = {cfg.rs_shape:g})",
       bud["sigma_rs"], int(num_runs), None if best is None else settings[int(run_setting[best])],
       cfg.epsilon, bud["eps_rs"], bud["eps_rs"], None if best is None else acc(rs_params[best])))]
  unit = lambda name, sigma, size, eps, p: {"unit": name, "sigma": sigma, "dataset_size": size,
                                            "epsilon": eps, "test_accuracy": acc(p)}
  model_rows = {
      "user": unit("customer (user-level)", bud["sigma_basic"], w.num_train_users,
                   bud["eps_model_basic"], compare["user"]),
      "example": unit("loan (example-level)", ex_cfg.noise_multiplier, n_train, ex_cfg.epsilon(),
                      compare["example"]),
      "non_private": unit("none (sigma = 0)", 0.0, w.num_train_users, math.inf,
                          compare["non_private"])}
  group = [dict(zip(("loans", "example_eps", "example_delta", "user_eps", "user_delta"),
                    (k, *composition.group_privacy(cfg.epsilon, cfg.delta, k), cfg.epsilon,
                     cfg.delta))) for k in (1, 5, cfg.max_loans)]   # 5. a customer's k loans
  record = {
      "budget": bud, "zips": zips, "num_customers": cfg.customers, "num_loans": w.num_loans,
      "num_train_customers": w.num_train_users, "num_train_loans": int(n_train),
      "num_validation_customers": w.num_val_users, "num_test_loans": int(len(w.y_test)),
      "unreliable_ours": [i for i in range(cfg.zip_codes) if ours[i]],
      "unreliable_lecture": [i for i in range(cfg.zip_codes) if lecture_rule[i]],
      "model": model_rows, "selection": selection, "num_runs": int(num_runs),
      "candidate_test_accuracy": [float(a) for a in accuracy(em_params)], "five_loans": group}
  return _common.finish(cfg, out_dir, NAME, record, tables=_tables(cfg, record),
                        figures=[_plots.exercise6_zips(out_dir, record, cfg)],
                        summary=_summary(cfg, record), quiet=quiet)


def _tables(cfg: Exercise6Config, r: dict) -> list:
  b, m, half, lec = r["budget"], r["model"], cfg.zip_epsilon / 2, LECTURE
  lap, lec_zip = f"Laplace(1/{half:g}) x {cfg.zip_codes}", lec["zip_each"]
  t_split = _common.Table(
      f"Exercise 6(a): the budget, eps = {cfg.epsilon:g} at delta = {cfg.delta:g} (unit: the "
      f"customer; DP-SGD q = {cfg.sampling_prob:g} per customer, T = {cfg.num_steps})",
      ["release", "mechanism", "sensitivity per customer", "eps (basic)", "eps alone (RDP)",
       "lecture"],
      [["zip: customers per zip", lap, "L1 = 1 (one zip per customer)", half, None, lec_zip],
       ["zip: delinquent customers", lap, "L1 = 1", half, None, lec_zip],
       ["zip release (both)", "", "", cfg.zip_epsilon, b["eps_zip_rdp"], lec["zip"]],
       ["model", f"DP-SGD, sigma = {b['sigma_basic']:.3f}", "L2 = C (customer's sum)",
        cfg.model_epsilon, b["eps_model_basic"], lec["model"]],
       ["selection", "exponential mechanism", "1 (= 1/n_val in accuracy)", cfg.selection_epsilon,
        b["eps_selection_rdp"], lec["selection"]],
       ["total", "", "", cfg.epsilon, b["eps_joint_at_basic_sigma"], 3.0]],
      note=("'eps alone (RDP)' converts each curve alone; the total composes the three in RDP "
            "(Laplace exact, the exponential mechanism as eps-bounded-range, DP-SGD's subsampled "
            f"Gaussian). Counting loans would give sensitivity {cfg.max_loans}."))
  t_joint = _common.Table(
      "Exercise 6(a): basic composition vs one RDP account, same three mechanisms",
      ["accounting", "model sigma", "total eps", "eps left", "lecture"],
      [["basic composition (lecture split)", b["sigma_basic"], cfg.epsilon, 0.0, "2.0 / 0.7 / 0.3"],
       ["RDP, same sigma", b["sigma_basic"], b["eps_joint_at_basic_sigma"],
        cfg.epsilon - b["eps_joint_at_basic_sigma"], "tighter"],
       ["RDP, total held at eps", b["sigma_joint"], b["eps_joint"], 0.0, "tighter"]],
      note=(f"At the same total, RDP lets the model use {b['sigma_joint'] / b['sigma_basic']:.3f}"
            " times the basic sigma (less noise)."))
  by_size = sorted(r["zips"], key=lambda zz: zz["customers"])
  differ = [zz for zz in by_size[5:] if zz["unreliable_ours"] != zz["unreliable_lecture"]]
  flag = lambda rule: lambda zz: "unreliable" if zz[rule] else "ok"
  t_zip = _common.table(
      f"Exercise 6(b): zip codes flagged unreliable (of {cfg.zip_codes}; "
      f"{len(r['unreliable_ours'])} by ours: noise sd > {cfg.max_rate_sd:g}, "
      f"{len(r['unreliable_lecture'])} by the lecture's < {cfg.min_count:g} customers): the "
      "five smallest, those where the rules differ, the three largest",
      by_size[:5] + differ + by_size[::-1][:3],
      [("zip", "zip"), ("customers", "customers"), ("noisy customers", "noisy_customers"),
       ("true rate", "true_rate"), ("noisy rate", "noisy_rate"), ("noise sd", "rate_sd"),
       ("|error|", "abs_error"), ("ours", flag("unreliable_ours")),
       ("lecture", flag("unreliable_lecture"))],
      note="Both rules read only released values; 'customers' and 'true rate' are the private "
           "truth, shown for checking.")
  t_model = _common.Table(
      f"Exercise 6(d): the model at eps = {cfg.model_epsilon:g} (C = {cfg.model_clip:g}, "
      f"lr = {cfg.model_lr_c2 / cfg.model_clip ** 2:g}, T = {cfg.num_steps}), test accuracy on "
      f"{r['num_test_loans']} held-out loans",
      ["privacy unit", "sigma", "dataset size", "eps per unit", "test accuracy"],
      [list(v.values()) for v in m.values()])
  t_sel = _common.table(
      f"Exercise 6(c): choosing among {b['num_settings']} (C, learning rate) settings, every "
      f"procedure with the zip release, total held at eps = {cfg.epsilon:g}",
      [dict(s, lecture=x) for s, x in zip(
          r["selection"], ("worst", "EM, sensitivity 1/n_val", "Papernot-Steinke in RDP"))],
      [("procedure", "procedure"), ("sigma per run", "sigma"), ("trainings", "trainings"),
       ("chosen (C, lr)", lambda x: x["chosen"] and "(%g, %.3g)" % tuple(x["chosen"])),
       ("eps claimed", "eps_claimed"), ("eps (training customers)", "eps_train_customers"),
       ("eps (validation customers)", "eps_validation_customers"),
       ("test accuracy", "test_accuracy"), ("lecture", "lecture")],
      note="Each procedure costs the worse of its two columns; every candidate trained on the "
           "training customers is a release they pay for.")
  t_five = _common.Table(
      "Exercise 6(d): the guarantee of a customer with k loans",
      ["loans k", "example-level eps", "example-level delta", "user-level eps",
       "user-level delta", "lecture"],
      [list(g.values()) + ["about 5 eps = 15" if g["loans"] == 5 else None]
       for g in r["five_loans"]],
      note="Group privacy: (k eps, k e^{(k-1) eps} delta); delta >= 1 promises nothing.")
  return [t_split, t_joint, t_zip, t_model, t_sel, t_five]


def _summary(cfg: Exercise6Config, r: dict) -> str:
  b, m, s, five, e = r["budget"], r["model"], r["selection"], r["five_loans"][1], cfg.epsilon
  acc = lambda v: _common.fmt(v["test_accuracy"])
  return (
      f"Budget: the lecture's 2.0 / 0.7 / 0.3 split accounted in one RDP account spends "
      f"{b['eps_joint_at_basic_sigma']:.2f} of {e:g}; at total {e:g} the model's sigma drops "
      f"from {b['sigma_basic']:.2f} to {b['sigma_joint']:.2f}. Zip codes: "
      f"{len(r['unreliable_ours'])} of {cfg.zip_codes} unreliable by noise sd > "
      f"{cfg.max_rate_sd:g}, {len(r['unreliable_lecture'])} by the lecture's < "
      f"{cfg.min_count:g} customers. Model at eps = {cfg.model_epsilon:g}: user-level "
      f"{acc(m['user'])}, example-level {acc(m['example'])}, non-private "
      f"{acc(m['non_private'])}. Selection at total {e:g}: exponential mechanism with all "
      f"{b['num_settings']} trainings charged needs sigma {b['sigma_em']:.2f} (test "
      f"{acc(s[1])}), repeat-and-select sigma {b['sigma_rs']:.2f} over {r['num_runs']} runs "
      f"(test {acc(s[2])}); tuning freely at sigma {b['sigma_joint']:.2f} really costs "
      f"{b['eps_naive_train']:.1f} for training customers and is unbounded for validation "
      f"customers. A five-loan customer under example-level DP: eps = "
      f"{five['example_eps']:g} with delta {five['example_delta']:.3g}; user-level: "
      f"({e:g}, {cfg.delta:g}).")


def main():
  _common.app_run(NAME, Exercise6Config, run)


if __name__ == "__main__":
  main()
