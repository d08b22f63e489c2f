# Mask R-CNN + FPN with LaplacianFormer-Huge, 3x schedule (multi-scale, crop).
_base_ = './lf_tiny_3x.py'

pretrained = 'checkpoints/lf_huge_in1k.pth'
model = dict(
    backbone=dict(
        arch='huge',
        drop_path_rate=0.4,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 352, 512]))
