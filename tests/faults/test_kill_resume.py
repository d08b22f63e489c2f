"""Training survives SIGKILL and a full disk: ``tools/train.py --resume``
continues from the last complete checkpoint, however the run before it
ended.

The run is the test RetinaNet (3 epochs of 4 iterations, a checkpoint per
epoch, ``max_keep_ckpts=1``), stopped at five points in turn, each time
resumed with ``--resume``:

1. killed during epoch 1, before any checkpoint;
2. killed half-way through writing ``epoch_1.pth`` (the first checkpoint);
3. killed during epoch 2, ``epoch_1.pth`` complete;
4. killed half-way through writing ``epoch_2.pth``, which (with
   ``max_keep_ckpts=1``) mmengine would have deleted ``epoch_1.pth`` for
   before writing;
5. a full disk while ``epoch_2.pth`` is written: the run stops with a clear
   error and ``epoch_1.pth`` is left byte for byte. A file-size limit
   (``ulimit -f``, RLIMIT_FSIZE) below the checkpoint's size stands in for
   the full disk: the write fails with EFBIG, as it would with ENOSPC,
   while the small log files still fit.

The last run is given the checkpoint by path (``--resume epoch_1.pth``);
the ones before find it themselves (``--resume`` alone).

A write is caught half-way deterministically: the runs killed mid-write
start with ``slow_checkpoint_write/`` first on their ``PYTHONPATH``, whose
test-only ``sitecustomize.py`` stops a checkpoint's write once half of the
file is on disk, and the test kills the run while the temporary file
exists. Nothing in the package knows of it.

RetinaNet trains without randomness once seeded, so the resumed run must
end with the very weights, optimizer state, learning rates and losses of an
uninterrupted run (the spread of uninterrupted runs is zero). mmengine does
not restore random-number generator states on resume, so detectors that
sample proposals at random (Mask R-CNN) would only agree statistically.
"""
import hashlib
import os
import os.path as osp

import pytest
import torch
from detection_utils import read_scalars
from training_process import (NO_VALIDATION, TrainingProcess, checkpoints,
                              last_checkpoint, load, temporaries,
                              with_slow_checkpoint_write)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OPTIONS = [
    '--cfg-options', 'train_cfg.max_epochs=3',
    'default_hooks.checkpoint.max_keep_ckpts=1', *NO_VALIDATION
]


def logged(run: TrainingProcess, text: str):
    return lambda: text in run.text()


def assert_no_partial_checkpoint(work_dir: str) -> None:
    """Every ``*.pth`` loads in full and ``last_checkpoint`` names one."""
    for name in checkpoints(work_dir):
        assert 'state_dict' in load(osp.join(work_dir, name)), name
    named = last_checkpoint(work_dir)
    assert named is None or osp.basename(named) in checkpoints(work_dir)


def kill_mid_write(work_dir: str, env: dict, name: str) -> TrainingProcess:
    """Resume, and SIGKILL the run once its next checkpoint is half on
    disk."""
    run = TrainingProcess(work_dir, with_slow_checkpoint_write(env),
                          ['--resume', *OPTIONS], name)
    run.wait_until(lambda: any(os.path.getsize(t) > 0
                               for t in temporaries(work_dir)),
                   'a half-written checkpoint')
    run.kill()
    return run


