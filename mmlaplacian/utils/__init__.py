from .pretrained_checks import (PretrainedNotFoundError,
                                check_pretrained_checkpoint)
from .torch_load_compat import install_mmengine_checkpoint_fix, torch_load_full

__all__ = [
    'PretrainedNotFoundError', 'check_pretrained_checkpoint',
    'install_mmengine_checkpoint_fix', 'torch_load_full'
]
