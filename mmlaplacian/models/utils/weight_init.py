"""Truncated-normal initialisation, as OpenMMLab models draw it.

The same arithmetic as mmengine's ``trunc_normal_`` (from PyTorch's, via
the inverse CDF of a uniform draw), kept here so that the torch-only core
draws the very weights it drew under mmengine for a given seed: the quick
starts' figures and seeded tests depend on them. ``torch.nn.init.
trunc_normal_`` of recent torch releases draws other values.
"""
from __future__ import annotations

import math

import torch


def trunc_normal_(tensor: torch.Tensor,
                  mean: float = 0.,
                  std: float = 1.,
                  a: float = -2.,
                  b: float = 2.) -> torch.Tensor:
    """Fill ``tensor`` in place from N(mean, std²) truncated to [a, b]."""

    def norm_cdf(x: float) -> float:
        return (1. + math.erf(x / math.sqrt(2.))) / 2.

    with torch.no_grad():
        lower = norm_cdf((a - mean) / std)
        upper = norm_cdf((b - mean) / std)
        tensor.uniform_(2 * lower - 1, 2 * upper - 1)
        tensor.erfinv_()
        tensor.mul_(std * math.sqrt(2.))
        tensor.add_(mean)
        tensor.clamp_(min=a, max=b)
        return tensor
