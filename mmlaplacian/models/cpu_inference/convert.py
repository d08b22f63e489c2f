"""Switch the CPU-inference layer on or off in a built model."""
from __future__ import annotations

from typing import Dict, Type

import torch.nn as nn
from mmcv.cnn import ConvModule

from ..layers.conv_stem import ConvStem
from ..layers.laplacian_attention import LaplacianAttention
from ..layers.stage import LaplacianFormerStage
from ..layers.transformer_block import LaplacianFormerBlock
from .banded_stem import BandedConvStem
from .chunked_attention import ChunkedLaplacianAttention
from .chunked_stage import (ChunkedLaplacianFormerBlock,
                            ChunkedLaplacianFormerStage)
from .folded_conv import FoldedConvModule
from .token_chunks import DEFAULT_CHUNK_TOKENS

# Plain module -> its CPU-inference subclass (same parameters and buffers,
# so state dicts, optimisers and hooks are unaffected by the swap).
CPU_INFERENCE_CLASSES: Dict[Type[nn.Module], Type[nn.Module]] = {
    LaplacianAttention: ChunkedLaplacianAttention,
    LaplacianFormerBlock: ChunkedLaplacianFormerBlock,
    LaplacianFormerStage: ChunkedLaplacianFormerStage,
    ConvStem: BandedConvStem,
    ConvModule: FoldedConvModule,
}
PLAIN_CLASSES = {v: k for k, v in CPU_INFERENCE_CLASSES.items()}


def enable_cpu_inference(
        model: nn.Module,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> nn.Module:
    """Swap the CPU-inference subclasses into ``model``, in place.

    Each subclass runs its plain parent's forward unless the input is on the
    CPU, autograd is off and nothing traces the model; then it computes the
    same result over chunks of ``chunk_tokens`` tokens (attention, FFNs,
    output norms), bands of rows (stem) and with BatchNorm folded into the
    convs. Only exact classes are swapped: subclasses of the plain modules
    that users write are left alone.

    Args:
        model (nn.Module): A backbone, or any model that holds one.
        chunk_tokens (int): Tokens per chunk (> 0).

    Returns:
        nn.Module: ``model`` itself.
    """
    if chunk_tokens <= 0:
        raise ValueError(f'chunk_tokens must be positive, got {chunk_tokens}'
                         '; use disable_cpu_inference() to switch it off')
    for module in model.modules():
        chunked = CPU_INFERENCE_CLASSES.get(type(module))
        if chunked is not None:
            module.__class__ = chunked
        if isinstance(module, (ChunkedLaplacianAttention,
                               ChunkedLaplacianFormerBlock,
                               ChunkedLaplacianFormerStage)):
            module.chunk_tokens = chunk_tokens
    return model


def disable_cpu_inference(model: nn.Module) -> nn.Module:
    """Restore the plain modules in ``model``, in place (for export,
    profiling or a reference run). Returns ``model``."""
    for module in model.modules():
        plain = PLAIN_CLASSES.get(type(module))
        if plain is not None:
            module.__class__ = plain
            module.__dict__.pop('chunk_tokens', None)
            module.__dict__.pop('_folded_cache', None)
    return model
