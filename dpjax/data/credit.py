"""The synthetic credit world of the lecture: applicants, true repayment odds, two groups.

Five raw features and a label per applicant (group g; share of group 1 = `minority_share`):

  0 income      k$, log(income) ~ N(ln 55 - 0.12 g, 0.45^2), clipped to [8, 400]
  1 debt_ratio  Beta(2, 5) (mean 0.29)
  2 history     years: g = 0: 1 + Gamma(2.2, 4.5); g = 1 ("thin file"): 0.5 + Gamma(1.5, 2.0);
                clipped at 40
  3 delinquent  Bernoulli(sigmoid(0.2 + 3 (debt_ratio - 0.29) - 0.6 log(income / 55)))
  4 group       0 (majority) or 1 (minority)
  label repaid  Bernoulli(p), logit p = 1.4 + 1.8 log(income/55) - 5.0 (debt_ratio - 0.29)
                - 2.2 delinquent + h_g(history), h_0(t) = 0.16 (t - 11),
                h_1(t) = -0.5 - 0.2 (t - 3.5)

p is known, so the Bayes accuracy is computable; a model without the group cannot
represent h_1. `sample_split` cuts one draw into disjoint parts (public, private, test ...);
`sample_linear_split` gives each part as features; `sample_customers` draws customers with
several loans, `sample_customer_splits` splits them by a public id rule. `PublicScaler` is
fit on a PUBLIC sample; `linear_features` gives [1, z] (6 columns), `cubic_features` all
monomials of degree <= 3 (56 columns) at unit public RMS.

Shape letters: N people, F = 5 raw features, D model features.

Examples:
  >>> import jax
  >>> k_pub, k_priv = jax.random.split(jax.random.key(0))
  >>> scaler = PublicScaler.fit(sample(k_pub, 2000).x_NxF)
  >>> data = sample(k_priv, 500)
  >>> cubic_features(data.x_NxF, scaler).shape
  (500, 56)
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

FEATURE_NAMES = ("income", "debt_ratio", "history", "delinquent", "group")
NUM_FEATURES = len(FEATURE_NAMES)
# Central values used by the generative model (also the canary's reference point).
_INCOME_MEDIAN = 55.0
_DEBT_MEAN = 2.0 / 7.0


class CreditData(NamedTuple):
  """A sample of applicants: x_NxF float32[N, 5] (FEATURE_NAMES), y_N int32[N] (1 = repaid),
  p_N float32[N] the true repayment probability.
  """
  x_NxF: jax.Array
  y_N: jax.Array
  p_N: jax.Array

  @property
  def group_N(self) -> jax.Array:
    return self.x_NxF[:, 4].astype(jnp.int32)

  def __len__(self) -> int:
    return int(self.y_N.shape[0])


def true_logit(x_NxF: jax.Array) -> jax.Array:
  """The world's true log-odds of repayment for raw features x_NxF: float32[N]."""
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32,
                                        shape=(None, NUM_FEATURES), min_size=1))
  income, debt, hist, delinq, group = (x[:, i] for i in range(5))
  h0 = 0.16 * (hist - 11.0)
  h1 = -0.5 - 0.2 * (hist - 3.5)
  return (1.4 + 1.8 * jnp.log(income / _INCOME_MEDIAN) - 5.0 * (debt - _DEBT_MEAN)
          - 2.2 * delinq + jnp.where(group > 0.5, h1, h0))


def sample(key: jax.Array, n: int, minority_share: float = 0.1) -> CreditData:
  """Draws `n` >= 1 applicants from the credit world.

  Person i depends only on (key, i) (jax_threefry_partitionable, the default): a prefix
  of a larger draw. Draws n rounded up to a power of two >= 2,048 (n <= 2**22).
  """
  n = _validate.check_size(n, "n", units=NUM_FEATURES + 2)
  _validate.check_probability(minority_share, "minority_share")
  return _sample(key, n, minority_share, _draw_size(n))


