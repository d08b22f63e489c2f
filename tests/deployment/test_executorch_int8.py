"""Static int8 ExecuTorch programs (PyTorch's PT2E flow, ExecuTorch's
XNNPACK quantizer, per-channel weights), calibrated on synthetic-shapes
images, run in ExecuTorch's runtime and compared with eager float32: the
backbone alone, and RetinaNet and Mask R-CNN run by ExecuTorchDetector.
Skipped where executorch is not installed."""
import os.path as osp
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch

pytest.importorskip('executorch')

from detection_utils import run_tool  # noqa: E402

from mmengine.config import Config  # noqa: E402

from mmlaplacian import LaplacianFormer  # noqa: E402
from mmlaplacian.deployment import (  # noqa: E402
    BackboneForExport, Detections, ExecuTorchDetector,
    build_exportable_detector, export_detector_executorch, load_detector)
from mmlaplacian.deployment.calibration import (  # noqa: E402
    calibration_inputs, image_files, load_bgr)
from mmlaplacian.deployment.executorch_export import (  # noqa: E402
    export_executorch, run_executorch)
from mmlaplacian.synthetic_data.instances import \
    make_synthetic_coco  # noqa: E402

from benchmarks.onnx_compare import compare_detections  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# The test configs' detectors (narrow LaplacianFormer, 128-pixel images);
# RetinaNet with its classifier initialised to spread the scores.
MASK_RCNN = 'tests/detection/configs/mask_rcnn_synthetic.py'
RETINANET = 'tests/deployment/configs/retinanet_spread_scores.py'
DETECTOR_SHAPE = (128, 128)
# RetinaNet's head initialised at trained scales (the RetinaNet test says
# why): He's std for its 64 x 3 x 3 convolutions, box deltas of about 0.3.
RETINANET_INIT = {
    'model.bbox_head.init_cfg':
    dict(type='Normal', layer='Conv2d', std=0.06, override=[
        dict(type='Normal', name='retina_cls', std=0.02, bias_prob=0.05),
        dict(type='Normal', name='retina_reg', std=0.005)
    ])
}
# The float32 detections int8 is asked to find.
CONFIDENT_SCORE = 0.3


def correlation(got: torch.Tensor, expected: torch.Tensor) -> float:
    pair = torch.stack([got.flatten().double(), expected.flatten().double()])
    return float(torch.corrcoef(pair)[0, 1])


@pytest.fixture(scope='module')
def shapes_images(tmp_path_factory) -> str:
    """Synthetic-shapes scenes: 12 train and 4 val images of 128 pixels."""
    root = str(tmp_path_factory.mktemp('synthetic_coco'))
    make_synthetic_coco(root, num_train=12, num_val=4, image_size=128,
                        seed=0)
    return root


def test_int8_arguments_are_checked_before_any_export(tmp_path):
    """Static int8 fixes every scale from calibration inputs: without them
    the export stops before any work, naming the method; so do an unknown
    mode, an unknown float part and float parts without int8."""
    module = BackboneForExport(LaplacianFormer('tiny').eval())
    image = torch.rand(1, 3, 64, 64)
    with pytest.raises(ValueError, match="calibration inputs for method "
                       "'forward'"):
        export_executorch(module, image, str(tmp_path / 'x.pte'),
                          quantize='int8')
    with pytest.raises(ValueError, match="for method 'second'"):
        export_executorch({'first': (module, (image, )),
                           'second': (module, (image, ))},
                          None, str(tmp_path / 'x.pte'), quantize='int8',
                          calibration={'first': [(image, )]})
    with pytest.raises(ValueError, match="quantize must be one of"):
        export_executorch(module, image, str(tmp_path / 'x.pte'),
                          quantize='int4')
    with pytest.raises(ValueError, match=r"unknown float parts \['ffn'\]"):
        export_executorch(module, image, str(tmp_path / 'x.pte'),
                          quantize='int8', calibration=[(image, )],
                          float_parts=('ffn', ))
    with pytest.raises(ValueError, match="float_parts is for"):
        export_executorch(module, image, str(tmp_path / 'x.pte'),
                          float_parts=('laplace-kernel', ))


