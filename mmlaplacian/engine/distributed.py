"""Distributed launch on CPU-only machines (gloo).

With ``--launcher pytorch``, mmengine 0.10.7 calls ``torch.cuda.set_device``
before ``init_process_group`` (an error without a GPU) and wraps the model
in DDP with ``device_ids=[LOCAL_RANK]``, which CPU modules reject.
:func:`init_cpu_distributed` starts the process group with gloo first (the
runner then skips its own initialisation) and asks for ``device_ids=None``.
:func:`shutdown_distributed` (any device) ends the process group cleanly.
:func:`set_default_timeout` bounds how long a rank waits for a peer that
stopped answering.
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from mmengine.config import Config

# Seconds a collective (all-reduce, barrier, result gathering) waits for a
# peer before raising, unless env_cfg.dist_cfg.timeout says otherwise.
DEFAULT_TIMEOUT = 1800


def set_default_timeout(cfg: Config) -> None:
    """Give the process group a timeout, in place, if the config has none.

    A rank that dies is noticed by torchrun, which ends the others; a rank
    that hangs (a stalled disk, a stopped process, a lost node) is not: the
    others would wait in their next collective for as long as the process
    group allows. With a timeout they raise and the run ends.
    """
    if cfg.get('env_cfg') is None:
        cfg.env_cfg = dict(dist_cfg=dict(backend='nccl'))
    if cfg.env_cfg.get('dist_cfg') is None:
        cfg.env_cfg.dist_cfg = dict(backend='nccl')
    if cfg.env_cfg.dist_cfg.get('timeout') is None:
        cfg.env_cfg.dist_cfg.timeout = DEFAULT_TIMEOUT


def shutdown_distributed() -> None:
    """Destroy the process group, if any, before the interpreter exits.

    mmengine leaves it to exit-time destructors, where gloo's background
    threads can abort the process after the work is done. The barrier
    keeps a rank that finished early (rank 0 alone writes the logs and
    checkpoints) from closing its connections while a peer still uses them.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
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
