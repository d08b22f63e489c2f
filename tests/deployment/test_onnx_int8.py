"""int8 ONNX graphs from onnxruntime's static quantization (QDQ): the Tiny
backbone's graph runs in onnxruntime with its weight layers in int8 and its
attention arithmetic in float, and agrees with the fp32 graph; the export
tool writes both graphs for a detector and a segmentor, and names a bad
calibration folder."""
import os.path as osp

import numpy as np
import pytest
import torch
from detection_utils import run_tool, tool_env

from mmlaplacian import LaplacianFormer
from mmlaplacian.deployment import (BackboneForExport, export_onnx, ort_run,
                                    ort_session)
from mmlaplacian.deployment.calibration import calibration_inputs
from mmlaplacian.deployment.onnx_quantization import (QUANTIZED_OP_TYPES,
                                                      output_cosines,
                                                      quantize_onnx)
from mmlaplacian.synthetic_data.instances import make_synthetic_coco
from mmlaplacian.synthetic_data.label_maps import make_synthetic_seg

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')

TOOL = 'tools/deployment/export_onnx.py'
MASK_RCNN = 'tests/detection/configs/mask_rcnn_synthetic.py'
SEM_FPN = 'tests/segmentation/configs/sem_fpn_synthetic.py'
SHAPE = (128, 128)
# Worst cosine of a feature map to fp32 over the 4 test images. Measured
# here (Tiny backbone, random weights, 128x128, 8 calibration images):
# 0.9976 to 0.9988 by stage with the attention's products in float; with
# them in int8, 0.98 at stage 1 and 0.78 to 0.83 at stages 2-4.
COSINE_FLOOR = 0.99
INT8_PRODUCTS_CEILING = 0.95
# The Tiny backbone's products of two activations: 6 Laplacian attentions
# (depths 1, 2, 3 of stages 1-3), each with 20 Newton-Schulz steps of two
# products, Kkᵀ·V, X·(Kkᵀ·V / N), (μ·s)·C and Kq·weights; 2 softmax
# attentions (stage 4), each with QKᵀ and AV.
TINY_PRODUCTS = 6 * (20 * 2 + 4) + 2 * 2


@pytest.fixture(scope='module')
def synthetic_coco(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp('synthetic_coco'))
    make_synthetic_coco(root, num_train=8, num_val=4, image_size=128, seed=0)
    return root


@pytest.fixture(scope='module')
def tiny_graphs(tmp_path_factory, synthetic_coco):
    """The Tiny backbone's fp32 graph at 128x128 (random weights) and its
    int8 graph, calibrated on the 8 synthetic training images."""
    torch.manual_seed(0)
    backbone = BackboneForExport(LaplacianFormer('tiny',
                                                 drop_path_rate=0.)).eval()
    folder = tmp_path_factory.mktemp('tiny')
    fp32, int8 = str(folder / 'tiny.onnx'), str(folder / 'tiny.int8.onnx')
    calibration = calibration_inputs(osp.join(synthetic_coco, 'train'),
                                     SHAPE, normalize=True)
    export_onnx(backbone, calibration[0][0], fp32,
                output_names=backbone.output_names)
    result = quantize_onnx(fp32, int8, calibration)
    return fp32, int8, result


def val_inputs(synthetic_coco):
    return calibration_inputs(osp.join(synthetic_coco, 'val'), SHAPE,
                              normalize=True)


def worst_cosines(fp32: str, int8: str, inputs) -> np.ndarray:
    reference, quantized = ort_session(fp32), ort_session(int8)
    return np.min([
        output_cosines(ort_run(reference, image), ort_run(quantized, image))
        for image, in inputs
    ], axis=0)


def dequantized_inputs(model) -> dict:
    """``node name -> how many of its first two inputs come from a
    DequantizeLinear``."""
    dequantized = {
        out
        for node in model.graph.node if node.op_type == 'DequantizeLinear'
        for out in node.output
    }
    return {
        node.name: sum(name in dequantized for name in node.input[:2])
        for node in model.graph.node
    }


