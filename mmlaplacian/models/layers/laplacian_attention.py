"""Laplacian-kernel linear attention with a Nyström approximation."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn

from mmlaplacian.ops import newton_schulz_inverse
from .kernel_matrix import KERNELS, kernel_matrix
from .landmarks import landmark_grid, pool_landmarks
from .token_chunks import (DEFAULT_CHUNK_TOKENS, ColumnMoments, token_spans,
                           use_chunks)

FEATURE_MAPS = ('whiten', 'none')
INVERSES = ('newton', 'exact')


class LaplacianAttention(nn.Module):
    """Linear attention with the Laplacian kernel ``exp(-||q - k||_1 / λ)``.

    Queries are compared with pooled landmarks, the landmark kernel matrix is
    inverted by Newton–Schulz iteration, and the query similarities are
    whitened per sample (an injective feature map)::

        Kq = k(q, k~)   Kk = k(k, q~)   W = k(q~, k~)   X = (W + εI)^-1
        Z  = (Kq - mean_N Kq) / sqrt(var_N Kq + δ)
        Y  = Z · (X · (Kkᵀ V / N)) + mean_N V + DWConv(V)

    Means over the N tokens (not sums) make the output resolution-consistent,
    and per-sample statistics make train and eval identical. Time is
    ``O(N·m·d + m³·iters)`` and memory ``O(N·m)``: no N×N tensor is formed.

    On the CPU without autograd (inference) the tokens run in chunks of
    ``inference_chunk_tokens``: a first pass gathers the column moments of
    ``Kq`` and ``Kkᵀ V``, a second recomputes each chunk's similarities and
    writes its output. The N×m matrices never exist, and every pass works in
    cache, which keeps the time linear at detection resolution.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads h; each has ``C / h`` channels.
        share_qk (bool): Use the queries as keys. With it W is symmetric
            positive definite. Defaults to True.
        kernel (str): ``'laplacian'`` or ``'gaussian'`` (SOFT). Defaults to
            ``'laplacian'``.
        lam (float): Kernel bandwidth λ > 0. Defaults to 4.
        learnable_lam (bool): Learn one λ per head (stored as log λ).
            Defaults to False.
        num_landmarks (int): Upper bound on the landmarks m. Defaults to 49.
        feature_map (str): ``'whiten'`` or ``'none'``. Defaults to
            ``'whiten'``.
        whiten_eps (float): δ in the whitening. Defaults to 1e-5.
        inverse (str): ``'newton'`` (Newton–Schulz) or ``'exact'``
            (``torch.linalg.inv``). Defaults to ``'newton'``.
        ns_iters (int): Newton–Schulz iterations. Defaults to 20.
        eps (float): ε added to the landmark matrix diagonal. Defaults to
            1e-2.
        conv_kernel_size (int): Depthwise conv kernel on V; 0 disables it.
            Defaults to 3.
        qkv_bias (bool): Bias in the q/k/v projections. Defaults to True.
        proj_drop (float): Dropout after the output projection.
        impl (str): Fused-op implementation (``'auto'``, ``'cpp'``,
            ``'cuda'`` or ``'pytorch'``). Defaults to ``'auto'``.
        inference_chunk_tokens (int): Tokens per chunk on the CPU without
            autograd; 0 processes all tokens at once. Results agree to float rounding.
            Defaults to 2048.

    Example:
        >>> attn = LaplacianAttention(64, num_heads=2)
        >>> x = torch.rand(2, 14 * 18, 64)
        >>> attn(x, (14, 18)).shape
        torch.Size([2, 252, 64])
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 share_qk: bool = True,
                 kernel: str = 'laplacian',
                 lam: float = 4.0,
                 learnable_lam: bool = False,
                 num_landmarks: int = 49,
                 feature_map: str = 'whiten',
                 whiten_eps: float = 1e-5,
                 inverse: str = 'newton',
                 ns_iters: int = 20,
                 eps: float = 1e-2,
                 conv_kernel_size: int = 3,
                 qkv_bias: bool = True,
                 proj_drop: float = 0.,
                 impl: str = 'auto',
                 inference_chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> None:
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible '
                             f'by num_heads ({num_heads})')
        if kernel not in KERNELS:
            raise ValueError(f'kernel must be one of {KERNELS}, got {kernel!r}')
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f'feature_map must be one of {FEATURE_MAPS}, '
                             f'got {feature_map!r}')
        if inverse not in INVERSES:
            raise ValueError(
                f'inverse must be one of {INVERSES}, got {inverse!r}')
        if lam <= 0:
            raise ValueError(f'lam must be positive, got {lam}')
        if num_landmarks < 1:
            raise ValueError(
                f'num_landmarks must be >= 1, got {num_landmarks}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.share_qk = share_qk
        self.kernel = kernel
        self.num_landmarks = num_landmarks
        self.feature_map = feature_map
        self.whiten_eps = whiten_eps
        self.inverse = inverse
        self.ns_iters = ns_iters
        self.eps = eps
        self.impl = impl
        self.inference_chunk_tokens = inference_chunk_tokens

        log_lam = torch.full((num_heads, ), math.log(lam))
        if learnable_lam:
            self.log_lam = nn.Parameter(log_lam)
        else:
            self.register_buffer('log_lam', log_lam, persistent=False)

        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.k = None if share_qk else nn.Linear(
            embed_dims, embed_dims, bias=qkv_bias)
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.dwconv = None
        if conv_kernel_size > 0:
            self.dwconv = nn.Conv2d(
                embed_dims,
                embed_dims,
                conv_kernel_size,
                padding=conv_kernel_size // 2,
                groups=embed_dims)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, num_tokens, _ = x.shape
        return x.reshape(batch, num_tokens, self.num_heads,
                         self.head_dims).transpose(1, 2)

    def _similarity(self, tokens: torch.Tensor, inv_lam: torch.Tensor,
                    landmarks: torch.Tensor, start: int,
                    end: int) -> torch.Tensor:
        """Kernel between tokens ``[start, end)`` (scaled by 1/λ here, one
        chunk at a time) and the scaled landmarks."""
        scaled = tokens[:, start:end] * inv_lam
        return kernel_matrix(
            self._split_heads(scaled), landmarks, self.kernel, self.impl)

    def _invert(self, mat: torch.Tensor) -> torch.Tensor:
        batch, heads, m, _ = mat.shape
        eye = torch.eye(m, dtype=mat.dtype, device=mat.device)
        mat = (mat + self.eps * eye).reshape(batch * heads, m, m)
        if self.inverse == 'exact':
            # At least fp32: half precision cannot invert these matrices.
            inv = torch.linalg.inv(
                mat if mat.dtype == torch.float64 else mat.float())
        else:
            inv = newton_schulz_inverse(
                mat, num_iters=self.ns_iters, impl=self.impl)
        return inv.reshape(batch, heads, m, m)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Tuple[int, int],
                identity: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attend over the tokens of an ``H × W`` grid.

        Args:
            x (Tensor): ``(B, N, C)`` tokens, ``N = H * W``.
            hw_shape (tuple[int, int]): ``(H, W)``.
            identity (Tensor, optional): ``(B, N, C)`` added to the output
                (the residual branch, as in mmcv's ``MultiheadAttention``);
                in chunked inference it is added chunk by chunk.

        Returns:
            Tensor: ``(B, N, C)``.
        """
        batch, num_tokens, channels = x.shape
        height, width = hw_shape
        if num_tokens != height * width:
            raise ValueError(f'LaplacianAttention: {num_tokens} tokens do not '
                             f'fill a {height}x{width} grid')
        q_tokens = self.q(x)
        k_tokens = q_tokens if self.share_qk else self.k(x)
        v_tokens = self.v(x)
        # exp(-|a-b|/λ) = exp(-|a/λ - b/λ|): scaled inputs, kernels need no
        # λ, and a learnable λ gets its gradient through the scaling.
        inv_lam = torch.exp(-self.log_lam).to(q_tokens.dtype)
        inv_lam_channels = inv_lam.repeat_interleave(self.head_dims)

        grid = landmark_grid(hw_shape, self.num_landmarks)
        inv_lam_heads = inv_lam.view(1, -1, 1, 1)
        q_land = pool_landmarks(q_tokens, hw_shape, grid,
                                self.num_heads) * inv_lam_heads
        k_land = q_land if self.share_qk else pool_landmarks(
            k_tokens, hw_shape, grid, self.num_heads) * inv_lam_heads
        inv = self._invert(
            kernel_matrix(q_land, k_land, self.kernel, self.impl))

        chunked = use_chunks(x, self.inference_chunk_tokens)
        spans = list(
            token_spans(num_tokens,
                        self.inference_chunk_tokens if chunked else 0))

        # Pass 1: Kkᵀ V, the column moments of Kq and the sum of V.
        context, v_sum, moments, sim_q = 0, 0, None, None
        for start, end in spans:
            sim_q = self._similarity(q_tokens, inv_lam_channels, k_land,
                                     start, end)
            sim_k = sim_q if self.share_qk else self._similarity(
                k_tokens, inv_lam_channels, q_land, start, end)
            v = self._split_heads(v_tokens[:, start:end]).to(sim_k.dtype)
            context = context + sim_k.transpose(-1, -2) @ v
            v_sum = v_sum + v.sum(dim=-2, keepdim=True)
            if self.feature_map == 'whiten':
                moments = ColumnMoments.of(sim_q).merge(moments)
        context = inv.to(context.dtype) @ (context / num_tokens)  # (B,h,m,d)

        # φ(Kq)·C = Kq·(s ⊙ C) + (mean_N V − (μ ⊙ s)·C), with the whitening
        # scale s = 1/sqrt(σ² + δ): the whitened N×m matrix is never formed.
        weights, bias = context, v_sum / num_tokens
        if moments is not None:
            scale = torch.rsqrt(moments.var + self.whiten_eps)  # (B,h,1,m)
            weights = context * scale.transpose(-1, -2)
            bias = bias - (moments.mean * scale) @ context

        dw_tokens = None
        if self.dwconv is not None:
            # (B, N, C) tokens are a channels-last (B, C, H, W) map: no copy.
            v_map = v_tokens.reshape(batch, height, width,
                                     channels).permute(0, 3, 1, 2)
            dw_tokens = self.dwconv(v_map).permute(0, 2, 3, 1).reshape(
                batch, num_tokens, channels)

        # Pass 2: outputs, reusing the similarities when there is one chunk.
        if not chunked:
            out = self._output(sim_q, weights, bias, dw_tokens, x.dtype)
            return out if identity is None else identity + out
        out = x.new_empty(batch, num_tokens, channels)
        for start, end in spans:
            sim_q = self._similarity(q_tokens, inv_lam_channels, k_land,
                                     start, end)
            part = self._output(
                sim_q, weights, bias,
                None if dw_tokens is None else dw_tokens[:, start:end],
                x.dtype)
            if identity is not None:
                part += identity[:, start:end]
            out[:, start:end] = part
        return out

    def _output(self, sim_q: torch.Tensor, weights: torch.Tensor,
                bias: torch.Tensor, dw_tokens: Optional[torch.Tensor],
                dtype: torch.dtype) -> torch.Tensor:
        """``proj(Kq·weights + bias + DWConv(V))`` for one span of tokens."""
        batch, heads, num_tokens, num_landmarks = sim_q.shape
        out = torch.baddbmm(
            bias.reshape(batch * heads, 1, self.head_dims),
            sim_q.reshape(batch * heads, num_tokens, num_landmarks),
            weights.reshape(batch * heads, num_landmarks, self.head_dims))
        out = out.to(dtype).reshape(batch, heads, num_tokens,
                                    self.head_dims).transpose(1, 2).reshape(
                                        batch, num_tokens, self.embed_dims)
        if dw_tokens is not None:
            out = out + dw_tokens
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'kernel={self.kernel}, feature_map={self.feature_map}, '
                f'inverse={self.inverse}, num_landmarks={self.num_landmarks}, '
                f'ns_iters={self.ns_iters}, eps={self.eps}, '
                f'share_qk={self.share_qk}')
