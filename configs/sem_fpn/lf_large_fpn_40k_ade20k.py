# Semantic FPN with LaplacianFormer-Large on ADE20K: PVT's recipe,
# 40k iterations, 32 images per iteration (8 GPUs x 4).
_base_ = './lf_tiny_fpn_40k_ade20k.py'

pretrained = 'checkpoints/lf_large_in1k.pth'
model = dict(
    backbone=dict(
        arch='large',
        drop_path_rate=0.3,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))
