"""Tests for dpjax._validate: boundaries accepted and rejected, names in messages."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from dpjax import _validate as v

# (check, kwargs, good): every scalar check, called as check(x, "param", **kwargs),
# and a value it accepts.
_SCALAR_CHECKS = (
    ("range", v.check_range, {"low": 0.0, "high": 2.0}, 1),
    ("finite", v.check_finite, {}, 1),
    ("positive", v.check_positive, {}, 1),
    ("nonnegative", v.check_nonnegative, {}, 1),
    ("epsilon", v.check_epsilon, {}, 1),
    ("probability", v.check_probability, {}, 1),
    ("sampling_prob", v.check_sampling_prob, {}, 1),
    ("delta", v.check_delta, {}, 0.5),
    ("confidence", v.check_confidence, {}, 0.5),
    ("int", v.check_int, {}, 1),
)


class ScalarTest(parameterized.TestCase):

  def assert_rejects(self, fn, *args, name="param", **kwargs):
    with self.assertRaisesRegex(ValueError, name):
      fn(*args, **kwargs)

  @parameterized.named_parameters(*_SCALAR_CHECKS)
  def test_rejects_non_numbers_and_names_the_parameter(self, check, kwargs, good):
    del good
    for bad in (True, False, np.bool_(True), "0.5", b"1", None, [0.5], np.array([0.5]),
                np.array([[1]]), 1 + 0j, object()):
      with self.subTest(bad=repr(bad)):
        self.assert_rejects(check, bad, "param", **kwargs)

  @parameterized.named_parameters(*_SCALAR_CHECKS)
  def test_rejects_traced_values(self, check, kwargs, good):
    with self.assertRaisesRegex(ValueError, "param.*traced"):
      jax.jit(lambda x: check(x, "param", **kwargs))(good)

  @parameterized.named_parameters(*_SCALAR_CHECKS)
  def test_rejects_nan(self, check, kwargs, good):
    del good
    self.assert_rejects(check, math.nan, "param", **kwargs)

  @parameterized.named_parameters(*_SCALAR_CHECKS)
  def test_accepts_python_numpy_and_jax_scalars(self, check, kwargs, good):
    want_type = int if check is v.check_int else float
    for x in (good, float(good), np.float32(good), np.float64(good), np.array(good),
              jnp.array(good)):
      out = check(x, "param", **kwargs)
      self.assertEqual(out, good)
      self.assertIs(type(out), want_type)
    self.assertIs(type(v.check_int(np.int64(3), "x")), int)

  def test_range(self):
    self.assertEqual(v.check_range(0.0, "p", 0.0, 1.0), 0.0)
    self.assertEqual(v.check_range(1.0, "p", 0.0, 1.0), 1.0)
    self.assert_rejects(v.check_range, 0.0, "p", 0.0, 1.0, open_low=True,
                        name=r"p must be in \(0, 1\]")
    self.assert_rejects(v.check_range, 1.0, "p", 0.0, 1.0, open_high=True,
                        name=r"p must be in \[0, 1\)")
    self.assert_rejects(v.check_range, -1e-300, "p", 0.0, name="p must be a finite number >= 0")
    self.assert_rejects(v.check_range, 2.0, "p", high=1.0, name="p must be a finite number <= 1")
    self.assertEqual(v.check_range(-5, "p"), -5.0)
    self.assert_rejects(v.check_range, math.inf, "p", name="p")
    self.assert_rejects(v.check_range, -math.inf, "p", 0.0, allow_inf=True, name="inf allowed")
    self.assertEqual(v.check_range(math.inf, "p", 0.0, allow_inf=True), math.inf)
    self.assertEqual(v.check_range(-math.inf, "p", high=0.0, allow_inf=True), -math.inf)
    self.assert_rejects(v.check_range, math.nan, "p", allow_inf=True, name="p")

  def test_positive_and_nonnegative(self):
    self.assertEqual(v.check_positive(5e-324, "sigma"), 5e-324)
    for bad in (0, 0.0, -1.0, math.inf):
      self.assert_rejects(v.check_positive, bad, "sigma", name="sigma must be a finite number > 0")
    self.assertEqual(v.check_nonnegative(0, "l2"), 0.0)
    for bad in (-1e-12, math.inf):
      self.assert_rejects(v.check_nonnegative, bad, "l2", name="l2 must be a finite number >= 0")
    self.assertEqual(v.check_finite(-1e300, "lower"), -1e300)
    self.assert_rejects(v.check_finite, -math.inf, "lower", name="lower")

  def test_epsilon(self):
    self.assertEqual(v.check_epsilon(1), 1.0)
    self.assert_rejects(v.check_epsilon, 0.0, name="epsilon")
    self.assert_rejects(v.check_epsilon, math.inf, name="epsilon")
    self.assertEqual(v.check_epsilon(0.0, allow_zero=True), 0.0)
    self.assert_rejects(v.check_epsilon, -0.1, allow_zero=True, name="epsilon")
    self.assert_rejects(v.check_epsilon, math.inf, allow_zero=True, name="epsilon")
    self.assertEqual(v.check_epsilon(math.inf, allow_zero=True, allow_inf=True), math.inf)
    self.assert_rejects(v.check_epsilon, 0.0, "target_epsilon", name="target_epsilon")

  @parameterized.named_parameters(
      ("closed", {}, (0.0, 1.0), ()),
      ("open_low", {"open_low": True}, (1.0,), (0.0,)),
      ("open_high", {"open_high": True}, (0.0,), (1.0,)),
      ("open", {"open_low": True, "open_high": True}, (), (0.0, 1.0)),
  )
  def test_probability(self, kwargs, accepted, rejected):
    for p in accepted + (0.5,):
      self.assertEqual(v.check_probability(p, "share", **kwargs), p)
    for p in rejected + (-1e-9, 1.0 + 1e-9, math.inf):
      self.assert_rejects(v.check_probability, p, "share", name="share must be in", **kwargs)

  def test_sampling_prob_delta_confidence(self):
    self.assertEqual(v.check_sampling_prob(1), 1.0)
    self.assert_rejects(v.check_sampling_prob, 0.0, name=r"sampling_prob must be in \(0, 1\]")
    self.assert_rejects(v.check_sampling_prob, 0.0, "q", name="q")
    self.assertEqual(v.check_delta(1e-300), 1e-300)
    self.assert_rejects(v.check_delta, 0.0, name=r"delta must be in \(0, 1\)")
    self.assert_rejects(v.check_delta, 1.0, name="delta")
    self.assertEqual(v.check_delta(0, allow_zero=True), 0.0)
    self.assert_rejects(v.check_delta, 1.0, "delta0", allow_zero=True,
                        name=r"delta0 must be in \[0, 1\)")
    self.assertEqual(v.check_confidence(0.95), 0.95)
    for bad in (0.0, 1.0):
      self.assert_rejects(v.check_confidence, bad, name="confidence")
    self.assertEqual(v.check_delta_confidence(0, 0.9, allow_zero=True), (0.0, 0.9))
    self.assert_rejects(v.check_delta_confidence, 0.0, 0.9, name=r"delta must be in \(0, 1\)")
    self.assert_rejects(v.check_delta_confidence, 1e-5, 1.0, name="confidence")

  def test_int(self):
    self.assertEqual(v.check_int(1, "k"), 1)
    self.assertEqual(v.check_int(3.0, "k"), 3)
    self.assertEqual(v.check_int(2, "num_buckets", 2), 2)
    self.assertEqual(v.check_int(0, "pad", minimum=0), 0)
    self.assertEqual(v.check_int(2**60 + 1, "k"), 2**60 + 1)          # exact
    for bad in (0, 2.5, -1, math.inf):
      self.assert_rejects(v.check_int, bad, "k", name="k must be an integer >= 1")
    self.assert_rejects(v.check_int, 1, "num_buckets", 2,
                        name="num_buckets must be an integer >= 2")

  def test_choice(self):
    self.assertEqual(v.check_choice("pld", ("rdp", "pld"), "accountant"), "pld")
    self.assertEqual(v.check_choice(1, (0, 1), "report"), 1)
    for bad in ("PLD", None, ["rdp"], 2):
      self.assert_rejects(v.check_choice, bad, ("rdp", "pld"), "accountant",
                          name=r"accountant must be one of \('rdp', 'pld'\)")


class ArrayTest(parameterized.TestCase):

  def test_shape(self):
    self.assertEqual(v.check_shape(np.zeros((2, 5)), "x_NxF", shape=(None, 5)), (2, 5))
    self.assertEqual(v.check_shape([1, 2], "votes", ndim=(1, 2)), (2,))
    with self.assertRaisesRegex(ValueError, r"x_NxF must have shape \[\*, 5\], got \(2, 4\)"):
      v.check_shape(np.zeros((2, 4)), "x_NxF", shape=(None, 5))
    with self.assertRaisesRegex(ValueError, r"x_NxF must have shape \[\*, 5\]"):
      v.check_shape(np.zeros(5), "x_NxF", shape=(None, 5))
    with self.assertRaisesRegex(ValueError, "votes must have rank 1 or 2"):
      v.check_shape(np.zeros((1, 1, 1)), "votes", ndim=(1, 2))
    self.assertEqual(v.check_shape(np.zeros((2, 3)), "x", min_size=6), (2, 3))
    for bad in ([], np.zeros((0, 3)), np.zeros((2, 2))):
      with self.assertRaisesRegex(ValueError, r"x must have at least 6 entries, got shape"):
        v.check_shape(bad, "x", min_size=6)
    with self.assertRaisesRegex(ValueError, "scores_K must have at least 1 entries"):
      v.check_array([], "scores_K", ndim=1, min_size=1)
    with self.assertRaisesRegex(ValueError, "x must have at least 1 entries"):
      jax.jit(lambda x: v.check_array(x, "x", min_size=1))(jnp.zeros((0,)))

  def test_array_values(self):
    out = v.check_array([1, 2], "counts")
    self.assertEqual(out.dtype, np.float64)
    np.testing.assert_array_equal(out, [1.0, 2.0])
    self.assertEqual(v.check_array([True], "m", np.int32).dtype, np.int32)
    self.assertEqual(v.check_array(np.zeros((0, 3)), "x", ndim=2).shape, (0, 3))
    for bad in ([1.0, math.nan], [math.inf], [-math.inf]):
      with self.assertRaisesRegex(ValueError, r"scores must be finite \(no NaN or inf\)"):
        v.check_array(bad, "scores")
    np.testing.assert_array_equal(v.check_array([math.inf, 1.0], "s", allow_inf=True),
                                  [math.inf, 1.0])
    with self.assertRaisesRegex(ValueError, "s must not contain NaN"):
      v.check_array([math.inf, math.nan], "s", allow_inf=True)
    for bad in (["a"], [None], [1 + 1j]):
      with self.assertRaisesRegex(ValueError, "x must be real numbers"):
        v.check_array(bad, "x")

  def test_array_bounds(self):
    np.testing.assert_array_equal(v.check_array([0.0, 1.0], "fpr", low=0.0, high=1.0),
                                  [0.0, 1.0])
    with self.assertRaisesRegex(ValueError, r"fpr must be in \[0, 1\], got values from 0 to 1.5"):
      v.check_array([0.0, 1.5], "fpr", low=0.0, high=1.0)
    with self.assertRaisesRegex(ValueError, "mu must be > 0"):
      v.check_array([0.0, 1.0], "mu", low=0.0, open_low=True)
    with self.assertRaisesRegex(ValueError, "log_q must be < 0"):
      v.check_array([0.0], "log_q", high=0.0, open_high=True)
    np.testing.assert_array_equal(
        v.check_array([0.0, math.inf], "eps", low=0.0, allow_inf=True), [0.0, math.inf])
    with self.assertRaisesRegex(ValueError, "eps must be >= 0"):
      v.check_array([-math.inf], "eps", low=0.0, allow_inf=True)

  def test_tracers_get_shape_checks_only(self):
    def f(x):
      self.assertIs(v.check_array(x, "x", ndim=1, low=0.0), x)
      self.assertIs(v.check_binary(x, "x", shape=(2,)), x)
      return x
    jax.jit(f)(jnp.array([-1.0, jnp.nan]))               # values unknown: not checked
    with self.assertRaisesRegex(ValueError, "x must have rank 2"):
      jax.jit(lambda x: v.check_array(x, "x", ndim=2))(jnp.zeros(3))
    seen = []
    jax.jit(lambda x: seen.append(v.is_tracer(x)) or x)(1.0)
    self.assertEqual(seen, [True])
    self.assertFalse(v.is_tracer(jnp.zeros(2)))

  def test_orders(self):
    np.testing.assert_array_equal(v.check_orders(2), [2.0])
    np.testing.assert_array_equal(v.check_orders([1.5, 64]), [1.5, 64.0])
    for bad in ([1.0], [0.5, 2.0], [math.inf], [math.nan]):
      with self.assertRaisesRegex(ValueError, "orders"):
        v.check_orders(bad)
    with self.assertRaisesRegex(ValueError, "orders must be a non-empty"):
      v.check_orders([])
    with self.assertRaisesRegex(ValueError, "orders must have rank 1"):
      v.check_orders([[2.0]])

  def test_binary(self):
    out = v.check_binary([1, 0, 1.0], "keep_N")
    self.assertEqual(out.dtype, np.bool_)
    np.testing.assert_array_equal(out, [True, False, True])
    np.testing.assert_array_equal(v.check_binary(np.array([True]), "m"), [True])
    for bad in ([0, 2], [0.5], [math.nan]):
      with self.assertRaisesRegex(ValueError, r"keep_N must contain only 0 and 1"):
        v.check_binary(bad, "keep_N")
    with self.assertRaisesRegex(ValueError, r"keep_MxN must have shape \[3, 2\]"):
      v.check_binary(np.zeros((2, 3), bool), "keep_MxN", shape=(3, 2))

  def test_array_rejects_a_scalar_bool_and_non_integers_when_asked(self):
    with self.assertRaisesRegex(ValueError, "mu must be a number"):
      v.check_array(True, "mu")
    np.testing.assert_array_equal(v.check_array([True, False], "w"), [1.0, 0.0])
    np.testing.assert_array_equal(v.check_array([3.0, 0], "n", integer=True), [3.0, 0.0])
    with self.assertRaisesRegex(ValueError, "n must be integers"):
      v.check_array([3.0, 2.5], "n", integer=True)


class CountAndTypeTest(absltest.TestCase):

  def test_int_maximum(self):
    self.assertEqual(v.check_int(8, "bits", 1, 8), 8)
    with self.assertRaisesRegex(ValueError, r"bits must be an integer in \[1, 8\], got 9"):
      v.check_int(9, "bits", 1, 8)

  def test_size_refuses_requests_beyond_physical_memory(self):
    mem = v.memory_bytes()
    self.assertGreater(mem, 2**20)
    n = mem // 8                      # 8-byte entries fill memory exactly
    self.assertEqual(v.check_size(n, "num_records", bytes_per_unit=8), n)
    with self.assertRaisesRegex(ValueError, "num_records = .* more than the memory"):
      v.check_size(n + 1, "num_records", bytes_per_unit=8)
    with self.assertRaisesRegex(ValueError, "num_records = .* more than the memory"):
      v.check_size(n // 2 + 1, "num_records", bytes_per_unit=4, units=4)
    for bad in (0, -1, 2.5, True, "3", math.nan, math.inf):
      with self.assertRaisesRegex(ValueError, "num_records"):
        v.check_size(bad, "num_records")

  def test_sizes(self):
    self.assertEqual(v.check_sizes([4, 2.0], "hidden"), (4, 2))
    self.assertEqual(v.check_sizes((), "hidden"), ())
    for bad, pattern in (((4, 0), r"hidden\[1\]"), ((True,), r"hidden\[0\]"),
                         ([[1, 2]], "hidden must be a flat"), ((2.5,), r"hidden\[0\]")):
      with self.assertRaisesRegex(ValueError, pattern):
        v.check_sizes(bad, "hidden")
    for bad in ("44", 4, None):
      with self.assertRaisesRegex(TypeError, "hidden must be a sequence"):
        v.check_sizes(bad, "hidden")

  def test_batch(self):
    x = np.ones((3, 2))
    v.check_batch(x, [0, 1, 1], [1.0, 0.0, 0.5])
    v.check_batch(x, [0, 4, 1], num_outputs=5)
    for args, kwargs, pattern in (
        ((np.ones(3), [0, 1, 1]), {}, "x_BxF must have a leading batch axis"),
        ((np.zeros((0, 2)), []), {}, "x_BxF must have at least 1 entries"),
        ((np.array([[1.0, math.nan]] * 3), [0, 1, 1]), {}, "x_BxF must be finite"),
        ((x, [0, 1]), {}, r"y_B must have shape \[3\]"),
        ((x, [0, 2, 1]), {}, "y_B must contain only 0 and 1"),
        ((x, [0, 1.5, 1]), {"num_outputs": 3}, "y_B must be integers"),
        ((x, [0, 3, 1]), {"num_outputs": 3}, r"y_B must be in \[0, 2\]"),
        ((x, [0, 1, 1], [1.0, -1.0, 1.0]), {}, r"weights_B must be in \[0, 1\]"),
        ((x, [0, 1, 1], [1.0, 2.0, 1.0]), {}, r"weights_B must be in \[0, 1\]"),
        ((x, [0, 1, 1], [1.0, math.inf, 1.0]), {}, "weights_B must be finite")):
      with self.subTest(pattern=pattern):
        with self.assertRaisesRegex(ValueError, pattern):
          v.check_batch(*args, **kwargs)
    # Under jit only shapes are checked.
    jax.jit(lambda a, b: v.check_batch(a, b) or a)(jnp.full((3, 2), jnp.nan), jnp.array([0, 5, 1]))
    with self.assertRaisesRegex(ValueError, r"y_B must have shape \[3\]"):
      jax.jit(lambda a, b: v.check_batch(a, b) or a)(jnp.ones((3, 2)), jnp.ones(2))

  def test_clip_norm(self):
    self.assertEqual(v.check_clip_norm(2), 2.0)
    self.assertEqual(v.check_clip_norm(math.inf), math.inf)
    for bad in (0, -1.0, math.nan, True, "1"):
      with self.assertRaisesRegex(ValueError, "l2_clip_norm"):
        v.check_clip_norm(bad)

  def test_callable_and_instance(self):
    self.assertIs(v.check_callable(len, "fn"), len)
    with self.assertRaisesRegex(TypeError, "fn must be callable"):
      v.check_callable(3, "fn")
    self.assertEqual(v.check_instance("d", str, "directory"), "d")
    with self.assertRaisesRegex(TypeError, "directory must be a str or bytes, got int"):
      v.check_instance(3, (str, bytes), "directory")
    with self.assertRaisesRegex(TypeError, "event must be an int, got str"):
      v.check_instance("x", int, "event")


class ExtremeArgumentsTest(absltest.TestCase):
  """names_extreme_arguments: extreme valid values get an OverflowError naming them."""

  def test_failures_at_extreme_values_name_the_arguments(self):
    @v.names_extreme_arguments
    def f(sigma, steps=1, flag=False):
      del flag
      return math.exp(steps / sigma)

    self.assertAlmostEqual(f(1.0), math.e)
    with self.assertRaisesRegex(OverflowError, r"^sigma = 1e-300 is too extreme.*math range"):
      f(1e-300)
    with self.assertRaisesRegex(OverflowError, r"steps = 9223372036854775808 is too extreme"):
      f(1.0, steps=2**63)
    with self.assertRaisesRegex(OverflowError, "math range error"):
      f(1e-3, steps=10**6)          # nothing extreme: the original error stands

  def test_a_non_finite_result_at_extreme_values_is_refused(self):
    g = v.names_extreme_arguments(lambda x: np.array([x * x]))
    with self.assertRaisesRegex(OverflowError, "x = 1e.300 is too extreme.*not finite"):
      g(1e300)
    h = v.names_extreme_arguments(finite=False)(lambda x: x * x)
    self.assertEqual(h(1e300), math.inf)

  def test_a_value_error_naming_the_argument_stands(self):
    @v.names_extreme_arguments
    def f(sigma):
      raise ValueError(f"sigma must be <= 1e10, got {sigma}")
    with self.assertRaisesRegex(ValueError, "^sigma must be"):
      f(1e300)

  def test_what_counts_as_extreme(self):
    got = v.extreme_arguments(dict(a=5e-324, b=0.0, c=1e99, d=True, e="1e300",
                                           f=np.array([1.0, 1e101]), g=2**53, h=-2**54,
                                           i=math.inf))
    self.assertEqual(sorted(got), ["a", "f", "h"])


class IterationsTest(absltest.TestCase):

  def test_bound_is_inclusive_and_named(self):
    self.assertEqual(v.check_iterations(v.MAX_ITERATIONS, "num_steps"), v.MAX_ITERATIONS)
    self.assertEqual(v.check_iterations(0, "num_steps", minimum=0), 0)
    for bad in (v.MAX_ITERATIONS + 1, 2**31 - 1, 2**63, 0, 2.5, True, math.inf):
      with self.assertRaisesRegex(ValueError, r"num_steps must be an integer in \[1, 1000000\]"):
        v.check_iterations(bad, "num_steps")


class TracedValuesTest(absltest.TestCase):
  """The contract of the module docstring for values under jit, at three entry points.

  Eagerly, each out-of-range input below is a ValueError naming it. Traced: a privacy
  scalar is refused by name; a traced clip norm out of range makes the release NaN (whatever
  the data); other traced arrays are computed as written, out-of-range entries included.
  """

  def test_traced_sampling_prob_is_refused_by_name(self):
    from dpjax import prng  # pylint: disable=g-import-not-at-top
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "sampling_prob must be in"):
      prng.poisson_mask(key, -0.1, 5)
    for q in (-0.1, 0.5):           # refused whatever its value: it cannot be checked
      with self.assertRaisesRegex(ValueError, "sampling_prob must be a concrete host scalar"):
        jax.jit(lambda q: prng.poisson_mask(key, q, 5))(q)

  def test_traced_clip_norm_out_of_range_gives_nan_sums(self):
    from dpjax import models  # pylint: disable=g-import-not-at-top
    from dpjax.clipping import ghost, vmap  # pylint: disable=g-import-not-at-top
    model = models.mlp(3, (4,), 2)
    params = model.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (4, 3))
    y, w = jnp.array([0, 1, 0, 1]), jnp.ones(4)
    paths = {"ghost": lambda c: ghost.mlp_clipped_sum(params, x, y, w, c),
             "vmap": lambda c: vmap.clipped_grad_sum(model, params, x, y, w, c)}
    for name, fn in paths.items():
      for bad in (math.nan, -1.0, 0.0):
        with self.subTest(path=name, c=bad):
          with self.assertRaisesRegex(ValueError, "l2_clip_norm"):
            fn(bad)
          sums, norms = jax.jit(fn)(jnp.float32(bad))
          self.assertTrue(all(np.all(np.isnan(l)) for l in jax.tree.leaves(sums)))
          np.testing.assert_allclose(norms, fn(1.0)[1], rtol=1e-6)   # norms do not use C
      for good in (0.5, math.inf):   # in range, traced and eager agree
        with self.subTest(path=name, c=good):
          traced, eager = jax.jit(fn)(jnp.float32(good))[0], fn(good)[0]
          for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(eager)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

  def test_traced_bits_are_computed_as_written(self):
    from dpjax import mechanisms  # pylint: disable=g-import-not-at-top
    key = jax.random.key(0)
    bits = jnp.array([0, 1, 2, -1])
    with self.assertRaisesRegex(ValueError, "bits"):
      mechanisms.randomized_response(key, bits, 1.0)
    reports = np.asarray(jax.jit(lambda b: mechanisms.randomized_response(key, b, 1.0))(bits))
    # Each report is the bit b or 1 - b: an entry outside {0, 1} stays visibly outside.
    self.assertTrue(np.all((reports == np.asarray(bits)) | (reports == 1 - np.asarray(bits))))
    self.assertTrue(np.all((reports[2:] < 0) | (reports[2:] > 1)))
    np.testing.assert_array_equal(   # valid entries: the eager release, bit for bit
        reports[:2], np.asarray(mechanisms.randomized_response(key, bits[:2], 1.0)))


if __name__ == "__main__":
  absltest.main()
