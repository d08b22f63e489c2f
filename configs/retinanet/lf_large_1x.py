# RetinaNet + FPN with LaplacianFormer-Large, 1x schedule.
_base_ = './lf_tiny_1x.py'

pretrained = 'checkpoints/lf_large_in1k.pth'
model = dict(
    backbone=dict(
        arch='large',
        drop_path_rate=0.3,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 320, 512]))
