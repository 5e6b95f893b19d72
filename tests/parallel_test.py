"""dpjax.parallel: runs sharded over 4 forced CPU devices equal one device.

The model axis (train_many_sharded) for three clipping paths; the record axis
(train_batch_sharded, data parallel) for logistic regression and an MLP (slow).
Across processes: tests/multiprocess_test.py.
"""

import json
import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
import pytest

_SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, numpy as np
    from dpjax import dpsgd, models, parallel
    assert len(jax.devices()) == 4, jax.devices()
    x = jax.random.normal(jax.random.key(0), (30, 4))
    y = (x[:, 0] > 0).astype(jnp.int32)
    keep = jax.random.bernoulli(jax.random.key(1), 0.7, (6, 30))
    cfg = dpsgd.DpSgdConfig(dataset_size=20, sampling_prob=0.3, num_steps=12,
                            noise_multiplier=1.1)
    out = {}
    mlp = models.mlp(4, hidden=(5,), num_classes=2)
    # A model the engine has no special path for: two-pass vmap(grad) with sqnorm.
    custom = models.Model(mlp.init, mlp.apply, 0.0, "custom", 2)
    # The custom model's sharded run is also chunked (perf.max_chunk=4: two chunks of one
    # model per device, the second padded by repeating models), so a chunked sharded
    # run is checked without compiling a fourth pair of programs.
    for name, model, max_chunk in [("lr", models.logistic_regression(4, l2=0.01), None),
                                   ("mlp", mlp, None), ("custom", custom, 4)]:
      ref = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model,
                             per_example_stats=True,
                             perf=dpsgd.PerformanceFlags(progress=False))
      sh = parallel.train_many_sharded(
          jax.random.key(2), x, y, keep, cfg, model, per_example_stats=True,
          perf=dpsgd.PerformanceFlags(max_chunk=max_chunk, progress=False))
      leaf = jax.tree.leaves(sh.params)[0]
      out[name] = {
          "max_param_diff": max(float(jnp.max(jnp.abs(a - b))) for a, b in
                                zip(jax.tree.leaves(ref.params), jax.tree.leaves(sh.params))),
          "stats_equal": bool(jnp.all(ref.stats["times_sampled"] == sh.stats["times_sampled"])),
          "shape": list(leaf.shape),
          "num_devices_used": len(leaf.sharding.device_set),
          "param_scale": float(jnp.max(jnp.abs(jax.tree.leaves(ref.params)[0]))),
      }
    print(json.dumps(out))
""")


_BATCH_SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, numpy as np
    from dpjax import dpsgd, models, parallel
    assert len(jax.devices()) == 4, jax.devices()
    x = jax.random.normal(jax.random.key(0), (32, 4))
    y = (x[:, 0] > 0).astype(jnp.int32)
    keep = jax.random.bernoulli(jax.random.key(1), 0.7, (2, 32))
    cfg = dpsgd.DpSgdConfig(dataset_size=20, sampling_prob=0.3, num_steps=12,
                            noise_multiplier=1.1)
    out = {}
    for name, model in [("lr", models.logistic_regression(4, l2=0.01)),
                        ("mlp", models.mlp(4, hidden=(5,), num_classes=2))]:
      ref = dpsgd.train_many(jax.random.key(2), x, y, keep, cfg, model,
                             per_example_stats=True,
                             perf=dpsgd.PerformanceFlags(progress=False))
      # 32 records, 8 per device: the clipped sum is an all-reduce, so the parameters
      # come out replicated and the per-record stats stay split along the records.
      dp = parallel.train_batch_sharded(jax.random.key(2), x, y, keep, cfg, model,
                                        per_example_stats=True,
                                        perf=dpsgd.PerformanceFlags(progress=False))
      ts = dp.stats["times_sampled"]
      out[name] = {
          "max_param_diff": max(float(jnp.max(jnp.abs(a - b))) for a, b in
                                zip(jax.tree.leaves(ref.params), jax.tree.leaves(dp.params))),
          "stats_equal": bool(jnp.all(ref.stats["times_sampled"] == ts)),
          "shape": list(jax.tree.leaves(dp.params)[0].shape),
          "params_replicated": all(l.sharding.is_fully_replicated
                                   for l in jax.tree.leaves(dp.params)),
          "stats_shard_shape": list(ts.sharding.shard_shape(ts.shape)),
          "num_devices_used": len(ts.sharding.device_set),
          "param_scale": float(jnp.max(jnp.abs(jax.tree.leaves(ref.params)[0]))),
      }
    print(json.dumps(out))
""")


def _run_on_4_devices(script):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                      " --xla_force_host_platform_device_count=4").strip()
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        env=env, cwd=root, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


class ParallelTest(absltest.TestCase):

  @pytest.mark.slow  # four host devices in a subprocess, about 70 s; tests/multiprocess_test.py checks model-axis sharding against one process by default
  def test_sharded_equals_single_device(self):
    res = _run_on_4_devices(_SCRIPT)
    for name in ("lr", "mlp", "custom"):
      r = res[name]
      self.assertEqual(r["shape"][0], 6)
      self.assertEqual(r["num_devices_used"], 4)
      self.assertGreater(r["param_scale"], 1e-3)   # the models did move
      self.assertLess(r["max_param_diff"], 1e-5, name)
      self.assertTrue(r["stats_equal"], name)

  @pytest.mark.slow
  def test_batch_sharded_equals_single_device(self):
    # Equal up to the float rounding of the all-reduced sum (1e-5; measured 1.2e-7
    # for logistic regression); the sample counts exactly.
    res = _run_on_4_devices(_BATCH_SCRIPT)
    for name in ("lr", "mlp"):
      r = res[name]
      self.assertEqual(r["shape"][0], 2)
      self.assertTrue(r["params_replicated"], name)
      self.assertEqual(r["stats_shard_shape"], [2, 8], name)   # 32 records / 4 devices
      self.assertEqual(r["num_devices_used"], 4)
      self.assertGreater(r["param_scale"], 1e-3)
      self.assertLess(r["max_param_diff"], 1e-5, name)
      self.assertTrue(r["stats_equal"], name)


if __name__ == "__main__":
  absltest.main()
