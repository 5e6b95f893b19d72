"""The lecture's audit set (§6.2): a small credit base set plus the record canary.

Features: the cubic expansion under a public scaler fitted on a separate sample, plus
`unused_features` >= 1 all-zero columns for gradient canaries no record touches.

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
  """Base set + record canary (last row, label 0): x_NxD float32[N, 56 + unused], y_N int32[N]."""
  x_NxD: jax.Array
  y_N: jax.Array
  canary_index: int
  num_features: int


def audit_data(key: jax.Array, base_size: int = 150, unused_features: int = 1) -> AuditData:
  """`base_size` credit records plus `credit.lecture_canary`: N = base_size + 1, D = 56 + K.

  `key` is split between the scaler's public sample and the base set; the records do not
  depend on `unused_features` (K).

  Examples:
    >>> import jax
    >>> audit_data(jax.random.key(0), base_size=5).num_features
    57
  """
  base_size = _validate.check_size(base_size, "base_size", units=credit.NUM_FEATURES + 2)
  unused_features = _validate.check_size(unused_features, "unused_features", units=base_size + 1)
  k_pub, k_base = jax.random.split(key)
  scaler = credit.PublicScaler.fit(credit.sample(k_pub, _PUBLIC_SAMPLE).x_NxF)
  base = credit.sample(k_base, base_size)
  can = credit.lecture_canary()
  x = jnp.concatenate([credit.cubic_features(base.x_NxF, scaler),
                       credit.cubic_features(can.x_NxF, scaler)], axis=0)
  x = jnp.concatenate([x, jnp.zeros((x.shape[0], unused_features), x.dtype)], axis=1)
  y = jnp.concatenate([base.y_N, can.y_N]).astype(jnp.int32)
  return AuditData(x, y, int(x.shape[0] - 1), int(x.shape[1]))
