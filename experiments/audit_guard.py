"""The audit as a regression test: the engine's guard, on the engine and on its regressions.

`audit.guard.check_claim` on the engine and on each of `variants.REGRESSIONS` (sigma C / 2,
Poisson at 2q, clipping to 4C): the true eps of what was trained (`variants.exact_epsilon`), the
bound, and the verdict (falsified when the bound exceeds the claim's exact eps; a false alarm
with probability <= 1 - confidence).

Command:   python -m experiments.audit_guard          (about a minute of CPU)
Expected (seed 0: q = 1/2, T = 10, sigma = 3.72 for claimed eps = 2, exact 1.82; 262,144 trials
per side, 99%): engine 1.16 (1.11 expected), not falsified; noise_half 2.53 (true 4.36),
sampler_twice_q 2.36 (true 3.63), clip_four_c 5.54 (true 11.67), all falsified.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
from tqdm import tqdm

from dpjax import dpsgd
from dpjax.audit import guard, variants
from experiments import _common, _plots

NAME = "audit_guard"


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditGuardConfig(_common.ExperimentConfig):
  """What `run` checks (defaults: the guard's own)."""
  eps: float = _common.option(2.0, "Claimed (target) epsilon; sigma is RDP-calibrated to it.")
  sampling_prob: float = _common.option(0.5, "Poisson sampling probability q of the claim.")
  steps: int = _common.option(10, "DP-SGD steps T of the claim.")
  delta: float = _common.option(1e-5, "delta of the claim.")
  runs: int = _common.option(512, "Training runs R (models).")
  canaries: int = _common.option(1024, "Canary records K per run.")
  confidence: float = _common.option(0.99, "Confidence of the bound (1 - false-alarm rate).")
  bugs: tuple[str, ...] = _common.option(variants.REGRESSIONS, "Regressions to train, one at a time.",
                                         choices=variants.REGRESSIONS)

  def __post_init__(self):
    super().__post_init__()
    _common.check_positive(self, "eps")
    _common.check_int(self, "steps")
    _common.check_int(self, "runs", minimum=2)
    _common.check_int(self, "canaries")
    _common.check_range(self, "sampling_prob", low=0, high=1, open_low=True)
    _common.check_range(self, "delta", "confidence", low=0, high=1, open_low=True, open_high=True)


def _plot(out_dir: str, rows: list) -> str:
  name = "audit_guard.png"
  with _plots.figure(out_dir, name, figsize=(6.4, 3.2)) as (fig, ax):
    labels = [r["engine"] for r in rows]
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], [r["true_epsilon"] for r in rows], height=0.4,
            color="0.75", label="true ε of what was trained")
    ax.barh([y - 0.2 for y in ys], [r["epsilon_lower"] for r in rows], height=0.4,
            color=["tab:red" if r["falsified"] else "tab:green" for r in rows],
            label="guard's ε lower bound (red: falsified)")
    ax.axvline(rows[0]["exact_epsilon"], color="k", ls="--", lw=1,
               label="exact ε of the claim (falsified above)")
    ax.set_yticks(list(ys), labels)
    ax.set_xlabel("ε (δ = %g)" % rows[0]["delta"])
    ax.legend(fontsize=7, loc="lower right")
  return name


def run(cfg: AuditGuardConfig, out_dir: str, *, progress: bool = True, quiet: bool = False) -> dict:
  """Runs the guard on the engine and on each regression; returns `_common.finish`'s dict."""
  claim = dpsgd.DpSgdConfig(dataset_size=1024, sampling_prob=cfg.sampling_prob,
                            num_steps=cfg.steps, l2_clip_norm=1.0,
                            delta=cfg.delta).calibrate(cfg.eps)
  key = jax.random.key(cfg.seed)
  rows = []
  for name in tqdm(("engine",) + tuple(cfg.bugs), desc=NAME, disable=not progress):
    kw = dict(num_runs=cfg.runs, num_canaries=cfg.canaries, confidence=cfg.confidence)
    if name == "engine":
      c = guard.check_claim(key, claim, **kw)
      true_eps = c.exact_epsilon
    else:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", variants.FaultyDpSgdWarning)
        c = guard.check_claim(key, claim, variant=name, **kw)
      true_eps = variants.exact_epsilon(name, claim)
    rows.append({"engine": name, "true_epsilon": true_eps, "delta": cfg.delta, **c.to_json()})
  sigma = float(claim.noise_multiplier)
  table = _common.Table(
      title=f"The engine's guard (claimed ε = {rows[0]['claimed_epsilon']:.3g}, exact "
            f"{rows[0]['exact_epsilon']:.3g}, δ = {cfg.delta:g}) and on its regressions",
      columns=["engine", "true ε of the training", "guard ε lower", "expected if correct",
               "falsified"],
      rows=[[r["engine"], r["true_epsilon"], r["epsilon_lower"],
             r["expected_epsilon_lower"], "yes" if r["falsified"] else "no"] for r in rows],
      digits=3,
      note=(f"q = {cfg.sampling_prob:g}, T = {cfg.steps}, σ = {sigma:.4g}; {cfg.runs} runs × "
            f"{cfg.canaries} canary records = {rows[0]['num_in']} IN / {rows[0]['num_out']} "
            f"OUT trials; bound at {100 * cfg.confidence:g}% confidence, a union bound over "
            "thresholds declared from the claim. Falsified: bound > exact ε of the claim. "
            "noise_half: noise σC/2; sampler_twice_q: masks at rate 2q; clip_four_c: clipping "
            "to 4C. No published figure exists for this construction."))
  engine_ok = not rows[0]["falsified"]
  caught = [r["engine"] for r in rows[1:] if r["falsified"]]
  summary = (f"The guard (a {rows[0]['num_in']} + {rows[0]['num_out']}-trial white-box audit) "
             f"{'passes' if engine_ok else 'FALSIFIES'} the engine as it is (bound "
             f"{rows[0]['epsilon_lower']:.2f} against exact ε {rows[0]['exact_epsilon']:.2f}) "
             f"and falsifies {len(caught)} of {len(rows) - 1} regressions"
             + (f" ({', '.join(caught)})" if caught else "") + ".")
  fig = _plot(out_dir, rows)
  return _common.finish(cfg, out_dir, NAME, {"rows": rows}, tables=[table], figures=[fig],
                        summary=summary, quiet=quiet)


def main():
  _common.app_run(NAME, AuditGuardConfig, run)


if __name__ == "__main__":
  main()
