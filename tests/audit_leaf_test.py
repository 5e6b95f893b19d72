"""Tests for dpjax.audit.leaf: the canary leaf's per-step LLR against `canary.step_llr`."""

import numpy as np
import optax
from absl.testing import absltest, parameterized

import jax.numpy as jnp

from dpjax.audit import canary, leaf


class LlrAccumulatingSgdTest(parameterized.TestCase):

  @parameterized.parameters((0.2, 1.0), (1.0, 0.7), (0.01, 0.3))
  def test_canary_update_is_the_step_llr_and_model_update_is_sgd(self, q, sigma):
    # the leaf's "update" is o / scale; the transform must return step_llr(o) (float64
    # closed form) to float32 precision, also far in the linear tail (x > 40)
    scale = 2.0
    o = np.array([-3.0, 0.0, 0.5, 1.0, 4.0, 0.5 + 45.0 * sigma * sigma], np.float64)
    opt = leaf.llr_accumulating_sgd(0.1, 0.9, scale, q, sigma)
    model = {"w": jnp.arange(3.0)}
    params = {"model": model, "canary": jnp.zeros(o.shape, jnp.float32)}
    grads = {"model": {"w": jnp.array([1.0, -2.0, 0.5])},
             "canary": jnp.asarray(o / scale, jnp.float32)}
    upd, _ = opt.update(grads, opt.init(params), params)
    want = canary.step_llr(o, q, sigma)
    np.testing.assert_allclose(np.asarray(upd["canary"]), want, rtol=2e-6, atol=2e-6)
    ref = optax.sgd(0.1, momentum=0.9)
    ref_upd, _ = ref.update(grads["model"], ref.init(model), model)
    np.testing.assert_array_equal(np.asarray(upd["model"]["w"]), np.asarray(ref_upd["w"]))

  def test_no_noise_scores_the_indicator(self):
    opt = leaf.llr_accumulating_sgd(0.1, 0.0, 1.0, 0.2, 0.0)
    params = {"model": {"w": jnp.zeros(2)}, "canary": jnp.zeros(3)}
    grads = {"model": {"w": jnp.ones(2)}, "canary": jnp.array([0.2, 0.5, 0.9])}
    upd, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_array_equal(np.asarray(upd["canary"]), [0.0, 0.0, 1.0])


if __name__ == "__main__":
  absltest.main()
