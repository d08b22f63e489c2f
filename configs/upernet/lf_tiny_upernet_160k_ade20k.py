# UperNet with a LaplacianFormer-Tiny backbone on ADE20K, 160k iterations of
# 512x512 crops: Swin's UperNet recipe
# (configs/_base_/schedules/upernet_adamw_160k.py: AdamW lr 6e-5, weight
# decay 0.01, 1,500-iteration linear warm-up, poly decay).
#
# Batch: 2 images per GPU; the recipe assumes 8 GPUs (16 images per
# iteration). For another total, add --auto-scale-lr.
# Data: ADE20K at data/ade/ADEChallengeData2016 (mmseg's layout). Elsewhere,
# set ADE_ROOT:
#   ADE_ROOT=/data/ADEChallengeData2016 python tools/train.py \
#       configs/upernet/lf_tiny_upernet_160k_ade20k.py
# Backbone weights: an ImageNet-1k checkpoint of LaplacianFormer-Tiny at
# `pretrained` below (see configs/imagenet), or
#   --cfg-options model.backbone.init_cfg.checkpoint=/path/to/ckpt.pth
_base_ = [
    '../_base_/mmseg/models/upernet_swin.py',
    '../_base_/datasets/ade20k_checked.py',
    '../_base_/schedules/upernet_adamw_160k.py',
    '../_base_/mmseg/default_runtime.py'
]
custom_imports = dict(imports=['mmlaplacian'], allow_failed_imports=False)

crop_size = (512, 512)
pretrained = 'checkpoints/lf_tiny_in1k.pth'
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='LaplacianFormer',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512], num_classes=150),
    # The auxiliary FCN head reads stage 3, as Swin's reads its stage 3.
    auxiliary_head=dict(in_channels=320, num_classes=150))

train_dataloader = dict(batch_size=2)
