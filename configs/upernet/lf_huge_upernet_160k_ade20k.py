# UperNet with LaplacianFormer-Huge on ADE20K: Swin's recipe,
# 160k iterations, 16 images per iteration (8 GPUs x 2).
_base_ = './lf_tiny_upernet_160k_ade20k.py'

pretrained = 'checkpoints/lf_huge_in1k.pth'
model = dict(
    backbone=dict(
        arch='huge',
        drop_path_rate=0.4,
        init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 352, 512]),
    auxiliary_head=dict(in_channels=352))
