"""Export to ONNX with torch's dynamo exporter, and checks of the result.

The model is exported as it runs (``torch.export``): our fused ops appear as
the operators ``mmlaplacian::laplace_kernel`` and
``mmlaplacian::newton_schulz_inverse`` and are rewritten into standard
operators by their own export forms (:mod:`mmlaplacian.ops.export_forms`);
nothing in the model is patched or switched for the export.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn

from mmlaplacian.ops.export_forms import (BLOCK_ELEMENTS, LAPLACE_FORMS,
                                          export_decompositions)
from .onnx_ops import onnx_translation_table

DEFAULT_OPSET = 18
# How close an exported program's feature maps (fp32) must stay to eager
# PyTorch, relative to the largest reference magnitude: the tolerance of the
# ONNX checks (benchmarks.onnx_compare) and of the ExecuTorch tool.
FEATURE_RTOL = 1e-4
# Standard ONNX: the default domain, under either of its names.
STANDARD_DOMAINS = ('', 'ai.onnx')
# --dynamic input sizes are multiples of the network stride, 32 x (4..256):
# 128 to 8192 pixels. From 128 pixels on, stride 16 has more than 49 tokens,
# so every LaplacianAttention pools landmarks and one graph serves the range.
SIZE_MULTIPLE = 32
MIN_BLOCKS, MAX_BLOCKS = 4, 256


def eager_outputs(module: nn.Module,
                  image: torch.Tensor) -> List[torch.Tensor]:
    """``module(image)`` without autograd, as a list of tensors (the form
    in which the runtimes return them)."""
    with torch.no_grad():
        out = module(image)
    return [out] if isinstance(out, torch.Tensor) else list(out)


def largest_relative_difference(got: Sequence[torch.Tensor],
                                expected: Sequence[torch.Tensor]) -> float:
    """The largest difference of any output from its reference, relative to
    the reference's largest magnitude: what :data:`FEATURE_RTOL` bounds."""
    if len(got) != len(expected):
        raise ValueError(f'{len(got)} outputs against {len(expected)} '
                         'references')
    return max(
        float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
        for out, ref in zip(got, expected))


class ExportError(RuntimeError):
    """The exported graph is not what was asked for (custom operators, a
    fixed size where a dynamic one was requested)."""


@dataclass
class ExportResult:
    """What :func:`export_onnx` produced.

    Attributes:
        path (str): The ``.onnx`` file.
        seconds (float): Export wall time.
        operators (dict): ``op_type -> count`` over the graph.
        input_shape (list): The graph input's dims (ints or symbol names).
        laplace (str): Graph form of the Laplacian kernel.
    """
    path: str
    seconds: float
    operators: Dict[str, int] = field(default_factory=dict)
    input_shape: List = field(default_factory=list)
    laplace: str = 'per-feature'


