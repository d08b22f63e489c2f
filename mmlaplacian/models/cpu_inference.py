"""Former home of the CPU-inference subclasses, now modes of the modules.

The chunked CPU inference is the ``mode`` of the attention, block, stage,
stem and conv-BN modules (``'auto'``, ``'full'`` or ``'chunked'``); see
:mod:`mmlaplacian.models.layers.chunking`. Importing a name from here raises
an ImportError that names its replacement.
"""
from typing import NoReturn

_REPLACEMENTS = {
    'enable_cpu_inference':
    "set_inference_mode(model, 'auto', chunk_tokens)",
    'disable_cpu_inference': "set_inference_mode(model, 'full')",
    'ChunkedLaplacianAttention': "LaplacianAttention(..., mode='chunked')",
    'ChunkedLaplacianFormerBlock': "LaplacianFormerBlock(..., mode='chunked')",
    'ChunkedLaplacianFormerStage': "LaplacianFormerStage(..., mode='chunked')",
    'BandedConvStem': "ConvStem(..., mode='chunked')",
    'FoldedConvModule': "ConvBNReLU(..., mode='chunked')",
    'folded_conv_bn': 'fold_batchnorm(conv_bn_relu_module)',
    'DEFAULT_CHUNK_TOKENS': 'DEFAULT_CHUNK_TOKENS',
}


def __getattr__(name: str) -> NoReturn:
    if name not in _REPLACEMENTS:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    raise ImportError(
        f'mmlaplacian.models.cpu_inference.{name} was removed: CPU inference '
        'is now a mode of the modules. Use '
        f'mmlaplacian.models.layers.{_REPLACEMENTS[name]} instead.')
