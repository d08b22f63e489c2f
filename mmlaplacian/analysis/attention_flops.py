"""Analytic FLOP counts of the two attention layers.

Units follow fvcore / mmengine's ``FlopAnalyzer`` (the "FLOPs" of the PVT,
SOFT and Swin papers): one multiply-accumulate (MAC) counts as one FLOP, and
element-wise operations (``exp``, softmax, additions, scaling by 1/λ) are not
counted. Two conventions of our own:

* the Laplacian kernel ``exp(-||a - b||_1)`` costs one MAC-equivalent per
  ``|a_k - b_k|`` accumulation, i.e. ``N·M·d`` for an ``N×M`` matrix of
  ``d``-dimensional rows (the same as the ``a @ bᵀ`` of the Gaussian kernel);
* the per-sample whitening costs 4 per element of the ``N×m`` matrix (mean,
  variance, centring, scaling), as mmengine counts a norm without affine.

All counts are per sample (batch 1).
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch.nn as nn

from mmlaplacian.models.layers import (LaplacianAttention, SoftmaxAttention,
                                       landmark_grid)


def laplacian_attention_flops(hw_shape: Tuple[int, int],
                              embed_dims: int,
                              num_heads: int,
                              share_qk: bool = True,
                              num_landmarks: int = 49,
                              ns_iters: int = 20,
                              feature_map: str = 'whiten',
                              inverse: str = 'newton',
                              conv_kernel_size: int = 3) -> Dict[str, int]:
    """FLOPs of one :class:`LaplacianAttention` call, term by term.

    With ``C`` channels, ``h`` heads of ``d = C/h``, ``N = H·W`` tokens and
    ``m`` landmarks (``min(N, num_landmarks)`` on an aspect-kept grid):

    * ``linear``: q, v, proj (and k unless shared): ``N·C²`` each;
    * ``pool``: adaptive average pooling of q (and k): ``N·C`` each, zero
      when the tokens are their own landmarks;
    * ``kernel``: ``Kq`` ``N·m·C``, ``Kk`` ``N·m·C`` unless shared, ``W``
      ``m²·C``;
    * ``inverse``: Newton–Schulz ``iters · 2m³`` per head (``X·A`` and
      ``(X·A)·X``); ``torch.linalg.inv`` ``m³`` per head;
    * ``whiten``: ``4·N·m`` per head;
    * ``context``: ``Kkᵀ V`` ``m·N·d``, ``X·ctx`` ``m²·d``, ``Z·ctx``
      ``N·m·d`` per head;
    * ``dwconv``: ``N·C·k²``.

    Args:
        hw_shape (tuple[int, int]): Token grid ``(H, W)``.
        embed_dims (int): Channels C.
        num_heads (int): Heads h.
        share_qk (bool): Whether the keys are the queries.
        num_landmarks (int): Upper bound on the landmarks.
        ns_iters (int): Newton–Schulz iterations.
        feature_map (str): ``'whiten'`` or ``'none'``.
        inverse (str): ``'newton'`` or ``'exact'``.
        conv_kernel_size (int): Depthwise conv kernel on V; 0 for none.

    Returns:
        dict[str, int]: FLOPs per term (keys as listed above).
    """
    height, width = hw_shape
    tokens, dims = height * width, embed_dims
    grid = landmark_grid(hw_shape, num_landmarks)
    m = grid[0] * grid[1]
    num_keys = 1 if share_qk else 2
    pooled = 0 if tuple(grid) == (height, width) else tokens * dims
    inv_per_head = 2 * ns_iters * m**3 if inverse == 'newton' else m**3
    return {
        'linear': (2 + num_keys) * tokens * dims * dims,
        'pool': num_keys * pooled,
        'kernel': num_keys * tokens * m * dims + m * m * dims,
        'inverse': num_heads * inv_per_head,
        'whiten':
        4 * num_heads * tokens * m if feature_map == 'whiten' else 0,
        'context': 2 * tokens * m * dims + m * m * dims,
        'dwconv': tokens * dims * conv_kernel_size**2,
    }


def softmax_attention_flops(num_tokens: int,
                            embed_dims: int) -> Dict[str, int]:
    """FLOPs of one :class:`SoftmaxAttention` call, term by term.

    ``linear``: qkv ``3·N·C²`` and proj ``N·C²``; ``attention``: ``Q·Kᵀ`` and
    ``P·V``, ``N²·d`` each per head, i.e. ``2·N²·C`` (independent of h).

    Args:
        num_tokens (int): Tokens N.
        embed_dims (int): Channels C.

    Returns:
        dict[str, int]: FLOPs per term.
    """
    return {
        'linear': 4 * num_tokens * embed_dims * embed_dims,
        'attention': 2 * num_tokens * num_tokens * embed_dims,
    }


def attention_module_flops(module: nn.Module, hw_shape: Tuple[int,
                                                               int]) -> int:
    """Total FLOPs of one call of a built attention module on a grid.

    Args:
        module (nn.Module): A :class:`LaplacianAttention` or
            :class:`SoftmaxAttention`.
        hw_shape (tuple[int, int]): Token grid ``(H, W)`` of the call.

    Returns:
        int: FLOPs per sample.
    """
    if isinstance(module, LaplacianAttention):
        terms = laplacian_attention_flops(
            hw_shape,
            module.embed_dims,
            module.num_heads,
            share_qk=module.share_qk,
            num_landmarks=module.num_landmarks,
            ns_iters=module.ns_iters,
            feature_map=module.feature_map,
            inverse=module.inverse,
            conv_kernel_size=module.dwconv.kernel_size[0]
            if module.dwconv is not None else 0)
    elif isinstance(module, SoftmaxAttention):
        terms = softmax_attention_flops(hw_shape[0] * hw_shape[1],
                                        module.proj.in_features)
    else:
        raise TypeError('expected LaplacianAttention or SoftmaxAttention, '
                        f'got {type(module).__name__}')
    return sum(terms.values())
