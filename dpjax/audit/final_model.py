"""Final-model (hidden-state) adversaries for DP-SGD on real networks; the last-iterate heuristic.

DP-SGD's accountant assumes the adversary sees every privatized update. A
released model is usually only the LAST iterate theta_T. This module builds
adversaries that see theta_T (and the public initial parameters theta_0, which
DP-SGD's analysis lets anyone choose) and nothing else:

* a crafted INPUT canary (`input_canary`): an out-of-distribution image (every
  pixel lit except the features no record uses) with the label of largest loss
  under theta_0, scored by -loss(theta_T) (`loss_score`);
* GRADIENT canaries observed only through theta_T (the hidden-state threat
  model of Cebere, Bellet & Papernot, ICLR 2025): canary j is a fixed gradient
  g_j = C e_j inserted in every step where it is sampled, e_j a parameter
  coordinate that no record's gradient touches (`input_weight_canaries`: the
  first-layer weights of pixels that are zero in every record, where the
  gradient of a record is x_f * delta = 0 for ANY parameters) or, for models
  without such coordinates, the coordinate the records move least at theta_0
  (`quiet_coordinate_canary`). The score is the final displacement along e_j,
  -<theta_T - theta_0, e_j> (`projection_score`);
* a WORST-CASE INITIALISATION (after Annamalai & De Cristofaro, NeurIPS 2024):
  the adversary picks theta_0 so that the target record's clipped gradient is
  large, constant during training and orthogonal to everyone else's
  (`worst_case_init`, for the MLP: a dedicated first-layer unit that only the
  target activates), optionally after pre-training on public data (`pretrain`,
  their recipe, which quiets the other records). The target is then scored by
  its loss (their score) or by the displacement along its initial gradient
  direction (`gradient_direction`, `projection_score`).

`audit` trains R runs of `dpsgd.train_many` from one fixed theta_0 with every
adversary's canary included by its own independent bits, scores the final
models, and also scores the gradient canaries WHITE-BOX on the same runs (the
exact per-step likelihood ratio of `canary.white_box_scores`), so the cost of
hiding the intermediate models is measured on identical trials. A researcher's
own adversary is a `FinalModelAdversary`: a canary plus score functions of
(theta_T, theta_0).

The last-iterate heuristic (Steinke et al., ICLR 2025): for a LINEAR loss the
final iterate reveals only the sum of the canary's privatized contributions.
In units of C, with s = sigma sqrt(T),

    IN:  X = sum_t (b_t + sigma z_t) ~ sum_k Binom(k; T, q) N(k, s^2)
    OUT: X = sum_t sigma z_t         ~ N(0, s^2),

whose privacy profile `last_iterate_delta` computes exactly (a one-dimensional
monotone likelihood ratio, see its docstring) and `last_iterate_epsilon`
inverts. For q = 1 it is the Gaussian mechanism with mu = sqrt(T) / sigma, the
same as the composition of all T steps: hiding the state then protects nothing.
For q < 1 it is below the accountant's eps. A Dirac gradient canary in an
untouched coordinate is exactly linear, so its final-model score has exactly
this distribution (`last_iterate_roc` gives its ROC); for a record canary it is
a heuristic, not a bound (Steinke et al. give counterexamples).

References: Annamalai & De Cristofaro 2024, https://arxiv.org/abs/2405.14106;
Cebere, Bellet & Papernot 2025, https://arxiv.org/abs/2405.14457; Steinke et al.
2025, https://arxiv.org/abs/2410.06186.

Shape letters: R runs (models), K canaries, T steps, N records, F features, J
ROC points.

Examples:
  >>> from dpjax.accounting import gdp
  >>> e = last_iterate_epsilon(1.0, 2.0, 16, 1e-5)           # q = 1: 2-GDP
  >>> abs(e - gdp.gaussian_epsilon(1e-5, 2.0)) < 1e-6
  True
  >>> from dpjax import accounting                           # q < 1: below the accountant
  >>> exact = accounting.dpsgd_epsilon(1.0, 0.1, 100, 1e-5, accountant="pld")
  >>> round(last_iterate_epsilon(0.1, 1.0, 100, 1e-5), 2), round(exact, 2)
  (5.36, 7.05)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.flatten_util  # noqa: F401  (ravel_pytree)
import jax.numpy as jnp
import numpy as np
from scipy import optimize, special, stats as sp_stats

from dpjax import _validate

# ----------------------------------------------------------------------------------
# The last-iterate heuristic: sum of T privatized contributions of a linear canary.


def _check_mechanism(sampling_prob, noise_multiplier, num_steps):
  q = _validate.check_sampling_prob(sampling_prob)
  s = _validate.check_positive(noise_multiplier, "noise_multiplier")
  if not math.isfinite(s):
    raise ValueError(f"noise_multiplier must be finite, got {noise_multiplier!r}")
  t = _validate.check_int(num_steps, "num_steps")
  return q, s, t


def _mixture(q: float, t: int):
  """(k, log w_k) of Binom(T, q), the canary's count of sampled steps (w_k > 0 only)."""
  if q >= 1.0:
    return np.array([float(t)]), np.array([0.0])
  k = np.arange(t + 1, dtype=np.float64)
  logw = sp_stats.binom.logpmf(k, t, q)
  ok = np.isfinite(logw)
  return k[ok], logw[ok]


def _log_lr(x, k, logw, s):
  """log L(x) = log sum_k w_k exp((2 k x - k^2) / (2 s^2)), increasing in x."""
  x = np.asarray(x, np.float64)
  return special.logsumexp(logw + (2.0 * k * x[..., None] - k * k) / (2.0 * s * s), axis=-1)


