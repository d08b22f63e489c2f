"""Export to an ExecuTorch program (``.pte``) lowered to XNNPACK.

The path is ``torch.export`` → our operators rewritten by their export
forms (:func:`mmlaplacian.ops.export_decompositions`), and a few standard
ones in forms XNNPACK runs (:mod:`mmlaplacian.deployment.xnnpack_forms`)
→ optionally int8
with PyTorch's PT2E flow (:mod:`mmlaplacian.deployment.pt2e_quantization`)
→ ExecuTorch's edge dialect, with XNNPACK's partitioner taking what it can
run → ``.pte``. Operators XNNPACK does not take run on ExecuTorch's
portable kernels; the result lists them, so their cost can be judged.

One program may hold several methods (e.g. a detector's dense part and its
RoI heads): pass ``{method_name: (module, example_args)}``.

With ``laplace='operator'`` the program keeps the Laplacian kernel and the
Newton–Schulz inverse as our operators, and LayerNorm becomes ours too; they
run in our ExecuTorch kernels
(:mod:`mmlaplacian.deployment.executorch_kernels`) instead of standard
operators: faster, but a runtime needs those kernels to load the program.

Needs ``executorch`` (``pip install executorch``, which brings torchao).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import (Dict, List, Mapping, Optional, Sequence, Tuple, Union)

import torch
import torch.nn as nn

from mmlaplacian.ops.export_forms import LAPLACE_FORMS, export_decompositions
from mmlaplacian.ops.extension import NAMESPACE

from .executorch_kernels import (OWN_KERNEL_FORMS, declare_operators,
                                 load_program)
from .xnnpack_forms import XNNPACK_FORMS, apply_xnnpack_forms

DELEGATE_CALL = 'executorch_call_delegate'
# Graph plumbing that is no computation: left out of the portable-op list.
_PLUMBING = ('getitem', 'executorch_call_delegate', 'alloc')
QUANTIZE_MODES = (None, 'int8')
# The parts int8 leaves in float32 unless told otherwise: XNNPACK's int8
# depthwise kernels are slower than its float32 ones (the Tiny backbone's
# 9: 1.48 ms against 0.59 ms at 192x192, 27 ms against 15 ms at 800x1344),
# and float32 is closer to the float model.
INT8_FLOAT_PARTS = ('depthwise-convolution', )
# The Laplacian kernel and the Newton-Schulz inverse kept as our operators,
# run by our ExecuTorch kernels (and LayerNorm by ours).
LAPLACE_OPERATOR = 'operator'
# Our operators such a program keeps whole instead of decomposing them.
KEPT_OPERATORS = (torch.ops.mmlaplacian.laplace_kernel.default,
                  torch.ops.mmlaplacian.newton_schulz_inverse.default)
EXECUTORCH_LAPLACE_FORMS = LAPLACE_FORMS + (LAPLACE_OPERATOR, )
# Element budget of one row block of the Laplacian kernel in XNNPACK: 2M
# fp32 elements, 8 MiB. XNNPACK runs a block as a few operators over the
# whole block, so fewer, larger blocks pay each operator's fixed cost less
# often, until a block outgrows the cache. ``python -m
# benchmarks.executorch_blocks`` measures it on a device (docs/deployment.md
# gives our figures); a device with a smaller cache may want a smaller one.
XNNPACK_BLOCK_ELEMENTS = 2**21
# How the kernel's features are added in XNNPACK (export_forms'
# FEATURE_SUMS): the maximum identity, one element-wise operator a block
# instead of two (``python -m benchmarks.executorch_blocks`` compares them).
XNNPACK_FEATURE_SUM = 'max-matmul'

Methods = Mapping[str, Tuple[nn.Module, Tuple]]
Calibration = Union[Sequence[Tuple], Mapping[str, Sequence[Tuple]]]


@dataclass
class MethodLowering:
    """What one method of the program became.

    Attributes:
        delegated (int): Subgraphs run by XNNPACK.
        int8_delegates (int): Those of them that hold int8 operators.
        portable_ops (Counter[str]): Operators left to the portable
            kernels, by name, with their counts.
        own_ops (Counter[str]): Our operators, run by our ExecuTorch
            kernels (``laplace='operator'``), by name.
        quantized (Counter[str]): With int8: the operators the quantizer
            took (int8 inputs), by name.
        float_ops (Counter[str]): With int8: the operators of the kinds the
            quantizer takes (convolution, linear, add, mul, cat, pooling)
            that stay in float32, by name.
    """
    delegated: int = 0
    int8_delegates: int = 0
    portable_ops: Counter = field(default_factory=Counter)
    own_ops: Counter = field(default_factory=Counter)
    quantized: Counter = field(default_factory=Counter)
    float_ops: Counter = field(default_factory=Counter)


@dataclass
class ExecuTorchResult:
    """What :func:`export_executorch` produced.

    Attributes:
        path (str): The ``.pte`` file.
        seconds (float): Export, quantization and lowering wall time.
        methods (dict[str, MethodLowering]): Per method of the program.
        quantize (str, optional): ``'int8'`` or None (float32).
    """
    path: str
    seconds: float
    methods: Dict[str, MethodLowering] = field(default_factory=dict)
    quantize: Optional[str] = None

    @property
    def delegated(self) -> int:
        """XNNPACK subgraphs over all methods."""
        return sum(m.delegated for m in self.methods.values())

    @property
    def int8_delegates(self) -> int:
        """XNNPACK subgraphs holding int8 operators, over all methods."""
        return sum(m.int8_delegates for m in self.methods.values())

    @property
    def portable_ops(self) -> Counter:
        """Operators left to the portable kernels, over all methods."""
        return sum((m.portable_ops for m in self.methods.values()), Counter())

    @property
    def own_ops(self) -> Counter:
        """Our operators, over all methods."""
        return sum((m.own_ops for m in self.methods.values()), Counter())

    @property
    def quantized(self) -> Counter:
        """Operators run in int8, over all methods."""
        return sum((m.quantized for m in self.methods.values()), Counter())

    @property
    def float_ops(self) -> Counter:
        """Quantizable operators left in float32, over all methods."""
        return sum((m.float_ops for m in self.methods.values()), Counter())


def _short_name(target) -> str:
    name = getattr(target, '__name__', None) or str(target)
    return name.split(' ')[0].replace('<EdgeOpOverload:', '').strip('<>:')


def _method_table(module: Union[nn.Module, Methods],
                  example: Optional[Union[torch.Tensor, Tuple]],
                  calibration: Optional[Calibration]):
    """``{name: (module, args)}`` and ``{name: calibration}`` from either
    call form."""
    if isinstance(module, Mapping):
        if example is not None:
            raise ValueError(
                'export_executorch: with a dict of methods, each entry '
                'carries its example arguments; pass example=None')
        if not module:
            raise ValueError('export_executorch: the dict of methods is empty')
        methods = {}
        for name, entry in module.items():
            if (not isinstance(entry, (tuple, list)) or len(entry) != 2
                    or not isinstance(entry[0], nn.Module)
                    or not isinstance(entry[1], (tuple, list))):
                raise TypeError(
                    f'export_executorch: method {name!r} must be '
                    '(nn.Module, example_args_tuple), got '
                    f'{type(entry).__name__}')
            methods[name] = (entry[0], tuple(entry[1]))
        if calibration is not None and not isinstance(calibration, Mapping):
            raise TypeError(
                'export_executorch: with a dict of methods, calibration is '
                'a dict method_name -> list of argument tuples')
        return methods, calibration
    if example is None:
        raise ValueError('export_executorch: example input missing')
    args = tuple(example) if isinstance(example, (tuple, list)) else (
        example, )
    if calibration is not None:
        calibration = {'forward': calibration}
    return {'forward': (module, args)}, calibration


def _calibration_for(name: str, calibration: Optional[Calibration]):
    """The calibration inputs of method ``name``.

    Raises:
        ValueError: There are none.
    """
    inputs = None if calibration is None else calibration.get(name)
    if not inputs:
        raise ValueError(
            f"export_executorch: quantize='int8' needs calibration inputs "
            f'for method {name!r} (a list of argument tuples, e.g. '
            'mmlaplacian.deployment.calibration.calibration_inputs(...)); '
            'static int8 fixes every scale from them')
    return inputs


def _holds_int8(lowered) -> bool:
    """Whether a lowered subgraph was cut from int8 operators (its
    quantize / dequantize pairs went into the delegate with them)."""
    return any('quantized_decomposed' in str(node.target)
               for node in lowered.original_module.graph.nodes)


def _is_own(node) -> bool:
    """Whether a node calls one of our operators (``mmlaplacian::*``)."""
    return f'{NAMESPACE}.' in str(node.target)


def _lowering(program, quantized: Counter,
              float_ops: Counter) -> MethodLowering:
    """A lowered method's report from its edge program."""
    module = program.graph_module
    calls = [n for n in module.graph.nodes if n.op == 'call_function']
    names = [_short_name(node.target) for node in calls]
    delegates = [
        getattr(module, node.args[0].target)
        for node, name in zip(calls, names) if name == DELEGATE_CALL
    ]
    return MethodLowering(
        delegated=len(delegates),
        int8_delegates=sum(map(_holds_int8, delegates)),
        portable_ops=Counter(
            name for node, name in zip(calls, names)
            if not any(p in name for p in _PLUMBING) and not _is_own(node)),
        own_ops=Counter(
            f'{NAMESPACE}.{name}' for node, name in zip(calls, names)
            if _is_own(node)),
        quantized=quantized,
        float_ops=float_ops)


