"""Property-based tests (hypothesis) of per-example clipping: no input makes a contribution exceed C.

The privacy of DP-SGD rests on one inequality: with 0/1 weights, each record's
contribution to the clipped sum has L2 norm <= C. Here it is checked for inputs
drawn over the whole float32 range: zeros, subnormals, ordinary values, and
magnitudes up to the float32 maximum (~3.4e38), whose squares overflow.

The gradients are those of `models.logistic_regression` (params {"w": [D]}):
g_i = r_i x_i + l2 w with r_i = sigmoid(x_i . w) - y_i, so with w = 0 the
per-example gradient is exactly +-x_i / 2, any float32 vector. Each path's
contribution of record i is read off the sum with one-hot weights e_i, and its norm
is taken on the host in float64. Asserted, for every record and every path:

* the contribution is finite and its norm is <= C (1 + 1e-6) (float32 rounding of
  the norm and of the scaling);
* the sum over any 0/1 mask is finite;
* for inputs whose squares stay inside float32 (|x| <= 2^50) and w = 0, the
  contribution norm is min(C, ||g_i||) (rtol 1e-5): clipping scales, it does not drop.

A record whose norm is out of float32 range may be dropped (contribution 0), which
is within the bound.

Shape letters: B records (6), D features (5).
"""

import functools

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpjax import clipping, models
from dpjax.clipping import glm, vmap
from tests import helpers

given = hypothesis.given

_B, _D = 6, 5
_RTOL_BOUND = 1e-6
_PATHS = ("glm", "vmap", "two_pass")
# Two clip norms and two L2 coefficients: each (path, l2, C) is one compiled program.
CLIP_NORMS = st.sampled_from((0.01, 10.0))
L2S = st.sampled_from((0.0, 0.1))

_SUBNORMALS_AND_ZEROS = st.sampled_from((0.0, -0.0, 1e-45, -1e-45, 1e-40, 1.1754942e-38))
MODERATE = st.one_of(st.floats(-2.0 ** 50, 2.0 ** 50, width=32), _SUBNORMALS_AND_ZEROS)
HUGE = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False),
                 st.sampled_from((3e38, -3e38, 3.4028235e38, -3.4028235e38, 1e30, 2e19)),
                 _SUBNORMALS_AND_ZEROS)
LABELS = hnp.arrays(np.int32, (_B,), elements=st.integers(0, 1))
MASKS = hnp.arrays(np.float32, (_B,), elements=st.sampled_from((0.0, 1.0)))
WEIGHTS = st.one_of(st.just(np.zeros(_D, np.float32)),
                    hnp.arrays(np.float32, (_D,), elements=st.floats(-10.0, 10.0, width=32)))


def _path(kind, l2):
  model = models.logistic_regression(_D, l2=l2)
  if kind == "glm":
    return functools.partial(glm.clipped_grad_sum, l2)
  if kind == "vmap":
    return functools.partial(vmap.clipped_grad_sum, model)
  return functools.partial(vmap.two_pass_clipped_grad_sum, model)


@functools.partial(jax.jit, static_argnames=("kind", "l2", "c"))
def _run(kind, l2, c, w_D, x_BxD, y_B, mask_B):
  """(contributions [B, D] of each record alone, sum [D] over mask_B)."""
  fn = _path(kind, l2)
  per, _ = jax.vmap(lambda e: fn({"w": w_D}, x_BxD, y_B, e, c))(jnp.eye(_B, dtype=jnp.float32))
  total, _ = fn({"w": w_D}, x_BxD, y_B, mask_B, c)
  return per["w"], total["w"]


class ClipFactorTest(absltest.TestCase):
  """clip_factor = min(1, C / norm) for any norm in [0, inf]."""

  @helpers.property_settings(100)
  @given(norms=hnp.arrays(np.float32, (16,), elements=st.one_of(
      st.floats(0.0, width=32), st.sampled_from((0.0, 1e-45, 3.4028235e38, np.inf)))),
         c=st.one_of(st.floats(1e-6, 1e6), st.just(np.inf)))
  def test_scaled_norm_is_at_most_c(self, norms, c):
    f = np.asarray(clipping.clip_factor(jnp.asarray(norms), c), np.float64)
    self.assertTrue(np.all((f >= 0) & (f <= 1)), f)
    n = norms.astype(np.float64)
    with np.errstate(invalid="ignore"):
      scaled = np.where(f == 0, 0.0, f * n)        # 0 * inf counts as 0: the record is dropped
    if np.isinf(c):
      np.testing.assert_array_equal(f, 1.0)
    else:
      self.assertTrue(np.all(scaled <= c * (1 + _RTOL_BOUND)), (norms, f))
      np.testing.assert_array_equal(f[n <= np.float32(c)], 1.0)


class ClippedSumTest(absltest.TestCase):
  """Each path keeps every contribution within C and the sum finite."""

  def _check_bound(self, kind, l2, c, w, x, y, mask):
    per, total = (np.asarray(a, np.float64) for a in _run(kind, l2, c, w, x, y, mask))
    self.assertTrue(np.all(np.isfinite(per)), (kind, per))
    self.assertTrue(np.all(np.isfinite(total)), (kind, total))
    norms = np.linalg.norm(per, axis=1)
    self.assertTrue(np.all(norms <= c * (1 + _RTOL_BOUND)), (kind, c, norms))
    return norms

  @helpers.property_settings(40)
  @given(kind=st.sampled_from(_PATHS), l2=L2S, c=CLIP_NORMS, w=WEIGHTS,
         x=hnp.arrays(np.float32, (_B, _D), elements=MODERATE), y=LABELS, mask=MASKS)
  def test_moderate_inputs(self, kind, l2, c, w, x, y, mask):
    norms = self._check_bound(kind, l2, c, w, x, y, mask)
    if not np.any(w):
      # g_i = (1/2 - y_i) x_i exactly: the contribution is min(C, ||x_i|| / 2).
      want = np.minimum(c, 0.5 * np.linalg.norm(x.astype(np.float64), axis=1))
      np.testing.assert_allclose(norms, want, rtol=1e-5, atol=1e-30)

  @helpers.property_settings(40)
  @given(kind=st.sampled_from(_PATHS), l2=L2S, c=CLIP_NORMS, w=WEIGHTS,
         x=hnp.arrays(np.float32, (_B, _D), elements=HUGE), y=LABELS, mask=MASKS)
  def test_huge_inputs(self, kind, l2, c, w, x, y, mask):
    self._check_bound(kind, l2, c, w, x, y, mask)


if __name__ == "__main__":
  absltest.main()
