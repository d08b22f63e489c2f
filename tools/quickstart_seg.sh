#!/usr/bin/env bash
# The semantic-segmentation quick start (`make demo-seg`): on a CPU, in about
# 9 minutes on 2 idle cores,
#   1. write the synthetic shapes scenes as PNG label maps (once),
#   2. train Semantic FPN with LaplacianFormer-Tiny on them from scratch,
#   3. evaluate it (mmseg's IoUMetric: per-class IoU and Acc, mIoU, mAcc,
#      aAcc) and draw each validation prediction next to its ground truth.
#
# Environment: PYTHON (default python3), SYNTHETIC_SEG (dataset folder,
# default data/synthetic_seg), WORK_DIR (default work_dirs/quickstart_seg),
# ITERS (override the config's number of training iterations).
set -euo pipefail
cd "$(dirname "$0")/.."
# Sleeping rather than spinning OpenMP threads: on a machine whose cores
# are busy with anything else, spinning makes training several times slower.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

PY=${PYTHON:-python3}
CONFIG=configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py
export SYNTHETIC_SEG=${SYNTHETIC_SEG:-data/synthetic_seg}
WORK_DIR=${WORK_DIR:-work_dirs/quickstart_seg}
start=$(date +%s)

step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - start))" "$*"; }

step "1/3 data: $SYNTHETIC_SEG"
"$PY" tools/dataset_converters/make_synthetic_seg.py --out "$SYNTHETIC_SEG" \
  --train 1000 --val 50 --size 96 --radius 0.15 0.3 --seed 0 \
  --skip-if-complete

step "2/3 train $CONFIG -> $WORK_DIR"
# Evaluation is step 3: no validation inside the training run.
overrides=(val_dataloader=None val_evaluator=None val_cfg=None)
if [ -n "${ITERS:-}" ]; then
  overrides+=("train_cfg.max_iters=$ITERS"
              "default_hooks.checkpoint.interval=$ITERS"
              "param_scheduler.1.end=$ITERS")
fi
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR" \
  --cfg-options "${overrides[@]}"
checkpoint=$(cat "$WORK_DIR/last_checkpoint")

step "3/3 evaluation of $checkpoint, predictions drawn"
test_log=$WORK_DIR/test_output.txt
"$PY" tools/test.py "$CONFIG" "$checkpoint" --work-dir "$WORK_DIR" \
  --show-dir predictions 2>&1 | tee "$test_log"

metrics=$(ls -t "$WORK_DIR"/*/*.json | head -n 1)
step "done in $(($(date +%s) - start)) s"
"$PY" - "$test_log" "$metrics" <<'PYEOF'
import json, sys
# The per-class table IoUMetric printed, then the means.
lines = open(sys.argv[1], encoding='utf-8').read().splitlines()
start = max(i for i, line in enumerate(lines) if 'per class results' in line)
for line in lines[start + 1:]:
    if not line.startswith(('+', '|')):
        break
    print(line)
metrics = json.load(open(sys.argv[2]))
print('  '.join(f'{k} {metrics[k]:.2f}' for k in ('mIoU', 'mAcc', 'aAcc')))
PYEOF
cat <<EOF
checkpoint   $checkpoint
metrics      $metrics
logs         $WORK_DIR/<timestamp>/ (text log, vis_data/scalars.json)
predictions  $WORK_DIR/predictions/vis_data/vis_image/ (ground truth left,
             prediction right)
dataset      $SYNTHETIC_SEG/
EOF
