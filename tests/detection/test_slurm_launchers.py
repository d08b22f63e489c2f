"""tools/slurm_train.sh and tools/slurm_test.sh on two simulated nodes.

A stand-in ``srun`` (``slurm_stub/srun``, first on PATH) starts the task
of each of the two nodes on this machine with the variables Slurm sets in
a task, and a stand-in ``scontrol`` names the nodes (loopback addresses).
In each task ``tools/launchers/srun.sh`` starts torchrun for one process
(``GPUS=2 GPUS_PER_NODE=1``): the two torchrun agents meet at the first
node, 127.0.0.1, and their two processes train or evaluate together (gloo
on CPU). Each rank gets its own work directory (``per_rank_python.sh``),
so what each writes is seen apart: rank 0 writes the run's one set of
files, rank 1 none.
"""
import os
import os.path as osp
import sys

import pytest
import torch
from detection_utils import (MASK_RCNN_CONFIG, files_under, free_port,
                             read_test_metrics, run_tool)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HERE = osp.dirname(osp.abspath(__file__))
COCO_AP_LINE = 'Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all'


def two_node_env(synthetic_env, srun_log: str) -> dict:
    return dict(
        synthetic_env,
        PATH=osp.join(HERE, 'slurm_stub') + os.pathsep + os.environ['PATH'],
        SRUN_STUB_LOG=srun_log, GPUS='2', GPUS_PER_NODE='1',
        PORT=str(free_port()),
        PYTHON=osp.join(HERE, 'per_rank_python.sh'),
        REAL_PYTHON=sys.executable)


@pytest.fixture(scope='module')
def slurm_training(synthetic_env, tmp_path_factory) -> dict:
    """One epoch of one iteration: 4 images, 2 per process."""
    root = tmp_path_factory.mktemp('slurm_train')
    srun_log = str(root / 'srun.log')
    proc = run_tool([
        'tools/slurm_train.sh', 'cpu', 'lf-train', MASK_RCNN_CONFIG,
        str(root / 'rank{rank}'), '--cfg-options', 'train_cfg.max_epochs=1',
        'train_dataloader.dataset.indices=4', 'val_dataloader=None',
        'val_evaluator=None', 'val_cfg=None'
    ], env=two_node_env(synthetic_env, srun_log))
    with open(srun_log, encoding='utf-8') as f:
        srun_options = f.read().split()
    return dict(root=root, stdout=proc.stdout, srun_options=srun_options)


def test_slurm_train_runs_a_step_on_two_nodes(slurm_training):
    assert {'--nodes=2', '--ntasks-per-node=1', '--gres=gpu:1',
            '--cpus-per-task=5', '--kill-on-bad-exit=1'} <= set(
                slurm_training['srun_options'])
    out = slurm_training['stdout']
    assert 'Distributed launcher: pytorch' in out
    assert 'GPU number: 2' in out  # mmengine's name for the world size
    # 4 images, 2 per process and iteration, 2 processes: one iteration.
    assert 'Epoch(train) [1][1/1]' in out
    rank0 = files_under(slurm_training['root'] / 'rank0')
    assert {'epoch_1.pth', 'last_checkpoint'} <= set(rank0)
    assert any(p.endswith('.log') for p in rank0)
    assert any(p.endswith('vis_data/scalars.json') for p in rank0)
    assert files_under(slurm_training['root'] / 'rank1') == []
    checkpoint = torch.load(slurm_training['root'] / 'rank0' / 'epoch_1.pth',
                            map_location='cpu', weights_only=False)
    assert checkpoint['meta']['iter'] == 1
    assert all(not k.startswith('module.') for k in checkpoint['state_dict'])


def test_slurm_test_evaluates_on_two_nodes(slurm_training, synthetic_env,
                                           tmp_path):
    checkpoint = str(slurm_training['root'] / 'rank0' / 'epoch_1.pth')
    proc = run_tool([
        'tools/slurm_test.sh', 'cpu', 'lf-test', MASK_RCNN_CONFIG, checkpoint,
        '--work-dir', str(tmp_path / 'rank{rank}')
    ], env=two_node_env(synthetic_env, str(tmp_path / 'srun.log')))
    # 4 validation images, 2 per process and batch 2: one batch each,
    # gathered once and scored once.
    assert 'Epoch(test) [1/1]' in proc.stdout
    assert proc.stdout.count(COCO_AP_LINE) == 2
    assert 'coco/bbox_mAP' in read_test_metrics(str(tmp_path / 'rank0'))
    assert files_under(tmp_path / 'rank1') == []
