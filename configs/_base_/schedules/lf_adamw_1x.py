# The transformer detection recipe shared by the LaplacianFormer detectors:
# AdamW (lr 1e-4, weight decay 0.05), no weight decay on normalisation
# layers, position embeddings and the learnable bandwidths, a 1000-iteration
# linear warm-up and steps at epochs 8 and 11 (mmdet's Swin 1x recipe).
_base_ = '../mmdet/schedules/schedule_1x.py'

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)

param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
        end=1000),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[8, 11],
        gamma=0.1)
]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(
        _delete_=True,
        type='AdamW',
        lr=0.0001,
        betas=(0.9, 0.999),
        weight_decay=0.05),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'pos_embed': dict(decay_mult=0.),
            'log_lam': dict(decay_mult=0.)
        }))

# The learning rate above is for 16 images per iteration (8 GPUs x 2).
# `tools/train.py --auto-scale-lr` rescales it for other total batch sizes.
auto_scale_lr = dict(enable=False, base_batch_size=16)
