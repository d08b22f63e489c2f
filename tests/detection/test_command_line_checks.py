"""Command-line mistakes: a --resume file that does not exist, and a
--cfg-options key that the config does not have."""
import warnings

import pytest
from detection_utils import MASK_RCNN_CONFIG

from mmlaplacian.engine import read_config, unknown_option_keys


def test_resume_path_that_does_not_exist(load_script, capsys, tmp_path):
    train = load_script('tools/train.py')
    missing = str(tmp_path / 'epoch_7.pth')
    with pytest.raises(SystemExit) as error:
        train.parse_args([MASK_RCNN_CONFIG, '--resume', missing])
    assert error.value.code == 2  # argparse's exit status for bad usage
    assert f'--resume: checkpoint file not found: {missing}' in (
        capsys.readouterr().err)

    # An existing file, and --resume alone (the latest checkpoint of the
    # work directory), are accepted.
    present = tmp_path / 'epoch_6.pth'
    present.write_bytes(b'')
    assert train.parse_args([MASK_RCNN_CONFIG, '--resume',
                             str(present)]).resume == str(present)
    assert train.parse_args([MASK_RCNN_CONFIG, '--resume']).resume == 'auto'


def test_unknown_cfg_options_key_warns():
    options = {
        'train_cfg.max_epoch': 3,  # the config's key is max_epochs
        'train_cfg.max_epochs': 3,
        'model.backbone.lam': 2.0,  # an argument the config does not set
        'test_dataloader.dataset.pipeline.1.scale': (64, 64),
        'launcher': 'pytorch',
    }
    with pytest.warns(UserWarning) as record:
        cfg = read_config(MASK_RCNN_CONFIG, options)
    messages = [str(w.message) for w in record
                if '--cfg-options' in str(w.message)]
    assert len(messages) == 2, messages
    assert ("--cfg-options train_cfg.max_epoch: the config has no "
            "'train_cfg.max_epoch'") in messages[0]
    assert "has no 'model.backbone.lam'" in messages[1]
    # A list index out of range is mmengine's own KeyError.
    with pytest.raises(KeyError, match='Index 9 exceeds the length'):
        read_config(MASK_RCNN_CONFIG,
                    {'test_dataloader.dataset.pipeline.9.scale': (64, 64)})
    # The keys are merged all the same, as mmengine does.
    assert cfg.train_cfg.max_epoch == 3 and cfg.train_cfg.max_epochs == 3
    assert cfg.model.backbone.lam == 2.0


def test_known_cfg_options_keys_do_not_warn():
    options = {
        'train_cfg.max_epochs': 1,
        'val_dataloader': None,
        'model.test_cfg.rcnn.score_thr': 0.0,
        'optim_wrapper.optimizer.lr': 1e-3,
        'default_hooks.logger.interval': 5,
    }
    cfg = read_config(MASK_RCNN_CONFIG)
    assert unknown_option_keys(cfg, options) == []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        read_config(MASK_RCNN_CONFIG, options)
    assert [w for w in record if '--cfg-options' in str(w.message)] == []
