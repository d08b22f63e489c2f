# From mmsegmentation 1.2.2 (Apache-2.0): configs/_base_/default_runtime.py, unchanged.
# Our configs name this copy, not the mmseg:: path: the maintained fork of
# mmengine resolves mmseg:: by the distribution name mmsegmentation, which
# onedl-mmsegmentation lacks (docs/frameworks.md).
default_scope = 'mmseg'
env_cfg = dict(
    cudnn_benchmark=True,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),
)
vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(
    type='SegLocalVisualizer', vis_backends=vis_backends, name='visualizer')
log_processor = dict(by_epoch=False)
log_level = 'INFO'
load_from = None
resume = False

tta_model = dict(type='SegTTAModel')
