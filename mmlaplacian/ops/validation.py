"""Input checks shared by the ops, raising errors that name the op."""
from __future__ import annotations

import contextlib
from typing import ContextManager

import torch


def describe(t: torch.Tensor) -> str:
    """``shape dtype device`` of a tensor, for error messages."""
    return f'{tuple(t.shape)} {t.dtype} on {t.device}'


def check_tensor(op: str, name: str, t: object, rank: int) -> None:
    """Require a floating-point tensor of the given rank.

    Raises:
        TypeError: Not a tensor, or not floating point.
        ValueError: Wrong number of dimensions.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f'{op}: {name} must be a torch.Tensor, got '
                        f'{type(t).__name__}')
    if not t.is_floating_point():
        raise TypeError(f'{op}: {name} must be a floating-point tensor, got '
                        f'{t.dtype}')
    if t.dim() != rank:
        raise ValueError(f'{op}: {name} must have {rank} dimensions, got '
                         f'shape {tuple(t.shape)}')


def check_same_device(op: str, **tensors: torch.Tensor) -> None:
    """Require all tensors to be on one device."""
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        listing = ', '.join(f'{k}: {describe(v)}' for k, v in tensors.items())
        raise ValueError(f'{op}: inputs must be on the same device, got '
                         f'{listing}')


def check_same_dtype(op: str, **tensors: torch.Tensor) -> None:
    """Require all tensors to share a dtype."""
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) > 1:
        listing = ', '.join(f'{k}: {describe(v)}' for k, v in tensors.items())
        raise TypeError(f'{op}: inputs must have the same dtype, got '
                        f'{listing}')


def compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype the ops compute in: fp64 if any input is fp64, else fp32."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


def autocast_enabled(device: torch.device) -> bool:
    """Whether autocast is active for the device type of ``device``.

    Works on torch 2.4+ (``torch.is_autocast_enabled(device_type)``) and on
    older torch, which only has per-device functions without arguments.
    """
    try:
        return torch.is_autocast_enabled(device.type)
    except TypeError:  # torch < 2.4: the function takes no device type
        return _legacy_autocast_enabled(device.type)
    except RuntimeError:  # a device type autocast does not know
        return False


def _legacy_autocast_enabled(device_type: str) -> bool:
    """Autocast state through torch < 2.4's per-device functions:
    ``is_autocast_enabled()`` is CUDA's, ``is_autocast_cpu_enabled()`` the
    CPU's (likewise ``xpu``, ``ipu``, ``hpu``, ...)."""
    if device_type == 'cuda':
        return bool(torch.is_autocast_enabled())
    query = getattr(torch, f'is_autocast_{device_type}_enabled', None)
    return bool(query()) if query is not None else False


def autocast_disabled(device: torch.device) -> ContextManager:
    """A context that turns autocast off for ``device`` while a fused op runs
    (ATen calls inside the ops would otherwise be cast to fp16/bf16)."""
    if autocast_enabled(device):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()
