"""AOTInductor packages of tools/deployment/export_aoti.py and the
export API: loaded in a fresh interpreter, matching eager within the ONNX
tolerance, refusing inputs of another shape."""
import re
import subprocess
import sys

import pytest
import torch
from detection_utils import run_tool

from mmlaplacian import LaplacianFormer
from mmlaplacian.deployment import BackboneForExport
from mmlaplacian.deployment.aoti_export import (AOTIPackage, export_aoti,
                                                load_aoti,
                                                packed_linear_kernels)
from mmlaplacian.deployment.export import (FEATURE_RTOL,
                                           largest_relative_difference)

TOOL = 'tools/deployment/export_aoti.py'
MASK_RCNN = 'tests/detection/configs/mask_rcnn_synthetic.py'
SEM_FPN = 'tests/segmentation/configs/sem_fpn_synthetic.py'
SHAPE = (96, 128)

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope='module')
def checkpoint_and_package(tmp_path_factory):
    """The tool run as a user runs it, on a saved backbone checkpoint."""
    work = tmp_path_factory.mktemp('aoti')
    torch.manual_seed(0)
    backbone = LaplacianFormer('tiny', drop_path_rate=0.).eval()
    weights = work / 'lf_t.pth'
    torch.save({'state_dict': backbone.state_dict()}, weights)
    package = work / 'lf_t.pt2'
    proc = run_tool([TOOL, '--arch', 'tiny', '--checkpoint', str(weights),
                     '--shape', *map(str, SHAPE), '--out', str(package)])
    return backbone, package, proc.stdout


def test_tool_writes_a_package_matching_eager(checkpoint_and_package):
    """The tool's own check, in a fresh interpreter, passes; the package
    it wrote, loaded here, gives the checkpoint's features on another
    image. Every linear layer runs on oneDNN, its GELU or residual add
    fused (where inductor's JIT-compiled code packs float32 linears for
    MKL): the package's speed-up (docs/benchmarks.md)."""
    backbone, package, printed = checkpoint_and_package
    assert re.search(r'compiled in [\d.]+ s; linear layers: oneDNN x38$',
                     printed, re.M), printed
    assert packed_linear_kernels(str(package)) == {'oneDNN': 38}
    assert 'the package matches eager' in printed, printed

    image = torch.rand(1, 3, *SHAPE,
                       generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = BackboneForExport(backbone)(image)
    got = load_aoti(str(package))(image)
    assert len(got) == len(expected) == 4
    assert [out.shape for out in got] == [ref.shape for ref in expected]
    assert largest_relative_difference(got, expected) <= FEATURE_RTOL


def test_package_refuses_another_shape_dtype_or_layout_of_input(
        checkpoint_and_package):
    """The compiled code would read any tensor as the shape it was made
    for: the loaded package names the shape it takes instead."""
    _, package, _ = checkpoint_and_package
    runner = load_aoti(str(package))
    assert runner.input_shape == (1, 3, *SHAPE)
    for bad in (torch.rand(1, 3, SHAPE[0], SHAPE[1] + 32),
                torch.rand(2, 3, *SHAPE),
                torch.rand(1, 3, *SHAPE, dtype=torch.float64)):
        with pytest.raises(ValueError, match=r'takes a float32 CPU tensor '
                           r'of shape \[1, 3, 96, 128\]'):
            runner(bad)


def test_package_runs_where_only_mmlaplacian_is_imported(
        checkpoint_and_package):
    """A new process needs nothing but ``load_aoti``: it registers the
    operators the package calls."""
    _, package, _ = checkpoint_and_package
    code = ('import torch\n'
            'from mmlaplacian.deployment.aoti_export import load_aoti\n'
            f'outs = load_aoti({str(package)!r})(torch.rand(1, 3, '
            f'{SHAPE[0]}, {SHAPE[1]}))\n'
            'print([tuple(o.shape) for o in outs])\n')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert '(1, 64, 24, 32)' in proc.stdout, proc.stdout


def test_bad_paths_and_training_mode_are_refused(tmp_path):
    backbone = BackboneForExport(LaplacianFormer('tiny').eval())
    image = torch.rand(1, 3, *SHAPE)
    with pytest.raises(ValueError, match=r'\.pt2 file'):
        export_aoti(backbone, image, str(tmp_path / 'lf_t.so'))
    with pytest.raises(ValueError, match=r'eval mode .*in training mode: '
                       r'backbone\.'):
        export_aoti(BackboneForExport(LaplacianFormer('tiny').train()),
                    image, str(tmp_path / 'lf_t.pt2'))
    with pytest.raises(FileNotFoundError, match='no AOTInductor package'):
        AOTIPackage(str(tmp_path / 'missing.pt2'))
    with pytest.raises(ValueError, match=r'\.pt2 file'):
        load_aoti(str(tmp_path / 'lf_t.onnx'))
    proc = run_tool([TOOL, '--out', str(tmp_path / 'lf_t.so')],
                    expect_success=False)
    assert proc.returncode == 2
    assert '--out must be a .pt2 file' in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize('config', [MASK_RCNN, SEM_FPN],
                         ids=['mask-rcnn-dense', 'sem-fpn'])
def test_tool_packages_a_detectors_dense_part_and_a_segmentor(
        tmp_path, config):
    proc = run_tool([TOOL, '--config', config, '--shape', '128', '128',
                     '--out', str(tmp_path / 'model.pt2')])
    assert 'the package matches eager' in proc.stdout, proc.stdout