def _solve(target, k, logw, s):
  """x with log L(x) = target (log L increases from log w_0 (or -inf) to +inf)."""
  f = lambda x: float(_log_lr(x, k, logw, s)) - target
  lo, hi = -s - 1.0, k.max() + s + 1.0
  while f(lo) > 0:
    lo = 2.0 * lo - 1.0
  while f(hi) < 0:
    hi = 2.0 * hi + 1.0
  return optimize.brentq(f, lo, hi, xtol=1e-13 * max(1.0, abs(hi)), rtol=1e-15, maxiter=500)


def last_iterate_delta(epsilon, sampling_prob: float, noise_multiplier: float,
                       num_steps: int, direction: str = "both"):
  """Exact privacy profile delta(eps) of the last-iterate pair of a linear canary.

  The pair (in units of C, s = sigma sqrt(T)) is P = sum_k w_k N(k, s^2), w_k =
  Binom(k; T, q), against Q = N(0, s^2). Its likelihood ratio L(x) = sum_k w_k
  exp((2 k x - k^2) / (2 s^2)) increases in x, so the optimal sets are half-lines:

      remove: delta = sum_k w_k Phi((k - x1) / s) - e^eps Phi(-x1 / s),  L(x1) = e^eps
      add:    delta = Phi(x2 / s) - e^eps sum_k w_k Phi((x2 - k) / s),  L(x2) = e^-eps

  (add is 0 when e^-eps <= w_0 = (1 - q)^T: no x has so small a ratio). The
  boundary is found by Brent's method to 1e-13 relative; the profile is
  stationary in the boundary (d/dx of each expression vanishes where L = e^{+-eps}),
  so its error is second order in that, below 1e-15 absolute in practice.

  Args:
    epsilon: eps >= 0, scalar or float[E].
    sampling_prob: q in (0, 1].
    noise_multiplier: sigma > 0, finite.
    num_steps: T >= 1.
    direction: "remove", "add" or "both" (the larger of the two).
  Returns:
    float, or float64[E] for an array `epsilon`.

  References: Steinke et al. 2025, https://arxiv.org/abs/2410.06186.

  Examples:
    >>> from dpjax.accounting import gdp
    >>> d = last_iterate_delta(1.0, 1.0, 2.0, 4)       # q = 1: mu = sqrt(4) / 2 = 1
    >>> abs(d - float(gdp.gaussian_delta(1.0, 1.0))) < 1e-12
    True
  """
  q, sig, t = _check_mechanism(sampling_prob, noise_multiplier, num_steps)
  direction = _validate.check_choice(direction, ("remove", "add", "both"), "direction")
  if np.ndim(epsilon) == 0:
    eps = np.array([_validate.check_epsilon(epsilon, "epsilon", allow_zero=True)])
  else:
    eps = _validate.check_array(epsilon, "epsilon", low=0.0, min_size=1)
  k, logw = _mixture(q, t)
  s = sig * math.sqrt(t)
  w = np.exp(logw)
  out = []
  for e in eps.ravel():
    x1 = _solve(e, k, logw, s)
    rem = float(np.dot(w, special.ndtr((k - x1) / s)) - math.exp(e) * special.ndtr(-x1 / s))
    log_w0 = logw[0] if k[0] == 0 else -math.inf
    if -e <= log_w0:
      add = 0.0
    else:
      x2 = _solve(-e, k, logw, s)
      add = float(special.ndtr(x2 / s) - math.exp(e) * np.dot(w, special.ndtr((x2 - k) / s)))
    d = {"remove": rem, "add": add, "both": max(rem, add)}[direction]
    out.append(min(1.0, max(0.0, d)))
  res = np.asarray(out).reshape(eps.shape)
  return float(res[0]) if np.ndim(epsilon) == 0 else res


def last_iterate_epsilon(sampling_prob: float, noise_multiplier: float, num_steps: int,
                         delta: float, tol: float = 1e-9) -> float:
  """eps(delta) of the last-iterate pair: the heuristic prediction of Steinke et al.

  The smallest eps >= 0 with `last_iterate_delta(eps) <= delta`, by bisection
  on the decreasing profile to `tol` (returned from above: the true value lies
  in [returned - tol, returned]).

  Args:
    sampling_prob: q in (0, 1].
    noise_multiplier: sigma > 0, finite.
    num_steps: T >= 1.
    delta: in (0, 1).
    tol: bisection tolerance in eps, > 0.
  Returns:
    eps >= 0 (0 if delta(0) <= delta).

  Examples:
    >>> from dpjax.accounting import gdp
    >>> abs(last_iterate_epsilon(1.0, 1.0, 1, 1e-5) - gdp.gaussian_epsilon(1e-5, 1.0)) < 1e-8
    True
  """
  q, sig, t = _check_mechanism(sampling_prob, noise_multiplier, num_steps)
  delta = _validate.check_delta(delta)
  tol = _validate.check_positive(tol, "tol")
  f = lambda e: last_iterate_delta(e, q, sig, t)
  if f(0.0) <= delta:
    return 0.0
  lo, hi = 0.0, 1.0
  while f(hi) > delta:
    lo, hi = hi, 2.0 * hi
    if hi > 1e4:
      raise ValueError("last_iterate_epsilon: eps above 1e4 (noise_multiplier too small)")
  while hi - lo > tol:
    mid = 0.5 * (lo + hi)
    if f(mid) > delta:
      lo = mid
    else:
      hi = mid
  return hi


