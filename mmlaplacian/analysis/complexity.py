"""Analytic parameter and FLOP counts of LaplacianFormer and its classifier.

Nothing is built or run: the counts follow from the architecture, so they
cover the custom attention ops that jit-tracing counters cannot see.
FLOPs are multiply-accumulates with mmengine's (fvcore's) conventions, the
"FLOPs" of the PVT/SOFT/Swin papers: convolutions and linear layers count
their MACs, eval-mode BatchNorm 2 and LayerNorm 5 per element, adaptive
average pooling 1 per input element, bilinear resizing 4 per output element;
activations and additions are free. The attention terms are described in
:mod:`mmlaplacian.analysis.attention_flops`.

Example:
    >>> report = classifier_complexity((224, 224), arch='medium')
    >>> f'{report.params / 1e6:.2f}M {report.flops / 1e9:.2f}G'
    '45.67M 8.64G'
"""
from __future__ import annotations

import inspect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Sequence, Tuple

from mmlaplacian.models.backbones import LaplacianFormer
from mmlaplacian.models.layers import LaplacianAttention
from .attention_flops import (laplacian_attention_flops,
                              softmax_attention_flops)

_ATTN_COST_ARGS = ('share_qk', 'num_landmarks', 'ns_iters', 'feature_map',
                   'inverse', 'conv_kernel_size')


@dataclass
class ComplexityReport:
    """Parameters and FLOPs (MACs), in total and per named part.

    Part names look like ``'stem'``, ``'stage2.downsample'``,
    ``'stage1.attention.kernel'``, ``'stage4.mlp'``, ``'head'``.
    """
    params_by_part: Dict[str, int] = field(default_factory=OrderedDict)
    flops_by_part: Dict[str, int] = field(default_factory=OrderedDict)

    @property
    def params(self) -> int:
        return sum(self.params_by_part.values())

    @property
    def flops(self) -> int:
        return sum(self.flops_by_part.values())

    def add(self, part: str, params: int = 0, flops: int = 0) -> None:
        """Accumulate ``params`` and ``flops`` under ``part``."""
        self.params_by_part[part] = self.params_by_part.get(part, 0) + params
        self.flops_by_part[part] = self.flops_by_part.get(part, 0) + flops

    def flops_of(self, prefix: str) -> int:
        """FLOPs of all parts whose name starts with ``prefix``."""
        return sum(v for k, v in self.flops_by_part.items()
                   if k.startswith(prefix))

    def params_of(self, prefix: str) -> int:
        """Parameters of all parts whose name starts with ``prefix``."""
        return sum(v for k, v in self.params_by_part.items()
                   if k.startswith(prefix))


def _defaults(cls: type) -> dict:
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def _conv_out(size: int, stride: int) -> int:
    """Output size of a 3×3 convolution with padding 1."""
    return (size - 1) // stride + 1


def _conv_bn(report: ComplexityReport, part: str, cin: int, cout: int,
             hw: Tuple[int, int]) -> None:
    """3×3 conv (no bias) + BatchNorm (eval) + ReLU at output grid ``hw``."""
    pixels = hw[0] * hw[1]
    report.add(part, 9 * cin * cout + 2 * cout,
               9 * cin * cout * pixels + 2 * cout * pixels)


def _linear_params(cin: int, cout: int, bias: bool = True) -> int:
    return cin * cout + (cout if bias else 0)


def _add_attention(report: ComplexityReport, part: str, kind: str,
                   hw: Tuple[int, int], dims: int, heads: int,
                   attn_cfg: dict) -> None:
    tokens = hw[0] * hw[1]
    if kind == 'softmax':
        params = _linear_params(dims, 3 * dims) + _linear_params(dims, dims)
        terms = softmax_attention_flops(tokens, dims)
    elif kind == 'laplacian':
        num_keys = 1 if attn_cfg['share_qk'] else 2
        kernel = attn_cfg['conv_kernel_size']
        params = ((1 + num_keys) *
                  _linear_params(dims, dims, attn_cfg['qkv_bias']) +
                  _linear_params(dims, dims) +
                  (dims * kernel * kernel + dims if kernel > 0 else 0) +
                  (heads if attn_cfg['learnable_lam'] else 0))
        terms = laplacian_attention_flops(
            hw, dims, heads, **{k: attn_cfg[k]
                                for k in _ATTN_COST_ARGS})
    else:
        raise ValueError(f"attention must be 'laplacian' or 'softmax', got "
                         f'{kind!r}')
    report.add(part, params=params)
    for term, flops in terms.items():
        report.add(f'{part}.{term}', flops=flops)


