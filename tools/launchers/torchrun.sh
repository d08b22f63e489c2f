#!/usr/bin/env bash
# torchrun NUM_PROCS processes of a tool in tools/ with the repository on
# PYTHONPATH; used by dist_train.sh and dist_test.sh.
#
#   bash tools/launchers/torchrun.sh NUM_PROCS TOOL.py [tool arguments...]
#
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT (default 29500).
set -euo pipefail
NPROC=$1
TOOL=$2
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" \
    --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --master_port="${PORT:-29500}" \
    --nproc_per_node="$NPROC" \
    "$ROOT/tools/$TOOL" "${@:3}" --launcher pytorch
