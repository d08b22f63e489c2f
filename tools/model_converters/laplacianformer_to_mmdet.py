"""Convert a LaplacianFormer / SOFT-style checkpoint into an mmdet backbone.

Input: any raw checkpoint — timm-style (``state_dict_ema`` is preferred over
``state_dict``), DeiT-style (``model``), mmengine/mmpretrain (``state_dict``
with ``backbone.`` keys) or a plain state dict; ``module.`` prefixes are
removed. Output: ``{'state_dict': {'backbone.' + key: tensor}, 'meta': ...}``,
which both mmdet's ``load_from`` and the backbone's
``init_cfg=dict(type='Pretrained', checkpoint=...)`` load without options.

Key mapping. Keys already in LaplacianFormer naming pass through (those of
the version-1 layout, ``stem.*``, ``downsamples.{i}.*``, ``pos_embeds.{i}``,
``stages.{i}.{j}.*``, ``norm{i}.*``, are renamed to the current one by
``mmlaplacian.models.utils.checkpoint_keys``), so converting the converter's
own output gives the same tensors. Other keys go through the rules in
``RENAME_RULES`` / ``SKIP_RULES``, written for the PVT-v1 layout that SOFT's
official code follows (``patch_embed{i}``, ``pos_embed{i}``,
``block{i}.{j}.attn.q/kv/proj``, ``norm``, ``cls_token``, ``head``).
**The correspondence is our reconstruction**: the official SOFT++ /
LaplacianFormer key layout is not available to us, so the rules map only
tensors whose role and shape provably agree:

* ``pos_embed{i}`` (1, N[+1], C) → ``stages.{i-1}.pos_embed`` (1, C, H, W);
  a leading class-token position is dropped;
* ``block{i}.{j}.{norm1,norm2,attn.proj}`` → ``stages.{i-1}.blocks.{j}.*``,
  ``mlp.fc1`` / ``mlp.fc2`` → ``ffn.layers.0.0`` / ``ffn.layers.1``;
* ``attn.q`` → ``attn.q``; ``attn.kv`` is split into ``attn.k`` / ``attn.v``;
  ``attn.k`` is dropped when the model shares keys with queries; in the
  softmax stage q, k and v are concatenated into ``attn.qkv``;
* ``norm`` → ``stages.3.norm``; ``patch_embed{2,3,4}.proj.weight`` →
  ``stages.{1,2,3}.downsample.conv.weight`` only when it is a 3×3 conv like
  ours.

The rules write version-1 names, renamed like native keys afterwards.

PVT's spatial-reduction layers, the LayerNorms of patch embeddings (our
transitions use BatchNorm), the class token and the head have no
counterpart and are reported as skipped. The checkpoint is unpickled in
full (it may hold training arguments): convert only files you trust.

Example:
    python tools/model_converters/laplacianformer_to_mmdet.py \\
        soft_tiny.pth lf_tiny_mmdet.pth --arch tiny
"""
from __future__ import annotations

import argparse
import math
import re
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from mmlaplacian import __version__
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.backbones.laplacianformer import arch_of_state_dict
from mmlaplacian.models.utils import unwrap_state_dict
from mmlaplacian.models.utils.checkpoint_keys import upgrade_key
from mmlaplacian.utils import torch_load_full

Tensor = torch.Tensor


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
    """Result of :func:`convert_state_dict`."""
    state_dict: 'OrderedDict[str, Tensor]'
    arch: str
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


def _infer_arch(state: Mapping[str, Tensor]) -> str:
    name, found = arch_of_state_dict(state)
    if name is None:
        raise ValueError(f'no LaplacianFormer arch has depths '
                         f'{found["depths"]} and embed_dims '
                         f'{found["embed_dims"]}; pass --arch')
    return name


def _reference(arch: str,
               native_keys: Sequence[str]) -> 'OrderedDict[str, Tensor]':
    """State dict of a freshly built backbone matching the checkpoint.

    Attention options with parameters of their own (separate keys, a
    learnable λ) are read from the keys already in our naming.
    """
    attn_cfg = dict(
        share_qk=not any(k.endswith('.attn.k.weight') for k in native_keys),
        learnable_lam=any(k.endswith('.attn.log_lam') for k in native_keys))
    model = LaplacianFormer(arch, attn_cfg=attn_cfg)
    return model.state_dict()


