"""benchmarks/RESULTS.md from the benchmarks' JSON files, and the helpers that write them.

    .venv/bin/python -m benchmarks.report         # rewrites benchmarks/RESULTS.md

Each JSON file holds its figures with the command line, machine and package versions (`write`).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from typing import Any, Callable

from experiments import _config

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RESULTS_MD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
_PACKAGES = ("jax", "jaxlib", "numpy", "optax", "dp-accounting", "torch", "opacus")


def environment() -> dict:
  """CPU count and the versions of the packages the benchmarks time."""
  return {"cpu_count": os.cpu_count(), "python": sys.version.split()[0],
          **_config.package_versions(_PACKAGES)}


def peak_rss_bytes() -> int:
  """This process's peak resident bytes: VmHWM of /proc/self/status, else ru_maxrss."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write(name: str, figures: Any, path: str | None = None) -> str:
  """Writes {"benchmark", "command", "environment", "figures"} to `path` (default
  `benchmarks/results/<name>.json`); returns the path."""
  path = path or os.path.join(RESULTS_DIR, f"{name}.json")
  return dump(path, {"benchmark": name, "command": command(name),
                     "environment": environment(), "figures": figures})


def command(name: str) -> str:
  """This process's command line as `python -m benchmarks.<name> <args>`."""
  return "python -m benchmarks." + " ".join([name] + sys.argv[1:])


def dump(path: str, doc: dict) -> str:
  """Writes `doc` as sorted JSON to `path`; returns the path."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
    f.write("\n")
  print(f"wrote {path}")
  return path


def best_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
  """(the best of `repeats` timed calls of fn in seconds, what the last call returned)."""
  best, out = math.inf, None
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - t0)
  return best, out


def interleaved_times(fns: dict, repeats: int, log=None, uncompiled=()) -> tuple[dict, dict]:
  """(first-call s, best-of-`repeats` s) of each zero-argument function, timed round-robin so
  a burst of load hits all alike; `uncompiled` ones count their first call as a repeat."""
  first, best = {}, {}
  for k, f in fns.items():
    first[k] = best_time(f, 1)[0]
    if log:
      log(f"  warm-up {k}: {first[k]:.2f} s")
    best[k] = first[k] if k in uncompiled else math.inf
  for i in range(repeats):
    for k, f in fns.items():
      if not (k in uncompiled and i == repeats - 1):
        best[k] = min(best[k], best_time(f, 1)[0])
    if log:
      log(f"  repeat {i + 1}/{repeats}: " + ", ".join(f"{k} {v:.3f} s" for k, v in best.items()))
  return first, best


def flatten(d: dict, prefix: str = "") -> dict:
  """Nested dicts as one dict with dotted keys `prefix<k1>.<k2>...`."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def child_peak_rss(module: str, args: list[str], env: dict | None = None) -> int | None:
  """The {"peak_rss_bytes": ...} last line of `python -m benchmarks.<module> *args`, run in a
  fresh process from the repository root; None (stderr printed) if it failed."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, **(env or {}))
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  proc = subprocess.run([sys.executable, "-m", f"benchmarks.{module}"] + args,
                        capture_output=True, text=True, check=False, cwd=root, env=env)
  if proc.returncode != 0:
    print(f"[{module}] memory child {args} failed: {proc.stderr[-2000:]}")
    return None
  return int(json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss_bytes"])


def model_counts(text: str, flag: str) -> list[int]:
  """The comma-separated positive integers of a --models / --sizes flag value."""
  sizes = [int(v) for v in text.split(",") if v]
  if not sizes or min(sizes) < 1:
    raise ValueError(f"--{flag} must list positive integers, got {text!r}")
  return sizes


def emit(name: str, figures: dict, path: str | None) -> None:
  """`write(name, figures, path)` with keys prefixed `<name>.` if path is given, else prints."""
  figures = {f"{name}.{k}": v for k, v in figures.items()}
  if path:
    write(name, figures, path)
  else:
    for k, v in figures.items():
      print(f"{k}: {v}")


def _fmt(v, spec: str) -> str:
  return "–" if v is None else format(v, spec)


def _times(v) -> str:
  return _fmt(v, ".2f") + ("×" if v else "")


def _gib(v) -> str:
  return _fmt(v / 2**30 if v else None, ".2f")


def _pct(v, spec: str = ".1f") -> str:
  return _fmt(100 * v if v is not None else None, spec)


def _sizes(f: dict, suffix: str, prefix: str = "") -> list[int]:
  """The sorted M of the keys `<prefix>...M<M><suffix>` of figures f."""
  return sorted(int(k.split(".")[1][1:]) for k in f
                if k.startswith(prefix) and k.endswith(suffix))


def _head(title: str, doc: dict, *text: str, workloads=()) -> list[str]:
  """Title, command and machine; each large_n workload's own command where they differ."""
  cmds = {w: doc["figures"].get(f"{w}.command", doc["command"]) for w in workloads}
  command = (f"Command: `{doc['command']}`" if len(set(cmds.values())) <= 1 else
             "Commands: " + "; ".join(f"{_LARGE_N[w]} `{c}`" for w, c in cmds.items()))
  return [f"## {title}", "", f"{command}. {_env_line(doc)}", "", *text]


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
  return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
          + ["| " + " | ".join(r) + " |" for r in rows])


def _env_line(doc: dict) -> str:
  env = doc.get("environment", {})
  pk = ", ".join(f"{k} {v}" for k, v in env.items() if k not in ("cpu_count",) and v)
  return f"Machine: {env.get('cpu_count')} CPU cores; {pk}."


