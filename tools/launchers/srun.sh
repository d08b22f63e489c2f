#!/usr/bin/env bash
# srun a tool in tools/ on a Slurm partition: one task per node, in which
# torchrun (tools/launchers/torchrun.sh) starts a process per GPU; the
# nodes' torchrun agents meet at the job's first node. Used by
# slurm_train.sh and slurm_test.sh.
#
#   bash tools/launchers/srun.sh PARTITION JOB_NAME TOOL.py [tool arguments...]
#
# GPUS (default 8: fewer than GPUS_PER_NODE, or a multiple of it),
# GPUS_PER_NODE (default 8), CPUS_PER_TASK (CPUs per GPU, default 5), PORT
# (the rendezvous port on the first node, default 29500), SRUN_ARGS (extra
# srun arguments).
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
TOOL=$3
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

# torchrun starts as many processes on every node.
if (( GPUS <= GPUS_PER_NODE )); then
  NODES=1
  PROCS_PER_NODE=$GPUS
elif (( GPUS % GPUS_PER_NODE == 0 )); then
  NODES=$((GPUS / GPUS_PER_NODE))
  PROCS_PER_NODE=$GPUS_PER_NODE
else
  echo "ERROR: GPUS=$GPUS is more than one node's GPUS_PER_NODE=$GPUS_PER_NODE but not a multiple of it" >&2
  echo "FIX:   ask for whole nodes (GPUS=$(( (GPUS / GPUS_PER_NODE + 1) * GPUS_PER_NODE ))) or set GPUS_PER_NODE" >&2
  exit 2
fi

# Each task learns its node's rank and the first node's name from the
# variables Slurm sets in it.
# shellcheck disable=SC2016  # expanded in the task, not here
NODE_COMMAND='NNODES=$SLURM_NNODES NODE_RANK=$SLURM_NODEID '\
'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) '\
'exec bash "$0" "$@"'

# shellcheck disable=SC2086  # SRUN_ARGS holds several words on purpose
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --nodes="$NODES" \
    --ntasks-per-node=1 \
    --gres=gpu:"$PROCS_PER_NODE" \
    --cpus-per-task="$(( ${CPUS_PER_TASK:-5} * PROCS_PER_NODE ))" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS:-} \
    bash -c "$NODE_COMMAND" "$ROOT/tools/launchers/torchrun.sh" \
    "$PROCS_PER_NODE" "$TOOL" "${@:4}"
