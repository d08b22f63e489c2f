"""Where the operators ``torch.ops.mmlaplacian.*`` come from.

The compiled extension ``mmlaplacian._ext`` declares the three schemas
(``TORCH_LIBRARY`` in ``cuda_ops/ops.cpp``) and registers its kernels for the
CPU dispatch key and, when built with CUDA, the CUDA one; importing it is all
it takes. Without it (a torch-only install, a build that was skipped or
failed) this module defines the same schemas, :data:`SCHEMAS`. Either way
the op modules then register the rest once per op: the PyTorch reference as
the ``CompositeExplicitAutograd`` kernel (every device without a compiled
kernel), the fake kernel and the autograd formula. An extension built from
other sources, whose schemas differ, is refused with a message to rebuild.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import FrozenSet, Optional, Tuple

import torch

NAMESPACE = 'mmlaplacian'
# The schemas of cuda_ops/ops.cpp, character for character.
SCHEMAS = (
    'laplace_kernel(Tensor x, Tensor y) -> Tensor',
    'laplace_kernel_backward(Tensor grad, Tensor x, Tensor y, Tensor out, '
    'bool need_x, bool need_y) -> (Tensor?, Tensor?)',
    'newton_schulz_inverse(Tensor a, int num_iters, str init) -> Tensor',
)
OP_NAMES = tuple(schema.split('(', 1)[0] for schema in SCHEMAS)
IMPLS = ('auto', 'cpp', 'cuda', 'pytorch')
# The impl that runs compiled kernels for each device type, and the dispatch
# key they are registered for.
_DEVICE_IMPL = {'cpu': 'cpp', 'cuda': 'cuda'}
_DISPATCH_KEYS = {'cpu': 'CPU', 'cuda': 'CUDA'}
_BUILD_HINT = ('build it with `pip install --no-build-isolation -e .` or '
               '`python setup.py build_ext --inplace`')


def declared_schema(name: str) -> Optional[str]:
    """The schema the dispatcher holds for ``mmlaplacian::name``, without the
    namespace, or None when no such operator is declared."""
    packet = getattr(getattr(torch.ops, NAMESPACE), name, None)
    if packet is None:
        return None
    return str(packet.default._schema).split('::', 1)[1]


def _import_ext() -> Tuple[Optional[ModuleType], Optional[str]]:
    """Import ``mmlaplacian._ext``; returns ``(module, None)`` or
    ``(None, why it is missing)``.

    Raises:
        ImportError: The extension declares other schemas than this code.
    """
    try:
        ext = importlib.import_module('mmlaplacian._ext')
    except (ImportError, OSError) as err:  # not built, or for another torch
        return None, f'{type(err).__name__}: {err}'
    for name, schema in zip(OP_NAMES, SCHEMAS):
        declared = declared_schema(name)
        if declared != schema:
            raise ImportError(
                f'mmlaplacian._ext was built from other sources: it declares '
                f'{declared or f"no operator {name}"}, this code needs '
                f'{schema}; rebuild it ({_BUILD_HINT})')
    return ext, None


def _define_schemas() -> torch.library.Library:
    """The schemas of the extension, for when it is not there; the library
    must stay alive for them to stay defined."""
    library = torch.library.Library(NAMESPACE, 'DEF')
    for schema in SCHEMAS:
        library.define(schema)
    return library


def _compiled_devices() -> FrozenSet[str]:
    """Device types for which every operator has a compiled kernel."""
    return frozenset(
        device for device, key in _DISPATCH_KEYS.items() if all(
            torch._C._dispatch_has_kernel_for_dispatch_key(
                f'{NAMESPACE}::{name}', key) for name in OP_NAMES))


_EXT, _EXT_ERROR = _import_ext()
_LIBRARY = _define_schemas() if _EXT is None else None
# Read on every op call (resolve_impl): a plain constant, which
# torch.compile reads without breaking the graph.
COMPILED_DEVICES = _compiled_devices()


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
    info = dict(
        loaded=_EXT is not None,
        error=_EXT_ERROR,
        devices=sorted(COMPILED_DEVICES),
        cuda_version=None,
        cuda_arch_list=None)
    # Set by the module of a build with CUDA kernels (cuda_ops/module.cpp).
    if hasattr(_EXT, 'cuda_runtime_version'):
        info['cuda_version'] = _format_cuda_version(_EXT.cuda_runtime_version)
        info['cuda_arch_list'] = _format_arch_list(_EXT.cuda_arch_list)
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
    if impl == 'auto':
        compiled = _DEVICE_IMPL.get(device.type)
        return compiled if device.type in COMPILED_DEVICES else 'pytorch'
    wanted_device = 'cpu' if impl == 'cpp' else 'cuda'
    if device.type != wanted_device:
        raise ValueError(f"{op}: impl='{impl}' runs on {wanted_device} "
                         f'tensors, got tensors on {device}; use '
                         f"impl='auto' to pick the kernel of the device")
    if wanted_device in COMPILED_DEVICES:
        return impl
    if _EXT is None:
        raise RuntimeError(f"{op}: impl='{impl}' needs the compiled "
                           f'extension mmlaplacian._ext, which could not be '
                           f'imported ({_EXT_ERROR}); {_BUILD_HINT}')
    raise RuntimeError(
        f"{op}: impl='{impl}' is not available: mmlaplacian._ext was "
        f'built without {wanted_device} kernels (it has '
        f'{sorted(COMPILED_DEVICES)}); rebuild with FORCE_CUDA=1 on a machine '
        f'with nvcc')
