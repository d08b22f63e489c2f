"""Our ExecuTorch kernel: the Laplacian kernel as one operator of a program.

By default an ExecuTorch program holds the Laplacian kernel in standard
operators (:mod:`mmlaplacian.ops.export_forms`: a ``maximum`` over blocks
of rows and a product per block), which every ExecuTorch runtime runs.
Exported with ``laplace='operator'``, a program keeps the operator
``mmlaplacian::laplace_kernel`` instead, and ExecuTorch runs it with our
kernel (``cuda_ops/executorch/laplace_kernel_executorch.cpp``): one pass
over ``(B, N, M)`` that keeps each distance in a register, where the forms
write and read a ``(B, Nb, M, d)`` block for every block of rows.

The kernel is compiled into ``mmlaplacian._executorch_kernels`` when
executorch is installed at build time (``setup.py``), and registers itself
with ExecuTorch's runtime when that library is loaded. An application that
builds ExecuTorch from source compiles the same file into its runtime.

:func:`load_program` loads the library before a program, so every program
this package runs finds the kernel; :func:`declare_out_variant` gives
ExecuTorch's lowering the operator's ``out`` form, which its runtime calls.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import mmap
import os.path as osp
from typing import Optional

import torch

from mmlaplacian.ops.extension import NAMESPACE

LIBRARY_NAME = '_executorch_kernels'
# The operator a program keeps, as the .pte file names it.
OPERATOR = f'{NAMESPACE}::laplace_kernel'
OUT_SCHEMA = ('laplace_kernel.out(Tensor x, Tensor y, *, Tensor(a!) out) '
              '-> Tensor(a!)')
_BUILD_HINT = ('install executorch, then rebuild mmlaplacian '
               '(`pip install --no-build-isolation -e .` or `make install`)')

# The library handle and the torch library holding the out form: both must
# stay alive for the kernel and the schema to stay registered.
_LOADED: Optional[ctypes.CDLL] = None
_OUT_LIBRARY: Optional[torch.library.Library] = None


def kernels_library() -> Optional[str]:
    """The path of the built ``mmlaplacian._executorch_kernels``, or None
    when it was not built (no executorch at build time)."""
    package = osp.dirname(osp.dirname(osp.abspath(__file__)))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = osp.join(package, LIBRARY_NAME + suffix)
        if osp.isfile(path):
            return path
    return None


def _installed_executorch() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version('executorch')
    except PackageNotFoundError:
        return 'none'


def load_executorch_kernels() -> None:
    """Register our ExecuTorch kernel with ExecuTorch's runtime in this
    process (once; later calls do nothing).

    Raises:
        ImportError: The library was not built, does not load, or was built
            against another executorch release than the installed one (the
            message says how to rebuild it).
    """
    global _LOADED
    if _LOADED is not None:
        return
    path = kernels_library()
    if path is None:
        raise ImportError(
            f'mmlaplacian.{LIBRARY_NAME} is not built, so ExecuTorch has no '
            f'kernel for {OPERATOR}: {_BUILD_HINT}')
    try:
        library = ctypes.CDLL(path)
    except OSError as err:
        raise ImportError(
            f'{path} does not load ({err}): {_BUILD_HINT}') from err
    # The runtime's types have no stable ABI across releases; the library
    # registered its kernel when it loaded, but a mismatch is refused before
    # any program runs it.
    library.mmlaplacian_executorch_version.restype = ctypes.c_char_p
    built = library.mmlaplacian_executorch_version().decode()
    installed = _installed_executorch()
    if built != installed:
        raise ImportError(
            f'{path} was built against executorch {built}, and executorch '
            f'{installed} is installed: {_BUILD_HINT}')
    _LOADED = library


def declare_out_variant() -> None:
    """Declare ``mmlaplacian::laplace_kernel.out``, the form ExecuTorch's
    lowering turns the operator into (its runtime calls kernels that
    write into planned memory), once per process."""
    global _OUT_LIBRARY
    if hasattr(torch.ops.mmlaplacian.laplace_kernel, 'out'):
        return
    library = torch.library.Library(NAMESPACE, 'FRAGMENT')
    library.define(OUT_SCHEMA)

    def laplace_kernel_out(x: torch.Tensor, y: torch.Tensor, *,
                           out: torch.Tensor) -> torch.Tensor:
        result = torch.ops.mmlaplacian.laplace_kernel(x, y)
        if out.shape != result.shape:
            raise ValueError(f'laplace_kernel.out: out must have the shape '
                             f'(B, N, M) = {tuple(result.shape)}, got '
                             f'{tuple(out.shape)}')
        return out.copy_(result)

    library.impl('laplace_kernel.out', laplace_kernel_out,
                 'CompositeExplicitAutograd')
    _OUT_LIBRARY = library


def program_needs_kernels(path: str) -> bool:
    """Whether the ``.pte`` file calls our operator (its operator table
    holds the name as a string)."""
    with open(path, 'rb') as f, mmap.mmap(f.fileno(), 0,
                                          access=mmap.ACCESS_READ) as data:
        return data.find(OPERATOR.encode()) >= 0


def load_program(path: str, **options):
    """ExecuTorch's ``Runtime.get().load_program``, with our kernel
    registered first.

    Only a program that calls our operator needs the library: any other
    loads as usual, also where the library is not built or is stale. Once
    the library is registered, programs are not scanned for the operator.

    Args:
        path (str): The ``.pte`` file.
        **options: ``load_program``'s options (e.g. ``enable_etdump``).

    Returns:
        executorch.runtime.Program: The loaded program.

    Raises:
        ImportError: The program calls our operator and our kernel library
            is not built, or does not load.
    """
    from executorch.runtime import Runtime
    if _LOADED is None and program_needs_kernels(path):
        load_executorch_kernels()
    return Runtime.get().load_program(path, **options)
