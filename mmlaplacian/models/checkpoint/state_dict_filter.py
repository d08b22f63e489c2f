"""The one checkpoint filter: checkpoints of many layouts as a LaplacianFormer
backbone state dict.

:func:`filter_checkpoint` takes plain state dicts; ``state_dict`` /
``state_dict_ema`` / ``model`` wrappers (mmengine, timm, torchvision-style
trainers); ``module.`` prefixes (DataParallel / DDP); ``backbone.``
prefixes (mmpretrain classifiers, mmdet detectors); keys of earlier
mmlaplacian versions (:mod:`.key_versions`); and SOFT-style (PVT-v1
layout) keys through :data:`RENAME_RULES` / :data:`SKIP_RULES`. It fuses q,
k, v where the model has one projection, resizes position embeddings saved
for another grid, and reports every tensor it skips and why. The
backbone's ``init_cfg`` loader, the timm adapter and
``tools/model_converters/laplacianformer_to_mmdet.py`` all use it; the
backbone's state-dict hook applies its key upgrade. Applying it to its own
output changes nothing.

**The SOFT-style correspondence is our reconstruction**: the official SOFT++
/ LaplacianFormer key layout is not available, so the rules map only
tensors whose role and shape provably agree (the converter's docstring
lists them).
"""
from __future__ import annotations

