"""Test-wide settings: the repository root importable, JAX rank promotion as an error,
and the hypothesis profile of the property tests (`tests/*_properties_test.py`).

Hypothesis profiles, chosen with DPJAX_HYPOTHESIS_PROFILE:
  "ci" (default): derandomized (the same examples on every run, so a red run
    reproduces), no example database written into the tree, no deadline (the
    accountants' cost varies with the drawn parameters);
  "thorough": random examples, each property's example count multiplied by
    `tests.helpers.HYPOTHESIS_SCALE["thorough"]`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hypothesis  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

hypothesis.settings.register_profile(
    "ci", deadline=None, database=None, derandomize=True, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.register_profile(
    "thorough", deadline=None, database=None, derandomize=False, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile(os.environ.get("DPJAX_HYPOTHESIS_PROFILE", "ci"))
