# RetinaNet with a narrow LaplacianFormer on the synthetic shapes, for tests:
# 128-pixel images, batch 2, no random augmentation, no stochastic depth and
# no random sampling anywhere (RetinaNet uses every anchor), so a resumed
# run retraces an uninterrupted one exactly. The backbone is the narrow
# LaplacianFormer of the test configs (narrow_laplacianformer.py).
_base_ = [
    '../../../configs/retinanet/lf_tiny_1x.py', './narrow_laplacianformer.py'
]

data_root = '{{$SYNTHETIC_COCO:data/synthetic_coco}}/'
classes = ('circle', 'square', 'triangle', 'star')
image_size = 128

model = dict(
    backbone=dict(
        arch={{_base_.narrow_arch}},
        drop_path_rate=0.,
        init_cfg=None),
    neck=dict(in_channels={{_base_.narrow_channels_s8}}, out_channels=64),
    bbox_head=dict(
        num_classes=len(classes), in_channels=64, feat_channels=64))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=classes),
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=classes),
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator

max_epochs = 2
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=3),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[1],
        gamma=0.5)
]
optim_wrapper = dict(optimizer=dict(lr=2e-4))
default_hooks = dict(
    logger=dict(interval=1),
    checkpoint=dict(interval=1, max_keep_ckpts=3))
randomness = dict(seed=0, deterministic=True)
