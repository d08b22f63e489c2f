"""Our ExecuTorch kernels: the Laplacian kernel, the Newton–Schulz inverse
and LayerNorm as operators of a program.

By default an ExecuTorch program holds the Laplacian kernel in standard
operators (:mod:`mmlaplacian.ops.export_forms`: a ``maximum`` over blocks
of rows and a product per block), which every ExecuTorch runtime runs.
Exported with ``laplace='operator'``, a program calls our kernels instead
(``cuda_ops/executorch/``):

- ``mmlaplacian::laplace_kernel``: one pass over ``(B, N, M)`` that keeps
  each distance in a register, where the forms write and read a
  ``(B, Nb, M, d)`` block for every block of rows;
- ``mmlaplacian::newton_schulz_inverse``: each landmark matrix iterated
  start to finish in a small workspace, where the standard operators take
  the start's norms on the portable kernels (one thread) and then two
  batched products per step, each paying a GEMM call's fixed cost for a few
  ``49 x 49`` matrices;
- ``mmlaplacian::layer_norm``: LayerNorm over the last dimension, its rows
  split over ExecuTorch's thread pool. XNNPACK has no LayerNorm, and
  ExecuTorch's own kernel runs on one thread.

The kernels are compiled into ``mmlaplacian._executorch_kernels`` when
executorch is installed at build time (``setup.py``), and register
themselves with ExecuTorch's runtime when that library is loaded. An
application that builds ExecuTorch from source compiles the same files into
its runtime.

:func:`load_program` loads the library before a program, so every program
this package runs finds the kernels; :func:`declare_operators` gives
ExecuTorch's lowering the operators' ``out`` forms, which its runtime calls,
and :data:`OWN_KERNEL_FORMS` puts our LayerNorm into an exported program.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import mmap
import os.path as osp
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from mmlaplacian.ops.extension import NAMESPACE

LIBRARY_NAME = '_executorch_kernels'
# The operators a program may keep, as the .pte file names them.
OPERATOR = f'{NAMESPACE}::laplace_kernel'
NEWTON_SCHULZ_OPERATOR = f'{NAMESPACE}::newton_schulz_inverse'
LAYER_NORM_OPERATOR = f'{NAMESPACE}::layer_norm'
OPERATORS = (OPERATOR, NEWTON_SCHULZ_OPERATOR, LAYER_NORM_OPERATOR)
OUT_SCHEMA = ('laplace_kernel.out(Tensor x, Tensor y, *, Tensor(a!) out) '
              '-> Tensor(a!)')
NEWTON_SCHULZ_OUT_SCHEMA = (
    'newton_schulz_inverse.out(Tensor a, int num_iters, str init, *, '
    'Tensor(a!) out) -> Tensor(a!)')
LAYER_NORM_SCHEMA = ('layer_norm(Tensor x, Tensor weight, Tensor bias, '
                     'float eps) -> Tensor')
LAYER_NORM_OUT_SCHEMA = ('layer_norm.out(Tensor x, Tensor weight, '
                         'Tensor bias, float eps, *, Tensor(a!) out) '
                         '-> Tensor(a!)')
_BUILD_HINT = ('install executorch, then rebuild mmlaplacian '
               '(`pip install --no-build-isolation -e .` or `make install`)')

# The library handle and the torch library holding the operators' schemas:
# both must stay alive for the kernels and the schemas to stay registered.
_LOADED: Optional[ctypes.CDLL] = None
_DECLARED: Optional[torch.library.Library] = None


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
    """Register our ExecuTorch kernels with ExecuTorch's runtime in this
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
            f'kernels for {" and ".join(OPERATORS)}: {_BUILD_HINT}')
    try:
        library = ctypes.CDLL(path)
    except OSError as err:
        raise ImportError(
            f'{path} does not load ({err}): {_BUILD_HINT}') from err
    # The runtime's types have no stable ABI across releases; the library
    # registered its kernels when it loaded, but a mismatch is refused before
    # any program runs it.
    library.mmlaplacian_executorch_version.restype = ctypes.c_char_p
    built = library.mmlaplacian_executorch_version().decode()
    installed = _installed_executorch()
    if built != installed:
        raise ImportError(
            f'{path} was built against executorch {built}, and executorch '
            f'{installed} is installed: {_BUILD_HINT}')
    _LOADED = library


