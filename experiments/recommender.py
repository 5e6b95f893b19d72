"""The DP recommender of McSherry & Mironov (KDD 2009) on a synthetic ratings world (lecture §8.3).

`data.ratings.sample` (rank-4 truth, ratings 1..5), 10 % held out. RMSE on held-out ratings and
against the truth of: global and item means; global effects and the factor model (`--rank`)
from exact statistics and from the release (`dpjax.recommender`) at each `--epsilons`, the unit
one rating, and one user (`--user_cap` ratings each). Privacy-unit table: the rating-level noise
per user, eps for up to I ratings and m eps by group privacy.

Command:  python -m experiments.recommender      (about 30 s of CPU)
Expected (seed 0; 10,000 users, 100 items, median user 16 ratings): test RMSE global mean 1.027,
item means 0.948, global effects 0.904, factor model 0.762 (0.452 vs truth). Private, one
rating: factor 0.913 / 0.822 / 0.771 / 0.764 at eps = 0.3 / 1 / 3 / 10; one user (cap 20):
1.002 / 0.960 / 0.919 / 0.836. Rating-level eps = 1 is eps = 54 per user, 16 for the median user.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import numpy as np
from tqdm import tqdm

from dpjax import mechanisms, recommender
from dpjax.accounting import composition
from dpjax.data import ratings
from experiments import _common, _plots

NAME = "recommender"
_LECTURE = "drops little, beats Cinematch (Netflix)"
_LECTURE_UNIT = "per rating, much weaker than per user (lecture §8.3)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecommenderConfig(_common.ExperimentConfig):
  """The ratings world, the eps grid and the recommender's knobs."""
  num_users: int = _common.option(10_000, "Users U of the synthetic world.", bounds=">=1")
  num_items: int = _common.option(100, "Items I of the synthetic world.", bounds=">=2")
  mean_ratings_per_user: float = _common.option(25.0, "Mean ratings per user.")
  epsilons: tuple[float, ...] = _common.option((0.3, 1.0, 3.0, 10.0),
                                               "Total eps of the release.", bounds=">0")
  trials: int = _common.option(2, "Noise draws per eps (RMSE averaged).", bounds=">=1")
  rank: int = _common.option(4, "Item factors taken from the private covariance.", bounds=">=0")
  clamp: float = _common.option(1.0, "B: bound on |rating - item mean| in the covariance.",
                                bounds=">0")
  user_cap: int = _common.option(20, "Ratings kept per user for user-level DP.", bounds=">=1")

  def __post_init__(self):
    super().__post_init__()
    _common.check_range(self, "mean_ratings_per_user", low=1.0, high=self.num_items)
    if self.rank > self.num_items:
      raise ValueError(f"rank must be <= num_items = {self.num_items}, got {self.rank}")


def _scores(stats, data, train, test, rank: int) -> tuple[float, float]:
  pred = recommender.predict(stats, data.user_R[train], data.item_R[train],
                             data.rating_R[train], data.user_R[test], data.item_R[test],
                             rank=rank)
  return (recommender.rmse(pred, data.rating_R[test]), recommender.rmse(pred, data.true_R[test]))


