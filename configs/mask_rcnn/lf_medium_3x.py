# Mask R-CNN + FPN with LaplacianFormer-Medium, 3x (multi-scale, crop).
_base_ = './lf_tiny_3x.py'

pretrained = 'checkpoints/lf_medium_in1k.pth'
model = dict(
    backbone=dict(
        arch='medium',
        drop_path_rate=0.3,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 288, 512]))
