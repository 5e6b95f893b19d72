"""The privacy statement of a DP-SGD run (lecture §4; issue 3, item 4).

Prints in one place what a paper or a compliance review needs: the neighbouring
relation and privacy unit, the sampler assumed (Poisson), eps at several delta by
every accountant side by side (RDP with its optimal order, PLD with its
discretisation error, the GDP CLT figure labelled approximate), delta against 1/n,
the membership-inference trade-off (TPR at FPR 0.1 %, 1 %, 10 %) the guarantee
implies, and every disagreement between accountants beyond their stated errors.
The library function is `dpjax.accounting.statement.privacy_statement`.

Command:   python -m experiments.privacy_statement \
               --noise_multiplier 1.1 --sampling_prob 0.0042666667 \
               --num_steps 14063 --dataset_size 60000
           (the defaults: MNIST-sized, batch 256, 60 epochs; about 5 s on 2 CPU cores)
Expected:  eps at delta = 1e-5: RDP 2.597 (order ~8), PLD 2.382 (± 2e-5), CLT 2.32
           (approximate; it under-reports by ~2.4 %); delta = 1e-5 is < 1/n = 1.7e-5
           but not << 1/n (flagged); TPR at FPR 1 % at most ~0.040.
The lecture prints no privacy statement, so there is no lecture column.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from dpjax.accounting import gdp, pld, statement  # noqa: E402
from experiments import _common  # noqa: E402

NAME = "privacy_statement"


def _define_flags() -> dict:
  return {
      "noise_multiplier": flags.DEFINE_float("noise_multiplier", 1.1, "sigma (noise std / clip norm)."),
      "sampling_prob": flags.DEFINE_float("sampling_prob", 256 / 60000, "Poisson sampling rate q."),
      "num_steps": flags.DEFINE_integer("num_steps", 14063, "T (60 epochs at q = 256/60000)."),
      "dataset_size": flags.DEFINE_integer("dataset_size", 60000, "n, the private dataset size."),
      "deltas": flags.DEFINE_list("deltas", ["1e-5", "1e-6", "1e-8"], "deltas to report."),
  }


def _figure(out_dir: str, st: statement.PrivacyStatement, composed) -> str:
  fpr = np.logspace(-4, 0, 60)
  e_max = 2.0 * max(r.pld_epsilon for r in st.rows) + 1.0
  tpr_pld = statement.tradeoff_from_pld(composed, fpr, e_max)
  tpr_clt = gdp.tradeoff_tpr(fpr, st.clt_mu)
  fig, ax = plt.subplots(figsize=(5, 4))
  ax.plot(fpr, tpr_pld, label="bound from the PLD delta(eps) curve")
  ax.plot(fpr, tpr_clt, "--", label=f"GDP CLT, mu = {st.clt_mu:.3f} (approximate)")
  ax.plot(fpr, fpr, ":", color="gray", label="random guessing")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("false-positive rate")
  ax.set_ylabel("largest true-positive rate")
  ax.set_title(f"sigma={st.noise_multiplier:g}, q={st.sampling_prob:.3g}, T={st.num_steps}")
  ax.legend(fontsize=7)
  fig.tight_layout()
  name = "tradeoff.png"
  fig.savefig(f"{out_dir}/{name}", dpi=110)
  plt.close(fig)
  return name


def run(*, noise_multiplier: float, sampling_prob: float, num_steps: int,
        dataset_size: int, deltas=statement.DEFAULT_DELTAS, out_dir: str,
        flag_dict: dict | None = None, quiet: bool = False) -> dict:
  """Builds the statement, prints it, writes results.json and the trade-off figure.

  Returns:
    {"statement": PrivacyStatement, "path": path of results.json}.
  """
  st = statement.privacy_statement(noise_multiplier, sampling_prob, num_steps,
                                   dataset_size, deltas=[float(d) for d in deltas])
  if not quiet:
    print(st.text())
  h = min([r.pld_value_discretization for r in st.rows if r.pld_value_discretization > 0]
          + [1e-3])
  composed = pld.gaussian_pld(st.noise_multiplier, st.sampling_prob,
                              value_discretization=h).self_compose(st.num_steps)
  fig = _figure(out_dir, st, composed)
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
  summary = (f"Privacy statement for sigma = {st.noise_multiplier:g}, q = "
             f"{st.sampling_prob:.4g}, T = {st.num_steps}, n = {st.dataset_size}. "
             + " ".join(st.disagreements))
  path = _common.write_results(
      out_dir, NAME, flag_dict=flag_dict or {}, results={"statement": st.to_dict(), "text": st.text()},
      tables=[eps_table, tr_table], figures=[fig], summary=summary, quiet=quiet)
  return {"statement": st, "path": path}


def main(argv, f: dict):
  del argv
  out = _common.output_dir(NAME, _common.OUT.value)
  run(noise_multiplier=f["noise_multiplier"].value, sampling_prob=f["sampling_prob"].value,
      num_steps=f["num_steps"].value, dataset_size=f["dataset_size"].value,
      deltas=[float(d) for d in f["deltas"].value], out_dir=out,
      flag_dict=_common.flag_values(__name__))


if __name__ == "__main__":
  _flags = _define_flags()
  app.run(lambda argv: main(argv, _flags))
