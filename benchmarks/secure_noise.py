"""Benchmark: the cost of secure DP-SGD (grid clipping + exact integer noise).

    .venv/bin/python -m benchmarks.secure_noise     # M = 128, 2000 -> results/secure_noise.json
    .venv/bin/python -m benchmarks.secure_noise --models 128 --timings 2

The audit workload of `benchmarks.dpsgd`, timed round-robin in ONE process: the default
float32-noise engine against `privatizer.secure_components` (gradients rounded to the
grid C / 2^10 and summed in int32, rounded-Gaussian noise from a 95-bit table). The
figure is the ratio of best times secure / float.
"""

from __future__ import annotations

from absl import app
from absl import flags

from benchmarks import dpsgd as bench_dpsgd
from benchmarks import report

_SIZES = flags.DEFINE_string("models", "128,2000", "Comma-separated model counts M.")
_REPEATS = flags.DEFINE_integer("timings", 2, "Timed repetitions (best is kept).")
_JSON = flags.DEFINE_string("json_out", None, "Where to write the figures (default: "
                             "benchmarks/results/secure_noise.json, what RESULTS.md is built from).")


def measure(sizes, repeats, log=print) -> dict:
  """{"M<m>.secure_over_float": ratio of best times, ...} for each M in sizes."""
  from dpjax import models, privatizer  # pylint: disable=g-import-not-at-top
  b = bench_dpsgd
  x, y = b._data()  # pylint: disable=protected-access
  path, priv = privatizer.secure_components(b.SIGMA, b.C, models.logistic_regression(b.D))
  res = {}
  for m in sizes:
    _, best = report.interleaved_times(
        {"float": b.audit_runner(x, y, m),
         "secure": b.audit_runner(x, y, m, clipping=path, privatizer=priv)}, repeats)
    ratio = best["secure"] / best["float"]
    res[f"M{m}.float_s"] = best["float"]
    res[f"M{m}.secure_s"] = best["secure"]
    res[f"M{m}.secure_over_float"] = ratio
    log(f"M={m:6d}: float noise {best['float']:.3f} s, secure {best['secure']:.3f} s, "
        f"ratio {ratio:.2f}")
  return res


def main(argv):
  del argv
  sizes = report.model_counts(_SIZES.value, "models")
  figures = {f"secure_noise.{k}": v for k, v in measure(sizes, _REPEATS.value).items()}
  report.write("secure_noise", figures, _JSON.value)


if __name__ == "__main__":
  app.run(main)
