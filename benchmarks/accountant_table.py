"""The closing table: our eps against dp_accounting's, row by row, with timings.

    .venv/bin/python -m benchmarks.accountant_table            # DP-SGD grid and events
    .venv/bin/python -m benchmarks.accountant_table --max_steps 10000   # a shorter grid
    .venv/bin/python -m benchmarks.accountant_table --min_steps 10000 --skip_events

Part 1, the DP-SGD grid (sigma 0.5-10, q 1e-4-1, T 1-1e6, delta 1e-10-1e-3; --max_steps
drops longer runs; rows whose eps / 1e-4 passes pld_grid.MAX_POINTS are skipped, as
dp_accounting's grid would exhaust memory): `pld.dpsgd_epsilon` (ours, adaptive), `pld.dpsgd_epsilon_never_looser`
(value and which answer won) and dp_accounting 0.6.0's `PLDAccountant` at its default grid
h = 1e-4. Part 2, events both libraries account: our `event_accounting` (PLD at h = 1e-4,
RDP at `rdp.DEFAULT_ORDERS`) against dp_accounting's accountant of the same event and
relation; PLD rows are also checked by `event_accounting.epsilon_never_looser` (value and
which answer won; RDP rows keep ours). A row is "<=" when the checked eps is at most
dp_accounting's (relative slack 1e-12); timings are of the plain answers.
Writes benchmarks/results/accountant_table.json.
"""

from __future__ import annotations

import itertools
import math

from absl import app, flags

from benchmarks import report

_JSON = flags.DEFINE_string("json", None, "Where to write the rows (default: "
                            "benchmarks/results/accountant_table.json).")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 1_000_000, "Longest DP-SGD run of the grid.")
_MIN_STEPS = flags.DEFINE_integer("min_steps", 1, "Shortest DP-SGD run of the grid.")
_SKIP_GRID = flags.DEFINE_bool("skip_grid", False, "Only the events part.")
_SKIP_EVENTS = flags.DEFINE_bool("skip_events", False, "Only the DP-SGD grid.")

SIGMAS = (0.5, 1.0, 2.0, 5.0, 10.0)
RATES = (1e-4, 1e-2, 1.0)
STEPS = (1, 1_000, 1_000_000)
DELTAS = (1e-10, 1e-5, 1e-3)


def _grid_rows(min_steps: int, max_steps: int) -> list[dict]:
  import dp_accounting  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import pld, pld_grid  # pylint: disable=import-outside-toplevel
  rows = []
  for sigma, q, t in itertools.product(SIGMAS, RATES, STEPS):
    if not min_steps <= t <= max_steps:
      continue
    # dp_accounting's grid spans eps at h = 1e-4: past pld_grid.MAX_POINTS it would exhaust
    # memory (q = 1, T = 1e6 needs ~1e10 points); such rows get no reference
    if pld.dpsgd_epsilon(sigma, q, t, min(DELTAS)) / 1e-4 > pld_grid.MAX_POINTS:
      print(f"sigma={sigma:g} q={q:g} T={t}: dp_accounting's grid would pass "
            f"{pld_grid.MAX_POINTS} points; skipped", flush=True)
      continue
    acct = dp_accounting.pld.PLDAccountant()
    t_dp, _ = report.best_time(lambda: acct.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma)), t), 1)
    for d in DELTAS:
      t_ours, ours = report.best_time(lambda: pld.dpsgd_epsilon(sigma, q, t, d), 1)
      t_read, theirs = report.best_time(lambda: acct.get_epsilon(d), 1)
      checked = pld.dpsgd_epsilon_never_looser(sigma, q, t, d)
      rows.append({"sigma": sigma, "q": q, "steps": t, "delta": d, "ours": ours,
                   "never_looser": checked.value, "winner": checked.winner,
                   "dp_accounting": theirs, "ours_s": t_ours, "dp_accounting_s": t_dp + t_read})
      _print(rows[-1], f"sigma={sigma:g} q={q:g} T={t} delta={d:g}")
  return rows