def _dpsgd_section(doc: dict) -> list[str]:
  f = doc["figures"]
  out = _head("DP-SGD engine (`benchmarks/dpsgd.py`, `benchmarks/dpsgd_deep.py`)", doc,
              "Audit workload: logistic regression, N = 150 records, D = 56 features, q = 0.2, "
              "T = 500, M models trained at once. `fast` is the engine's default (GLM closed "
              "form); `generic` the two-pass vmap(grad) path with `sqnorm` norms, `plain` the "
              "same without the norm identity, `one-pass` vmap(grad) in one pass (times are "
              "relative to the fast path's). NumPy is the lecture-style matrix code at its best "
              "BLAS thread count. `stand-in RNG` is the fast path with one multiply per mask bit "
              "and noise value in place of threefry and the inverse CDF (not random: the "
              "ceiling any exact sampler could reach); `RNG share` is the fast path's time "
              "that this removes. All timings interleaved, best of the repeats.", "")
  rows = []
  for m in _sizes(f, ".speedup_vs_numpy", "audit_workload.M"):
    g = lambda k, m=m: f.get(f"audit_workload.M{m}.{k}")
    rows.append([f"{m:,}", _fmt(g("numpy_models_per_s"), ",.0f"),
                 _fmt(g("dpjax_models_per_s"), ",.0f"), _fmt(g("speedup_vs_numpy"), ".2f") + "×",
                 _pct(g("fraction_of_peak") or None, ".0f") + " %",
                 _fmt(g("generic_slowdown_vs_fast"), ".2f"),
                 _fmt(g("generic_plain_slowdown_vs_fast"), ".2f"),
                 _fmt(g("generic_one_pass_slowdown_vs_fast"), ".2f"),
                 _times(g("stand_in_rng_speedup_vs_numpy")),
                 "–" if g("rng_share_of_fast") is None
                 else _pct(g("rng_share_of_fast"), ".0f") + " %"])
  out += _table(["M", "NumPy models/s", "dpjax models/s", "speed-up", "% of matmul peak",
                 "generic / fast time", "plain / fast", "one-pass / fast",
                 "stand-in RNG speed-up", "RNG share"], rows)
  if f.get("main_job.cpu_s") is not None:
    out += ["", f"Main job `python -m experiments.audit --trials {f['main_job.trials']}` "
            f"(`--main_job_trials`, a child process): {f['main_job.cpu_s']:.0f} CPU-s (user "
            f"{f['main_job.user_s']:.0f} + sys {f['main_job.sys_s']:.0f}), "
            f"{f['main_job.wall_s']:.0f} s wall at a 1-minute load average of "
            f"{f['main_job.load_average_1min_at_end']:.1f} on this machine's cores; target "
            f"under 60 CPU-s ({'met' if f['main_job.cpu_s'] < 60 else 'not met'})."]
  peak = f.get("audit_workload.matmul_peak.peak_gflops")
  rss = f.get("audit_workload.peak_rss_bytes_largest")
  out += ["", f"Float32 matmul peak {_fmt(peak, '.0f')} GFLOP/s; peak resident memory of a "
          f"fresh process training the largest M: {_gib(rss)} GiB.",
          ""]
  if any(k.startswith("mlp.") for k in f):
    out += ["Deep networks, batch 256, examples per second (`dpsgd_deep`): the non-private "
            "step, DP-SGD with per-example gradients by one-pass vmap(grad) (`naive`), the "
            "generic two-pass path, ghost clipping (the engine's default for MLP / CNN), and "
            "Opacus (hooks / ghost clipping, torch CPU, best of 1 and 2 threads; `–` when "
            "torch is not installed).", ""]
    rows = []
    for w, label in (("mlp", "MLP 64→256→256→10"), ("cnn", "CNN 8×8 (16, 32)"),
                     ("cnn28", "CNN 28×28 (16, 32)")):
      g = lambda k, w=w: f.get(f"{w}.{k}")
      if g("ghost_ex_per_s") is None:
        continue
      rows.append([label] + [_fmt(g(k), ",.0f") for k in (
          "nonprivate_ex_per_s", "naive_ex_per_s", "generic_ex_per_s", "ghost_ex_per_s",
          "opacus_hooks_ex_per_s", "opacus_ghost_ex_per_s")]
                  + [_fmt(g("overhead_vs_nonprivate"), ".2f") + "×", _times(g("speedup_vs_opacus"))])
    out += _table(["workload", "non-private", "naive", "generic", "ghost", "Opacus hooks",
                   "Opacus ghost", "non-private / ghost time", "ghost / best Opacus"], rows)
    out.append("")
  return out


def _dpsgd_chunks_section(doc: dict) -> list[str]:
  f = doc["figures"]
  out = _head("Engine chunk size on the main job's chunk (`benchmarks/dpsgd.py --chunk_sizes`)",
              doc, "One chunk of `experiments.audit --trials 10000` (2,000 models of the claim "
              "eps = 2, T = 500, one intra-op thread as the main job) trained with the "
              "engine's chunks capped at `max_chunk` models; K = 1 is the main job's chunk, "
              "K = 10 the multi-canary audit's. CPU seconds, best of the interleaved repeats; "
              "`compile` is the first call's CPU less the best call's (a max_chunk at or above "
              "2,000 reuses the 2,000-model program). `identical`: parameters and "
              "observations equal those at the first size bit for bit. Measured under load "
              f"(1-minute load average {_fmt(f.get('load_average_1min_at_end'), '.1f')} on "
              "2 cores): ratios, not absolute times.", "")
  rows = []
  for key in sorted((k for k in f if k.startswith("K")),
                    key=lambda k: (int(k[1:].split(".")[0]), int(k.split("chunk")[1]))):
    g = f[key]
    k, mc = key[1:].split(".chunk")
    rows.append([k, f"{int(mc):,}", _fmt(g["cpu_s"], ".3f"), _fmt(g["cpu_ratio_vs_largest"], ".2f"),
                 _fmt(g["compile_cpu_s"], ".1f"), "yes" if g["identical"] else "NO"])
  return out + _table(["K", "max_chunk", "CPU-s per chunk", "/ largest", "compile CPU-s",
                       "identical"], rows) + [""]


