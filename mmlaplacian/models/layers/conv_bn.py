"""3x3 conv → BatchNorm → ReLU, with BatchNorm folded in for inference."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_weights

from .chunking import ChunkedForms


class ConvBNReLU(ChunkedForms, nn.Module):
    """``ReLU(BN(conv3x3(x)))``: the stem's and the stage transitions' brick.

    Parameter names (``conv.weight``, ``bn.*``) and initialisation (PyTorch's
    default, then Kaiming-normal fan-out on the conv, BN at weight 1 and
    bias 0) are those of mmcv's ``ConvModule`` with ``norm_cfg=dict(
    type='BN')``, so checkpoints load and seeded builds draw the same
    weights.

    Its chunked form (``mode``, see
    :mod:`~mmlaplacian.models.layers.chunking`) is one conv with the
    BatchNorm folded in (:func:`fold_batchnorm`): one pass over the map
    instead of three. It needs BatchNorm to use its running statistics;
    with batch statistics (training mode) the full form runs.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        stride (int): Conv stride. Defaults to 1.
        mode (str): ``'auto'``, ``'full'`` or ``'chunked'``. Defaults to
            ``'auto'``.

    Example:
        >>> layer = ConvBNReLU(3, 32, stride=2)
        >>> layer(torch.rand(1, 3, 64, 48)).shape
        torch.Size([1, 32, 32, 24])
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1,
                 mode: str = 'auto') -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.activate = nn.ReLU(inplace=True)
        nn.init.kaiming_normal_(
            self.conv.weight, mode='fan_out', nonlinearity='relu')
        self.set_mode(mode)
        self._folded: Optional[tuple] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` → ``(B, C_out, ⌈H/s⌉, ⌈W/s⌉)``.

        Raises:
            RuntimeError: In ``'chunked'`` mode with autograd enabled.
        """
        folded = fold_batchnorm(self) if self.runs_chunked(x) else None
        if folded is None:
            return self.activate(self.bn(self.conv(x)))
        return self.activate(
            F.conv2d(x, *folded, self.conv.stride, self.conv.padding))


def fold_batchnorm(
        module: ConvBNReLU) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """``(weight, bias)`` of ``module``'s conv with its BatchNorm folded in.

    With the running statistics ``μ, σ²`` and the affine ``γ, β``,
    ``BN(W * x) = (W ⊙ s) * x + (β − μ ⊙ s)`` where ``s = γ / sqrt(σ² + ε)``
    per output channel (``torch.nn.utils.fusion.fuse_conv_bn_weights``).

    Args:
        module (ConvBNReLU): The conv-BN pair to fold.

    Returns:
        tuple | None: Weight ``(C_out, C_in, 3, 3)`` and bias ``(C_out,)``,
        or None when the BatchNorm normalises with batch statistics
        (training mode), keeps none, or was replaced by another module. The result is cached on the module
        and recomputed only when a weight or statistic has changed (tensor
        versions and storage are compared; an in-place update, a
        ``load_state_dict`` or a ``.to()`` all invalidate it).
    """
    conv, norm = module.conv, module.bn
    # Only a real BatchNorm with running statistics folds; a replacement
    # (e.g. Hugging Face DETR's frozen BatchNorm) runs as it is.
    if (not isinstance(norm, nn.modules.batchnorm._BatchNorm)
            or norm.training or norm.running_var is None):
        return None
    sources = (conv.weight, norm.weight, norm.bias, norm.running_mean,
               norm.running_var)
    key = tuple((t.data_ptr(), t._version) for t in sources) + (norm.eps, )
    if module._folded is not None and module._folded[0] == key:
        return module._folded[1]
    with torch.no_grad():
        weight, bias = fuse_conv_bn_weights(
            conv.weight.detach(), None, norm.running_mean, norm.running_var,
            norm.eps, norm.weight.detach(), norm.bias.detach())
    folded = (weight.detach(), bias.detach())
    module._folded = (key, folded)
    return folded
