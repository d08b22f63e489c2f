"""Make mmengine 0.10.7's GPU-only paths work on CPU-only machines.

Two gaps, both filled only when CUDA is unavailable:

* ``--launcher pytorch``: mmengine calls ``torch.cuda.set_device`` before
  ``init_process_group`` (an error without a GPU) and wraps the
  model in DDP with ``device_ids=[LOCAL_RANK]``, which CPU modules reject.
  :func:`init_cpu_distributed` starts the process group with gloo first (the
  runner then skips its own initialisation) and asks for
  ``device_ids=None``.
* ``--amp``: ``AmpOptimWrapper`` asserts that a GPU is present.
  :class:`CPUAutocastOptimWrapper` runs the backbone and neck under
  bfloat16 autocast instead; bfloat16 has the exponent range of float32, so
  no loss scaling is needed.

:func:`shutdown_distributed` (any device) ends the process group cleanly.
"""
from __future__ import annotations

import datetime
from contextlib import contextmanager
from typing import List, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module(force=True)
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
                 autocast_modules: Sequence[str] = ('backbone', 'neck'),
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.autocast_modules = tuple(autocast_modules)

    def _targets(self, model: nn.Module) -> List[nn.Module]:
        model = model.module if is_model_wrapper(model) else model
        children = (getattr(model, name, None)
                    for name in self.autocast_modules)
        return [c for c in children if isinstance(c, nn.Module)] or [model]

    @contextmanager
    def optim_context(self, model: nn.Module):
        handles = []
        for module in self._targets(model):
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
    return _to_float32(output)


def _to_float32(output):
    if isinstance(output, torch.Tensor):
        return output.float() if output.is_floating_point() else output
    if isinstance(output, (list, tuple)):
        return type(output)(_to_float32(o) for o in output)
    if isinstance(output, dict):
        return {k: _to_float32(v) for k, v in output.items()}
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


def shutdown_distributed() -> None:
    """Destroy the process group, if any, before the interpreter exits.

    mmengine leaves it to exit-time destructors, where gloo's background
    threads can abort the process after the work is done.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def init_cpu_distributed(cfg: Config) -> bool:
    """Start gloo for ``--launcher pytorch`` when there is no GPU.

    Call before building the runner. Does nothing with CUDA, with another
    launcher or when a process group already exists.

    Returns:
        bool: Whether a CPU process group was started here.
    """
    if (cfg.get('launcher', 'none') != 'pytorch'
            or torch.cuda.is_available() or dist.is_initialized()):
        return False
    dist_cfg = cfg.get('env_cfg', {}).get('dist_cfg', {})
    kwargs = {}
    if dist_cfg.get('timeout') is not None:
        kwargs['timeout'] = datetime.timedelta(seconds=dist_cfg['timeout'])
    dist.init_process_group(backend='gloo', **kwargs)
    wrapper_cfg = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    ddp = 'MMDistributedDataParallel'
    if wrapper_cfg.get('type', ddp) == ddp:
        wrapper_cfg.setdefault('device_ids', None)
    cfg.model_wrapper_cfg = wrapper_cfg
    return True