def _accountants_section(doc: dict) -> list[str]:
  rows = [[f"{r['sigma']:g}, {r['q']:.3g}, {r['steps']:,}, {r['delta']:g}",
           f"{r['ours_rdp_eps']:.4f}", f"{r['rdp_speedup']:.1f}×",
           f"{r['ours_pld_eps']:.6f}", f"{r['dp_pld_eps']:.6f}",
           _ratio_vs_target(r["pld_speedup"], 1.0, False),
           (f"{r['pld_speedup_equal_accuracy']:.2f}× (rtol {r['equal_accuracy_rtol']:g})"
            if r.get("pld_speedup_equal_accuracy") else "–"),
           f"{r['ours_pld_minus_ref']:+.1e}",
           f"{r['dp_pld_minus_ref']:+.1e}", f"{r['pld_fixed_grid_speedup']:.1f}×"]
          for r in doc["figures"]]
  return (_head("Accountants (`benchmarks/accountants.py`)", doc,
                "Speed-up = dp_accounting's time / ours, in one process, best of the repeats (the "
                "machine is shared: absolute times drift, ratios less). `ref` is dp_accounting's "
                "PLD on a fine grid (h = min(1e-5, ε/5000)). `PLD speed-up`: our adaptive PLD at "
                "its default rtol = 1e-5; `at equal accuracy`: at the loosest rtol in 1e-2 … 1e-7 "
                "whose answer is as close to ref as dp_accounting's. `same grid` times our PLD on "
                "dp_accounting's default grid (h = 1e-4), where the two give the same answer.", "")
          + _table(["σ, q, T, δ", "ours RDP ε", "RDP speed-up", "ours PLD ε (adaptive)",
                    "dp_accounting PLD ε", "PLD speed-up", "PLD speed-up at equal accuracy",
                    "ours − ref", "dp_accounting − ref", "same-grid speed-up"], rows) + [""])


def _accountant_table_section(doc: dict) -> list[str]:
  f = doc["figures"]
  le = lambda r, k: r[k] <= r["dp_accounting"] * (1 + 1e-12)
  summary = []
  for label, rows in (("DP-SGD grid", f.get("grid", [])), ("events", f.get("events", []))):
    wins = {}
    for r in rows:
      wins[r["winner"]] = wins.get(r["winner"], 0) + 1
    summary.append([label, str(len(rows)), str(sum(le(r, "never_looser") for r in rows)),
                    str(sum(le(r, "ours") for r in rows)),
                    ", ".join(f"{k} {v}" for k, v in sorted(wins.items())),
                    str(sum(r["dp_accounting_s"] >= r["ours_s"] for r in rows))])
  above = [[f"{r['sigma']:g}, {r['q']:g}, {r['steps']:,}, {r['delta']:g}",
            f"{r['ours']:.6f}", f"{r['never_looser']:.6f} ({r['winner']})",
            f"{r['dp_accounting']:.6f}"]
           for r in f.get("grid", []) if not le(r, "never_looser")]
  events = [[r["case"], r["accountant"], r["relation"], f"{r['delta']:g}", f"{r['ours']:.12g}",
             f"{r['never_looser']:.12g} ({r['winner']})", f"{r['dp_accounting']:.12g}",
             f"{(r['ours'] - r['dp_accounting']) / r['dp_accounting']:+.1e}",
             f"{r['dp_accounting_s'] / max(r['ours_s'], 1e-9):.2f}×"] for r in f.get("events", [])]
  return (_head("Accountants against dp_accounting, row by row (`benchmarks/accountant_table.py`)",
                doc, "`checked`: `pld.dpsgd_epsilon_never_looser` (grid) and "
                "`event_accounting.epsilon_never_looser` (PLD event rows; RDP rows keep ours), "
                "which take dp_accounting's ε only where our finer pessimistic grid proves it. A "
                "row counts as ≤ when the ε is at most dp_accounting's (relative slack 1e-12). "
                "Speed = dp_accounting's time / our plain answer's, one run each, under load "
                "(sub-millisecond rows are timer noise).", "")
          + _table(["part", "rows", "checked ≤ dp_accounting", "plain ours ≤", "winner",
                    "ours at least as fast"], summary)
          + ["", "Grid rows still above dp_accounting (its ε there is below the true ε: "
             "tests/pld_dpsgd_test.py certifies each):", ""]
          + _table(["σ, q, T, δ", "ours", "checked", "dp_accounting"], above)
          + ["", "Event rows:", ""]
          + _table(["case", "accountant", "relation", "δ", "ours", "checked",
                    "dp_accounting", "ours / theirs − 1", "speed"], events) + [""])


def _peer_value(v) -> str:
  return "–" if v is None else f"{v:.10g}"


def _peer_asked(r: dict) -> str:
  if r["query"] == "epsilon":
    return f"ε at δ = {r['value']:g}"
  if r["query"] == "delta":
    return f"δ at ε = {r['value']:g}"
  if r["query"] == "noise":
    return f"σ for ε = {r['value'][0]:g}, δ = {r['value'][1]:.3g}"
  return f"RDP at α = {r['order']:.6g} (worst of {r['orders']})"


