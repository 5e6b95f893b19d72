"""Every epsilon of one PATE labelling: the releasable one and those shown for comparison.

A labelling asks Q public queries of the teachers' PRIVATE votes with one setting (GNMax sigma;
Confident-GNMax adds threshold T and check noise sigma_t) and answers `answered_Q`. At delta,
over `orders` (`pate.pate_rdp_grouped`, `pate.epsilon`): epsilon_data_independent and
epsilon_data_dependent charge the answer on answered queries only, the paper's accounting: it
conditions on a random output of the private votes, so is NOT an upper bound (`pate.pate_rdp`);
epsilon_all_answered and epsilon_data_dependent_all charge every query both steps (the latter is
not releasable as is); epsilon_releasable, release_order, release_probability_below and
release_true_total_epsilon (PRIVATE) are `pate_release.release`'s at a plan made without the votes.
"""

from __future__ import annotations

import jax
import numpy as np

from dpjax import _validate
from dpjax import pate
from dpjax import pate_release

RELEASE_FIELDS = (("epsilon_releasable", "epsilon"), ("release_order", "order"),
                  ("release_probability_below", "probability_below"),
                  ("release_true_total_epsilon", "true_total_epsilon"))


def labelling_epsilons(key: jax.Array, votes_QxC, answered_Q, *, sigma: float, delta: float,
                       orders, threshold: float | None = None,
                       sigma_threshold: float | None = None,
                       plan: pate_release.ReleaseParams | None = None,
                       cache: dict | None = None) -> dict:
  """{field: float or None} in the module docstring's order (release fields None without a
  plan); `key` drives the release; answered_Q: bool[Q]; cache: as `pate.pate_rdp_grouped`'s.

  Examples:
    >>> import numpy as np
    >>> votes, orders = np.array([[9, 1], [6, 4]]), np.array([2.0, 8.0, 32.0])
    >>> e = labelling_epsilons(None, votes, np.array([True, True]), sigma=4.0, delta=1e-5,
    ...                        orders=orders)
    >>> e["epsilon_data_independent"] == e["epsilon_all_answered"], e["epsilon_releasable"]
    (True, None)
  """
  q = pate.check_votes(votes_QxC, ndim=2).shape[0]
  _validate.check_binary(answered_Q, "answered_Q", shape=(q,))
  if plan is not None and not isinstance(plan, pate_release.ReleaseParams):
    raise ValueError(f"plan must be a pate_release.ReleaseParams or None, got {plan!r:.80}")
  kw = dict(sigma=sigma, threshold=threshold, sigma_threshold=sigma_threshold)
  acct, acct_all = (pate.pate_rdp_grouped(votes_QxC, a, orders=orders, cache=cache, **kw)
                    for a in (answered_Q, np.ones(q, bool)))
  eps = lambda curve: pate.epsilon(orders, curve, delta)
  rel = None if plan is None else pate_release.release(key, votes_QxC, None, params=plan,
                                                       delta=delta, **kw)
  return {"epsilon_data_independent": eps(acct.data_independent),
          "epsilon_data_dependent": eps(acct.data_dependent),
          "epsilon_all_answered": eps(acct_all.data_independent),
          "epsilon_data_dependent_all": eps(acct_all.data_dependent),
          **{f: None if rel is None else getattr(rel, a) for f, a in RELEASE_FIELDS}}
