"""The prepared accelerator run: engine, large-n epoch and main job, one JSON of figures.

    benchmarks/accelerator.sh                 # on the accelerator machine (at most ~8 min)
    benchmarks/accelerator.sh --small         # the same steps at toy sizes (CPU check)
    .venv/bin/python -m benchmarks.accelerator --small --out /tmp/acc

Each step runs in its own subprocess with a wall-clock limit, so a step that fails or
runs long costs only itself (its row then says "failed" or "timed out" with the reason):

  audit      `benchmarks.dpsgd --skip_deep --skip_generic_largest`: the audit workload
             (M logistic-regression DP-SGD models at once) in models/s, against NumPy on
             the host CPU.
  large_n    `benchmarks.large_n --workloads mlp` at each --batches value: one DP epoch
             and one non-private epoch of the MLP at n = 60,000, compile time beside run
             time, and their ratio (targets 1.6x at B = 256, 1.3x at B >= 1,024).
  main_job   `experiments.audit --trials 10000` (the newcomer's first command), wall
             time with compilation included (target on an H200-class GPU: 10 s).

Figures go to `benchmarks/results/accelerator_<device>.json` (the device kind, e.g.
"NVIDIA H100 80GB HBM3", in the file name with non-alphanumerics as '_') and are printed
as one JSON document; `python -m benchmarks.report` renders them into RESULTS.md under
the device's name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import report

# Step sizes: (full, small).
_AUDIT_SIZES = ("2000,20000", "64")
_LARGE_N = (60_000, 3_750)
_TRIALS = (10_000, 100)


def device() -> dict:
  """{'platform', 'kind', 'count'} of JAX's default backend."""
  import jax  # pylint: disable=g-import-not-at-top
  devs = jax.devices()
  return {"platform": devs[0].platform, "kind": devs[0].device_kind, "count": len(devs)}


def file_name(kind: str) -> str:
  """`accelerator_<kind>.json` with every run of non-alphanumerics replaced by '_'.

  >>> file_name("NVIDIA H100 80GB HBM3")
  'accelerator_NVIDIA_H100_80GB_HBM3.json'
  """
  return "accelerator_" + re.sub(r"[^A-Za-z0-9]+", "_", kind).strip("_") + ".json"


def run_step(args: list[str], limit_s: float) -> dict:
  """Runs `python -m <args>` from the repository root; {'wall_s', 'status', 'tail'}.

  status is "ok", "failed (exit N)" or "timed out after L s"; tail is the last 2,000
  characters of its output.
  """
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
  start = time.perf_counter()
  try:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=root, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=limit_s, check=False)
    status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    out = proc.stdout
  except subprocess.TimeoutExpired as e:
    status = f"timed out after {limit_s:g} s"
    out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
  wall = time.perf_counter() - start
  print(f"[accelerator] {' '.join(args[:1])}: {status} in {wall:.1f} s", flush=True)
  return {"wall_s": wall, "status": status, "tail": out[-2000:]}


def _figures_of(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)["figures"]


def measure(out: str, small: bool, batches: list[int], limit_s: float) -> dict:
  """Runs the three steps; the flat figures (`<step>.<key>`) and each step's status."""
  i = 1 if small else 0
  fig: dict = {"device": device(), "small": small}
  path = os.path.join(out, "dpsgd.json")
  step = run_step(["benchmarks.dpsgd", "--sizes", _AUDIT_SIZES[i], "--repeats", "1",
                   "--skip_deep", "--skip_generic_largest", "--json", path], limit_s)
  fig["audit.status"], fig["audit.wall_s"] = step["status"], step["wall_s"]
  for k, v in _figures_of(path).items():
    if k.endswith(("dpjax_models_per_s", "numpy_models_per_s", "speedup_vs_numpy")):
      fig[f"audit.{k.removeprefix('audit_workload.')}"] = v
  for b in batches:
    b = max(1, b // 16) if small else b     # n / 16 records in a toy run too
    path = os.path.join(out, f"large_n_B{b}.json")
    step = run_step(["benchmarks.large_n", "--workloads", "mlp", "--n", str(_LARGE_N[i]),
                     "--batch", str(b), "--repeats", "1", "--skip_opacus", "--skip_memory",
                     "--skip_full_mask", "--json", path], limit_s)
    fig[f"large_n.B{b}.status"] = step["status"]
    for k, v in _figures_of(path).items():
      if k.startswith("mlp.") and isinstance(v, (int, float)) and (
          "epoch_s" in k or "compile_s" in k or k.endswith("dp_over_nonprivate")):
        fig[f"large_n.B{b}.{k.removeprefix('mlp.')}"] = v
    fig[f"large_n.B{b}.n"] = _LARGE_N[i]
  step = run_step(["experiments.audit", "--trials", str(_TRIALS[i]),
                   "--out", os.path.join(out, "audit")] + (["--noper_step"] if small else []),
                  2 * limit_s)
  fig["main_job.status"], fig["main_job.wall_s"] = step["status"], step["wall_s"]
  fig["main_job.trials"] = _TRIALS[i]
  return fig


def _define_flags() -> None:
  """The command-line flags (defined only when run as a program, so that importing this
  module beside another benchmark or experiment defines no duplicate flag)."""
  flags.DEFINE_bool("small", False, "Toy sizes (checks the script on a CPU).")
  flags.DEFINE_string("out", None, "Folder for the steps' own outputs (default: a "
                      "temporary folder).")
  flags.DEFINE_list("batches", ["256", "1024", "4096"], "Batch sizes B of the large-n epoch.")
  flags.DEFINE_integer("step_limit_s", 180, "Wall-clock limit of one step (s).")
  flags.DEFINE_string("json", None, "Where to write the figures (default: "
                      "benchmarks/results/accelerator_<device>.json).")


def main(argv):
  del argv
  fv = flags.FLAGS
  batches = [int(b) for b in fv.batches]
  if not batches or min(batches) < 1:
    raise app.UsageError(f"--batches must list positive integers, got {fv.batches}")
  if fv.step_limit_s < 1:
    raise app.UsageError(f"--step_limit_s must be positive, got {fv.step_limit_s}")
  out = fv.out or tempfile.mkdtemp(prefix="dpjax_accelerator_")
  os.makedirs(out, exist_ok=True)
  fig = measure(out, fv.small, batches, fv.step_limit_s)
  path = fv.json or os.path.join(report.RESULTS_DIR, file_name(fig["device"]["kind"]))
  report.write("accelerator", fig, path)
  print(json.dumps(fig, indent=1, sort_keys=True))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