def test_weight_layers_run_in_int8_and_attention_products_in_float(
        tiny_graphs):
    _, int8, result = tiny_graphs
    model = onnx.load(int8)
    assert {node.domain for node in model.graph.node} <= {'', 'ai.onnx'}
    ops = [node.op_type for node in model.graph.node]
    assert 'QuantizeLinear' in ops and 'DequantizeLinear' in ops
    fed = dequantized_inputs(model)
    weight_layers = [
        node for node in model.graph.node
        if node.op_type in QUANTIZED_OP_TYPES and node.op_type != 'MatMul'
    ]
    # Every Conv and Gemm (the Linear layers) takes int8 data and weights.
    assert weight_layers and all(fed[node.name] == 2
                                 for node in weight_layers)
    assert result.quantized == {
        'Conv': sum(n.op_type == 'Conv' for n in weight_layers),
        'Gemm': sum(n.op_type == 'Gemm' for n in weight_layers)
    }
    # The remaining MatMuls multiply two activations, in float.
    products = [node for node in model.graph.node if node.op_type == 'MatMul']
    assert len(products) == len(result.kept_float) == TINY_PRODUCTS
    assert all(fed[node.name] == 0 for node in products)


def test_int8_graph_agrees_with_fp32_above_the_measured_floor(
        tiny_graphs, synthetic_coco):
    fp32, int8, _ = tiny_graphs
    cosines = worst_cosines(fp32, int8, val_inputs(synthetic_coco))
    assert cosines.min() >= COSINE_FLOOR, cosines


def test_int8_attention_products_cost_accuracy(tiny_graphs, synthetic_coco,
                                               tmp_path):
    """Why the products stay in float: the Newton-Schulz iterates and the
    attention's products in int8 lose most of the agreement."""
    fp32, _, _ = tiny_graphs
    all_int8 = str(tmp_path / 'all_int8.onnx')
    calibration = calibration_inputs(osp.join(synthetic_coco, 'train'),
                                     SHAPE, normalize=True)
    result = quantize_onnx(fp32, all_int8, calibration, float_products=False)
    assert result.kept_float == []
    cosines = worst_cosines(fp32, all_int8, val_inputs(synthetic_coco))
    assert cosines.min() < INT8_PRODUCTS_CEILING, cosines


def test_calibration_of_another_shape_is_refused(tmp_path):
    fp32 = str(tmp_path / 'conv.onnx')
    export_onnx(torch.nn.Conv2d(3, 8, 3).eval(), torch.rand(1, 3, 32, 32),
                fp32)
    with pytest.raises(ValueError, match=r'\(1, 3, 64, 64\).*\(1, 3, 32, 32'):
        quantize_onnx(fp32, str(tmp_path / 'x.onnx'),
                      [(torch.zeros(1, 3, 64, 64), )])
    with pytest.raises(ValueError, match='no calibration inputs'):
        quantize_onnx(fp32, str(tmp_path / 'x.onnx'), [])


def test_folding_keeps_no_type_of_a_value_it_removed(tmp_path):
    """The types of values folding removed are dropped, the live ones
    inferred again. The quantizer may name a new value (a bias copied for a
    second convolution) as a removed one was: with that value's stale
    int64 type, onnxruntime refused the quick-start Mask R-CNN's int8 graph
    (``Type (tensor(int64)) of output arg ... does not match``)."""
    from onnx import TensorProto, helper

    from mmlaplacian.deployment.onnx_quantization import _fold_constants

    def constant(name: str, value: int):
        return helper.make_node('Constant', [], [name],
                                value=helper.make_tensor(
                                    name, TensorProto.INT64, [1], [value]))

    # A shape built from constants, as the exporter builds them.
    graph = helper.make_graph(
        [constant('head', 1), constant('tail', 48),
         helper.make_node('Concat', ['head', 'tail'], ['shape'], axis=0),
         helper.make_node('Reshape', ['x', 'shape'], ['y'])], 'reshape',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 48])])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]))
    assert {'head', 'tail'} <= {v.name for v in model.graph.value_info}
    fp32, folded = str(tmp_path / 'fp32.onnx'), str(tmp_path / 'folded.onnx')
    onnx.save(model, fp32)
    _fold_constants(fp32, folded)
    folded = onnx.load(folded)
    assert [node.op_type for node in folded.graph.node] == ['Reshape']
    assert not {'head', 'tail'} & {v.name for v in folded.graph.value_info}


