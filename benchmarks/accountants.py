"""Benchmark: our RDP and PLD accountants against dp_accounting's, in one process.

    .venv/bin/python -m benchmarks.accountants    # writes benchmarks/results/accountants.json
    .venv/bin/python -m benchmarks.accountants --quick      # skips the T = 1e5 rows

Times eps(delta) by our RDP, our adaptive PLD, our PLD on dp_accounting's grid h = 1e-4, and
dp_accounting 0.6.0's `RdpAccountant` and `PLDAccountant` (best of --repeats; speed = their time
/ ours); every PLD answer against dp_accounting's PLD at h_ref = min(1e-5, eps / 5000). Also
times our adaptive PLD at dp_accounting's accuracy: the loosest rtol in RTOLS whose answer is
as close to the reference as dp_accounting's (|ours - ref| <= |dp_accounting - ref|).
"""

from __future__ import annotations

from absl import app, flags

from benchmarks import report

_JSON = flags.DEFINE_string("json", None, "Where to write the figures (default: "
                             "benchmarks/results/accountants.json).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (best is kept).")
_QUICK = flags.DEFINE_bool("quick", False, "Skip the T = 1e5 settings.")

# (sigma, q, T, delta)
SETTINGS = (
    (1.0, 0.01, 1_000, 1e-5),
    (1.0, 0.01, 10_000, 1e-5),          # the headline setting
    (1.0, 0.01, 100_000, 1e-5),
    (1.1, 256 / 60_000, 14_063, 1e-5),  # MNIST-sized, batch 256, 60 epochs
    (1.0, 1e-4, 1_000, 1e-5),           # tiny eps: a fixed 1e-4 grid is ~4 % high
    (0.8, 0.05, 5_000, 1e-6),
    (2.0, 0.001, 100_000, 1e-8),
)
RTOLS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)


