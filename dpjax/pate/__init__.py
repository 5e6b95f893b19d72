"""PATE: teachers on disjoint data, noisy-argmax aggregation, RDP accounting, a student.

One teacher per disjoint partition; per public query the vote histogram n (int32[Q, C])
is released as a noisy argmax: LNMax argmax_c n_c + Laplace(b), GNMax + N(0, sigma^2),
or Confident-GNMax (GNMax only if max_c n_c + N(0, sigma_t^2) >= T). `aggregation` holds
the teachers, votes, aggregators and students (JAX); `accounting` their privacy (NumPy).
The data-independent epsilon is the releasable guarantee; the data-dependent one is
released through `dpjax.pate_release`.

Examples:
  >>> import jax, jax.numpy as jnp, numpy as np
  >>> votes = jnp.array([[40, 5, 5], [20, 18, 12]])
  >>> int(gnmax(jax.random.key(0), votes, sigma=1.0)[0])
  0
  >>> gnmax_rdp_data_independent(4.0, np.array([2.0, 8.0, 32.0])).tolist()
  [0.125, 0.5, 2.0]

References: Papernot et al., "Semi-supervised knowledge transfer for deep learning from
private training data", ICLR 2017; Papernot et al., "Scalable private learning with
PATE", ICLR 2018.
"""

from dpjax.pate.accounting import (
    PateRdp, aggregation_event, answer_event, check_threshold, check_votes,
    confident_gnmax_rdp, epsilon, gaussian_rdp_data_dependent, gnmax_log_q,
    gnmax_rdp_data_dependent, gnmax_rdp_data_independent, lnmax_epsilon, lnmax_log_q,
    lnmax_rdp_data_dependent, lnmax_rdp_data_independent, log1mexp, pate_rdp,
    pate_rdp_grouped, threshold_event, threshold_log_pr_answered,
    threshold_rdp_data_dependent, threshold_rdp_data_independent)
from dpjax.pate.aggregation import (
    confident_gnmax, fit_non_private, fit_students, gnmax, lnmax, partition, teacher_votes,
    train_teachers, vote_histogram)

__all__ = [
    # aggregation
    "vote_histogram", "lnmax", "gnmax", "confident_gnmax", "partition", "fit_non_private",
    "fit_students", "train_teachers", "teacher_votes",
    # accounting
    "check_votes", "check_threshold", "answer_event", "threshold_event", "aggregation_event",
    "gnmax_rdp_data_independent", "threshold_rdp_data_independent", "lnmax_epsilon",
    "lnmax_rdp_data_independent", "log1mexp", "gnmax_log_q", "lnmax_log_q",
    "gaussian_rdp_data_dependent", "gnmax_rdp_data_dependent", "threshold_log_pr_answered",
    "threshold_rdp_data_dependent", "lnmax_rdp_data_dependent", "PateRdp", "pate_rdp",
    "pate_rdp_grouped", "confident_gnmax_rdp", "epsilon",
]
