"""Tests for dpjax.flax_model: linen modules as models, ghost clipping where the rule allows.

References: the equivalent `dpjax.models` networks with the same weights (their ghost
paths are tested against vmap(grad) in ghost_test), and per-example gradients by
vmap(grad) clipped by hand in float64.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from absl.testing import parameterized

from dpjax import clipping
from dpjax import dpsgd
from dpjax import flax_model
from dpjax import models
from dpjax.clipping import vmap
from tests import helpers

_QUIET = dpsgd.PerformanceFlags(progress=False)

_B = 7
_W = np.array([1, 0, 1, 1, 1, 0, 1], np.float32)


class _Mlp(nn.Module):
  """models.mlp(F, hidden, K) in linen: Dense -> relu per hidden layer, then Dense."""
  hidden: tuple = (8,)
  num_classes: int = 3

  @nn.compact
  def __call__(self, x):
    for h in self.hidden:
      x = nn.relu(nn.Dense(h)(x))
    return nn.Dense(self.num_classes)(x)


class _Cnn(nn.Module):
  """models.cnn((H, W, C), channels, K) in linen."""
  channels: tuple = (4,)
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    for c in self.channels:
      x = nn.avg_pool(nn.relu(nn.Conv(c, (3, 3), padding="SAME")(x)), (2, 2), (2, 2))
    return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


class _Graph(nn.Module):
  """Known layers in a graph, not a chain: a Dense over positions ([B, P, I], summed per
  example like a convolution), a skip connection, a concatenation, deterministic
  dropout, tanh and a mean over positions between them."""

  @nn.compact
  def __call__(self, x):                      # x: [B, 4, 2]
    h = nn.relu(nn.Dense(3)(x))               # [B, 4, 3]
    h = nn.Dropout(0.5, deterministic=True)(h.mean(axis=1))
    h = h + nn.tanh(nn.Dense(3)(h))
    return nn.Dense(2)(jnp.concatenate([h, x[:, 0, :]], axis=-1))


class _Scale(nn.Module):
  """A parameter of its own (self.param): not a known layer."""

  @nn.compact
  def __call__(self, x):
    s = self.param("scale", nn.initializers.ones, (x.shape[-1],))
    return nn.Dense(2)(x * s[None, :])


class _Tied(nn.Module):
  """A Dense whose kernel is read again outside its call (tied weights)."""

  @nn.compact
  def __call__(self, x):
    d = nn.Dense(4)
    return d(x) @ d.variables["params"]["kernel"][:2].T


class _Twice(nn.Module):
  """One Dense called twice (shared weights)."""

  @nn.compact
  def __call__(self, x):
    d = nn.Dense(4)
    return nn.Dense(3)(d(nn.relu(d(x))))


class _WithBatchNorm(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.BatchNorm(use_running_average=False)(nn.Dense(3)(x))


class _WithDropout(nn.Module):
  deterministic: bool = False

  @nn.compact
  def __call__(self, x):
    return nn.Dense(3)(nn.Dropout(0.5, deterministic=self.deterministic)(x))


class _WithState(nn.Module):

  @nn.compact
  def __call__(self, x):
    self.variable("counts", "n", jnp.zeros, ())
    return nn.Dense(2)(x)


class _Bf16(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2, param_dtype=jnp.bfloat16)(x)


class _Sequence(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2)(x)                     # [B, T, 2]: not logits


def _mlp_params(variables):
  p = variables["params"]
  return {"layers": [{"w": p[f"Dense_{i}"]["kernel"], "b": p[f"Dense_{i}"]["bias"]}
                     for i in range(len(p))]}


def _cnn_params(variables, num_conv):
  p = variables["params"]
  return {"conv": [{"w": p[f"Conv_{i}"]["kernel"], "b": p[f"Conv_{i}"]["bias"]}
                   for i in range(num_conv)],
          "dense": [{"w": p["Dense_0"]["kernel"], "b": p["Dense_0"]["bias"]}]}


def _data(model, shape, seed=0):
  """Records, labels and parameters from NumPy (flax's initialisers cost seconds to
  compile): weights N(0, 1 / fan_in), biases N(0, 0.1^2) so the bias terms count."""
  rng = np.random.default_rng(seed)
  x = rng.uniform(-1.0, 2.0, (_B,) + shape).astype(np.float32)
  y = rng.integers(0, max(2, model.num_outputs), _B).astype(np.int32)
  shapes = jax.eval_shape(model.init, jax.random.key(0))
  variables = jax.tree.map(
      lambda s: jnp.asarray(rng.normal(size=s.shape) * (
          1.0 / np.sqrt(np.prod(s.shape[:-1])) if len(s.shape) > 1 else 0.1), jnp.float32),
      shapes)
  return variables, x, y


def _oracle(model, variables, x, y, c):
  """vmap(grad) per-example gradients, clipped and summed by hand in float64."""
  # Flat records: vmap(grad)'s one-record loss takes [F] or [H, W, C] (apply reshapes).
  g = jax.jit(vmap.per_example_grads, static_argnums=0)(model, variables, x.reshape(_B, -1), y)
  norms = np.sqrt(sum(np.sum(np.square(np.asarray(v, np.float64)).reshape(_B, -1), axis=1)
                      for v in jax.tree.leaves(g)))
  s = _W * np.minimum(1.0, c / norms)
  return jax.tree.map(lambda v: np.tensordot(s, np.asarray(v, np.float64), axes=1), g), norms


def _clipped(path, params, x, y, c):
  """The path's clipped sum and norms at clip norm c, jitted (c static, as in the engine)."""
  return jax.jit(lambda p, xx, yy: path(p, xx, yy, _W, c))(params, x, y)


