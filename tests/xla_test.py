"""Tests for dpjax._xla: `once` returns fn()'s values bit for bit and keeps one copy."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _xla
from dpjax import prng


def _hashed(x):
  """A long elementwise chain (threefry) of x: uint32[N]."""
  return prng.threefry2x32(jnp.uint32(7), jnp.uint32(9), x, x + jnp.uint32(1))[0]


class OnceTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("int_zero", jnp.int32(0)), ("int_negative", jnp.int32(-5)),
      ("uint_max", jnp.uint32(2**32 - 1)), ("float_label", jnp.float32(1.0)),
      ("bool_token", jnp.bool_(False)))
  def test_values_are_fn_values_for_any_token(self, token):
    x = jnp.arange(37, dtype=jnp.uint32)
    u = jnp.linspace(-0.9, 0.9, 5)
    # Inputs as arguments: compiled against compiled code (XLA's constant folder may round
    # a transcendental differently from a kernel).
    fn = lambda x, u: {"h": _hashed(x), "z": jax.lax.erf_inv(u)}
    got = jax.jit(lambda t, x, u: _xla.once(lambda: fn(x, u), t))(token, x, u)
    want = jax.jit(fn)(x, u)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  def test_under_vmap_each_row_is_its_own(self):
    x = jnp.arange(12, dtype=jnp.uint32).reshape(3, 4)
    got = jax.jit(jax.vmap(lambda r, t: _xla.once(lambda: _hashed(r), t)))(x, jnp.arange(3))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.vmap(_hashed)(x)))

  def test_the_program_holds_one_copy_of_a_shared_producer(self):
    x = jnp.arange(1000, dtype=jnp.uint32)

    def consumers(h):   # three consumers of different shapes: XLA fuses h into each
      return h[:10] + 1, h[100:400] * 3, jnp.sum(h[500:] >> 3)

    def xors(f):
      return jax.jit(f).lower(x).compile().as_text().count(" xor(")
    copied = xors(lambda v: consumers(_hashed(v)))
    stored = xors(lambda v: consumers(_xla.once(lambda: _hashed(v), v[0])))
    one = xors(_hashed)
    self.assertGreater(copied, one)      # the duplication `once` exists to prevent
    self.assertLessEqual(stored, one)


if __name__ == "__main__":
  absltest.main()