def test_float_parts_leave_exactly_their_operators_in_float():
    """A LaplacianAttention on 24x24 tokens: with no part named, every
    operator the quantizer takes is int8, the Laplacian kernel's ``cat`` of
    its row blocks included; each part named keeps its own operators in
    float32 (the ``cat`` too, which the quantizer's filter function does
    not reach), and the projections stay int8 throughout."""
    from mmlaplacian.deployment.pt2e_quantization import (
        PARTS, prepare_and_calibrate, quantization_counts)
    from mmlaplacian.models.layers import LaplacianAttention
    from mmlaplacian.ops import export_decompositions
    torch.manual_seed(0)
    args = (torch.randn(1, 576, 64), (24, 24))
    with torch.no_grad():
        program = torch.export.export(
            LaplacianAttention(64, num_heads=2).eval(),
            args).run_decompositions(export_decompositions())

    def counts(parts):
        converted = prepare_and_calibrate(program, [args], parts)
        return tuple(map(dict, quantization_counts(converted.graph)))

    projections = {'linear': 3, 'conv2d': 1}
    quantized, float_ops = counts(())
    assert float_ops == {} and quantized['cat'] == 1, quantized
    without_cat = {op: n for op, n in quantized.items() if op != 'cat'}
    assert counts(('laplace-kernel', )) == (without_cat, {'cat': 1})
    # The products of the symmetry test and of the start's scaling.
    assert counts(('newton-schulz', ))[1] == {'mul': 2}
    # The local context's depthwise convolution.
    assert counts(('depthwise-convolution', ))[1] == {'conv2d': 1}
    assert counts(tuple(PARTS)) == ({'linear': projections['linear']}, {
        'adaptive_avg_pool2d': 1, 'mul': 7, 'add': 3, 'cat': 1, 'conv2d': 1})


class SharedHead(torch.nn.Module):
    """One convolution applied to two maps, as a detector head runs on
    each FPN level."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, fine: torch.Tensor, coarse: torch.Tensor):
        return self.conv(fine), self.conv(coarse)


def test_a_weight_shared_by_two_convolutions_is_int8_in_both(tmp_path):
    """Each use of a shared convolution is quantized, on its own input's
    scale (the coarse map's values are 10x the fine one's); the program
    loads and both outputs follow eager float32."""
    from mmlaplacian.deployment.pt2e_quantization import (
        prepare_and_calibrate, quantization_counts)
    torch.manual_seed(0)
    head = SharedHead().eval()
    args = (torch.randn(1, 16, 16, 16), 10 * torch.randn(1, 16, 4, 4))
    with torch.no_grad():
        program = torch.export.export(head, args)
    quantized, float_ops = quantization_counts(
        prepare_and_calibrate(program, [args]).graph)
    assert dict(quantized) == {'conv2d': 2} and not float_ops, (quantized,
                                                               float_ops)
    path = str(tmp_path / 'shared.pte')
    export_executorch(head, args, path, quantize='int8', calibration=[args])
    with torch.no_grad():
        expected = head(*args)
    for got, ref in zip(run_executorch(path, list(args)), expected):
        assert correlation(got, ref) >= 0.999


class PatchMerging(torch.nn.Module):
    """Swin's patch merging after a residual sum: the quantizer rounds the
    sum, and the padding and ``unfold`` that follow read it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.reduction = torch.nn.Linear(64, 32)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens + self.fc(tokens)  # (B, H*W, C), H = W = 7
        grid = tokens.view(1, 7, 7, 16).permute(0, 3, 1, 2)
        grid = torch.nn.functional.pad(grid, (0, 1, 0, 1))
        patches = torch.nn.functional.unfold(grid, 2, stride=2)
        return self.reduction(patches.transpose(1, 2))


def test_padding_after_an_int8_sum_loads_in_xnnpack(tmp_path):
    """XNNPACK refused such a program when it loaded (``Failed to create
    StaticConstantPad node``): the pad and ``unfold`` now read float32, and
    the program loads and follows eager float32."""
    from mmlaplacian.deployment.pt2e_quantization import (
        PADDING, prepare_and_calibrate)
    torch.manual_seed(0)
    merging = PatchMerging().eval()
    args = (torch.randn(1, 49, 16), )
    with torch.no_grad():
        program = torch.export.export(merging, args)
    converted = prepare_and_calibrate(program, [args])
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    pads = [n for n in converted.graph.nodes if n.target in PADDING]
    assert len(pads) == 2, pads  # the pad and unfold's im2col
    assert all(pad.args[0].target != dequantize for pad in pads)
    path = str(tmp_path / 'merging.pte')
    export_executorch(merging, args, path, quantize='int8',
                      calibration=[args])
    with torch.no_grad():
        expected = merging(*args)
    got, = run_executorch(path, list(args))
    assert correlation(got, expected) >= 0.99