def _close(a, b, rtol=2e-5, atol=2e-6):
  np.testing.assert_equal(jax.tree.structure(a), jax.tree.structure(b))
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


def _check_mlp(test, module, shape, l2, oracle=True):
  fm = flax_model.from_flax(module, shape, l2=l2)
  ref = models.mlp(shape[0], module.hidden, module.num_classes, l2=l2)
  variables, x, y = _data(fm, shape)
  path = clipping.path_for(fm)
  test.assertEqual(path.name, "ghost")
  got, got_n = _clipped(path, variables, x, y, 0.7)
  want, want_n = _clipped(clipping.path_for(ref), _mlp_params(variables), x, y, 0.7)
  np.testing.assert_allclose(got_n, want_n, rtol=2e-5)
  _close(_mlp_params(got), want)
  # ... and the logits are the same functions of the weights.
  np.testing.assert_allclose(fm.apply(variables, x), ref.apply(_mlp_params(variables), x),
                             rtol=1e-5, atol=1e-6)
  if oracle:
    # The ghost sum of the linen model equals vmap(grad) clipped by hand.
    oracle_sum, oracle_n = _oracle(fm, variables, x, y, 0.7)
    np.testing.assert_allclose(got_n, oracle_n, rtol=2e-5)
    _close(got, oracle_sum)


def _check_cnn(test, channels, l2, oracle):
  fm = flax_model.from_flax(_Cnn(channels, 10), (8, 8, 1), l2=l2)
  ref = models.cnn((8, 8, 1), channels, 10, l2=l2)
  variables, x, y = _data(fm, (64,))        # flat inputs, reshaped by apply
  path = clipping.path_for(fm)
  test.assertEqual(path.name, "ghost")
  got, got_n = _clipped(path, variables, x, y, 0.5)
  want, want_n = _clipped(clipping.path_for(ref), _cnn_params(variables, len(channels)), x,
                          y, 0.5)
  np.testing.assert_allclose(got_n, want_n, rtol=2e-5)
  _close(_cnn_params(got, len(channels)), want)
  if oracle:
    oracle_sum, oracle_n = _oracle(fm, variables, x, y, 0.5)
    np.testing.assert_allclose(got_n, oracle_n, rtol=2e-5)
    _close(got, oracle_sum)


