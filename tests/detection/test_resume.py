"""--resume: an interrupted run ends with the weights of an uninterrupted one.

RetinaNet trains without any randomness once seeded (no random
augmentation, no stochastic depth, no sampled anchors or proposals), so the
two runs must agree exactly. mmengine does not restore random-number
generator states on resume, so detectors that sample proposals at random
(Mask R-CNN) only agree statistically.
"""
import pytest
import torch
from detection_utils import RETINANET_CONFIG, run_tool

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


def test_resume_matches_uninterrupted_run(synthetic_env, tmp_path):
    straight, interrupted = tmp_path / 'straight', tmp_path / 'interrupted'
    train(synthetic_env, straight, '--cfg-options', *NO_VALIDATION)
    # "Stopped" right after its first checkpoint (epoch 1 of 2) ...
    train(synthetic_env, interrupted, '--cfg-options',
          'train_cfg.max_epochs=1', *NO_VALIDATION)
    assert not (interrupted / 'epoch_2.pth').exists()
    # ... and restarted from it.
    proc = train(synthetic_env, interrupted, '--resume',
                 str(interrupted / 'epoch_1.pth'), '--cfg-options',
                 *NO_VALIDATION)
    assert 'resumed epoch: 1, iter: 4' in proc.stdout

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