def test_tool_writes_an_int8_backbone_program_tracking_float32(
        tmp_path, shapes_images):
    """``export_executorch.py --quantize int8`` as a user runs it, on
    LaplacianFormer-T weights at 96x96, calibrated on 8 scenes: its
    linear layers and convolutions run in int8 XNNPACK delegates, none of
    our operators is left to the portable kernels, and the program, run
    here on 4 unseen scenes, gives feature maps that correlate with eager
    float32's."""
    torch.manual_seed(0)
    backbone = LaplacianFormer('tiny', drop_path_rate=0.).eval()
    weights = tmp_path / 'lf_t.pth'
    torch.save({'state_dict': backbone.state_dict()}, weights)
    program = tmp_path / 'lf_t_int8.pte'
    proc = run_tool([
        'tools/deployment/export_executorch.py', '--arch', 'tiny',
        '--checkpoint',
        str(weights), '--shape', '96', '96', '--quantize', 'int8',
        '--calibration-images',
        osp.join(shapes_images, 'train'), '--calibration-count', '8',
        '--out',
        str(program)
    ])
    printed = proc.stdout
    assert int(re.search(r'XNNPACK subgraphs \((\d+) int8\)', printed)[1]) > 0
    int8 = re.search(r'^int8: (.*)$', printed, re.M)[1]
    assert re.search(r'linear x\d+', int8) and re.search(r'conv2d x\d+',
                                                         int8), int8
    # The attention's depthwise convolutions, left in float32 by default.
    assert re.search(r'^left in float32: conv2d x\d+$', printed, re.M), printed
    portable = re.search(r'left to the portable kernels: (.*)', printed)[1]
    assert 'mmlaplacian' not in portable, portable
    # The tool's own check: 4 further images of the folder.
    found = re.findall(r'output \d: correlation ([\d.]+) over 4 images',
                       printed)
    assert len(found) == 4, printed

    module = BackboneForExport(backbone)
    check = calibration_inputs(osp.join(shapes_images, 'val'), (96, 96), 4,
                               normalize=True)
    with torch.no_grad():
        pairs = [(run_executorch(str(program), [image]), module(image))
                 for (image, ) in check]
    for level in range(4):
        corr = correlation(
            torch.cat([got[level].flatten() for got, _ in pairs]),
            torch.cat([ref[level].flatten() for _, ref in pairs]))
        # Measured: 0.99941, 0.99890, 0.99806, 0.99775 (feat0 to feat3).
        assert corr >= 0.99, (level, corr)


@pytest.mark.parametrize('args, message', [
    (['--quantize', 'int8', '--float-parts', 'ffn'],
     r"unknown float parts \['ffn'\]; the parts are .*depthwise-convolution"),
    (['--float-parts', 'laplace-kernel'], '--float-parts is for --quantize'),
])
def test_tool_names_bad_float_parts_before_any_work(tmp_path, args,
                                                    message):
    proc = run_tool(['tools/deployment/export_executorch.py', '--out',
                     str(tmp_path / 'x.pte')] + args, expect_success=False)
    assert proc.returncode == 2
    assert re.search(message, proc.stdout), proc.stdout
    assert not (tmp_path / 'x.pte').exists()


def test_tool_names_a_missing_calibration_folder(tmp_path):
    proc = run_tool([
        'tools/deployment/export_executorch.py', '--shape', '96', '96',
        '--quantize', 'int8', '--calibration-images',
        str(tmp_path / 'nowhere'), '--out',
        str(tmp_path / 'x.pte')
    ], expect_success=False)
    assert proc.returncode != 0
    assert 'nowhere' in proc.stdout and 'is not a directory' in proc.stdout


def int8_detector(config: str, shapes_images: str, out: str,
                  options: Optional[dict] = None):
    """The detector of ``config`` (with ``options`` merged) with seeded
    random weights, and its int8 programs at 128x128 calibrated on 8
    training scenes."""
    cfg = Config.fromfile(config)
    cfg.merge_from_dict(options or {})
    torch.manual_seed(0)
    detector = load_detector(cfg)
    calibration = calibration_inputs(osp.join(shapes_images, 'train'),
                                     DETECTOR_SHAPE, 8)
    programs = export_detector_executorch(detector, DETECTOR_SHAPE, out,
                                          quantize='int8',
                                          calibration=calibration)
    return cfg, detector, programs


def val_batch(shapes_images: str) -> dict:
    """The 4 unseen scenes as a dataloader batch (128 pixels: the test
    pipeline leaves them as they are)."""
    from mmdet.structures import DetDataSample
    images = [load_bgr(path)
              for path in image_files(osp.join(shapes_images, 'val'))]
    return dict(inputs=images, data_samples=[
        DetDataSample(metainfo=dict(img_shape=tuple(i.shape[-2:]),
                                    ori_shape=tuple(i.shape[-2:]),
                                    scale_factor=(1., 1.)))
        for i in images
    ])


def confident(detections: Detections) -> Detections:
    """The detections scored at least ``CONFIDENT_SCORE``."""
    keep = detections.scores >= CONFIDENT_SCORE
    return Detections(detections.boxes[keep], detections.scores[keep],
                      detections.labels[keep],
                      None if detections.masks is None else
                      detections.masks[keep])