def _peer_cases_section(doc: dict) -> list[str]:
  f = doc["figures"]
  rows, unsupported = [], []
  for r in f["rows"]:
    src = f"{r['source']} `{os.path.basename(r['path'])}` {r['test'].split('.')[-1]}"
    if "unsupported" in r:
      unsupported.append(f"- {r['name']} ({src}): {r['unsupported']}")
      continue
    what = _peer_asked(r)
    ok = "≤" if r["le"] else "**>**"
    fd = ("–" if "front_door" not in r else
          f"{r['front_door']:.10g} {'≤' if r['front_door_le'] else '**>**'}")
    rows.append([r["name"], src, f"{r['accountant']}, {r['relation'].replace('_', '-')}", what,
                 _peer_value(r["ours"]), _peer_value(r["dp_accounting"]), ok,
                 f"{r['rel_gap']:+.1e}", fd, f"{r['time_ratio']:.2f}×",
                 r.get("certificate", "")])
  shared = [r for r in f["rows"] if "unsupported" not in r]
  le = sum(r["le"] for r in shared)
  fd_rows = [r for r in shared if "front_door" in r]
  faster = sum(r["time_ratio"] >= 1 for r in shared)
  above = [r for r in shared if not r["le"]]
  worst = max((r["rel_gap"] for r in above), default=0.0)
  text = [f"{len(shared)} shared cases; ours ≤ dp_accounting 0.6.0 in {le}, above in "
          f"{len(above)} (largest relative gap {worst:+.1e}); on the {len(fd_rows)} DP-SGD PLD "
          f"ε rows the front door `accounting.dpsgd_epsilon(..., \"pld\")` is ≤ in "
          f"{sum(r['front_door_le'] for r in fd_rows)}, so with it ours is ≤ in "
          f"{sum(r['le'] or r.get('front_door_le', False) for r in shared)}. Ours at least as "
          f"fast in {faster} "
          f"(time ratio = dp_accounting's time / ours, one process, best of the repeats for "
          "rows under 0.2 s; the machine is shared, so absolute times drift and small ratios "
          "are noisy).", "",
          "Cases are the peers' own accountant tests (sources pinned in "
          "`benchmarks/peer_cases.py`); ours is dpjax's event accountant "
          "(`event_accounting`, PLD on h = 1e-4, for DP-SGD events the smaller of that and the "
          "front door's adaptive grid; RDP at `rdp.DEFAULT_ORDERS` unless the test "
          "sets orders; calibration rows: `accounting.calibrate_noise`), theirs dp_accounting's "
          "RdpAccountant / PLDAccountant (default orders, h = 1e-4; calibration: "
          "`calibrate_dp_mechanism`, both to 1e-7). ≤ means ours ≤ theirs·(1 + 1e-12) "
          "(calibration: 1 + 1e-6). A row above says whether dp_accounting's value is certified "
          "below the true one (exact μ-GDP, or a lower bound on δ from "
          "`pld_pmfs._dominated_discretise`).", ""]
  out = (_head("Peer test cases against dp_accounting (`benchmarks/peer_cases.py`)", doc, *text)
         + _table(["case", "source", "accountant, relation", "asked", "ours", "dp_accounting",
                   "", "rel. gap", "front door (DP-SGD)", "time ratio", "if above"], rows)
         + [""])
  if unsupported:
    out += ["Cases dpjax cannot compute:", "", *unsupported, ""]
  out += ["Left out (not shared):", ""] + [f"- {s} `{p}` {t}: {why}"
                                            for s, p, t, why in f["not_shared"]] + [""]
  return out


def _secure_noise_section(doc: dict) -> list[str]:
  f = doc["figures"]
  rows = [[f"{m:,}", _fmt(f.get(f"secure_noise.M{m}.float_s"), ".3f"),
           _fmt(f.get(f"secure_noise.M{m}.secure_s"), ".3f"),
           _ratio_vs_target(f.get(f"secure_noise.M{m}.secure_over_float"), 3.0, True)]
          for m in _sizes(f, ".secure_over_float")]
  return (_head("Secure DP-SGD (`benchmarks/secure_noise.py`)", doc,
                "The audit workload of `benchmarks.dpsgd` (logistic regression, N = 150, D = 56, "
                "q = 0.2, T = 500) trained with float32 noise and with "
                "`privatizer.secure_components` (grid clipping, exact integer noise), "
                "interleaved in one process, best of the repeats (s).", "")
          + _table(["M", "float (s)", "secure (s)", "secure / float"], rows) + [""])


def _audit_canaries_section(doc: dict) -> list[str]:
  f = doc["figures"]
  k = f.get("audit_canaries.canaries")
  rows = [[f"{m:,}", name, _fmt(f.get(f"audit_canaries.M{m}.{one}_s"), ".2f"),
           _fmt(f.get(f"audit_canaries.M{m}.{many}_s"), ".2f"),
           _ratio_vs_target(f.get(f"audit_canaries.M{m}.{tag}multi_over_single"), 3.0, True),
           _fmt(f.get(f"audit_canaries.M{m}.trials_per_s_{one}"), ",.0f"),
           _fmt(f.get(f"audit_canaries.M{m}.trials_per_s_{many}"), ",.0f")]
          for m in _sizes(f, ".multi_over_single")
          for name, tag, one, many in (("parameter-leaf canaries", "", "single", "multi"),
                                       ("fixed-gradient canaries", "fixed_", "single",
                                        "multi_fixed"))]
  return (_head("Multi-canary audit (`benchmarks/audit_canaries.py`)", doc,
                f"One chunk of M audit models (`experiments.audit`'s chunk, trained and scored) "
                f"with 1 canary against {k} canaries per run, interleaved in one process, best "
                "of the repeats (s): the default layout (canaries in a parameter leaf the "
                "records' clipping never touches, likelihood ratios summed inside the scan) "
                "and fixed-gradient canaries in the data's unused features, every step "
                "observed (`canary_layout=\"fixed_gradients\"`).", "")
          + _table(["M", "layout", "1 canary (s)", f"{k} canaries (s)", "ratio",
                    "white-box trials/s (1)", f"white-box trials/s ({k})"], rows) + [""])


def _ratio_vs_target(v, target, at_most: bool) -> str:
  """'1.21× (target ≤ 1.3×: met)'; '–' when v is missing."""
  if v is None:
    return "–"
  met = v <= target if at_most else v >= target
  return (f"{v:.2f}× (target {'≤' if at_most else '≥'} {target:g}×: {'met' if met else 'missed'})")


def _compile_timing(f: dict) -> str:
  """How a large_n file's compile times were measured."""
  return ("`jax.jit(...).lower(...).compile()` of each program, timed apart"
          if f.get("compile_timing") == "aot" else "first call − best call")