class SameAsDpjaxModelsTest(absltest.TestCase):
  """A linen network with the weights of the equivalent dpjax model clips identically
  (the dpjax models' ghost paths are checked against vmap(grad) in ghost_test)."""

  def test_mlp(self):
    _check_mlp(self, _Mlp((5, 4), 4), (6,), 0.3)

  def test_cnn_two_conv_layers(self):
    _check_cnn(self, (3, 5), 0.2, oracle=False)


@pytest.mark.slow
class SlowTest(absltest.TestCase):

  def test_mlp_binary(self):
    _check_mlp(self, _Mlp((5,), 1), (6,), 0.0)

  def test_cnn_against_vmap(self):
    _check_cnn(self, (3, 5), 0.2, oracle=True)

  def test_generic_path_equals_vmap(self):
    fm = flax_model.from_flax(_Scale(), (4,), l2=0.1)
    self.assertEqual(clipping.path_for(fm).name, "vmap_two_pass")
    variables, x, y = _data(fm, (4,), seed=2)
    got, got_n = _clipped(clipping.path_for(fm), variables, x, y, 0.6)
    oracle, oracle_n = _oracle(fm, variables, x, y, 0.6)
    np.testing.assert_allclose(got_n, oracle_n, rtol=2e-5)
    _close(got, oracle)

  def test_train_many_equals_the_dpjax_mlp(self):
    """DP-SGD end to end: the engine trains the linen MLP as it trains models.mlp."""
    x, y = helpers.binary_data(n=24, d=4)
    cfg = helpers.small_config(num_steps=4, learning_rate=0.5)
    keep = np.ones((2, 24), bool)
    keep[1, :5] = False
    fm = flax_model.from_flax(_Mlp((6,), 1), (4,))
    ref = models.mlp(4, (6,), 1)
    init = fm.init(jax.random.key(5))
    got = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, fm, init_params=init,
                           perf=_QUIET)
    want = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, ref,
                            init_params=_mlp_params(init), perf=_QUIET)
    _close(jax.vmap(_mlp_params)(got.params), want.params, rtol=1e-4, atol=1e-5)
    # Training moved the weights (the comparison is not between two initialisations).
    self.assertGreater(float(jnp.max(jnp.abs(got.params["params"]["Dense_0"]["kernel"][0]
                                             - init["params"]["Dense_0"]["kernel"]))), 1e-3)


class EngineDoorTest(absltest.TestCase):

  def test_train_many_accepts_a_linen_module(self):
    """A linen module passed to train_many is trained as its from_flax model (one
    compiled program: from_flax is memoised, so both calls share it)."""
    x, y = helpers.binary_data(n=16, d=4)
    cfg = helpers.small_config(num_steps=2)
    keep = np.ones((2, 16), bool)
    got = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg, _Mlp((6,), 1),
                           perf=_QUIET)
    want = dpsgd.train_many(jax.random.key(1), x, y, keep, cfg,
                            flax_model.from_flax(_Mlp((6,), 1), (4,)), perf=_QUIET)
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    self.assertEqual(got.params["params"]["Dense_0"]["kernel"].shape, (2, 4, 6))


