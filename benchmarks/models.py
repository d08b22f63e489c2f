"""Backbones compared by the analysis tools, and how to build them.

Shortcuts name the backbone settings of the matching detection configs:
``lf_tiny``/``lf_small`` (ours, ``configs/mask_rcnn``), ``lf_tiny_linear``
(Tiny with a linear stage 4), ``swin_t`` (mmdet
``mask-rcnn_swin-t-p4-w7_fpn_1x_coco``), ``pvtv2_b1`` (mmdet
``retinanet_pvtv2-b1_fpn_1x_coco``) and ``resnet50`` (mmdet
``mask-rcnn_r50_fpn``). A config file (detector or classifier) works too.
"""
from __future__ import annotations

import os.path as osp
from typing import Dict, Optional


MODEL_ZOO: Dict[str, dict] = {
    'lf_tiny':
    dict(
        type='LaplacianFormer',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3)),
    'lf_tiny_linear':
    dict(
        type='LaplacianFormer',
        arch='tiny',
        stage4_attention='laplacian',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3)),
    'lf_small':
    dict(
        type='LaplacianFormer',
        arch='small',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3)),
    'swin_t':
    dict(
        type='SwinTransformer',
        embed_dims=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        mlp_ratio=4,
        qkv_bias=True,
        qk_scale=None,
        drop_rate=0.,
        attn_drop_rate=0.,
        drop_path_rate=0.2,
        patch_norm=True,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        convert_weights=True),
    'pvtv2_b1':
    dict(
        type='PyramidVisionTransformerV2',
        embed_dims=64,
        num_layers=[2, 2, 2, 2]),
    'resnet50':
    dict(
        type='ResNet',
        depth=50,
        num_stages=4,
        out_indices=(0, 1, 2, 3),
        frozen_stages=1,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=True,
        style='pytorch'),
}
LABELS: Dict[str, str] = {
    'lf_tiny': 'LaplacianFormer-T',
    'lf_tiny_linear': 'LaplacianFormer-T (linear stage 4)',
    'lf_small': 'LaplacianFormer-S',
    'swin_t': 'Swin-T',
    'pvtv2_b1': 'PVTv2-b1',
    'resnet50': 'ResNet-50',
}


def _registry(scope: str):
    """The MODELS registry of ``scope`` (mmdet or mmpretrain)."""
    import mmlaplacian  # noqa: F401  (registers LaplacianFormer)
    from mmengine.registry import init_default_scope
    init_default_scope(scope)
    if scope == 'mmpretrain':
        from mmpretrain.registry import MODELS
    else:
        from mmdet.registry import MODELS
    return MODELS


def backbone_config(model: str,
                    cfg_options: Optional[dict] = None) -> tuple:
    """``(backbone cfg dict, scope)`` for a shortcut or a config file.

    ``cfg_options`` (``{'model.backbone.lam': 2.0, ...}``) are merged into a
    config file before the backbone is taken from it.
    """
    if model in MODEL_ZOO:
        if cfg_options:
            raise ValueError('cfg_options need a config file, not a shortcut')
        return dict(MODEL_ZOO[model]), 'mmdet'
    if not osp.isfile(model):
        raise FileNotFoundError(
            f'{model!r} is neither a shortcut ({", ".join(MODEL_ZOO)}) nor '
            'a config file')
    from mmlaplacian.engine import read_config
    cfg = read_config(model, cfg_options)
    scope = cfg.get('default_scope', 'mmdet')
    backbone = cfg.model.get('backbone', cfg.model)
    return backbone.to_dict(), scope


def load_backbone_weights(backbone, checkpoint: str) -> None:
    """Load the backbone part of a backbone/detector/classifier checkpoint.

    Any layout :func:`filter_backbone_state_dict` reads: keys under
    ``backbone.`` when there are any (the rest of a detector or classifier
    is dropped), wrappers and ``module.`` prefixes removed.

    Raises:
        RuntimeError: When no tensor of the checkpoint fits the backbone.
    """
    from mmengine.runner import CheckpointLoader

    from mmlaplacian.models.checkpoint import filter_backbone_state_dict
    raw = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu')
    state = filter_backbone_state_dict(raw)
    missing, unexpected = backbone.load_state_dict(state, strict=False)
    if len(unexpected) == len(state):
        raise RuntimeError(f'{checkpoint}: no tensor matches the backbone '
                           f'(first keys: {list(state)[:5]})')
    print(f'loaded {len(state) - len(unexpected)} tensors from {checkpoint}'
          f'; missing {len(missing)} {missing[:5]}, unexpected '
          f'{len(unexpected)} {unexpected[:5]}')


def build_backbone(model: str,
                   checkpoint: Optional[str] = None,
                   cfg_options: Optional[dict] = None):
    """Build a backbone (random weights unless ``checkpoint`` is given).

    Args:
        model (str): A :data:`MODEL_ZOO` shortcut or a config file path.
        checkpoint (str, optional): Backbone, detector or classifier
            checkpoint; a ``backbone.`` key prefix is stripped.
        cfg_options (dict, optional): Overrides merged into a config file.

    Returns:
        nn.Module: The backbone in eval mode.
    """
    cfg, scope = backbone_config(model, cfg_options)
    cfg.pop('init_cfg', None)  # no pretrained download: weights are ours
    backbone = _registry(scope).build(cfg)
    backbone.init_weights()
    if checkpoint:
        load_backbone_weights(backbone, checkpoint)
    backbone.eval()  # some backbones' train() returns None, not self
    return backbone