def _large_n_section(doc: dict) -> list[str]:
  f = doc["figures"]
  names = [w for w in _LARGE_N if f.get(f"{w}.dp_padded_epoch_s") is not None]
  labels = _LARGE_N
  n, b, t = f.get("n"), f.get("batch"), f.get("steps_per_epoch")
  out = _head(f"DP-SGD at n = {n:,} (`benchmarks/large_n.py`)", doc,
         f"One epoch on {n:,} synthetic 28×28×1 images in 10 classes (class templates plus "
         f"pixel noise), expected batch {b} (q = {b}/{n:,}), T = {t} steps, C = "
         f"{f.get('l2_clip_norm'):g}, σ = {f.get('noise_multiplier'):g}, in one process, "
         "interleaved, best of the repeats, compilation excluded (reported apart). "
         "`non-private`: plain SGD on fixed batches of a shuffled permutation in one jitted "
         "`lax.scan` (the CNN's convolutions as im2col matmuls, on XLA:CPU much faster "
         "than the gradient of `lax.conv`). `DP`: `dpsgd.train_one` with its default "
         "`batch_capacity=\"auto\"` (Poisson batches gathered into buffers of K rows, ghost "
         "clipping), timed end to end. `full mask`: `batch_capacity=None`, every record's "
         "gradient at every step; its epoch is estimated from timed steps (per step = "
         "(t(k2 steps) − t(k1 steps)) / (k2 − k1), epoch = t(k1) + (T − k1) × per step). "
         "`Opacus`: ghost clipping and Poisson sampling, one epoch of its data loader, "
         "torch CPU at its better thread count.", "", workloads=names)
  rows = []
  for w in names:
    g = lambda k, w=w: f.get(f"{w}.{k}")
    # Scaled up from a smaller n, the full mask's time is a lower bound (the note below).
    bound = "≥ " if g("full_mask_timed_n") not in (None, n) else ""
    rows.append([labels[w], str(g("capacity")), _fmt(g("nonprivate_epoch_s"), ".2f"),
                 _fmt(g("dp_padded_epoch_s"), ".2f"),
                 bound + _fmt(g("full_mask_epoch_s"), ",.0f"),
                 _fmt(g("opacus_epoch_s"), ".1f"),
                 _ratio_vs_target(g("dp_over_nonprivate"), g("target_dp_over_nonprivate"), True),
                 _ratio_vs_target(g("full_mask_over_padded"),
                                  g("target_full_mask_over_padded"), False),
                 _times(g("opacus_over_ours"))])
  out += _table(["workload", "K", "non-private epoch (s)", "DP epoch (s)",
                 "full-mask epoch (s, est.)", "Opacus epoch (s)", "DP / non-private",
                 "full mask / DP", "Opacus / DP"], rows)
  out.append("")
  for w in names:
    g = lambda k, w=w: f.get(f"{w}.{k}")
    tn = g("full_mask_timed_n")
    line = (f"{labels[w]}, full mask: steps {g('full_mask_steps_timed')} timed at n = {tn:,}")
    if tn != n:
      line += (f" (at n = {n:,} its clipped sum alone needs "
               f"{g('full_mask_temp_bytes') / 2**30:.1f} GiB of XLA temporaries, more than "
               f"half this machine's memory) and scaled by {n / tn:g}, a lower bound: the "
               "step's cost grows at least in proportion to n")
    line += f"; {_fmt(g('full_mask_per_step_s'), '.2f')} s per step at n = {n:,}"
    if g("full_mask_linearity") is not None:
      line += (f"; the same step at n = {g('full_mask_small_n'):,} costs "
               f"{g('full_mask_linearity'):.2f} × (its share n / {n:,}) of the step at "
               f"n = {n:,} (1 = exactly proportional to n)")
    out += [line + ".", ""]
  why = [f.get(f"{w}.opacus_skipped") for w in names if f.get(f"{w}.opacus_skipped")]
  if why:
    out += [f"Opacus not timed: {why[0]}. Install torch and opacus (torch's CPU build) "
            "beside the venv's packages to fill that column.", ""]
  rows = []
  for w in names:
    g = lambda k, w=w: f.get(f"{w}.{k}")
    mem = lambda c, g=g: _gib(g(f"peak_rss_bytes.{c}"))
    acc = lambda c, g=g: _pct(g(f"accuracy.{c}"))
    rows.append([labels[w], _fmt(g("compile_s.nonprivate"), ".1f"),
                 _fmt(g("compile_s.dp_padded"), ".1f"), _fmt(g("compile_s.full_mask"), ".1f"),
                 mem("data_only"), mem("nonprivate"), mem("dp_padded"), mem("full_mask"),
                 mem("opacus"), acc("nonprivate"), acc("dp_padded"), acc("opacus")])
  remeasured = (f" (for the workloads it names, by `{doc['memory_command']}`)"
                if doc.get("memory_command") else "")
  out += [f"Compile time ({_compile_timing(f)}, s), peak resident memory of a fresh "
          f"process running the configuration once{remeasured} (GiB, the process's VmHWM; "
          "`data only` builds the data and exits; the full mask's at the n it was timed "
          "at; Opacus's over 20 steps), and test accuracy (%) after the epoch (a sanity "
          "check that every configuration trains):", ""]
  out += _table(["workload", "compile non-private", "compile DP", "compile full mask",
                 "RSS data only", "RSS non-private", "RSS DP", "RSS full mask", "RSS Opacus",
                 "acc. non-private", "acc. DP", "acc. Opacus"], rows)
  out.append("")
  rows = []
  for w in names:
    g = lambda k, w=w: f.get(f"{w}.profile.{k}")
    if g("mask") is None:
      continue
    rows.append([labels[w]] + [_fmt(g(k), ".3f") for k in _PROFILE_PARTS]
                + [_fmt(f.get(f"{w}.dp_padded_epoch_s"), ".3f"),
                   _fmt(f.get(f"{w}.nonprivate_epoch_s"), ".3f")])
  if rows:
    out += ["Where the DP epoch's time goes (s per epoch, each part a jitted scan over the "
            "T steps): `mask` the Poisson mask over n records, `pad` mask + the K indices "
            "(`sampling.padded_batch`), `gather` those + gathering the K rows, `clipped "
            "sum` the ghost clipped sum on fixed batches of K rows, `noise + update` the "
            "Gaussian noise, the division by B and the SGD update alone, `fixed-batch DP` "
            "the last two together, `host check` the engine's validation of the records "
            "on each call.", ""]
    out += _table(["workload", "mask", "pad", "gather", "clipped sum", "noise + update",
                   "fixed-batch DP", "host check", "DP epoch", "non-private epoch"], rows)
    out.append("")
  return out


