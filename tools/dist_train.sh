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
CONFIG=$1
NPROC=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
"${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --master_port="$PORT" \
    --nproc_per_node="$NPROC" \
    "$ROOT/tools/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
