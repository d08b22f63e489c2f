"""LaplacianFormer as timm models: ``timm.create_model('laplacianformer_tiny')``.

Importing this module registers ``laplacianformer_{tiny,small,medium,
large,huge}`` with timm, as timm's own model files register theirs. The
models follow timm's conventions (``forward_features``, ``forward_head``,
``reset_classifier``, ``forward_intermediates``, ``feature_info``), so
``features_only=True`` serves every library built on timm: Hugging Face
``TimmBackbone`` (DETR-family models through ``TimmBackboneConfig``),
segmentation_models_pytorch's ``tu-`` encoders, mmpretrain's
``TIMMBackbone``.

Example:
    >>> import mmlaplacian.adapters.timm_models, timm  # doctest: +SKIP
    >>> net = timm.create_model('laplacianformer_tiny', features_only=True,
    ...                         out_indices=(1, 2, 3))  # doctest: +SKIP
    >>> [f.shape[1] for f in net(torch.rand(1, 3, 224, 224))]  # doctest: +SKIP
    [128, 320, 512]
"""
from __future__ import annotations

from typing import Dict, Mapping

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import (build_model_with_cfg, generate_default_cfgs,
                         register_model)

from mmlaplacian.models.classifier import (ALL_STAGES,
                                           LaplacianFormerClassifier,
                                           classifier_state_dict)

ARCHS = ('tiny', 'small', 'medium', 'large', 'huge')


def checkpoint_filter_fn(
        checkpoint: Mapping,
        model: LaplacianFormerClassifier) -> Dict[str, torch.Tensor]:
    """timm's ``pretrained_filter_fn``: a checkpoint of any layout the
    backbone loads, as this model's state dict
    (:func:`~mmlaplacian.models.classifier.classifier_state_dict`)."""
    return classifier_state_dict(checkpoint, model)


def _cfg(**kwargs) -> dict:
    return dict(
        url='', num_classes=1000, input_size=(3, 224, 224), pool_size=(7, 7),
        crop_pct=0.875, interpolation='bicubic', mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD, first_conv='backbone.stages.0.downsample',
        classifier='head', fixed_input_size=False, license='apache-2.0',
        # timm reads files weights-only, which refuses mmengine's and
        # mmpretrain's checkpoints: the model loads them itself
        # (LaplacianFormerClassifier.load_pretrained).
        custom_load=True, **kwargs)


default_cfgs = generate_default_cfgs(
    {f'laplacianformer_{arch}.untrained': _cfg() for arch in ARCHS})


def _create(arch: str, pretrained: bool = False, **kwargs) -> nn.Module:
    out_indices = tuple(kwargs.pop('out_indices', ALL_STAGES))
    if kwargs.get('features_only'):
        kwargs['feature_stages'] = out_indices
    if kwargs.get('pretrained_cfg_overlay'):
        # A weight source given here makes timm reset custom_load: keep the
        # model's own loading unless the caller says otherwise.
        kwargs['pretrained_cfg_overlay'] = dict(
            dict(custom_load=True), **kwargs['pretrained_cfg_overlay'])
    return build_model_with_cfg(
        LaplacianFormerClassifier,
        f'laplacianformer_{arch}',
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(feature_cls='getter', out_indices=out_indices),
        arch=arch,
        **kwargs)


@register_model
def laplacianformer_tiny(pretrained: bool = False, **kwargs) -> nn.Module:
    return _create('tiny', pretrained, **kwargs)


@register_model
def laplacianformer_small(pretrained: bool = False, **kwargs) -> nn.Module:
    return _create('small', pretrained, **kwargs)


@register_model
def laplacianformer_medium(pretrained: bool = False, **kwargs) -> nn.Module:
    return _create('medium', pretrained, **kwargs)


@register_model
def laplacianformer_large(pretrained: bool = False, **kwargs) -> nn.Module:
    return _create('large', pretrained, **kwargs)


@register_model
def laplacianformer_huge(pretrained: bool = False, **kwargs) -> nn.Module:
    return _create('huge', pretrained, **kwargs)
