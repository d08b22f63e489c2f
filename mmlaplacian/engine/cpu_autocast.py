"""Mixed precision without a GPU: bfloat16 autocast for ``--amp`` on CPU.

mmengine's ``AmpOptimWrapper`` asserts that a GPU is present.
:class:`CPUAutocastOptimWrapper` runs the backbone and neck under bfloat16
autocast instead; bfloat16 has the exponent range of float32, so no loss
scaling is needed. :func:`enable_amp` picks the right wrapper for the
machine.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import List, Sequence

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.optim import OptimWrapper

from mmlaplacian.registry import OPTIM_WRAPPERS, register

# Where nearly all of a dense-prediction model's arithmetic is.
FEATURE_PARTS = ('backbone', 'neck')


def feature_parts(model: nn.Module,
                  names: Sequence[str] = FEATURE_PARTS) -> List[nn.Module]:
    """The children ``names`` of ``model``, or ``[model]`` if it has none.

    DDP and test-time-augmentation wrappers are looked through: both hold
    the model as ``.module``.
    """
    def parts_of(module: nn.Module) -> List[nn.Module]:
        children = (getattr(module, name, None) for name in names)
        return [c for c in children if isinstance(c, nn.Module)]

    while not parts_of(model) and isinstance(
            getattr(model, 'module', None), nn.Module):
        model = model.module
    return parts_of(model) or [model]


@register(OPTIM_WRAPPERS, 'OPTIM_WRAPPERS')
class CPUAutocastOptimWrapper(OptimWrapper):
    """``OptimWrapper`` that runs parts of the model under CPU bf16 autocast.

    Only ``autocast_modules`` (by default the backbone and the neck, where
    nearly all of the compute is) run in bfloat16; their outputs return to
    float32. The heads stay in float32 because mmcv's CPU kernels (NMS,
    RoIAlign) have no bfloat16 versions. A model without any of these
    children runs under autocast as a whole.

    Args:
        autocast_modules (Sequence[str]): Names of the model's children to
            run in bfloat16. Defaults to ``('backbone', 'neck')``.
        **kwargs: Arguments of :class:`mmengine.optim.OptimWrapper`.
    """

    def __init__(self,
                 autocast_modules: Sequence[str] = FEATURE_PARTS,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.autocast_modules = tuple(autocast_modules)

    @contextmanager
    def optim_context(self, model: nn.Module):
        handles = []
        for module in feature_parts(model, self.autocast_modules):
            handles.append(module.register_forward_pre_hook(_enter_bf16))
            handles.append(module.register_forward_hook(_exit_bf16))
        try:
            with super().optim_context(model):
                yield
        finally:
            for handle in handles:
                handle.remove()


def _enter_bf16(module: nn.Module, args) -> None:
    context = torch.autocast(device_type='cpu', dtype=torch.bfloat16)
    context.__enter__()
    module._bf16_autocast = context


def _exit_bf16(module: nn.Module, args, output):
    module.__dict__.pop('_bf16_autocast').__exit__(None, None, None)
    return to_float32(output)


def to_float32(output):
    """``output`` with its floating-point tensors in float32, through
    lists, tuples and dicts."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.is_floating_point() else output
    if isinstance(output, (list, tuple)):
        return type(output)(to_float32(o) for o in output)
    if isinstance(output, dict):
        return {k: to_float32(v) for k, v in output.items()}
    return output


def enable_amp(cfg: Config) -> str:
    """Switch ``cfg.optim_wrapper`` to mixed precision for this machine.

    Returns:
        str: The optimizer wrapper type now configured.
    """
    current = cfg.optim_wrapper.get('type', 'OptimWrapper')
    if current not in ('OptimWrapper', 'AmpOptimWrapper',
                       'CPUAutocastOptimWrapper'):
        raise ValueError('--amp needs optim_wrapper.type=OptimWrapper in the '
                         f'config, got {current!r}')
    if torch.cuda.is_available():
        if current != 'AmpOptimWrapper':
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.loss_scale = 'dynamic'
    else:
        cfg.optim_wrapper.pop('loss_scale', None)
        cfg.optim_wrapper.pop('dtype', None)
        cfg.optim_wrapper.type = 'CPUAutocastOptimWrapper'
    return cfg.optim_wrapper.type
