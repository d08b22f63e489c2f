"""The torch-only core: the backbone, its layers and the checkpoint filter.

Registration into OpenMMLab's registries is :mod:`mmlaplacian.adapters.
openmmlab`'s job; nothing here imports mmengine.
"""
from .backbones import LaplacianFormer
from .classifier import LaplacianFormerClassifier
from .layers import LaplacianAttention

__all__ = [
    'LaplacianFormer', 'LaplacianFormerClassifier', 'LaplacianAttention'
]
