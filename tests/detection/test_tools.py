"""The demo and analysis tools on a model trained by tools/train.py."""
import glob
import os.path as osp

import numpy as np
import pytest
from detection_utils import MASK_RCNN_CONFIG, latest_run_dir, run_tool
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def differs(drawn: str, original: str) -> bool:
    a = np.asarray(Image.open(drawn).convert('RGB'), dtype=np.int16)
    b = np.asarray(Image.open(original).convert('RGB'), dtype=np.int16)
    return a.shape == b.shape and np.abs(a - b).mean() > 1


def test_image_demo_draws_predictions(trained_mask_rcnn, synthetic_coco,
                                      tmp_path):
    out_dir = tmp_path / 'vis'
    proc = run_tool([
        'tools/demo/image_demo.py',
        osp.join(synthetic_coco, 'val'), MASK_RCNN_CONFIG,
        trained_mask_rcnn['checkpoint'], '--out-dir',
        str(out_dir), '--max-images', '2', '--score-thr', '0'
    ])
    written = sorted(glob.glob(str(out_dir / '*.jpg')))
    assert [osp.basename(p) for p in written] == ['000000.jpg', '000001.jpg']
    assert 'detections >= 0.0' in proc.stdout
    for path in written:
        assert differs(path, osp.join(synthetic_coco, 'val',
                                      osp.basename(path)))


def test_browse_dataset_draws_ground_truth(synthetic_env, synthetic_coco,
                                           tmp_path):
    out_dir = tmp_path / 'browse'
    proc = run_tool([
        'tools/analysis_tools/browse_dataset.py', MASK_RCNN_CONFIG,
        '--output-dir',
        str(out_dir), '--max-images', '3'
    ], env=synthetic_env)
    assert '3 images with ground truth' in proc.stdout
    written = sorted(glob.glob(str(out_dir / '*.jpg')))
    assert len(written) == 3
    for path in written:
        assert differs(path, osp.join(synthetic_coco, 'train',
                                      osp.basename(path)))


def test_benchmark_inference_table(trained_mask_rcnn, synthetic_env):
    proc = run_tool([
        'tools/analysis_tools/benchmark_inference.py', MASK_RCNN_CONFIG,
        trained_mask_rcnn['checkpoint'], '--num-images', '3', '--warmup',
        '1'
    ], env=synthetic_env)
    header, rule, row = proc.stdout.strip().splitlines()[-3:]
    assert 'images / s' in header and rule.startswith('|--')
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert cells[3] == 'test dataset' and cells[5] == '3'
    assert float(cells[8]) > 0

    proc = run_tool([
        'tools/analysis_tools/benchmark_inference.py', MASK_RCNN_CONFIG,
        '--shape', '96', '128', '--num-images', '2', '--warmup', '0'
    ], env=synthetic_env)
    assert 'random 96x128' in proc.stdout


def test_analyze_logs_plots_and_times(trained_mask_rcnn, tmp_path):
    scalars = osp.join(latest_run_dir(trained_mask_rcnn['work_dir']),
                       'vis_data', 'scalars.json')
    figure = tmp_path / 'curves.png'
    run_tool([
        'tools/analysis_tools/analyze_logs.py', 'plot_curve', scalars,
        '--keys', 'loss', 'loss_cls', '--out',
        str(figure)
    ])
    with Image.open(figure) as image:
        assert image.format == 'PNG' and image.size[0] > 100

    proc = run_tool(
        ['tools/analysis_tools/analyze_logs.py', 'cal_train_time', scalars])
    assert 'mean s/iter' in proc.stdout

    proc = run_tool([
        'tools/analysis_tools/analyze_logs.py', 'plot_curve', scalars,
        '--keys', 'no_such_key', '--out',
        str(tmp_path / 'x.png')
    ], expect_success=False)
    assert proc.returncode != 0
    assert "has no key 'no_such_key'" in proc.stdout
