"""The privacy statement of a DP-SGD run (lecture §4).

`accounting.statement`: neighbouring relation and privacy unit, the sampler assumed (Poisson),
eps at several delta by every accountant (RDP with its order, PLD with its discretisation error,
GDP CLT labelled approximate), delta against 1/n, the implied membership-inference trade-off
(TPR at FPR 0.1 %, 1 %, 10 %), and disagreements beyond stated errors.

Command:   python -m experiments.privacy_statement \
               --noise_multiplier 1.1 --sampling_prob 0.0042666667 \
               --num_steps 14063 --dataset_size 60000
           (the defaults: MNIST-sized, batch 256, 60 epochs; about 5-10 s of CPU)
Expected:  eps at delta = 1e-5: RDP 2.597 (order ~8), PLD 2.382 (± 2e-5), CLT 2.32 (under by
           ~2.4 %); delta < 1/n = 1.7e-5 but not << 1/n (flagged); TPR at FPR 1 % <= ~0.040.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dpjax import tradeoff
from dpjax.accounting import pld, statement
from experiments import _common, _plots

NAME = "privacy_statement"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivacyStatementConfig(_common.ExperimentConfig):
  """The DP-SGD run to state (defaults: MNIST-sized); nothing is random."""
  noise_multiplier: float = _common.option(1.1, "sigma (noise std / clip norm).", bounds=">0")
  sampling_prob: float = _common.option(256 / 60000, "Poisson sampling rate q.", bounds="(0,1]")
  num_steps: int = _common.option(14063, "T (60 epochs at q = 256/60000).", bounds=">=1")
  dataset_size: int = _common.option(60000, "n, the private dataset size.", bounds=">=1")
  deltas: tuple[float, ...] = _common.option((1e-5, 1e-6, 1e-8), "deltas to report.",
                                             bounds="(0,1)")


def _tradeoff_curve(st: statement.PrivacyStatement) -> dict:
  """The largest TPR at 60 FPRs: from the PLD's delta(eps) curve, and the CLT's."""
  fpr = np.logspace(-4, 0, 60)
  h = min([r.pld_value_discretization for r in st.rows if r.pld_value_discretization > 0] + [1e-3])
  composed = pld.gaussian_pld(st.noise_multiplier, st.sampling_prob,
                              value_discretization=h).self_compose(st.num_steps)
  e_max = 2.0 * max(r.pld_epsilon for r in st.rows) + 1.0
  return {"fpr": fpr.tolist(),
          "tpr_pld": np.asarray(tradeoff.pld_tpr_bound(composed, fpr, e_max)).tolist(),
          "tpr_clt": np.asarray(tradeoff.gaussian_tpr(fpr, st.clt_mu)).tolist()}


def _plot(out_dir: str, record: dict) -> str:
  """The trade-off curves, drawn from the record."""
  st, curve = record["statement"], record["tradeoff_curve"]
  fpr = curve["fpr"]
  name = "tradeoff.png"
  with _plots.figure(out_dir, name, figsize=(5, 4), dpi=110) as (fig, ax):
    ax.plot(fpr, curve["tpr_pld"], label="bound from the PLD delta(eps) curve")
    ax.plot(fpr, curve["tpr_clt"], "--", label=f"GDP CLT, mu = {st['clt_mu']:.3f} (approximate)")
    ax.plot(fpr, fpr, ":", color="gray", label="random guessing")
    _plots.decorate(ax, xscale="log", yscale="log", xlabel="false-positive rate",
                    ylabel="largest true-positive rate", legend=None)
    ax.set_title(f"sigma={st['noise_multiplier']:g}, q={st['sampling_prob']:.3g}, "
                 f"T={st['num_steps']}")
    ax.legend(fontsize=7)
  return name


def run(cfg: PrivacyStatementConfig, out_dir: str, *, progress: bool = True,
        quiet: bool = False) -> dict:
  """Builds and prints the statement; `_common.finish`'s dict plus "statement"."""
  del progress   # a few seconds, no loop worth a bar
  st = statement.privacy_statement(cfg.noise_multiplier, cfg.sampling_prob, cfg.num_steps,
                                   cfg.dataset_size, deltas=list(cfg.deltas))
  if not quiet:
    print(st.text())
  record = {"statement": st.to_dict(), "text": st.text(), "tradeoff_curve": _tradeoff_curve(st)}
  figures = [_plot(out_dir, record)]
  eps_table = _common.Table(
      title="eps by accountant (RDP and PLD are upper bounds; CLT is approximate)",
      columns=["delta", "RDP eps", "RDP order", "PLD eps", "PLD disc. error",
               "CLT eps (approx.)", "delta * n"],
      rows=[[r.delta, r.rdp_epsilon, r.rdp_order, r.pld_epsilon, r.pld_error,
             r.clt_epsilon, r.delta * st.dataset_size] for r in st.rows],
      note=("Add/remove-one neighbours, privacy unit one example, Poisson sampling. "
            + " ".join(st.delta_notes)), digits=4)
  tr_table = _common.Table(
      title="Membership inference: largest TPR at a given FPR",
      columns=["FPR", "TPR bound (PLD)", "TPR (CLT, approx.)"],
      rows=[[f, a, b] for f, a, b in zip(st.fprs, st.tpr_pld, st.tpr_clt)], digits=4)
  tables = [eps_table, tr_table]
  summary = (f"Privacy statement for sigma = {st.noise_multiplier:g}, q = "
             f"{st.sampling_prob:.4g}, T = {st.num_steps}, n = {st.dataset_size}. "
             + " ".join(st.disagreements))
  out = _common.finish(cfg, out_dir, NAME, record, tables=tables, figures=figures,
                       summary=summary, quiet=quiet)
  return {"statement": st, **out}


def main():
  _common.app_run(NAME, PrivacyStatementConfig, run)


if __name__ == "__main__":
  main()
