"""The synthetic credit world of the lecture: applicants, true repayment odds, two groups.

Every applicant has five raw features and a label:

  column  name           distribution (group g; share of group 1 = `minority_share`)
  0       income         k$, log-normal: log(income) ~ N(ln 55 - 0.12 g, 0.45^2), clipped
                         to [8, 400]; right-skewed, mean ~61k, max ~210k per 1,000 people
  1       debt_ratio     Beta(2, 5) (mean 0.29), in (0, 1)
  2       history        credit-history years: group 0: 1 + Gamma(2.2, 4.5) (mean ~11);
                         group 1 ("thin file"): 0.5 + Gamma(1.5, 2.0) (mean ~3.5); clipped at 40
  3       delinquent     1 if delinquent in the last two years, Bernoulli(sigmoid(
                         0.2 + 3 (debt_ratio - 0.29) - 0.6 log(income / 55))), ~0.55 of people
  4       group          0 (majority) or 1 (minority)
  label   repaid         Bernoulli(p) with the TRUE repayment probability
                         logit p = 1.4 + 1.8 log(income/55) - 5.0 (debt_ratio - 0.29)
                                   - 2.2 delinquent + h_g(history),
                         h_0(t) = 0.16 (t - 11)            (history is informative),
                         h_1(t) = -0.5 - 0.2 (t - 3.5)     (thin-file effect: for group 1 a
                                                           long file signals something else)

Because p is known for every person, the Bayes-optimal accuracy mean(max(p, 1-p)) is
computable (`bayes_accuracy`); it is about 0.79 (0.79 in each group). A model that does not see the group
(or has no group x history term) cannot represent h_1, which is what the
disparate-impact experiment exploits.

Feature maps: `PublicScaler` is fit on a separate PUBLIC sample (never on private
training data) and standardises the five raw features; `linear_features` gives
[1, z] (6 columns) and `cubic_features` gives every monomial of degree <= 3 of the
five standardised features (56 columns), each column rescaled to unit RMS on the
public sample.

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
  """A sample of applicants.

  Attributes:
    x_NxF: float32[N, 5] raw features, columns as FEATURE_NAMES.
    y_N: int32[N], 1 = repaid, 0 = defaulted.
    p_N: float32[N], the true repayment probability.
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
  """Draws `n` applicants from the credit world.

  Args:
    key: a jax.random key.
    n: number of people, >= 1.
    minority_share: probability that a person belongs to group 1, in [0, 1].
  Returns:
    CreditData with x_NxF float32[n, 5], y_N int32[n], p_N float32[n].
  """
  n = _validate.check_size(n, "n", units=NUM_FEATURES + 2)
  _validate.check_probability(minority_share, "minority_share")
  ks = jax.random.split(key, 7)
  group = jax.random.bernoulli(ks[0], minority_share, (n,)).astype(jnp.float32)
  log_inc = jnp.log(_INCOME_MEDIAN) - 0.12 * group + 0.45 * jax.random.normal(ks[1], (n,))
  income = jnp.clip(jnp.exp(log_inc), 8.0, 400.0)
  debt = jax.random.beta(ks[2], 2.0, 5.0, (n,))
  hist0 = 1.0 + 4.5 * jax.random.gamma(ks[3], 2.2, (n,))
  hist1 = 0.5 + 2.0 * jax.random.gamma(ks[4], 1.5, (n,))
  hist = jnp.clip(jnp.where(group > 0.5, hist1, hist0), 0.0, 40.0)
  p_del = jax.nn.sigmoid(0.2 + 3.0 * (debt - _DEBT_MEAN) - 0.6 * jnp.log(income / _INCOME_MEDIAN))
  delinq = jax.random.bernoulli(ks[5], p_del).astype(jnp.float32)
  x = jnp.stack([income, debt, hist, delinq, group], axis=1).astype(jnp.float32)
  p = jax.nn.sigmoid(true_logit(x)).astype(jnp.float32)
  y = jax.random.bernoulli(ks[6], p).astype(jnp.int32)
  return CreditData(x, y, p)


def bayes_accuracy(data: CreditData) -> float:
  """Expected accuracy of the Bayes-optimal classifier on these people."""
  _validate.check_instance(data, CreditData, "data")
  p = np.asarray(data.p_N, np.float64)
  return float(np.mean(np.maximum(p, 1.0 - p)))


def lecture_canary() -> CreditData:
  """The lecture's audit canary (§6.2): income 250k, debt ratio 0.05, 25 years of
  history, no delinquency, group 0 -- and yet it defaulted (y = 0)."""
  x = jnp.asarray([[250.0, 0.05, 25.0, 0.0, 0.0]], jnp.float32)
  return CreditData(x, jnp.zeros((1,), jnp.int32), jax.nn.sigmoid(true_logit(x)))


@dataclasses.dataclass(frozen=True)
class PublicScaler:
  """Standardisation constants computed from a PUBLIC sample only.

  Attributes:
    mean_F, std_F: float64[5] per raw feature (the group and delinquency bits too).
    cubic_rms_D: float64[56] RMS of each cubic monomial of the standardised public
      features (1 for the intercept), used to put cubic columns on a common scale.
  Warning: fitting this on the private training set leaks it (lecture §5.5); fit it
    on data that is public or drawn separately, as every experiment here does.
  """
  mean_F: tuple
  std_F: tuple
  cubic_rms_D: tuple

  def __post_init__(self):
    mean = _validate.check_array(self.mean_F, "mean_F", shape=(NUM_FEATURES,))
    std = _validate.check_array(self.std_F, "std_F", shape=(NUM_FEATURES,), low=0.0,
                                open_low=True)
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
  """All monomials of degree <= 3 of the standardised features: float32[N, 56].

  Column order: the intercept, then degree 1, 2, 3 monomials in
  itertools.combinations_with_replacement order; each scaled to unit public RMS.
  """
  _validate.check_instance(scaler, PublicScaler, "scaler")
  z = scaler.transform(x_NxF)
  cols = [jnp.prod(z[:, list(c)], axis=1) if c else jnp.ones(z.shape[0], z.dtype)
          for c in _CUBIC_INDEX]
  return jnp.stack(cols, axis=1) / jnp.asarray(scaler.cubic_rms_D, jnp.float32)[None, :]


def cubic_feature_names() -> list[str]:
  """Names of the 56 cubic columns, e.g. 'income*history'."""
  return ["1" if not c else "*".join(FEATURE_NAMES[i] for i in c) for c in _CUBIC_INDEX]
