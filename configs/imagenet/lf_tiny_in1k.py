# LaplacianFormer-Tiny ImageNet-1k pretraining (mmpretrain 1.x).
# Recipe after SOFT (DeiT-style): AdamW, lr 1e-3 at batch 1024 (8 GPUs x 128),
# weight decay 0.05 except norms, biases, position embeddings and log-lambda,
# 300 epochs cosine with 10 linear warm-up epochs (stepped per iteration),
# RandAugment, random erasing 0.25, Mixup 0.8 / CutMix 1.0, label smoothing
# 0.1, EMA of the weights. The EMA weights are what the checkpoint's
# `state_dict` holds; the detection configs load it through the backbone's
# init_cfg=dict(type='Pretrained', checkpoint=...), `backbone.` prefix and all.
#
# Data: an ImageNet class-folder layout, data/imagenet/{train,val}/<wnid>/
# *.JPEG (no annotation files needed; meta/{train,val}.txt are used when
# present). Another root: --cfg-options train_dataloader.dataset.data_root=...
_base_ = [
    '../_base_/mmpretrain/datasets/imagenet_bs64_swin_224.py',
    '../_base_/mmpretrain/default_runtime.py',
]
custom_imports = dict(imports=['mmlaplacian'], allow_failed_imports=False)

# ---------------------------------------------------------------- model
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LaplacianFormer',
        arch='tiny',
        out_indices=(3, ),
        drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.),
        cal_acc=False),
    train_cfg=dict(augments=[
        dict(type='Mixup', alpha=0.8),
        dict(type='CutMix', alpha=1.0),
    ]),
)

# ----------------------------------------------------------------- data
train_dataloader = dict(batch_size=128)  # x 8 GPUs = 1024
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

# ------------------------------------------------------------- schedule
optim_wrapper = dict(
    optimizer=dict(
        type='AdamW',
        lr=1e-3,  # for batch 1024; auto_scale_lr rescales linearly
        weight_decay=0.05,
        eps=1e-8,
        betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        flat_decay_mult=0.0,
        custom_keys={
            'pos_embed': dict(decay_mult=0.0),
            'log_lam': dict(decay_mult=0.0),
        }),
)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=10,
        end=300,
        convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
val_cfg = dict()
test_cfg = dict()
# tools/train.py --auto-scale-lr: lr = 1e-3 x total batch / 1024.
auto_scale_lr = dict(base_batch_size=1024, enable=False)

# -------------------------------------------------------------- runtime
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=3))
custom_hooks = [dict(type='EMAHook', momentum=1e-4, priority='ABOVE_NORMAL')]
