#!/usr/bin/env bash
# Evaluation on a Slurm cluster: a process per GPU, started by torchrun on each
# node (tools/launchers/srun.sh).
#
#   GPUS=8 bash tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options...]
#
# GPUS (default 8), GPUS_PER_NODE (default 8), CPUS_PER_TASK (CPUs per GPU,
# default 5), PORT (rendezvous port, default 29500), SRUN_ARGS (extra srun
# arguments).
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options...]" >&2
  exit 2
fi
exec bash "$(dirname "$0")/launchers/srun.sh" "$1" "$2" test.py "$3" "$4" \
  "${@:5}"
