#!/usr/bin/env bash
# srun a tool in tools/ on a Slurm partition, one task per GPU; used by
# slurm_train.sh and slurm_test.sh.
#
#   bash tools/launchers/srun.sh PARTITION JOB_NAME TOOL.py [tool arguments...]
#
# GPUS (default 8), GPUS_PER_NODE (default 8), CPUS_PER_TASK (default 5),
# SRUN_ARGS (extra srun arguments).
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
TOOL=$3
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

# shellcheck disable=SC2086  # SRUN_ARGS holds several words on purpose
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="${GPUS:-8}" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="${CPUS_PER_TASK:-5}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS:-} \
    "${PYTHON:-python}" -u "$ROOT/tools/$TOOL" "${@:4}" --launcher=slurm
