"""Conv + BatchNorm folded into one conv, once per weight update."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule

from .token_chunks import cpu_inference_active


def folded_conv_bn(
        module: ConvModule) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """``(weight, bias)`` of ``module``'s conv with its BatchNorm folded in.

    None when the module has no BatchNorm after the conv, or the BatchNorm
    normalises with batch statistics (training). The result is cached on the
    module and recomputed only when a weight or statistic has changed
    (tensor versions and storage are compared; an in-place update, a
    ``load_state_dict`` or a ``.to()`` all invalidate it).
    """
    conv, norm = module.conv, getattr(module, 'bn', None)
    if (norm is None or norm.training or norm.running_var is None
            or module.order[:2] != ('conv', 'norm')):
        return None
    sources = (conv.weight, norm.weight, norm.bias, norm.running_mean,
               norm.running_var)
    key = tuple((t.data_ptr(), t._version) for t in sources) + (norm.eps, )
    cache = module.__dict__.get('_folded_cache')
    if cache is not None and cache[0] == key:
        return cache[1]
    with torch.no_grad():
        scale = norm.weight * torch.rsqrt(norm.running_var + norm.eps)
        bias = norm.bias - norm.running_mean * scale
        if conv.bias is not None:
            bias = bias + conv.bias * scale
        weight = conv.weight * scale.to(conv.weight.dtype)[:, None, None,
                                                           None]
        folded = (weight, bias.to(conv.weight.dtype))
    module.__dict__['_folded_cache'] = (key, folded)
    return folded


class FoldedConvModule(ConvModule):
    """:class:`ConvModule` (conv → BN → act) that, in CPU inference with
    BatchNorm in eval mode, runs one conv with BN folded in: one pass over
    the map instead of three."""

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        folded = folded_conv_bn(self) if cpu_inference_active(x) else None
        if folded is None:
            return super().forward(x, *args, **kwargs)
        out = F.conv2d(x, *folded, self.conv.stride, self.conv.padding,
                       self.conv.dilation, self.conv.groups)
        return self.activate(out) if self.with_activation else out
