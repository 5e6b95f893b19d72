"""Tests for dpjax.audit.variants: names map to the engine's faults, claims unchanged."""

import warnings

from absl.testing import absltest, parameterized

from dpjax import dpsgd
from dpjax.audit import variants


def _cfg(**kw):
  return dpsgd.DpSgdConfig(dataset_size=151, sampling_prob=0.2, num_steps=500, **kw)


class VariantsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("clip_batch_mean", "clip_batch_mean"), ("realised", "realised_batch_denominator"),
      ("noise_on_mean", "noise_on_mean"))
  def test_fault_flags(self, name):
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      v = variants.variant_config(name, _cfg(noise_multiplier=2.0))
    self.assertTrue(getattr(v.faults, name))
    self.assertEqual(sum(getattr(v.faults, f) for f in ("clip_batch_mean", "noise_on_mean",
                                                         "realised_batch_denominator",
                                                         "noise_without_clip_norm")), 1)
    self.assertTrue(any(issubclass(x.category, dpsgd.FaultyDpSgdWarning) for x in w))
    self.assertEqual((v.sampling_prob, v.noise_multiplier, v.num_steps, v.delta, v.sampler),
                     (0.2, 2.0, 500, 1e-5, "poisson"))

  def test_noise_without_clip_norm_runs_with_c10(self):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      v = variants.variant_config("noise_without_clip_norm", _cfg(noise_multiplier=2.0))
    self.assertEqual(v.l2_clip_norm, 10.0)
    self.assertTrue(v.faults.noise_without_clip_norm)

  def test_shuffle_and_correct(self):
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      v = variants.variant_config("shuffle_as_poisson", _cfg(noise_multiplier=2.0))
    self.assertEqual(v.sampler, "shuffle")
    self.assertTrue(any(issubclass(x.category, dpsgd.UnaccountedSamplingWarning) for x in w))
    c = variants.variant_config("correct", _cfg(noise_multiplier=2.0))
    self.assertEqual(c, _cfg(noise_multiplier=2.0))

  def test_target_epsilon_resolved_to_claimed_sigma(self):
    cfg = _cfg(target_epsilon=2.0)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      v = variants.variant_config("noise_on_mean", cfg)
    self.assertIsNone(v.target_epsilon)
    self.assertAlmostEqual(v.noise_multiplier, cfg.sigma)
    self.assertAlmostEqual(variants.claimed_epsilon(cfg), 2.0, delta=0.02)

  def test_validation(self):
    with self.assertRaisesRegex(ValueError, "variant"):
      variants.variant_config("nope", _cfg(noise_multiplier=1.0))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      bad = _cfg(noise_multiplier=1.0, sampler="shuffle")
    with self.assertRaisesRegex(ValueError, "claimed"):
      variants.variant_config("correct", bad)


if __name__ == "__main__":
  absltest.main()
