"""DP-SGD on the credit world (lecture §5, code 03): anatomy, cost of privacy, C, batch size.

    .venv/bin/python -m experiments.dpsgd                # about 60-90 s of CPU
    .venv/bin/python -m experiments.dpsgd --seeds 5 --clip_seeds 10 --test_size 40000

Logistic regression, batch 50, 20 epochs, C = 1, delta = 1e-5, eta * C = 0.5 unless stated, on
linear (n = 4000) and cubic features (n = 500): 1. one step's anatomy at theta = 0; 2. the cost
of privacy over eps; 3. the clipping norm C; 4. the batch size at fixed epochs and fixed steps.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dpjax import dpsgd, fitting, models, prng
from dpjax.clipping import glm
from dpjax.data import credit
from experiments import _common, _plots

NAME = "dpsgd"
DELTA = 1e-5
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
CLIP_NORMS = (0.01, 0.1, 1.0, 10.0, 100.0)
BATCHES = (10, 25, 50, 100, 250)
FIXED_STEPS = 400
FIXED_STEP_QS = (0.02, 0.05, 0.1, 0.2, 0.5)
ETA_C = 0.5

LECTURE = {
    "sigma": {"linear": 2.19, "cubic": 5.89},
    "cost": {("linear", 0.5): "drop 0.003", ("cubic", 0.5): 0.666, ("cubic", "newton"): 0.737,
             ("cubic", "noiseless"): 0.747, ("cubic", 8.0): 0.748},
    "clip_large_acc": 0.660, "clip_small_logloss": 1.547, "batch_epochs": {10: 0.671, 250: 0.745},
    "sigma_over_b": "0.162-0.168 (q >= 0.05)"}
_CUBIC_N = 500   # the cubic data set of demos 3 and 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpsgdExperimentConfig(_common.ExperimentConfig):
  """The four demos' settings (defaults = the lecture's lists)."""
  # At least two seeds: every table shows a standard deviation over seeds.
  seeds: int = _common.option(5, "Training seeds per setting (demos 2 and 4).", bounds=">=2")
  clip_seeds: int = _common.option(10, "Training seeds per C (demo 3).", bounds=">=2")
  test_size: int = _common.option(20_000, "People in the test sample.", bounds=">=1")
  anatomy_draws: int = _common.option(500, "Noisy steps drawn in demo 1.", bounds=">=1")
  epsilons: tuple[float, ...] = _common.option(EPSILONS, "Demo 2: target epsilons.", bounds=">0")
  clip_norms: tuple[float, ...] = _common.option(CLIP_NORMS, "Demo 3: clipping norms C.")
  batches: tuple[int, ...] = _common.option(BATCHES, "Demo 4a: expected batch sizes B.",
                                            bounds=">=1")
  fixed_step_qs: tuple[float, ...] = _common.option(
      FIXED_STEP_QS, f"Demo 4b: sampling rates q at T = {FIXED_STEPS} steps.", bounds="(0,1]")

  def __post_init__(self):
    super().__post_init__()
    _common.check_positive(self, "clip_norms", finite=False)
    _common.check_range(self, "batches", high=_CUBIC_N)


def _datasets(key, test_size):
  k_pub, k_lin, k_cub, k_test = jax.random.split(key, 4)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, 20_000).x_NxF)
  test = credit.sample(k_test, test_size)
  return {name: dict(x=feat(data.x_NxF, scaler), y=data.y_N,
                     x_test=np.asarray(feat(test.x_NxF, scaler), np.float64),
                     y_test=np.asarray(test.y_N, np.float64))
          for name, data, feat in (("linear", credit.sample(k_lin, 4000), credit.linear_features),
                                   ("cubic", credit.sample(k_cub, _CUBIC_N),
                                    credit.cubic_features))}


def _evaluate(w_MxD, x_test, y_test):
  """Accuracy and mean log loss per model: (float64[M], float64[M])."""
  z = x_test @ np.asarray(w_MxD, np.float64).T                   # [N, M]
  acc = models.accuracy(models.logistic_regression(x_test.shape[1]), {"w": w_MxD}, x_test,
                        y_test, float64=True)
  return acc, np.mean(np.logaddexp(0.0, z) - y_test[:, None] * z, axis=0)


def _cfg(n, q, steps, c=1.0, eps=None):
  kw = dict(dataset_size=n, sampling_prob=q, num_steps=steps, l2_clip_norm=c,
            delta=DELTA, learning_rate=ETA_C / c if math.isfinite(c) else ETA_C)
  if eps is None:
    return dpsgd.DpSgdConfig(noise_multiplier=0.0, **kw)
  return dpsgd.DpSgdConfig(**kw).calibrate(eps)


def _mean_sd(values, name="acc"):
  """{name_mean, name_sd} over seeds (sample standard deviation)."""
  return {f"{name}_mean": float(values.mean()), f"{name}_sd": float(values.std(ddof=1))}


def _train(key, d, cfg, seeds, stats=False):
  model = models.logistic_regression(d["x"].shape[1])
  out = dpsgd.train_many(key, d["x"], d["y"], jnp.ones((seeds, d["x"].shape[0]), bool), cfg, model,
                         per_example_stats=stats, perf=dpsgd.PerformanceFlags(progress=False))
  acc, ll = _evaluate(out.params["w"], d["x_test"], d["y_test"])
  res = {"acc": acc, "logloss": ll}
  if stats:
    res["clip_fraction"] = float(jnp.sum(out.stats["times_clipped"])
                                 / jnp.sum(out.stats["times_sampled"]))
  return res


def _train_sweep(key, d, cfgs, seeds):
  """All seeds of all cfgs (differing only in noise) as one run: float64[len(cfgs), seeds]."""
  idx = np.repeat(np.arange(len(cfgs)), seeds)
  out = dpsgd.train_sweep(key, d["x"], d["y"], jnp.ones((idx.size, d["x"].shape[0]), bool), cfgs,
                          idx, models.logistic_regression(d["x"].shape[1]),
                          perf=dpsgd.PerformanceFlags(progress=False))
  acc, _ = _evaluate(out.params["w"], d["x_test"], d["y_test"])
  return acc.reshape(len(cfgs), seeds)


def demo_anatomy(key, data, draws):
  rows, res = [], {}
  for name in ("linear", "cubic"):
    x, y = data[name]["x"], data[name]["y"]
    n, dim = x.shape
    q = 50.0 / n
    cfg = _cfg(n, q, int(round(20 / q)), eps=1.0)
    sigma, b = cfg.noise_multiplier, cfg.expected_batch_size
    w0 = {"w": jnp.zeros((dim,), jnp.float32)}
    full = glm.clipped_grad_sum(0.0, w0, x, y, jnp.ones((n,)), math.inf)[0]["w"] / n

    def one(k):
      k_m, k_n = jax.random.split(k)
      mask = prng.poisson_mask(k_m, q, n).astype(jnp.float32)
      s, _ = glm.clipped_grad_sum(0.0, w0, x, y, mask, 1.0)
      return s["w"] / b, sigma * prng.standard_normal(k_n, (dim,)) / b
    sig, noi = jax.jit(jax.vmap(one))(jax.random.split(jax.random.fold_in(key, n), draws))
    upd = sig + noi
    cos = lambda a, v: np.asarray(a @ v / (jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(v)))
    toward = jnp.asarray(fitting.fit_logistic(x, y, l2=1e-4, num_iters=50, tol=1e-10),
                         jnp.float32)          # theta* - theta0, theta0 = 0
    r = {"n": n, "d": dim, "q": q, "steps": cfg.num_steps, "sigma": sigma,
         "signal_norm": float(jnp.mean(jnp.linalg.norm(sig, axis=1))),
         "noise_norm_expected": sigma * 1.0 * math.sqrt(dim) / b,
         "noise_norm_realised": float(jnp.mean(jnp.linalg.norm(noi, axis=1))),
         "cos_signal_vs_full_grad": float(np.mean(cos(sig, full))),
         "cos_update_vs_full_grad": float(np.mean(cos(upd, full))),
         "cos_update_vs_theta_star": float(np.mean(cos(-upd, toward)))}
    res[name] = r
    rows.append([f"{name}, n={n}, d={dim}", q, cfg.num_steps, sigma, LECTURE["sigma"][name],
                 r["signal_norm"], r["noise_norm_expected"],
                 r["signal_norm"] / r["noise_norm_expected"], r["cos_update_vs_full_grad"],
                 r["cos_update_vs_theta_star"]])
  table = _common.Table(
      "Demo 1: anatomy of one DP-SGD step at theta = 0 (eps = 1, C = 1, B = 50, 20 epochs)",
      ["setting", "q", "T", "sigma", "lecture sigma", "signal ||sum clip g||/B",
       "noise sigma C sqrt(d)/B", "signal/noise", "cos(update, full grad)",
       "cos(-update, theta*)"], rows,
      note=f"Means over {draws} independent draws of the mask and noise.")
  return res, table


def demo_cost(key, data, seeds, epsilons=EPSILONS, progress=True):
  res, rows = {}, []
  settings = tuple(epsilons) + ("noiseless",)
  for i, name in enumerate(_progress(("linear", "cubic"), "demo 2", progress)):
    n = data[name]["x"].shape[0]
    q = 50.0 / n
    cfgs = [_cfg(n, q, int(round(20 / q)), eps=None if eps == "noiseless" else eps)
            for eps in settings]
    acc = _train_sweep(jax.random.fold_in(key, i), data[name], cfgs, seeds)
    for eps, cfg, a in zip(settings, cfgs, acc):
      res[f"{name}/{eps}"] = {**_mean_sd(a), "sigma": cfg.noise_multiplier, "acc": a.tolist()}
  for name in ("linear", "cubic"):
    d = data[name]
    w = fitting.fit_logistic(d["x"], d["y"], l2=1e-4, num_iters=50, tol=1e-10)
    acc, _ = _evaluate(w[None, :], d["x_test"], d["y_test"])
    res[f"{name}/newton"] = {"acc_mean": float(acc[0])}
    ref = res[f"{name}/noiseless"]["acc_mean"]
    rows.append([name, "Newton (non-private)", None, float(acc[0]), None, None,
                 LECTURE["cost"].get((name, "newton"))])
    rows.append([name, "clipped, no noise", 0.0, ref, res[f"{name}/noiseless"]["acc_sd"], 0.0,
                 LECTURE["cost"].get((name, "noiseless"))])
    for eps in epsilons:
      r = res[f"{name}/{eps}"]
      rows.append([name, f"eps = {eps:g}", r["sigma"], r["acc_mean"], r["acc_sd"],
                   ref - r["acc_mean"], LECTURE["cost"].get((name, eps))])
  table = _common.Table(
      f"Demo 2: the cost of privacy (test accuracy, {seeds} seeds, B = 50, 20 epochs, C = 1)",
      ["features", "training", "sigma", "accuracy", "sd", "drop vs noiseless", "lecture"],
      rows, note="linear: 6 parameters, n = 4000; cubic: 56 parameters, n = 500.")
  return res, table


def demo_clip(key, data, seeds, eps=2.0, clip_norms=CLIP_NORMS, progress=True):
  d = data["cubic"]
  n = d["x"].shape[0]
  q, res, rows = 50.0 / n, {}, []
  for i, c in enumerate(_progress(clip_norms, "demo 3", progress)):
    cfg = _cfg(n, q, int(round(20 / q)), c=c, eps=eps)
    r = _train(jax.random.fold_in(key, i), d, cfg, seeds, stats=True)
    res[str(c)] = {**_mean_sd(r["acc"]), **_mean_sd(r["logloss"], "logloss"),
                   "clip_fraction": r["clip_fraction"]}
    lec = (f"acc {LECTURE['clip_large_acc']}" if c == max(clip_norms) else
           f"log loss {LECTURE['clip_small_logloss']}" if c == min(clip_norms) else None)
    rows.append([c, ETA_C / c, res[str(c)]["clip_fraction"], res[str(c)]["acc_mean"],
                 res[str(c)]["acc_sd"], res[str(c)]["logloss_mean"], lec])
  table = _common.Table(
      f"Demo 3: clipping norm C with eta*C = {ETA_C} fixed (cubic, n = 500, eps = {eps:g}, "
      f"{seeds} seeds)",
      ["C", "eta", "fraction clipped", "accuracy", "sd", "log loss", "lecture"], rows)
  return res, table


def demo_batch(key, data, seeds, batches=BATCHES, fixed_step_qs=FIXED_STEP_QS, progress=True):
  d = data["cubic"]
  n = d["x"].shape[0]
  res, rows_e, rows_s = {"epochs": {}, "steps": {}}, [], []
  runs = [("epochs", b / n, int(round(20 * n / b))) for b in batches]
  runs += [("steps", q, FIXED_STEPS) for q in fixed_step_qs]
  for i, (kind, q, steps) in enumerate(_progress(runs, "demo 4", progress)):
    cfg = _cfg(n, q, steps, eps=1.0)
    r = _train(jax.random.fold_in(key, i), d, cfg, seeds)
    b, sigma = cfg.expected_batch_size, cfg.noise_multiplier
    e = res[kind][f"{b:g}"] = {"q": q, "B": b, "steps": steps, "sigma": sigma,
                               "sigma_over_b": sigma / b, **_mean_sd(r["acc"])}
    (rows_e if kind == "epochs" else rows_s).append(
        [b, q, steps, sigma, sigma / b, e["acc_mean"], e["acc_sd"],
         LECTURE["batch_epochs"].get(int(round(b))) if kind == "epochs"
         else LECTURE["sigma_over_b"] if q == 0.05 else None])
  cols = ["B", "q", "T", "sigma", "sigma/B", "accuracy", "sd", "lecture"]
  t1 = _common.Table(f"Demo 4a: batch size at 20 epochs (cubic, n = 500, eps = 1, {seeds} seeds)",
                     cols, rows_e)
  t2 = _common.Table(f"Demo 4b: batch size at T = {FIXED_STEPS} steps (cubic, n = 500, eps = 1)",
                     cols, rows_s)
  return res, (t1, t2)


def _progress(items, desc, enabled=True):
  return tqdm(list(items), desc=desc, leave=False, disable=not enabled)


def run(cfg: DpsgdExperimentConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Runs the four demos; writes results.json and the figure; returns `_common.finish`'s dict."""
  epsilons, clip_norms = cfg.epsilons, cfg.clip_norms
  k_data, k_anat, k_cost, k_clip, k_batch = jax.random.split(jax.random.key(cfg.seed), 5)
  data = _datasets(k_data, cfg.test_size)
  anat, t_anat = demo_anatomy(k_anat, data, cfg.anatomy_draws)
  cost, t_cost = demo_cost(k_cost, data, cfg.seeds, epsilons, progress)
  clip, t_clip = demo_clip(k_clip, data, cfg.clip_seeds, clip_norms=clip_norms, progress=progress)
  batch, (t_b1, t_b2) = demo_batch(k_batch, data, cfg.seeds, cfg.batches, cfg.fixed_step_qs,
                                   progress)
  results = {"anatomy": anat, "cost": cost, "clip": clip, "batch": batch,
             "bayes_note": "accuracy ceiling of the credit world ~0.79"}
  e0 = min(epsilons)
  lin_drop = cost["linear/noiseless"]["acc_mean"] - cost[f"linear/{e0}"]["acc_mean"]
  summary = (
      f"One DP-SGD step at eps = 1: linear/4000 has signal/noise "
      f"{anat['linear']['signal_norm'] / anat['linear']['noise_norm_expected']:.2f} "
      f"(sigma {anat['linear']['sigma']:.2f}), cubic/500 "
      f"{anat['cubic']['signal_norm'] / anat['cubic']['noise_norm_expected']:.2f} "
      f"(sigma {anat['cubic']['sigma']:.2f}; lecture 2.19 / 5.89). At eps = {e0:g} the linear "
      f"model loses {lin_drop:.3f} accuracy against clipped-noiseless training while the "
      f"cubic one falls to {cost[f'cubic/{e0}']['acc_mean']:.3f} (noiseless "
      f"{cost['cubic/noiseless']['acc_mean']:.3f}, Newton {cost['cubic/newton']['acc_mean']:.3f})."
      " Small C gives the best accuracy but the worst log loss; larger batches are "
      "better at fixed epochs; at fixed steps sigma/B is nearly constant for q >= 0.05.")
  return _common.finish(cfg, out_dir, NAME, results, tables=[t_anat, t_cost, t_clip, t_b1, t_b2],
                        figures=_plots.dpsgd_cost_and_clip(out_dir, results, epsilons, clip_norms),
                        summary=summary, quiet=quiet)


def main():
  warnings.simplefilter("ignore", category=FutureWarning)
  _common.app_run(NAME, DpsgdExperimentConfig, run)


if __name__ == "__main__":
  main()
