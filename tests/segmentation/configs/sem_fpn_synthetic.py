# The quick-start Semantic FPN, shrunk for tests: 64-pixel images, batch 4,
# 16 iterations, deterministic (no random flip, no workers, fixed seed),
# and the narrow LaplacianFormer of the detection test configs
# (tests/detection/configs/narrow_laplacianformer.py).
# The dataset folder comes from $SYNTHETIC_SEG (see the quick-start config).
_base_ = [
    '../../../configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py',
    '../../detection/configs/narrow_laplacianformer.py'
]

image_size = 64
model = dict(
    data_preprocessor=dict(size=(image_size, image_size)),
    backbone=dict(arch={{_base_.narrow_arch}}),
    neck=dict(in_channels={{_base_.narrow_channels}}))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
train_dataloader = dict(batch_size=4, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=2)
test_dataloader = val_dataloader

max_iters = 16
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
# Warm-up only: a list replaces the base's, so no decay.
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=4)
]
default_hooks = dict(
    logger=dict(interval=1),
    checkpoint=dict(interval=max_iters, max_keep_ckpts=1))
randomness = dict(seed=0, deterministic=True)
