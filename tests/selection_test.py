"""Tests for dpjax.selection: probability ratios against e^eps, samplers against the
probabilities, input checks. All keys are fixed, so the tests are deterministic."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from dpjax import selection as sel

_K = jax.random.key(0)


class SelectionTest(parameterized.TestCase):

  @parameterized.parameters((0.1, 1.0, False), (1.0, 1.0, False), (3.0, 2.0, False),
                            (1.0, 1.0, True))
  def test_exponential_probability_ratio(self, eps, du, monotonic):
    rng = np.random.default_rng(0)
    u = rng.normal(0, 5, size=(200, 6)).astype(np.float32)
    if monotonic:
      d = np.repeat(rng.choice([-du, du], size=(200, 1)), 6, axis=1)
    else:
      d = rng.uniform(-du, du, size=(200, 6))
      d[:100] = rng.choice([-du, du], size=(100, 6))  # vertices of the box
    u2 = (u + d).astype(np.float32)
    p = np.asarray(sel.exponential_probs(u, eps, du, monotonic), np.float64)
    p2 = np.asarray(sel.exponential_probs(u2, eps, du, monotonic), np.float64)
    log_ratio = np.abs(np.log(p) - np.log(p2))
    self.assertLessEqual(log_ratio.max(), eps + 1e-4)
    # A worst case: candidate 0 unlikely, its utility up by du and (unless the
    # utility is monotonic) the others down by du; its probability gains ~e^eps.
    w = np.array([[-30.0 * du / eps, 0.0, 0.0]], np.float32)  # logit about -15
    shift = np.array([[du, 0.0, 0.0]]) if monotonic else np.array([[du, -du, -du]])
    q = np.asarray(sel.exponential_probs(w, eps, du, monotonic), np.float64)
    q2 = np.asarray(sel.exponential_probs((w + shift).astype(np.float32), eps, du,
                                           monotonic), np.float64)
    self.assertAlmostEqual(math.log(q2[0, 0] / q[0, 0]), eps, delta=1e-3)

  @parameterized.parameters("False", "no", "", 1.0, 0, 1, np.float64(1.0), float("nan"), None,
                            (np.array([True]),))
  def test_monotonic_must_be_a_bool(self, flag):
    # A truthy non-bool used to be read as True: half the scale, a privacy loss of
    # 2 eps at a claimed eps (1.998 measured at eps = 1 with this worst case).
    u = jnp.array([0.0, 1.0, 2.0])
    for call in (lambda: sel.exponential_probs(u, 1.0, 1.0, flag),
                 lambda: sel.exponential_mechanism(jax.random.key(0), u, 1.0, 1.0, flag),
                 lambda: sel.report_noisy_max(jax.random.key(0), u, 1.0, 1.0, flag)):
      with self.assertRaisesRegex(TypeError, "monotonic must be a bool"):
        call()

  def test_monotonic_false_keeps_the_claimed_epsilon(self):
    # The worst case of test_exponential_probability_ratio: exactly eps for
    # monotonic=False and np.bool_(False), never 2 eps.
    eps, du = 1.0, 1.0
    w = np.array([[-30.0, 0.0, 0.0]], np.float32)
    shift = np.array([[du, -du, -du]], np.float32)
    for flag in (False, np.bool_(False)):
      q = np.asarray(sel.exponential_probs(w, eps, du, flag), np.float64)
      q2 = np.asarray(sel.exponential_probs(w + shift, eps, du, flag), np.float64)
      self.assertAlmostEqual(math.log(q2[0, 0] / q[0, 0]), eps, delta=1e-3)

  def test_exponential_sampler_matches_probs(self):
    # 200k draws: each frequency within 5 SE of its probability.
    u = jnp.array([[0.0, 1.0, 2.0, 4.0], [3.0, 3.0, 0.0, -1.0]])
    k = 200_000
    idx = np.asarray(sel.exponential_mechanism(jax.random.key(7), u, 1.0,
                                                shape=(k, 2)))
    p = np.asarray(sel.exponential_probs(u, 1.0))
    for row in range(2):
      freq = np.bincount(idx[:, row], minlength=4) / k
      np.testing.assert_array_less(np.abs(freq - p[row]), 5 * np.sqrt(p[row] * (1 - p[row]) / k) + 1e-9)

  def test_report_noisy_max_ratio_monte_carlo(self):
    # Neighbouring utilities (each moves by <= 1); 400k draws per side. Frequencies
    # of every index stay within e^eps of each other, allowing 5 SE of MC error in
    # the log ratio (SE of log f is about sqrt((1 - f) / (f n))).
    eps, n = 1.0, 400_000
    u = jnp.array([0.0, 0.5, 1.0])
    u2 = jnp.array([1.0, -0.5, 0.0])
    ka, kb = jax.random.split(jax.random.key(8))
    a = np.bincount(np.asarray(jax.vmap(lambda k: sel.report_noisy_max(k, u, eps))(
        jax.random.split(ka, n))), minlength=3) / n
    b = np.bincount(np.asarray(jax.vmap(lambda k: sel.report_noisy_max(k, u2, eps))(
        jax.random.split(kb, n))), minlength=3) / n
    se = np.sqrt((1 - a) / (a * n)) + np.sqrt((1 - b) / (b * n))
    np.testing.assert_array_less(np.abs(np.log(a / b)), eps + 5 * se)
    # With huge eps it returns the true argmax.
    self.assertEqual(int(sel.report_noisy_max(jax.random.key(9), u, 1e4)), 2)

  def test_no_key_reuse(self):
    with jax.debug_key_reuse(True):
      sel.report_noisy_max(jax.random.key(2), jnp.ones(3), 1.0)
      sel.exponential_mechanism(jax.random.key(3), jnp.ones(3), 1.0, shape=(4,))

  @parameterized.named_parameters(
      ("eps_nan", lambda: sel.exponential_probs(jnp.ones(3), math.nan), "epsilon"),
      ("util_sens", lambda: sel.report_noisy_max(_K, jnp.ones(3), 1.0, 0.0),
       "sensitivity"),
      ("nan_utilities", lambda: sel.exponential_mechanism(_K, jnp.array([jnp.nan]), 1.0),
       "utilities"),
      ("empty_candidates", lambda: sel.exponential_probs(jnp.zeros((0,)), 1.0), "candidate"),
      ("empty_candidates_rnm", lambda: sel.report_noisy_max(_K, jnp.zeros((2, 0)), 1.0),
       "candidate"),
  )
  def test_raises(self, fn, name):
    with self.assertRaisesRegex(ValueError, name):
      fn()


if __name__ == "__main__":
  absltest.main()
