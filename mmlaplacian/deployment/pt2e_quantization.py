"""Static int8 of an exported program with PyTorch's PT2E flow, for XNNPACK.

``ExportedProgram`` (our operators already in their export forms) →
``.module()`` → a copy of each shared weight per use
(:func:`unshare_weights`) → torchao's ``prepare_pt2e`` with ExecuTorch's
``XNNPACKQuantizer`` (symmetric, per-channel weights, static activations)
→ the calibration inputs run through the observers → ``convert_pt2e``
(quantize / dequantize pairs around each quantized operator) → padding
fed float32 (:func:`float_padding_inputs`) → ``torch.export.export``
again, ready for ``to_edge_transform_and_lower`` with the XNNPACK
partitioner, which fuses each pair with its operator into an int8 kernel.

The quantizer takes convolutions, linear layers, ``add``, ``mul``, ``cat``
and adaptive average pooling. Matrix products (``bmm``, ``matmul``,
``baddbmm``: the Newton–Schulz steps, ``Kq · weights``), softmax
attention's SDPA, LayerNorm and the Laplacian kernel's ``|x - y|``, sums and
``exp`` have no annotator and stay in float32 whatever is asked.

Of what it takes, :data:`PARTS` names the pieces of a LaplacianFormer that
``float_parts`` can leave in float32:

- ``'depthwise-convolution'``: convolutions of one channel per group (the
  attention's local context), which XNNPACK runs faster in float32 than in
  int8; ``export_executorch`` leaves them in float32 unless told otherwise
  (its ``INT8_FLOAT_PARTS``);
- ``'laplace-kernel'``: the ``cat`` joining the row blocks of
  ``sum_c |x_c - y_c|`` before ``exp(-d)``;
- ``'newton-schulz'``: the products of its symmetry test and of the
  norms that scale the iteration's start;
- ``'attention-arithmetic'``: the rest of the Laplacian attention's own
  arithmetic (landmark pooling, the 1/λ scaling, the ``εI`` shift, the
  whitening folded into the read-out, the local-context ``add``);
- ``'softmax-attention'``: the last stage's softmax attention (its
  projections).

Quantized alone, no part of the attention moved an output measurably, and
leaving them in float did not make the program measurably faster or closer
to float32 (docs/deployment.md gives the figures).
"""
from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Callable, Dict, List, Sequence, Tuple

import torch
from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as xq
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer, get_symmetric_quantization_config)
from torch.fx import Node
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import (ComposableQuantizer,
                                                 QuantizationAnnotation,
                                                 Quantizer)

from mmlaplacian.models.layers import LaplacianAttention, SoftmaxAttention

Predicate = Callable[[Node], bool]
ANNOTATION_KEY = 'quantization_annotation'
# The operators the XNNPACK quantizer has annotators for.
QUANTIZABLE = frozenset().union(xq.CONV_TARGETS, xq.LINEAR_TARGETS,
                                xq.ADD_TARGETS, xq.MUL_TARGETS,
                                xq.CAT_TARGETS,
                                xq.ADAPTIVE_AVG_POOL2D_TARGETS)
# The operators whose weights the XNNPACK quantizer quantizes.
WEIGHTED = frozenset().union(xq.CONV_TARGETS, xq.LINEAR_TARGETS)
# Operators that pad (im2col pads, then gathers), which XNNPACK runs in
# float32 only: float_padding_inputs.
PADDING = frozenset((torch.ops.aten.pad.default,
                     torch.ops.aten.constant_pad_nd.default,
                     torch.ops.aten.im2col.default))


def _type_name(cls: type) -> str:
    return f'{cls.__module__}.{cls.__qualname__}'


def _from_operator(name: str) -> Predicate:
    """Nodes that an export form of ``mmlaplacian::<name>`` produced."""

    def test(node: Node) -> bool:
        source = node.meta.get('original_aten')
        return source is not None and source.name() == f'mmlaplacian::{name}'

    return test


def _module_types(node: Node) -> List[str]:
    """Type names of the modules a node was traced in, outermost first."""
    stack = node.meta.get('nn_module_stack') or {}
    return [t if isinstance(t, str) else _type_name(t)
            for _, t in stack.values()]


def _inside(cls: type) -> Predicate:
    """Nodes traced anywhere inside a module of type ``cls``."""
    name = _type_name(cls)
    return lambda node: name in _module_types(node)


_LAPLACE_KERNEL = _from_operator('laplace_kernel')
_NEWTON_SCHULZ = _from_operator('newton_schulz_inverse')


