# Mask R-CNN + FPN with LaplacianFormer-Huge, 1x schedule.
_base_ = './lf_tiny_1x.py'

pretrained = 'checkpoints/lf_huge_in1k.pth'
model = dict(
    backbone=dict(
        arch='huge',
        drop_path_rate=0.4,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 352, 512]))
