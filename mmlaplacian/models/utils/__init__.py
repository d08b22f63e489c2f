from .checkpoint_filter import filter_backbone_state_dict, unwrap_state_dict

__all__ = ['filter_backbone_state_dict', 'unwrap_state_dict']
