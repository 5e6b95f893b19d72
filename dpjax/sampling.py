"""Batch selection for DP-SGD: which records take part in each step.

A sampler is a small strategy object with one job, `batch_mask(key, step, keep_N)`:
the boolean [N] membership of step `step`'s batch among the records a model holds
(`keep_N`). It also declares what the privacy accountant must be told about it:

* `sampling_prob`: the q the accountant is given;
* `accounted`: True only when dpjax's RDP / PLD accountants model this sampler
  (Poisson sampling: every record in independently with probability q). The engine
  warns (`dpsgd.UnaccountedComponentWarning`) whenever it trains with a sampler
  whose `accounted` is False, and refuses an accounted sampler whose q differs from
  the configuration's.

`PoissonSampler` is what DP-SGD's analysis assumes (Abadi et al. 2016; the
accountants of `dpjax.accounting`). `ShuffleSampler` is the common shortcut of
fixed-size batches from a per-epoch shuffle, which those accountants do NOT cover
(Chua et al. 2024, "How private are DP-SGD implementations?"): it exists so that
audits can show the difference. A user's own sampler is any object with the same
three members, passed to `dpsgd.train_many(..., sampler=...)`.

Randomness: step t of a Poisson sampler draws its mask from `prng.fold_in(key, t)`,
so the stream of a model depends only on its key and the step.

Shape letters: N records.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> s = PoissonSampler(0.5)
  >>> s.batch_mask(jax.random.key(0), 3, jnp.ones((6,), bool)).shape
  (6,)
  >>> s.accounted, s.sampling_prob
  (True, 0.5)
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Protocol

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax import prng


class Sampler(Protocol):
  """The interface the engine calls (see the module docstring)."""

  sampling_prob: float
  accounted: bool

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: which records are in step `step`'s batch (a subset of keep_N)."""


@dataclasses.dataclass(frozen=True)
class PoissonSampler:
  """Poisson sampling: each kept record is in the batch independently with rate q.

  Attributes:
    sampling_prob: q in (0, 1]. The realised rate is floor(q 2^w) / 2^w for the
      mask's bit width w (`prng.poisson_mask`), never above q, so telling the
      accountant q is conservative.
  Privacy: this is the sampler the RDP / PLD accountants model
    (add/remove-one neighbours).
  """
  sampling_prob: float
  accounted: ClassVar[bool] = True

  def __post_init__(self):
    _validate.check_sampling_prob(self.sampling_prob)

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: `prng.poisson_mask(prng.fold_in(key, step), q, N) & keep_N` (keep_N when q = 1)."""
    q = float(self.sampling_prob)
    if q >= 1.0:
      return keep_N
    return prng.poisson_mask(prng.fold_in(key, step), q, keep_N.shape[0]) & keep_N


@dataclasses.dataclass(frozen=True)
class ShuffleSampler:
  """Fixed-size batches: batch (t mod E) of a fresh shuffle of the kept records each epoch.

  Attributes:
    batch_size: records per batch, >= 1.
    steps_per_epoch: E >= 1 batches per shuffle.
    sampling_prob: the rate it is (wrongly) accounted as, batch_size / dataset_size.
  Warning: NOT covered by the RDP / PLD accountants, which assume Poisson sampling;
    `accounted` is False, so training with it warns. Its last batch of an epoch may
    be short, and records beyond E * batch_size of a shuffle are skipped that epoch.
  """
  batch_size: int
  steps_per_epoch: int
  sampling_prob: float
  accounted: ClassVar[bool] = False

  def __post_init__(self):
    _validate.check_int(self.batch_size, "batch_size")
    _validate.check_int(self.steps_per_epoch, "steps_per_epoch")
    _validate.check_sampling_prob(self.sampling_prob)

  @classmethod
  def like_poisson(cls, sampling_prob: float, dataset_size: int) -> "ShuffleSampler":
    """Batches of max(1, round(q n)) records, floor(n / batch) of them per epoch."""
    q = _validate.check_sampling_prob(sampling_prob)
    n = _validate.check_int(dataset_size, "dataset_size")
    b = max(1, int(round(q * n)))
    return cls(batch_size=b, steps_per_epoch=max(1, n // b), sampling_prob=q)

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: the kept records ranked [j B, (j + 1) B) in epoch e's shuffle, t = e E + j."""
    epoch = step // self.steps_per_epoch
    j = step % self.steps_per_epoch
    u = jax.random.uniform(jax.random.fold_in(key, epoch), keep_N.shape)
    u = jnp.where(keep_N, u, 2.0)
    rank = jnp.argsort(jnp.argsort(u))
    b = self.batch_size
    return (rank >= j * b) & (rank < (j + 1) * b) & keep_N


def check_sampler(sampler, sampling_prob: float) -> None:
  """Checks a sampler against the configuration the accountant is told.

  Raises:
    TypeError: if `sampler` lacks `batch_mask`, `sampling_prob` or `accounted`.
    ValueError: if an accounted sampler's q differs from `sampling_prob`.
  """
  for attr in ("batch_mask", "sampling_prob", "accounted"):
    if not hasattr(sampler, attr):
      raise TypeError(f"sampler must have a {attr!r} member (see dpjax.sampling), "
                      f"got {type(sampler).__name__}")
  if sampler.accounted and float(sampler.sampling_prob) != float(sampling_prob):
    raise ValueError(f"sampler.sampling_prob = {sampler.sampling_prob} but the config's "
                     f"sampling_prob = {sampling_prob}: the accountant would be told another q")