def _event_cases():
  """(name, our event, their event, relation, accountant, delta)."""
  import dp_accounting as dpa  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import events as ev  # pylint: disable=import-outside-toplevel
  g = lambda s: (ev.GaussianEvent(s), dpa.GaussianDpEvent(s))
  rr = lambda e, k: (ev.RandomizedResponseEvent(e, k),
                     dpa.RandomizedResponseDpEvent(k / (math.exp(e) + k - 1), k))
  cases = []
  for n, m, s, t in ((1000, 10, 1.0, 1000), (60000, 256, 1.1, 10000), (5000, 150, 3.0, 1000),
                     (1000, 100, 5.0, 100)):
    cases.append((f"wor n={n} m={m} sigma={s} T={t}",
                  ev.SelfComposedEvent(ev.SampledWithoutReplacementEvent(n, m, g(s)[0]), t),
                  dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, m, g(s)[1]),
                                          t), ev.REPLACE_ONE, "rdp", 1e-5))
  for s, q, n, b, t in ((1.0, 0.01, 1000, 12, 100), (1.0, 0.01, 1000, 15, 1000),
                        (1.1, 256 / 60000, 60000, 288, 1000), (2.0, 0.1, 100, 10, 50)):
    cases.append((f"truncated (removal pairs) sigma={s} q={q:.3g} n={n} B={b} T={t}",
                  ev.SelfComposedEvent(ev.TruncatedPoissonSampledGaussianEvent(
                      s, q, n, b, neighbours="removal"), t),    # dp_accounting's pairs
                  dpa.SelfComposedDpEvent(dpa.dp_event.TruncatedSubsampledGaussianDpEvent(n, q, b, s), t),
                  ev.ADD_REMOVE, "pld", 1e-5))
  for e, k in ((1.0, 2), (0.5, 5), (2.0, 10)):
    ours, theirs = rr(e, k)
    cases.append((f"rr special eps={e} k={k}", ours, theirs, ev.REPLACE_SPECIAL, "pld", 1e-6))
    cases.append((f"rr special eps={e} k={k} x10 (rdp)", ev.SelfComposedEvent(ours, 10),
                  dpa.SelfComposedDpEvent(theirs, 10), ev.REPLACE_SPECIAL, "rdp", 1e-6))
  for s, counts, epochs in ((1.0, (100,), 1), (4.0, (1000,), 5)):
    cases.append((f"tree sigma={s} steps={counts} epochs={epochs}",
                  ev.SelfComposedEvent(ev.TreeAggregationEvent(s, counts), epochs),
                  dpa.SelfComposedDpEvent(dpa.dp_event.SingleEpochTreeAggregationDpEvent(s, counts),
                                          epochs), ev.REPLACE_SPECIAL, "rdp", 1e-5))
  for b, q, t in ((1.0, 0.1, 50), (3.0, 0.01, 500)):
    cases.append((f"poisson laplace b={b} q={q} T={t}",
                  ev.SelfComposedEvent(ev.PoissonSampledEvent(q, ev.LaplaceEvent(b)), t),
                  dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.LaplaceDpEvent(b)), t),
                  ev.ADD_REMOVE, "pld", 1e-5))
  cases.append(("mixture of gaussians sigma=1 (0,1,2)/(0.5,0.3,0.2) x20",
                ev.SelfComposedEvent(ev.MixtureOfGaussiansEvent(1.0, (0.0, 1.0, 2.0),
                                                                (0.5, 0.3, 0.2)), 20),
                dpa.SelfComposedDpEvent(dpa.dp_event.MixtureOfGaussiansDpEvent(
                    1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2)), 20), ev.ADD_REMOVE, "pld", 1e-5))
  return cases


def _event_rows() -> list[dict]:
  import dp_accounting as dpa  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import event_accounting as ea  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import pld, rdp  # pylint: disable=import-outside-toplevel
  rel = {"add_remove": dpa.NeighboringRelation.ADD_OR_REMOVE_ONE,
         "replace_one": dpa.NeighboringRelation.REPLACE_ONE,
         "replace_special": dpa.NeighboringRelation.REPLACE_SPECIAL}
  rows = []
  for name, ours_ev, theirs_ev, relation, acc, d in _event_cases():
    t_ours, ours = report.best_time(lambda: ea.epsilon(ours_ev, d, acc, relation), 1)
    if acc == "rdp":
      make = lambda: dpa.rdp.RdpAccountant(list(rdp.DEFAULT_ORDERS), rel[relation])
    else:
      make = lambda: dpa.pld.PLDAccountant(rel[relation], 1e-4)

    def theirs_fn():
      a = make()
      a.compose(theirs_ev)
      return a.get_epsilon(d)
    t_dp, theirs = report.best_time(theirs_fn, 1)
    checked = (ea.epsilon_never_looser(ours_ev, d, relation) if acc == "pld"
               else pld.CheckedEpsilon(ours, ours, None, "dpjax"))
    rows.append({"case": name, "accountant": acc, "relation": relation, "delta": d,
                 "ours": ours, "never_looser": checked.value, "winner": checked.winner,
                 "dp_accounting": theirs, "ours_s": t_ours, "dp_accounting_s": t_dp})
    _print(rows[-1], f"{name} [{acc}, {relation}]")
  return rows


def _print(r: dict, label: str) -> None:
  ok = "<=" if r["never_looser"] <= r["dp_accounting"] * (1 + 1e-12) else ">"
  print(f"{label:60s} ours {r['ours']:12.6f} checked {r['never_looser']:12.6f} "
        f"({r['winner']}) {ok} dp_accounting {r['dp_accounting']:12.6f}  time ratio "
        f"{r['dp_accounting_s'] / max(r['ours_s'], 1e-9):7.2f}", flush=True)


def main(argv):
  del argv
  grid = [] if _SKIP_GRID.value else _grid_rows(_MIN_STEPS.value, _MAX_STEPS.value)
  events = [] if _SKIP_EVENTS.value else _event_rows()
  for label, rows in (("DP-SGD grid", grid), ("events", events)):
    if not rows:
      continue
    le = sum(r["never_looser"] <= r["dp_accounting"] * (1 + 1e-12) for r in rows)
    ours_le = sum(r["ours"] <= r["dp_accounting"] * (1 + 1e-12) for r in rows)
    faster = sum(r["dp_accounting_s"] >= r["ours_s"] for r in rows)
    print(f"{label}: {len(rows)} rows; checked <= dp_accounting in {le}, plain ours in "
          f"{ours_le}; ours at least as fast in {faster}")
  report.write("accountant_table", {"grid": grid, "events": events}, _JSON.value)


if __name__ == "__main__":
  app.run(main)
