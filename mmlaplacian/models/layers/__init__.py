from .conv_stem import ConvBNReLU, ConvStem
from .drop_path import DropPath
from .kernel_matrix import kernel_matrix
from .landmarks import landmark_grid, pool_landmarks
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention
from .transformer_block import LaplacianFormerBlock, Mlp

__all__ = [
    'ConvBNReLU', 'ConvStem', 'DropPath', 'kernel_matrix', 'landmark_grid',
    'pool_landmarks', 'LaplacianAttention', 'SoftmaxAttention',
    'LaplacianFormerBlock', 'Mlp'
]
