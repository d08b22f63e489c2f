"""AOTInductor packages: a model compiled ahead of time for the CPU.

``torch.export`` traces the model at one input size, and inductor compiles
the program into a shared library with its weights frozen in (BatchNorm
folded into the convolutions, the linear weights packed for oneDNN with
their GELU and residual adds as post-ops). The ``.pt2`` package loads with
``torch._inductor.aoti_load_package`` in Python, or with
``torch::inductor::AOTIModelPackageLoader`` in C++, and runs without
recompiling: the fastest float32 CPU path of a LaplacianFormer
(``docs/benchmarks.md``).

Our operators (``mmlaplacian::laplace_kernel`` and the Newton–Schulz
inverse) stay operator calls in the package, so the process that runs it
needs them registered: ``import mmlaplacian`` in Python (:func:`load_aoti`
does it), the ``mmlaplacian._ext`` library loaded in C++.
"""
from __future__ import annotations

import os
import os.path as osp
import re
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from typing import List, Tuple

import torch
import torch.nn as nn

PACKAGE_SUFFIX = '.pt2'
# The package's metadata entry holding the input shape it was made for.
INPUT_SHAPE_KEY = 'mmlaplacian.input_shape'
# Layers that compute otherwise in training mode.
TRAINING_DEPENDENT = (nn.modules.batchnorm._BatchNorm, nn.Dropout)
# How the package's generated code calls a linear layer: packed for oneDNN
# (its post-ops fused), packed for MKL, or ATen's unpacked addmm.
LINEAR_KERNELS = {
    'oneDNN': re.compile(r'\baoti_torch_cpu__linear_pointwise\w*\('),
    'MKL': re.compile(r'\baoti_torch_cpu__mkl_linear\w*\('),
    'unpacked': re.compile(r'\baoti_torch_cpu_addmm_out\('),
}


@dataclass
class AOTIResult:
    """What :func:`export_aoti` produced.

    Attributes:
        path (str): The ``.pt2`` package.
        export_seconds (float): ``torch.export`` wall time.
        compile_seconds (float): Inductor's compilation, packaging
            included.
        linear_kernels (Counter): Calls of linear kernels in the generated
            code, by kind (:data:`LINEAR_KERNELS`).
    """
    path: str
    export_seconds: float
    compile_seconds: float
    linear_kernels: Counter = field(default_factory=Counter)


def _check_package_path(path: str) -> None:
    if not path.endswith(PACKAGE_SUFFIX):
        raise ValueError(f'an AOTInductor package is a {PACKAGE_SUFFIX} '
                         f'file; got {path!r}')


def export_aoti(module: nn.Module,
                example: torch.Tensor,
                path: str,
                freezing: bool = True) -> AOTIResult:
    """Compile ``module(example)`` into the AOTInductor package ``path``.

    Args:
        module (nn.Module): In eval mode; takes one ``(1, 3, H, W)`` tensor
            and returns a tensor or a tuple of tensors (e.g.
            :class:`~mmlaplacian.deployment.BackboneForExport`).
        example (Tensor): The example input; the package runs at its shape
            only.
        path (str): Output ``.pt2`` file, replaced if it exists.
        freezing (bool): Inductor's freezing: the weights become constants
            of the compiled code, folded and packed once. Defaults to True.

    Returns:
        AOTIResult: The package, the export and compilation times and the
        packed linear kernels its code calls.

    Raises:
        ValueError: ``path`` is not a ``.pt2`` file, or a BatchNorm or
            dropout layer of ``module`` is in training mode (the package
            would hold its training-time behaviour).
    """
    _check_package_path(path)
    training = [name for name, layer in module.named_modules()
                if layer.training and isinstance(layer, TRAINING_DEPENDENT)]
    if training:
        raise ValueError(f'export_aoti needs the module in eval mode '
                         f'(module.eval()); in training mode: {training[0]}'
                         + (f' and {len(training) - 1} more'
                            if len(training) > 1 else ''))
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    start = time.perf_counter()
    shape = ','.join(str(size) for size in example.shape)
    # Both under no_grad: inductor freezes and packs the weights of an
    # inference graph only.
    with torch.no_grad():
        program = torch.export.export(module, (example, ))
        exported = time.perf_counter()
        torch._inductor.aoti_compile_and_package(
            program, package_path=path,
            inductor_configs={'freezing': freezing,
                              'aot_inductor.metadata': {
                                  INPUT_SHAPE_KEY: shape}})
    return AOTIResult(path=path, export_seconds=exported - start,
                      compile_seconds=time.perf_counter() - exported,
                      linear_kernels=packed_linear_kernels(path))


def packed_linear_kernels(path: str) -> Counter:
    """Calls of linear kernels in a package's generated C++, by kind
    (:data:`LINEAR_KERNELS`): what its linear layers run on."""
    counts = Counter()
    with zipfile.ZipFile(path) as package:
        for name in package.namelist():
            if name.endswith('.cpp'):
                code = package.read(name).decode(errors='replace')
                for kind, call in LINEAR_KERNELS.items():
                    counts[kind] += len(call.findall(code))
    return +counts


class AOTIPackage:
    """A loaded AOTInductor package of :func:`export_aoti`.

    The compiled code reads its input as the shape it was made for; a
    package run on another shape would read past the tensor or compute
    garbage (its own checks need ``AOTI_RUNTIME_CHECK_INPUTS=1``), so each
    call checks the input against the shape stored in the package.

    Args:
        path (str): A ``.pt2`` package of :func:`export_aoti`.

    Attributes:
        input_shape (tuple[int]): The shape the package takes.

    Raises:
        ValueError: ``path`` is not a ``.pt2`` file, or not one of
            :func:`export_aoti` (no input shape in its metadata).
        FileNotFoundError: There is no such file.
    """

    def __init__(self, path: str) -> None:
        _check_package_path(path)
        if not osp.isfile(path):
            raise FileNotFoundError(f'no AOTInductor package at {path!r}')
        # The package calls our operators: they must be registered.
        import mmlaplacian.ops  # noqa: F401
        self.path = path
        self._runner = torch._inductor.aoti_load_package(path)
        shape = self._runner.get_metadata().get(INPUT_SHAPE_KEY)
        if shape is None:
            raise ValueError(f'{path!r} holds no {INPUT_SHAPE_KEY} entry: '
                             'make it with export_aoti')
        self.input_shape: Tuple[int, ...] = tuple(
            int(size) for size in shape.split(','))

    def __call__(self, image: torch.Tensor) -> List[torch.Tensor]:
        """Run the package on ``image``.

        Raises:
            ValueError: ``image`` is not a float32 CPU tensor of
                :attr:`input_shape`.
        """
        if (tuple(image.shape) != self.input_shape
                or image.dtype != torch.float32 or image.device.type != 'cpu'):
            raise ValueError(
                f'{self.path} takes a float32 CPU tensor of shape '
                f'{list(self.input_shape)}; got {image.dtype} '
                f'{list(image.shape)} on {image.device} (export a package '
                'for that shape)')
        return list(self._runner(image))


def load_aoti(path: str) -> AOTIPackage:
    """Load the AOTInductor package ``path`` (:class:`AOTIPackage`)."""
    return AOTIPackage(path)