def measure(settings=SETTINGS, repeats: int = 2) -> list[dict]:
  """Times and eps for every setting; returns one dict per setting."""
  import dp_accounting  # pylint: disable=import-outside-toplevel
  from dp_accounting.pld import privacy_loss_distribution as dp_pld  # pylint: disable=import-outside-toplevel

  from dpjax import accounting  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import pld  # pylint: disable=import-outside-toplevel

  def event(sigma, q):
    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))

  def dp_rdp(sigma, q, steps, delta):
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(event(sigma, q), steps)
    return acc.get_epsilon(delta)

  def dp_pld_acc(sigma, q, steps, delta):
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(event(sigma, q), steps)
    return acc.get_epsilon(delta)

  rows = []
  for sigma, q, steps, delta in settings:
    t_our_rdp, e_our_rdp = report.best_time(
        lambda: accounting.dpsgd_epsilon(sigma, q, steps, delta, accountant="rdp"), repeats)
    t_dp_rdp, e_dp_rdp = report.best_time(lambda: dp_rdp(sigma, q, steps, delta), repeats)
    t_our_pld, r = report.best_time(lambda: pld.dpsgd_epsilon_bound(sigma, q, steps, delta),
                                    repeats)
    t_dp_pld, e_dp_pld = report.best_time(lambda: dp_pld_acc(sigma, q, steps, delta), repeats)
    # Ours on dp_accounting's own grid (h = 1e-4): the same answer, so pure speed.
    t_fixed, e_fixed = report.best_time(
        lambda: pld.gaussian_pld(sigma, q, value_discretization=1e-4).self_compose(
            steps).epsilon(delta), repeats)
    h_ref = min(1e-5, max(r.value, 1e-3) / 5000)
    t_ref, e_ref = report.best_time(
        lambda: dp_pld.from_gaussian_mechanism(
            sigma, sampling_prob=q, value_discretization_interval=h_ref
        ).self_compose(steps).get_epsilon_for_delta(delta), 1)
    # Our adaptive PLD at dp_accounting's accuracy: the loosest rtol that is as close to ref.
    t_eq = e_eq = rtol_eq = None
    for rtol in RTOLS:
      e = pld.dpsgd_epsilon(sigma, q, steps, delta, rtol=rtol)
      if abs(e - e_ref) <= abs(e_dp_pld - e_ref):
        t_eq, e_eq = report.best_time(
            lambda: pld.dpsgd_epsilon(sigma, q, steps, delta, rtol=rtol), repeats)
        rtol_eq = rtol
        break
    row = {
        "sigma": sigma, "q": q, "steps": steps, "delta": delta,
        "ours_rdp_eps": e_our_rdp, "ours_rdp_s": t_our_rdp,
        "dp_rdp_eps": e_dp_rdp, "dp_rdp_s": t_dp_rdp,
        "rdp_speedup": t_dp_rdp / t_our_rdp,
        "ours_pld_eps": r.value, "ours_pld_error_estimate": r.error,
        "ours_pld_h": r.value_discretization, "ours_pld_s": t_our_pld,
        "dp_pld_eps": e_dp_pld, "dp_pld_s": t_dp_pld,
        "pld_speedup": t_dp_pld / t_our_pld,
        "ours_pld_fixed_1e-4_eps": e_fixed, "ours_pld_fixed_1e-4_s": t_fixed,
        "pld_fixed_grid_speedup": t_dp_pld / t_fixed,
        "ref_eps": e_ref, "ref_h": h_ref, "ref_s": t_ref,
        "ours_pld_minus_ref": r.value - e_ref, "dp_pld_minus_ref": e_dp_pld - e_ref,
        "equal_accuracy_rtol": rtol_eq, "equal_accuracy_eps": e_eq, "equal_accuracy_s": t_eq,
        "pld_speedup_equal_accuracy": None if t_eq is None else t_dp_pld / t_eq,
    }
    rows.append(row)
    print(f"sigma={sigma:g} q={q:.3g} T={steps} delta={delta:g}\n"
          f"  RDP  ours {e_our_rdp:10.5f} in {t_our_rdp:7.3f}s | dp_accounting "
          f"{e_dp_rdp:10.5f} in {t_dp_rdp:7.3f}s | speed-up x{row['rdp_speedup']:.2f}\n"
          f"  PLD  ours {r.value:10.6f} (h={r.value_discretization:.2g}, est. err "
          f"{r.error:.1e}) in {t_our_pld:7.3f}s | dp_accounting {e_dp_pld:10.6f} in "
          f"{t_dp_pld:7.3f}s | speed-up x{row['pld_speedup']:.2f}\n"
          f"  PLD  ours at dp_accounting's accuracy (rtol {rtol_eq}) {e_eq} in {t_eq} s\n"
          f"  PLD  ours on the same 1e-4 grid {e_fixed:10.6f} in {t_fixed:7.3f}s | "
          f"speed-up x{row['pld_fixed_grid_speedup']:.2f}\n"
          f"  reference (dp_accounting PLD, h={h_ref:.2g}) {e_ref:.6f}: ours - ref "
          f"{row['ours_pld_minus_ref']:+.2e}, dp_accounting - ref {row['dp_pld_minus_ref']:+.2e}",
          flush=True)
  return rows


def main(argv):
  del argv
  settings = [s for s in SETTINGS if not (_QUICK.value and s[2] >= 100_000)]
  rows = measure(settings, _REPEATS.value)
  print("\nsummary: speed-up = dp_accounting time / our time (same process)")
  print(f"{'sigma':>6} {'q':>8} {'T':>7} {'delta':>7} {'RDP x':>7} {'PLD x':>7} "
        f"{'PLD=acc x':>9} {'PLD@1e-4 x':>10} {'ours-ref':>10} {'dp-ref':>10}")
  for r in rows:
    print(f"{r['sigma']:6g} {r['q']:8.3g} {r['steps']:7d} {r['delta']:7.0e} "
          f"{r['rdp_speedup']:7.2f} {r['pld_speedup']:7.2f} "
          f"{r['pld_speedup_equal_accuracy'] or float('nan'):9.2f} {r['pld_fixed_grid_speedup']:10.2f} "
          f"{r['ours_pld_minus_ref']:+10.2e} {r['dp_pld_minus_ref']:+10.2e}")
  report.write("accountants", rows, _JSON.value)


if __name__ == "__main__":
  app.run(main)
