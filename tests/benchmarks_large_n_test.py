"""benchmarks/large_n.py: its data, its derived figures and its RESULTS.md section."""

import os
import sys
import tempfile
from unittest import mock

import numpy as np
import pytest
from absl.testing import absltest

from benchmarks import large_n
from benchmarks import report


class SyntheticImagesTest(absltest.TestCase):

  def test_shapes_range_and_determinism(self):
    x, y, xt, yt = large_n.synthetic_images(3, 500, 200)
    self.assertEqual((x.shape, y.shape, xt.shape, yt.shape),
                     ((500, 784), (500,), (200, 784), (200,)))
    self.assertEqual((x.dtype, y.dtype), (np.float32, np.int32))
    self.assertTrue(np.all((x >= 0) & (x <= 1)))
    self.assertTrue(np.all((y >= 0) & (y < 10)))
    x2, y2, _, _ = large_n.synthetic_images(3, 500, 200)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    self.assertFalse(np.array_equal(x, large_n.synthetic_images(4, 500)[0]))

  def test_classes_are_separable_by_template(self):
    # Nearest class mean (estimated on the training part) classifies the test part
    # far above chance: the images carry their class.
    x, y, xt, yt = large_n.synthetic_images(0, 2000, 500)
    means = np.stack([x[y == c].mean(axis=0) for c in range(10)])
    pred = np.argmin(((xt[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    self.assertGreater(np.mean(pred == yt), 0.9)

  def test_steps_per_epoch(self):
    self.assertEqual(large_n.steps_per_epoch(60_000), 234)   # round(60000 / 256)
    self.assertEqual(large_n.steps_per_epoch(100), 1)


class LargeNSectionTest(absltest.TestCase):

  def _figures(self, **over):
    f = {"n": 60000, "batch": 256, "steps_per_epoch": 234, "l2_clip_norm": 1.0,
         "noise_multiplier": 1.0,
         "mlp.capacity": 288, "mlp.nonprivate_epoch_s": 2.0, "mlp.dp_padded_epoch_s": 2.4,
         "mlp.full_mask_epoch_s": 120.0, "mlp.opacus_epoch_s": 12.0,
         "mlp.dp_over_nonprivate": 1.2, "mlp.full_mask_over_padded": 50.0,
         "mlp.opacus_over_ours": 5.0, "mlp.target_dp_over_nonprivate": 1.3,
         "mlp.target_full_mask_over_padded": 10.0, "mlp.full_mask_timed_n": 60000,
         "mlp.full_mask_steps_timed": [1, 3], "mlp.full_mask_per_step_s": 0.5,
         "mlp.full_mask_temp_bytes": 2 ** 29,
         "mlp.peak_rss_bytes.dp_padded": 2 ** 30, "mlp.accuracy.dp_padded": 0.9,
         "cnn.capacity": 288, "cnn.nonprivate_epoch_s": 10.0, "cnn.dp_padded_epoch_s": 25.0,
         "cnn.full_mask_epoch_s": 3000.0, "cnn.dp_over_nonprivate": 2.5,
         "cnn.full_mask_over_padded": 120.0, "cnn.target_dp_over_nonprivate": 2.0,
         "cnn.target_full_mask_over_padded": 10.0, "cnn.full_mask_timed_n": 6000,
         "cnn.full_mask_steps_timed": [1, 2], "cnn.full_mask_per_step_s": 13.0,
         "cnn.full_mask_temp_bytes": 20 * 2 ** 30, "cnn.opacus_skipped": "not importable",
         "cnn.profile.mask": 0.1, "cnn.profile.fixed_batch_dp": 20.0}
    f.update(over)
    return f

  def test_render(self):
    tmp = tempfile.mkdtemp()
    report.write("large_n", self._figures(), os.path.join(tmp, "large_n.json"))
    text = report.render(tmp)
    self.assertIn("## DP-SGD at n = 60,000", text)
    self.assertIn("| MLP 784→256→256→10 | 288 | 2.00 | 2.40 | 120 | 12.0 | "
                  "1.20× (target ≤ 1.3×: met) | 50.00× (target ≥ 10×: met) | 5.00× |",
                  text)
    self.assertIn("2.50× (target ≤ 2×: missed)", text)
    self.assertIn("timed at n = 6,000 (at n = 60,000 its clipped sum alone needs 20.0 GiB", text)
    self.assertIn("scaled by 10, a lower bound", text)
    self.assertIn("| CNN 28×28 (16, 32) | 288 | 10.00 | 25.00 | ≥ 3,000 |", text)
    self.assertIn("Opacus not timed: not importable", text)
    self.assertIn("| 1.00 |", text)          # the DP configuration's peak RSS in GiB
    self.assertIn("Command: `python -m benchmarks.large_n", text)
    self.assertIn("| CNN 28×28 (16, 32) | 0.100 |", text)   # the profile table

  def test_per_workload_commands(self):
    tmp = tempfile.mkdtemp()
    report.write("large_n", self._figures(**{"mlp.command": "python -m benchmarks.large_n a",
                                             "cnn.command": "python -m benchmarks.large_n b"}),
                 os.path.join(tmp, "large_n.json"))
    self.assertIn("Commands: MLP 784→256→256→10 `python -m benchmarks.large_n a`; "
                  "CNN 28×28 (16, 32) `python -m benchmarks.large_n b`.", report.render(tmp))

  def test_ratio_vs_target(self):
    self.assertEqual(report._ratio_vs_target(1.3, 1.3, True), "1.30× (target ≤ 1.3×: met)")
    self.assertEqual(report._ratio_vs_target(1.31, 1.3, True),
                     "1.31× (target ≤ 1.3×: missed)")
    self.assertEqual(report._ratio_vs_target(9.99, 10, False),
                     "9.99× (target ≥ 10×: missed)")
    self.assertEqual(report._ratio_vs_target(None, 10, False), "–")


class BatchSweepTest(absltest.TestCase):

  def test_batch_target(self):
    self.assertEqual(large_n.batch_target(256, 60_000), 1.6)
    self.assertEqual(large_n.batch_target(1024, 60_000), 1.3)
    self.assertEqual(large_n.batch_target(4096, 60_000), 1.3)
    # --small: n / 16 and B / 16 keep q, and so the target.
    self.assertEqual(large_n.batch_target(16, 3_750), 1.6)
    self.assertEqual(large_n.batch_target(64, 3_750), 1.3)
    self.assertEqual(large_n.steps_per_epoch(60_000, 4096), 15)   # round(60000 / 4096)

  def test_render(self):
    f = {"n": 60000, "batches": [256, 4096], "l2_clip_norm": 1.0, "noise_multiplier": 1.0}
    for b, (wall, cpu) in {256: ((2.0, 3.0), (1.0, 1.5)), 4096: ((4.0, 4.8), (2.0, 2.8))}.items():
      f.update({f"mlp.B{b}.capacity": 288 if b == 256 else 4224,
                f"mlp.B{b}.steps_per_epoch": large_n.steps_per_epoch(60000, b),
                f"mlp.B{b}.nonprivate_epoch_s": wall[0], f"mlp.B{b}.dp_epoch_s": wall[1],
                f"mlp.B{b}.dp_over_nonprivate": wall[1] / wall[0],
                f"mlp.B{b}.nonprivate_epoch_cpu_s": cpu[0], f"mlp.B{b}.dp_epoch_cpu_s": cpu[1],
                f"mlp.B{b}.dp_over_nonprivate_cpu": cpu[1] / cpu[0],
                f"mlp.B{b}.target_dp_over_nonprivate": large_n.batch_target(b, 60000),
                f"mlp.B{b}.compile_s.dp": 9.5, f"mlp.B{b}.compile_s.nonprivate": 2.5,
                f"mlp.B{b}.peak_rss_bytes.dp_padded": 2 ** 30,
                f"mlp.B{b}.opacus_skipped": "not importable"})
    tmp = tempfile.mkdtemp()
    report.dump(os.path.join(tmp, "large_n_batches.json"),
                {"benchmark": "large_n_batches", "command": "python -m benchmarks.large_n x",
                 "environment": {}, "figures": f})
    text = report.render(tmp)
    self.assertIn("## DP overhead by batch size, n = 60,000", text)
    self.assertIn("| MLP 784→256→256→10 | 256 | 288 | 234 | 2.00 | 3.00 | 1.50× (target ≤ "
                  "1.6×: met) | 1.00 | 1.50 | 1.50× (target ≤ 1.6×: met) | – | – |", text)
    self.assertIn("| MLP 784→256→256→10 | 4,096 | 4224 | 15 | 4.00 | 4.80 | 1.20× (target ≤ "
                  "1.3×: met) | 2.00 | 2.80 | 1.40× (target ≤ 1.3×: missed) |", text)
    self.assertIn("| MLP 784→256→256→10 | 4,096 | 2.5 | 9.5 | – | 1.00 |", text)
    self.assertIn("Opacus not timed: not importable.", text)
    self.assertIn("Compile time (first call − best call, s, wall)", text)   # an older file
    f["compile_timing"] = "aot"
    report.dump(os.path.join(tmp, "large_n_batches.json"),
                {"benchmark": "large_n_batches", "command": "python -m benchmarks.large_n x",
                 "environment": {}, "figures": f})
    self.assertIn("Compile time (`jax.jit(...).lower(...).compile()` of each program, timed "
                  "apart, s, wall)", report.render(tmp))

  @pytest.mark.slow  # compiles six programs (minutes of CPU)
  def test_measure_batches_small(self):
    f = large_n.measure_batches(["mlp"], large_n.SMALL_N, [16, 256], repeats=1,
                                skip_opacus=True, skip_memory=True, log=lambda s: None)
    for b in (16, 256):
      g = lambda k, b=b: f[f"mlp.B{b}.{k}"]
      self.assertEqual(g("steps_per_epoch"), round(large_n.SMALL_N / b))
      self.assertAlmostEqual(g("dp_over_nonprivate"), g("dp_epoch_s") / g("nonprivate_epoch_s"))
      self.assertAlmostEqual(g("dp_over_nonprivate_cpu"),
                             g("dp_epoch_cpu_s") / g("nonprivate_epoch_cpu_s"))
      self.assertGreaterEqual(g("capacity"), b)   # the padded layout at both sizes
      self.assertGreater(g("compile_s.dp"), 0)    # timed apart: never negative
      self.assertGreater(g("compile_s.nonprivate"), 0)
      self.assertGreater(g("accuracy.dp"), 0.2)   # chance is 0.1


class CompileTimeAndCacheTest(absltest.TestCase):

  def test_compile_times_time_each_programs_ahead_of_time_compilation(self):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    compiled = []
    fn = jax.jit(lambda v: jnp.sin(v) * 2.0)
    runner = large_n._Runner(lambda: fn(jnp.ones(3)),
                             lambda: compiled.append(fn.lower(jnp.ones(3)).compile()))
    out = large_n.compile_times({"a": runner, "b": large_n._Runner(lambda: None)}, ["a"],
                                log=lambda s: None)
    self.assertGreater(out["a"], 0.0)
    self.assertEqual(len(compiled), 1)
    np.testing.assert_allclose(compiled[0](jnp.ones(3)), 2.0 * np.sin(np.ones(3)), rtol=1e-6)
    self.assertIsNone(large_n._Runner(lambda: None).compile_s())   # no program

  def test_compilation_cache_folder_is_removed_and_settings_restored(self):
    import jax  # pylint: disable=g-import-not-at-top
    before = jax.config.jax_compilation_cache_dir
    with large_n._compilation_cache(True) as cache_dir:
      self.assertTrue(os.path.isdir(cache_dir))
      self.assertEqual(jax.config.jax_compilation_cache_dir, cache_dir)
    self.assertFalse(os.path.exists(cache_dir))
    self.assertEqual(jax.config.jax_compilation_cache_dir, before)
    with large_n._compilation_cache(False) as cache_dir:
      self.assertIsNone(cache_dir)


class MergeTest(absltest.TestCase):

  def test_kept_figures_keep_other_workloads_with_their_command(self):
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "large_n.json")
    self.assertEqual(large_n._kept_figures(path, ["cnn"], 60000), {})   # no file yet
    with mock.patch.object(sys, "argv", ["large_n.py", "--workloads", "mlp"]):
      report.write("large_n", {"n": 60000, "mlp.dp_padded_epoch_s": 2.0,
                               "cnn.dp_padded_epoch_s": 9.0}, path)
    kept = large_n._kept_figures(path, ["cnn"], 60000)
    self.assertEqual(kept, {"n": 60000, "mlp.dp_padded_epoch_s": 2.0,
                            "mlp.command": "python -m benchmarks.large_n --workloads mlp"})
    with self.assertRaisesRegex(ValueError, "n = 60000, not 6000"):
      large_n._kept_figures(path, ["cnn"], 6000)


class HarnessSmokeTest(absltest.TestCase):

  @pytest.mark.slow  # compiles the DP-SGD programs (minutes of CPU)
  def test_measure_small(self):
    # n = 4096, q = 1/16: the default layout is padded (K = 288 <= n / 8).
    f = large_n.measure(["mlp"], 4096, repeats=1, skip_opacus=True, skip_memory=True,
                        shrink=4, log=lambda s: None)
    self.assertEqual(f["steps_per_epoch"], 16)
    self.assertEqual(f["mlp.capacity"], f["mlp.default_capacity"])
    self.assertAlmostEqual(f["mlp.dp_over_nonprivate"],
                           f["mlp.dp_padded_epoch_s"] / f["mlp.nonprivate_epoch_s"])
    self.assertAlmostEqual(f["mlp.full_mask_over_padded"],
                           f["mlp.full_mask_epoch_s"] / f["mlp.dp_padded_epoch_s"])
    self.assertGreater(f["mlp.full_mask_epoch_s"], 0)
    # Both trained models beat chance (10 %) on held-out images after one epoch.
    self.assertGreater(f["mlp.accuracy.nonprivate"], 0.3)
    self.assertGreater(f["mlp.accuracy.dp_padded"], 0.3)
    # The profile runs when the DP epoch misses its target, and then has every part.
    if f["mlp.dp_over_nonprivate"] > large_n.TARGETS["mlp"]:
      for part in ("mask", "pad", "gather", "clipped_sum", "noise_update", "fixed_batch_dp",
                   "host_check"):
        self.assertGreater(f[f"mlp.profile.{part}"], 0)
    else:
      self.assertNotIn("mlp.profile.mask", f)


if __name__ == "__main__":
  absltest.main()