class PathChoiceTest(parameterized.TestCase):

  def test_known_layers_in_a_graph_get_ghost_clipping_equal_to_vmap(self):
    module, shape = _Graph(), (4, 2)
    fm = flax_model.from_flax(module, shape)
    self.assertIsNone(flax_model.ghost_fallback_reason(fm))
    path = clipping.path_for(fm)
    self.assertEqual(path.name, "ghost")
    variables, x, y = _data(fm, shape, seed=1)
    got, got_n = _clipped(path, variables, x, y, 0.6)
    oracle, oracle_n = _oracle(fm, variables, x, y, 0.6)
    np.testing.assert_allclose(got_n, oracle_n, rtol=2e-5)
    _close(got, oracle)

  @parameterized.named_parameters(
      ("own_param", _Scale(), (4,), "parameter scale belongs to _Scale"),
      ("layer_norm", nn.Sequential([nn.Dense(3), nn.LayerNorm(), nn.Dense(2)]), (4,),
       "parameter layers_1/bias belongs to LayerNorm"),
      ("tied", _Tied(), (4,), "read outside"),
      ("twice", _Twice(), (4,), "called more than once"),
      ("no_bias", nn.Dense(2, use_bias=False), (4,), "no bias"),
      ("conv_5x5", nn.Sequential([nn.Conv(2, (5, 5)), lambda a: a.reshape(a.shape[0], -1),
                                  nn.Dense(2)]), (4, 4, 1), "kernel_size"),
      ("conv_stride", nn.Sequential([nn.Conv(2, (3, 3), strides=2),
                                     lambda a: a.reshape(a.shape[0], -1), nn.Dense(2)]),
       (4, 4, 1), "strides"),
      ("dense_subclass", nn.Sequential([type("MyDense", (nn.Dense,), {})(2)]), (4,),
       "belongs to MyDense"))
  def test_other_modules_get_the_generic_path(self, module, shape, why):
    fm = flax_model.from_flax(module, shape)
    self.assertIn(why, flax_model.ghost_fallback_reason(fm))
    self.assertEqual(clipping.path_for(fm).name, "vmap_two_pass")


class ConversionTest(parameterized.TestCase):

  def test_memoised_on_equal_modules(self):
    a = flax_model.from_flax(_Mlp((8,), 3), (6,))
    self.assertIs(a, flax_model.from_flax(_Mlp((8,), 3), [6]))
    self.assertIsNot(a, flax_model.from_flax(_Mlp((8,), 3), (6,), l2=0.1))
    self.assertIs(clipping.path_for(a), clipping.path_for(flax_model.from_flax(_Mlp(), (6,))))

  def test_model_fields_and_outputs(self):
    normal = nn.initializers.normal(0.5)      # cheap to compile, unlike the default
    flat_mlp = nn.Sequential([lambda a: a.reshape(a.shape[0], -1),
                              nn.Dense(1, kernel_init=normal, bias_init=normal)])
    fm = flax_model.from_flax(flat_mlp, (2, 3), l2=0.25)
    self.assertEqual((fm.kind, fm.num_outputs, fm.l2, fm.input_shape),
                     ("flax", 1, 0.25, (2, 3)))
    variables = fm.init(jax.random.key(0))
    self.assertEqual(set(variables), {"params"})
    self.assertIsInstance(variables["params"], dict)
    # init(key) is the module's own init on a [1, 2, 3] batch.
    _close(variables, flat_mlp.init(jax.random.key(0), jnp.zeros((1, 2, 3))), 0.0, 0.0)
    x = jnp.arange(12.0).reshape(2, 6) / 10
    # Flat [B, 6] and shaped [B, 2, 3] inputs give the module's output on [B, 2, 3].
    np.testing.assert_array_equal(fm.apply(variables, x),
                                  flat_mlp.apply(variables, x.reshape(2, 2, 3)))
    np.testing.assert_array_equal(fm.apply(variables, x.reshape(2, 2, 3)),
                                  fm.apply(variables, x))
    # A [B] output is one logit per example: [B, 1].
    squeeze = flax_model.from_flax(nn.Sequential([nn.Dense(1), lambda a: a[:, 0]]), (3,))
    self.assertEqual(squeeze.num_outputs, 1)
    self.assertEqual(squeeze.apply(_data(squeeze, (3,))[0], jnp.ones((4, 3))).shape, (4, 1))

  def test_is_flax_module(self):
    self.assertTrue(flax_model.is_flax_module(_Mlp()))
    self.assertFalse(flax_model.is_flax_module(_Mlp))
    self.assertFalse(flax_model.is_flax_module(models.mlp(3)))
    self.assertFalse(flax_model.is_flax_module(None))

  @parameterized.named_parameters(
      ("not_a_module", 3, (4,), TypeError, "module must be a flax.linen.Module"),
      ("a_class", _Mlp, (4,), TypeError, r"class _Mlp \(pass _Mlp\(...\)\)"),
      ("empty_shape", _Mlp(), (), ValueError, "input_shape must have at least one"),
      ("zero_shape", _Mlp(), (0, 4), ValueError, r"input_shape\[0\]"),
      ("string_shape", _Mlp(), "4", TypeError, "input_shape"),
      ("fails", nn.Sequential([nn.Dense(2), lambda a: a.reshape(3, -1)]), (4,),
       ValueError, r"module.init failed on inputs of input_shape \(4,\)"),
      ("batch_norm", _WithBatchNorm(), (4,), ValueError, "batch_stats.*GroupNorm or LayerNorm"),
      ("dropout", _WithDropout(), (4,), ValueError, "random stream.*deterministic=True"),
      ("state", _WithState(), (4,), ValueError, r"collections \['counts'\]"),
      ("bfloat16", _Bf16(), (4,), ValueError, "float32"),
      ("no_params", nn.Sequential([nn.relu]), (4,), ValueError, "no parameters"),
      ("not_logits", _Sequence(), (3, 4), ValueError, r"logits \[B\] or \[B, K\]"))
  def test_bad_input(self, module, shape, error, message):
    with self.assertRaisesRegex(error, message):
      flax_model.from_flax(module, shape)

  def test_bad_keywords(self):
    with self.assertRaisesRegex(ValueError, "num_outputs = 2 but the module returns 3"):
      flax_model.from_flax(_Mlp((4,), 3), (5,), num_outputs=2)
    with self.assertRaisesRegex(ValueError, "l2"):
      flax_model.from_flax(_Mlp(), (5,), l2=-1.0)
    with self.assertRaisesRegex(ValueError, "built by from_flax"):
      flax_model.ghost_fallback_reason(models.mlp(3))

  def test_nnx_module_is_refused_with_advice(self):
    from flax import nnx  # pylint: disable=g-import-not-at-top
    module = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    self.assertTrue(flax_model.is_flax_module(module))
    with self.assertRaisesRegex(TypeError, "NNX.*flax.linen"):
      flax_model.from_flax(module, (3,))