def _resolve_cfg(backbone_cfg: dict) -> dict:
    """LaplacianFormer arguments with defaults filled in; rejects typos."""
    signature = inspect.signature(LaplacianFormer.__init__)
    signature.bind_partial(None, **backbone_cfg)  # TypeError on unknown keys
    cfg = {**_defaults(LaplacianFormer), **backbone_cfg}
    arch = cfg['arch']
    cfg['arch'] = LaplacianFormer.arch_zoo[arch.lower()] if isinstance(
        arch, str) else arch
    return cfg


def backbone_complexity(input_shape: Sequence[int] = (224, 224),
                        **backbone_cfg) -> ComplexityReport:
    """Parameters and FLOPs of a LaplacianFormer backbone on one image.

    Args:
        input_shape (Sequence[int]): Image ``(H, W)``.
        **backbone_cfg: :class:`LaplacianFormer` arguments (``arch``,
            ``attn_cfg``, ``out_indices``, ...); missing ones take the
            constructor defaults.

    Returns:
        ComplexityReport: Counts per part.
    """
    cfg = _resolve_cfg(backbone_cfg)
    arch = cfg['arch']
    dims, depths, heads = (arch['embed_dims'], arch['depths'],
                           arch['num_heads'])
    hidden = [int(c * cfg['mlp_ratio']) for c in dims]
    base_attn = {**_defaults(LaplacianAttention)}
    report = ComplexityReport()

    height, width = input_shape
    hw = (_conv_out(height, 2), _conv_out(width, 2))
    _conv_bn(report, 'stem', cfg['in_channels'], 32, hw)
    _conv_bn(report, 'stem', 32, 32, hw)
    hw = (_conv_out(hw[0], 2), _conv_out(hw[1], 2))
    _conv_bn(report, 'stem', 32, dims[0], hw)

    for i in range(4):
        stage = f'stage{i + 1}'
        if i > 0:
            hw = (_conv_out(hw[0], 2), _conv_out(hw[1], 2))
            _conv_bn(report, f'{stage}.downsample', dims[i - 1], dims[i], hw)
        tokens, channels = hw[0] * hw[1], dims[i]
        grid = cfg['pretrain_img_size'] // 2**(i + 2)
        resize = 0 if hw == (grid, grid) else 4 * channels * tokens
        report.add(f'{stage}.pos_embed', channels * grid * grid, resize)

        last = i == 3
        kind = cfg['stage4_attention'] if last else cfg['linear_attention']
        attn_cfg = {
            **base_attn, 'conv_kernel_size':
            0 if last else cfg['conv_kernel_sizes'][i],
            **(cfg['attn_cfg'] or {})
        }
        for _ in range(depths[i]):
            report.add(f'{stage}.norm', 2 * 2 * channels,
                       2 * 5 * tokens * channels)
            _add_attention(report, f'{stage}.attention', kind, hw, channels,
                           heads[i], attn_cfg)
            report.add(
                f'{stage}.mlp',
                _linear_params(channels, hidden[i]) +
                _linear_params(hidden[i], channels),
                2 * tokens * channels * hidden[i])
        if i in tuple(cfg['out_indices']):
            report.add(f'{stage}.out_norm', 2 * channels,
                       5 * tokens * channels)
    return report


def classifier_complexity(input_shape: Sequence[int] = (224, 224),
                          num_classes: int = 1000,
                          **backbone_cfg) -> ComplexityReport:
    """Backbone (last stage out) + global average pooling + linear head.

    The model of ``configs/imagenet``: ``out_indices=(3,)`` unless given.

    Args:
        input_shape (Sequence[int]): Image ``(H, W)``.
        num_classes (int): Classes of the linear head. Defaults to 1000.
        **backbone_cfg: :class:`LaplacianFormer` arguments.

    Returns:
        ComplexityReport: Counts per part, the head under ``'head'``.
    """
    backbone_cfg.setdefault('out_indices', (3, ))
    report = backbone_complexity(input_shape, **backbone_cfg)
    cfg = _resolve_cfg(backbone_cfg)
    channels = cfg['arch']['embed_dims'][3]
    height, width = input_shape
    for _ in range(5):  # stem (2 strided convs) and three downsamples
        height, width = _conv_out(height, 2), _conv_out(width, 2)
    report.add('neck', 0, channels * height * width)
    report.add('head', _linear_params(channels, num_classes),
               channels * num_classes)
    return report
