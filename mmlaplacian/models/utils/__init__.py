from .checkpoint_filter import (Conversion, filter_backbone_state_dict,
                                filter_checkpoint, resize_pos_embed,
                                unwrap_state_dict)
from .checkpoint_keys import STATE_DICT_VERSION, upgrade_state_dict

__all__ = [
    'Conversion', 'filter_backbone_state_dict', 'filter_checkpoint',
    'resize_pos_embed', 'unwrap_state_dict', 'STATE_DICT_VERSION',
    'upgrade_state_dict'
]
