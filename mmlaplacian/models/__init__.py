from mmlaplacian.registry import MODELS, register_downstream
from .backbones import LaplacianFormer
from .layers import LaplacianAttention, set_inference_mode

MODELS.register_module(module=LaplacianFormer)
register_downstream(LaplacianFormer)

__all__ = ['LaplacianFormer', 'LaplacianAttention', 'set_inference_mode']
