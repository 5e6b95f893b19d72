"""Batch selection for DP-SGD: which records take part in each step.

A sampler's `batch_mask(key, step, keep_N)` is the bool [N] membership of step `step`'s
batch among the records a model holds. Its `sampling_prob` is the q the accountant is
given; `accounted` is True only when dpjax's RDP / PLD accountants model it (Poisson
sampling): the engine warns (`dpsgd.UnaccountedComponentWarning`) on an unaccounted
sampler, refuses an accounted one whose q differs from the configuration's, and refuses
any whose `privacy_unit` ("example", the default, or "user") is not the config's.
Any object with these members can be passed as `dpsgd.train_many(..., sampler=...)`.

`PoissonSampler` is what DP-SGD's analysis assumes (Abadi et al. 2016).
`ShuffleSampler` (fixed-size batches from a per-epoch shuffle) is NOT covered by
those accountants (Chua et al. 2024, "How private are DP-SGD implementations?"); it
exists for audits. `CyclicSampler` (fixed batches in a fixed cycle, no amplification) and
`CyclicPoissonSampler` (Poisson batches from one of s bins per step, amplified) are the
participation patterns of matrix-factorization training. `UserPoissonSampler` samples
users (McMahan et al. 2018, https://arxiv.org/abs/1710.06963). Step t draws its mask from
`prng.fold_in(key, t)` (`CyclicSampler`: one permutation from `key`).

Shape letters: N records, U users.

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
import math
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np

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
    sampling_prob: q in (0, 1]. The realised rate floor(q 2^w) / 2^w for the mask's bit
      width w (`prng.poisson_mask`) is never above q, so accounting at q is conservative.
  Privacy: the sampler the RDP / PLD accountants model (add/remove-one neighbours).
  """
  sampling_prob: float
  accounted: ClassVar[bool] = True
  privacy_unit: ClassVar[str] = "example"

  def __post_init__(self):
    _validate.check_sampling_prob(self.sampling_prob)

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: `prng.poisson_mask(prng.fold_in(key, step), q, N) & keep_N` (keep_N when q = 1)."""
    q = float(self.sampling_prob)
    if q >= 1.0:
      return keep_N
    return prng.poisson_mask(prng.fold_in(key, step), q, keep_N.shape[0]) & keep_N


# The truncation's ranking keys come from prng.fold_in(key, _SELECT_STREAM), a stream of
# the sampler key that no step t < 2^32 - 1 (fold_in(key, t): the Poisson bits) can reach.
_SELECT_STREAM = 2 ** 32 - 1
# Candidates beyond B that the first pass of `truncate_mask` keeps (module docstring there).
_CANDIDATE_MARGIN = 16


def truncate_mask(key: jax.Array, mask_N: jax.Array, max_batch_size: int) -> jax.Array:
  """A uniformly random subset of exactly B = max_batch_size of the records in mask_N when
  it holds more than B, else mask_N itself (bit for bit): bool[N].

  Each record gets a 64-bit key (words i and N + i of `prng.random_bits(key, 2N)`); the B
  sampled records with the smallest (first word, second word) are kept, ties by index.
  Given distinct keys the ranking of the sampled records is a uniformly random permutation,
  so the kept set is a uniform B-subset. Two passes: `lax.top_k` of the first words' top
  31 bits picks B + 16 candidates (ties by index), which are sorted by the full key. The
  result is the full ranking's unless 18 sampled records share those 31 bits. So the law
  is within C(count, 2) 2^-64 + C(count, 18) 2^-527 of uniform in total variation
  (`selection_tv_bound`). Cost: O(N) bits and a top-k over N, a sort of B + 16.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> m = jnp.array([1, 1, 0, 1, 1], bool)
    >>> out = truncate_mask(jax.random.key(0), m, 3)
    >>> int(out.sum()), bool(jnp.all(out <= m))
    (3, True)
    >>> bool(jnp.all(truncate_mask(jax.random.key(0), m, 4) == m))
    True
  """
  b = _validate.check_int(max_batch_size, "max_batch_size", 1, 2 ** 31 - 1)
  if not _validate.is_tracer(mask_N):
    mask_N = jnp.asarray(_validate.check_binary(mask_N, "mask_N", ndim=1), bool)
  elif mask_N.ndim != 1 or mask_N.dtype != jnp.bool_:
    raise ValueError(f"mask_N must be bool[N], got {mask_N.dtype}{list(mask_N.shape)}")
  n = mask_N.shape[0]
  if n < 1:
    raise ValueError("mask_N must hold at least one record")
  if b >= n:
    return mask_N        # at most N <= B records can be drawn: never cut
  # 2 words, the top-k score and index, the bool: 17 bytes a record.
  _validate.check_size(n, "mask_N (N)", bytes_per_unit=17)
  words = prng.random_bits(key, 2 * n)
  first, second = words[:n], words[n:]
  # Pass 1: the m sampled records of largest 2^31 - 1 - (first >> 1), i.e. smallest first
  # words (unsampled -1, below every sampled score).
  score = jnp.where(mask_N, (jnp.uint32(2 ** 31 - 1) - (first >> 1)).astype(jnp.int32), -1)
  _, cand = jax.lax.top_k(score, min(n, b + _CANDIDATE_MARGIN))
  # Pass 2: the exact 64-bit order among the candidates (sampled ones first).
  _, _, _, order = jax.lax.sort(((~mask_N[cand]).astype(jnp.uint32), first[cand],
                                 second[cand], cand.astype(jnp.int32)), num_keys=3)
  kept = jnp.zeros((n,), bool).at[order[:b]].set(True) & mask_N
  return jnp.where(jnp.sum(mask_N, dtype=jnp.int32) > b, kept, mask_N)


def selection_tv_bound(dataset_size: int, sampling_prob: float, num_steps: int) -> float:
  """An upper bound on the total variation between T truncations (`truncate_mask`) and
  exactly uniform ones: T (E[C(count, 2)] 2^-64 + E[C(count, 18)] 2^-527) with count ~
  Binomial(n + 1, q) (a dataset of n records or its neighbour by addition), E[C(count, k)]
  = C(n + 1, k) q^k.

  Privacy: a run whose every step is within tau of the accounted mechanism in total
  variation is (eps, delta + tau (1 + e^eps))-DP when the accounted one is (eps, delta).

  Examples:
    >>> selection_tv_bound(60_000, 256 / 60_000, 10_000) < 1e-10
    True
  """
  n = _validate.check_int(dataset_size, "dataset_size", maximum=2 ** 53)
  q = _validate.check_sampling_prob(sampling_prob)
  t = _validate.check_int(num_steps, "num_steps", maximum=2 ** 53)

  def log_pairs(k, bits):   # log(C(n + 1, k) q^k 2^-bits), -inf when n + 1 < k
    if n + 1 < k:
      return -math.inf
    return (math.lgamma(n + 2) - math.lgamma(k + 1) - math.lgamma(n + 2 - k)
            + k * math.log(q) - bits * math.log(2.0))
  per_step = sum(math.exp(min(0.0, log_pairs(k, bits))) for k, bits in ((2, 64), (18, 527)))
  return float(min(1.0, t * per_step))


@dataclasses.dataclass(frozen=True)
class TruncatedPoissonSampler:
  """Poisson sampling capped at B records: `PoissonSampler(q)`'s mask (the same bits), then,
  when it holds more than B = max_batch_size records, a uniformly random subset of exactly B
  of them (`truncate_mask`, keyed by fold_in(fold_in(key, 2^32 - 1), t)).

  Attributes:
    sampling_prob: q in (0, 1]. max_batch_size: B >= 1 (int32).
  Privacy: the mechanism of `accounting.truncated_sampling` (add/remove-one), for a dataset
    of `DpSgdConfig.dataset_size` = n records and its neighbours (n - 1 or n + 1 records);
    the engine trains with it when `DpSgdConfig.max_batch_size` is set. Steps where at most
    B records are drawn are bit for bit `PoissonSampler(q)`'s.
  Warning: the accountant's bound depends on n; a model holding another number of records
    is not covered by `DpSgdConfig.epsilon()` (the engine warns). The realised batch (at
    most B) is not released: the denominator stays the public q n.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> s = TruncatedPoissonSampler(0.5, 2)
    >>> int(s.batch_mask(jax.random.key(0), 3, jnp.ones((8,), bool)).sum()) <= 2
    True
  """
  sampling_prob: float
  max_batch_size: int
  accounted: ClassVar[bool] = True
  privacy_unit: ClassVar[str] = "example"

  def __post_init__(self):
    object.__setattr__(self, "sampling_prob",
                       float(_validate.check_sampling_prob(self.sampling_prob)))
    object.__setattr__(self, "max_batch_size", _validate.check_int(
        self.max_batch_size, "max_batch_size", 1, 2 ** 31 - 1))

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: `truncate_mask(fold_in(fold_in(key, 2^32 - 1), step), Poisson mask, B)`."""
    mask = PoissonSampler(self.sampling_prob).batch_mask(key, step, keep_N)
    k_select = prng.fold_in(prng.fold_in(key, _SELECT_STREAM), step)
    return truncate_mask(k_select, mask, self.max_batch_size)


