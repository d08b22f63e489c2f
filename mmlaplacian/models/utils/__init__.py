from .checkpoint_filter import filter_backbone_state_dict, unwrap_state_dict
from .checkpoint_keys import STATE_DICT_VERSION, upgrade_state_dict

__all__ = [
    'filter_backbone_state_dict', 'unwrap_state_dict', 'STATE_DICT_VERSION',
    'upgrade_state_dict'
]
