# PVT's Semantic FPN recipe on ADE20K (PVTv2; also mmseg's PoolFormer
# configs): AdamW (lr 2e-4, weight decay 1e-4), poly decay (power 0.9) to 0
# over 40k iterations, for 32 images per iteration (8 GPUs x 4). No weight
# decay on normalisation layers, position embeddings and learnable
# bandwidths, as in the detection recipe.
_base_ = '../mmseg/schedules/schedule_40k.py'

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=0.0002, weight_decay=0.0001),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'pos_embed': dict(decay_mult=0.),
            'log_lam': dict(decay_mult=0.)
        }))
param_scheduler = [
    dict(
        type='PolyLR',
        power=0.9,
        eta_min=0.0,
        begin=0,
        end=40000,
        by_epoch=False)
]
# `tools/train.py --auto-scale-lr` rescales the learning rate for other
# total batch sizes.
auto_scale_lr = dict(enable=False, base_batch_size=32)