def int8_agreement(
        cfg, detector, programs,
        shapes_images: str) -> Tuple[Dict[str, float], float, List[float]]:
    """On the unseen scenes: the correlation of the int8 dense program's
    outputs with eager float32's, by kind (the FPN maps, the classification
    maps, the box maps; each over all levels), the share of mmdet's
    float32 confident detections that ``ExecuTorchDetector.test_step``
    finds (same label, IoU >= 0.9), and the mask IoU of each one found
    (Mask R-CNN)."""
    runner = ExecuTorchDetector(cfg, **programs.paths)
    dense = build_exportable_detector(detector).eval().dense
    batch = val_batch(shapes_images)
    with torch.no_grad():
        pairs = [[dense.split(outputs) for outputs in
                  (runner.dense(runner.pad(image)), dense(runner.pad(image)))]
                 for image in batch['inputs']]
        reference = detector.test_step(batch)
    correlations = {}
    for index, kind in enumerate(('features', 'cls_scores', 'bbox_preds')):
        if pairs[0][1][index]:
            correlations[kind] = correlation(*(
                torch.cat([m.flatten() for pair in pairs
                           for m in pair[side][index]]) for side in (0, 1)))
    found = total = 0
    mask_ious: List[float] = []
    for got, ref in zip(runner.test_step(batch), reference):
        expected = confident(Detections.from_instances(ref.pred_instances))
        comparison = compare_detections(
            Detections.from_instances(got.pred_instances), expected)
        found, total = found + comparison.matched, total + len(
            expected.scores)
        mask_ious += comparison.mask_ious
    assert total > 0, 'no confident float32 detection to compare'
    return correlations, found / total, mask_ious


def assert_int8_lowering(result) -> None:
    """Every operator the quantizer takes is int8 inside XNNPACK (the heads
    shared by the FPN levels included), but for the backbone's depthwise
    convolutions, which int8 leaves in float32 by default."""
    assert result.int8_delegates > 0
    assert result.quantized['conv2d'] > 0 and set(result.float_ops) <= {
        'conv2d'
    }, (result.quantized, result.float_ops)
    assert not any('quantize' in op for op in result.portable_ops), (
        result.portable_ops)


def test_int8_retinanet_runs_in_executorch_detector(tmp_path, shapes_images):
    """RetinaNet's dense part in int8, the head's convolutions (shared by
    the five levels) included: it loads and runs through
    ExecuTorchDetector, its maps correlate with eager float32's and it
    finds most of mmdet's confident detections.

    The head's convolutions start at std 0.06 (He's scale for 64 x 3 x 3
    inputs) instead of RetinaNet's 0.01, which shrinks the signal four
    times by 0.24 until the coarse levels' maps are their bias plus
    variations of 1e-5, below any 8-bit resolution; a trained head keeps
    its signal. The classifier's and the box layer's stds are lowered to
    match: scores that spread without saturating, and box deltas of about
    0.3 rather than 3 (exp(3) times an anchor)."""
    cfg, detector, programs = int8_detector(
        RETINANET, shapes_images, str(tmp_path / 'retinanet.pte'),
        RETINANET_INIT)
    assert set(programs.paths) == {'dense'}
    assert_int8_lowering(programs.dense)
    correlations, found, _ = int8_agreement(cfg, detector, programs,
                                            shapes_images)
    # Measured: 0.99810 (classification), 0.99803 (boxes); 0.864 found.
    assert min(correlations.values()) >= 0.99, correlations
    assert found >= 0.6, found


def test_int8_mask_rcnn_two_programs_run_in_executorch_detector(
        tmp_path, shapes_images):
    """Mask R-CNN's dense program (backbone, FPN, the RPN shared by the
    levels) and its RoI heads in int8: both load and run through
    ExecuTorchDetector; the FPN and RPN maps correlate with eager
    float32's, and it finds most of mmdet's confident detections."""
    cfg, detector, programs = int8_detector(MASK_RCNN, shapes_images,
                                            str(tmp_path / 'mask_rcnn.pte'))
    assert set(programs.paths) == {'dense', 'roi_heads'}
    assert set(programs.roi_heads.methods) == {'bbox_head', 'mask_head'}
    for result in programs.results:
        assert_int8_lowering(result)
    correlations, found, mask_ious = int8_agreement(cfg, detector, programs,
                                                    shapes_images)
    # Measured: 0.99866 (FPN maps), 0.99864 (RPN classification), 0.99852
    # (RPN boxes); 0.750 found, their masks at mean IoU 0.97.
    assert min(correlations.values()) >= 0.99, correlations
    assert found >= 0.6, found
    assert mask_ious and np.mean(mask_ious) >= 0.9, mask_ious