def run(cfg: RecommenderConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """RMSE against eps and the privacy-unit comparison; returns `_common.finish`'s dict."""
  key = jax.random.key(cfg.seed)
  k_data, k_noise = jax.random.split(key)
  data = ratings.sample(k_data, cfg.num_users, cfg.num_items,
                        mean_ratings_per_user=cfg.mean_ratings_per_user)
  test = data.test_R
  train = ~test
  u_tr, i_tr, r_tr = data.user_R[train], data.item_R[train], data.rating_R[train]
  args = (u_tr, i_tr, r_tr, data.num_users, data.num_items)
  m_u = np.bincount(u_tr, minlength=data.num_users)
  bar = tqdm(total=1 + len(cfg.epsilons) * cfg.trials * 2, desc=NAME, disable=not progress)

  exact = recommender.private_statistics(k_noise, *args, epsilon=math.inf, clamp=cfg.clamp)
  global_mean = float(np.mean(r_tr))
  baselines = {
      "global mean": (recommender.rmse(np.full(test.sum(), global_mean), data.rating_R[test]),
                      recommender.rmse(np.full(test.sum(), global_mean), data.true_R[test])),
      "item means": (recommender.rmse(exact.item_means_I[data.item_R[test]],
                                      data.rating_R[test]),
                     recommender.rmse(exact.item_means_I[data.item_R[test]],
                                      data.true_R[test])),
      "global effects": _scores(exact, data, train, test, 0),
      f"factor model (rank {cfg.rank})": _scores(exact, data, train, test, cfg.rank),
  }
  bar.update(1)

  rows, units = [], []
  with warnings.catch_warnings():
    # The float Laplace noise of the release (recommender module Warning).
    warnings.simplefilter("ignore", mechanisms.InsecureNoiseWarning)
    for e_index, eps in enumerate(cfg.epsilons):
      acc = {"rating": [], "user": []}
      for t in range(cfg.trials):
        kt = jax.random.fold_in(jax.random.fold_in(k_noise, e_index), t)
        st = recommender.private_statistics(kt, *args, epsilon=eps, clamp=cfg.clamp)
        acc["rating"].append((*_scores(st, data, train, test, 0),
                              *_scores(st, data, train, test, cfg.rank)))
        bar.update(1)
        su = recommender.private_statistics(kt, *args, epsilon=eps, clamp=cfg.clamp,
                                            privacy_unit="user",
                                            max_ratings_per_user=cfg.user_cap)
        acc["user"].append((*_scores(su, data, train, test, 0),
                            *_scores(su, data, train, test, cfg.rank)))
        bar.update(1)
      for unit in ("rating", "user"):
        a = np.asarray(acc[unit])
        rows.append({"epsilon": eps, "privacy_unit": unit,
                     "global_effects_test": float(a[:, 0].mean()),
                     "global_effects_truth": float(a[:, 1].mean()),
                     "factor_test": float(a[:, 2].mean()),
                     "factor_truth": float(a[:, 3].mean()),
                     "factor_test_std": float(a[:, 2].std())})
      # The rating-level noise read at user level.
      eps_user = recommender.epsilon_of_release(
          st.noise_scales, recommender.sensitivities(
              "user", clamp=cfg.clamp, max_ratings_per_user=data.num_items))
      units.append({"epsilon": eps, "epsilon_user_same_noise": eps_user,
                    "median_ratings": int(np.median(m_u)), "max_ratings": int(m_u.max()),
                    "group_epsilon_median": composition.group_privacy(
                        eps, 0.0, max(1, int(np.median(m_u))))[0],
                    "group_epsilon_max": composition.group_privacy(eps, 0.0,
                                                                   int(m_u.max()))[0]})
  bar.close()

  record = {"num_users": data.num_users, "num_items": data.num_items,
            "num_train": int(train.sum()), "num_test": int(test.sum()),
            "ratings_per_user_median": int(np.median(m_u)),
            "ratings_per_user_max": int(m_u.max()),
            "baselines": {k: {"test": v[0], "truth": v[1]} for k, v in baselines.items()},
            "rows": rows, "units": units, "split": list(recommender.DEFAULT_SPLIT),
            "sensitivities_rating": recommender.sensitivities("rating", clamp=cfg.clamp),
            "sensitivities_user": recommender.sensitivities(
                "user", clamp=cfg.clamp, max_ratings_per_user=cfg.user_cap)}

  fac = f"factor model (rank {cfg.rank})"
  table_rows = [[name, "–", "none", v[0], v[1], "–"] for name, v in baselines.items()]
  for r in rows:
    unit = "one rating" if r["privacy_unit"] == "rating" else f"one user (cap {cfg.user_cap})"
    table_rows.append([fac, r["epsilon"], unit, r["factor_test"], r["factor_truth"],
                       _LECTURE if r["privacy_unit"] == "rating" else "–"])
    table_rows.append(["global effects", r["epsilon"], unit, r["global_effects_test"],
                       r["global_effects_truth"], "–"])
  tables = [_common.Table(
      title=(f"Private recommender (McSherry & Mironov 2009): {data.num_users} users x "
             f"{data.num_items} items, {record['num_train']} training / {record['num_test']} "
             f"test ratings, mean of {cfg.trials} noise draws"),
      columns=["predictor", "ε", "privacy unit", "RMSE (test ratings)", "RMSE (truth)",
               "lecture / paper"],
      rows=table_rows,
      note=("Pure ε-DP by basic composition of six Laplace releases (global sum and count, "
            "item sums and counts, item-item covariance and weights; split "
            f"{list(recommender.DEFAULT_SPLIT)}). The per-user step (user effect, user "
            "factor) uses only the user's own ratings and is not accounted. Truth = the "
            "noiseless score clipped to [1, 5]. The paper's RMSEs are on Netflix data and "
            "are not comparable to this world; the lecture quotes only the qualitative "
            "result.")),
      _common.Table(
          title=("The privacy unit: the rating-level release read per user "
                 f"(median user {record['ratings_per_user_median']} ratings, most active "
                 f"{record['ratings_per_user_max']})"),
          columns=["ε per rating", "ε per user, same noise (no cap: m ≤ I)",
                   "group ε, median user", "group ε, most active user",
                   f"RMSE, rating level", f"RMSE, user level at the same ε (cap "
                   f"{cfg.user_cap})", "lecture"],
          rows=[[u["epsilon"], u["epsilon_user_same_noise"], u["group_epsilon_median"],
                 u["group_epsilon_max"],
                 next(r["factor_test"] for r in rows if r["epsilon"] == u["epsilon"]
                      and r["privacy_unit"] == "rating"),
                 next(r["factor_test"] for r in rows if r["epsilon"] == u["epsilon"]
                      and r["privacy_unit"] == "user"), _LECTURE_UNIT] for u in units],
          note=("Per-user ε of the same noise: sum over the six releases of user-level "
                "sensitivity / noise scale, with a user holding up to I ratings (user level: "
                "counts move by m, the weighted covariance by B²(m+1)/2 against 3B²/2 per "
                "rating). Group ε = m ε (pure DP); both are upper bounds, the smaller one "
                "holds. User level at the same ε: every user "
                "cut to a random subset of the cap, noise calibrated to the user-level "
                "sensitivities."))]
  figures = [_plot(out_dir, record, cfg.rank)]
  best = {r["privacy_unit"]: r for r in rows if r["epsilon"] == max(cfg.epsilons)}
  summary = (
      f"Test RMSE: global mean {baselines['global mean'][0]:.3f}, item means "
      f"{baselines['item means'][0]:.3f}, non-private global effects "
      f"{baselines['global effects'][0]:.3f}, non-private factor model "
      f"{baselines[fac][0]:.3f}. At ε = {max(cfg.epsilons):g} per rating the private factor "
      f"model scores {best['rating']['factor_test']:.3f}; per user (cap {cfg.user_cap}) at "
      f"the same ε {best['user']['factor_test']:.3f}. The rating-level noise at "
      f"ε = {units[-1]['epsilon']:g} is worth ε = {units[-1]['epsilon_user_same_noise']:.0f} "
      "per user: the paper's guarantee is per rating, as the lecture warns.")
  return _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=figures,
                        summary=summary, quiet=quiet)


