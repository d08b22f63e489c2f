#!/usr/bin/env bash
# Distributed evaluation with torchrun (gloo without GPUs).
#
#   bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [test.py options...]
#
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT (default 29500).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 CONFIG CHECKPOINT NUM_PROCS [test.py options...]" >&2
  exit 2
fi
exec bash "$(dirname "$0")/launchers/torchrun.sh" "$3" test.py "$1" "$2" \
  "${@:4}"
