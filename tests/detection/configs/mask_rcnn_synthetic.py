# The quick-start Mask R-CNN, shrunk for tests: 128-pixel images, batch 2,
# 6 short epochs, deterministic (no random flip, no workers, fixed seed),
# and the narrow LaplacianFormer of the test configs
# (narrow_laplacianformer.py).
# The dataset folder comes from $SYNTHETIC_COCO (see the quick-start config).
_base_ = [
    '../../../configs/quickstart/mask_rcnn_lf_tiny_synthetic.py',
    './narrow_laplacianformer.py'
]

model = dict(
    backbone=dict(arch={{_base_.narrow_arch}}),
    neck=dict(in_channels={{_base_.narrow_channels}}))

image_size = 128
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=2, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

max_epochs = 6
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
# Warm-up only: a list replaces the base's, so no step decay.
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=4)
]
default_hooks = dict(
    logger=dict(interval=1),
    checkpoint=dict(interval=1, max_keep_ckpts=2))
randomness = dict(seed=0, deterministic=True)
