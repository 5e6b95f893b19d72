"""Helpers shared by the test files (not a test file itself)."""

import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from dpjax import dpsgd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binary_data(n=24, d=4, seed=0, scale=3.0):
  """(x float32[n, d] ~ scale * N(0, 1), y int32[n] ~ Bernoulli(1/2)) from one key."""
  kx, ky = jax.random.split(jax.random.key(seed))
  x = scale * jax.random.normal(kx, (n, d))
  y = jax.random.bernoulli(ky, 0.5, (n,)).astype(jnp.int32)
  return x, y


def small_config(**overrides):
  """A DpSgdConfig for 24 records (q = 0.3, T = 6, sigma = 1), with `overrides` applied."""
  base = dict(dataset_size=24, sampling_prob=0.3, num_steps=6, noise_multiplier=1.0)
  base.update(overrides)
  return dpsgd.DpSgdConfig(**base)


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
  """Leaf-by-leaf np.testing.assert_allclose of two pytrees of the same structure."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb), (len(la), len(lb))
  for u, v in zip(la, lb):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


# Example-count multiplier of each hypothesis profile (registered in conftest.py).
HYPOTHESIS_SCALE = {"ci": 1, "thorough": 20}


def property_settings(max_examples):
  """hypothesis settings with `max_examples` scaled by the active profile (conftest.py).

  Under the default "ci" profile a property runs exactly `max_examples` examples;
  DPJAX_HYPOTHESIS_PROFILE=thorough runs 20 times as many, drawn at random.
  """
  import hypothesis  # pylint: disable=g-import-not-at-top
  profile = os.environ.get("DPJAX_HYPOTHESIS_PROFILE", "ci")
  return hypothesis.settings(max_examples=max_examples * HYPOTHESIS_SCALE.get(profile, 1))


def run_experiment(name, *args, timeout=300):
  """`python -m experiments.<name> *args --out <tmp>` from the repository root."""
  return subprocess.run([sys.executable, "-m", f"experiments.{name}", *args,
                         "--out", tempfile.mkdtemp()], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout)


def assert_one_line_flag_error(test, name, args, flag):
  """A bad flag value ends experiments.<name> with exit status 2 and one stderr line."""
  p = run_experiment(name, *args)
  test.assertEqual(p.returncode, 2, p.stderr)
  lines = [l for l in p.stderr.splitlines() if l.strip()]
  test.assertLen(lines, 1, p.stderr)
  test.assertIn(flag, lines[0])


def quantile_scores(mu, n, seed=0):
  """N(mu, 1) vs N(0, 1) scores of n trials per side, each half exactly the quantiles."""
  half = sps.norm.ppf((np.arange(n // 2) + 0.5) / (n // 2))
  rng = np.random.default_rng(seed)
  s_out = np.concatenate([rng.permutation(half), rng.permutation(half)])
  s_in = np.concatenate([rng.permutation(half), rng.permutation(half)]) + mu
  return s_in, s_out


# Performance flags with the progress bar off, for tests that train.
QUIET = dpsgd.PerformanceFlags(progress=False)


def identity(u):
  """A score function for logistic-regression params: the weight vector itself."""
  return u["w"]


def one_fixed(g, keep):
  """One fixed-gradient record g (a params-like pytree) with membership keep (bool[M]
  for train_many, a bool for train_one)."""
  keep = np.asarray(keep)
  return dpsgd.FixedGradients(jax.tree.map(lambda v: jnp.asarray(v)[None], g),
                              keep[:, None] if keep.ndim == 1 else keep[None])
