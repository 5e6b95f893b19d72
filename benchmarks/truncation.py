"""Benchmark: the truncating mode's cost, against Poisson batches, in one process.

    .venv/bin/python -m benchmarks.truncation      # writes benchmarks/results/truncation.json

n = 20,000 synthetic records with 64 features, an MLP (64, 128, 10), q = 256 / n, T = 78 steps
(one epoch), C = 1, sigma = 1, one model (`dpsgd.train_one`). Per layout (full mask:
`batch_capacity=None`; padded: "auto", K = 288) the Poisson run and the truncated one
(`DpSgdConfig(max_batch_size=256)`, the expected batch: about half the steps are cut) are
timed interleaved, best of --repeats, compilation excluded. Keys: `<layout>.<mode>_s`,
`<layout>.truncated_over_poisson`.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
from absl import app
from absl import flags

from benchmarks import report
from dpjax import dpsgd, models

_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per configuration (best kept).")
_JSON = flags.DEFINE_string("json", None, "Output file (default "
                            "benchmarks/results/truncation.json).")

N, F, CLASSES, BATCH = 20_000, 64, 10, 256


def _setup():
  kx, ky = jax.random.split(jax.random.key(0))
  x = jax.random.normal(kx, (N, F))
  y = jax.random.randint(ky, (N,), 0, CLASSES)
  model = models.mlp(F, hidden=(128,), num_classes=CLASSES)
  cfg = dpsgd.DpSgdConfig(dataset_size=N, sampling_prob=BATCH / N, num_steps=N // BATCH,
                          learning_rate=0.5)
  return x, y, model, cfg


def main(argv):
  del argv
  x, y, model, cfg = _setup()
  keep = jnp.ones((N,), bool)
  runs = {}
  for layout, capacity in (("full_mask", None), ("padded", "auto")):
    perf = dpsgd.PerformanceFlags(progress=False, batch_capacity=capacity)
    for mode, c in (("poisson", cfg), ("truncated",
                                       dataclasses.replace(cfg, max_batch_size=BATCH))):
      runs[(layout, mode)] = (c, perf)
  def once(c, perf):
    t = time.perf_counter()
    out = dpsgd.train_one(jax.random.key(1), x, y, keep, c, model, perf=perf)
    jax.block_until_ready(out.params)
    return time.perf_counter() - t
  for c, perf in runs.values():   # compile
    once(c, perf)
  best = {k: float("inf") for k in runs}
  for _ in range(_REPEATS.value):
    for k, (c, perf) in runs.items():
      best[k] = min(best[k], once(c, perf))
  out = {}
  for layout in ("full_mask", "padded"):
    for mode in ("poisson", "truncated"):
      out[f"{layout}.{mode}_s"] = best[(layout, mode)]
    out[f"{layout}.truncated_over_poisson"] = (best[(layout, "truncated")]
                                               / best[(layout, "poisson")])
  print(out)
  report.write("truncation", out, _JSON.value)


if __name__ == "__main__":
  app.run(main)