def executorch_decompositions(laplace: str, block_elements: int,
                               feature_sum: str) -> Dict:
    """:func:`~mmlaplacian.ops.export_decompositions` for an ExecuTorch
    program; with ``laplace='operator'`` the Laplacian kernel and the
    Newton–Schulz inverse stay our operators (and their ``out`` forms are
    declared for the lowering)."""
    if laplace not in EXECUTORCH_LAPLACE_FORMS:
        raise ValueError(f'Laplacian kernel graph form must be one of '
                         f'{EXECUTORCH_LAPLACE_FORMS}, got {laplace!r}')
    if laplace != LAPLACE_OPERATOR:
        return export_decompositions(laplace, block_elements, feature_sum)
    table = export_decompositions('auto', block_elements, feature_sum)
    for operator in KEPT_OPERATORS:
        del table[operator]
    declare_operators()
    return table


def check_operator_inputs(program: torch.export.ExportedProgram) -> None:
    """Check that every call of our operators left in ``program`` reads
    float32, the one dtype our ExecuTorch kernels take.

    Raises:
        ValueError: A call with inputs of another dtype (named).
    """
    for node in program.graph.nodes:
        if node.target not in KEPT_OPERATORS:
            continue
        dtypes = [arg.meta['val'].dtype for arg in node.args
                  if isinstance(arg, torch.fx.Node)]
        if any(dtype != torch.float32 for dtype in dtypes):
            raise ValueError(
                f"export_executorch: laplace='operator' runs "
                f'{node.target.name()} in our ExecuTorch kernel, which '
                f'takes float32; {node.name} reads '
                f'{", ".join(map(str, dtypes))} (export the model in '
                f"float32, or use laplace='auto')")


