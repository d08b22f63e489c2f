"""Laplacian-kernel linear attention with a Nyström approximation."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn

from mmlaplacian.ops import newton_schulz_inverse
from .chunking import ColumnMoments, token_spans
from .kernel_matrix import KERNELS, kernel_matrix
from .landmarks import landmark_grid, pool_landmarks

FEATURE_MAPS = ('whiten', 'none')
INVERSES = ('newton', 'exact')
MODES = ('auto', 'full', 'chunked')
# Tokens per chunk: a stage-1 chunk's similarities (2 heads x 49 landmarks)
# and its block's MLP hidden activations stay within ~2 MB, in cache.
DEFAULT_CHUNK_TOKENS = 2048


class LaplacianAttention(nn.Module):
    """Linear attention with the Laplacian kernel ``exp(-||q - k||_1 / λ)``.

    Queries ``q = x Wq`` (and keys ``k = x Wk``, or ``k = q`` when shared)
    are compared with landmarks ``q~, k~``, their averages over the cells of
    an at most ``num_landmarks``-cell grid; the landmark kernel matrix
    ``A = W + εI`` is inverted by ``ns_iters`` Newton–Schulz steps
    ``X ← 2X − X A X``, and the query similarities are whitened per sample
    (an injective feature map)::

        Kq = k(q, k~)   Kk = k(k, q~)   W = k(q~, k~)   X = (W + εI)^-1
        Z  = (Kq - mean_N Kq) / sqrt(var_N Kq + δ)
        Y  = proj(Z · (X · (Kkᵀ V / N)) + mean_N V + DWConv(V))

    Means over the N tokens (not sums) make the output resolution-consistent,
    and per-sample statistics make train and eval identical. Time is
    ``O(N·m·d + m³·iters)`` and memory ``O(N·m)``: no N×N tensor is formed.

    Two forms compute ``Y``, and ``mode`` picks one:

    - ``'full'``: the N×m matrices ``Kq``, ``Kk`` at once. Differentiable,
      and its graph does not depend on the input size: training, GPUs,
      tracing and export.
    - ``'chunked'``: two passes over chunks of ``chunk_tokens`` tokens; the
      first gathers ``Kkᵀ V``, ``Σ V`` and the column moments of ``Kq``, the
      second recomputes each chunk's ``Kq`` and writes its rows of ``Y``.
      The N×m matrices never exist. Without autograd only (it saves no
      activations).
    - ``'auto'``: ``'chunked'`` when autograd is off, ``x`` is on the CPU,
      nothing traces, compiles or exports the model, and ``x`` holds more
      than ``chunk_tokens`` tokens; ``'full'`` otherwise.

    Both give the same output up to float rounding. The block around the
    attention (:class:`LaplacianFormerBlock`) follows its form.

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
        whiten_eps (float): δ >= 0 in the whitening. Defaults to 1e-5.
        inverse (str): ``'newton'`` (Newton–Schulz) or ``'exact'``
            (``torch.linalg.inv``). Defaults to ``'newton'``.
        ns_iters (int): Newton–Schulz iterations. Defaults to 20.
        eps (float): ε >= 0 added to the landmark matrix diagonal. Defaults
            to 1e-2.
        conv_kernel_size (int): Depthwise conv kernel on V; 0 disables it.
            Defaults to 3.
        qkv_bias (bool): Bias in the q/k/v projections. Defaults to True.
        proj_drop (float): Dropout after the output projection.
        impl (str): Fused-op implementation (``'auto'``, ``'cpp'``,
            ``'cuda'`` or ``'pytorch'``). Defaults to ``'auto'``.
        mode (str): ``'auto'``, ``'full'`` or ``'chunked'`` (above).
            Defaults to ``'auto'``.
        chunk_tokens (int): Tokens per chunk of the chunked form. Defaults
            to 2048.

    Raises:
        ValueError: On a setting outside its range (named in the message).

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
                 mode: str = 'auto',
                 chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> None:
        super().__init__()
        _check_settings(embed_dims, num_heads, kernel, feature_map, inverse,
                        lam, num_landmarks, whiten_eps, eps, ns_iters,
                        conv_kernel_size, mode, chunk_tokens)
        self.mode = mode
        self.chunk_tokens = chunk_tokens
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

    def forward(self,
                x: torch.Tensor,
                hw_shape: Tuple[int, int],
                identity: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attend over the tokens of an ``H × W`` grid.

        Args:
            x (Tensor): ``(B, N, C)`` tokens, ``N = H * W``.
            hw_shape (tuple[int, int]): ``(H, W)``.
            identity (Tensor, optional): ``(B, N, C)`` added to the output
                (the residual branch, as in mmcv's ``MultiheadAttention``).

        Returns:
            Tensor: ``(B, N, C)``.

        Raises:
            ValueError: When ``x`` does not hold ``H * W`` tokens.
            RuntimeError: In ``'chunked'`` mode with autograd enabled.
        """
        if x.ndim != 3 or x.shape[1] != hw_shape[0] * hw_shape[1]:
            raise ValueError(
                f'LaplacianAttention: tokens {tuple(x.shape)} do not fill a '
                f'{hw_shape[0]}x{hw_shape[1]} grid (expected (B, H*W, C))')
        if self.runs_chunked(x):
            return self._forward_chunked(x, hw_shape, identity)
        return self._forward_full(x, hw_shape, identity)

    def runs_chunked(self, x: torch.Tensor) -> bool:
        """Whether the forward on ``x (B, N, C)`` takes the chunked form.

        Raises:
            RuntimeError: In ``'chunked'`` mode with autograd enabled.
        """
        if self.mode == 'chunked':
            if torch.is_grad_enabled():
                raise RuntimeError(
                    "LaplacianAttention: mode='chunked' runs without "
                    'autograd only (under torch.no_grad() or '
                    "torch.inference_mode()); use mode='auto' or 'full' "
                    'with autograd')
            return True
        return (self.mode == 'auto' and not torch.is_grad_enabled()
                and x.device.type == 'cpu' and not _tracing()
                and x.shape[1] > self.chunk_tokens)

    def _forward_full(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                      identity: Optional[torch.Tensor]) -> torch.Tensor:
        """The full form: every N×m similarity matrix at once."""
        q, k, v, q_land, k_land, inverse = self._prepare(x, hw_shape)
        sim_q = self._similarity(q, k_land)  # Kq (B, h, N, m)
        sim_k = sim_q if self.share_qk else self._similarity(k, q_land)
        v_heads = self._split_heads(v).to(sim_k.dtype)
        # X · (Kkᵀ V / N): the landmarks' summary of the values, (B, h, m, d).
        context = inverse.to(sim_k.dtype) @ (
            sim_k.transpose(-1, -2) @ v_heads / v_heads.shape[-2])
        v_mean = v_heads.mean(dim=-2, keepdim=True)
        if self.feature_map == 'whiten':
            mean = sim_q.mean(dim=-2, keepdim=True)
            var = sim_q.var(dim=-2, unbiased=False, keepdim=True)
        else:
            mean = var = None
        weights, bias = self._readout(context, v_mean, mean, var)
        out = self._output(sim_q, weights, bias, x.dtype)
        if self.dwconv is not None:
            out = out + self._local_context(v, hw_shape)
        out = self.proj_drop(self.proj(out))
        return out if identity is None else identity + out

    def _forward_chunked(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                         identity: Optional[torch.Tensor]) -> torch.Tensor:
        """The chunked form, in two passes over chunks of tokens.

        Pass 1 gathers ``Kkᵀ V``, the sum of V and the column moments of
        ``Kq`` chunk by chunk; pass 2 recomputes each chunk's similarities
        and writes its output and residual. The N×m matrices never exist.
        """
        num_tokens = x.shape[1]
        q, k, v, q_land, k_land, inverse = self._prepare(x, hw_shape)
        spans = list(token_spans(num_tokens, self.chunk_tokens))

        kv, v_sum, moments = 0, 0, None
        for start, end in spans:
            sim_q = self._similarity(q[:, start:end], k_land)
            sim_k = sim_q if self.share_qk else self._similarity(
                k[:, start:end], q_land)
            v_part = self._split_heads(v[:, start:end]).to(sim_k.dtype)
            kv = kv + sim_k.transpose(-1, -2) @ v_part
            v_sum = v_sum + v_part.sum(dim=-2, keepdim=True)
            if self.feature_map == 'whiten':
                moments = ColumnMoments.of(sim_q).merge(moments)
        context = inverse.to(kv.dtype) @ (kv / num_tokens)
        mean, var = (None, None) if moments is None else (moments.mean,
                                                          moments.var)
        weights, bias = self._readout(context, v_sum / num_tokens, mean, var)

        local = None if self.dwconv is None else self._local_context(
            v, hw_shape)
        out = x.new_empty(x.shape)
        for start, end in spans:
            part = self._output(
                self._similarity(q[:, start:end], k_land), weights, bias,
                x.dtype)
            if local is not None:
                part += local[:, start:end]
            part = self.proj_drop(self.proj(part))
            if identity is not None:
                part += identity[:, start:end]
            out[:, start:end] = part
        return out

    def _prepare(self, x: torch.Tensor, hw_shape: Tuple[int, int]):
        """What both forms start from: the projections ``q, k, v`` (B, N, C;
        ``k`` is ``q`` when shared), the 1/λ-scaled landmarks ``q~, k~``
        (B, h, m, d) and the landmark inverse ``X`` (B, h, m, m)."""
        q = self.q(x)
        k = q if self.share_qk else self.k(x)
        v = self.v(x)
        q_land, k_land = self._landmarks(q, k, hw_shape)
        return q, k, v, q_land, k_land, self._landmark_inverse(q_land, k_land)

    def _inv_lam(self, dtype: torch.dtype) -> torch.Tensor:
        """``1/λ`` per head. ``exp(-|a-b|/λ) = exp(-|a/λ - b/λ|)``: scaled
        inputs need no λ in the kernels, and a learnable λ gets its gradient
        through the scaling."""
        return torch.exp(-self.log_lam).to(dtype)

    def _landmarks(self, q: torch.Tensor, k: torch.Tensor,
                   hw_shape: Tuple[int, int]):
        """Pooled, 1/λ-scaled landmarks ``q~, k~`` of shape (B, h, m, d)."""
        grid = landmark_grid(hw_shape, self.num_landmarks)
        inv_lam = self._inv_lam(q.dtype).view(1, -1, 1, 1)
        q_land = pool_landmarks(q, hw_shape, grid, self.num_heads) * inv_lam
        if self.share_qk:
            return q_land, q_land
        k_land = pool_landmarks(k, hw_shape, grid, self.num_heads) * inv_lam
        return q_land, k_land

    def _landmark_inverse(self, q_land: torch.Tensor,
                          k_land: torch.Tensor) -> torch.Tensor:
        """``X = (W + εI)^-1`` with ``W = k(q~, k~)``, (B, h, m, m)."""
        mat = kernel_matrix(q_land, k_land, self.kernel, self.impl)
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

    def _similarity(self, tokens: torch.Tensor,
                    landmarks: torch.Tensor) -> torch.Tensor:
        """Kernel between ``tokens (B, n, C)`` (scaled by 1/λ here) and the
        scaled ``landmarks (B, h, m, d)``: ``(B, h, n, m)``."""
        inv_lam = self._inv_lam(tokens.dtype).repeat_interleave(
            self.head_dims)
        return kernel_matrix(
            self._split_heads(tokens * inv_lam), landmarks, self.kernel,
            self.impl)

    def _readout(self, context: torch.Tensor, v_mean: torch.Tensor,
                 mean: Optional[torch.Tensor], var: Optional[torch.Tensor]):
        """``(weights, bias)`` with ``Z · context + mean_N V = Kq · weights +
        bias``.

        With the whitening scale ``s = 1/sqrt(σ² + δ)``,
        ``Z·C = Kq·(sᵀ ⊙ C) − (μ ⊙ s)·C``: the whitened N×m matrix is never
        formed. Without whitening, ``Z = Kq``.
        """
        if mean is None:
            return context, v_mean
        scale = torch.rsqrt(var + self.whiten_eps)  # (B, h, 1, m)
        weights = context * scale.transpose(-1, -2)
        return weights, v_mean - (mean * scale) @ context

    def _output(self, sim_q: torch.Tensor, weights: torch.Tensor,
                bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``Kq · weights + bias`` with the heads merged: ``(B, n, C)``."""
        batch, heads, num_tokens, num_landmarks = sim_q.shape
        out = torch.baddbmm(
            bias.reshape(batch * heads, 1, self.head_dims),
            sim_q.reshape(batch * heads, num_tokens, num_landmarks),
            weights.reshape(batch * heads, num_landmarks, self.head_dims))
        return out.to(dtype).reshape(batch, heads, num_tokens,
                                     self.head_dims).transpose(1, 2).reshape(
                                         batch, num_tokens, self.embed_dims)

    def _local_context(self, v: torch.Tensor,
                       hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``DWConv(V)`` as ``(B, N, C)`` tokens."""
        batch, num_tokens, channels = v.shape
        # (B, N, C) tokens are a channels-last (B, C, H, W) map: no copy.
        v_map = v.reshape(batch, *hw_shape, channels).permute(0, 3, 1, 2)
        return self.dwconv(v_map).permute(0, 2, 3,
                                          1).reshape(batch, num_tokens,
                                                     channels)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, num_tokens, _ = x.shape
        return x.reshape(batch, num_tokens, self.num_heads,
                         self.head_dims).transpose(1, 2)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'kernel={self.kernel}, feature_map={self.feature_map}, '
                f'inverse={self.inverse}, num_landmarks={self.num_landmarks}, '
                f'ns_iters={self.ns_iters}, eps={self.eps}, '
                f'share_qk={self.share_qk}, mode={self.mode}')


def _tracing() -> bool:
    """Whether TorchScript, the ONNX exporter or a PyTorch compiler
    (``torch.compile``, ``torch.export``) is tracing the model."""
    return (torch.jit.is_tracing() or torch.jit.is_scripting()
            or torch.onnx.is_in_onnx_export()
            or torch.compiler.is_compiling())


def _check_settings(embed_dims: int, num_heads: int, kernel: str,
                    feature_map: str, inverse: str, lam: float,
                    num_landmarks: int, whiten_eps: float, eps: float,
                    ns_iters: int, conv_kernel_size: int, mode: str,
                    chunk_tokens: int) -> None:
    """Raise a ValueError naming the first setting outside its range."""
    problems = [
        (embed_dims % num_heads != 0,
         f'embed_dims ({embed_dims}) must be divisible by num_heads '
         f'({num_heads})'),
        (kernel not in KERNELS,
         f'kernel must be one of {KERNELS}, got {kernel!r}'),
        (feature_map not in FEATURE_MAPS,
         f'feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}'),
        (inverse not in INVERSES,
         f'inverse must be one of {INVERSES}, got {inverse!r}'),
        (not lam > 0, f'lam must be positive, got {lam}'),
        (num_landmarks < 1, f'num_landmarks must be >= 1, got {num_landmarks}'),
        (not whiten_eps >= 0, f'whiten_eps must be >= 0, got {whiten_eps}'),
        (not eps >= 0, f'eps must be >= 0, got {eps}'),
        (ns_iters < 1, f'ns_iters must be >= 1, got {ns_iters}'),
        (conv_kernel_size < 0 or (conv_kernel_size > 0
                                  and conv_kernel_size % 2 == 0),
         'conv_kernel_size must be 0 or odd (same-size output), got '
         f'{conv_kernel_size}'),
        (mode not in MODES, f'mode must be one of {MODES}, got {mode!r}'),
        (chunk_tokens < 1,
         f'chunk_tokens must be >= 1, got {chunk_tokens}'),
    ]
    for failed, message in problems:
        if failed:
            raise ValueError(f'LaplacianAttention: {message}')
