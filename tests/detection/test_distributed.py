"""tools/dist_train.sh and dist_test.sh: two processes on CPU (gloo)."""
import glob
import os.path as osp
import sys

import pytest
import torch
from detection_utils import (MASK_RCNN_CONFIG, files_under, free_port,
                             read_test_metrics, run_tool)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_dist_train_two_processes(synthetic_env, tmp_path):
    env = dict(synthetic_env, PORT=str(free_port()))
    proc = run_tool([
        'tools/dist_train.sh', MASK_RCNN_CONFIG, '2', '--work-dir',
        str(tmp_path), '--cfg-options', 'train_cfg.max_epochs=1'
    ], env=env)
    out = proc.stdout
    assert 'Distributed launcher: pytorch' in out
    assert 'Distributed training: True' in out
    assert 'GPU number: 2' in out  # mmengine's name for the world size
    # 8 images, 2 per process and iteration, 2 processes: 2 iterations.
    assert 'Epoch(train) [1][2/2]' in out
    assert 'Epoch(train) [1][3/' not in out
    # Validation gathers the predictions of both processes.
    assert 'coco/bbox_mAP:' in out
    assert [osp.basename(p) for p in glob.glob(str(tmp_path / '*.pth'))
            ] == ['epoch_1.pth']
    checkpoint = torch.load(
        tmp_path / 'epoch_1.pth', map_location='cpu', weights_only=False)
    # Saved from the unwrapped model: no DDP "module." prefix.
    assert all(not k.startswith('module.') for k in checkpoint['state_dict'])
    assert checkpoint['meta']['iter'] == 2


def test_dist_test_two_processes(trained_mask_rcnn, mask_rcnn_test_run,
                                 synthetic_env, tmp_path):
    """Two processes give the single-process run's metrics, and rank 1
    writes no file.

    Each rank gets its own work directory (``per_rank_python.sh`` runs
    each rank's tools/test.py through ``per_rank_worker.py``), so whatever
    rank 1 writes lands in its own and is seen there. mmengine's LoggerHook
    dumps the test metrics on every rank (two writers of one file when the
    directory is shared); with RankZeroLoggerHook rank 1 writes nothing,
    not the metrics, nor the --out predictions, the --show-dir pictures or
    the logs."""
    env = dict(synthetic_env, PORT=str(free_port()),
               PYTHON=osp.join(osp.dirname(osp.abspath(__file__)),
                               'per_rank_python.sh'),
               REAL_PYTHON=sys.executable)
    proc = run_tool([
        'tools/dist_test.sh', MASK_RCNN_CONFIG,
        trained_mask_rcnn['checkpoint'], '2', '--work-dir',
        str(tmp_path / 'rank{rank}'), '--out',
        str(tmp_path / 'rank{rank}' / 'predictions.pkl'), '--show-dir',
        'painted', '--cfg-options', *trained_mask_rcnn['evaluate']
    ], env=env)
    # 4 images, 2 per process and batch 2: one batch each, gathered once.
    assert 'Epoch(test) [1/1]' in proc.stdout
    assert proc.stdout.count(
        'Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all') == 2
    written = files_under(tmp_path / 'rank0')
    run = osp.basename(osp.dirname(next(p for p in written
                                        if p.endswith('.log'))))
    assert f'{run}/{run}.json' in written  # the metrics
    assert 'predictions.pkl' in written
    assert any(p.startswith(f'{run}/painted/') for p in written)
    assert files_under(tmp_path / 'rank1') == []
    # Splitting the images over two processes changes no metric of the
    # single-process run (the same weights and images).
    split = read_test_metrics(str(tmp_path / 'rank0'))
    whole = read_test_metrics(mask_rcnn_test_run['work_dir'])
    coco_keys = [k for k in whole if k.startswith('coco/')]
    assert len(coco_keys) > 10
    assert {k: split[k] for k in coco_keys} == {k: whole[k] for k in coco_keys}
