"""Static int8 quantization of an exported ONNX graph with onnxruntime (QDQ).

:func:`quantize_onnx` turns the fp32 graph of :func:`~mmlaplacian.deployment.
export_onnx` into a QDQ graph: ``QuantizeLinear``/``DequantizeLinear`` pairs
around the layers with weights (``Conv``, ``ConvTranspose``, and ``Gemm`` or
``MatMul`` for a ``Linear``), int8 weights per output channel (symmetric)
and int8 activations whose scales are fixed by running calibration inputs
through the graph. onnxruntime fuses each pair into its int8 kernels when it
loads the file; the graph holds standard operators only.

What stays in float, and why:

* everything but the weight layers: the Laplacian kernel (``Sub``, ``Abs``,
  ``ReduceSum``, ``Exp``), the whitening, normalisations, softmax and the
  detectors' postprocessing (``TopK``, ``NonMaxSuppression``, ``RoiAlign``,
  ``Gather``, ``ScatterElements``...), whose indices and thresholds int8
  would move;
* the products of two activations (a ``MatMul`` whose second input is no
  weight): the Newton-Schulz iteration, the attention's products with the
  kernel matrices and the softmax attention's ``QKᵀ`` and ``AV``. The
  Newton-Schulz iterates converge to the inverse of the landmark kernel
  matrix, and an int8 rounding of each iterate compounds over the 20 steps;
  the kernel matrices' entries span a wide range. In int8 these products
  cost several times the accuracy everything else does (the measurements:
  docs/deployment.md, "int8 (onnxruntime static QDQ)").
"""
from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

# The layers with weights: what int8 speeds up, and what it costs little.
QUANTIZED_OP_TYPES = ('Conv', 'ConvTranspose', 'Gemm', 'MatMul')


@dataclass
class QuantizationResult:
    """What :func:`quantize_onnx` produced.

    Attributes:
        path (str): The int8 ``.onnx`` file.
        seconds (float): Pre-processing, calibration and quantization time.
        quantized (dict): ``op_type -> count`` of the nodes that run in int8
            (their inputs come from ``DequantizeLinear``).
        kept_float (list[str]): Names of the ``MatMul`` nodes left in
            float: the products of two activations.
        calibration_inputs (int): How many inputs calibrated the scales.
    """
    path: str
    seconds: float
    quantized: Dict[str, int] = field(default_factory=dict)
    kept_float: List[str] = field(default_factory=list)
    calibration_inputs: int = 0


