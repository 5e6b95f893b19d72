"""Benchmark: the cost of K gradient canaries per run in the white-box audit.

    .venv/bin/python -m benchmarks.audit_canaries     # M = 500, K = 100 -> results/*.json
    .venv/bin/python -m benchmarks.audit_canaries --models 668 --canaries 100 --timings 2

Two canary layouts of the same claim (sigma for eps = 4), timed round-robin in ONE process:
  * "single" / "multi": one chunk of `experiments.audit` (M models, fixed-gradient canaries
    C e_j in the data's last K unused features, scored by the summed LLR): 1 against K
    canaries, so K M white-box trials;
  * "leaf_single" / "leaf_multi": M runs of the per-step audit's training
    (`dpjax.audit.per_step_run.step_observations`: canaries in a parameter leaf the
    records' clipping never touches, every step's leaf observed), 1 against K canaries.
Figures: the ratios of best times multi / single and the white-box trials per second.
"""

from __future__ import annotations

from absl import app
from absl import flags

from benchmarks import report

_MODELS = flags.DEFINE_string("models", "500", "Comma-separated model counts M (multiples of 4).")
_CANARIES = flags.DEFINE_integer("canaries", 100, "Gradient canaries per run K (> 1).")
_REPEATS = flags.DEFINE_integer("timings", 2, "Timed repetitions (best is kept).")
_JSON = flags.DEFINE_string("json_out", None, "Where to write the figures (default: benchmarks/"
                             "results/audit_canaries.json, what RESULTS.md is built from).")
_EPSILON = 4.0


def runners(num_models: int, num_canaries: int) -> dict:
  """{"single": f, "multi": f}: zero-argument functions, each training and scoring one
  chunk of `num_models` audit models through `dpjax.audit.run.train_chunk` (the single- /
  K-canary designs of the same claim)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from dpjax import accounting, dpsgd, models  # pylint: disable=g-import-not-at-top
  from dpjax.audit import run as audit_run  # pylint: disable=g-import-not-at-top
  from dpjax.audit import variants  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  from experiments import audit  # pylint: disable=g-import-not-at-top
  cfg = audit.AuditConfig(trials=num_models // 2, canaries_per_run=num_canaries)
  sigma = accounting.calibrate_noise(_EPSILON, cfg.sampling_prob, cfg.num_steps, cfg.delta)
  setting = audit_run.Setting(f"eps={_EPSILON:g}", _EPSILON, sigma)
  key = jax.random.key(1)

  def setup(k):
    spec = dataclasses.replace(audit._spec(cfg), canaries_per_run=k)  # pylint: disable=protected-access
    data = canaries.audit_data(jax.random.key(0), cfg.base_size, unused_features=k)
    model = models.logistic_regression(data.num_features)
    claimed = dpsgd.DpSgdConfig(dataset_size=int(data.x_NxD.shape[0]),
                                sampling_prob=cfg.sampling_prob, num_steps=cfg.num_steps,
                                noise_multiplier=sigma, delta=cfg.delta)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      var = variants.variant("correct", claimed, model)
    return spec, data, model, var

  one, many = setup(1), setup(num_canaries)

  def chunk(parts):
    spec, data, model, var = parts
    return audit_run.train_chunk(key, spec, setting, data, var, model, 0, num_models)[3]

  from dpjax.audit import per_step_run  # pylint: disable=g-import-not-at-top
  _, leaf_data, leaf_model, leaf_var = one          # 151 records, one unused feature
  bits = {k: (per_step_run.canary_bits(num_models, k, 0) if k > 1 else
              (np.arange(num_models) % 2 == 0)[:, None]) for k in (1, num_canaries)}

  def leaf(k):
    o = per_step_run.step_observations(key, setting, leaf_data, leaf_model, leaf_var, bits[k])
    return o.block_until_ready()

  return {"single": lambda: chunk(one), "multi": lambda: chunk(many),
          "leaf_single": lambda: leaf(1), "leaf_multi": lambda: leaf(num_canaries)}


def measure(sizes, num_canaries, repeats, log=print) -> dict:
  """{"M<m>.multi_over_single": ratio of best times, ...} for each M in sizes."""
  res = {}
  for m in sizes:
    if m % 4:
      raise ValueError(f"--models must be multiples of 4, got {m}")
    _, best = report.interleaved_times(runners(m, num_canaries), repeats)
    for tag, one, many in (("", "single", "multi"), ("leaf_", "leaf_single", "leaf_multi")):
      ratio = best[many] / best[one]
      res[f"M{m}.{one}_s"] = best[one]
      res[f"M{m}.{many}_s"] = best[many]
      res[f"M{m}.{tag}multi_over_single"] = ratio
      res[f"M{m}.trials_per_s_{one}"] = m / best[one]
      res[f"M{m}.trials_per_s_{many}"] = m * num_canaries / best[many]
      log(f"M={m:6d} {tag or 'fixed_'}canaries: 1 canary {best[one]:.2f} s, {num_canaries} "
          f"canaries {best[many]:.2f} s, ratio {ratio:.2f} ({num_canaries / ratio:.0f}x the "
          "white-box trials per second)")
  return res


def main(argv):
  del argv
  if _CANARIES.value < 2:
    raise app.UsageError("--canaries must be >= 2")
  sizes = report.model_counts(_MODELS.value, "models")
  figures = dict(measure(sizes, _CANARIES.value, _REPEATS.value), canaries=_CANARIES.value)
  report.write("audit_canaries", {f"audit_canaries.{k}": v for k, v in figures.items()},
               _JSON.value)


if __name__ == "__main__":
  app.run(main)
