# ADE20K (150 classes) with mmseg's pipelines and dataset settings, plus a
# label-map check after loading (size equal to the image's, values class ids
# or 255), and a data root that an environment variable can move:
#   ADE_ROOT=/data/ADEChallengeData2016 python tools/train.py CONFIG
# Default: mmseg's standard path, data/ade/ADEChallengeData2016.
_base_ = '../mmseg/datasets/ade20k.py'

data_root = '{{$ADE_ROOT:data/ade/ADEChallengeData2016}}'
num_classes = 150
crop_size = (512, 512)
# mmseg's ADE20K pipelines; reduce_zero_label maps 0 ("other") to 255 and
# 1..150 to 0..149 before the check.
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckLabelMap', num_classes=num_classes),
    dict(
        type='RandomResize',
        scale=(2048, 512),
        ratio_range=(0.5, 2.0),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckLabelMap', num_classes=num_classes),
    dict(type='PackSegInputs')
]
train_dataloader = dict(
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
