# Swin's UperNet recipe on ADE20K: AdamW (lr 6e-5, betas 0.9/0.999, weight
# decay 0.01), linear warm-up over 1,500 iterations, then poly decay
# (power 1) to 0 at 160k iterations, for 16 images per iteration (8 GPUs x
# 2). No weight decay on normalisation layers, position embeddings and
# learnable bandwidths.
_base_ = '../mmseg/schedules/schedule_160k.py'

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'pos_embed': dict(decay_mult=0.),
            'log_lam': dict(decay_mult=0.)
        }))
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(
        type='PolyLR',
        power=1.0,
        eta_min=0.0,
        begin=1500,
        end=160000,
        by_epoch=False)
]
auto_scale_lr = dict(enable=False, base_batch_size=16)
