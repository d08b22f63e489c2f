from .conv_stem import ConvStem, conv_bn_relu
from .kernel_matrix import kernel_matrix
from .landmarks import landmark_grid, pool_landmarks
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention
from .stage import LaplacianFormerStage
from .transformer_block import LaplacianFormerBlock

__all__ = [
    'ConvStem', 'conv_bn_relu', 'kernel_matrix', 'landmark_grid',
    'pool_landmarks', 'LaplacianAttention', 'SoftmaxAttention',
    'LaplacianFormerStage', 'LaplacianFormerBlock'
]