def sample_split(key: jax.Array, sizes, minority_share: float = 0.1) -> tuple[CreditData, ...]:
  """One draw of sum(sizes) applicants cut, in order, into disjoint parts of `sizes` (each
  >= 1): i.i.d. groups (public / private / test ...) from one compiled sampler.

  Examples:
    >>> [len(part) for part in sample_split(jax.random.key(0), (3, 5))]
    [3, 5]
  """
  sizes = _validate.check_sizes(sizes, "sizes")
  if not sizes:
    raise ValueError("sizes must hold at least one part size")
  world = sample(key, sum(sizes), minority_share)
  cuts = np.cumsum((0,) + sizes)
  return tuple(CreditData(*(a[lo:hi] for a in world)) for lo, hi in zip(cuts[:-1], cuts[1:]))


def sample_linear_split(key: jax.Array, sizes, *, public: int, minority_share: float = 0.1
                        ) -> tuple[tuple[tuple[jax.Array, jax.Array], ...], tuple[CreditData, ...]]:
  """`sample_split` with every part as linear features, the scaler fit on part `public` only.

  Returns (features, parts): features[i] = (x_NxD float32[sizes[i], 6], y_N int32[sizes[i]]),
  `linear_features` under `PublicScaler.fit(parts[public].x_NxF)`; parts: the raw CreditData
  (for `bayes_accuracy`). Every other part is private or held out and never fits anything.

  Examples:
    >>> feats, parts = sample_linear_split(jax.random.key(0), (4, 3), public=1)
    >>> [x.shape for x, _ in feats], len(parts[1])
    ([(4, 6), (3, 6)], 3)
  """
  parts = sample_split(key, sizes, minority_share)
  public = _validate.check_int(public, "public", 0, len(parts) - 1)
  scaler = PublicScaler.fit(parts[public].x_NxF)
  return tuple((linear_features(p.x_NxF, scaler), p.y_N) for p in parts), parts


_MIN_DRAW = 2048
_MAX_PADDED_DRAW = 2 ** 22


def _draw_size(n: int) -> int:
  """The number of people `sample` draws for n: the size class of n."""
  if not jax.config.jax_threefry_partitionable or n > _MAX_PADDED_DRAW:
    return n
  return max(_MIN_DRAW, 1 << (n - 1).bit_length())


def _sample(key: jax.Array, n: int, minority_share: float, m: int) -> CreditData:
  """`sample` drawing m >= n people and keeping the first n (m = n: no padding)."""
  ks = jax.random.split(key, 7)
  group = jax.random.bernoulli(ks[0], minority_share, (m,)).astype(jnp.float32)
  log_inc = jnp.log(_INCOME_MEDIAN) - 0.12 * group + 0.45 * jax.random.normal(ks[1], (m,))
  income = jnp.clip(jnp.exp(log_inc), 8.0, 400.0)
  debt = jax.random.beta(ks[2], 2.0, 5.0, (m,))
  hist0 = 1.0 + 4.5 * jax.random.gamma(ks[3], 2.2, (m,))
  hist1 = 0.5 + 2.0 * jax.random.gamma(ks[4], 1.5, (m,))
  hist = jnp.clip(jnp.where(group > 0.5, hist1, hist0), 0.0, 40.0)
  p_del = jax.nn.sigmoid(0.2 + 3.0 * (debt - _DEBT_MEAN) - 0.6 * jnp.log(income / _INCOME_MEDIAN))
  delinq = jax.random.bernoulli(ks[5], p_del).astype(jnp.float32)
  x = jnp.stack([income, debt, hist, delinq, group], axis=1).astype(jnp.float32)
  p = jax.nn.sigmoid(true_logit(x)).astype(jnp.float32)
  y = jax.random.bernoulli(ks[6], p).astype(jnp.int32)
  if m == n:
    return CreditData(x, y, p)
  return CreditData(x[:n], y[:n], p[:n])


def bayes_accuracy(data: CreditData) -> float:
  """Expected accuracy of the Bayes-optimal classifier on these people."""
  _validate.check_instance(data, CreditData, "data")
  p = np.asarray(data.p_N, np.float64)
  return float(np.mean(np.maximum(p, 1.0 - p)))


