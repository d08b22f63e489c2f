"""Forms of standard operators that XNNPACK runs in its fast kernels.

``torch.export`` writes some operators in a form that XNNPACK either runs
in a slow kernel or leaves to ExecuTorch's portable kernels, single-threaded
loops. :func:`xnnpack_decompositions` gives ``run_decompositions`` the same
arithmetic in operators XNNPACK runs well:

- **Softmax attention.** The stock decomposition of
  ``scaled_dot_product_attention`` guards rows whose every score is
  ``-inf`` (``eq``, ``any``, ``logical_not``, ``where`` over the whole
  ``(B, h, N, N)`` score matrix), for masks that can hide a whole row.
  XNNPACK takes none of those operators, and without a mask no row can be
  hidden. The form here is the product, softmax and product XNNPACK runs,
  with the scale folded into the queries. Tiny backbone at 800×1344: the
  guard took 150 ms of a 1.08 s program.
- **Large depthwise convolutions.** XNNPACK has depthwise kernels for up
  to 25 taps; a larger kernel runs as a grouped convolution, a GEMM per
  channel. A 9×9 depthwise convolution over 64 channels at 200×336 took
  160 ms there (the same in int8) against 24 ms in eager PyTorch. The form
  here tiles the kernel into 5×5 pieces and adds their convolutions,
  each cropped to its shift: 5×5 depthwise kernels, about 4 ms each.
- **Batched matrix products.** ``matmul`` of two ``(..., n, k)`` and
  ``(..., k, m)`` tensors decomposes into ``expand`` (even to the shape the
  operand already has), ``view`` and ``bmm``; ExecuTorch runs each
  ``expand`` as a portable copy (44 of them in the Tiny backbone, 25 ms at
  800×1344). With equal batch dimensions the form here is a reshape to
  three dimensions, ``bmm`` and a reshape back.

All are exact rewrites (the same sums, in another order) and leave every
other case to the stock operator.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

import torch
import torch.nn.functional as F

aten = torch.ops.aten
# Taps of XNNPACK's largest depthwise kernel (5×5).
DEPTHWISE_TAPS = 25
TILE = 5


def softmax_attention(query: torch.Tensor,
                      key: torch.Tensor,
                      value: torch.Tensor,
                      attn_mask: Optional[torch.Tensor] = None,
                      dropout_p: float = 0.,
                      is_causal: bool = False,
                      *,
                      scale: Optional[float] = None,
                      enable_gqa: bool = False) -> torch.Tensor:
    """``softmax(q kᵀ · scale) v`` as two products and a softmax, where
    nothing can mask a whole row; the stock form otherwise."""
    if attn_mask is not None or dropout_p or is_causal or enable_gqa:
        # The operator's own composite form (its stock decomposition).
        return aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal,
            scale=scale, enable_gqa=enable_gqa)
    if scale is None:
        scale = 1. / math.sqrt(query.shape[-1])
    scores = (query * scale) @ key.transpose(-1, -2)
    return torch.softmax(scores, dim=-1) @ value


def _pair(values: Sequence[int]):
    return tuple(values) * 2 if len(values) == 1 else tuple(values)


def _tiled_depthwise(image: torch.Tensor, weight: torch.Tensor,
                     bias: Optional[torch.Tensor],
                     padding: Sequence[int]) -> torch.Tensor:
    """A stride-1 depthwise convolution as the sum of 5×5 depthwise
    convolutions, one per 5×5 tile of the kernel.

    The kernel is zero-padded to whole tiles. The tile at ``(a, b)`` is a
    convolution with the padding grown by what the tiles added, whose
    output, cropped at ``(a, b)``, is that tile's share: the shift is a crop
    of the output rather than a pad of the input, because XNNPACK refuses
    an int8 constant pad.
    """
    channels, _, kernel_h, kernel_w = weight.shape
    tiles_h, tiles_w = -(-kernel_h // TILE), -(-kernel_w // TILE)
    extra_h, extra_w = tiles_h * TILE - kernel_h, tiles_w * TILE - kernel_w
    pad = [padding[0] + extra_h, padding[1] + extra_w]
    out_h = image.shape[-2] + 2 * padding[0] - kernel_h + 1
    out_w = image.shape[-1] + 2 * padding[1] - kernel_w + 1
    kernel = F.pad(weight, (0, extra_w, 0, extra_h))
    out = None
    for a in range(0, tiles_h * TILE, TILE):
        for b in range(0, tiles_w * TILE, TILE):
            part = aten.convolution.default(
                image, kernel[..., a:a + TILE, b:b + TILE],
                bias if out is None else None, [1, 1], pad, [1, 1], False,
                [0, 0], channels)
            top, left = a + extra_h, b + extra_w
            part = part[..., top:top + out_h, left:left + out_w]
            out = part if out is None else out + part
    return out


def conv2d(image: torch.Tensor,
           weight: torch.Tensor,
           bias: Optional[torch.Tensor] = None,
           stride: Sequence[int] = (1, 1),
           padding: Sequence[int] = (0, 0),
           dilation: Sequence[int] = (1, 1),
           groups: int = 1) -> torch.Tensor:
    """``conv2d``, with a stride-1 depthwise convolution of more than 25
    taps tiled into 5×5 depthwise convolutions."""
    stride, padding, dilation = map(_pair, (stride, padding, dilation))
    channels, per_group, kernel_h, kernel_w = weight.shape
    depthwise = (per_group == 1 and groups == channels
                 and image.shape[-3] == channels)
    if (depthwise and kernel_h * kernel_w > DEPTHWISE_TAPS
            and stride == (1, 1) and dilation == (1, 1)):
        return _tiled_depthwise(image, weight, bias, padding)
    return aten.convolution.default(image, weight, bias, list(stride),
                                    list(padding), list(dilation), False,
                                    [0, 0], groups)


def matmul(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``matmul`` in ``mm`` / ``bmm``, expanding an operand only where its
    batch dimensions differ from the broadcast ones."""
    if left.ndim == 1 and right.ndim == 1:
        return aten.dot.default(left, right)
    if left.ndim == 1:
        return matmul(left.unsqueeze(0), right).squeeze(-2)
    if right.ndim == 1:
        return matmul(left, right.unsqueeze(-1)).squeeze(-1)
    if right.ndim == 2:
        # Rows of every batch at once: one product with a 2-D weight.
        out = aten.mm.default(left.reshape(-1, left.shape[-1]), right)
        return out.view(*left.shape[:-1], right.shape[-1])
    batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])
    operands = [
        t if t.shape[:-2] == batch else t.expand(*batch, *t.shape[-2:])
        for t in (left, right)
    ]
    out = aten.bmm.default(*(t.reshape(-1, *t.shape[-2:]) for t in operands))
    return out.view(*batch, *out.shape[-2:])


def xnnpack_decompositions() -> Dict:
    """Decomposition table of the forms above, for
    ``ExportedProgram.run_decompositions`` before lowering to XNNPACK.

    Returns:
        dict: ``{operator overload: function}``; merge it with
        :func:`mmlaplacian.ops.export_decompositions`.
    """
    return {
        aten.scaled_dot_product_attention.default: softmax_attention,
        aten.conv2d.default: conv2d,
        aten.matmul.default: matmul,
    }
