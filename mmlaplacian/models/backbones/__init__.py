from .laplacianformer import LaplacianFormer

__all__ = ['LaplacianFormer']
