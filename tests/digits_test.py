"""Tests for dpjax.data.digits: the split is a permutation, scaling is public, shapes hold."""

import jax
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from sklearn import datasets

from dpjax.data import digits


def _rows(x, y):
  """Rows [pixels..., label] sorted lexicographically, as a canonical multiset."""
  a = np.concatenate([np.asarray(x, np.float64), np.asarray(y, np.float64)[:, None]], axis=1)
  return a[np.lexsort(a.T[::-1])]


class DigitsTest(parameterized.TestCase):

  @parameterized.named_parameters(("quarter", 0.25, 449), ("half", 0.5, 898), ("tenth", 0.1, 180))
  def test_split_is_a_partition_of_the_bundled_data(self, frac, num_test):
    d = digits.load(jax.random.key(3), test_fraction=frac)
    self.assertEqual(d.x_test_NxF.shape, (num_test, 64))
    self.assertEqual(d.x_train_NxF.shape, (1797 - num_test, 64))
    self.assertEqual(d.x_train_NxF.dtype, np.float32)
    self.assertEqual(d.y_train_N.dtype, np.int32)
    bunch = datasets.load_digits()
    ours = _rows(np.concatenate([d.x_train_NxF, d.x_test_NxF]) * 16.0,
                 np.concatenate([d.y_train_N, d.y_test_N]))
    np.testing.assert_array_equal(ours, _rows(bunch.data, bunch.target))

  def test_scaling_uses_the_public_constant(self):
    d = digits.load(jax.random.key(0))
    x = np.asarray(d.x_train_NxF)
    self.assertGreaterEqual(x.min(), 0.0)
    self.assertLessEqual(x.max(), 1.0)
    # Every value is k/16 for an integer k: nothing data-dependent (no mean/std).
    np.testing.assert_array_equal(x * 16.0, np.round(x * 16.0))
    np.testing.assert_array_equal(np.asarray(digits.scale(np.array([[0, 8, 16]]))),
                                  np.array([[0.0, 0.5, 1.0]], np.float32))

  def test_same_key_same_split_other_key_other_split(self):
    a = digits.load(jax.random.key(7))
    b = digits.load(jax.random.key(7))
    c = digits.load(jax.random.key(8))
    np.testing.assert_array_equal(a.x_test_NxF, b.x_test_NxF)
    np.testing.assert_array_equal(a.y_train_N, b.y_train_N)
    self.assertFalse(np.array_equal(a.y_test_N, c.y_test_N))

  def test_all_classes_in_both_sides(self):
    d = digits.load(jax.random.key(0))
    for y in (d.y_train_N, d.y_test_N):
      counts = np.bincount(np.asarray(y), minlength=10)
      self.assertLen(counts, 10)
      self.assertGreater(counts.min(), 20)

  def test_as_images_is_row_major(self):
    x = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    img = np.asarray(digits.as_images(x))
    self.assertEqual(img.shape, (2, 8, 8, 1))
    for n, i, j in [(0, 0, 0), (1, 3, 5), (0, 7, 7)]:
      self.assertEqual(img[n, i, j, 0], x[n, 8 * i + j])

  @parameterized.named_parameters(("zero", 0.0), ("one", 1.0), ("negative", -0.2), ("tiny", 1e-5))
  def test_bad_test_fraction(self, frac):
    with self.assertRaisesRegex(ValueError, "test_fraction"):
      digits.load(jax.random.key(0), test_fraction=frac)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "x_NxF"):
      digits.as_images(np.zeros((3, 63)))
    with self.assertRaisesRegex(ValueError, "pixels_NxF"):
      digits.scale(np.array([[17.0]]))
    with self.assertRaisesRegex(ValueError, "pixels_NxF"):
      digits.scale(np.array([[np.nan]]))
    with self.assertRaisesRegex(ValueError, "validation_size"):
      digits.load_with_validation(jax.random.key(0), 0.25, 1348)

  def test_validation_is_carved_from_the_training_part(self):
    # Same test set as load(); validation + train = load's training part, disjoint.
    d = digits.load(jax.random.key(5), 0.25)
    s = digits.load_with_validation(jax.random.key(5), 0.25, 150)
    np.testing.assert_array_equal(s.x_test_NxF, d.x_test_NxF)
    np.testing.assert_array_equal(s.y_test_N, d.y_test_N)
    self.assertEqual(s.x_val_NxF.shape, (150, 64))
    self.assertEqual(s.x_train_NxF.shape, (1348 - 150, 64))
    np.testing.assert_array_equal(
        _rows(np.concatenate([s.x_train_NxF, s.x_val_NxF]),
              np.concatenate([s.y_train_N, s.y_val_N])), _rows(d.x_train_NxF, d.y_train_N))


if __name__ == "__main__":
  absltest.main()