def _attention_arithmetic(node: Node) -> bool:
    """Nodes of a LaplacianAttention itself (not of its projections or of
    our operators' export forms)."""
    types = _module_types(node)
    return (bool(types) and types[-1] == _type_name(LaplacianAttention)
            and not _LAPLACE_KERNEL(node) and not _NEWTON_SCHULZ(node))


def _depthwise_convolution(node: Node) -> bool:
    """Convolutions of one input channel per group: the attention's local
    context (and its 5x5 tiles, xnnpack_forms)."""
    if node.target not in xq.CONV_TARGETS or len(node.args) < 2:
        return False
    weight = node.args[1].meta['val']
    groups = node.args[6] if len(node.args) > 6 else 1
    return weight.shape[1] == 1 and groups == weight.shape[0] > 1


# Parts of a LaplacianFormer the quantizer can be told to leave in float.
PARTS: Dict[str, Predicate] = {
    'depthwise-convolution': _depthwise_convolution,
    'laplace-kernel': _LAPLACE_KERNEL,
    'newton-schulz': _NEWTON_SCHULZ,
    'attention-arithmetic': _attention_arithmetic,
    'softmax-attention': _inside(SoftmaxAttention),
}


class FloatPartsMarker(Quantizer):
    """Marks the nodes of the parts left in float as annotated with nothing
    to quantize.

    Placed before the XNNPACK quantizer in a ``ComposableQuantizer``: every
    XNNPACK annotator skips a node already annotated, whereas not every one
    consults the quantizer's filter function (``cat``'s does not).

    Args:
        tests (Sequence[Callable[[Node], bool]]): A node is left in float
            when one of them holds.
    """

    def __init__(self, tests: Sequence[Predicate]) -> None:
        super().__init__()
        self.tests = list(tests)

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in model.graph.nodes:
            if node.op == 'call_function' and any(
                    test(node) for test in self.tests):
                node.meta[ANNOTATION_KEY] = QuantizationAnnotation(
                    _annotated=True)
        return model

    def validate(self, model: torch.fx.GraphModule) -> None:
        """Nothing to check: the marker adds no quantization."""