def _canonical_fixed_batches(sampler) -> None:
  """Checks a fixed-batch sampler's (batch_size, steps_per_epoch, sampling_prob) and stores
  their canonical values (int, int, float) on the frozen instance."""
  for name in ("batch_size", "steps_per_epoch"):
    object.__setattr__(sampler, name, _validate.check_int(getattr(sampler, name), name))
  object.__setattr__(sampler, "sampling_prob",
                     float(_validate.check_sampling_prob(sampler.sampling_prob)))


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
  privacy_unit: ClassVar[str] = "example"

  def __post_init__(self):
    _canonical_fixed_batches(self)

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


@dataclasses.dataclass(frozen=True)
class CyclicSampler:
  """Fixed batches in a fixed cycle: record i is in batch floor(pi(i) / B), every epoch.

  pi is one uniformly random permutation of the N record slots, drawn from the sampler
  key (`jax.random.permutation(key, N)`, the same at every step); step t uses batch
  j = t mod E. A record whose slot is below E * B takes part at steps j, j + E, j + 2E,
  ...: at most k = ceil(T / E) times, consecutive ones exactly E steps apart
  (`participation`); slots from E * B on never take part. The assignment of a record
  does not depend on which other records are kept, so removing one record only removes
  its own terms from its own batches.

  Attributes:
    batch_size: B >= 1 slots per batch (a batch holds fewer records where slots are not
      kept). steps_per_epoch: E >= 1. sampling_prob: B / n, the rate of the fixed
      denominator q n.
  Privacy: no amplification. NOT the DP-SGD accountants' model (`accounted` is False);
    with `privatizer.CorrelatedNoisePrivatizer` the run is the Gaussian mechanism with
    the strategy's sensitivity under (k, E) (`CorrelatedNoisePrivatizer.epsilon`).
  """
  batch_size: int
  steps_per_epoch: int
  sampling_prob: float
  accounted: ClassVar[bool] = False
  privacy_unit: ClassVar[str] = "example"

  def __post_init__(self):
    _canonical_fixed_batches(self)

  @classmethod
  def for_dataset(cls, dataset_size: int, batch_size: int) -> "CyclicSampler":
    """E = floor(n / B) batches of B slots (n - E B records never take part), q = B / n."""
    n = _validate.check_int(dataset_size, "dataset_size")
    b = _validate.check_int(batch_size, "batch_size", 1, n)
    return cls(batch_size=b, steps_per_epoch=n // b, sampling_prob=b / n)

  def participation(self, num_steps: int) -> tuple[int, int]:
    """(k, sep) = (ceil(T / E), E) clipped to k <= T: the most participations of one record
    in T steps and the exact gap between consecutive ones."""
    t = _validate.check_int(num_steps, "num_steps")
    e = self.steps_per_epoch
    return min(-(-t // e), t), min(e, t)

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: slots pi(i) in [j B, (j + 1) B), j = step mod E, and kept."""
    slot = jax.random.permutation(key, keep_N.shape[0])
    j = step % self.steps_per_epoch
    b = self.batch_size
    return (slot >= j * b) & (slot < (j + 1) * b) & keep_N


@dataclasses.dataclass(frozen=True)
class CyclicPoissonSampler:
  """Cyclic Poisson sampling (b-min-separation): Poisson batches from one bin per step.

  Record i (its slot in the data) is in bin i mod s: a fixed partition that does not
  depend on the data, so removing a record removes only its own terms (shuffle the data
  once beforehand if its order means something: the guarantee needs no randomness in the
  bins, as it holds for the worst bin, and a fixed partition costs nothing per step).
  Step t takes each
  kept record of bin t mod s independently with probability p
  (`prng.poisson_mask(prng.fold_in(key, t), p, N)`). A record therefore takes part only
  at the steps of its residue class, each independently with probability p: at most
  k = ceil(T / s) times, consecutive participations at least s steps apart.

  Attributes:
    bin_prob: p in (0, 1], the Poisson rate within the active bin.
    cycle_length: s >= 1 bins (the minimum separation); s = 1 is `PoissonSampler(p)`'s
      law (its masks are drawn from the same bits).
    sampling_prob: p / s (derived), the rate of the fixed denominator q n (the expected
      batch holds p n / s records).
  Privacy: NOT the DP-SGD accountants' model (`accounted` is False). With
    `privatizer.CorrelatedNoisePrivatizer` whose strategy has at most s bands, the run
    is amplified (`matrix_factorization.amplified_event`, Choquette-Choo et al. 2023,
    https://arxiv.org/abs/2306.08153); the engine states that eps.
  """
  bin_prob: float
  cycle_length: int
  sampling_prob: float = dataclasses.field(init=False)
  accounted: ClassVar[bool] = False
  privacy_unit: ClassVar[str] = "example"

  def __post_init__(self):
    p = float(_validate.check_sampling_prob(self.bin_prob, "bin_prob"))
    s = _validate.check_int(self.cycle_length, "cycle_length")
    object.__setattr__(self, "bin_prob", p)
    object.__setattr__(self, "cycle_length", s)
    object.__setattr__(self, "sampling_prob", p / s)

  def participation(self, num_steps: int) -> tuple[int, int]:
    """(k, sep) = (ceil(T / s), s) clipped to k <= T: the most participations of one
    record in T steps and the least gap between consecutive ones."""
    t = _validate.check_int(num_steps, "num_steps")
    s = self.cycle_length
    return min(-(-t // s), t), min(s, t)

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: kept records of bin (step mod s), each with probability p."""
    n = keep_N.shape[0]
    in_bin = keep_N
    if self.cycle_length > 1:
      in_bin = (jnp.arange(n) % self.cycle_length == step % self.cycle_length) & keep_N
    if self.bin_prob >= 1.0:
      return in_bin
    return prng.poisson_mask(prng.fold_in(key, step), self.bin_prob, n) & in_bin


# The default capacity leaves the sampled count above it with probability at most
# _OVERFLOW_PROB per step for the largest of the models trained together.
_OVERFLOW_PROB = 0.025


def default_batch_capacity(num_records: int, sampling_prob: float,
                           num_models: int = 1) -> int:
  """K, the rows of one padded batch buffer (`dpsgd.PerformanceFlags(batch_capacity=...)`).

  The smallest multiple of 8 that is at least the (1 - 0.025 / M) quantile of
  Binomial(n, q), and at most n: the largest of M models' Poisson counts exceeds K with
  probability at most about 0.025 per step. An overflowing step is processed in further
  buffers of K rows, never truncated, so K is a cost parameter, not a privacy one (a cap
  that is accounted is `DpSgdConfig.max_batch_size`: `TruncatedPoissonSampler`).

  n = num_records >= 1, q = sampling_prob in (0, 1], M = num_models >= 1; K in [1, n].

  Examples:
    >>> default_batch_capacity(60_000, 256 / 60_000)
    288
    >>> default_batch_capacity(100, 1.0)
    100
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
  m = _validate.check_int(num_models, "num_models")
  # The engine holds an M x n membership mask (one byte per entry): a count whose
  # mask cannot exist is refused here (Boost's binomial quantile search never
  # returns for n near 2^63, and is NaN from 2^53).
  n = _validate.check_size(num_records, "num_records", bytes_per_unit=1, units=m,
                           units_name="num_models")
  q = _validate.check_sampling_prob(sampling_prob)
  if q >= 1.0:
    return n
  quantile = float(stats.binom.ppf(1.0 - _OVERFLOW_PROB / m, n, q))
  if not math.isfinite(quantile):
    raise ValueError(f"num_records = {n} with sampling_prob = {q!r}: the binomial quantile "
                     "is not computable in float64")
  quantile = int(quantile)
  return int(min(n, max(8, -(-quantile // 8) * 8)))


def padded_batch(mask_N: jax.Array, capacity: int, chunk: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
  """Chunk `chunk` of a batch mask, gathered into a static buffer of K rows.

  The sampled records, in index order, are cut into chunks of K = `capacity`; chunk j
  holds those of rank jK, ..., jK + K - 1. The engine processes chunks 0, 1, ... until
  every sampled record is done, so a batch larger than K is split, never cut.

  Returns (index_K int32[K], valid_K bool[K]) for mask_N bool[N] and chunk j (may be
  traced): row r is record index_K[r] when valid_K[r]; padding rows have index N - 1 (a
  gather stays in bounds) and must get weight 0.

  Examples:
    >>> import jax.numpy as jnp
    >>> idx, ok = padded_batch(jnp.array([0, 1, 1, 0, 1], bool), 2, 1)
    >>> idx.tolist(), ok.tolist()
    ([4, 4], [True, False])
  """
  # int32 ranks, indices and their clipped copy, the bool validity: 16 bytes a row at most.
  k = _validate.check_size(_validate.check_int(capacity, "capacity", 1, 2**31 - 1), "capacity",
                          bytes_per_unit=16)
  if not _validate.is_tracer(mask_N):
    mask_N = jnp.asarray(_validate.check_binary(mask_N, "mask_N", ndim=1), bool)
  elif mask_N.ndim != 1 or mask_N.dtype != jnp.bool_:
    raise ValueError(f"mask_N must be bool[N], got {mask_N.dtype}{list(mask_N.shape)}")
  if not _validate.is_tracer(chunk):
    chunk = _validate.check_int(chunk, "chunk", 0, (2**31 - 1) // k - 1)   # int32 ranks
  n = mask_N.shape[0]
  if n < 1:
    raise ValueError("mask_N must hold at least one record")
  # The mask as W = ceil(N / 32) words (bit b of word w: record 32 w + b) and the number of
  # sampled records in words 0..w, `through_W` (nondecreasing): the record of rank r
  # (1-based) lies in the first word whose count reaches r (a binary search per row over W,
  # not N) and is that word's (r - count before it)-th set bit, found by halving the word
  # 5 times (popcounts). Prefix sums over N / 32 words instead of all N records.
  num_words = -(-n // 32)
  bits = jnp.pad(mask_N, (0, 32 * num_words - n)).reshape(num_words, 32).astype(jnp.uint32)
  words = jnp.sum(bits << jnp.arange(32, dtype=jnp.uint32)[None], axis=1, dtype=jnp.uint32)
  count_W = jax.lax.population_count(words).astype(jnp.int32)
  through_W = jnp.cumsum(count_W)
  ranks = chunk * k + jnp.arange(1, k + 1, dtype=jnp.int32)
  word = jnp.searchsorted(through_W, ranks, side="left").astype(jnp.int32)
  valid = word < num_words     # rank beyond the batch: searchsorted returns W
  word = jnp.minimum(word, num_words - 1)
  rank = ranks - (through_W[word] - count_W[word])   # 1-based rank inside the word
  w = words[word]
  pos = jnp.zeros((k,), jnp.uint32)
  for width in (16, 8, 4, 2, 1):
    low = jax.lax.population_count((w >> pos) & jnp.uint32(2 ** width - 1)).astype(jnp.int32)
    above = rank > low
    rank = jnp.where(above, rank - low, rank)
    pos = jnp.where(above, pos + jnp.uint32(width), pos)
  index = word.astype(jnp.uint32) * jnp.uint32(32) + pos   # < N where valid (uint32: no wrap)
  return jnp.where(valid, index, jnp.uint32(n - 1)).astype(jnp.int32), valid


# User ids are int32 inside the engine: more users would wrap to negative ids.
_MAX_USERS = 2 ** 31 - 1


def check_user_ids(user_ids_N, num_users: int, name: str = "user_ids_N",
                   num_records: int | None = None) -> np.ndarray:
  """Validates a per-record user id array; returns it as int32[N] (host NumPy).

  Record i belongs to user user_ids_N[i] in [0, U), U = num_users in [1, 2^31 - 1];
  num_records, if given, is the required N. Raises ValueError naming `name` for a wrong
  rank or length, non-integer values or an id outside [0, U); TypeError if traced.
  """
  u = _validate.check_int(num_users, "num_users", 1, _MAX_USERS)
  if num_records is not None:
    num_records = _validate.check_int(num_records, "num_records", 0)
  if _validate.is_tracer(user_ids_N):
    raise TypeError(f"{name} must be a concrete array (user ids fix the sampling and "
                    "clipping units), not a traced value")
  ids = np.asarray(user_ids_N)
  if ids.ndim != 1:
    raise ValueError(f"{name} must be a 1-D array of user ids, got shape {ids.shape}")
  if num_records is not None and ids.shape[0] != num_records:
    raise ValueError(f"{name} must have one id per record, length num_records = "
                     f"{num_records}, got length {ids.shape[0]}")
  if ids.shape[0] < 1:
    raise ValueError(f"{name} must hold at least one id, got an empty array")
  if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
    raise ValueError(f"{name} must hold integer user ids, got dtype {ids.dtype}")
  lo, hi = ids.min(), ids.max()
  if lo < 0 or hi >= u:
    bad = int(np.argmax((ids < 0) | (ids >= u)))
    raise ValueError(f"{name} must hold ids in [0, num_users = {u}), got "
                     f"{name}[{bad}] = {int(ids[bad])}")
  return ids.astype(np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class UserPoissonSampler:
  """User-level Poisson sampling: each user in the batch independently with rate q.

  Step t draws one bit per user, `prng.poisson_mask(prng.fold_in(key, t), q, U)`; a
  record is in the batch iff its user's bit is set and the model keeps it, so a user's
  kept records are in or out together.

  q = sampling_prob in (0, 1] is the rate per USER; user_ids_N: int[N] ids in [0, U);
  num_users: U >= 1 (the configuration's dataset_size under privacy_unit "user").
  Instances compare by identity, so one object reuses one compiled program.

  Privacy: with `dpjax.clipping.user.user_level_path` (each user's summed gradient
  clipped to C) the accountant's (q, sigma, T) analysis holds for add/remove-one-user
  neighbours (McMahan et al. 2018).

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> s = UserPoissonSampler(0.5, [0, 0, 1, 2, 2, 2], 3)
    >>> m = s.batch_mask(jax.random.key(0), 0, jnp.ones((6,), bool))
    >>> bool(m[0] == m[1]) and bool(m[3] == m[4] == m[5])
    True
  """
  sampling_prob: float
  user_ids_N: Any
  num_users: int
  accounted: ClassVar[bool] = True
  privacy_unit: ClassVar[str] = "user"

  def __post_init__(self):
    _validate.check_sampling_prob(self.sampling_prob)
    u = _validate.check_int(self.num_users, "num_users", 1, _MAX_USERS)
    ids = check_user_ids(self.user_ids_N, u)
    ids.setflags(write=False)
    object.__setattr__(self, "num_users", u)
    object.__setattr__(self, "user_ids_N", ids)

  def batch_mask(self, key: jax.Array, step: jax.Array, keep_N: jax.Array) -> jax.Array:
    """bool[N]: `poisson_mask(fold_in(key, step), q, U)[user_ids_N] & keep_N` (keep_N when q = 1)."""
    if keep_N.shape != self.user_ids_N.shape:
      raise ValueError(f"keep_N must have shape {self.user_ids_N.shape} (one entry per "
                       f"record of user_ids_N), got {keep_N.shape}")
    q = float(self.sampling_prob)
    if q >= 1.0:
      return keep_N
    users = prng.poisson_mask(prng.fold_in(key, step), q, self.num_users)
    return users[jnp.asarray(self.user_ids_N)] & keep_N

  def user_mask(self, key: jax.Array, step: jax.Array) -> jax.Array:
    """bool[U]: which users are in step `step`'s batch (before the records' keep mask)."""
    q = float(self.sampling_prob)
    if q >= 1.0:
      return jnp.ones((self.num_users,), bool)
    return prng.poisson_mask(prng.fold_in(key, step), q, self.num_users)


def check_sampler(sampler, sampling_prob: float, max_batch_size: int | None = None) -> None:
  """Checks a sampler against the configuration the accountant is told.

  max_batch_size: None (untruncated Poisson accounting) or the B of truncated accounting.
  Raises:
    TypeError: if `sampler` lacks `batch_mask`, `sampling_prob` or `accounted`.
    ValueError: if an accounted sampler's q differs from `sampling_prob`; if
      max_batch_size is set and the sampler is not an accounted one that truncates to that
      B (`TruncatedPoissonSampler`); if the sampler truncates (a `max_batch_size` member
      that is not None) and max_batch_size is None.
  """
  for attr in ("batch_mask", "sampling_prob", "accounted"):
    if not hasattr(sampler, attr):
      raise TypeError(f"sampler must have a {attr!r} member (see dpjax.sampling), "
                      f"got {type(sampler).__name__}")
  sampling_prob = _validate.check_sampling_prob(sampling_prob)
  if sampler.accounted and float(sampler.sampling_prob) != sampling_prob:
    raise ValueError(f"sampler.sampling_prob = {sampler.sampling_prob} but the config's "
                     f"sampling_prob = {sampling_prob}: the accountant would be told another q")
  cap = getattr(sampler, "max_batch_size", None)
  if max_batch_size is None:
    if cap is not None:
      raise ValueError(f"the sampler truncates batches to max_batch_size = {cap} records but "
                       "the config's max_batch_size is None: the accountant would be told "
                       "untruncated Poisson sampling; use DpSgdConfig(max_batch_size="
                       f"{cap}) and its sampler()")
    return
  b = _validate.check_int(max_batch_size, "max_batch_size", 1, 2 ** 31 - 1)
  if not sampler.accounted or cap is None or int(cap) != b:
    raise ValueError(f"the config's max_batch_size = {b} (truncated Poisson sampling) is "
                     "accounted only with sampling.TruncatedPoissonSampler(q, "
                     f"max_batch_size={b}) (cfg.sampler()); got {type(sampler).__name__} "
                     f"(max_batch_size {cap}), whose batches the truncated accountant does "
                     "not model")