def export_executorch(module: Union[nn.Module, Methods],
                      example: Optional[Union[torch.Tensor, Tuple]],
                      path: str,
                      laplace: str = 'auto',
                      quantize: Optional[str] = None,
                      calibration: Optional[Calibration] = None,
                      float_parts: Optional[Sequence[str]] = None,
                      block_elements: int = XNNPACK_BLOCK_ELEMENTS,
                      feature_sum: str = XNNPACK_FEATURE_SUM
                      ) -> ExecuTorchResult:
    """Export modules to an XNNPACK-lowered ExecuTorch program.

    Args:
        module (nn.Module | dict): A module returning a tensor or a tuple
            of tensors (e.g. :class:`~mmlaplacian.deployment.
            BackboneForExport`), exported as the method ``forward``; or
            ``{method_name: (module, example_args_tuple)}``: one program
            with one method per entry.
        example (Tensor | tuple, optional): The single module's example
            input (or argument tuple); the program has its shapes. None
            with the dict form.
        path (str): Output ``.pte`` file.
        laplace (str): Graph form of the Laplacian kernel
            (:mod:`mmlaplacian.ops.export_forms`), or ``'operator'``: our
            operators, the Newton–Schulz inverse included, run by our
            ExecuTorch kernels, with LayerNorm run by ours too (module
            docstring).
        quantize (str, optional): None (float32) or ``'int8'``: static
            int8 through PT2E and the XNNPACK quantizer
            (:func:`~mmlaplacian.deployment.pt2e_quantization.
            quantize_program`).
        calibration (list | dict, optional): With int8: a list of argument
            tuples the single module is run on to fix the scales; with the
            dict form, ``{method_name: list}``.
        float_parts (Sequence[str], optional): With int8: parts of a
            LaplacianFormer left in float32 (keys of :data:`~mmlaplacian.
            deployment.pt2e_quantization.PARTS`); None:
            :data:`INT8_FLOAT_PARTS`, ``()``: everything the quantizer
            takes.
        block_elements (int): Element budget of one row block of the
            Laplacian kernel's ``'row-blocks'`` form
            (:data:`XNNPACK_BLOCK_ELEMENTS`).
        feature_sum (str): How that form adds the kernel's features
            (:data:`XNNPACK_FEATURE_SUM`; one of
            :data:`mmlaplacian.ops.export_forms.FEATURE_SUMS`).

    Returns:
        ExecuTorchResult: The file, the time, and per method what did not
        lower and what was quantized.

    Raises:
        ImportError: executorch is not installed (the message says how to
            install it).
        ValueError: An unknown ``quantize``, float part, Laplacian form or
            feature sum, a block budget below 1, int8 without calibration
            inputs for a method, or ``laplace='operator'`` on inputs that
            are not float32.
        TypeError: A dict entry that is not ``(module, args_tuple)``.
    """
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f'export_executorch: quantize must be one of '
                         f'{QUANTIZE_MODES}, got {quantize!r}')
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import \
            XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from executorch.exir.passes.constant_prop_pass import \
            constant_prop_pass
    except ImportError as err:
        raise ImportError('export_executorch needs executorch: pip install '
                          f'executorch ({err})') from err
    methods, calibration = _method_table(module, example, calibration)
    if float_parts is not None and not quantize:
        raise ValueError("export_executorch: float_parts is for "
                         "quantize='int8'")
    float_parts = (INT8_FLOAT_PARTS
                   if float_parts is None else tuple(float_parts))
    if quantize:
        from .pt2e_quantization import check_float_parts, quantize_program
        check_float_parts(float_parts)
        # Checked before any export: a missing list fails at once.
        calibration = {
            name: _calibration_for(name, calibration)
            for name in methods
        }
    # Built (and its arguments checked) before any export.
    decompositions = executorch_decompositions(laplace, block_elements,
                                               feature_sum)
    forms = ({
        **XNNPACK_FORMS,
        **OWN_KERNEL_FORMS
    } if laplace == LAPLACE_OPERATOR else XNNPACK_FORMS)
    start = time.perf_counter()
    programs, counts = {}, {}
    for name, (method_module, args) in methods.items():
        with torch.no_grad():
            program = torch.export.export(method_module.eval(), args)
        program = apply_xnnpack_forms(
            program.run_decompositions(decompositions), forms)
        if laplace == LAPLACE_OPERATOR:
            check_operator_inputs(program)
        # XNNPACK has no sum: the kernel adds its features with a product,
        # whose column must be a constant for XNNPACK to take it as
        # a GEMM with a static weight. Folded before quantization: folding
        # after it would turn the int8 weights back into float constants.
        # The XNNPACK forms' constants (kernel tiles, rows of 1/N) are
        # folded the same way.
        program = constant_prop_pass(program)
        counts[name] = (Counter(), Counter())
        if quantize:
            program, counts[name] = quantize_program(
                program, args, calibration[name], float_parts)
        programs[name] = program
    edge = to_edge_transform_and_lower(
        programs, partitioner=[XnnpackPartitioner()])
    with open(path, 'wb') as f:
        f.write(edge.to_executorch().buffer)
    return ExecuTorchResult(
        path=path,
        seconds=time.perf_counter() - start,
        methods={
            name: _lowering(edge.exported_program(name), *counts[name])
            for name in programs
        },
        quantize=quantize)


def run_executorch(path: str,
                   inputs: Sequence[torch.Tensor],
                   method: str = 'forward') -> List[torch.Tensor]:
    """Run a method of a ``.pte`` program in ExecuTorch's runtime.

    Args:
        path (str): The ``.pte`` file.
        inputs (Sequence[Tensor]): The method's arguments.
        method (str): Method name (``'forward'`` for a single module).

    Returns:
        list[Tensor]: The method's outputs.

    Raises:
        KeyError: The program has no method ``method`` (the message lists
            those it has).
    """
    program = load_program(path)
    if method not in program.method_names:
        raise KeyError(f'{path} has no method {method!r}; it has '
                       f'{sorted(program.method_names)}')
    return list(program.load_method(method).execute(list(inputs)))
