"""Tests of dpjax/dpsgd/components.py: default and user components (sampler, clipping, privatizer) resolved through train_many's door."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from dpjax import dpsgd
from dpjax import models
from dpjax import privatizer
from tests import helpers


class ComponentsTest(absltest.TestCase):
  """Samplers, clipping and privatizers enter through train_many's keywords."""

  def test_default_components_spelled_out_give_the_same_models(self):
    x, y = helpers.binary_data()
    model = models.logistic_regression(4)
    keep = jnp.ones((2, 24), bool)
    cfg = helpers.small_config()
    a = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model, perf=helpers.QUIET)
    with warnings.catch_warnings():
      warnings.simplefilter("error")        # the accounted components do not warn
      b = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, model, perf=helpers.QUIET,
                           sampler=cfg.sampler(), privatizer=privatizer.GaussianPrivatizer())
    np.testing.assert_array_equal(a.params["w"], b.params["w"])

  def test_a_user_privatizer_plugs_in(self):
    # Twice the noise: still accounted (more noise than claimed is still private).
    class DoubleNoise(privatizer.GaussianPrivatizer):
      def noise_stddev(self, noise_multiplier, l2_clip_norm):
        return 2.0 * super().noise_stddev(noise_multiplier, l2_clip_norm)

    x, y = jnp.zeros((24, 4)), jnp.zeros((24,), jnp.int32)
    cfg = helpers.small_config(noise_multiplier=1.0, num_steps=2)
    keep = jnp.ones((200, 24), bool)
    model = models.logistic_regression(4)
    obs = {}
    for name, p in (("plain", None), ("double", DoubleNoise())):
      obs[name] = np.asarray(dpsgd.train_many(jax.random.key(0), x, y, keep, cfg, model,
                                              privatizer=p, observe_fn=helpers.identity,
                                              perf=helpers.QUIET).observations)
    np.testing.assert_allclose(obs["double"], 2.0 * obs["plain"], rtol=1e-6)

  def test_the_engine_holds_no_fault_or_model_kind_logic(self):
    # Broken variants and model kinds live in dpjax.audit.variants / dpjax.clipping.
    import inspect  # pylint: disable=g-import-not-at-top
    import pkgutil  # pylint: disable=g-import-not-at-top
    import importlib  # pylint: disable=g-import-not-at-top
    names = [m.name for m in pkgutil.iter_modules(dpsgd.__path__)]
    self.assertContainsSubset({"config", "engine", "step", "layout", "components"}, names)
    for name in [None] + names:   # the package and every module of it
      mod = dpsgd if name is None else importlib.import_module(f"dpjax.dpsgd.{name}")
      source = inspect.getsource(mod)
      for pattern in (r"\bfaults?\b", r"\.kind\b", r'"logistic_regression"', r'"mlp"',
                      r"from dpjax\.audit", r"import audit"):
        self.assertIsNone(re.search(pattern, source, re.IGNORECASE), (name, pattern))


if __name__ == "__main__":
  absltest.main()