import math
import re
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import (Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import torch
import torch.nn.functional as F

from .key_versions import upgrade_key

Tensor = torch.Tensor

# EMA weights first: they are what the published classifiers evaluate.
WRAPPER_KEYS = ('state_dict_ema', 'state_dict', 'model_ema', 'model')
# Skip reasons that name the model ({model}: e.g. 'LaplacianFormer-tiny').
SHAPE_DIFFERS = 'shape differs from {model}'
NOT_A_PARAMETER = 'not a parameter of {model}'
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
    stripped = _strip_prefixes(
        unwrap_state_dict(checkpoint), defaultdict(list))
    return OrderedDict((k, v) for k, v in stripped.items()
                       if not k.startswith(DROPPED_PREFIXES))


def _tokens_to_grid(pos: Tensor) -> Tensor:
    """(1, N[+1], C) position embedding → (1, C, H, W)."""
    if pos.ndim == 4:
        return pos
    if pos.ndim != 3:
        raise ValueError(f'position embedding of shape {tuple(pos.shape)}')
    tokens = pos.shape[1]
    if math.isqrt(tokens)**2 != tokens:
        if math.isqrt(tokens - 1)**2 != tokens - 1:
            raise ValueError(f'{tokens} positions do not form a square grid')
        pos, tokens = pos[:, 1:], tokens - 1  # drop the class-token slot
    side = math.isqrt(tokens)
    return pos.reshape(1, side, side, -1).permute(0, 3, 1, 2).contiguous()


def _split_kv(kv: Tensor) -> List[Tensor]:
    # Clones: a saved view would carry the whole kv storage along.
    return [part.clone() for part in kv.chunk(2, dim=0)]


# (source pattern, target template(s), tensor transform). ``{s}`` is the
# 0-based stage of a 1-based ``(?P<stage>)`` group; ``{rest}`` the remainder.
Rule = Tuple[str, Sequence[str], Optional[Callable[[Tensor], object]]]
RENAME_RULES: List[Rule] = [
    (r'^pos_embed(?P<stage>[1-4])$', ['pos_embeds.{s}'], _tokens_to_grid),
    (r'^block(?P<stage>[1-4])\.(?P<block>\d+)\.(?P<rest>(norm1|norm2|'
     r'mlp\.fc1|mlp\.fc2|attn\.proj|attn\.q)\.(weight|bias))$',
     ['stages.{s}.{block}.{rest}'], None),
    (r'^block(?P<stage>[1-4])\.(?P<block>\d+)\.attn\.kv\.(?P<p>weight|bias)$',
     ['stages.{s}.{block}.attn.k.{p}', 'stages.{s}.{block}.attn.v.{p}'],
     _split_kv),
    (r'^norm\.(?P<p>weight|bias)$', ['norm3.{p}'], None),
    (r'^patch_embed(?P<stage>[2-4])\.proj\.weight$',
     ['downsamples.{d}.0.weight'], None),
]
SKIP_RULES: List[Tuple[str, str]] = [
    (r'^cls_token$', 'class token (the classifier pools instead)'),
    (r'^(head|neck|data_preprocessor)\.', 'classifier head, not backbone'),
    (r'^block\d\.\d+\.attn\.(sr|norm)\.',
     'PVT spatial reduction (no counterpart)'),
    (r'^patch_embed\d\.norm\.',
     'LayerNorm of a patch embedding (our transitions use BatchNorm)'),
]
# Version-1 and current LaplacianFormer names.
_OUR_PREFIXES = re.compile(
    r'^(stem\.|downsamples\.\d|pos_embeds\.\d|stages\.\d|norm\d\.)')


@dataclass
class Conversion:
    """Result of :func:`filter_checkpoint`.

    Attributes:
        state_dict (OrderedDict): Backbone tensors, keys without prefix.
        arch (str, optional): The variant, where the caller knows it.
        renamed (int): Source keys mapped by the SOFT-style rules.
        passed (int): Source keys already in LaplacianFormer naming.
        skipped (dict): Reason -> keys left out.
        missing (list): Model keys the checkpoint does not provide.
    """
    state_dict: 'OrderedDict[str, Tensor]'
    arch: Optional[str] = None
    renamed: int = 0
    passed: int = 0
    skipped: Dict[str, List[str]] = field(
        default_factory=lambda: defaultdict(list))
    missing: List[str] = field(default_factory=list)

    @property
    def mapped(self) -> int:
        return len(self.state_dict)


def _strip_prefixes(state: Mapping, skipped: Dict[str, List[str]]) -> dict:
    stripped = OrderedDict()
    for key, value in state.items():
        if not isinstance(value, Tensor):
            continue
        while key.startswith('module.'):
            key = key[len('module.'):]
        stripped[key] = value
    if any(k.startswith('backbone.') for k in stripped):
        for key in [k for k in stripped if not k.startswith('backbone.')]:
            stripped.pop(key)
            skipped['not part of the backbone'].append(key)
        stripped = OrderedDict(
            (k[len('backbone.'):], v) for k, v in stripped.items())
    return stripped


def _rename(key: str, value: Tensor) -> Optional[List[Tuple[str, Tensor]]]:
    for pattern, targets, transform in RENAME_RULES:
        match = re.match(pattern, key)
        if match is None:
            continue
        fields = match.groupdict()
        if 'stage' in fields:
            fields['s'] = int(fields['stage']) - 1
            fields['d'] = int(fields['stage']) - 2
        out = transform(value) if transform else value
        values = out if isinstance(out, list) else [out]
        return [(t.format(**fields), v) for t, v in zip(targets, values)]
    return None


def _fuse_qkv(state: 'OrderedDict[str, Tensor]',
              reference: Mapping[str, Tensor]) -> None:
    """Concatenate q, k, v into ``attn.qkv`` where the model has one."""
    for key in [k for k in state if k.endswith('.attn.q.weight')]:
        base = key[:-len('q.weight')]
        if base + 'qkv.weight' not in reference:
            continue
        for param in ('weight', 'bias'):
            parts = [base + f'{n}.{param}' for n in 'qkv']
            if all(p in state for p in parts):
                state[base + f'qkv.{param}'] = torch.cat(
                    [state.pop(p) for p in parts], dim=0)


def resize_pos_embed(saved: Tensor, size: Sequence[int]) -> Tensor:
    """A ``(1, C, h, w)`` position embedding resized (bilinearly) to
    ``size = (H, W)``, in its own dtype."""
    return F.interpolate(
        saved.float(), size=tuple(size), mode='bilinear',
        align_corners=False).to(saved.dtype)


Reference = Union[Mapping[str, Tensor],
                  Callable[[Mapping[str, Tensor], List[str]],
                           Tuple[Mapping[str, Tensor], str]]]


def filter_checkpoint(checkpoint: Mapping,
                      reference: Reference,
                      drop_mismatched: bool = True,
                      model: str = 'this LaplacianFormer') -> Conversion:
    """A checkpoint of any supported layout as backbone tensors.

    Args:
        checkpoint (Mapping): A loaded checkpoint.
        reference (Mapping | Callable): The target model's state dict, or a
            function ``(renamed_state, native_keys) -> (state dict, arch)``
            that builds it once the tensors are renamed (the converter
            infers the variant from them).
        drop_mismatched (bool): Skip tensors whose shape differs from the
            reference (position embeddings excepted: they are resized).
            With False they are kept, for the caller to report.
        model (str): The model's name in the skip reasons; ``{arch}`` in
            it is filled with the arch a callable ``reference`` returns.

    Returns:
        Conversion: The state dict (keys without ``backbone.``), and what
        happened to every tensor.
    """
    skipped: Dict[str, List[str]] = defaultdict(list)
    source = _strip_prefixes(unwrap_state_dict(checkpoint), skipped)
    state: 'OrderedDict[str, Tensor]' = OrderedDict()
    native: List[str] = []
    renamed = 0
    for key, value in source.items():
        if _OUR_PREFIXES.match(key):
            state[upgrade_key(key)] = value
            native.append(upgrade_key(key))
            continue
        reason = next((r for p, r in SKIP_RULES if re.match(p, key)), None)
        try:
            pairs = None if reason else _rename(key, value)
        except ValueError as err:  # e.g. a non-square position grid
            pairs, reason = None, str(err)
        if pairs is None:
            skipped[reason or 'no mapping rule'].append(key)
            continue
        state.update((upgrade_key(k), v) for k, v in pairs)
        renamed += 1

    arch = None
    if callable(reference):
        reference, arch = reference(state, native)
    model = model.format(arch=arch)
    _fuse_qkv(state, reference)
    for key in list(state):
        if key not in reference:
            reason = ('keys are shared with queries (share_qk)'
                      if key.endswith(('.attn.k.weight', '.attn.k.bias'))
                      else NOT_A_PARAMETER.format(model=model))
            skipped[reason].append(key)
            state.pop(key)
            continue
        want = reference[key].shape
        if state[key].shape == want:
            continue
        if key.endswith('.pos_embed') and state[key].shape[:2] == want[:2]:
            state[key] = resize_pos_embed(state[key], want[-2:])
        elif drop_mismatched:
            skipped[SHAPE_DIFFERS.format(model=model)].append(
                f'{key} {tuple(state[key].shape)} vs {tuple(want)}')
            state.pop(key)
    return Conversion(
        state_dict=state,
        arch=arch,
        renamed=renamed,
        passed=len(native),
        skipped=skipped,
        missing=[k for k in reference if k not in state])
