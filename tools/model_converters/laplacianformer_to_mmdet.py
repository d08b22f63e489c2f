"""Convert a LaplacianFormer / SOFT-style checkpoint into an mmdet backbone.

Input: any raw checkpoint — timm-style (``state_dict_ema`` is preferred over
``state_dict``), DeiT-style (``model``), mmengine/mmpretrain (``state_dict``
with ``backbone.`` keys) or a plain state dict; ``module.`` prefixes are
removed. Output: ``{'state_dict': {'backbone.' + key: tensor}, 'meta': ...}``,
which both mmdet's ``load_from`` and the backbone's
``init_cfg=dict(type='Pretrained', checkpoint=...)`` load without options.

The mapping is the package's one checkpoint filter
(``mmlaplacian.models.checkpoint.state_dict_filter``), which the backbone's
``init_cfg`` also uses: keys already in LaplacianFormer naming pass through (those of
the version-1 layout, ``stem.*``, ``downsamples.{i}.*``, ``pos_embeds.{i}``,
``stages.{i}.{j}.*``, ``norm{i}.*``, are renamed to the current one by
``mmlaplacian.models.checkpoint.key_versions``), so converting the converter's
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
from collections import OrderedDict
from typing import Mapping, Optional, Sequence

import torch

from mmlaplacian import __version__
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.backbones.laplacianformer import arch_of_state_dict
from mmlaplacian.models.checkpoint import (Conversion, filter_checkpoint,
                                           load_checkpoint_file,
                                           unwrap_state_dict)

Tensor = torch.Tensor


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
    """Map a raw checkpoint onto LaplacianFormer backbone keys with the
    package's checkpoint filter.

    Args:
        checkpoint (Mapping): A loaded checkpoint of any supported layout.
        arch (str, optional): Arch name; inferred from the blocks when None.

    Returns:
        Conversion: The backbone state dict (without ``backbone.``) and what
        happened to every tensor.
    """
    def reference(state, native):
        chosen = arch or _infer_arch(state)
        return _reference(chosen, native), chosen

    return filter_checkpoint(
        checkpoint, reference, model='LaplacianFormer-{arch}')


def read_source(path: str) -> Mapping:
    """Load ``path``, raising ``ValueError`` when it holds no state dict."""
    checkpoint = load_checkpoint_file(path, map_location='cpu')
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
        result = convert_state_dict(read_source(args.src), args.arch)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as err:
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
