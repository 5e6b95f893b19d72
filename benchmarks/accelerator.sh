#!/usr/bin/env bash
# The prepared accelerator run (at most ~8 minutes on one GPU): the audit workload, the
# MLP epoch at n = 60,000 for B = 256 / 1,024 / 4,096 and the main job, one JSON of
# figures merged into benchmarks/RESULTS.md under the device's name.
#
#   benchmarks/accelerator.sh           # on the accelerator machine
#   benchmarks/accelerator.sh --small   # toy sizes: checks the script on a CPU
#   benchmarks/accelerator.sh --wheels  # here, with network: download into .whl/ the
#                                       # wheels the accelerator's image lacks
#
# On the accelerator the image's python3 (with JAX for its GPU) is used; the packages it
# lacks (dp-accounting and dm-tree) are installed from .whl/ into /tmp/site when .whl/
# holds wheels. Elsewhere .venv/bin/python is used when present.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--wheels" ]; then
  py="${PYTHON:-python3}"
  for w in dp-accounting==0.6.0 dm-tree; do
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl "$w"
  done
  ls -l .whl
  exit 0
fi

if [ -x .venv/bin/python ]; then
  py=.venv/bin/python
else
  py="${PYTHON:-python3}"
  if compgen -G ".whl/*.whl" > /dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$py" -m benchmarks.accelerator "$@"
"$py" -m benchmarks.report
