"""Static int8 ExecuTorch programs (PyTorch's PT2E flow, ExecuTorch's
XNNPACK quantizer, per-channel weights), calibrated on synthetic-shapes
images, run in ExecuTorch's runtime and compared with eager float32.
Skipped where executorch is not installed."""
import os.path as osp
import re

import pytest
import torch

pytest.importorskip('executorch')

from detection_utils import run_tool  # noqa: E402

from mmlaplacian import LaplacianFormer  # noqa: E402
from mmlaplacian.deployment import BackboneForExport  # noqa: E402
from mmlaplacian.deployment.calibration import calibration_inputs  # noqa
from mmlaplacian.deployment.executorch_export import (  # noqa: E402
    export_executorch, run_executorch)
from mmlaplacian.synthetic_data.instances import \
    make_synthetic_coco  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]



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
    assert counts(tuple(PARTS)) == (
        projections, {'adaptive_avg_pool2d': 1, 'mul': 7, 'add': 3, 'cat': 1})


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


def test_tool_names_a_missing_calibration_folder(tmp_path):
    proc = run_tool([
        'tools/deployment/export_executorch.py', '--shape', '96', '96',
        '--quantize', 'int8', '--calibration-images',
        str(tmp_path / 'nowhere'), '--out',
        str(tmp_path / 'x.pte')
    ], expect_success=False)
    assert proc.returncode != 0
    assert 'nowhere' in proc.stdout and 'is not a directory' in proc.stdout
