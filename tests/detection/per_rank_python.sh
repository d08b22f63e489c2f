#!/usr/bin/env bash
# $PYTHON of tools/launchers/torchrun.sh (which dist_train.sh and
# dist_test.sh run) that gives each rank its own work directory: the same
# `$REAL_PYTHON -m torch.distributed.run [options] TOOL.py ARGS`, with
# per_rank_worker.py put before TOOL.py, so that `{rank}` in ARGS becomes
# each worker's rank.
set -euo pipefail
args=()
script_seen=0
for arg in "$@"; do
  if [[ $script_seen == 0 && $arg == *.py ]]; then
    args+=("$(dirname "$0")/per_rank_worker.py")
    script_seen=1
  fi
  args+=("$arg")
done
exec "${REAL_PYTHON:?set REAL_PYTHON to the interpreter}" "${args[@]}"