def _plot(out_dir: str, record: dict, rank: int) -> str:
  """Test RMSE against eps, drawn from the record."""
  with _plots.figure(out_dir, "recommender_rmse.png", figsize=(5.5, 3.6)) as (fig, ax):
    for unit, style in (("rating", "-"), ("user", "--")):
      sel = [r for r in record["rows"] if r["privacy_unit"] == unit]
      eps = [r["epsilon"] for r in sel]
      label = "per rating" if unit == "rating" else "per user"
      ax.plot(eps, [r["factor_test"] for r in sel], "o" + style, color="C0",
              label=f"private factor model, {label}")
      ax.plot(eps, [r["global_effects_test"] for r in sel], "s" + style, color="C1",
              label=f"private global effects, {label}")
    for (name, v), color in zip(record["baselines"].items(), ("C3", "C4", "C1", "C0")):
      ax.axhline(v["test"], color=color, ls=":", label=f"{name} (non-private)")
    _plots.decorate(ax, xscale="log", xlabel="ε (total, pure DP)",
                    ylabel="RMSE on held-out ratings", title=f"Private recommender, rank {rank}",
                    legend=6)
  return "recommender_rmse.png"


def main():
  _common.app_run(NAME, RecommenderConfig, run)


if __name__ == "__main__":
  main()