def last_iterate_roc(sampling_prob: float, noise_multiplier: float, num_steps: int,
                     num_points: int = 4001) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """ROC of the optimal final-model test of a linear gradient canary: "IN iff X > t".

  X is the canary's final displacement in units of C (module docstring); the
  likelihood ratio is increasing in X, so these thresholds are Neyman-Pearson
  optimal, and `dpjax.audit.estimators.best_certifiable` on this ROC is what
  the best final-model adversary of such a canary is expected to certify.

  Args:
    sampling_prob: q in (0, 1].
    noise_multiplier: sigma > 0, finite.
    num_steps: T >= 1.
    num_points: J >= 3: -inf, J - 2 thresholds evenly spaced over both laws
      (12 standard deviations beyond them), +inf.
  Returns:
    (thresholds_J, fpr_J, fnr_J), float64.

  Examples:
    >>> thr, fpr, fnr = last_iterate_roc(1.0, 1.0, 1)          # N(1, 1) against N(0, 1)
    >>> j = int(abs(thr - 0.5).argmin())                        # at x = 1/2 the errors agree
    >>> bool(abs(fpr[j] - fnr[j]) < 1e-2), float(fpr[0]), float(fnr[-1])
    (True, 1.0, 1.0)
  """
  q, sig, t = _check_mechanism(sampling_prob, noise_multiplier, num_steps)
  j = _validate.check_int(num_points, "num_points", minimum=3)
  k, logw = _mixture(q, t)
  s = sig * math.sqrt(t)
  w = np.exp(logw)
  inner = np.linspace(-12.0 * s, float(k.max()) + 12.0 * s, j - 2)
  thr = np.concatenate([[-np.inf], inner, [np.inf]])
  fpr = special.ndtr(-thr / s)
  fnr = np.array([float(np.dot(w, special.ndtr((x - k) / s))) for x in thr])
  return thr, fpr, fnr


# ----------------------------------------------------------------------------------
# Canaries and initialisations.


def unused_features(x_NxF) -> np.ndarray:
  """Indices of the features equal to 0 in every record: int64[U], ascending.

  In a dense first layer, a record's gradient with respect to the weights of
  feature f is x_f * delta, so these weights are moved by no record, whatever
  the parameters: only noise and canaries move them.

  Args:
    x_NxF: float[N, ...] records (flattened to [N, F]).
  Returns:
    int64[U].

  Examples:
    >>> unused_features([[0.0, 1.0, 0.0], [0.0, 0.5, 2.0]]).tolist()
    [0]
  """
  x = _validate.check_array(x_NxF, "x_NxF", min_size=1)
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  x = x.reshape(x.shape[0], -1)
  return np.flatnonzero(np.all(x == 0.0, axis=0)).astype(np.int64)


def _check_params(model, params, name="params"):
  """`params` has the structure, shapes and finite values of model.init's output."""
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model)
  ref = jax.eval_shape(model.init, jax.random.key(0))
  _validate.check_params_like(params, ref, name)
  return params


def _check_labels(model, y, name, **shape):
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  check = _validate.check_labels
  return check(y, name, model.num_outputs, **shape)


def _check_record(model, params, x_c, y_c):
  f = _num_features(model, params)
  x = _validate.check_array(x_c, "x_c", np.float32, shape=(f,))
  y = _check_labels(model, np.asarray(y_c).reshape(1) if np.ndim(y_c) == 0 else y_c, "y_c",
                    shape=(1,))
  return jnp.asarray(x)[None], jnp.asarray(y)


def _check_mlp(model, params, name="model"):
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model, name)
  if model.kind != "mlp":
    raise ValueError(f"{name} must be a dpjax.models.mlp with >= 1 hidden layer "
                     f"(kind {model.kind!r})")
  _check_params(model, params)
  if len(params["layers"]) < 2:
    raise ValueError(f"{name} must be a dpjax.models.mlp with >= 1 hidden layer")


def input_weight_canaries(model, params, features, l2_clip_norm: float,
                          skip_units=()) -> dict:
  """Dirac gradient canaries C e_(f, h) on the MLP's first-layer weights of `features`.

  For features no record uses (`unused_features`), no record's gradient ever
  touches these weights, so (SGD, no weight decay) the final value of weight
  (f, h) is theta_0 - lr/B sum_t (b_t C + sigma C z_t): the canaries are exactly
  linear, mutually independent (disjoint coordinates, independent noise and
  bits), and their final-model score has the law of `last_iterate_roc`.

  Args:
    model: a `dpjax.models.mlp` with >= 1 hidden layer.
    params: its parameters (unbatched).
    features: int[U] input features (>= 1).
    l2_clip_norm: C > 0, finite.
    skip_units: first-layer units to leave out (e.g. one used by `worst_case_init`).
  Returns:
    pytree like params, every leaf with a leading axis K = U * (H - |skip_units|):
    canary j is C at one (feature, unit) weight, 0 elsewhere.

  Examples:
    >>> import jax
    >>> from dpjax import models
    >>> m = models.mlp(3, (2,), 2)
    >>> g = input_weight_canaries(m, m.init(jax.random.key(0)), [0], 1.0)
    >>> g["layers"][0]["w"].shape, float(g["layers"][0]["w"].sum())
    ((2, 3, 2), 2.0)
  """
  _check_mlp(model, params)
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  w0 = params["layers"][0]["w"]
  f_in, h = int(w0.shape[0]), int(w0.shape[1])
  feats = _validate.check_array(features, "features", np.int64, ndim=1, min_size=1,
                                low=0, high=f_in - 1)
  skip = set(int(u) for u in _validate.check_array(np.asarray(skip_units, np.int64).reshape(-1),
                                                   "skip_units", np.int64, low=0,
                                                   high=h - 1).tolist())
  units = [u for u in range(h) if u not in skip]
  if not units:
    raise ValueError("skip_units leaves no first-layer unit for the canaries")
  pairs = [(int(f), u) for f in feats.tolist() for u in units]
  k = len(pairs)
  out = jax.tree.map(lambda l: jnp.zeros((k,) + tuple(l.shape), jnp.float32), params)
  w = np.zeros((k, f_in, h), np.float32)
  for j, (f, u) in enumerate(pairs):
    w[j, f, u] = c
  out["layers"][0]["w"] = jnp.asarray(w)
  return out


