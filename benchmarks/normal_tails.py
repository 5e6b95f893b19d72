"""Benchmark: the cost of `prng.standard_normal`'s exact tails on the audit workload.

    .venv/bin/python -m benchmarks.normal_tails                       # M = 2000, 20000
    .venv/bin/python -m benchmarks.normal_tails --models 2000 --timings 3 --json_out /tmp/t.json

The audit workload of `benchmarks.dpsgd`, round-robin in one process: "tails" (the shipped
`GaussianPrivatizer`), "body" (the 23-bit inverse-CDF alone, `_body_only_normal`, unaccounted)
and "body_again" (noise-floor control). Figure: best time tails / body (target <= 1.10).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

from absl import app
from absl import flags

from benchmarks import dpsgd as bench_dpsgd
from benchmarks import report

_SIZES = flags.DEFINE_string("models", "2000,20000", "Comma-separated model counts M.")
_REPEATS = flags.DEFINE_integer("timings", 3, "Timed repetitions (best is kept).")
_JSON = flags.DEFINE_string("json_out", None, "Where to write the figures (default: "
                             "benchmarks/results/normal_tails.json).")


def _body_only_normal(key, shape):
  """The 23-bit inverse-CDF normal without the tail redraw (support -5.42 .. +5.17)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dpjax import prng  # pylint: disable=g-import-not-at-top
  size = math.prod(shape)
  words = prng._threefry_words(key)  # pylint: disable=protected-access
  j = jnp.arange(size, dtype=jnp.uint32)
  bits = prng._stream_words(words, size, j)  # pylint: disable=protected-access
  return prng.bits_to_normal(bits).reshape(shape)


@dataclasses.dataclass(frozen=True)
class _BodyOnlyPrivatizer:
  """GaussianPrivatizer's transform with `_body_only_normal` as the sampler; `tag` only
  makes two instances unequal, so each compiles its own program."""
  accounted: ClassVar[bool] = False
  tag: int = 0

  def noise_stddev(self, noise_multiplier, l2_clip_norm):
    return float(noise_multiplier) * float(l2_clip_norm)

  def transform(self, noise_stddev, expected_batch_size, key):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    import optax  # pylint: disable=g-import-not-at-top
    from dpjax import prng  # pylint: disable=g-import-not-at-top
    from dpjax.privatizer import GaussianPrivatizerState  # pylint: disable=g-import-not-at-top

    def init_fn(params):
      del params
      return GaussianPrivatizerState(key, jnp.zeros((), jnp.int32))

    def update_fn(updates, state, params=None):
      del params
      leaves, treedef = jax.tree.flatten(updates)
      ks = prng.split(prng.fold_in(state.key, state.count), len(leaves))
      out = [l + noise_stddev * _body_only_normal(kk, l.shape).astype(l.dtype)
             for kk, l in zip(ks, leaves)]
      return (jax.tree.unflatten(treedef, out), GaussianPrivatizerState(state.key, state.count + 1))
    return optax.chain(optax.GradientTransformation(init_fn, update_fn),
                       optax.scale(1.0 / expected_batch_size))


def measure(sizes, repeats, log=print) -> dict:
  """{"M<m>.tails_over_body": ratio of best times, ...} for each M in sizes."""
  from dpjax import privatizer as privatizer_lib  # pylint: disable=g-import-not-at-top
  x, y = bench_dpsgd._data()  # pylint: disable=protected-access
  res = {}
  for m in sizes:
    run = functools.partial(bench_dpsgd.audit_runner, x, y, m)
    _, best = report.interleaved_times(
        {"body": run(privatizer=_BodyOnlyPrivatizer()),
         "tails": run(privatizer=privatizer_lib.GaussianPrivatizer()),
         "body_again": run(privatizer=_BodyOnlyPrivatizer(tag=1))}, repeats)
    ratio = best["tails"] / best["body"]
    res[f"M{m}.body_s"] = best["body"]
    res[f"M{m}.tails_s"] = best["tails"]
    res[f"M{m}.tails_over_body"] = ratio
    res[f"M{m}.control_body_again_over_body"] = best["body_again"] / best["body"]
    log(f"M={m:6d}: body-only sampler {best['body']:.3f} s, exact tails "
        f"{best['tails']:.3f} s, ratio {ratio:.3f} (control: the body-only program "
        f"compiled again, {best['body_again'] / best['body']:.3f})")
  return res


def main(argv):
  del argv
  sizes = report.model_counts(_SIZES.value, "models")
  report.emit("normal_tails", measure(sizes, _REPEATS.value), _JSON.value)


if __name__ == "__main__":
  app.run(main)
