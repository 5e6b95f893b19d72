"""Benchmark: the cost of K gradient canaries per run in the white-box audit.

    .venv/bin/python -m benchmarks.audit_canaries     # M = 500, K = 100 -> results/*.json
    .venv/bin/python -m benchmarks.audit_canaries --models 668 --canaries 100 --timings 2

One chunk of `experiments.audit` (M models, sigma for eps = 4, trained and scored by
`dpjax.audit.run.train_chunk`), timed round-robin in ONE process:
  * "single": 1 gradient canary per run (the main job's chunk: C e_D on the data's last,
    unused feature);
  * "multi": K canaries per run in the default layout (a parameter leaf the records'
    clipping never touches, each canary's likelihood ratio summed inside the scan), so
    K M white-box trials;
  * "multi_fixed": K canaries per run as fixed gradients C e_j on the data's last K unused
    features, every step observed, then scored (`canary_layout="fixed_gradients"`).
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
  """{"single": f, "multi": f, "multi_fixed": f}: zero-argument functions, each training and
  scoring one chunk of `num_models` audit models through `dpjax.audit.run.train_chunk` (the
  single- / K-canary designs of the same claim, K canaries in either layout)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from dpjax import accounting, dpsgd, models  # pylint: disable=g-import-not-at-top
  from dpjax.audit import run as audit_run  # pylint: disable=g-import-not-at-top
  from dpjax.audit import variants  # pylint: disable=g-import-not-at-top
  from dpjax.data import canaries  # pylint: disable=g-import-not-at-top
  from experiments import audit  # pylint: disable=g-import-not-at-top
  cfg = audit.AuditConfig(trials=num_models // 2, canaries_per_run=num_canaries)
  sigma = accounting.calibrate_noise(_EPSILON, cfg.sampling_prob, cfg.num_steps, cfg.delta)
  setting = audit_run.Setting(f"eps={_EPSILON:g}", _EPSILON, sigma)
  key = jax.random.key(1)

  def setup(k, layout="parameter_leaf"):
    spec = dataclasses.replace(audit._spec(cfg), canaries_per_run=k,  # pylint: disable=protected-access
                               canary_layout=layout)
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
  fixed = setup(num_canaries, "fixed_gradients")

  def chunk(parts):
    spec, data, model, var = parts
    return audit_run.train_chunk(key, spec, setting, data, var, model, 0, num_models)[3]

  return {"single": lambda: chunk(one), "multi": lambda: chunk(many),
          "multi_fixed": lambda: chunk(fixed)}


def measure(sizes, num_canaries, repeats, log=print) -> dict:
  """{"M<m>.multi_over_single": ratio of best times, ...} for each M in sizes."""
  res = {}
  for m in sizes:
    if m % 4:
      raise ValueError(f"--models must be multiples of 4, got {m}")
    _, best = report.interleaved_times(runners(m, num_canaries), repeats)
    for tag, one, many in (("", "single", "multi"), ("fixed_", "single", "multi_fixed")):
      ratio = best[many] / best[one]
      res[f"M{m}.{one}_s"] = best[one]
      res[f"M{m}.{many}_s"] = best[many]
      res[f"M{m}.{tag}multi_over_single"] = ratio
      res[f"M{m}.trials_per_s_{one}"] = m / best[one]
      res[f"M{m}.trials_per_s_{many}"] = m * num_canaries / best[many]
      log(f"M={m:6d} {'fixed-gradient' if tag else 'parameter-leaf'} canaries: 1 canary {best[one]:.2f} s, {num_canaries} "
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
