"""Stages and blocks that run their token-wise passes in chunks (CPU
inference)."""
from __future__ import annotations

from typing import Tuple

import torch

from ..layers.stage import LaplacianFormerStage
from ..layers.transformer_block import LaplacianFormerBlock
from .token_chunks import (DEFAULT_CHUNK_TOKENS, cpu_inference_active,
                           token_spans, use_chunks)


class ChunkedLaplacianFormerBlock(LaplacianFormerBlock):
    """:class:`LaplacianFormerBlock` whose FFN half runs over chunks of
    tokens, updating the block's own tensor in place, and whose attention
    adds the residual itself (no extra N×C tensor).

    Attributes:
        chunk_tokens (int): Tokens per chunk.
    """
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        # DropPath drops a whole sample's branch: not chunkable when active.
        drop_path_active = self.training and self.drop_path.drop_prob > 0
        if drop_path_active or not use_chunks(x, self.chunk_tokens):
            return super().forward(x, hw_shape)
        x = self.attn(self.norm1(x), hw_shape, identity=x)
        # x is now this block's own tensor, and nothing records gradients.
        for start, end in token_spans(x.shape[1], self.chunk_tokens):
            part = x[:, start:end]
            x[:, start:end] = self.ffn(self.norm2(part), identity=part)
        return x


class ChunkedLaplacianFormerStage(LaplacianFormerStage):
    """:class:`LaplacianFormerStage` that adds the position embedding in
    place (the downsample's output is fresh) and normalises its output a band
    of rows at a time, written straight into the NCHW map.

    Attributes:
        chunk_tokens (int): Tokens per band of the output norm.
    """
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS

    def embed_tokens(self, x: torch.Tensor) -> torch.Tensor:
        if not cpu_inference_active(x):
            return super().embed_tokens(x)
        # A view: the downsample writes channels-last maps.
        tokens = x.flatten(2).transpose(1, 2)
        tokens += self.position_embedding(x.shape[2:])
        return self.pos_drop(tokens)

    def output_map(self, tokens: torch.Tensor,
                   hw_shape: Tuple[int, int]) -> torch.Tensor:
        if not use_chunks(tokens, self.chunk_tokens):
            return super().output_map(tokens, hw_shape)
        batch, _, channels = tokens.shape
        height, width = hw_shape
        out = tokens.new_empty(batch, channels, height, width)
        rows = max(1, self.chunk_tokens // width)
        for top in range(0, height, rows):
            bottom = min(top + rows, height)
            band = self.norm(tokens[:, top * width:bottom * width])
            out[:, :, top:bottom] = self.tokens_to_map(band,
                                                       (bottom - top, width))
        return out
