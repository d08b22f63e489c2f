#!/usr/bin/env bash
# The quick start (`make demo`): on a CPU, in about 10 minutes,
#   1. generate the synthetic shapes dataset in COCO format (once),
#   2. train Mask R-CNN with LaplacianFormer-Tiny on it from scratch,
#   3. evaluate it with COCO box and mask AP (pycocotools),
#   4. draw its predictions on a few validation images.
#
# Environment: PYTHON (default python3), SYNTHETIC_COCO (dataset folder,
# default data/synthetic_coco), WORK_DIR (default work_dirs/quickstart),
# EPOCHS (override the config's number of epochs).
set -euo pipefail
cd "$(dirname "$0")/.."
# Sleeping rather than spinning OpenMP threads: on a machine whose cores
# are busy with anything else, spinning makes training several times slower.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

PY=${PYTHON:-python3}
CONFIG=configs/quickstart/mask_rcnn_lf_tiny_synthetic.py
export SYNTHETIC_COCO=${SYNTHETIC_COCO:-data/synthetic_coco}
WORK_DIR=${WORK_DIR:-work_dirs/quickstart}
VIS_DIR=$WORK_DIR/predictions
start=$(date +%s)

step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - start))" "$*"; }

step "1/4 data: $SYNTHETIC_COCO"
SIZE=192
SEED=0
if "$PY" -c 'import sys; from mmlaplacian.synthetic_data.instances import is_complete
sys.exit(not is_complete(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))' \
    "$SYNTHETIC_COCO" "$SIZE" "$SEED"; then
  echo "found the dataset (${SIZE} px, seed $SEED): not generating it again"
else
  "$PY" tools/dataset_converters/make_synthetic_coco.py \
    --out "$SYNTHETIC_COCO" --train 200 --val 50 --size "$SIZE" --seed "$SEED"
fi

step "2/4 train $CONFIG -> $WORK_DIR"
# Evaluation is step 3: no validation inside the training run.
overrides=(val_dataloader=None val_evaluator=None val_cfg=None)
if [ -n "${EPOCHS:-}" ]; then
  overrides+=("train_cfg.max_epochs=$EPOCHS"
              "default_hooks.checkpoint.interval=$EPOCHS")
fi
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR" \
  --cfg-options "${overrides[@]}"
checkpoint=$(cat "$WORK_DIR/last_checkpoint")

step "3/4 COCO evaluation of $checkpoint"
"$PY" tools/test.py "$CONFIG" "$checkpoint" --work-dir "$WORK_DIR"

step "4/4 predictions drawn -> $VIS_DIR"
# mmdet's own inferencer: the config's custom_imports load mmlaplacian.
"$PY" - "$SYNTHETIC_COCO/val" "$CONFIG" "$checkpoint" "$VIS_DIR" <<'PYEOF'
import glob, sys
from mmdet.apis import DetInferencer
images, config, checkpoint, out_dir = sys.argv[1:]
DetInferencer(model=config, weights=checkpoint, device='cpu')(
    sorted(glob.glob(f'{images}/*.jpg'))[:6], out_dir=out_dir,
    pred_score_thr=0.5, no_save_pred=True)
PYEOF

metrics=$(ls -t "$WORK_DIR"/*/*.json | head -n 1)
step "done in $(($(date +%s) - start)) s"
"$PY" - "$metrics" <<'PYEOF'
import json, sys
metrics = json.load(open(sys.argv[1]))
for name, task in (('box AP ', 'bbox'), ('mask AP', 'segm')):
    print(f"{name} {metrics[f'coco/{task}_mAP']:.3f}  "
          f"(AP50 {metrics[f'coco/{task}_mAP_50']:.3f})")
PYEOF
cat <<EOF
checkpoint   $checkpoint
metrics      $metrics
logs         $WORK_DIR/<timestamp>/ (text log, vis_data/scalars.json)
predictions  $VIS_DIR/vis/
dataset      $SYNTHETIC_COCO/
loss curve   mmdet's analyze_logs.py (README, Tools) on
               $WORK_DIR/*/vis_data/scalars.json
EOF
