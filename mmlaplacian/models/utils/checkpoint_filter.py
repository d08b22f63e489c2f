"""Turn checkpoints of many layouts into a LaplacianFormer backbone state dict.

Accepted: plain state dicts; ``state_dict`` / ``state_dict_ema`` / ``model``
wrappers (mmengine, timm, torchvision-style trainers); ``module.`` prefixes
(DataParallel / DDP); ``backbone.`` prefixes (mmpretrain classifiers and
mmdet detectors). Applying the filter to its own output changes nothing.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import torch

# EMA weights first: they are what the published classifiers evaluate.
WRAPPER_KEYS = ('state_dict_ema', 'state_dict', 'model_ema', 'model')
# Classifier-only tensors: a detection backbone has no use for them.
DROPPED_PREFIXES = ('head.', 'neck.', 'cls_token', 'data_preprocessor.')


def unwrap_state_dict(checkpoint: Mapping) -> Mapping[str, torch.Tensor]:
    """Return the tensor mapping inside a checkpoint wrapper.

    Raises:
        TypeError: When no mapping of tensors can be found.
    """
    if not isinstance(checkpoint, Mapping):
        raise TypeError('expected a checkpoint dict, got '
                        f'{type(checkpoint).__name__}')
    for key in WRAPPER_KEYS:
        inner = checkpoint.get(key)
        if isinstance(inner, Mapping) and inner:
            return inner
    if any(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return checkpoint
    raise TypeError('no state dict in the checkpoint: it holds the keys '
                    f'{sorted(checkpoint)[:10]}, none of {WRAPPER_KEYS} '
                    'and no tensors')


def filter_backbone_state_dict(checkpoint: Mapping) -> 'OrderedDict':
    """Backbone tensors with wrapper, ``module.`` and ``backbone.`` removed.

    Args:
        checkpoint (Mapping): A loaded checkpoint of any supported layout.

    Returns:
        OrderedDict: Keys as :class:`LaplacianFormer` names them.
    """
    state = unwrap_state_dict(checkpoint)
    stripped = OrderedDict()
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            continue
        while key.startswith('module.'):
            key = key[len('module.'):]
        stripped[key] = value
    if any(k.startswith('backbone.') for k in stripped):
        stripped = OrderedDict((k[len('backbone.'):], v)
                               for k, v in stripped.items()
                               if k.startswith('backbone.'))
    return OrderedDict((k, v) for k, v in stripped.items()
                       if not k.startswith(DROPPED_PREFIXES))