def _shape_checked_out(name: str, result: torch.Tensor,
                       out: torch.Tensor) -> torch.Tensor:
    if out.shape != result.shape:
        raise ValueError(f'{name}.out: out must have the shape '
                         f'{tuple(result.shape)}, got {tuple(out.shape)}')
    return out.copy_(result)


def _laplace_kernel_out(x: torch.Tensor, y: torch.Tensor, *,
                        out: torch.Tensor) -> torch.Tensor:
    return _shape_checked_out('laplace_kernel',
                              torch.ops.mmlaplacian.laplace_kernel(x, y), out)


def _newton_schulz_inverse_out(a: torch.Tensor, num_iters: int, init: str,
                               *, out: torch.Tensor) -> torch.Tensor:
    return _shape_checked_out(
        'newton_schulz_inverse',
        torch.ops.mmlaplacian.newton_schulz_inverse(a, num_iters, init), out)


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def _layer_norm_out(x: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor, eps: float, *,
                    out: torch.Tensor) -> torch.Tensor:
    return _shape_checked_out('layer_norm', _layer_norm(x, weight, bias, eps),
                              out)


def declare_operators() -> None:
    """Declare, once per process, what ExecuTorch's lowering needs of our
    operators: ``mmlaplacian::layer_norm``, and the ``out`` form of each,
    which its runtime calls (kernels write into planned memory). In
    PyTorch each computes what its kernel computes, so that calibration
    and checks run the exported program as it is.
    """
    global _DECLARED
    if _DECLARED is not None:
        return
    library = torch.library.Library(NAMESPACE, 'FRAGMENT')
    for schema, name, function in (
            (OUT_SCHEMA, 'laplace_kernel.out', _laplace_kernel_out),
            (NEWTON_SCHULZ_OUT_SCHEMA, 'newton_schulz_inverse.out',
             _newton_schulz_inverse_out),
            (LAYER_NORM_SCHEMA, 'layer_norm', _layer_norm),
            (LAYER_NORM_OUT_SCHEMA, 'layer_norm.out', _layer_norm_out)):
        library.define(schema)
        library.impl(name, function, 'CompositeExplicitAutograd')
    _DECLARED = library


def own_layer_norm(x: torch.Tensor,
                   normalized_shape,
                   weight: Optional[torch.Tensor] = None,
                   bias: Optional[torch.Tensor] = None,
                   eps: float = 1e-5,
                   cudnn_enable: bool = True) -> Optional[torch.Tensor]:
    """``aten.layer_norm`` as our operator where our kernel computes it
    (over the last dimension, with weight and bias, in float32); None (the
    stock operator) otherwise."""
    if (len(normalized_shape) != 1 or weight is None or bias is None
            or x.dtype != torch.float32):
        return None
    return torch.ops.mmlaplacian.layer_norm(x, weight, bias, eps)


# The standard operators a program exported with our kernels rewrites into
# ours (xnnpack_forms.apply_xnnpack_forms applies them).
OWN_KERNEL_FORMS = {torch.ops.aten.layer_norm.default: own_layer_norm}


def program_needs_kernels(path: str) -> bool:
    """Whether the ``.pte`` file calls one of our operators (its operator
    table holds their names as strings)."""
    with open(path, 'rb') as f, mmap.mmap(f.fileno(), 0,
                                          access=mmap.ACCESS_READ) as data:
        return data.find(f'{NAMESPACE}::'.encode()) >= 0


def load_program(path: str, **options):
    """ExecuTorch's ``Runtime.get().load_program``, with our kernels
    registered first.

    Only a program that calls our operators needs the library: any other
    loads as usual, also where the library is not built or is stale. Once
    the library is registered, programs are not scanned for the operator.

    Args:
        path (str): The ``.pte`` file.
        **options: ``load_program``'s options (e.g. ``enable_etdump``).

    Returns:
        executorch.runtime.Program: The loaded program.

    Raises:
        ImportError: The program calls our operators and our kernel library
            is not built, or does not load.
    """
    from executorch.runtime import Runtime
    if _LOADED is None and program_needs_kernels(path):
        load_executorch_kernels()
    return Runtime.get().load_program(path, **options)


def method_input_sizes(program, method: str) -> List[Tuple[int, ...]]:
    """The input shapes a method of a loaded program was exported for.

    Args:
        program: An ``executorch.runtime.Program`` (:func:`load_program`).
        method (str): One of ``program.method_names``.

    Returns:
        list: One shape tuple per input, in the method's order.
    """
    meta = program.metadata(method)
    return [tuple(meta.input_tensor_meta(i).sizes())
            for i in range(meta.num_inputs())]
