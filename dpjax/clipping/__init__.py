"""Per-example clipping: the clipped-sum contract, its back-ends, and one registry.

Every clipping back-end computes the same thing, the sum of clipped per-example
gradients and the norms before clipping:

  fn(params, x_BxF, y_B, weights_B, l2_clip_norm) -> (sum pytree like params, norms float32[B])

  sum = sum_i weights_i min(1, C / ||g_i||) g_i,   g_i = grad of record i's loss.

With 0/1 weights (the batch mask), adding or removing one record moves the sum by
at most C in L2 norm; the noise that follows (`dpjax.privatizer`) is calibrated to
that. The back-ends differ only in speed (all are tested equal to `vmap`):

  module   what it does                                     used by default for
  glm      closed form for logistic regression              models.logistic_regression
  ghost    norms from activations and output gradients      models.mlp, models.cnn
           (no per-example gradients), one matmul per layer
  vmap     vmap(grad), one pass (`clipped_grad_sum`) or     any other model
           two passes with `sqnorm` norms (`two_pass_...`)
  user     each USER's summed gradient clipped to C         privacy_unit "user"
           (`user.user_level_path`; user-level DP-SGD)      (`dpsgd.train_many`)
  sqnorm   per-example squared norms of vmap(grad) for any loss, with matmul
           gradients' norms taken as products of norms found in the jaxpr

Records at the float32 limits (every back-end, tested with features up to +-3.4e38):
norms are formed without overflow (`vmap.safe_norm`: the plain sum of squares where
it is finite, bit for bit as before; otherwise scaled by the largest |coordinate|),
and a record whose gradient has a NaN or inf coordinate, or whose norm exceeds the
float32 range, gets norm inf and contributes exactly zero (`jnp.where`, never
0 * inf), as does every unsampled record whatever its values. Zero is within C, so
the sensitivity bound holds for every record of finite values.

`path_for(model)` is the one place where a model's kind selects its back-end: it
returns a `ClippingPath` (the function plus what the engine needs to schedule it).
A new model kind plugs in with `register(kind, factory)`; a user's own clipping is
any function with the contract above (or a `ClippingPath`), passed to
`dpsgd.train_many(..., clipping=...)`.

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
  """A clipped-sum function and what the engine needs to know to schedule it.

  Attributes:
    fn: the clipped-sum function (module docstring contract).
    name: a short label ("glm", "ghost", "vmap_two_pass", "custom", ...).
    per_example_grad_memory: whether it may hold [B, P] per-example gradients (the
      engine then sizes its chunks of models for them).
    scan_unroll: steps per scan iteration the engine may use for large chunks of
      small models (performance only; results are the same).
    accounted: False for a deliberately broken clipping (`dpjax.audit.variants`):
      the engine then warns that the accountant's epsilon does not hold.
    privacy_unit: what one clipped contribution is: "example" (each record's
      gradient clipped to C) or "user" (each user's summed gradient clipped to C,
      `dpjax.clipping.user`). The engine refuses a path whose unit is not the
      configuration's `DpSgdConfig.privacy_unit`.
  Instances compare by identity, so one object reuses one compiled program.
  """
  fn: ClippedSumFn
  name: str = "custom"
  per_example_grad_memory: bool = False
  scan_unroll: int = 1
  accounted: bool = True
  privacy_unit: str = "example"

  def __post_init__(self):
    _validate.check_callable(self.fn, "fn")
    _validate.check_int(self.scan_unroll, "scan_unroll")
    _validate.check_choice(self.privacy_unit, ("example", "user"), "privacy_unit")

  def __call__(self, params, x_BxF, y_B, weights_B, l2_clip_norm):
    return self.fn(params, x_BxF, y_B, weights_B, l2_clip_norm)


_FACTORIES: dict[str, Callable[[models_lib.Model], ClippingPath]] = {}


def register(kind: str, factory: Callable[[models_lib.Model], ClippingPath]) -> None:
  """Makes `path_for(model)` use `factory(model)` for models with `model.kind == kind`.

  Raises:
    TypeError: if kind is not a string or factory is not callable.
  """
  if not isinstance(kind, str) or not kind:
    raise TypeError(f"kind must be a non-empty string, got {kind!r}")
  if not callable(factory):
    raise TypeError(f"factory must be callable, got {factory!r}")
  _FACTORIES[kind] = factory
  path_for.cache_clear()


def generic_path(model: models_lib.Model) -> ClippingPath:
  """The path for any model: per-example gradients by vmap, two passes (norms, then the
  clipped sum), for a model kind with no registered factory."""
  models_lib.check_model(model)
  return ClippingPath(functools.partial(vmap.two_pass_clipped_grad_sum, model),
                      "vmap_two_pass", per_example_grad_memory=True)


@functools.lru_cache(maxsize=64)
def path_for(model: models_lib.Model) -> ClippingPath:
  """The clipping path the engine uses for `model` when none is given (memoised).

  The registered factory of `model.kind`; for unregistered kinds, two-pass
  vmap(grad) with `sqnorm` norms, which works for any loss.
  """
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
register("mlp", lambda m: ClippingPath(ghost.clipped_sum_fn(m), "ghost"))
register("cnn", lambda m: ClippingPath(ghost.clipped_sum_fn(m), "ghost"))

from dpjax.clipping import user  # noqa: E402,F401  (needs ClippingPath defined above)

__all__ = ("ClippingPath", "as_path", "generic_path", "path_for", "register", "ghost", "glm",
           "grid", "sqnorm", "user", "vmap")
