"""Tests of dpjax/dpsgd/inputs.py: the checks of train_many's records, labels and fixed-gradient records, and float limits of the records."""


import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import pytest
from dpjax import dpsgd
from dpjax import models
from tests import helpers


_F32_MAX = float(np.finfo(np.float32).max)


class RecordChecksTest(parameterized.TestCase):
  """Non-finite features or labels, and labels outside the model's range, are refused
  with the parameter and the first offending index named; huge finite values pass."""

  @parameterized.named_parameters(
      ("x_nan", "x", (3, 1), np.nan, 1, r"x_NxF\[3, 1\]"),
      ("x_inf", "x", (5, 0), -np.inf, 1, r"x_NxF\[5, 0\]"),
      ("y_nan", "y", 2, np.nan, 1, r"y_N must be finite.*y_N\[2\]"),
      ("y_inf", "y", 4, np.inf, 1, r"y_N must be finite.*y_N\[4\]"),
      ("y_binary_2", "y", 7, 2, 1, r"y_N.*\{0, 1\}.*y_N\[7\]"),
      ("y_binary_half", "y", 1, 0.5, 1, r"y_N.*\{0, 1\}.*y_N\[1\]"),
      ("y_binary_negative", "y", 0, -1, 1, r"y_N.*y_N\[0\]"),
      ("y_class_k", "y", 6, 3, 3, r"y_N.*\[0, 3\).*y_N\[6\]"),
      ("y_class_negative", "y", 9, -1, 3, r"y_N.*y_N\[9\]"),
      ("y_class_fraction", "y", 2, 1.5, 3, r"y_N.*y_N\[2\]"))
  def test_bad_records_refused(self, which, index, value, num_classes, pattern):
    x, y = helpers.binary_data()
    x, y = np.array(x), np.array(y, np.float32)
    if which == "x":
      x[index] = value
    else:
      y[index] = value
    model = (models.logistic_regression(4) if num_classes == 1
             else models.mlp(4, hidden=(), num_classes=num_classes))
    with self.assertRaisesRegex(ValueError, pattern):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool),
                       helpers.small_config(), model)
    with self.assertRaisesRegex(ValueError, pattern):
      dpsgd.train_one(jax.random.key(0), x, y, jnp.ones((24,), bool),
                      helpers.small_config(), model)

  def test_non_finite_canary_or_init_refused(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    with self.assertRaisesRegex(ValueError, r"fixed_gradients\.gradients_K must be finite"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), helpers.small_config(),
                       model, fixed_gradients=helpers.one_fixed({"w": jnp.ones(4).at[1].set(jnp.inf)},
                                                         np.ones(2, bool)))
    with self.assertRaisesRegex(ValueError, "init_params"):
      dpsgd.train_many(jax.random.key(0), x, y, jnp.ones((2, 24), bool), helpers.small_config(),
                       model, init_params={"w": jnp.full(4, jnp.nan)})


class FloatLimitsTest(parameterized.TestCase):
  """The acceptance test: no record of finite float32 values (features up to +-3.4e38,
  labels at the edges of their range) makes any model's parameters non-finite, on the
  GLM, ghost (MLP, CNN) and two-pass vmap paths."""

  def test_fraction_of_non_finite_models_is_zero_with_and_without_huge_records(self):
    self._check_non_finite_fraction("lr")

  @parameterized.named_parameters(("ghost_cnn", "cnn"), ("ghost_mlp", "mlp"),
                                  ("vmap_two_pass", "custom"))
  @pytest.mark.slow   # the other paths, 20-50 s each (ghost float limits: ghost_test)
  def test_fraction_of_non_finite_models_is_zero_other_paths(self, kind):
    self._check_non_finite_fraction(kind)

  def _check_non_finite_fraction(self, kind):
    n, m = 30, 400
    d = 16 if kind == "cnn" else 5
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 0], x[3, d - 1] = 3e19, 1e30, _F32_MAX, -_F32_MAX
    x[4, :] = _F32_MAX * np.where(np.arange(d) % 2, 1.0, -1.0)
    if kind == "lr":
      model, y = models.logistic_regression(d), np.arange(n) % 2
    elif kind == "cnn":
      model, y = models.cnn((4, 4, 1), (2,), num_classes=3), np.where(np.arange(n) % 2, 2, 0)
    else:
      base = models.mlp(d, hidden=(8,), num_classes=3)
      model = base if kind == "mlp" else models.Model(base.init, base.apply, 0.0, "custom", 3)
      y = np.where(np.arange(n) % 2, 2, 0)              # classes 0 and K - 1
    keep = np.ones((m, n), bool)
    keep[m // 2:, :5] = False                           # models 200..399 never see them
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=0.2, num_steps=25,
                            noise_multiplier=1.0, learning_rate=0.5)
    out = dpsgd.train_many(jax.random.key(1), x, y, jnp.asarray(keep), cfg, model,
                           per_example_stats=True, perf=helpers.QUIET)
    finite = np.all([np.all(np.isfinite(np.asarray(l).reshape(m, -1)), axis=1)
                     for l in jax.tree.leaves(out.params)], axis=0)
    self.assertEqual(1.0 - finite[: m // 2].mean(), 0.0)       # with the records
    self.assertEqual(1.0 - finite[m // 2:].mean(), 0.0)        # without them
    np.testing.assert_array_equal(out.finite, finite)
    np.testing.assert_array_equal(out.first_nonfinite_step, -1)
    # The huge records were sampled (about q T = 5 times per model), and the
    # per-example statistics hold no NaN.
    self.assertGreater(np.asarray(out.stats["times_sampled"])[: m // 2, :5].mean(), 3.0)
    self.assertFalse(np.any(np.isnan(np.asarray(out.stats["norm_sum"]))))


if __name__ == "__main__":
  absltest.main()