def _large_n_batches_section(doc: dict) -> list[str]:
  """`benchmarks.large_n --batches`: DP over non-private epochs at several batch sizes."""
  f = doc["figures"]
  labels = _LARGE_N
  n, batches = f.get("n"), f.get("batches", [])
  names = [w for w in labels if any(f.get(f"{w}.B{b}.dp_epoch_s") is not None
                                    for b in batches)]
  out = _head(f"DP overhead by batch size, n = {n:,} (`benchmarks/large_n.py --batches`)", doc,
         "One epoch (T = round(n / B) steps) at each expected batch B, C = "
         f"{f.get('l2_clip_norm'):g}, σ = {f.get('noise_multiplier'):g}: `non-private` and "
         "`DP` as in the section above (DP: `dpsgd.train_one`, `batch_capacity=\"auto\"`, "
         "padded buffers of K rows), every configuration of a workload timed interleaved in "
         "one process, best of the repeats, compilation excluded. Wall: seconds; CPU: "
         "seconds of CPU time of the process (all threads), steadier than wall time on a "
         "shared machine. Targets: DP / non-private ≤ 1.6× at B = 256, ≤ 1.3× at "
         "B ≥ 1,024.", "", workloads=names)
  rows, rows2 = [], []
  for w in names:
    for b in batches:
      g = lambda k, w=w, b=b: f.get(f"{w}.B{b}.{k}")
      if g("dp_epoch_s") is None:
        continue
      target = g("target_dp_over_nonprivate")
      rows.append([labels[w], f"{b:,}", str(g("capacity")), str(g("steps_per_epoch")),
                   _fmt(g("nonprivate_epoch_s"), ".2f"), _fmt(g("dp_epoch_s"), ".2f"),
                   _ratio_vs_target(g("dp_over_nonprivate"), target, True),
                   _fmt(g("nonprivate_epoch_cpu_s"), ".2f"), _fmt(g("dp_epoch_cpu_s"), ".2f"),
                   _ratio_vs_target(g("dp_over_nonprivate_cpu"), target, True),
                   _fmt(g("opacus_epoch_s"), ".1f"), _times(g("opacus_over_ours"))])
      mem = lambda c, g=g: _gib(g(f"peak_rss_bytes.{c}"))
      acc = lambda c, g=g: _pct(g(f"accuracy.{c}"))
      rows2.append([labels[w], f"{b:,}", _fmt(g("compile_s.nonprivate"), ".1f"),
                    _fmt(g("compile_s.dp"), ".1f"), mem("nonprivate"), mem("dp_padded"),
                    acc("nonprivate"), acc("dp")])
  out += _table(["workload", "B", "K", "T", "non-private wall (s)", "DP wall (s)",
                 "DP / non-private, wall", "non-private CPU (s)", "DP CPU (s)",
                 "DP / non-private, CPU", "Opacus wall (s)", "Opacus / DP"], rows)
  why = [f[k] for k in sorted(f) if k.endswith(".opacus_skipped")]
  if why:
    out += ["", f"Opacus not timed: {why[0]}."]
  out += ["", f"Compile time ({_compile_timing(f)}, s, wall), peak resident memory of a fresh "
          "process running the configuration once (GiB, VmHWM; – when not measured), and "
          "test accuracy (%) after the epoch:", ""]
  out += _table(["workload", "B", "compile non-private", "compile DP", "RSS non-private",
                 "RSS DP", "acc. non-private", "acc. DP"], rows2)
  prof = [(w, b) for w in names for b in batches if f.get(f"{w}.B{b}.profile.mask") is not None]
  if prof:
    out += ["", "Where the DP epoch's time goes (wall s per epoch, parts as in the section "
            "above):", ""]
    parts = _PROFILE_PARTS
    out += _table(["workload", "B"] + [p.replace("_", " ") for p in parts] + ["DP epoch"],
                  [[labels[w], f"{b:,}"] + [_fmt(f.get(f"{w}.B{b}.profile.{p}"), ".3f")
                                            for p in parts]
                   + [_fmt(f.get(f"{w}.B{b}.dp_epoch_s"), ".3f")] for w, b in prof])
  return out + [""]


def _pate_teachers_section(doc: dict) -> list[str]:
  f = doc["figures"]
  rows = []
  for m in f.get("teachers", []):
    g = lambda k, m=m: f.get(f"M{m}.{k}")
    temp, rss = g("xla_temp_bytes"), g("peak_rss_bytes")
    rows.append([f"{m:,}", f"{g('records'):,}", _fmt(g("vmapped_s"), ".3f"),
                 _fmt(g("vmapped_first_call_s"), ".2f"),
                 f"{_fmt(g('loop_s'), '.2f')} ({g('loop_timed_teachers')} timed)",
                 _fmt(g("loop_over_vmapped"), ".1f") + "×",
                 _fmt(g("teachers_per_s_vmapped"), ",.0f"), _fmt(g("max_param_diff"), ".1e"),
                 _fmt(temp / 2**20 if temp is not None else None, ".1f"), _gib(rss)])
  return (_head("PATE teachers (`benchmarks/pate_teachers.py`)", doc,
                f"M logistic-regression teachers ({f.get('features')} linear credit features), "
                f"{f.get('per_teacher')} records each on disjoint partitions, full-batch Adam, "
                f"{f.get('steps')} steps. `vmapped`: `pate.fit_non_private` on the M × N "
                "partition mask, one jitted program (best of the repeats; its first call, "
                "compile included, apart). `loop`: a Python loop calling `pate.fit_non_private` "
                "on one teacher's records at a time (compiled once beforehand), timed over the "
                "first teachers and scaled to M. `max Δ params`: the largest absolute difference "
                "between the loop's and the vmapped parameters of the timed teachers (the same "
                "fits).", "")
          + _table(["M", "records", "vmapped (s)", "first call (s)", "loop (s, scaled)",
                    "loop / vmapped", "teachers/s", "max Δ params", "XLA temp (MiB)",
                    "peak RSS (GiB)"], rows) + [""])


