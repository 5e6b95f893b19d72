"""Benchmark: the cost of secure DP-SGD (grid clipping + exact integer noise).

    .venv/bin/python -m benchmarks.secure_noise                  # M = 128, 2000
    .venv/bin/python -m benchmarks.secure_noise --models 128 --timings 2

The audit workload of `benchmarks.dpsgd` (logistic regression on 56 features,
n = 150, q = 0.2, T = 500, sigma = 1, C = 1, M models) trained in ONE process,
timed round-robin (`benchmarks.dpsgd_deep.interleaved_best`):

  * "float": the default engine (GLM clipping path, `GaussianPrivatizer`, float32
    noise);
  * "secure": `privatizer.secure_components(sigma, C, model)`: every clipped
    per-example gradient rounded to the grid C / 2^10 and summed in int32, plus
    rounded-Gaussian integer noise drawn from a 95-bit table (`dpjax.integer_noise`).

The figure is the ratio of best times secure / float.
"""

from __future__ import annotations

from absl import app
from absl import flags

from benchmarks import dpsgd as bench_dpsgd
from benchmarks import report
from benchmarks.dpsgd_deep import interleaved_best

_SIZES = flags.DEFINE_string("models", "128,2000", "Comma-separated model counts M.")
_REPEATS = flags.DEFINE_integer("timings", 2, "Timed repetitions (best is kept).")
_JSON = flags.DEFINE_string("json_out", None, "Where to write the figures (default: "
                             "print them).")


def measure(sizes, repeats, log=print) -> dict:
  """{"M<m>.secure_over_float": ratio of best times, ...} for each M in sizes."""
  from dpjax import models, privatizer  # pylint: disable=g-import-not-at-top
  b = bench_dpsgd
  x, y = b._data()  # pylint: disable=protected-access
  path, priv = privatizer.secure_components(b.SIGMA, b.C, models.logistic_regression(b.D))
  res = {}
  for m in sizes:
    best = interleaved_best({"float": b.audit_runner(x, y, m),
                             "secure": b.audit_runner(x, y, m, clipping=path,
                                                      privatizer=priv)}, repeats)
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
  report.emit("secure_noise", figures, _JSON.value)


if __name__ == "__main__":
  app.run(main)
