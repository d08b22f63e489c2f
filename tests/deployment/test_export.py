"""Exports checked in onnxruntime: a small backbone with dynamic shapes,
the test configs' Mask R-CNN and RetinaNet (a narrow LaplacianFormer)
through the export tool, checked against mmdet by
``benchmarks.onnx_parity``, and a clear error for a config that cannot
export. The fixed-size Tiny backbone is checked by the README's deployment
example (tests/test_readme_examples.py)."""
import os.path as osp
import re

import numpy as np
import pytest
import torch

pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')

from mmlaplacian.deployment import (  # noqa: E402
    BackboneForExport, ExportUnsupportedError, export_onnx, ort_run,
    ort_session)

from benchmarks import onnx_parity  # noqa: E402
from benchmarks.onnx_compare import compare_features  # noqa: E402

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOL = 'tools/deployment/export_onnx.py'
MASK_RCNN = osp.join(REPO_ROOT,
                     'tests/detection/configs/mask_rcnn_synthetic.py')
RETINANET = osp.join(REPO_ROOT,
                     'tests/deployment/configs/retinanet_spread_scores.py')
# One block per stage, 4 dims per head: every part of the backbone, short to
# export.
SMALL_ARCH = dict(embed_dims=[16, 32, 48, 64], depths=[1, 1, 1, 1],
                  num_heads=[4, 8, 12, 16])


