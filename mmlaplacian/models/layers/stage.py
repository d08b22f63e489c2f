"""One LaplacianFormer stage: downsample, position embedding, blocks, norm."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

from ..checkpoint import resize_pos_embed
from .landmarks import sizes_known_equal
from .transformer_block import LaplacianFormerBlock


class LaplacianFormerStage(nn.Module):
    """A stage at one stride: ``downsample → + pos_embed → blocks → norm``.

    Args:
        downsample (nn.Module): Brings the incoming map to this stage's
            stride and channels: the conv stem in stage 1, a stride-2 conv
            between stages. Its output is a fresh channels-last map.
        embed_dims (int): Channels C of this stage.
        depth (int): Blocks.
        num_heads (int): Attention heads.
        pos_embed_size (int): Side of the learned position-embedding grid
            (``pretrain_img_size / stride``); resized bilinearly to the
            actual grid, and on loading a checkpoint saved for another size.
        with_norm (bool): Whether the stage's output is used: a LayerNorm
            normalises it then. Defaults to True.
        drop_path_rates (Sequence[float], optional): Stochastic depth per
            block; zeros when None.
        drop (float): Dropout after the position embedding, in the FFNs and
            projections. Defaults to 0.
        with_cp (bool): Gradient checkpointing per block. Defaults to False.
        **block_kwargs: :class:`LaplacianFormerBlock` arguments
            (``mlp_ratio``, ``attention``, ``attn_cfg``).

    Raises:
        ValueError: When ``drop_path_rates`` does not hold ``depth`` rates.
    """

    def __init__(self,
                 downsample: nn.Module,
                 embed_dims: int,
                 depth: int,
                 num_heads: int,
                 pos_embed_size: int,
                 with_norm: bool = True,
                 drop_path_rates: Optional[Sequence[float]] = None,
                 drop: float = 0.,
                 with_cp: bool = False,
                 **block_kwargs) -> None:
        super().__init__()
        rates = list(drop_path_rates or [0.] * depth)
        if len(rates) != depth:
            raise ValueError(f'drop_path_rates needs {depth} entries, got '
                             f'{len(rates)}')
        self.downsample = downsample
        self.pos_embed = nn.Parameter(
            torch.zeros(1, embed_dims, pos_embed_size, pos_embed_size))
        self.pos_drop = nn.Dropout(drop)
        self.blocks = nn.ModuleList(
            LaplacianFormerBlock(
                embed_dims,
                num_heads,
                drop_path=rate,
                drop=drop,
                **block_kwargs) for rate in rates)
        self.norm = nn.LayerNorm(embed_dims) if with_norm else None
        self.with_cp = with_cp
        self._register_load_state_dict_pre_hook(self._resize_pos_embed_hook)

    def forward(
        self, x: torch.Tensor
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Run the stage on a ``(B, C_in, H, W)`` map.

        Returns:
            tuple: The stage's map ``(B, C, H', W')`` for the next stage (a
            channels-last view of the tokens) and its normalised output
            (contiguous NCHW), or None when ``with_norm`` is False.
        """
        x = self.downsample(x)
        hw_shape = (x.shape[2], x.shape[3])
        tokens = self.embed_tokens(x)
        # The blocks read the tokens only: without autograd the map's memory
        # is free for them.
        del x
        for block in self.blocks:
            if self.with_cp and tokens.requires_grad:
                tokens = cp.checkpoint(
                    block, tokens, hw_shape, use_reentrant=False)
            else:
                tokens = block(tokens, hw_shape)
        out = None if self.norm is None else self.output_map(tokens, hw_shape)
        return self.tokens_to_map(tokens, hw_shape), out

    def embed_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` map to ``(B, H*W, C)`` tokens + position
        embedding."""
        tokens = x.flatten(2).transpose(1, 2)
        return self.pos_drop(tokens + self.position_embedding(x.shape[2:]))

    def position_embedding(self, hw_shape: Sequence[int]) -> torch.Tensor:
        """The embedding resized to ``hw_shape``, as ``(1, H*W, C)``."""
        pos = self.pos_embed
        # Symbolic sizes (dynamic-shape export) are always resized: the
        # identity when they equal the table's.
        if not sizes_known_equal(pos.shape[-2:], hw_shape):
            # Channels-last in, channels-last out: the (1, N, C) token view
            # of the resized table is then contiguous.
            pos = F.interpolate(
                pos.contiguous(memory_format=torch.channels_last),
                size=tuple(hw_shape),
                mode='bilinear',
                align_corners=False)
        return pos.flatten(2).transpose(1, 2)

    def output_map(self, tokens: torch.Tensor,
                   hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Normalised tokens as a contiguous NCHW map."""
        return self.tokens_to_map(self.norm(tokens), hw_shape).contiguous()

    @staticmethod
    def tokens_to_map(tokens: torch.Tensor,
                      hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``(B, H*W, C)`` tokens viewed as a channels-last ``(B, C, H, W)``
        map (no copy)."""
        batch, _, channels = tokens.shape
        return tokens.reshape(batch, *hw_shape, channels).permute(0, 3, 1, 2)

    def _resize_pos_embed_hook(self, state_dict, prefix, *args,
                               **kwargs) -> None:
        """Resize a position embedding saved on another grid (bilinear)."""
        key = f'{prefix}pos_embed'
        saved = state_dict.get(key)
        if saved is None or saved.shape == self.pos_embed.shape:
            return
        if saved.ndim != 4 or saved.shape[1] != self.pos_embed.shape[1]:
            return  # left to load_state_dict to report the mismatch
        state_dict[key] = resize_pos_embed(saved, self.pos_embed.shape[-2:])

