# Mask R-CNN + FPN with a LaplacianFormer-Tiny backbone, 1x schedule on COCO.
#
# Data: COCO 2017 at data/coco/ (mmdet's layout). Elsewhere, set COCO_ROOT:
#   COCO_ROOT=/data/coco python tools/train.py configs/mask_rcnn/lf_tiny_1x.py
# Backbone weights: an ImageNet-1k checkpoint of LaplacianFormer-Tiny at
# `pretrained` below (an mmpretrain classifier checkpoint or a plain state
# dict; see configs/imagenet). Change the path, or pass
#   --cfg-options model.backbone.init_cfg.checkpoint=/path/to/ckpt.pth
# Batch: 2 images per GPU; the recipe assumes 8 GPUs (16 images in all).
_base_ = [
    '../_base_/mmdet/models/mask-rcnn_r50_fpn.py',
    '../_base_/mmdet/datasets/coco_instance.py',
    '../_base_/schedules/lf_adamw_1x.py',
    '../_base_/mmdet/default_runtime.py'
]
custom_imports = dict(imports=['mmlaplacian'], allow_failed_imports=False)

pretrained = 'checkpoints/lf_tiny_in1k.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='LaplacianFormer',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

data_root = '{{$COCO_ROOT:data/coco}}/'
# CocoDataset that names the annotation file when it is empty, truncated or
# malformed, and warns how many boxes metainfo.classes drops.
dataset_type = 'CheckedCocoDataset'
train_dataloader = dict(
    batch_size=2, dataset=dict(type=dataset_type, data_root=data_root))
val_dataloader = dict(dataset=dict(type=dataset_type, data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
# Stop at the first non-finite loss or input, naming the iteration, the loss
# terms and the images (instead of training on NaN weights).
custom_hooks = [dict(type='FiniteCheckHook')]
