"""Shrunken run of experiments/recommender.py."""

import json
import math
import os
import tempfile

import numpy as np
from absl.testing import absltest

from dpjax import recommender
from experiments import recommender as rec_exp

_SMALL = dict(seed=0, num_users=300, num_items=12, mean_ratings_per_user=5.0,
              epsilons=(1.0, 1000.0), trials=1, rank=2, clamp=1.0, user_cap=3)


class RecommenderExperimentTest(absltest.TestCase):

  def test_run_small(self):
    out = tempfile.mkdtemp()
    res = rec_exp.run(rec_exp.RecommenderConfig(**_SMALL), out, progress=False, quiet=True)
    rec = res["record"]
    self.assertLen(rec["rows"], 4)
    self.assertEqual([r["privacy_unit"] for r in rec["rows"]], ["rating", "user"] * 2)
    base = rec["baselines"]
    for r in rec["rows"] + [{"factor_test": v["test"]} for v in base.values()]:
      self.assertTrue(math.isfinite(r["factor_test"]))
      self.assertBetween(r["factor_test"], 0.0, 4.0)
    # Almost no noise at eps = 1000 per rating: the private system is the exact one.
    big = rec["rows"][2]
    self.assertAlmostEqual(big["factor_test"], base["factor model (rank 2)"]["test"],
                           delta=0.02)
    self.assertAlmostEqual(big["global_effects_test"], base["global effects"]["test"],
                           delta=0.02)
    # The user-level reading of the rating-level noise: sum_k eps_k * (user / rating
    # sensitivity), with a user holding up to I = 12 ratings; group eps = m eps.
    s_r = recommender.sensitivities("rating", clamp=1.0)
    s_u = recommender.sensitivities("user", clamp=1.0, max_ratings_per_user=12)
    for u in rec["units"]:
      want = sum(f * u["epsilon"] * s_u[k] / s_r[k]
                 for k, f in zip(recommender.STATISTICS, recommender.DEFAULT_SPLIT))
      self.assertAlmostEqual(u["epsilon_user_same_noise"], want, places=9)
      self.assertAlmostEqual(u["group_epsilon_max"], u["max_ratings"] * u["epsilon"])
    self.assertTrue(os.path.exists(os.path.join(out, "recommender_rmse.png")))
    with open(res["path"]) as f:
      first = json.load(f)
    self.assertEqual(first["flags"]["epsilons"], [1.0, 1000.0])
    # Same flags and seed, same numbers.
    out2 = tempfile.mkdtemp()
    rec_exp.run(rec_exp.RecommenderConfig(**_SMALL), out2, progress=False, quiet=True)
    with open(os.path.join(out2, "results.json")) as f:
      self.assertEqual(json.load(f)["results"], first["results"])

  def test_bad_config(self):
    for kw in (dict(seed=-1), dict(num_users=0), dict(num_items=1), dict(epsilons=()),
               dict(epsilons=(0.0,)), dict(trials=0), dict(rank=-1), dict(rank=10_000),
               dict(clamp=0.0), dict(user_cap=0), dict(mean_ratings_per_user=0.5)):
      with self.subTest(kw):
        with self.assertRaisesRegex(ValueError, "^" + next(iter(kw))):
          rec_exp.RecommenderConfig(**kw)
    np.testing.assert_equal(rec_exp.RecommenderConfig().seed, 0)


if __name__ == "__main__":
  absltest.main()
