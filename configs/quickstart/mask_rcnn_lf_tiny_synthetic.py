# Quick start: Mask R-CNN with LaplacianFormer-Tiny, trained from scratch on
# the synthetic shapes dataset in a few minutes on a CPU (`make demo`).
#
# Data: python tools/dataset_converters/make_synthetic_coco.py \
#           --out data/synthetic_coco --train 200 --val 50 --size 192
# Elsewhere: SYNTHETIC_COCO=/path/to/synthetic_coco python tools/train.py ...
#
# Changes from the COCO recipe, all for speed on a small, easy dataset: no
# pretrained weights and no stochastic depth, 192-pixel images, a narrower
# FPN and slimmer heads, fewer sampled proposals, batches of 4, a short
# schedule (8 epochs, 400 iterations) with a higher learning rate and a
# short warm-up, validation only at the end.
_base_ = '../mask_rcnn/lf_tiny_1x.py'

data_root = '{{$SYNTHETIC_COCO:data/synthetic_coco}}/'
classes = ('circle', 'square', 'triangle', 'star')
image_size = 192
channels = 64

model = dict(
    backbone=dict(drop_path_rate=0., init_cfg=None),
    neck=dict(out_channels=channels),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels),
        bbox_head=dict(
            in_channels=channels,
            fc_out_channels=256,
            num_classes=len(classes)),
        mask_roi_extractor=dict(out_channels=channels),
        mask_head=dict(
            num_convs=2,
            in_channels=channels,
            conv_out_channels=channels,
            num_classes=len(classes))),
    train_cfg=dict(
        rpn=dict(sampler=dict(num=128)),
        rpn_proposal=dict(nms_pre=1000, max_per_img=300),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(
        rpn=dict(nms_pre=500, max_per_img=200),
        rcnn=dict(max_per_img=30)))

backend_args = None
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
# Loading 192-pixel images costs little next to a training step: no worker
# processes to compete with the model for the cores.
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=classes),
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=classes),
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(
    ann_file=data_root + 'annotations/instances_val.json', classwise=True)
test_evaluator = val_evaluator

max_epochs = 8
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[7],
        gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=6e-4))
auto_scale_lr = dict(base_batch_size=4)

default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))
# A fixed seed makes the quick start's AP reproducible from run to run.
randomness = dict(seed=0)