def _flat_grads(model, params, x, y, l2_clip_norm):
  """Sum over records of |clipped per-example gradient|, flattened: float64[P]."""
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  flat, unravel = jax.flatten_util.ravel_pytree(params)

  def one(xi, yi):
    g = jax.grad(lambda p: models_lib.per_example_loss(model, unravel(p), xi[None],
                                                       yi[None])[0])(flat)
    return jnp.abs(g) * jnp.minimum(1.0, l2_clip_norm / (jnp.linalg.norm(g) + 1e-30))
  total = jax.jit(lambda xs, ys: jax.vmap(one)(xs, ys).sum(axis=0))(x, y)
  return np.asarray(total, np.float64), unravel


def quiet_coordinate_canary(model, params, x_NxF, y_N, l2_clip_norm: float) -> dict:
  """One Dirac gradient canary C e_i at the coordinate the records move least at theta_0.

  i minimises sum_n |clip(grad loss_n(theta_0))_i| (ties: the first). For
  models with shared weights (convolutions) no coordinate is untouched, so the
  records still move e_i a little during training: the canary is then only
  approximately linear (its score no longer has exactly the law of
  `last_iterate_roc`), and one canary per run keeps the trials independent.

  Args:
    model: a dpjax.models.Model.
    params: theta_0 (unbatched).
    x_NxF, y_N: the training records.
    l2_clip_norm: C > 0, finite.
  Returns:
    pytree like params with a leading axis K = 1.

  Examples:
    >>> import jax, numpy as np
    >>> from dpjax import models
    >>> m = models.mlp(2, (2,), 2)
    >>> g = quiet_coordinate_canary(m, m.init(jax.random.key(0)), np.array([[0., 1.]]),
    ...                             np.array([1]), 1.0)
    >>> float(sum(float(abs(l).sum()) for l in jax.tree.leaves(g)))
    1.0
  """
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model)
  _check_params(model, params)
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  x = jnp.asarray(_check_x(model, params, x_NxF))
  y = jnp.asarray(_check_labels(model, y_N, "y_N", shape=(x.shape[0],)))
  mass, unravel = _flat_grads(model, params, x, y, c)
  e = np.zeros_like(mass, dtype=np.float32)
  e[int(np.argmin(mass))] = c
  return jax.tree.map(lambda l: l[None], unravel(jnp.asarray(e)))


def input_canary(model, params, exclude_features=(), value: float = 1.0
                 ) -> tuple[np.ndarray, int]:
  """An out-of-distribution image and the label of largest loss under `params`.

  The image is `value` on every feature except `exclude_features` (0 there):
  for the digits, a white square, unlike any digit. Leaving out the unused
  features keeps it off the coordinates of `input_weight_canaries`, so the two
  kinds of canaries can share runs without coupling the gradient canaries.

  Args:
    model: a dpjax.models.Model with K >= 2 classes and a known input size.
    params: the public theta_0 (unbatched).
    exclude_features: int[U] features set to 0.
    value: the lit features' value (finite).
  Returns:
    (x_c float32[F], y_c): y_c = argmax_y loss(theta_0; x_c, y).

  Examples:
    >>> import jax
    >>> from dpjax import models
    >>> m = models.mlp(4, (3,), 3)
    >>> x, y = input_canary(m, m.init(jax.random.key(0)), [0])
    >>> x.tolist(), 0 <= y < 3
    ([0.0, 1.0, 1.0, 1.0], True)
  """
  _check_params(model, params)
  value = _validate.check_finite(value, "value")
  if model.num_outputs < 2:
    raise ValueError("input_canary needs a multi-class model (num_outputs >= 2)")
  f = _num_features(model, params)
  x = np.full((f,), value, np.float32)
  excl = _validate.check_array(np.asarray(exclude_features, np.int64).reshape(-1),
                               "exclude_features", np.int64, low=0, high=f - 1)
  x[excl] = 0.0
  logits = np.asarray(model.apply(params, jnp.asarray(x)[None]))[0]
  return x, int(np.argmin(logits))          # largest cross-entropy = smallest logit


def _check_x(model, params, x_NxF, name="x_NxF"):
  f = _num_features(model, params)
  x = _validate.check_array(x_NxF, name, np.float32, ndim=2, min_size=1)
  if x.shape[1] != f:
    raise ValueError(f"{name} must have shape [N, {f}], got {x.shape}")
  return x


def _num_features(model, params=None) -> int:
  """F, the flattened input size of `model` (from input_shape or the first weights)."""
  if model.input_shape is not None:
    return int(np.prod(model.input_shape))
  ref = jax.eval_shape(model.init, jax.random.key(0)) if params is None else params
  if isinstance(ref, dict) and "layers" in ref:
    return int(ref["layers"][0]["w"].shape[0])
  if isinstance(ref, dict) and "w" in ref and len(ref["w"].shape) == 1:
    return int(ref["w"].shape[0])
  raise ValueError("cannot tell the model's input size (no input_shape, not an MLP or a "
                   "logistic regression)")


