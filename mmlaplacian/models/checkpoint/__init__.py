"""Checkpoints of the backbone: reading the file (:mod:`.files`), turning a
checkpoint of any supported layout into this backbone's state dict
(:mod:`.state_dict_filter`) and the key layouts of earlier package versions
(:mod:`.key_versions`). Needs torch only; mmengine reads the file when it is
installed."""
from .files import (PretrainedNotFoundError, check_pretrained_checkpoint,
                    load_checkpoint_file, load_local_checkpoint)
from .key_versions import STATE_DICT_VERSION, upgrade_state_dict
from .state_dict_filter import (Conversion, filter_backbone_state_dict,
                                filter_checkpoint, resize_pos_embed,
                                unwrap_state_dict)

__all__ = [
    'Conversion', 'PretrainedNotFoundError', 'STATE_DICT_VERSION',
    'check_pretrained_checkpoint', 'filter_backbone_state_dict',
    'filter_checkpoint', 'load_checkpoint_file', 'load_local_checkpoint',
    'resize_pos_embed', 'unwrap_state_dict', 'upgrade_state_dict'
]