def sha256(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def fill_disk_while_saving(work_dir: str, env: dict,
                           checkpoint_size: int) -> None:
    """Resume with a file-size limit of half a checkpoint: the next save
    fails, and the checkpoint before it must stay as it was."""
    previous = osp.join(work_dir, 'epoch_1.pth')
    digest = sha256(previous)

    run = TrainingProcess(work_dir, env, ['--resume', *OPTIONS], 'full',
                          file_size_limit=checkpoint_size // 2)
    assert run.finish() != 0
    out = run.text()
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


def progress(work_dir: str) -> dict:
    """``{iteration: (lr, loss)}`` logged by the newest run."""
    return {r['iter']: (r['lr'], r['loss'])
            for r in read_scalars(work_dir) if 'loss' in r}


def test_training_survives_sigkill_and_full_disk(synthetic_env, tmp_path):
    straight = str(tmp_path / 'straight')
    os.makedirs(straight)
    reference = TrainingProcess(straight, synthetic_env, OPTIONS, 'straight')
    assert reference.finish() == 0, reference.text()[-6000:]
    expected = load(osp.join(straight, 'epoch_3.pth'))
    expected_progress = progress(straight)
    assert sorted(expected_progress) == list(range(1, 13))
    full_size = os.path.getsize(osp.join(straight, 'epoch_3.pth'))

    work_dir = str(tmp_path / 'killed')
    os.makedirs(work_dir)
    survived = []

    # 1. During epoch 1: nothing saved yet.
    run = TrainingProcess(work_dir, synthetic_env, OPTIONS, '1')
    run.wait_until(logged(run, 'Epoch(train) [1][2/4]'), 'iteration 2')
    run.kill()
    assert checkpoints(work_dir) == [] and last_checkpoint(work_dir) is None
    survived.append('epoch 1, iteration 2')

    # 2. Half-way through the first checkpoint: the resumed run finds no
    # checkpoint (and no last_checkpoint) and starts again.
    run = kill_mid_write(work_dir, synthetic_env, '2')
    partial = temporaries(work_dir)
    assert [osp.basename(p).split('.tmp')[0] for p in partial
            ] == ['.epoch_1.pth']
    assert 0 < os.path.getsize(partial[0]) < full_size
    assert checkpoints(work_dir) == [] and last_checkpoint(work_dir) is None
    survived.append('writing epoch_1.pth')

    # 3. During epoch 2, epoch_1.pth complete. The run that got there
    # started from scratch and removed the half-written file.
    run = TrainingProcess(work_dir, synthetic_env, ['--resume', *OPTIONS],
                          '3')
    run.wait_until(logged(run, 'Epoch(train) [2][2/4]'), 'epoch 2')
    run.kill()
    assert 'Did not find last_checkpoint' in run.text()
    assert f'removed {partial[0]}' in run.text()
    assert temporaries(work_dir) == []
    assert checkpoints(work_dir) == ['epoch_1.pth']
    assert_no_partial_checkpoint(work_dir)
    survived.append('epoch 2, iteration 2')

    # 4. Half-way through epoch_2.pth: epoch_1.pth stays the checkpoint to
    # resume from, although max_keep_ckpts=1.
    run = kill_mid_write(work_dir, synthetic_env, '4')
    assert 'resumed epoch: 1, iter: 4' in run.text()
    assert checkpoints(work_dir) == ['epoch_1.pth']
    assert osp.basename(last_checkpoint(work_dir)) == 'epoch_1.pth'
    assert_no_partial_checkpoint(work_dir)
    assert load(osp.join(work_dir, 'epoch_1.pth'))['meta']['iter'] == 4
    survived.append('writing epoch_2.pth')

    # 5. The disk fills while epoch_2.pth is written.
    fill_disk_while_saving(work_dir, synthetic_env, full_size)
    survived.append('full disk writing epoch_2.pth')

    # With space again, the last resume runs to the end, from epoch 1,
    # named by path this time.
    run = TrainingProcess(
        work_dir, synthetic_env,
        ['--resume', osp.join(work_dir, 'epoch_1.pth'), *OPTIONS], 'final')
    assert run.finish() == 0, run.text()[-6000:]
    assert 'resumed epoch: 1, iter: 4' in run.text()
    assert checkpoints(work_dir) == ['epoch_3.pth']
    assert temporaries(work_dir) == []
    final = load(osp.join(work_dir, 'epoch_3.pth'))
    assert final['meta']['epoch'] == 3 and final['meta']['iter'] == 12
    # Counters, learning rates and losses (their running means too: the log
    # history is restored) continue from iteration 5 as in the
    # uninterrupted run.
    assert progress(work_dir) == {
        i: expected_progress[i] for i in range(5, 13)}
    # The optimizer state continued (AdamW's step counts and moments) and
    # so did the schedule.
    steps = {s['step'].item() for s in final['optimizer']['state'].values()}
    assert steps == {12.0}
    for key, state in expected['optimizer']['state'].items():
        for name, value in state.items():
            assert torch.equal(final['optimizer']['state'][key][name],
                               value), (key, name)
    assert final['param_schedulers'] == expected['param_schedulers']
    differing = [k for k, v in expected['state_dict'].items()
                 if not torch.equal(final['state_dict'][k], v)]
    assert differing == []
    assert len(survived) == 5, survived
