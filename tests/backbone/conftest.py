"""Shared fixtures of the backbone tests."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class MaxNumelProbe(TorchDispatchMode):
    """Records the largest tensor any aten op produces while active."""

    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(item, torch.Tensor):
                self.max_numel = max(self.max_numel, item.numel())
        return out


@pytest.fixture
def max_numel_probe():
    """``with max_numel_probe() as probe: ...; probe.max_numel``."""
    return MaxNumelProbe