def pretrain(model, params, x_NxF, y_N, *, num_steps: int, learning_rate: float):
  """Non-private full-batch gradient descent on PUBLIC data (the adversary's own).

  Annamalai & De Cristofaro's worst-case initialisation starts DP-SGD from a
  model already fitted to data like the private set, so the private records'
  gradients are small and the target's stands out.

  Args:
    model: a dpjax.models.Model.
    params: starting parameters (unbatched).
    x_NxF, y_N: public records (never the private ones).
    num_steps: steps >= 1.
    learning_rate: > 0.
  Returns:
    parameters like `params`.

  Examples:
    >>> import jax, numpy as np
    >>> from dpjax import models
    >>> m = models.mlp(2, (4,), 2)
    >>> x = np.array([[1., 0.], [0., 1.]], np.float32); y = np.array([0, 1])
    >>> p = pretrain(m, m.init(jax.random.key(0)), x, y, num_steps=200, learning_rate=0.5)
    >>> np.asarray(m.apply(p, x)).argmax(1).tolist()
    [0, 1]
  """
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model)
  _check_params(model, params)
  x = jnp.asarray(_check_x(model, params, x_NxF))
  y = jnp.asarray(_check_labels(model, y_N, "y_N", shape=(x.shape[0],)))
  t = _validate.check_int(num_steps, "num_steps")
  lr = _validate.check_positive(learning_rate, "learning_rate")
  return _pretrain(model, t)(params, x, y, jnp.float32(lr))


@functools.lru_cache(maxsize=16)
def _pretrain(model, t):
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top

  def loss(p, x, y):
    return jnp.mean(models_lib.per_example_loss(model, p, x, y))

  @jax.jit
  def run(p, x, y, lr):
    def step(p, _):
      g = jax.grad(loss)(p, x, y)
      return jax.tree.map(lambda a, b: a - lr * b, p, g), None
    return jax.lax.scan(step, p, None, length=t)[0]
  return run


def worst_case_init(model, params, feature: int, label: int, *, bias: float = 2.0,
                    gain: float = 10.0, unit: int = 0) -> tuple[dict, tuple[np.ndarray, int]]:
  """Crafted theta_0 for an MLP: a first-layer unit that only the target activates.

  DP-SGD's guarantee holds for every theta_0, so the auditor may pick the worst
  one. With target x_c = e_feature (one lit pixel that no record uses) and unit
  u = `unit`:

    W1[:, u] = 0, W1[feature, u] = 1 + bias, b1[u] = -bias, W1[feature, v] = 0 (v != u),
    W2[u, :] = 0 except W2[u, label] = -gain.

  Every record has pre-activation -bias + (noise-sized drift) < 0 at unit u, so
  no record's gradient reaches W1[:, u], b1[u] or W2[u, :]; the target has
  activation 1 there, logit(label) pushed down by `gain`, hence a loss gradient
  of norm about gain * sqrt(2) >> C, almost all of it on (W1[feature, u],
  b1[u]): its clipped gradient is C times a nearly fixed unit vector that no
  other record touches, which makes the target as linear as a gradient canary.
  The rest of `params` (e.g. `pretrain`ed) is kept.

  Args:
    model: a `dpjax.models.mlp` with >= 1 hidden layer.
    params: the starting parameters (unbatched).
    feature: the target's lit feature (choose one of `unused_features`).
    label: the target's label in [0, K).
    bias: > 0, how far below 0 the unit sits for every record.
    gain: > 0, the unit's push against the label.
    unit: the first-layer unit used.
  Returns:
    (theta_0, (x_c float32[F], label)).

  Examples:
    >>> import jax, numpy as np
    >>> from dpjax import models
    >>> m = models.mlp(3, (2,), 2)
    >>> p, (x, y) = worst_case_init(m, m.init(jax.random.key(0)), 0, 1)
    >>> x.tolist(), y, bool(np.asarray(m.apply(p, x[None]))[0, 1] < -9)
    ([1.0, 0.0, 0.0], 1, True)
  """
  _check_mlp(model, params)
  w1 = np.array(params["layers"][0]["w"], np.float32)
  b1 = np.array(params["layers"][0]["b"], np.float32)
  w2 = np.array(params["layers"][1]["w"], np.float32)
  f_in, h = w1.shape
  feature = _validate.check_int(feature, "feature", minimum=0)
  unit = _validate.check_int(unit, "unit", minimum=0)
  label = _validate.check_int(label, "label", minimum=0)
  if feature >= f_in:
    raise ValueError(f"feature must be < {f_in}, got {feature}")
  if unit >= h:
    raise ValueError(f"unit must be < {h}, got {unit}")
  if label >= w2.shape[1]:
    raise ValueError(f"label must be < {w2.shape[1]}, got {label}")
  bias = _validate.check_positive(bias, "bias")
  gain = _validate.check_positive(gain, "gain")
  w1[:, unit] = 0.0
  w1[feature, :] = 0.0
  w1[feature, unit] = 1.0 + bias
  b1[unit] = -bias
  w2[unit, :] = 0.0
  w2[unit, label] = -gain
  out = jax.tree.map(lambda a: a, params)
  out["layers"] = [dict(l) for l in params["layers"]]
  out["layers"][0] = {"w": jnp.asarray(w1), "b": jnp.asarray(b1)}
  out["layers"][1] = dict(out["layers"][1], w=jnp.asarray(w2))
  x = np.zeros((f_in,), np.float32)
  x[feature] = 1.0
  return out, (x, label)


def gradient_direction(model, params, x_c, y_c) -> Any:
  """The unit vector of the record's loss gradient at `params` (its clipped direction).

  Args:
    model: a dpjax.models.Model.
    params: theta_0 (unbatched).
    x_c: float[F...] the record; y_c: its label.
  Returns:
    pytree like params with a leading axis K = 1 and unit L2 norm.

  Examples:
    >>> import jax, numpy as np
    >>> from dpjax import models
    >>> m = models.logistic_regression(2)
    >>> d = gradient_direction(m, m.init(jax.random.key(0)), np.array([3., 4.]), 1)
    >>> round(float(sum(float((l ** 2).sum()) for l in jax.tree.leaves(d))), 6)
    1.0
  """
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model)
  _check_params(model, params)
  x, y = _check_record(model, params, x_c, y_c)
  g = jax.grad(lambda p: models_lib.per_example_loss(model, p, x, y)[0])(params)
  n = float(jnp.sqrt(sum(jnp.sum(l * l) for l in jax.tree.leaves(g))))
  if not n > 0 or not math.isfinite(n):
    raise ValueError(f"the record's gradient norm is {n}: no direction to project on")
  return jax.tree.map(lambda l: (l / n)[None].astype(jnp.float32), g)


