"""Per-example clipping: the clipped-sum contract, its back-ends, and one registry.

Every back-end computes the sum of clipped per-example gradients and the norms before
clipping:

  fn(params, x_BxF, y_B, weights_B, l2_clip_norm) -> (sum pytree like params, norms float32[B])
  sum = sum_i weights_i min(1, C / ||g_i||) g_i,   g_i = grad of record i's loss.

With 0/1 weights one record moves the sum by at most C (the noise's sensitivity). Back-ends:
`glm` (logistic regression), `ghost` (MLP, CNN), `vmap` (any model), `user` (each user's
summed gradient), `sqnorm` (squared norms for any loss). A record with a non-finite
gradient or a norm beyond float32 gets norm inf and contributes exactly zero (never
0 * inf). `path_for(model)` selects a kind's back-end (`register` adds one).
Shape letters: B records, F features, P parameters.

Examples:
  >>> from dpjax import models
  >>> path_for(models.logistic_regression(3)).name
  'glm'
  >>> path_for(models.mlp(4, hidden=(8,), num_classes=3)).name
  'ghost'
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax

from dpjax import _validate
from dpjax import models as models_lib
from dpjax.clipping import ghost, glm, sqnorm, vmap  # noqa: F401  (submodules)
from dpjax.clipping.vmap import clip_factor  # noqa: F401  (re-exported)

PyTree = Any
ClippedSumFn = Callable[..., tuple[PyTree, jax.Array]]


@dataclasses.dataclass(frozen=True, eq=False)
class ClippingPath:
  """A clipped-sum function and what the engine needs to schedule it; compared by identity.

  Attributes:
    per_example_grad_memory: whether it may hold [B, P] per-example gradients.
    scan_unroll: steps per scan iteration for large chunks of small models (speed only).
    accounted: False for a deliberately broken clipping (the engine warns).
    privacy_unit: "example" or "user"; the engine refuses one unlike the config's.
    buffer_fn: what the padded step runs on its buffers of K gathered rows (None: fn); the
      same clipped sums and norms as fn, possibly rounded differently (e.g. ghost's
      `branch=True`). A wrapper that builds a new path from `fn` drops it.
  """
  fn: ClippedSumFn
  name: str = "custom"
  per_example_grad_memory: bool = False
  scan_unroll: int = 1
  accounted: bool = True
  privacy_unit: str = "example"
  buffer_fn: ClippedSumFn | None = None

  def __post_init__(self):
    _validate.check_callable(self.fn, "fn")
    _validate.check_bool(self.per_example_grad_memory, "per_example_grad_memory")
    _validate.check_bool(self.accounted, "accounted")
    _validate.check_int(self.scan_unroll, "scan_unroll")
    _validate.check_choice(self.privacy_unit, ("example", "user"), "privacy_unit")
    if self.buffer_fn is not None:
      _validate.check_callable(self.buffer_fn, "buffer_fn")

  def __call__(self, params, x_BxF, y_B, weights_B, l2_clip_norm):
    return self.fn(params, x_BxF, y_B, weights_B, l2_clip_norm)

  def on_buffer(self, params, x_KxF, y_K, weights_K, l2_clip_norm):
    """`buffer_fn` (else `fn`) on a padded buffer of K rows."""
    fn = self.fn if self.buffer_fn is None else self.buffer_fn
    return fn(params, x_KxF, y_K, weights_K, l2_clip_norm)


_FACTORIES: dict[str, Callable[[models_lib.Model], ClippingPath]] = {}


def register(kind: str, factory: Callable[[models_lib.Model], ClippingPath]) -> None:
  """Makes `path_for(model)` use `factory(model)` for `model.kind == kind`; TypeError if bad."""
  if not isinstance(kind, str) or not kind:
    raise TypeError(f"kind must be a non-empty string, got {kind!r}")
  if not callable(factory):
    raise TypeError(f"factory must be callable, got {factory!r}")
  _FACTORIES[kind] = factory
  path_for.cache_clear()


def generic_path(model: models_lib.Model) -> ClippingPath:
  """The path for a model kind with no registered factory: vmap, two passes (norms, then sum)."""
  models_lib.check_model(model)
  return ClippingPath(functools.partial(vmap.two_pass_clipped_grad_sum, model),
                      "vmap_two_pass", per_example_grad_memory=True)


@functools.lru_cache(maxsize=64)
def path_for(model: models_lib.Model) -> ClippingPath:
  """The clipping path for `model` (memoised): its kind's registered factory, else
  `generic_path`."""
  if not isinstance(model, models_lib.Model):
    raise TypeError(f"model must be a models.Model, got {type(model).__name__}")
  return _FACTORIES.get(model.kind, generic_path)(model)


def as_path(clipping: ClippingPath | ClippedSumFn) -> ClippingPath:
  """A ClippingPath for a path or a plain clipped-sum function (wrapped once, cached)."""
  if isinstance(clipping, ClippingPath):
    return clipping
  if not callable(clipping):
    raise TypeError(f"clipping must be a ClippingPath or a callable, got {clipping!r}")
  return _wrap(clipping)


@functools.lru_cache(maxsize=64)
def _wrap(fn):
  return ClippingPath(fn, "custom")


register("logistic_regression",
         lambda m: ClippingPath(functools.partial(glm.clipped_grad_sum, m.l2), "glm",
                                scan_unroll=4))
# The padded step's buffers branch past the overflow guards when every norm is in range.
register("mlp", lambda m: ClippingPath(ghost.clipped_sum_fn(m), "ghost",
                                       buffer_fn=ghost.clipped_sum_fn(m, branch=True)))
register("cnn", lambda m: ClippingPath(ghost.clipped_sum_fn(m), "ghost",
                                       buffer_fn=ghost.clipped_sum_fn(m, branch=True)))

from dpjax.clipping import user  # noqa: E402,F401  (needs ClippingPath defined above)

__all__ = ("ClippingPath", "as_path", "generic_path", "path_for", "register", "ghost", "glm",
           "grid", "sqnorm", "user", "vmap")
