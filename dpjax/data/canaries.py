"""Canary data sets: the lecture's audit set (a small credit base set plus a record canary).

The canary audit of DP-SGD (lecture §6.2, code 04 demo 3) trains on a fixed credit base
set plus the lecture's outlier applicant (`credit.lecture_canary`). Features: the cubic
expansion under a public scaler fitted on a separate sample, plus `unused_features` >= 1
all-zero columns for gradient canaries that no record touches.

Shape letters: N records (base set, then the canary), D features.

Examples:
  >>> import jax
  >>> data = audit_data(jax.random.key(0), base_size=20)
  >>> data.x_NxD.shape, data.canary_index, int(data.y_N[data.canary_index])
  ((21, 57), 20, 0)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.data import credit

# Public sample size the feature scaler is fitted on.
_PUBLIC_SAMPLE = 2000


class AuditData(NamedTuple):
  """Base set + record canary (last row, label 0), with all-zero last columns for gradient canaries.

  x_NxD float32[N, D], D = 56 cubic + the unused columns; y_N int32[N];
  canary_index = N - 1.
  """
  x_NxD: jax.Array
  y_N: jax.Array
  canary_index: int
  num_features: int


def audit_data(key: jax.Array, base_size: int = 150, unused_features: int = 1) -> AuditData:
  """The lecture's audit set: `base_size` >= 1 credit records plus the lecture canary.

  `key` is split between the public scaler's sample and the base set; the records do not
  depend on `unused_features` (K >= 1 trailing zero columns). Returns AuditData with
  N = base_size + 1 and D = 56 + K.

  Examples:
    >>> import jax
    >>> audit_data(jax.random.key(0), base_size=5).num_features
    57
  """
  base_size = _validate.check_size(base_size, "base_size", units=credit.NUM_FEATURES + 2)
  unused_features = _validate.check_size(unused_features, "unused_features",
                                         units=base_size + 1)
  k_pub, k_base = jax.random.split(key)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, _PUBLIC_SAMPLE).x_NxF)
  base = credit.sample(k_base, base_size)
  can = credit.lecture_canary()
  x = jnp.concatenate([credit.cubic_features(base.x_NxF, scaler),
                       credit.cubic_features(can.x_NxF, scaler)], axis=0)
  x = jnp.concatenate([x, jnp.zeros((x.shape[0], unused_features), x.dtype)], axis=1)
  y = jnp.concatenate([base.y_N, can.y_N]).astype(jnp.int32)
  return AuditData(x, y, int(x.shape[0] - 1), int(x.shape[1]))