def lecture_canary() -> CreditData:
  """The lecture's audit canary (§6.2): income 250k, debt ratio 0.05, 25 years of history,
  no delinquency, group 0, and yet defaulted (y = 0).
  """
  x = jnp.asarray([[250.0, 0.05, 25.0, 0.0, 0.0]], jnp.float32)
  return CreditData(x, jnp.zeros((1,), jnp.int32), jax.nn.sigmoid(true_logit(x)))


# ---------------------------------------------------------------------------
# Customers with several loans (the privacy unit is the customer, not the loan).

_LOAN_COUNT_DECAY = 0.75      # P(k loans) proportional to 0.75^(k - min_loans)
_ZIP_ZIPF_EXPONENT = 1.0      # zip size weights proportional to 1 / rank^1
_ZIP_INCOME_SPREAD = 0.25     # sd of the per-zip shift of log income
_LOAN_DEBT_SPREAD = 0.08      # sd of a loan's debt ratio around its customer's level


class CustomerData(NamedTuple):
  """Loans of customers holding several loans each (one row per loan).

  Income, history, delinquency and group are the customer's, debt ratio the loan's;
  user_N int32[N]: a customer's rows contiguous, ids increasing; zip_N in [0, Z).
  """
  x_NxF: jax.Array
  y_N: jax.Array
  p_N: jax.Array
  user_N: jax.Array
  zip_N: jax.Array
  num_users: int

  @property
  def group_N(self) -> jax.Array:
    return self.x_NxF[:, 4].astype(jnp.int32)

  @property
  def loans_U(self) -> np.ndarray:
    """int64[U]: the number of loans of each customer."""
    return np.bincount(np.asarray(self.user_N), minlength=self.num_users)

  def records(self) -> CreditData:
    """The loans as a plain CreditData (dropping customer and zip)."""
    return CreditData(self.x_NxF, self.y_N, self.p_N)

  def __len__(self) -> int:
    return int(self.y_N.shape[0])


def zip_code_shares(num_zip_codes: int) -> np.ndarray:
  """float64[Z]: the share of customers per zip code, proportional to 1 / (z + 1) (Zipf).

  Examples:
    >>> [round(float(s), 3) for s in zip_code_shares(4)]
    [0.48, 0.24, 0.16, 0.12]
  """
  z = _validate.check_size(num_zip_codes, "num_zip_codes", 1, bytes_per_unit=16)   # float64 x 2
  w = 1.0 / np.arange(1, z + 1, dtype=np.float64) ** _ZIP_ZIPF_EXPONENT
  return w / w.sum()


