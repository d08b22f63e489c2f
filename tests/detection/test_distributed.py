"""tools/dist_train.sh: two processes on CPU (gloo) train one model."""
import glob
import os.path as osp

import pytest
import torch
from detection_utils import MASK_RCNN_CONFIG, free_port, run_tool

pytestmark = pytest.mark.slow


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
