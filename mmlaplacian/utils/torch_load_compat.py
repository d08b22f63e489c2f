"""Let mmengine load its own checkpoints under torch >= 2.6.

torch 2.6 made ``torch.load`` default to ``weights_only=True``. mmengine 0.10.7
calls ``torch.load`` without that argument, and its full checkpoints carry the
message hub (``HistoryBuffer``), numpy scalars and optimizer state, which the
weights-only unpickler refuses: ``--resume`` and ``load_from`` then fail.

:func:`install_mmengine_checkpoint_fix` re-registers mmengine's local-file
checkpoint loader so that it passes ``weights_only=False``.
Only mmengine's checkpoint loading is changed; ``torch.load`` itself is not.
A checkpoint is pickled Python: load only files from a source you trust.
"""
from __future__ import annotations

import os.path as osp
from typing import Callable, Optional

import torch

_INSTALLED = False


def torch_load_full(filename, map_location=None):
    """``torch.load`` that unpickles a full (non weights-only) checkpoint."""
    return torch.load(filename, map_location=map_location, weights_only=False)


def load_local_checkpoint(filename: str, map_location=None):
    """Unpickle the local checkpoint ``filename`` (a full one included).

    Raises:
        FileNotFoundError: When the file does not exist.
        RuntimeError: When it is no readable PyTorch checkpoint.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint file "{filename}" does not exist')
    try:
        return torch_load_full(filename, map_location=map_location)
    except Exception as err:  # pickle, zip and torch errors vary by version
        raise RuntimeError(
            f'"{filename}" is not a readable PyTorch checkpoint: '
            f'{type(err).__name__}: {err}') from err


def install_mmengine_checkpoint_fix(
        loader: Optional[Callable] = None) -> bool:
    """Make mmengine's local checkpoint loader unpickle full checkpoints.

    Idempotent. Does nothing when mmengine is not installed.

    Returns:
        bool: Whether the fix is in place.
    """
    global _INSTALLED
    if _INSTALLED:
        return True
    try:
        from mmengine.runner.checkpoint import CheckpointLoader
    except ImportError:
        return False
    local_loader = loader or load_local_checkpoint
    CheckpointLoader.register_scheme(prefixes='', force=True)(local_loader)
    _INSTALLED = True
    return True