# ----------------------------------------------------------------------------------
# Scores of the final model.


def _dot_K(directions, tree):
  return sum(jnp.tensordot(d.reshape(d.shape[0], -1), l.reshape(-1), axes=1)
             for d, l in zip(jax.tree.leaves(directions), jax.tree.leaves(tree)))


def projection_score(directions) -> Callable:
  """Score fn(theta_T, theta_0) = -<theta_T - theta_0, d_j> for K directions: float[K].

  Training on a canary whose clipped gradient is along d_j moves theta against
  d_j, so the score grows with inclusion. For a Dirac gradient canary C e_j
  trained by SGD at learning rate lr with divisor B, the score is (lr C / B) X
  with X the last-iterate statistic of the module docstring.

  Args:
    directions: pytree like params with a leading axis K (e.g.
      `input_weight_canaries`, `gradient_direction`); any positive scaling of a
      direction gives the same tests.
  Returns:
    a jax-traceable function.

  Examples:
    >>> import jax.numpy as jnp
    >>> fn = projection_score({"w": jnp.array([[1.0, 0.0], [0.0, 2.0]])})
    >>> fn({"w": jnp.array([-1.0, 1.0])}, {"w": jnp.zeros(2)}).tolist()
    [1.0, -2.0]
  """
  leaves = jax.tree.leaves(directions)
  for l in leaves:
    a = np.asarray(l) if not isinstance(l, jax.Array) else l
    if not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)):
      raise TypeError(f"directions must hold real arrays, got dtype {a.dtype}")
    if not np.all(np.isfinite(np.asarray(a, np.float64))):
      raise ValueError("directions must be finite")
  if not leaves or any(jnp.ndim(l) < 1 for l in leaves):
    raise ValueError("directions must be a pytree whose leaves have a leading axis K")
  k = {int(jnp.shape(l)[0]) for l in leaves}
  if len(k) != 1:
    raise ValueError(f"directions' leaves disagree on K: {sorted(k)}")
  directions = jax.tree.map(lambda l: jnp.asarray(l, jnp.float32), directions)

  def score(final, init):
    return -_dot_K(directions, jax.tree.map(lambda a, b: a - b, final, init))
  return score


def loss_score(model, x_c, y_c) -> Callable:
  """Score fn(theta_T, theta_0) = [-loss(theta_T; x_c, y_c)]: float[1] (training on it lowers it).

  Examples:
    >>> import jax, numpy as np
    >>> from dpjax import models
    >>> m = models.logistic_regression(1)
    >>> fn = loss_score(m, np.array([1.0]), 1)
    >>> p = m.init(jax.random.key(0))
    >>> round(float(fn(p, p)[0]), 4)                 # -log 2 at zero weights
    -0.6931
  """
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  models_lib.check_model(model)
  x, y = _check_record(model, None, x_c, y_c)

  def score(final, init):
    del init
    return -models_lib.per_example_loss(model, final, x, y)
  return score


# ----------------------------------------------------------------------------------
# The audit.


class FinalModelAdversary(NamedTuple):
  """One canary and the final-model scores an adversary computes for it.

  Attributes:
    name: a label for the records.
    scores: {score name: fn(theta_T, theta_0) -> float[K]} (higher = IN),
      jax-traceable; each is a separate test on the same trials.
    record: optional (x_c [F...], y_c): a record canary (K = 1).
    gradient_canaries: optional pytree like params with leaves [K, ...]: K
      gradient canaries (each clipped to C and Poisson-sampled by the engine).
      Exactly one of `record` and `gradient_canaries`. Gradient canaries are
      also scored white-box (per-step likelihood ratio) by `audit` when their
      directions have norm C and are mutually orthogonal.
  """
  name: str
  scores: dict
  record: Optional[tuple] = None
  gradient_canaries: Any = None


@dataclasses.dataclass(frozen=True)
class FinalModelAudit:
  """What `audit` measured.

  Attributes:
    audits: {"adversary/score": runner.TrainingAudit} for every final-model score.
    white_box: {adversary name: runner.TrainingAudit} of the gradient canaries'
      per-step likelihood ratio on the same runs and bits.
    claimed_epsilon: cfg.epsilon() (the RDP accountant's).
    exact_epsilon: the PLD accountant's eps of the claimed (q, sigma, T, delta).
    last_iterate_epsilon: `last_iterate_epsilon` of the claim.
    config: the audited DpSgdConfig (sigma resolved).
    params: the R final models theta_T (leaves [R, ...]), canaries included.
  """
  audits: dict
  white_box: dict
  claimed_epsilon: float
  exact_epsilon: float
  last_iterate_epsilon: float
  config: Any
  params: Any = None