class BackboneForExport(nn.Module):
    """A backbone whose forward returns a tuple of feature maps."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    @property
    def output_names(self) -> List[str]:
        indices = getattr(self.backbone, 'out_indices', None)
        if indices is None:
            return []
        return [f'feat{i}' for i in indices]

    def forward(self, image: torch.Tensor):
        return tuple(self.backbone(image))


def _operator_counts(model) -> Dict[str, int]:
    """``op_type -> count`` over the graph and its local functions; raises
    :class:`ExportError` on an operator outside the standard domain."""
    counts: Dict[str, int] = {}
    local = {(f.domain, f.name) for f in model.functions}

    def visit(nodes):
        for node in nodes:
            if (node.domain, node.op_type) in local:
                continue  # counted through the function body
            if node.domain not in STANDARD_DOMAINS:
                raise ExportError(
                    f'the exported graph holds a non-standard operator '
                    f'{node.domain}::{node.op_type} (node {node.name!r}); '
                    f'stock onnxruntime cannot run it')
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
            for attr in node.attribute:
                if attr.g is not None and attr.g.node:
                    visit(attr.g.node)

    visit(model.graph.node)
    for function in model.functions:
        visit(function.node)
    return dict(sorted(counts.items()))


def largest_tensors(path: str, top: int = 3) -> List[tuple]:
    """The ``top`` largest intermediate tensors of a static-shape graph:
    ``(name, shape, MiB)`` from ONNX shape inference (fp32 assumed for the
    size). Shows whether any ``(B, h, N, m, d)`` tensor was materialised."""
    import numpy as np
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    weights = {init.name for init in model.graph.initializer}
    sizes = []
    for info in model.graph.value_info:
        if info.name in weights:
            continue
        dims = info.type.tensor_type.shape.dim
        if not dims or any(not d.HasField('dim_value') for d in dims):
            continue
        shape = tuple(d.dim_value for d in dims)
        sizes.append((info.name, shape, float(np.prod(shape)) * 4 / 2**20))
    return sorted(sizes, key=lambda item: -item[2])[:top]


def _input_dims(model) -> List:
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return [d.dim_param if d.dim_param else d.dim_value for d in dims]


def _has_symbolic_input(program: torch.export.ExportedProgram) -> bool:
    """Whether a user input of ``program`` has a symbolic size."""
    inputs = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        value = node.meta.get('val') if node.name in inputs else None
        if isinstance(value, torch.Tensor) and not all(
                isinstance(size, int) for size in value.shape):
            return True
    return False


def export_onnx(module: Union[nn.Module, torch.export.ExportedProgram],
                example: torch.Tensor,
                path: str,
                opset: int = DEFAULT_OPSET,
                dynamic: bool = False,
                output_names: Optional[Sequence[str]] = None,
                input_name: str = 'image',
                optimize: bool = False,
                laplace: Optional[str] = None,
                block_elements: int = BLOCK_ELEMENTS) -> ExportResult:
    """Export ``module(example)`` to ``path`` with standard operators only.

    Args:
        module (nn.Module | ExportedProgram): In eval mode; takes one
            ``(1, 3, H, W)`` tensor. Or what ``torch.export.export`` made of
            such a module, which is then not exported again: its sizes are
            dynamic if the program's are.
        example (Tensor): The example input.
        path (str): Output ``.onnx`` file.
        opset (int): ONNX opset (>= 16 for ``RoiAlign`` with half-pixel
            alignment). Defaults to 18.
        dynamic (bool): Make H and W symbolic (multiples of 32). With an
            exported program, whether its sizes must be symbolic.
        output_names (sequence[str], optional): Names of the outputs.
        input_name (str): Name of the input. Defaults to ``'image'``.
        optimize (bool): Run onnxscript's graph optimizer (constant folding,
            dead-code removal). Off by default: onnxruntime optimises the
            graph itself when it loads it, and the pass lengthens the
            export.
        laplace (str, optional): Graph form of the Laplacian kernel,
            ``'row-blocks'``, ``'per-feature'`` or ``'auto'``
            (:mod:`mmlaplacian.ops.export_forms`). Defaults to
            ``'row-blocks'`` for static sizes and ``'per-feature'`` with
            ``dynamic`` (row blocks need a static N).
        block_elements (int): Element budget of one row block's
            ``(B, h, d, Nb, m)`` difference tensor.

    Returns:
        ExportResult: The file, the export time and the operator counts.

    Raises:
        ValueError: ``opset < 16``, a size that is not a multiple of 32
            with ``dynamic``, an unknown ``laplace``,
            ``laplace='row-blocks'`` with ``dynamic``, or ``dynamic`` with a
            program exported with static sizes.
        ExportError: The graph holds a non-standard operator, or a dynamic
            export came out with a fixed input size.
    """
    import onnx

    if opset < 16:
        raise ValueError(f'opset {opset} is too old: RoiAlign with '
                         f'half-pixel alignment needs opset >= 16')
    program = module if isinstance(
        module, torch.export.ExportedProgram) else None
    if program is not None:
        symbolic = _has_symbolic_input(program)
        if dynamic and not symbolic:
            raise ValueError(
                'dynamic=True, but the program was exported with static '
                'sizes: export the module itself with dynamic=True, or pass '
                'torch.export.export(..., dynamic_shapes=...)')
        dynamic = symbolic
    laplace = laplace or ('per-feature' if dynamic else 'row-blocks')
    if laplace not in LAPLACE_FORMS:
        raise ValueError(f'laplace must be one of {LAPLACE_FORMS}, got '
                         f'{laplace!r}')
    if dynamic and laplace == 'row-blocks':
        raise ValueError("the 'row-blocks' Laplacian kernel needs static "
                         'sizes (its block count is fixed in the graph); use '
                         "laplace='per-feature' with dynamic")
    dynamic_shapes = None
    if dynamic and program is None:
        bad = [s for s in example.shape[-2:] if s % SIZE_MULTIPLE]
        if bad:
            raise ValueError(f'--dynamic needs an example size that is a '
                             f'multiple of {SIZE_MULTIPLE}, got '
                             f'{tuple(example.shape[-2:])}')
        blocks_h = torch.export.Dim('height_blocks',
                                    min=MIN_BLOCKS,
                                    max=MAX_BLOCKS)
        blocks_w = torch.export.Dim('width_blocks',
                                    min=MIN_BLOCKS,
                                    max=MAX_BLOCKS)
        dynamic_shapes = ({
            2: SIZE_MULTIPLE * blocks_h,
            3: SIZE_MULTIPLE * blocks_w
        }, )
    start = time.perf_counter()
    with torch.no_grad():
        exported = program if program is not None else torch.export.export(
            module.eval(), (example, ), dynamic_shapes=dynamic_shapes)
        exported = exported.run_decompositions(
            export_decompositions(laplace, block_elements))
        onnx_program = torch.onnx.export(
            exported,
            dynamo=True,
            opset_version=opset,
            input_names=[input_name],
            output_names=list(output_names) if output_names else None,
            custom_translation_table=onnx_translation_table(),
            optimize=optimize,
            verbose=False)
    onnx_program.save(path, external_data=False)
    seconds = time.perf_counter() - start
    model = onnx.load(path)
    result = ExportResult(path, seconds, _operator_counts(model),
                          _input_dims(model), laplace)
    if dynamic and not all(isinstance(d, str) for d in result.input_shape[2:]):
        raise ExportError(
            f'--dynamic was asked for but the exported input is fixed at '
            f'{result.input_shape}: some shape arithmetic in the model was '
            f'evaluated in Python at export time')
    return result