def convert_state_dict(checkpoint: Mapping,
                       arch: Optional[str] = None) -> Conversion:
    """Map a raw checkpoint onto LaplacianFormer backbone keys.

    Args:
        checkpoint (Mapping): A loaded checkpoint of any supported layout.
        arch (str, optional): Arch name; inferred from the blocks when None.

    Returns:
        Conversion: The backbone state dict (without ``backbone.``) and what
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

    arch = arch or _infer_arch(state)
    reference = _reference(arch, native)
    _fuse_qkv(state, reference)
    for key in list(state):
        if key not in reference:
            reason = ('keys are shared with queries (share_qk)'
                      if key.endswith(('.attn.k.weight', '.attn.k.bias'))
                      else f'not a parameter of LaplacianFormer-{arch}')
            skipped[reason].append(key)
            state.pop(key)
        elif state[key].shape != reference[key].shape and not (
                key.endswith('.pos_embed')
                and state[key].shape[:2] == reference[key].shape[:2]):
            skipped[f'shape differs from LaplacianFormer-{arch}'].append(
                f'{key} {tuple(state[key].shape)} vs '
                f'{tuple(reference[key].shape)}')
            state.pop(key)
    return Conversion(
        state_dict=state,
        arch=arch,
        renamed=renamed,
        passed=len(native),
        skipped=skipped,
        missing=[k for k in reference if k not in state])


def load_checkpoint_file(path: str) -> Mapping:
    """Load ``path``, raising ``ValueError`` when it is no checkpoint."""
    try:
        checkpoint = torch_load_full(path, map_location='cpu')
    except FileNotFoundError:
        raise
    except Exception as err:  # pickle / zip / torch errors vary by version
        raise ValueError(f'{path} is not a PyTorch checkpoint '
                         f'({type(err).__name__}: {err})') from err
    try:
        unwrap_state_dict(checkpoint)
    except TypeError as err:
        raise ValueError(f'{path}: {err}') from err
    return checkpoint


def _summary(result: Conversion) -> str:
    lines = [
        f'mapped {result.mapped} tensors into LaplacianFormer-{result.arch} '
        f'({result.renamed} source keys renamed, {result.passed} already in '
        'LaplacianFormer naming)'
    ]
    total = sum(len(v) for v in result.skipped.values())
    lines.append(f'skipped {total} tensors')
    for reason, keys in result.skipped.items():
        lines.append(f'  {len(keys):4d}  {reason}: {", ".join(keys[:4])}'
                     f'{", ..." if len(keys) > 4 else ""}')
    lines.append(f'missing {len(result.missing)} tensors (they keep their '
                 'initialisation; out-of-stage norms and BatchNorm counters '
                 'are expected)')
    if result.missing:
        shown = ', '.join(result.missing[:8])
        more = ', ...' if len(result.missing) > 8 else ''
        lines.append(f'        {shown}{more}')
    return '\n'.join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Convert a LaplacianFormer / SOFT-style checkpoint into '
        'an mmdet-loadable backbone checkpoint.')
    parser.add_argument('src', help='input checkpoint')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument(
        '--arch',
        choices=sorted(k for k in LaplacianFormer.arch_zoo if len(k) > 1),
        help='backbone arch (inferred from the blocks when omitted)')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Conversion:
    args = parse_args(argv)
    try:
        result = convert_state_dict(load_checkpoint_file(args.src), args.arch)
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from err
    if result.mapped == 0:
        raise SystemExit(f'error: no tensor of {args.src} maps onto '
                         f'LaplacianFormer-{result.arch}')
    print(_summary(result))
    checkpoint = {
        'state_dict':
        OrderedDict(
            ('backbone.' + k, v) for k, v in result.state_dict.items()),
        'meta': {
            'arch': result.arch,
            'converted_by': 'laplacianformer_to_mmdet',
            'mmlaplacian_version': __version__,
        },
    }
    # Saved through a file object, the archive does not embed the file name:
    # converting the output again gives a byte-identical file.
    with open(args.dst, 'wb') as file:
        torch.save(checkpoint, file)
    print(f'wrote {args.dst}')
    return result


if __name__ == '__main__':
    main()