def _check_adversaries(adversaries, x_shape, params):
  if not isinstance(adversaries, (list, tuple)) or not adversaries:
    raise TypeError("adversaries must be a non-empty list of FinalModelAdversary")
  names = set()
  p_struct = jax.tree.structure(params)
  for a in adversaries:
    if not isinstance(a, FinalModelAdversary):
      raise TypeError(f"adversaries must hold FinalModelAdversary, got {type(a).__name__}")
    if a.name in names:
      raise ValueError(f"two adversaries named {a.name!r}")
    names.add(a.name)
    if not isinstance(a.scores, dict) or not a.scores:
      raise ValueError(f"adversary {a.name!r}: scores must be a non-empty dict")
    for s, fn in a.scores.items():
      _validate.check_callable(fn, f"adversaries[{a.name!r}].scores[{s!r}]")
    if (a.record is None) == (a.gradient_canaries is None):
      raise ValueError(f"adversary {a.name!r}: give exactly one of record and "
                       "gradient_canaries")
    if a.record is not None:
      if not (isinstance(a.record, tuple) and len(a.record) == 2):
        raise TypeError(f"adversary {a.name!r}: record must be a pair (x_c, y_c)")
      _validate.check_array(a.record[0], f"adversaries[{a.name!r}].record[0]", np.float32,
                            shape=x_shape[1:])
    else:
      if jax.tree.structure(a.gradient_canaries) != p_struct:
        raise ValueError(f"adversary {a.name!r}: gradient_canaries must have the "
                         "structure of the parameters")
      for l, p in zip(jax.tree.leaves(a.gradient_canaries), jax.tree.leaves(params)):
        if tuple(np.shape(l))[1:] != tuple(np.shape(p)) or np.shape(l)[0] < 1:
          raise ValueError(f"adversary {a.name!r}: gradient_canaries leaves must be "
                           "[K, *param.shape]")
        _validate.check_array(np.asarray(l), f"adversaries[{a.name!r}].gradient_canaries",
                              np.float32)


def _num_k(a) -> int:
  return 1 if a.record is not None else int(np.shape(jax.tree.leaves(a.gradient_canaries)[0])[0])


