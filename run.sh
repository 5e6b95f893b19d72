#!/usr/bin/env bash
# ./run.sh        set up .venv, then run the main job (the white-box canary audit of
#                 DP-SGD on the synthetic credit world, 20,000 models per claimed eps,
#                 plus the per-step audit: about 3 minutes, 90 CPU-seconds, on two
#                 shared cores, over the 60 CPU-second target) and write results/REPORT.md
# ./run.sh all    set up .venv, then run every experiment at its default scale (the
#                 whole lecture reproduced) and write results/REPORT.md
# ./run.sh test   set up .venv, then run the test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")"

usage() {
  echo "usage: ./run.sh         # install into .venv, run the main job (the canary audit), write results/REPORT.md" >&2
  echo "       ./run.sh all     # install into .venv, run every experiment, write results/REPORT.md" >&2
  echo "       ./run.sh test    # install into .venv, run the test suite" >&2
}

setup() {
  local py="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    echo "[run.sh] creating .venv with $($py --version 2>&1)"
    "$py" -m venv .venv
  fi
  # Re-install only when requirements.txt changed since the last successful install.
  local stamp=.venv/.requirements.sha256
  local want
  want=$(sha256sum requirements.txt | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[run.sh] installing requirements.txt into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r requirements.txt
    echo "$want" > "$stamp"
  fi
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
}

case "${1:-}" in
  "")
    setup
    echo "=================== experiments.audit --trials 10000 ==================="
    .venv/bin/python -m experiments.audit --trials 10000
    .venv/bin/python -m experiments.report
    echo "[run.sh] the whole reproduction (every experiment): ./run.sh all"
    ;;
  all)
    setup
    # Every module in experiments/ that does not start with '_' (report.py last) is an
    # experiment; later experiments are picked up without editing this file.
    mapfile -t exps < <(cd experiments && ls *.py | sed 's/\.py$//' | grep -v '^_' | grep -vx 'report' | sort)
    failed=()
    for e in "${exps[@]}"; do
      echo "=================== experiments.$e ==================="
      if ! .venv/bin/python -m "experiments.$e"; then
        failed+=("$e")
      fi
    done
    .venv/bin/python -m experiments.report
    if [ ${#failed[@]} -gt 0 ]; then
      echo "[run.sh] FAILED experiments: ${failed[*]}" >&2
      exit 1
    fi
    ;;
  test)
    setup
    shift
    # -n 2: two workers on the two cores; slow experiment runs are marked and skipped.
    # --dist worksteal: an idle worker takes queued tests from the busy one.
    .venv/bin/python -m pytest -n 2 --dist worksteal -q -m "not slow" tests --doctest-modules dpjax "$@"
    ;;
  *)
    usage
    exit 2
    ;;
esac
