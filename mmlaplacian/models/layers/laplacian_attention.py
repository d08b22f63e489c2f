"""Laplacian-kernel linear attention with a Nyström approximation."""
from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn as nn

from mmlaplacian.ops import newton_schulz_inverse
from .kernel_matrix import KERNELS, kernel_matrix
from .landmarks import landmark_grid, pool_landmarks

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
                 impl: str = 'auto') -> None:
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

    def _apply_feature_map(self, sim: torch.Tensor,
                           context: torch.Tensor) -> torch.Tensor:
        """``φ(sim) @ context`` without forming the whitened N×m matrix.

        ``((S - μ) ⊙ s) @ C = S @ (sᵀ ⊙ C) - (μ ⊙ s) @ C`` with per-column
        mean μ and scale ``s = 1/sqrt(σ² + δ)`` over the N tokens.
        """
        if self.feature_map == 'none':
            return sim @ context
        # Two passes: torch.var_mean along this strided axis is 1.2-5.8x
        # slower on CPU (measured at the stage 1-3 shapes).
        mean = sim.mean(dim=-2, keepdim=True)
        var = (sim - mean).square().mean(dim=-2, keepdim=True)
        scale = torch.rsqrt(var + self.whiten_eps)  # (B, h, 1, m)
        scaled_context = context * scale.transpose(-1, -2)
        return sim @ scaled_context - (mean * scale) @ context

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

    def forward(self, x: torch.Tensor, hw_shape: Tuple[int,
                                                        int]) -> torch.Tensor:
        """Attend over the tokens of an ``H × W`` grid.

        Args:
            x (Tensor): ``(B, N, C)`` tokens, ``N = H * W``.
            hw_shape (tuple[int, int]): ``(H, W)``.

        Returns:
            Tensor: ``(B, N, C)``.
        """
        batch, num_tokens, channels = x.shape
        height, width = hw_shape
        if num_tokens != height * width:
            raise ValueError(f'LaplacianAttention: {num_tokens} tokens do not '
                             f'fill a {height}x{width} grid')
        q = self._split_heads(self.q(x))
        k = q if self.share_qk else self._split_heads(self.k(x))
        v_tokens = self.v(x)
        v = self._split_heads(v_tokens)

        # exp(-|a-b|/λ) = exp(-|a/λ - b/λ|): scale once, kernels need no λ.
        inv_lam = torch.exp(-self.log_lam).to(q.dtype).view(1, -1, 1, 1)
        q_s = (q * inv_lam).contiguous()
        k_s = q_s if self.share_qk else (k * inv_lam).contiguous()
        grid = landmark_grid(hw_shape, self.num_landmarks)
        q_land = pool_landmarks(q_s, hw_shape, grid)
        k_land = q_land if self.share_qk else pool_landmarks(
            k_s, hw_shape, grid)

        sim_q = kernel_matrix(q_s, k_land, self.kernel, self.impl)
        sim_k = sim_q if self.share_qk else kernel_matrix(
            k_s, q_land, self.kernel, self.impl)
        landmark_mat = kernel_matrix(q_land, k_land, self.kernel, self.impl)
        inv = self._invert(landmark_mat)

        v32 = v.to(sim_k.dtype)
        context = sim_k.transpose(-1, -2) @ v32 / num_tokens  # (B,h,m,d)
        context = inv.to(context.dtype) @ context
        out = self._apply_feature_map(sim_q, context)
        out = out + v32.mean(dim=-2, keepdim=True)
        out = out.to(x.dtype).transpose(1, 2).reshape(batch, num_tokens,
                                                      channels)
        if self.dwconv is not None:
            # (B, N, C) tokens are a channels-last (B, C, H, W) map: no copy.
            v_map = v_tokens.reshape(batch, height, width,
                                     channels).permute(0, 3, 1, 2)
            out = out + self.dwconv(v_map).flatten(2).transpose(1, 2)
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'kernel={self.kernel}, feature_map={self.feature_map}, '
                f'inverse={self.inverse}, num_landmarks={self.num_landmarks}, '
                f'ns_iters={self.ns_iters}, eps={self.eps}, '
                f'share_qk={self.share_qk}')
