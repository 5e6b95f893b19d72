"""Tests for dpjax.data.canaries: the lecture's audit set."""

import jax
import numpy as np
from absl.testing import absltest

from dpjax.data import canaries, credit


class AuditDataTest(absltest.TestCase):

  def test_shape_canary_row_and_unused_column(self):
    d = canaries.audit_data(jax.random.key(0), base_size=30)
    x, y = np.asarray(d.x_NxD), np.asarray(d.y_N)
    self.assertEqual(x.shape, (31, 57))
    self.assertEqual((d.canary_index, d.num_features), (30, 57))
    self.assertEqual(x.dtype, np.float32)
    self.assertEqual(y.dtype, np.int32)
    # the unused last column is 0 for every record, the canary included
    self.assertEqual(float(np.abs(x[:, -1]).max()), 0.0)
    # the canary is the lecture's defaulted outlier, under the same public scaler
    self.assertEqual(int(y[-1]), int(credit.lecture_canary().y_N[0]))
    self.assertTrue(np.all(np.isfinite(x)))

  def test_deterministic_and_base_independent_of_size(self):
    a = canaries.audit_data(jax.random.key(3), base_size=10)
    b = canaries.audit_data(jax.random.key(3), base_size=10)
    np.testing.assert_array_equal(np.asarray(a.x_NxD), np.asarray(b.x_NxD))
    # the public scaler is fitted on its own sample: the canary's features do not
    # depend on how many base records are drawn
    c = canaries.audit_data(jax.random.key(3), base_size=25)
    np.testing.assert_array_equal(np.asarray(a.x_NxD)[-1], np.asarray(c.x_NxD)[-1])

  def test_validation(self):
    for bad in (0, 2.5, True, "3"):
      with self.subTest(bad):
        with self.assertRaisesRegex(ValueError, "base_size"):
          canaries.audit_data(jax.random.key(0), base_size=bad)


if __name__ == "__main__":
  absltest.main()
