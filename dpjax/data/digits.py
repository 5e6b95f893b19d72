"""Real handwritten digits: the 8x8 images bundled with scikit-learn (no download).

`sklearn.datasets.load_digits`: 1,797 images of 0-9 (UCI), pixels 0..16 scaled by the
PUBLIC constant 16; split by a permutation from a `jax.random` key.

Shape letters: N images, F = 64 flattened pixels (row-major), H = W = 8, C = 1 (NHWC).

Examples:
  >>> import jax
  >>> data = load(jax.random.key(0), test_fraction=0.25)
  >>> data.x_train_NxF.shape, data.x_test_NxF.shape, data.x_train_NxF.dtype
  ((1348, 64), (449, 64), dtype('float32'))
  >>> as_images(data.x_test_NxF).shape
  (449, 8, 8, 1)
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

NUM_EXAMPLES = 1797
NUM_CLASSES = 10
IMAGE_SHAPE = (8, 8, 1)  # H, W, C
NUM_FEATURES = 64
PIXEL_MAX = 16.0  # public: the UCI data set's documented pixel range is 0..16


class Digits(NamedTuple):
  """A train/test split of the digits: x_*_NxF float32[N, 64] in [0, 1], y_*_N int32 labels 0..9."""
  x_train_NxF: jax.Array
  y_train_N: jax.Array
  x_test_NxF: jax.Array
  y_test_N: jax.Array


@functools.lru_cache(maxsize=1)
def _raw() -> tuple[np.ndarray, np.ndarray]:
  """The bundled pixels (uint8[1797, 64], 0..16) and labels (int32[1797]), read once."""
  from sklearn import datasets  # local import: scikit-learn is only needed here
  bunch = datasets.load_digits()
  pixels = np.asarray(bunch.data)
  labels = np.asarray(bunch.target)
  if pixels.shape != (NUM_EXAMPLES, NUM_FEATURES) or pixels.min() < 0 or pixels.max() > PIXEL_MAX:
    raise RuntimeError(f"unexpected load_digits() data: shape {pixels.shape}, "
                       f"range [{pixels.min()}, {pixels.max()}]")
  pixels = pixels.astype(np.uint8)
  pixels.setflags(write=False)
  labels = labels.astype(np.int32)
  labels.setflags(write=False)
  return pixels, labels


def scale(pixels_NxF: jax.typing.ArrayLike) -> jax.Array:
  """Maps raw pixel counts 0..16 (any shape; ValueError outside) to float32 `pixels / 16`."""
  p = _validate.check_array(pixels_NxF, "pixels_NxF", low=0.0, high=PIXEL_MAX)
  return jnp.asarray(p / PIXEL_MAX, dtype=jnp.float32)


def load(key: jax.Array, test_fraction: float = 0.25) -> Digits:
  """All 1,797 digits split at random: the first round(test_fraction * 1797) permuted are test.

  Examples:
    >>> import jax
    >>> d = load(jax.random.key(1), test_fraction=0.5)
    >>> int(d.y_train_N.shape[0] + d.y_test_N.shape[0])
    1797
  """
  test_fraction = _validate.check_probability(test_fraction, "test_fraction", open_low=True,
                                              open_high=True)
  num_test = int(round(test_fraction * NUM_EXAMPLES))
  if not 0 < num_test < NUM_EXAMPLES:
    raise ValueError(f"test_fraction={test_fraction} leaves an empty train or test set")
  pixels, labels = _raw()
  perm = np.asarray(jax.random.permutation(key, NUM_EXAMPLES))
  test, train = perm[:num_test], perm[num_test:]
  return Digits(
      x_train_NxF=scale(pixels[train]), y_train_N=jnp.asarray(labels[train]),
      x_test_NxF=scale(pixels[test]), y_test_N=jnp.asarray(labels[test]))


class DigitsSplit(NamedTuple):
  """A train / validation / test split; the validation images are treated as PUBLIC."""
  x_train_NxF: jax.Array
  y_train_N: jax.Array
  x_val_NxF: jax.Array
  y_val_N: jax.Array
  x_test_NxF: jax.Array
  y_test_N: jax.Array


def load_with_validation(key: jax.Array, test_fraction: float = 0.25,
                         validation_size: int = 200) -> DigitsSplit:
  """`load(key, test_fraction)` with `validation_size` images carved out of its training part
  (permuted by `fold_in(key, 1)`); the three parts are disjoint.

  Examples:
    >>> s = load_with_validation(jax.random.key(0), 0.25, 200)
    >>> s.x_train_NxF.shape, s.x_val_NxF.shape, s.x_test_NxF.shape
    ((1148, 64), (200, 64), (449, 64))
  """
  data = load(key, test_fraction)
  n = int(data.y_train_N.shape[0])
  v = _validate.check_int(validation_size, "validation_size")
  if v >= n:
    raise ValueError(f"validation_size must leave training images (< {n}), got {v}")
  perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, 1), n))
  val, train = perm[:v], perm[v:]
  return DigitsSplit(
      x_train_NxF=data.x_train_NxF[train], y_train_N=data.y_train_N[train],
      x_val_NxF=data.x_train_NxF[val], y_val_N=data.y_train_N[val],
      x_test_NxF=data.x_test_NxF, y_test_N=data.y_test_N)


def as_images(x_NxF: jax.typing.ArrayLike) -> jax.Array:
  """Flat digits [N, 64] as NHWC images [N, 8, 8, 1]: out[n, i, j, 0] == x[n, 8 * i + j]."""
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32,
                                        shape=(None, NUM_FEATURES), min_size=1))
  return x.reshape((x.shape[0],) + IMAGE_SHAPE)
