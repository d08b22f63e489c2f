"""LaplacianFormer as an image classifier, in timm's model interface.

The interface (``forward_features``, ``forward_head``, ``reset_classifier``,
``forward_intermediates``, ``feature_info``) is timm's, so
:mod:`mmlaplacian.adapters.timm_models` only registers this class; timm
itself is not needed to build or run it.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from .backbones import LaplacianFormer
from .checkpoint import (filter_checkpoint, load_checkpoint_file,
                         unwrap_state_dict)

ALL_STAGES = (0, 1, 2, 3)


def take_indices(num_features: int,
                 indices: Optional[Union[int, Sequence[int]]] = None
                 ) -> Tuple[List[int], int]:
    """timm's ``feature_take_indices``: the feature indices to return
    (``None`` all, an int the last n, a sequence as given, negatives from
    the end) and the largest.

    Raises:
        ValueError: For an index out of range.
    """
    if indices is None:
        indices = num_features
    if isinstance(indices, int):
        if not 0 < indices <= num_features:
            raise ValueError(f'last-n ({indices}) is out of range (1 to '
                             f'{num_features})')
        take = list(range(num_features - indices, num_features))
    else:
        take = [num_features + i if i < 0 else i for i in indices]
        for i in take:
            if not 0 <= i < num_features:
                raise ValueError(f'feature index {i} is out of range (0 to '
                                 f'{num_features - 1})')
    return take, max(take)


class LaplacianFormerClassifier(nn.Module):
    """A LaplacianFormer classifier in timm's model interface, without timm.

    :mod:`mmlaplacian.adapters.timm_models` registers it with timm as
    ``laplacianformer_<arch>``; it is built and used here with torch only.

    ``self.backbone`` is :class:`~mmlaplacian.models.LaplacianFormer` (the
    same module and state-dict keys as in mmdet, mmseg and mmpretrain),
    followed by global average pooling and a linear ``head``.

    Args:
        arch (str): ``'tiny'``, ``'small'``, ``'medium'``, ``'large'`` or
            ``'huge'``.
        num_classes (int): Classes of the head; 0 for no head.
        global_pool (str): ``'avg'`` or ``''`` (no pooling).
        in_chans (int): Image channels.
        drop_rate (float): Dropout before the head.
        feature_stages (Sequence[int]): Stages whose output is normalised
            (those timm's ``features_only`` returns; timm keeps
            ``out_indices`` for itself). Defaults to the last.
        **backbone_kwargs: Further :class:`LaplacianFormer` arguments
            (``drop_path_rate``, ``attn_cfg``, ...).
    """

    def __init__(self,
                 arch: str = 'tiny',
                 num_classes: int = 1000,
                 global_pool: str = 'avg',
                 in_chans: int = 3,
                 drop_rate: float = 0.,
                 feature_stages: Sequence[int] = (3, ),
                 **backbone_kwargs) -> None:
        super().__init__()
        if global_pool not in ('avg', ''):
            raise ValueError(f"global_pool must be 'avg' or '', got "
                             f'{global_pool!r}')
        # Stage 3 always: the head reads its normalised output.
        norm_stages = tuple(sorted(set(feature_stages) | {3}))
        self.backbone = LaplacianFormer(
            arch, in_channels=in_chans, out_indices=norm_stages,
            **backbone_kwargs)
        self.backbone.init_weights()
        dims = self.backbone.embed_dims
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = dims[-1]
        self.feature_info = [
            dict(num_chs=dims[i], reduction=4 * 2**i,
                 module=f'backbone.stages.{i}') for i in ALL_STAGES
        ]
        self.head_drop = nn.Dropout(drop_rate)
        self.head = self._make_head(num_classes)

    def _make_head(self, num_classes: int) -> nn.Module:
        if num_classes <= 0:
            return nn.Identity()
        head = nn.Linear(self.num_features, num_classes)
        nn.init.trunc_normal_(head.weight, std=.02)
        nn.init.zeros_(head.bias)
        return head

    def load_pretrained(self, checkpoint: str) -> None:
        """Load a checkpoint file of any layout :func:`classifier_state_dict`
        reads (timm calls this for ``pretrained=True``).

        Args:
            checkpoint (str): A local path or URL. It is unpickled in full
                (mmengine and mmpretrain checkpoints hold more than tensors):
                load only files you trust.
        """
        self.load_state_dict(
            classifier_state_dict(load_checkpoint_file(checkpoint), self))

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self,
                         num_classes: int,
                         global_pool: Optional[str] = None) -> None:
        if global_pool is not None:
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = self._make_head(num_classes)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: Optional[Union[int, List[int]]] = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = 'NCHW',
        intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Stage outputs (NCHW) and, unless ``intermediates_only``, the final
        feature map.

        Stages in ``feature_stages`` return their LayerNorm-ed output (as the
        detection backbone does), the others their raw map; ``norm`` is
        accepted for timm's interface and changes nothing.
        """
        if output_fmt != 'NCHW':
            raise ValueError(f"output_fmt must be 'NCHW', got {output_fmt!r}")
        take, max_index = take_indices(len(ALL_STAGES), indices)
        self.backbone._check_input(x)
        stages = self.backbone.stages
        if stop_early:
            stages = stages[:max_index + 1]
        intermediates, final = [], None
        for i, stage in enumerate(stages):
            x, out = stage(x)
            final = x if out is None else out
            if i in take:
                intermediates.append(final)
        if intermediates_only:
            return intermediates
        return final, intermediates

    def prune_intermediate_layers(self,
                                  indices: Union[int, List[int]] = 1,
                                  prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        """Drop the stages after the last one in ``indices`` (and the
        head)."""
        take, max_index = take_indices(len(ALL_STAGES), indices)
        self.backbone.stages = self.backbone.stages[:max_index + 1]
        if prune_head or max_index < len(ALL_STAGES) - 1:
            self.reset_classifier(0, '')
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's normalised map ``(B, C4, H/32, W/32)``."""
        return self.forward_intermediates(x, indices=[3])[0]

    def forward_head(self,
                     x: torch.Tensor,
                     pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'avg':
            x = x.mean(dim=(2, 3))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def classifier_state_dict(
        checkpoint: Mapping,
        model: LaplacianFormerClassifier) -> Dict[str, torch.Tensor]:
    """A checkpoint of any layout the backbone loads, as ``model``'s state
    dict.

    The backbone's tensors go through the package's checkpoint filter
    (:func:`~mmlaplacian.models.checkpoint.filter_checkpoint`: wrappers,
    prefixes, earlier key versions, SOFT-style keys, position-embedding
    resizing), so this accepts mmpretrain classifiers trained with
    ``configs/imagenet/`` (``backbone.*``, ``head.fc.*``), the output of
    ``tools/model_converters/laplacianformer_to_mmdet.py`` and mmdet/mmseg
    checkpoints (backbone only). A head that the checkpoint lacks, or whose
    shape differs from ``model``'s (another number of classes), keeps
    ``model``'s initialisation. Applying it to its own output changes
    nothing.
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
        key = f'head.{name}'
        if key in own and own[key].shape == value.shape:
            out[key] = value
    for key, value in own.items():
        if key.startswith('head.'):
            out.setdefault(key, value)
    return out
