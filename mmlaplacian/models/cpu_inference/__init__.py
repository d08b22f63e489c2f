"""CPU inference: the same model, run in cache-sized pieces.

At detection resolution a stage-1 tensor is far larger than a CPU's
last-level cache. Without autograd, :func:`enable_cpu_inference` lets the
attention, FFNs and output norms run over chunks of tokens, the stem over
bands of rows, and the convs with BatchNorm folded in, each through a
subclass of the plain module that falls back to it everywhere else (training,
GPUs, tracing, export). The backbone switches it on when built with
``inference_chunk_tokens > 0`` (the default), so every CPU inference path
(``tools/test.py``, mmdet's own tools, ``DetInferencer``) takes it.
"""
from .banded_stem import BandedConvStem
from .chunked_attention import ChunkedLaplacianAttention
from .chunked_stage import (ChunkedLaplacianFormerBlock,
                            ChunkedLaplacianFormerStage)
from .convert import disable_cpu_inference, enable_cpu_inference
from .folded_conv import FoldedConvModule, folded_conv_bn
from .token_chunks import DEFAULT_CHUNK_TOKENS

__all__ = [
    'BandedConvStem', 'ChunkedLaplacianAttention',
    'ChunkedLaplacianFormerBlock', 'ChunkedLaplacianFormerStage',
    'DEFAULT_CHUNK_TOKENS', 'FoldedConvModule', 'disable_cpu_inference',
    'enable_cpu_inference', 'folded_conv_bn'
]