def _accelerator_section(doc: dict) -> list[str]:
  """One accelerator run (`benchmarks/accelerator.py`): its targets, met or not."""
  f = doc["figures"]
  dev = f["device"]
  size = " (toy sizes, --small: a check of the script, not a measurement)" if f["small"] else ""
  rows = [["audit workload (`benchmarks.dpsgd`)", f["audit.status"], f"{f['audit.wall_s']:.0f}",
           "; ".join(f"M = {m:,}: {f[f'audit.M{m}.dpjax_models_per_s']:,.0f} models/s, "
                     f"{_fmt(f.get(f'audit.M{m}.speedup_vs_numpy'), '.2f')}x NumPy (host CPU)"
                     for m in _sizes(f, ".dpjax_models_per_s"))]]
  for k in sorted(k for k in f if k.startswith("large_n.") and k.endswith(".status")):
    b = k.split(".")[1]
    g = lambda key, b=b: f.get(f"large_n.{b}.{key}")
    ratio = g("dp_over_nonprivate")
    target = 1.6 if b == "B256" else 1.3
    rows.append([f"MLP epoch, n = {g('n'):,}, B = {b[1:]} (`benchmarks.large_n`)", f[k], "–",
                 f"DP {_fmt(g('dp_padded_epoch_s'), '.2f')} s / non-private "
                 f"{_fmt(g('nonprivate_epoch_s'), '.2f')} s = {_fmt(ratio, '.2f')}x "
                 f"(target {target}x: {'met' if ratio and ratio <= target else 'not met'}); "
                 f"compile DP {_fmt(g('compile_s.dp_padded'), '.1f')} s, non-private "
                 f"{_fmt(g('compile_s.nonprivate'), '.1f')} s"])
  wall = f["main_job.wall_s"]
  rows.append([f"main job, `experiments.audit --trials {f['main_job.trials']}`",
               f["main_job.status"], f"{wall:.0f}",
               f"wall time with compilation (target 10 s on an H200-class GPU: "
               f"{'met' if wall <= 10 and f['main_job.status'] == 'ok' else 'not met'})"])
  return ([f"## On {dev['kind']} ({dev['platform']}, {dev['count']} device(s)){size}", "",
           f"Command: `benchmarks/accelerator.sh`. {_env_line(doc)}", ""]
          + _table(["step", "status", "wall (s)", "figures"], rows) + [""])


def _before(doc: dict, w: str) -> str:
  """The compile ratios of workload w in the `_before` run, "wall× / CPU×" (– if absent)."""
  f = doc.get("before", {}).get("figures", {})
  wall, cpu = f.get(f"{w}.compile_ratio"), f.get(f"{w}.compile_cpu_ratio")
  return "–" if wall is None else f"{wall:.2f}× / {_times(cpu)}"


def _compile_time_section(doc: dict) -> list[str]:
  f = doc["figures"]
  n, m = f"n = {f.get('n_mlp', 0):,}", f"M = {f.get('models_audit', 0):,}"
  names = {"mlp": f"MLP, {n}, one model (padded Poisson batches, ghost)",
           "mlp_full_mask": f"MLP, {n}, full mask (batch_capacity=None)",
           "mlp_vmap": f"MLP, {n}, per-example vmap(grad) two-pass path",
           "cnn": f"CNN 28×28, {n}, one model (padded, ghost)",
           "audit": f"audit workload, {m} (GLM, unrolled steps)",
           "audit_secure": f"audit workload, {m}, secure (grid clipping, integer noise)"}
  rows = []
  for w, name in names.items():
    g = lambda k, w=w: f.get(f"{w}.{k}")
    if g("compile_ratio") is None:
      continue
    ratio, cpu = g("compile_ratio"), g("compile_cpu_ratio")
    rows.append([name] + [_fmt(g(f"{p}.{k}"), spec) for p in ("nonprivate", "dp")
                          for k, spec in (("lower_s", ".2f"), ("compile_s", ".2f"),
                                          ("compile_cpu_s", ".2f"), ("hlo_ops", ",d"))]
                + [f"{ratio:.2f}× ({'met' if ratio <= f['target'] else 'missed'})",
                   "–" if cpu is None else
                   f"{cpu:.2f}× ({'met' if cpu <= f['target'] else 'missed'})",
                   _times(g("run_ratio")), _before(doc, w)])
  return (_head("Compile time (`benchmarks/compile_time.py`)", doc,
                "The engine's program (`dpsgd.program`) and the matching non-private one (optax "
                "SGD on permuted batches, same T, parameters initialised inside the program as "
                "the DP one does), lowered and compiled ahead of time in one process (best of "
                f"{f.get('compiles', 1)} fresh compiles, taken in turn; s; CPU: the process's "
                "CPU seconds while compiling, steadier than wall time on a shared machine; ops: "
                "instructions of the optimised HLO); "
                "run: best compiled run, DP / non-private (`–`: not run); before: the compile "
                "ratios (wall / CPU) of the engine before the compile-time work, measured the "
                "same way in a separate process"
                + (f" ({doc['before']['figures'].get('label', 'an earlier engine')}: "
                   f"`{doc['before']['command']}`)" if "before" in doc else "")
                + f". Target: compile ratio ≤ {f.get('target')}×.", "")
          + _table(["workload", "lower non-private", "compile non-private",
                    "compile CPU non-private", "HLO ops non-private", "lower DP", "compile DP",
                    "compile CPU DP", "HLO ops DP", "compile DP / non-private",
                    "compile CPU DP / non-private", "run DP / non-private",
                    "before: compile DP / non-private (wall / CPU)"], rows) + [""])


