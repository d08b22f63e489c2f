# Mask R-CNN + FPN with LaplacianFormer-Medium, 1x schedule.
_base_ = './lf_tiny_1x.py'

pretrained = 'checkpoints/lf_medium_in1k.pth'
model = dict(
    backbone=dict(
        arch='medium',
        drop_path_rate=0.3,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 288, 512]))
