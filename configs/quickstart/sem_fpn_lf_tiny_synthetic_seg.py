# Quick start: Semantic FPN with LaplacianFormer-Tiny, trained from scratch on
# the synthetic shapes scenes as semantic label maps, in about 11 minutes on a
# 2-core CPU (`make demo-seg`).
#
# Data: python tools/dataset_converters/make_synthetic_seg.py \
#           --out data/synthetic_seg --train 200 --val 50 --size 128
# Elsewhere: SYNTHETIC_SEG=/path/to/synthetic_seg python tools/train.py ...
#
# Changes from the ADE20K recipe, all for speed on a small, easy dataset: no
# pretrained weights and no stochastic depth, BN instead of SyncBN (one
# process), 128-pixel images with flips only, a narrower FPN and head, batches
# of 8, a short schedule (1,200 iterations) with a higher learning rate and a
# short warm-up, hard-pixel mining in the loss, evaluation only at the end.
_base_ = '../sem_fpn/lf_tiny_fpn_40k_ade20k.py'

data_root = '{{$SYNTHETIC_SEG:data/synthetic_seg}}'
classes = ('background', 'circle', 'square', 'triangle', 'star')
palette = [[40, 40, 40], [230, 25, 75], [60, 180, 75], [255, 225, 25],
           [0, 130, 200]]
image_size = 128
channels = 64
norm_cfg = dict(type='BN', requires_grad=True)

model = dict(
    data_preprocessor=dict(size=(image_size, image_size)),
    backbone=dict(drop_path_rate=0., init_cfg=None),
    neck=dict(out_channels=channels),
    decode_head=dict(
        in_channels=[channels] * 4,
        channels=channels,
        num_classes=len(classes),
        norm_cfg=norm_cfg,
        # Background covers 86% of the labelled pixels, and soon is easy:
        # the loss keeps only pixels predicted with less than 0.7 confidence
        # (at least 10,000 per batch), so the shapes' classes are not drowned
        # (a 400-iteration run over all pixels learned the circles only).
        # mmseg 1.2.2's class_weight fails on ignored (255) pixels.
        sampler=dict(type='OHEMPixelSampler', thresh=0.7, min_kept=10000)))

# LabelMapDataset checks the folders and every label map (size, values).
dataset_type = 'LabelMapDataset'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
# Loading 128-pixel images costs little next to a training step: no worker
# processes to compete with the model for the cores.
train_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        _delete_=True,
        type=dataset_type,
        data_root=data_root,
        metainfo=dict(classes=classes, palette=palette),
        data_prefix=dict(
            img_path='img_dir/train', seg_map_path='ann_dir/train'),
        img_suffix='.jpg',
        seg_map_suffix='.png',
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        _delete_=True,
        type=dataset_type,
        data_root=data_root,
        metainfo=dict(classes=classes, palette=palette),
        data_prefix=dict(img_path='img_dir/val', seg_map_path='ann_dir/val'),
        img_suffix='.jpg',
        seg_map_suffix='.png',
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

max_iters = 1200
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(
        type='PolyLR',
        power=0.9,
        eta_min=0.0,
        begin=50,
        end=max_iters,
        by_epoch=False)
]
auto_scale_lr = dict(base_batch_size=8)

default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_iters, max_keep_ckpts=1))
# A fixed seed makes the quick start's mIoU reproducible from run to run.
randomness = dict(seed=0)