@pytest.mark.slow
def test_backbone_dynamic_three_sizes(tmp_path):
    """Every part of the backbone (stem, transitions, Laplacian stages 1-3,
    softmax stage 4) in one block per stage with 4 dims per head and 4
    Newton-Schulz steps, so the export stays short (symbolic sizes make
    each node costly to trace, and the dynamic graph sums the kernel one
    feature at a time)."""
    from mmlaplacian import LaplacianFormer
    from mmlaplacian.models.layers import landmark_grid
    torch.manual_seed(0)
    backbone = BackboneForExport(
        LaplacianFormer(arch=SMALL_ARCH, attn_cfg=dict(ns_iters=4))).eval()
    path = str(tmp_path / 'small.onnx')
    generator = torch.Generator().manual_seed(0)
    example = torch.randn(1, 3, 128, 160, generator=generator)
    result = export_onnx(backbone,
                         example,
                         path,
                         dynamic=True,
                         output_names=backbone.output_names)
    assert all(isinstance(d, str) for d in result.input_shape[2:])
    # The Laplacian kernel, Newton-Schulz and the whitening as standard ops.
    assert {'Abs', 'Exp', 'MatMul', 'Sqrt'} <= set(result.operators)
    session = ort_session(path)
    # Different aspect ratios give different landmark grids at stage 1
    # (6x8, 3x16, 8x6 pooled cells): the grid is not frozen in the graph.
    shapes = ((128, 160), (128, 512), (256, 192))
    assert [landmark_grid((h // 4, w // 4), 49) for h, w in shapes] == [
        (6, 8), (3, 16), (8, 6)]
    for shape in shapes:
        image = torch.randn(1, 3, *shape, generator=generator)
        with torch.no_grad():
            expected = backbone(image)
        comparison = compare_features(ort_run(session, image), expected)
        assert comparison.ok, comparison.lines(backbone.output_names)
        assert expected[0].shape[-2:] == (shape[0] // 4, shape[1] // 4)


def assert_all_detections_matched(printed: str) -> None:
    """Both runtimes found detections, as many, and each has its match."""
    counts = {key: int(value) for key, value in re.findall(
        r'^\s*(torch_dets|ort_dets|matched): (\d+)$', printed, re.M)}
    assert counts['torch_dets'] > 0, printed
    assert counts == dict.fromkeys(counts, counts['torch_dets']), counts


def export_and_check(tool, config, shape, out, capsys, *check_args):
    """Export ``config`` with the tool, then check it with
    ``benchmarks.onnx_parity``; both statuses and both outputs."""
    shape = [str(side) for side in shape]
    exported = tool.main([config, '--shape', *shape, '--out', out])
    export_out = capsys.readouterr().out
    checked = onnx_parity.main(
        [config, '--onnx', out, '--shape', *shape, '--runs', '1',
         *check_args])
    return exported, export_out, checked, capsys.readouterr().out


@pytest.mark.slow
def test_mask_rcnn_tool_matches_mmdet(tmp_path, load_script, capsys):
    out = str(tmp_path / 'mask_rcnn.onnx')
    exported, export_out, checked, printed = export_and_check(
        load_script(TOOL), MASK_RCNN, (128, 128), out, capsys, '--memory')
    assert exported == 0, export_out
    assert 'NonMaxSuppression' in export_out and 'RoiAlign' in export_out
    assert 'onnxruntime outputs: boxes' in export_out
    assert checked == 0, printed
    assert_all_detections_matched(printed)
    assert 'latency' in printed and 'onnxruntime' in printed
    # Each runtime's memory, measured in its own process.
    assert printed.count(' inference +') == 2, printed
    import onnx
    model = onnx.load(out)
    assert {node.domain for node in model.graph.node} <= {'', 'ai.onnx'}
    assert [o.name for o in model.graph.output
            ] == ['boxes', 'scores', 'labels', 'num_dets', 'masks']


@pytest.mark.slow
def test_retinanet_tool_matches_mmdet(tmp_path, load_script, capsys):
    exported, export_out, checked, printed = export_and_check(
        load_script(TOOL), RETINANET, (128, 160),
        str(tmp_path / 'retinanet.onnx'), capsys)
    assert exported == 0, export_out
    assert checked == 0, printed
    assert_all_detections_matched(printed)


def test_unsupported_config_names_the_module(tmp_path, load_script, capsys):
    tool = load_script(TOOL)
    status = tool.main([
        MASK_RCNN, '--shape', '128', '128', '--out',
        str(tmp_path / 'x.onnx'), '--cfg-options',
        'model.backbone.attn_cfg.inverse=exact'
    ])
    err = capsys.readouterr().err
    assert status == 2
    assert 'backbone.stages.0' in err and 'LaplacianAttention' in err
    assert "inverse='exact'" in err and 'newton' in err
    assert not (tmp_path / 'x.onnx').exists()


def test_unsupported_head_names_the_module():
    from mmengine.config import Config
    from mmlaplacian.deployment import (build_exportable_detector,
                                        load_detector)
    cfg = Config.fromfile(MASK_RCNN)
    cfg.model.test_cfg.rcnn.nms = dict(type='soft_nms', iou_threshold=0.5)
    with pytest.raises(ExportUnsupportedError, match='rcnn.*soft_nms'):
        build_exportable_detector(load_detector(cfg))


def test_detection_comparison_detects_a_difference():
    from mmlaplacian.deployment import Detections

    from benchmarks.onnx_compare import compare_detections
    boxes = np.array([[0, 0, 10, 10], [20, 20, 40, 30]], dtype=np.float32)
    ref = Detections(boxes, np.array([0.9, 0.8]), np.array([1, 2]))
    same = compare_detections(Detections(boxes + 0.01, ref.scores, ref.labels),
                              ref)
    assert same.ok and same.matched == 2
    moved = boxes.copy()
    moved[1] += 3
    differs = compare_detections(Detections(moved, ref.scores, ref.labels),
                                 ref)
    assert not differs.ok and differs.matched == 1


def test_no_detections_on_either_side_is_no_agreement():
    from mmlaplacian.deployment import Detections

    from benchmarks.onnx_compare import compare_detections
    none = Detections(np.zeros((0, 4), dtype=np.float32), np.zeros(0),
                      np.zeros(0, dtype=np.int64))
    comparison = compare_detections(none, none)
    assert comparison.matched_share == 0 and not comparison.ok


def test_dynamic_needs_a_program_with_symbolic_sizes(tmp_path):
    """An exported program is taken as it is: asking for dynamic sizes of
    one exported with static sizes is refused before any work."""
    from mmlaplacian import LaplacianFormer
    backbone = BackboneForExport(LaplacianFormer(arch=SMALL_ARCH).eval())
    image = torch.randn(1, 3, 64, 64)
    program = torch.export.export(backbone, (image, ))
    path = tmp_path / 'small.onnx'
    with pytest.raises(ValueError, match='exported with static sizes'):
        export_onnx(program, image, str(path), dynamic=True)
    assert not path.exists()
