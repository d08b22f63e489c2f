from .conv_bn import ConvBNReLU
from .conv_stem import ConvStem
from .ffn import FFN, DropPath
from .kernel_matrix import kernel_matrix
from .landmarks import landmark_grid, pool_landmarks
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention
from .stage import LaplacianFormerStage
from .transformer_block import LaplacianFormerBlock

__all__ = [
    'ConvBNReLU', 'ConvStem', 'FFN', 'DropPath', 'kernel_matrix',
    'landmark_grid', 'pool_landmarks', 'LaplacianAttention',
    'SoftmaxAttention', 'LaplacianFormerStage', 'LaplacianFormerBlock'
]
