"""A checkpoint that cannot be written (a full disk) stops training with a
clear error and leaves the previous checkpoint as it was.

A file-size limit (``ulimit -f``, RLIMIT_FSIZE) below the checkpoint's size
stands in for the full disk: the write fails with EFBIG, as it would with
ENOSPC, while the small log files still fit.
"""
import hashlib
import os
import os.path as osp
import resource

import pytest
from training_process import (NO_VALIDATION, TrainingProcess, checkpoints,
                              last_checkpoint, temporaries)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def options(epochs: int) -> list:
    return [
        '--cfg-options', f'train_cfg.max_epochs={epochs}',
        'default_hooks.checkpoint.max_keep_ckpts=1', *NO_VALIDATION
    ]


def sha256(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_full_disk_keeps_previous_checkpoint(synthetic_env, tmp_path):
    work_dir = str(tmp_path)
    first = TrainingProcess(work_dir, synthetic_env, options(1), 'first')
    assert first.finish() == 0, first.text()[-6000:]
    previous = osp.join(work_dir, 'epoch_1.pth')
    digest, size = sha256(previous), os.path.getsize(previous)

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))

    full = TrainingProcess(work_dir, synthetic_env,
                           ['--resume', *options(2)], 'full',
                           preexec_fn=limit_file_size)
    assert full.finish() != 0
    out = full.text()
    assert 'Epoch(train) [2][4/4]' in out  # it failed saving epoch 2
    assert ('CheckpointWriteError: [Errno 27] could not write checkpoint '
            f'{osp.join(work_dir, "epoch_2.pth")}: File too large (errno '
            f'EFBIG). Nothing was left in its place: {previous} is intact '
            'and is what --resume continues from. The disk (or a file-size '
            f'limit or quota) is full: free space in {work_dir} and rerun '
            'with --resume.') in out
    assert checkpoints(work_dir) == ['epoch_1.pth']
    assert sha256(previous) == digest
    assert last_checkpoint(work_dir) == previous
    assert temporaries(work_dir) == []

    # With space again, --resume continues from epoch 1.
    again = TrainingProcess(work_dir, synthetic_env,
                            ['--resume', *options(2)], 'again')
    assert again.finish() == 0, again.text()[-6000:]
    assert 'resumed epoch: 1, iter: 4' in again.text()
    assert checkpoints(work_dir) == ['epoch_2.pth']