@pytest.mark.slow
class DigitsTest(absltest.TestCase):

  def test_flax_cnn_learns_digits_with_dp_sgd(self):
    """A linen CNN trained with DP-SGD on the 8x8 digits beats chance (0.1) by far.

    Threshold 0.5 on the 449 test digits: a model at chance (0.1) reaches 0.5 with
    probability far below 1e-12 (binomial), while this setting reaches about 0.8 (two
    models, seeds 1 and 2); a lost or mis-scaled gradient leaves it near 0.1.
    """
    from dpjax.data import digits  # pylint: disable=g-import-not-at-top
    d = digits.load(jax.random.key(0))
    n = d.x_train_NxF.shape[0]
    cfg = dpsgd.DpSgdConfig(dataset_size=n, sampling_prob=0.05, num_steps=60,
                            noise_multiplier=1.0, l2_clip_norm=1.0, learning_rate=2.0,
                            delta=1e-5)
    model = flax_model.from_flax(_Cnn((8,), 10), (8, 8, 1))
    self.assertEqual(clipping.path_for(model).name, "ghost")
    res = dpsgd.train_many(jax.random.key(1), d.x_train_NxF, d.y_train_N,
                           np.ones((2, n), bool), cfg, model, perf=_QUIET)
    self.assertTrue(bool(np.all(res.finite)))
    for i in range(2):
      variables = jax.tree.map(lambda a, i=i: a[i], res.params)
      acc = float(jnp.mean(jnp.argmax(model.apply(variables, d.x_test_NxF), -1)
                           == d.y_test_N))
      self.assertGreater(acc, 0.5)


if __name__ == "__main__":
  absltest.main()
