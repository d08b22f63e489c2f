"""Loading of the compiled extension ``mmlaplacian._ext`` and impl selection.

The extension is optional: every op has a pure-PyTorch reference, and
``impl='auto'`` falls back to it when the extension is missing or has no
kernels for the tensor's device.
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from types import ModuleType
from typing import Dict, FrozenSet, Optional, Tuple

import torch

IMPLS = ('auto', 'cpp', 'cuda', 'pytorch')
# The impl that runs compiled kernels for each device type.
_DEVICE_IMPL = {'cpu': 'cpp', 'cuda': 'cuda'}
_REQUIRED_FUNCS = ('laplace_kernel_forward', 'laplace_kernel_backward',
                   'newton_schulz_forward', 'compiled_devices')
# ``abi_version`` of the bindings this Python code calls (cuda_ops/pybind.cpp);
# 2: laplace_kernel_backward takes need_x / need_y.
EXT_ABI_VERSION = 2
_BUILD_HINT = ('build it with `pip install --no-build-isolation -e .` or '
               '`python setup.py build_ext --inplace`')


@lru_cache(maxsize=None)
def _load() -> Tuple[Optional[ModuleType], Optional[str]]:
    """Import ``mmlaplacian._ext`` once; returns ``(module, None)`` or
    ``(None, reason)``."""
    try:
        ext = importlib.import_module('mmlaplacian._ext')
    except (ImportError, OSError) as err:  # not built, or an ABI mismatch
        return None, f'{type(err).__name__}: {err}'
    missing = [name for name in _REQUIRED_FUNCS if not hasattr(ext, name)]
    if missing:
        return None, (f'mmlaplacian._ext is out of date (missing {missing}); '
                      f'rebuild it')
    abi = getattr(ext, 'abi_version', 1)
    if abi != EXT_ABI_VERSION:
        return None, (f'mmlaplacian._ext is out of date (interface version '
                      f'{abi}, this code needs {EXT_ABI_VERSION}); rebuild it')
    return ext, None


def load_ext() -> Optional[ModuleType]:
    """The compiled extension, or ``None`` when it cannot be imported."""
    return _load()[0]


def _compiled_devices() -> FrozenSet[str]:
    """Device types the extension has kernels for (empty if not loaded).

    Read on every op call, so it is a module global rather than an
    ``lru_cache``: ``torch.compile`` traces through cached functions, and
    an import inside a traced call would break the graph.
    """
    global _COMPILED_DEVICES
    if _COMPILED_DEVICES is None:
        ext = load_ext()
        _COMPILED_DEVICES = frozenset(
            ext.compiled_devices()) if ext is not None else frozenset()
    return _COMPILED_DEVICES


_COMPILED_DEVICES: Optional[FrozenSet[str]] = None


def compiled_kernels() -> Dict[str, ModuleType]:
    """``device type -> extension`` for each device type with compiled
    kernels: what the operators register per dispatch key."""
    ext = load_ext()
    return {device: ext for device in sorted(_compiled_devices())}


def _format_cuda_version(version: int) -> str:
    # CUDART_VERSION encodes major * 1000 + minor * 10.
    return f'{version // 1000}.{version % 1000 // 10}'


def _format_arch_list(arch_list: str) -> str:
    # nvcc's __CUDA_ARCH_LIST__ ("800,900") in TORCH_CUDA_ARCH_LIST's form.
    archs = [int(a) for a in arch_list.split(',') if a.strip()]
    return ';'.join(f'{a // 100}.{a % 100 // 10}' for a in archs)


def ext_info() -> dict:
    """Describe the compiled extension.

    Returns:
        dict: ``loaded`` (bool), ``error`` (why it did not load, else
        ``None``), ``devices`` (device types with compiled kernels, e.g.
        ``['cpu']`` or ``['cpu', 'cuda']``; this says what was compiled, not
        whether a GPU is present), ``cuda_version`` (CUDA runtime the kernels
        were built against, e.g. ``'13.0'``, else ``None``) and
        ``cuda_arch_list`` (architectures compiled for, e.g. ``'8.0;9.0'``,
        else ``None``).

    Example:
        >>> from mmlaplacian.ops import ext_info
        >>> ext_info()['devices']  # doctest: +SKIP
        ['cpu']
    """
    ext, error = _load()
    info = dict(
        loaded=ext is not None,
        error=error,
        devices=[],
        cuda_version=None,
        cuda_arch_list=None)
    if ext is None:
        return info
    info['devices'] = list(ext.compiled_devices())
    if hasattr(ext, 'cuda_runtime_version'):
        info['cuda_version'] = _format_cuda_version(ext.cuda_runtime_version())
        info['cuda_arch_list'] = _format_arch_list(ext.cuda_arch_list())
    return info


def resolve_impl(op: str, impl: str, device: torch.device) -> str:
    """Turn a requested ``impl`` into the one that will run.

    Args:
        op (str): Op name, for error messages.
        impl (str): ``'auto'``, ``'cpp'``, ``'cuda'`` or ``'pytorch'``.
        device (torch.device): Device of the op's inputs.

    Returns:
        str: ``'cpp'``, ``'cuda'`` or ``'pytorch'``. ``'auto'`` picks the
        compiled kernels of ``device`` when the extension has them, else the
        PyTorch reference.

    Raises:
        ValueError: Unknown ``impl``, or one that does not run on ``device``.
        RuntimeError: A compiled impl was asked for but is not available.
    """
    if impl not in IMPLS:
        raise ValueError(f'{op}: impl must be one of {IMPLS}, got {impl!r}')
    if impl == 'pytorch':
        return impl
    available = _compiled_devices()
    if impl == 'auto':
        compiled = _DEVICE_IMPL.get(device.type)
        return compiled if device.type in available else 'pytorch'
    wanted_device = 'cpu' if impl == 'cpp' else 'cuda'
    if device.type != wanted_device:
        raise ValueError(f"{op}: impl='{impl}' runs on {wanted_device} "
                         f'tensors, got tensors on {device}; use '
                         f"impl='auto' to pick the kernel of the device")
    if wanted_device in available:
        return impl
    ext, error = _load()
    if ext is None:
        raise RuntimeError(f"{op}: impl='{impl}' needs the compiled "
                           f'extension mmlaplacian._ext, which could not be '
                           f'imported ({error}); {_BUILD_HINT}')
    if wanted_device not in available:
        raise RuntimeError(
            f"{op}: impl='{impl}' is not available: mmlaplacian._ext was "
            f'built without {wanted_device} kernels (it has '
            f'{sorted(available)}); rebuild with FORCE_CUDA=1 on a machine '
            f'with nvcc')