def sample_customers(key: jax.Array, num_customers: int, *, min_loans: int = 1,
                     max_loans: int = 10, num_zip_codes: int = 50,
                     minority_share: float = 0.1) -> CustomerData:
  """Draws `num_customers` customers and all of their loans (customer u, loan j):

    loans k_u        in [min_loans, max_loans], P(k) proportional to 0.75^(k - min_loans)
    zip code z_u     Categorical(zip_code_shares(num_zip_codes)); shift a_z ~ N(0, 1)
    group g_u        Bernoulli(minority_share)
    income_u         exp(ln 55 - 0.12 g_u + 0.25 a_{z_u} + 0.45 N(0, 1)), clipped to [8, 400]
    history_u        as in `sample`; debt level b_u ~ Beta(2, 5)
    delinquent_u     Bernoulli(sigmoid(0.2 + 3 (b_u - 0.29) - 0.6 log(income_u/55)))
    debt_{uj}        clip(b_u + 0.08 N(0, 1), 0.01, 0.99)
    repaid_{uj}      Bernoulli(sigmoid(true_logit(x_{uj})))

  A customer's loans are correlated records: only a user-level unit (or group privacy over
  k_u loans) protects the customer. N = sum_u k_u is random.

  Examples:
    >>> data = sample_customers(jax.random.key(0), 100)
    >>> data.num_users, int(data.user_N.max()) + 1, data.x_NxF.shape[0] == len(data.user_N)
    (100, 100, True)
    >>> bool((data.loans_U >= 1).all() and (data.loans_U <= 10).all())
    True
  """
  u = _validate.check_size(num_customers, "num_customers", units=8)
  lo = _validate.check_int(min_loans, "min_loans", 1)
  hi = _validate.check_int(max_loans, "max_loans", 1)
  if hi < lo:
    raise ValueError(f"max_loans must be >= min_loans = {lo}, got {max_loans!r}")
  _validate.check_size(u * hi, "num_customers * max_loans", units=NUM_FEATURES + 4)
  shares = zip_code_shares(num_zip_codes)
  _validate.check_probability(minority_share, "minority_share")
  k_zip, k_blocks = jax.random.split(key)
  log_shares_Z = jnp.asarray(np.log(shares), jnp.float32)
  zip_shift_Z = jax.random.normal(k_zip, log_shares_Z.shape)
  # Customers are drawn in fixed blocks of _BLOCK (block b from fold_in(k_blocks, b)),
  # so one compiled program serves every num_customers.
  blocks = [_draw_block(jax.random.fold_in(k_blocks, b), jnp.float32(minority_share),
                        log_shares_Z, zip_shift_Z, lo, hi)
            for b in range(-(-u // _BLOCK))]
  loans_U, zip_U, x_UxLxF, y_UxL, p_UxL = (
      jnp.concatenate(parts, axis=0)[:u] for parts in zip(*blocks))
  loans_U = np.asarray(loans_U)
  # Loan slot j of customer u exists iff j < k_u; rows in customer order.
  valid = np.arange(hi)[None, :] < loans_U[:, None]
  user_N = np.repeat(np.arange(u, dtype=np.int32), loans_U)
  rows = jnp.asarray(np.flatnonzero(valid.ravel()))
  x = jnp.reshape(x_UxLxF, (u * hi, NUM_FEATURES))[rows]
  y = jnp.reshape(y_UxL, (-1,))[rows]
  p = jnp.reshape(p_UxL, (-1,))[rows]
  idx = jnp.asarray(user_N)
  return CustomerData(x, y, p, idx, zip_U[idx], u)


_BLOCK = 512


@functools.partial(jax.jit, static_argnums=(4, 5))
def _draw_block(key, minority_share, log_shares_Z, zip_shift_Z, lo, hi):
  """One compiled draw of _BLOCK customers with L = max_loans slots each: (loans, zip,
  x [_BLOCK, L, 5], y [_BLOCK, L], p [_BLOCK, L]); the caller drops slots j >= k_u.
  """
  u = _BLOCK
  k_unif, k_norm, k_gamma = jax.random.split(key, 3)
  # Three draws in all (each random call is a separately compiled hash): uniforms
  # for the categorical, Bernoulli and order-statistic variables, normals, gammas.
  unif = jax.random.uniform(k_unif, (u, 10 + hi))
  norm = jax.random.normal(k_norm, (u, 1 + hi))
  count_p = _LOAN_COUNT_DECAY ** jnp.arange(hi - lo + 1, dtype=jnp.float32)
  # Inverse-CDF draws: the number of cumulative probabilities below the uniform.
  inv_cdf = lambda cum, v: jnp.sum(v[:, None] > cum[None, :-1] / cum[-1], axis=1)
  loans_U = lo + inv_cdf(jnp.cumsum(count_p), unif[:, 0])
  zip_U = inv_cdf(jnp.cumsum(jnp.exp(log_shares_Z)), unif[:, 1])
  group = (unif[:, 2] < minority_share).astype(jnp.float32)
  log_inc = (jnp.log(_INCOME_MEDIAN) - 0.12 * group + _ZIP_INCOME_SPREAD * zip_shift_Z[zip_U]
             + 0.45 * norm[:, 0])
  income = jnp.clip(jnp.exp(log_inc), 8.0, 400.0)
  minority = group > 0.5
  g = jax.random.gamma(k_gamma, jnp.where(minority, 1.5, 2.2))
  hist = jnp.clip(jnp.where(minority, 0.5 + 2.0 * g, 1.0 + 4.5 * g), 0.0, 40.0)
  debt_level = jnp.sort(unif[:, 3:9], axis=1)[:, 1]
  p_del = jax.nn.sigmoid(0.2 + 3.0 * (debt_level - _DEBT_MEAN)
                         - 0.6 * jnp.log(income / _INCOME_MEDIAN))
  delinq = (unif[:, 9] < p_del).astype(jnp.float32)
  debt = jnp.clip(debt_level[:, None] + _LOAN_DEBT_SPREAD * norm[:, 1:], 0.01, 0.99)
  per_user = lambda v: jnp.broadcast_to(v[:, None], (u, hi))
  x = jnp.stack([per_user(income), debt, per_user(hist), per_user(delinq), per_user(group)],
                axis=2).astype(jnp.float32)
  p = jax.nn.sigmoid(true_logit(jnp.reshape(x, (u * hi, NUM_FEATURES)))).reshape(u, hi)
  y = (unif[:, 10:] < p).astype(jnp.int32)
  return (loans_U.astype(jnp.int32), zip_U.astype(jnp.int32), x, y, p.astype(jnp.float32))


class CustomerSplits(NamedTuple):
  """Customers split by a PUBLIC id rule into training, validation and test loans.

  Per split s in (train, val): x_s float32[N_s, 6] linear features, y_s int32[N_s],
  uid_s[N_s] the customer renumbered 0..num_s_users - 1 (int32 for train, int64 for val);
  x_test, y_test: the held-out customers' loans. zip_U int32[U], delinquent_U float64[U]
  (1.0 iff any loan of the customer defaulted, y = 0) over the U private customers;
  num_loans: their loans.
  """
  x_train: np.ndarray
  y_train: np.ndarray
  uid_train: np.ndarray
  num_train_users: int
  x_val: np.ndarray
  y_val: np.ndarray
  uid_val: np.ndarray
  num_val_users: int
  x_test: np.ndarray
  y_test: np.ndarray
  num_loans: int
  zip_U: np.ndarray
  delinquent_U: np.ndarray


def sample_customer_splits(key: jax.Array, num_private: int, num_test: int, *,
                           validation_every: int, max_loans: int = 10,
                           num_zip_codes: int = 50) -> CustomerSplits:
  """Private customers split into training and validation by id, held-out test customers.

  One key is split into (public, customers): `sample_customers` of U + num_test customers
  twice, the public draw fitting only the `PublicScaler` of `linear_features`. Customer
  u < U = num_private is private; it validates iff u % validation_every == 0 (a public rule,
  so the split reveals nothing), else trains; u >= U is test. Rows stay in customer order.

  Examples:
    >>> s = sample_customer_splits(jax.random.key(0), 40, 10, validation_every=4)
    >>> s.num_train_users, s.num_val_users, s.x_train.shape[1], s.zip_U.shape
    (30, 10, 6, (40,))
  """
  # Per customer: max_loans slots of the features, label, probability and ids, twice.
  hi = _validate.check_size(max_loans, "max_loans", units=2 * (NUM_FEATURES + 4))
  u_priv, u_test = (_validate.check_size(u, name, units=2 * hi * (NUM_FEATURES + 4))
                    for u, name in ((num_private, "num_private"), (num_test, "num_test")))
  every = _validate.check_int(validation_every, "validation_every", 2, 2 ** 31 - 1)
  k_pub, k_cust = jax.random.split(key)
  total = u_priv + u_test
  draw = lambda k: sample_customers(k, total, max_loans=max_loans,  # noqa: E731
                                    num_zip_codes=num_zip_codes)
  scaler = PublicScaler.fit(draw(k_pub).x_NxF)   # a separate PUBLIC draw
  world = draw(k_cust)
  user, y = np.asarray(world.user_N), np.asarray(world.y_N, np.int32)
  x = np.asarray(linear_features(world.x_NxF, scaler), np.float32)
  private = user < u_priv
  val = (user % every == 0) & private
  train = private & ~val
  # Each split's customers renumbered 0..U-1; rows are ordered by customer.
  (ids_t, uid_t), (ids_v, uid_v) = (np.unique(user[r], return_inverse=True) for r in (train, val))
  first = np.searchsorted(user, np.arange(u_priv))
  defaulted = np.zeros(total, np.float64)
  np.maximum.at(defaulted, user, (y == 0).astype(np.float64))
  return CustomerSplits(
      x[train], y[train], uid_t.astype(np.int32), int(ids_t.size), x[val], y[val],
      uid_v.astype(np.int64), int(ids_v.size), x[~private], y[~private], int(private.sum()),
      np.asarray(world.zip_N)[first].astype(np.int32), defaulted[:u_priv])


@dataclasses.dataclass(frozen=True)
class PublicScaler:
  """Standardisation constants (mean_F, std_F, cubic_rms_D) from a PUBLIC sample only.

  Warning: fitting it on the private training set leaks it (lecture §5.5).
  """
  mean_F: tuple
  std_F: tuple
  cubic_rms_D: tuple

  def __post_init__(self):
    mean = _validate.check_array(self.mean_F, "mean_F", shape=(NUM_FEATURES,))
    std = _validate.check_array(self.std_F, "std_F", shape=(NUM_FEATURES,), low=0.0, open_low=True)
    rms = _validate.check_array(self.cubic_rms_D, "cubic_rms_D", shape=(CUBIC_DIM,),
                                low=0.0, open_low=True)
    for name, values in (("mean_F", mean), ("std_F", std), ("cubic_rms_D", rms)):
      object.__setattr__(self, name, tuple(float(v) for v in values))

  @classmethod
  def fit(cls, public_x_NxF: jax.typing.ArrayLike) -> "PublicScaler":
    x = _validate.check_array(public_x_NxF, "public_x_NxF", shape=(None, NUM_FEATURES))
    if x.shape[0] < 2:
      raise ValueError(f"public_x_NxF needs >= 2 rows, got shape {x.shape}")
    mean = x.mean(0)
    std = x.std(0)
    std = np.where(std > 0, std, 1.0)
    z = (x - mean) / std
    mono = _monomials_np(z)
    rms = np.sqrt(np.mean(mono ** 2, axis=0))
    rms[0] = 1.0
    return cls(tuple(mean), tuple(std), tuple(np.where(rms > 0, rms, 1.0)))

  def transform(self, x_NxF: jax.typing.ArrayLike) -> jax.Array:
    """Standardised raw features: float32[N, 5]."""
    x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32,
                                          shape=(None, NUM_FEATURES), min_size=1))
    return ((x - jnp.asarray(self.mean_F, jnp.float32)[None, :])
            / jnp.asarray(self.std_F, jnp.float32)[None, :])


_CUBIC_INDEX = [c for d in range(4) for c in itertools.combinations_with_replacement(range(5), d)]
CUBIC_DIM = len(_CUBIC_INDEX)  # 56
LINEAR_DIM = NUM_FEATURES + 1  # 6


def _monomials_np(z: np.ndarray) -> np.ndarray:
  cols = [np.prod(z[:, list(c)], axis=1) if c else np.ones(z.shape[0]) for c in _CUBIC_INDEX]
  return np.stack(cols, axis=1)


def linear_features(x_NxF: jax.typing.ArrayLike, scaler: PublicScaler) -> jax.Array:
  """[1, standardised features]: float32[N, 6]."""
  _validate.check_instance(scaler, PublicScaler, "scaler")
  z = scaler.transform(x_NxF)
  return jnp.concatenate([jnp.ones((z.shape[0], 1), z.dtype), z], axis=1)


def cubic_features(x_NxF: jax.typing.ArrayLike, scaler: PublicScaler) -> jax.Array:
  """Monomials of degree <= 3 of the standardised features at unit public RMS: float32[N, 56]
  (intercept, then itertools.combinations_with_replacement order).
  """
  _validate.check_instance(scaler, PublicScaler, "scaler")
  return _cubic(scaler.transform(x_NxF), jnp.asarray(scaler.cubic_rms_D, jnp.float32))


@jax.jit
def _cubic(z, rms_D):
  """The monomials of z float32[N, 5] over rms_D, one compiled program per N (bit for bit
  the op-by-op columns, credit_test)."""
  cols = [jnp.prod(z[:, list(c)], axis=1) if c else jnp.ones(z.shape[0], z.dtype)
          for c in _CUBIC_INDEX]
  return jnp.stack(cols, axis=1) / rms_D[None, :]


def cubic_feature_names() -> list[str]:
  """Names of the 56 cubic columns, e.g. 'income*history'."""
  return ["1" if not c else "*".join(FEATURE_NAMES[i] for i in c) for c in _CUBIC_INDEX]
