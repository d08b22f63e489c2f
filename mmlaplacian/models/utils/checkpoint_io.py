"""Read a checkpoint file or URL into a dict, with or without mmengine.

With mmengine installed its ``CheckpointLoader`` is used, so every scheme an
OpenMMLab user may write in ``init_cfg`` (``open-mmlab://``,
``torchvision://``, ``s3://``, ...) works as it does for mmdet's own
backbones. Without it, local files and ``http(s)://`` URLs are read by
torch alone.
"""
from __future__ import annotations

import importlib.util
from typing import Any

import torch

from mmlaplacian.utils.torch_load_compat import (
    install_mmengine_checkpoint_fix, load_local_checkpoint)


def load_checkpoint_file(checkpoint: str, map_location: str = 'cpu') -> Any:
    """Load ``checkpoint`` (a path or URL) onto ``map_location``.

    Raises:
        FileNotFoundError: For a local path that does not exist.
        RuntimeError: For a file that is no readable PyTorch checkpoint.
        ValueError: For a scheme only mmengine reads, without mmengine.
    """
    if importlib.util.find_spec('mmengine') is not None:
        from mmengine.runner.checkpoint import CheckpointLoader
        install_mmengine_checkpoint_fix()
        return CheckpointLoader.load_checkpoint(
            checkpoint, map_location=map_location)
    if str(checkpoint).startswith(('http://', 'https://')):
        return torch.hub.load_state_dict_from_url(
            checkpoint, map_location=map_location, weights_only=False)
    if '://' in str(checkpoint):
        raise ValueError(
            f'{checkpoint}: the scheme {str(checkpoint).split("://")[0]}:// '
            'is read by mmengine\'s CheckpointLoader, which is not installed;'
            ' use a local file or an http(s):// URL, or pip install mmengine')
    return load_local_checkpoint(checkpoint, map_location=map_location)
