#!/usr/bin/env bash
# Distributed training with torchrun: one process per GPU (per CPU worker
# without GPUs, where tools/train.py switches to the gloo backend).
#
#   bash tools/dist_train.sh CONFIG NUM_PROCS [train.py options...]
#
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT (default 29500).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 CONFIG NUM_PROCS [train.py options...]" >&2
  exit 2
fi
exec bash "$(dirname "$0")/launchers/torchrun.sh" "$2" train.py "$1" "${@:3}"
