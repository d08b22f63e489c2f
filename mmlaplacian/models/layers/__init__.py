from .conv_stem import ConvStem, conv_bn_relu
from .drop_path import DropPath
from .kernel_matrix import kernel_matrix
from .landmarks import landmark_grid, pool_landmarks
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention
from .transformer_block import LaplacianFormerBlock, Mlp

__all__ = [
    'ConvStem', 'conv_bn_relu', 'DropPath', 'kernel_matrix', 'landmark_grid',
    'pool_landmarks', 'LaplacianAttention', 'SoftmaxAttention',
    'LaplacianFormerBlock', 'Mlp'
]
