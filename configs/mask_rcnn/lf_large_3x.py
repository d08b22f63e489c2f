# Mask R-CNN + FPN with LaplacianFormer-Large, 3x schedule (multi-scale, crop).
_base_ = './lf_tiny_3x.py'

pretrained = 'checkpoints/lf_large_in1k.pth'
model = dict(
    backbone=dict(
        arch='large',
        drop_path_rate=0.3,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))
