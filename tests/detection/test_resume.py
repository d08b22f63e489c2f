"""--resume: an interrupted run ends with the weights of an uninterrupted one.

RetinaNet trains without any randomness once seeded (no random
augmentation, no stochastic depth, no sampled anchors or proposals), so the
two runs must agree exactly. mmengine does not restore random-number
generator states on resume, so detectors that sample proposals at random
(Mask R-CNN) only agree statistically.
"""
import shutil

import pytest
import torch
from detection_utils import RETINANET_CONFIG, read_scalars, run_tool

pytestmark = pytest.mark.slow

NO_VALIDATION = ['val_dataloader=None', 'val_evaluator=None', 'val_cfg=None']


def train(env, work_dir, *extra):
    return run_tool([
        'tools/train.py', RETINANET_CONFIG, '--work-dir',
        str(work_dir), *extra
    ], env=env)


def weights(path):
    return torch.load(path, map_location='cpu',
                      weights_only=False)['state_dict']


def losses(work_dir) -> dict:
    """``{iteration: loss}`` of the newest run in ``work_dir``."""
    return {r['iter']: r['loss'] for r in read_scalars(str(work_dir))
            if 'loss' in r}


def test_resume_matches_uninterrupted_run(synthetic_env, tmp_path):
    straight, interrupted = tmp_path / 'straight', tmp_path / 'interrupted'
    train(synthetic_env, straight, '--cfg-options', *NO_VALIDATION)
    # A run "stopped" right after its first checkpoint (epoch 1 of 2) has
    # trained exactly as far as the uninterrupted one had by then: give it
    # that checkpoint rather than training epoch 1 a second time ...
    interrupted.mkdir()
    shutil.copy(straight / 'epoch_1.pth', interrupted / 'epoch_1.pth')
    # ... and restart it from there, as after a crash.
    proc = train(synthetic_env, interrupted, '--resume',
                 str(interrupted / 'epoch_1.pth'), '--cfg-options',
                 *NO_VALIDATION)
    assert 'resumed epoch: 1, iter: 4' in proc.stdout

    # Only epoch 2 (iterations 5 to 8) ran, logging the same losses (the
    # running means too: the log history is restored).
    expected_losses = losses(straight)
    assert sorted(expected_losses) == list(range(1, 9))
    assert losses(interrupted) == {i: expected_losses[i] for i in range(5, 9)}

    expected = weights(straight / 'epoch_2.pth')
    resumed = weights(interrupted / 'epoch_2.pth')
    assert expected.keys() == resumed.keys()
    differing = [k for k in expected if not torch.equal(expected[k],
                                                        resumed[k])]
    assert differing == []
    # Epoch 2 really trained: the weights moved after the checkpoint.
    first = weights(interrupted / 'epoch_1.pth')
    assert any(not torch.equal(first[k], expected[k]) for k in expected
               if expected[k].is_floating_point())
