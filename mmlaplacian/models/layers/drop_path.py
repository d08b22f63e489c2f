"""Stochastic depth."""
import torch
import torch.nn as nn


class DropPath(nn.Module):
    """Drop the whole residual branch per sample (stochastic depth).

    Args:
        drop_prob (float): Probability of dropping the branch in training.
    """

    def __init__(self, drop_prob: float = 0.) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0. or not self.training:
            return x
        keep = 1 - self.drop_prob
        shape = (x.shape[0], ) + (1, ) * (x.ndim - 1)
        mask = x.new_empty(shape).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f'drop_prob={self.drop_prob}'