def unshare_weights(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Give every convolution and linear layer its own copy of the
    parameters it shares with another (a detector head applied to each FPN
    level).

    The XNNPACK quantizer marks a weight annotated with its first user and
    skips the later ones, which stay float32 while sharing their weight
    and bias constants with the first one's int8 kernel: such a program
    fails to lower (Mask R-CNN's RPN) or XNNPACK refuses it when it loads
    (RetinaNet's head: ``Failed to create convolution node``). With a copy
    each, every use is quantized on the scale of its own input.

    Args:
        module (GraphModule): ``ExportedProgram.module()``, edited in place.

    Returns:
        GraphModule: ``module``.
    """
    graph = module.graph
    for node in list(graph.nodes):
        if node.op != 'get_attr':
            continue
        users = [
            user for user in node.users
            if user.op == 'call_function' and user.target in WEIGHTED
        ]
        if len(users) < 2:
            continue
        tensor = attrgetter(node.target)(module)
        for index, user in enumerate(users[1:], 1):
            name = f"{node.target.replace('.', '_')}_use{index}"
            module.register_buffer(name, tensor.detach().clone())
            with graph.inserting_before(user):
                copy = graph.get_attr(name)
            copy.meta.update(node.meta)
            user.replace_input_with(node, copy)
    graph.lint()
    module.recompile()
    return module


def float_padding_inputs(module: torch.fx.GraphModule) -> int:
    """Feed padding its float input instead of the int8 round trip.

    XNNPACK pads float32 tensors only, yet when a dequantize feeds a pad
    (``aten.pad``, or ``im2col``, which becomes one), ExecuTorch hands the
    pad the int8 tensor, and XNNPACK refuses the program when it loads
    (``Failed to create StaticConstantPad node``: Swin-T's patch merging,
    whose input the quantizer rounds as it rounds the residual sum). The
    pad takes the tensor the quantize node rounded, and the operator after
    it still gets its own int8 input.

    Args:
        module (GraphModule): ``convert_pt2e``'s output, edited in place.

    Returns:
        int: The padding nodes changed.
    """
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    quantize = torch.ops.quantized_decomposed.quantize_per_tensor.default
    changed = 0
    for node in list(module.graph.nodes):
        if node.op != 'call_function' or node.target not in PADDING:
            continue
        source = node.args[0]
        if (isinstance(source, Node) and source.target == dequantize
                and isinstance(source.args[0], Node)
                and source.args[0].target == quantize):
            node.replace_input_with(source, source.args[0].args[0])
            changed += 1
    if changed:
        module.graph.eliminate_dead_code()
        module.graph.lint()
        module.recompile()
    return changed


def check_float_parts(float_parts: Sequence[str]) -> None:
    """Check that each name is a part of :data:`PARTS`.

    Raises:
        ValueError: A name that is not a key of :data:`PARTS`.
    """
    unknown = sorted(set(float_parts) - set(PARTS))
    if unknown:
        raise ValueError(f'unknown float parts {unknown}; the parts are '
                         f'{sorted(PARTS)}')


def xnnpack_quantizer(float_parts: Sequence[str] = ()) -> Quantizer:
    """ExecuTorch's XNNPACK quantizer, static int8 with per-channel
    weights, leaving ``float_parts`` (keys of :data:`PARTS`) in float.

    Raises:
        ValueError: An unknown part name.
    """
    check_float_parts(float_parts)
    xnnpack = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True))
    return ComposableQuantizer(
        [FloatPartsMarker([PARTS[name] for name in float_parts]), xnnpack])


def quantization_counts(graph: torch.fx.Graph) -> Tuple[Counter, Counter]:
    """``(quantized, float_ops)`` by operator name over a prepared or
    converted graph: the operators of the kinds the XNNPACK quantizer takes,
    split by whether it gave them int8 inputs."""
    quantized, float_ops = Counter(), Counter()
    for node in graph.nodes:
        if node.op != 'call_function' or node.target not in QUANTIZABLE:
            continue
        annotation = node.meta.get(ANNOTATION_KEY)
        name = node.target.overloadpacket.__name__
        if annotation is not None and annotation.input_qspec_map:
            quantized[name] += 1
        else:
            float_ops[name] += 1
    return quantized, float_ops


def prepare_and_calibrate(program: torch.export.ExportedProgram,
                          calibration: Sequence[Tuple],
                          float_parts: Sequence[str] = ()
                          ) -> torch.fx.GraphModule:
    """The program with int8 quantize / dequantize pairs, its scales fixed
    by ``calibration``: runs in eager PyTorch with int8's rounding.

    Args:
        program (ExportedProgram): Float32, our operators already in their
            export forms.
        calibration (Sequence[tuple]): Argument tuples, e.g. from
            :func:`mmlaplacian.deployment.calibration.calibration_inputs`.
        float_parts (Sequence[str]): Parts left in float (:data:`PARTS`).

    Returns:
        GraphModule: The converted module (``convert_pt2e``'s output).

    Raises:
        ValueError: No calibration inputs, or an unknown part name.
    """
    if not calibration:
        raise ValueError('static int8 needs calibration inputs (a list of '
                         'argument tuples); got none')
    prepared = prepare_pt2e(unshare_weights(program.module()),
                            xnnpack_quantizer(float_parts))
    with torch.no_grad():
        for args in calibration:
            prepared(*args)
    converted = convert_pt2e(prepared)
    float_padding_inputs(converted)
    return converted


def quantize_program(program: torch.export.ExportedProgram,
                     example_args: Tuple,
                     calibration: Sequence[Tuple],
                     float_parts: Sequence[str] = ()
                     ) -> Tuple[torch.export.ExportedProgram,
                                Tuple[Counter, Counter]]:
    """Static int8 of ``program`` for the XNNPACK partitioner.

    Args:
        program (ExportedProgram): Float32, our operators already in their
            export forms.
        example_args (tuple): The arguments the program was exported with.
        calibration (Sequence[tuple]): Argument tuples run to fix the
            activation scales.
        float_parts (Sequence[str]): Parts left in float (:data:`PARTS`).

    Returns:
        tuple: The quantized program, and ``(quantized, float_ops)``
        operator counts (:func:`quantization_counts`).

    Raises:
        ValueError: No calibration inputs, or an unknown part name.
    """
    converted = prepare_and_calibrate(program, calibration, float_parts)
    counts = quantization_counts(converted.graph)
    with torch.no_grad():
        quantized = torch.export.export(converted, tuple(example_args))
    return quantized, counts


__all__ = [
    'FloatPartsMarker', 'PADDING', 'PARTS', 'check_float_parts',
    'float_padding_inputs', 'prepare_and_calibrate', 'quantization_counts',
    'quantize_program', 'unshare_weights', 'xnnpack_quantizer'
]