def _mf_section(doc: dict) -> list[str]:
  f = doc["figures"]
  target = f.get("target_ratio")
  names = {"audit": lambda g: f"audit workload, M = {g.get('models', 0):,}",
           "large_n": lambda g: f"MLP, n = {g.get('n', 0):,}, B = 256, {g.get('steps')} steps"}
  rows = []
  for w, label in names.items():
    g = f.get(w)
    if not g:
      continue
    for b in f.get("bands", []):
      for tag, kind in (("", "Poisson"), ("_cyclic", "cyclic Poisson")):
        r = g.get(f"mf_b{b}{tag}_ratio")
        if r is None:
          continue
        ring, floor = g.get(f"ring_b{b}_s_per_step"), g.get(f"ring_b{b}_floor")
        rows.append([label(g), str(b), kind,
                     _fmt(1e3 * g[f"mf_b{b}{tag}_s_per_step"], ".2f"),
                     _fmt(1e3 * g["dpsgd_s_per_step"], ".2f"), _times(r),
                     "met" if r <= target else "missed",
                     "–" if ring is None else _fmt(1e3 * ring, ".2f"),
                     "–" if floor is None else _times(floor)])
  worst = f.get("worst_ratio")
  return (_head("Correlated noise: BandMF vs DP-SGD per step (`benchmarks/mf.py`)", doc,
                "BandMF (`CorrelatedNoisePrivatizer` on a banded Toeplitz stream, b bands: "
                "b - 1 past draws per parameter) against DP-SGD with the same sampler, "
                "clipping and steps, timed round-robin in one process (best of the repeats). "
                f"Target: BandMF / DP-SGD <= {target}× for b <= 64; worst ratio "
                f"{_fmt(worst, '.2f')}×. Ring pass: the stream's recursion alone (one "
                "read of the (b - 1) P M float32 ring and one slot written per step, no "
                "PRNG) in the same round-robin; floor: 1 + ring pass / DP-SGD, the best "
                "ratio of any exact recursion that reads the ring every step. b = 1 runs "
                "DP-SGD's own noise bit for bit: its distance from 1× is the timing noise of "
                "the shared machine.", "")
          + _table(["workload", "b", "sampler", "BandMF ms/step", "DP-SGD ms/step",
                    "ratio", "target", "ring pass ms/step", "floor"], rows) + [""])


def _truncation_section(doc: dict) -> list[str]:
  f = doc["figures"]
  rows = [[layout.replace("_", " "), _fmt(f[f"{layout}.poisson_s"], ".3f"),
           _fmt(f[f"{layout}.truncated_s"], ".3f"), _times(f[f"{layout}.truncated_over_poisson"])]
          for layout in ("full_mask", "padded") if f"{layout}.poisson_s" in f]
  return (_head("Truncated Poisson batches (`benchmarks/truncation.py`)", doc,
                "One epoch of an MLP (64, 128, 10) on n = 20,000 records, q = 256 / n, "
                "`dpsgd.train_one`: Poisson batches against batches truncated to B = 256 "
                "(`DpSgdConfig(max_batch_size=256)`), interleaved in one process, best of the "
                "repeats, compilation excluded.", "")
          + _table(["layout", "Poisson epoch (s)", "truncated epoch (s)", "ratio"], rows)
          + [""])


_LARGE_N = {"mlp": "MLP 784→256→256→10", "cnn": "CNN 28×28 (16, 32)"}
_PROFILE_PARTS = ("mask", "pad", "gather", "clipped_sum", "noise_update", "fixed_batch_dp",
                  "host_check")
_SECTIONS = {"dpsgd": _dpsgd_section, "dpsgd_chunks": _dpsgd_chunks_section,
             "accountants": _accountants_section,
             "accountant_table": _accountant_table_section,
             "secure_noise": _secure_noise_section, "audit_canaries": _audit_canaries_section,
             "large_n": _large_n_section, "large_n_batches": _large_n_batches_section,
             "pate_teachers": _pate_teachers_section,
             "compile_time": _compile_time_section, "mf": _mf_section,
             "truncation": _truncation_section, "peer_cases": _peer_cases_section}


def render(results_dir: str = RESULTS_DIR) -> str:
  """RESULTS.md's text from every known benchmark JSON in `results_dir`."""
  lines = ["# Benchmark results", "",
           "Generated by `python -m benchmarks.report` from `benchmarks/results/*.json`; "
           "do not edit by hand. Each section names the command that measured it. Speed is "
           "reported as ratios against baselines timed in the same process, so the ratios, "
           "not the absolute rates, are what carries over between machines.", ""]
  for name, section in _SECTIONS.items():
    path = os.path.join(results_dir, f"{name}.json")
    if os.path.exists(path):
      with open(path) as f:
        doc = json.load(f)
      before = os.path.join(results_dir, f"{name}_before.json")   # an earlier engine's run
      if os.path.exists(before):
        with open(before) as f:
          doc["before"] = json.load(f)
      lines += section(doc)
  for name in sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else ():
    if name.startswith("accelerator_") and name.endswith(".json"):
      with open(os.path.join(results_dir, name)) as f:
        lines += _accelerator_section(json.load(f))
  return "\n".join(lines).rstrip() + "\n"


def main() -> None:
  text = render()
  with open(RESULTS_MD, "w") as f:
    f.write(text)
  print(f"wrote {RESULTS_MD}")


if __name__ == "__main__":
  main()