@pytest.mark.slow
def test_tool_writes_the_fp32_and_int8_detector_graphs(
        tmp_path, synthetic_coco):
    """The whole Mask R-CNN graph, calibrated on the config's training
    images (the default folder): the dense layers in int8, the
    postprocessing in float."""
    out = tmp_path / 'mask_rcnn.onnx'
    proc = run_tool([
        TOOL, MASK_RCNN, '--shape', '128', '128', '--out',
        str(out), '--quantize', 'int8', '--calibration-count', '4'
    ], env=tool_env(SYNTHETIC_COCO=synthetic_coco))
    int8 = tmp_path / 'mask_rcnn.int8.onnx'
    assert out.is_file() and int8.is_file(), proc.stdout
    assert f'calibrated on 4 images of {synthetic_coco}' in proc.stdout
    assert 'int8 against fp32 on 4 calibration images' in proc.stdout
    model = onnx.load(str(int8))
    producers = {out: node.op_type for node in model.graph.node
                 for out in node.output}
    quantized = {name for node in model.graph.node
                 if node.op_type == 'QuantizeLinear' for name in node.input}
    postprocessing = [
        node for node in model.graph.node
        if node.op_type in ('NonMaxSuppression', 'RoiAlign', 'TopK')
    ]
    assert {node.op_type for node in postprocessing} == {
        'NonMaxSuppression', 'RoiAlign', 'TopK'}
    for node in postprocessing:
        # Float scores and boxes in, float out. RoI Align pools the FPN's
        # maps, which leave the FPN's int8 convolutions dequantized.
        data = node.input[1:] if node.op_type == 'RoiAlign' else node.input
        assert all(producers.get(name) != 'DequantizeLinear'
                   for name in data), node.name
        assert not set(node.output) & quantized, node.name
    fed = dequantized_inputs(model)
    assert any(fed[node.name] == 2 for node in model.graph.node
               if node.op_type == 'ConvTranspose')  # the mask head


@pytest.mark.slow
def test_tool_writes_the_fp32_and_int8_segmentor_graphs(tmp_path):
    data = str(tmp_path / 'synthetic_seg')
    make_synthetic_seg(data, num_train=4, num_val=2, image_size=64, seed=0)
    out = tmp_path / 'sem_fpn.onnx'
    proc = run_tool([
        TOOL, SEM_FPN, '--shape', '64', '64', '--out',
        str(out), '--quantize', 'int8', '--calibration-images',
        osp.join(data, 'img_dir', 'train')
    ])
    assert out.is_file() and (tmp_path / 'sem_fpn.int8.onnx').is_file()
    assert 'onnxruntime outputs: logits (1, 5, 64, 64)' in proc.stdout
    assert 'same label at' in proc.stdout, proc.stdout


def test_bad_calibration_folder_is_named_before_the_export(tmp_path):
    missing = str(tmp_path / 'no_such_folder')
    proc = run_tool([
        TOOL, MASK_RCNN, '--backbone-only', '--shape', '128', '128', '--out',
        str(tmp_path / 'x.onnx'), '--quantize', 'int8',
        '--calibration-images', missing
    ], expect_success=False)
    assert proc.returncode != 0
    assert missing in proc.stdout and 'not a directory' in proc.stdout
    assert not (tmp_path / 'x.onnx').exists()