def audit(key, cfg, model, x_NxF, y_N, *, init_params, adversaries, num_runs: int,
          confidence: float = 0.95, white_box: bool = True, progress: bool = True,
          **train_kwargs) -> FinalModelAudit:
  """Final-model audit of DP-SGD (`dpsgd.train_many`) from a fixed, public theta_0.

  Every run trains on all N records plus every adversary's canaries, each
  adversary with its own inclusion bits (`runner.inclusion_bits`, balanced,
  independent across adversaries and canaries). After training, each score
  function sees only (theta_T, theta_0). For an adversary, the other
  adversaries' canaries are part of the rest of the data, the same mixture on
  both sides of its test, so sharing runs is sound. The K trials of a gradient
  adversary are pooled: valid when its canaries' scores are independent given
  the bits (`input_weight_canaries`: disjoint untouched coordinates; otherwise
  give K = 1).

  White-box on the same runs (when `white_box` and an adversary has gradient
  canaries of norm C with orthogonal directions): the privatized update of each
  step, projected on g_j / C and multiplied by B / C, is b_t + sigma z_t plus
  the records' projection (0 for untouched coordinates), scored by
  `canary.white_box_scores`. The white-box bounds use the same one-run coins
  (`seed`) as the adversary's final-model scores, so at q = 1, where the
  likelihood ratio is an increasing function of the final displacement of an
  untouched coordinate, the two views give the same bounds.

  Args:
    key: jax.random key, split into (bits, train, seed) keys.
    cfg: the claimed dpsgd.DpSgdConfig.
    model: a dpjax.models.Model.
    x_NxF, y_N: the private records.
    init_params: theta_0, shared by all runs and known to the adversaries.
    adversaries: list of FinalModelAdversary (distinct names).
    num_runs: R >= 4.
    confidence: of every bound, in (0, 1).
    white_box: also score gradient canaries from the per-step updates.
    progress: progress bars.
    **train_kwargs: other `dpsgd.train_many` keywords (sampler, clipping,
      privatizer, optimizer, perf...): a replaced component is audited
      against the claim.
  Returns:
    FinalModelAudit.
  Raises:
    ValueError / TypeError: bad inputs; runs that diverged.

  Example (tests/final_model_test.py runs it):

      g = input_weight_canaries(model, theta0, unused_features(x), cfg.l2_clip_norm)
      adv = FinalModelAdversary("gradient", {"final": projection_score(g)},
                                gradient_canaries=g)
      a = audit(key, cfg, model, x, y, init_params=theta0, adversaries=[adv], num_runs=64)
      a.audits["gradient/final"].epsilon_lower(), a.white_box["gradient"].epsilon_lower()
  """
  from dpjax import accounting, dpsgd  # pylint: disable=g-import-not-at-top
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  from dpjax.audit import canary as canary_lib  # pylint: disable=g-import-not-at-top
  from dpjax.audit import runner  # pylint: disable=g-import-not-at-top

  key = _validate.check_key(key)
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  models_lib.check_model(model)
  r = _validate.check_int(num_runs, "num_runs", minimum=4)
  confidence = _validate.check_confidence(confidence)
  for bad in ("fixed_gradients", "observe_fn", "init_params", "keep_MxN"):
    if bad in train_kwargs:
      raise ValueError(f"{bad} is set by audit (the canaries and what is observed)")
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32, min_size=1))
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  y = jnp.asarray(_check_labels(model, y_N, "y_N", shape=(x.shape[0],)))
  _check_params(model, init_params, "init_params")
  _check_adversaries(adversaries, x.shape, init_params)
  sigma = float(cfg.noise_multiplier)
  if not sigma > 0:
    raise ValueError("audit needs a noisy configuration (noise_multiplier > 0)")
  q, t, delta, c = (float(cfg.sampling_prob), int(cfg.num_steps), float(cfg.delta),
                    float(cfg.l2_clip_norm))
  claimed = float(cfg.epsilon())
  exact = float(accounting.dpsgd_epsilon(sigma, q, t, delta, accountant="pld"))
  heuristic = last_iterate_epsilon(q, sigma, t, delta)

  k_bits, k_train, k_seed = jax.random.split(key, 3)
  bit_keys = jax.random.split(k_bits, len(adversaries))
  bits = {a.name: runner.inclusion_bits(bk, r, _num_k(a)) for a, bk in
          zip(adversaries, bit_keys)}
  xs, ys, keep = [x], [y], [np.ones((r, x.shape[0]), bool)]
  grads, gkeep, gslices = [], [], {}
  kk = 0
  for a in adversaries:
    if a.record is not None:
      xs.append(jnp.asarray(np.asarray(a.record[0], np.float32))[None])
      ys.append(jnp.asarray(_check_labels(model, np.asarray(a.record[1]).reshape(1),
                                          f"adversaries[{a.name!r}].record[1]"),
                            dtype=y.dtype))
      keep.append(bits[a.name])
    else:
      k = _num_k(a)
      grads.append(a.gradient_canaries)
      gkeep.append(bits[a.name])
      gslices[a.name] = slice(kk, kk + k)
      kk += k
  x_all, y_all = jnp.concatenate(xs, 0), jnp.concatenate(ys, 0)
  keep_all = np.concatenate(keep, axis=1)
  kwargs = dict(train_kwargs)
  kwargs.setdefault("perf", dpsgd.PerformanceFlags(progress=progress))
  observe = None
  unit_dirs = None
  if grads:
    g_all = jax.tree.map(lambda *ls: jnp.concatenate([jnp.asarray(l, jnp.float32)
                                                      for l in ls], 0), *grads)
    kwargs["fixed_gradients"] = dpsgd.FixedGradients(
        g_all, jnp.asarray(np.concatenate(gkeep, axis=1)))
    if white_box:
      unit_dirs = jax.tree.map(lambda l: l / c, g_all)
      observe = _observer(unit_dirs)
      kwargs["observe_fn"] = observe
  out = dpsgd.train_many(k_train, x_all, y_all, jnp.asarray(keep_all), cfg, model,
                         init_params=init_params, **kwargs)
  finite = np.asarray(out.finite)
  if not finite.all():
    raise ValueError(f"{int((~finite).sum())} of {r} audited runs diverged (non-finite "
                     "parameters): lower cfg.learning_rate")
  seeds = [runner.seed_from_key(s) for s in
           jax.random.split(k_seed, 2 * len(adversaries))]
  audits, wb = {}, {}
  for i, a in enumerate(adversaries):
    for sname, fn in a.scores.items():
      s = np.asarray(jax.jit(jax.vmap(fn, in_axes=(0, None)))(out.params, init_params),
                     np.float64).reshape(r, -1)
      if s.shape != bits[a.name].shape:
        raise ValueError(f"adversary {a.name!r} score {sname!r} returned {s.shape[1]} "
                         f"scores per run, expected {bits[a.name].shape[1]}")
      if np.isnan(s).any():
        raise ValueError(f"adversary {a.name!r} score {sname!r} is NaN on some run")
      audits[f"{a.name}/{sname}"] = runner.TrainingAudit(
          s, bits[a.name], runner.bounds_from_trials(
              s, bits[a.name], delta=delta, confidence=confidence, claimed_epsilon=claimed,
              seed=seeds[2 * i]), "independent", delta, confidence, claimed)
    if a.name in gslices and observe is not None and _orthogonal_norm_c(
        a.gradient_canaries, c):
      obs = np.asarray(out.observations, np.float64)[:, :, gslices[a.name]]   # [R, T, K]
      k = obs.shape[2]
      o = canary_lib.normalized_observations(
          np.transpose(obs, (0, 2, 1)).reshape(r * k, -1),
          expected_batch_size=cfg.expected_batch_size, l2_clip_norm=c)
      s = canary_lib.white_box_scores(o, q, sigma).reshape(r, k)
      wb[a.name] = runner.TrainingAudit(
          s, bits[a.name], runner.bounds_from_trials(
              s, bits[a.name], delta=delta, confidence=confidence, claimed_epsilon=claimed,
              seed=seeds[2 * i]), "independent", delta, confidence, claimed)
  return FinalModelAudit(audits, wb, claimed, exact, heuristic, cfg, out.params)


_OBSERVERS: dict = {}


def _observer(unit_dirs):
  """observe_fn projecting an update on K unit directions: float[K].

  One function object per distinct set of directions (keyed by their bytes), so
  that `dpsgd.train_many` reuses its compiled program across audits with the
  same canaries (e.g. the same Dirac coordinates from another theta_0).
  """
  import hashlib  # pylint: disable=g-import-not-at-top
  leaves = [np.asarray(l, np.float32) for l in jax.tree.leaves(unit_dirs)]
  h = hashlib.sha256(str(jax.tree.structure(unit_dirs)).encode())
  for l in leaves:
    h.update(str(l.shape).encode())
    h.update(l.tobytes())
  fp = h.hexdigest()
  if fp not in _OBSERVERS:
    if len(_OBSERVERS) >= 32:
      _OBSERVERS.clear()
    dirs = jax.tree.map(jnp.asarray, unit_dirs)

    def observe(update):
      return _dot_K(dirs, update)
    _OBSERVERS[fp] = observe
  return _OBSERVERS[fp]


def _orthogonal_norm_c(g, c: float) -> bool:
  """Whether the K canaries have norm C and pairwise orthogonal directions."""
  flat = np.concatenate([np.asarray(l, np.float64).reshape(np.shape(l)[0], -1)
                         for l in jax.tree.leaves(g)], axis=1)
  gram = flat @ flat.T
  return bool(np.allclose(gram, c * c * np.eye(flat.shape[0]), rtol=1e-5, atol=1e-6 * c * c))
