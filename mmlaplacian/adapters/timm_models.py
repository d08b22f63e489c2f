"""LaplacianFormer as timm models: ``timm.create_model('laplacianformer_tiny')``.

Imported by ``import mmlaplacian`` when timm is installed. The models follow
timm's conventions (``forward_features``, ``forward_head``,
``reset_classifier``, ``forward_intermediates``, ``feature_info``), so
``features_only=True`` serves every library built on timm: Hugging Face
``TimmBackbone`` and DETR-family models with ``use_timm_backbone=True``,
segmentation_models_pytorch's ``tu-`` encoders, mmpretrain's
``TIMMBackbone``.

Example:
    >>> import mmlaplacian, timm  # doctest: +SKIP
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
from timm.models import build_model_with_cfg, register_model
from timm.models._registry import generate_default_cfgs

from mmlaplacian.models.classifier import (ALL_STAGES,
                                           LaplacianFormerClassifier)
from mmlaplacian.models.utils import filter_checkpoint, unwrap_state_dict

ARCHS = ('tiny', 'small', 'medium', 'large', 'huge')
# The name this adapter first gave the classifier.
LaplacianFormerTimm = LaplacianFormerClassifier


def checkpoint_filter_fn(
        checkpoint: Mapping,
        model: LaplacianFormerClassifier) -> Dict[str, torch.Tensor]:
    """A checkpoint of any layout the backbone loads, as this model's state
    dict.

    The backbone's tensors go through the package's checkpoint filter
    (:func:`~mmlaplacian.models.utils.filter_checkpoint`: wrappers,
    prefixes, earlier key versions, SOFT-style keys, position-embedding
    resizing), so this accepts mmpretrain classifiers trained with
    ``configs/imagenet/`` (``backbone.*``, ``head.fc.*``), the output of
    ``tools/model_converters/laplacianformer_to_mmdet.py`` and mmdet/mmseg
    checkpoints (backbone only; the head keeps its initialisation). Applying
    it to its own output changes nothing.
    """
    # The same wrapper as the backbone's (EMA weights first).
    state = unwrap_state_dict(checkpoint)
    head = {k[len('head.fc.'):]: v for k, v in state.items()
            if k.startswith('head.fc.')}
    head.update({k[len('head.'):]: v for k, v in state.items()
                 if k.startswith('head.') and k[5:] in ('weight', 'bias')})
    backbone = filter_checkpoint(checkpoint,
                                 model.backbone.state_dict()).state_dict
    own = model.state_dict()
    out = {f'backbone.{k}': v for k, v in backbone.items()}
    # Stage norms the checkpoint lacks (a classifier normalises only the
    # last stage) keep this model's initial identity affine.
    for key, value in own.items():
        if key.startswith('backbone.') and '.norm.' in key:
            out.setdefault(key, value)
    for name, value in head.items():
        out[f'head.{name}'] = value
    if not head and isinstance(model.head, nn.Linear):
        out.update({k: v for k, v in own.items() if k.startswith('head.')})
    return out


def _cfg(**kwargs) -> dict:
    return dict(
        url='', num_classes=1000, input_size=(3, 224, 224), pool_size=(7, 7),
        crop_pct=0.875, interpolation='bicubic', mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD, first_conv='backbone.stages.0.downsample',
        classifier='head', fixed_input_size=False, license='apache-2.0',
        **kwargs)


default_cfgs = generate_default_cfgs(
    {f'laplacianformer_{arch}.untrained': _cfg() for arch in ARCHS})


def _create(arch: str, pretrained: bool = False, **kwargs) -> nn.Module:
    out_indices = tuple(kwargs.pop('out_indices', ALL_STAGES))
    if kwargs.get('features_only'):
        kwargs['feature_stages'] = out_indices
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
