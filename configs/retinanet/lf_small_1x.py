# RetinaNet + FPN with LaplacianFormer-Small, 1x schedule.
_base_ = './lf_tiny_1x.py'

pretrained = 'checkpoints/lf_small_in1k.pth'
model = dict(
    backbone=dict(
        arch='small',
        drop_path_rate=0.2,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 320, 512]))
