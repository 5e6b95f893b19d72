"""Tests for dpjax.pate.aggregation's teachers and students: disjoint partitions, the
vmapped fits against plain per-teacher loops, votes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from absl.testing import absltest

from dpjax import models, pate


def _adam_loop(model, key, x, y, steps, learning_rate=0.05):
  """Full-batch Adam on (x, y) from model.init(key), written as a Python loop."""
  params = model.init(key)
  opt = optax.adam(learning_rate)
  state = opt.init(params)
  for _ in range(steps):
    g = jax.grad(lambda p: jnp.mean(models.per_example_loss(model, p, x, y)))(params)
    upd, state = opt.update(g, state, params)
    params = optax.apply_updates(params, upd)
  return params


class TeachersTest(absltest.TestCase):

  def test_partition_is_disjoint_and_balanced(self):
    keep = np.asarray(pate.partition(jax.random.key(0), 103, 10))
    np.testing.assert_array_equal(keep.sum(axis=0), np.ones(103))  # each record: one teacher
    self.assertEqual(set(keep.sum(axis=1).tolist()), {10, 11})

  def test_teachers_see_only_their_partition(self):
    # Changing every label OUTSIDE teacher 0's partition leaves teacher 0 unchanged,
    # and changes the others: each teacher is a function of its own records only.
    x = jax.random.normal(jax.random.key(1), (60, 4))
    y = (x[:, 0] > 0).astype(jnp.int32)
    model = models.mlp(4, hidden=(), num_classes=2)
    p1, keep = pate.train_teachers(jax.random.key(2), x, y, 3, model, num_steps=30)
    y2 = jnp.where(keep[0], y, 1 - y)
    p2, keep2 = pate.train_teachers(jax.random.key(2), x, y2, 3, model, num_steps=30)
    np.testing.assert_array_equal(np.asarray(keep), np.asarray(keep2))
    w1, w2 = p1["layers"][0]["w"], p2["layers"][0]["w"]
    np.testing.assert_array_equal(np.asarray(w1[0]), np.asarray(w2[0]))
    self.assertGreater(float(jnp.abs(w1[1] - w2[1]).max()), 1e-3)
    self.assertGreater(float(jnp.abs(w1[2] - w2[2]).max()), 1e-3)

  @pytest.mark.slow  # about 25 s; the teachers' votes tests run the vmapped fit

  def test_vmapped_fit_equals_a_plain_loop(self):
    # Model i of the vmapped, scanned, padded fit equals full-batch Adam written as a
    # Python loop on teacher i's records only (partition sizes 11, 10, 10: padding).
    x = jax.random.normal(jax.random.key(3), (31, 4))
    y = (x[:, 1] > 0).astype(jnp.int32)
    model = models.mlp(4, hidden=(), num_classes=2)
    keep = np.asarray(pate.partition(jax.random.key(4), 31, 3))
    key = jax.random.key(5)
    many = pate.fit_non_private(key, x, y, keep, model, num_steps=8, learning_rate=0.05)
    for i, k in enumerate(jax.random.split(key, 3)):
      params = _adam_loop(model, k, x[keep[i]], y[keep[i]], 8)
      np.testing.assert_allclose(np.asarray(many["layers"][0]["w"][i]),
                                 np.asarray(params["layers"][0]["w"]), rtol=1e-4, atol=1e-5)

  def test_students_fit_only_their_answered_queries(self):
    # Student g of the tiled fit equals full-batch Adam written as a loop on its answered
    # queries only, from model.init(split(key, G)[g]); one with no answer is flagged empty.
    x = jax.random.normal(jax.random.key(10), (12, 4))
    lab = np.asarray(x[:, 1] > 0, np.int32)
    labels = np.stack([lab, 1 - lab, lab])
    answered = np.zeros((3, 12), bool)
    answered[0, :8] = True
    answered[1, ::2] = True
    model = models.mlp(4, hidden=(), num_classes=2)
    key = jax.random.key(11)
    params, empty = pate.fit_students(key, x, labels, answered, model, num_steps=6)
    np.testing.assert_array_equal(empty, [False, False, True])
    for g, k in enumerate(jax.random.split(key, 3)[:2]):
      p = _adam_loop(model, k, x[answered[g]], jnp.asarray(labels[g][answered[g]]), 6)
      np.testing.assert_allclose(np.asarray(params["layers"][0]["w"][g]),
                                 np.asarray(p["layers"][0]["w"]), rtol=1e-4, atol=1e-5)
    with self.assertRaisesRegex(ValueError, "answered_GxQ"):
      pate.fit_students(key, x, labels, answered[:, :5], model, num_steps=2)

  def test_students_trained_together_equal_separate_fits(self):
    # Two students trained together on the tiled pool = each trained alone on its rows.
    x = jax.random.normal(jax.random.key(1), (12, 3))
    labels = np.array([(np.asarray(x[:, 0]) > 0), (np.asarray(x[:, 1]) > 0)], np.int32)
    mask = np.ones((2, 12), bool)
    mask[0, 7:] = False
    model = models.logistic_regression(3)
    params, empty = pate.fit_students(jax.random.key(2), x, labels, mask, model, num_steps=20)
    self.assertFalse(empty.any())
    for g in range(2):
      alone = pate.fit_non_private(jax.random.key(3), x, jnp.asarray(labels[g]), mask[g][None],
                                   model, num_steps=20)
      np.testing.assert_allclose(np.asarray(params["w"][g]), np.asarray(alone["w"][0]),
                                 rtol=1e-5, atol=1e-6)

  def test_padding_does_not_change_the_fit(self):
    x = jax.random.normal(jax.random.key(8), (20, 4))
    y = (x[:, 0] > 0).astype(jnp.int32)
    model = models.mlp(4, hidden=(), num_classes=2)
    keep = np.zeros((1, 20), bool)
    keep[0, :13] = True
    a = pate.fit_non_private(jax.random.key(9), x, y, keep, model, num_steps=5)
    b = pate.fit_non_private(jax.random.key(9), x, y, keep, model, num_steps=5, pad_to=20)
    np.testing.assert_allclose(np.asarray(a["layers"][0]["w"]), np.asarray(b["layers"][0]["w"]),
                               rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "pad_to"):
      pate.fit_non_private(jax.random.key(9), x, y, keep, model, num_steps=5, pad_to=12)

  def test_teacher_votes_sum_to_num_teachers(self):
    x = jax.random.normal(jax.random.key(6), (40, 4))
    y = (x[:, 0] > 0).astype(jnp.int32)
    model = models.mlp(4, hidden=(), num_classes=2)
    params, _ = pate.train_teachers(jax.random.key(7), x, y, 4, model, num_steps=30)
    votes = np.asarray(pate.teacher_votes(model, params, x[:7], 2))
    np.testing.assert_array_equal(votes.sum(axis=1), np.full(7, 4))

  def test_binary_logistic_teachers_vote_by_the_sign_of_their_logit(self):
    # One logit per row: the vote is 1 where x @ w > 0 (an argmax over one column
    # would vote 0 everywhere); accuracy uses the same rule.
    x = jax.random.normal(jax.random.key(10), (9, 3))
    y = jnp.asarray([1, 0, 1, 1, 0, 0, 1, 0, 1], jnp.int32)
    model = models.logistic_regression(3)
    w_MxD = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.5], [-1.0, 0.3, 0.0]], np.float32)
    votes = np.asarray(pate.teacher_votes(model, {"w": jnp.asarray(w_MxD)}, x, 2))
    ones = (np.asarray(x) @ w_MxD.T > 0).sum(axis=1)
    np.testing.assert_array_equal(votes, np.stack([3 - ones, ones], axis=1))
    pred = np.asarray(x) @ w_MxD[1] > 0
    self.assertAlmostEqual(float(models.accuracy(model, {"w": jnp.asarray(w_MxD[1:2])}, x, y)[0]),
                           float(np.mean(pred == np.asarray(y))), places=6)


if __name__ == "__main__":
  absltest.main()
