"""Test-wide settings: the repository root importable, and JAX rank promotion as an error."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