def _calibration_reader(input_name: str,
                        calibration: Sequence[Tuple[torch.Tensor]]):
    """An onnxruntime ``CalibrationDataReader`` over ``(image,)`` tuples."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):

        def __init__(self) -> None:
            self.inputs = iter(calibration)

        def get_next(self) -> Optional[Dict[str, np.ndarray]]:
            args = next(self.inputs, None)
            if args is None:
                return None
            return {input_name: args[0].detach().cpu().numpy()}

    return Reader()


def activation_products(model) -> List[str]:
    """Names of the ``MatMul`` nodes of ``model`` (an ``onnx.ModelProto``)
    whose second input is not a constant: products of two activations."""
    constants = {init.name for init in model.graph.initializer}
    constants.update(out for node in model.graph.node
                     if node.op_type == 'Constant' for out in node.output)
    return [
        node.name for node in model.graph.node
        if node.op_type == 'MatMul' and node.input[1] not in constants
    ]


def _fold_constants(fp32_path: str, out_path: str) -> None:
    """Constant folding, then onnxruntime's basic graph optimizations, then
    ONNX shape inference; the result goes to ``out_path``.

    This is ``onnxruntime.quantization.quant_pre_process`` without its
    symbolic shape inference, which fails on the exporter's graphs (their
    sizes are static: ONNX's own inference suffices), and with onnxscript's
    constant folding first: onnxruntime cannot fold ``CastLike``, through
    which the exporter builds the zero bias of a convolution without one,
    and a bias that is no initializer keeps the convolution out of
    onnxruntime's int8 kernels. Folding also turns the transposed
    ``Linear`` weights into initializers, so their ``MatMul`` gets
    per-channel int8 weights.
    """
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization.quant_utils import add_pre_process_metadata
    from onnxscript import ir
    from onnxscript.optimizer import fold_constants

    model = ir.load(fp32_path)
    fold_constants(model)
    ir.save(model, out_path)
    options = ort.SessionOptions()
    options.graph_optimization_level = \
        ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = out_path
    options.log_severity_level = 3  # no notes on the nodes it cannot fold
    ort.InferenceSession(out_path, options, providers=['CPUExecutionProvider'])
    folded = onnx.load(out_path)
    # Folding leaves the types of the values it removed behind. Inferred
    # afresh: the quantizer may give a new value a removed one's name (a
    # bias copied for a second convolution), which a stale int64 type then
    # keeps onnxruntime from loading.
    del folded.graph.value_info[:]
    folded = onnx.shape_inference.infer_shapes(folded)
    add_pre_process_metadata(folded)  # what quantize_static checks for
    onnx.save(folded, out_path)


def _quantized_nodes(model) -> Dict[str, int]:
    """``op_type -> count`` of the compute nodes whose data and weight
    inputs both come from ``DequantizeLinear``."""
    dequantized = {
        out
        for node in model.graph.node if node.op_type == 'DequantizeLinear'
        for out in node.output
    }
    return dict(
        sorted(
            Counter(node.op_type for node in model.graph.node
                    if node.op_type in QUANTIZED_OP_TYPES and all(
                        name in dequantized
                        for name in node.input[:2])).items()))


def quantize_onnx(fp32_path: str,
                  int8_path: str,
                  calibration: Sequence[Tuple[torch.Tensor]],
                  float_products: bool = True) -> QuantizationResult:
    """Quantize an fp32 ONNX graph to int8 QDQ with onnxruntime's static
    quantization.

    Args:
        fp32_path (str): The fp32 graph (e.g. from ``export_onnx``), one
            input, static sizes.
        int8_path (str): Output ``.onnx`` file.
        calibration (sequence[tuple[Tensor]]): ``(image,)`` argument tuples
            with the graph's input shape, e.g. from
            :func:`mmlaplacian.deployment.calibration.calibration_inputs`
            (BGR 0-255 for a detector or segmentor graph, normalised for a
            backbone graph).
        float_products (bool): Leave the products of two activations
            (Newton-Schulz, the attention's products) in float. ``False``
            quantizes them too, at a large cost in accuracy (module
            docstring). Defaults to True.

    Returns:
        QuantizationResult: The file, the time, what runs in int8 and what
        was left in float.

    Raises:
        ValueError: ``calibration`` is empty, or one of its inputs does not
            have the graph's input shape.
    """
    import onnx
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    graph_input = onnx.load(fp32_path, load_external_data=False).graph.input[0]
    shape = tuple(d.dim_value or d.dim_param
                  for d in graph_input.type.tensor_type.shape.dim)
    if not calibration:
        raise ValueError('quantize_onnx: no calibration inputs')
    for args in calibration:
        if tuple(args[0].shape) != shape:
            raise ValueError(
                f'quantize_onnx: a calibration input has shape '
                f'{tuple(args[0].shape)}; the graph {fp32_path!r} takes '
                f'{graph_input.name!r} of shape {shape}')
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folded = os.path.join(tmp, 'folded.onnx')
        _fold_constants(fp32_path, folded)
        excluded = activation_products(
            onnx.load(folded)) if float_products else []
        quantize_static(
            folded,
            int8_path,
            _calibration_reader(graph_input.name, calibration),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(QUANTIZED_OP_TYPES),
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=excluded,
            calibrate_method=CalibrationMethod.MinMax)
    return QuantizationResult(int8_path, time.perf_counter() - start,
                              _quantized_nodes(onnx.load(int8_path)),
                              excluded, len(calibration))


def output_cosines(reference: Sequence[np.ndarray],
                   outputs: Sequence[np.ndarray]) -> List[float]:
    """Cosine similarity of each output with its reference (flattened,
    float64): 1 for identical maps, the agreement measure of an int8 graph
    with its fp32 one."""
    cosines = []
    for got, ref in zip(outputs, reference):
        got = np.asarray(got, dtype=np.float64).ravel()
        ref = np.asarray(ref, dtype=np.float64).ravel()
        norm = np.linalg.norm(got) * np.linalg.norm(ref)
        cosines.append(float(got @ ref / norm) if norm else float(
            np.array_equal(got, ref)))
    return cosines


__all__ = [
    'QUANTIZED_OP_TYPES', 'QuantizationResult', 'activation_products',
    'output_cosines', 'quantize_onnx'
]
