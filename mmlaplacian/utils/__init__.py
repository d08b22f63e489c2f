from .torch_load_compat import install_mmengine_checkpoint_fix, torch_load_full

__all__ = ['install_mmengine_checkpoint_fix', 'torch_load_full']
