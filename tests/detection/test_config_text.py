"""The runner's config formats its text once per content, and the text is
mmengine's."""
import contextlib
import copy
import pickle
from unittest import mock

import mmengine.config.config as mmengine_config
from detection_utils import MASK_RCNN_CONFIG
from mmengine.config import Config
from yapf.yapflib import yapf_api

from mmlaplacian.engine import read_config
from mmlaplacian.engine.config_text import FormattedOnceConfig


@contextlib.contextmanager
def formatting_calls():
    """Counts yapf's runs inside mmengine (the real formatter runs).
    mmengine 0.10.7 binds ``FormatCode`` when its config module loads, the
    maintained fork imports it from yapf inside ``pretty_text``."""
    spy = mock.Mock(wraps=yapf_api.FormatCode)
    with contextlib.ExitStack() as patches:
        for module in (yapf_api, mmengine_config):
            if hasattr(module, 'FormatCode'):
                patches.enter_context(
                    mock.patch.object(module, 'FormatCode', spy))
        yield spy


def test_text_is_mmengines_and_formatted_once_per_content():
    plain = read_config(MASK_RCNN_CONFIG)
    cfg = FormattedOnceConfig.of(copy.deepcopy(plain))
    with formatting_calls() as format_code:
        expected = plain.pretty_text
        for _ in range(3):
            assert cfg.pretty_text == expected
        assert format_code.call_count == 2  # the plain one, ours once

        cfg.train_cfg.max_epochs = 7  # a changed config is formatted anew
        plain.train_cfg.max_epochs = 7
        changed = cfg.pretty_text
        assert changed == plain.pretty_text and changed != expected
        assert 'max_epochs=7' in cfg.pretty_text
        assert format_code.call_count == 4


def test_copies_stay_formatted_once_configs():
    cfg = FormattedOnceConfig.of(read_config(MASK_RCNN_CONFIG))
    text = cfg.pretty_text
    # The runner deep-copies its config; workers and checkpoints pickle it.
    for other in (copy.deepcopy(cfg), copy.copy(cfg),
                  pickle.loads(pickle.dumps(cfg))):
        assert isinstance(other, FormattedOnceConfig)
        assert other.pretty_text == text
    assert FormattedOnceConfig.of(cfg) is cfg


def test_unformatted_configs_stay_unformatted():
    # (Config.fromfile drops format_python_code for .py configs.)
    plain = Config(read_config(MASK_RCNN_CONFIG).to_dict(),
                   format_python_code=False)
    cfg = FormattedOnceConfig.of(plain)
    with formatting_calls() as format_code:
        assert cfg.pretty_text == plain.pretty_text
        assert format_code.call_count == 0
