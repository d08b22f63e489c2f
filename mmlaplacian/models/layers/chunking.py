"""Full and chunked forms of a forward pass, and the mode that picks one.

At detection resolution a stage-1 tensor (268,800 tokens at 1600×2688) is
far larger than a CPU's last-level cache, so every elementwise pass over it
runs at DRAM speed. Without autograd the per-token work of the attention,
the FFNs, the output norms and the stem can run over chunks of tokens (bands
of rows) that stay in cache; only small per-chunk summaries (sums, moments,
``Kᵀ V``) cross chunks. Each such module computes the same function in a
*full* form (one pass over all tokens, differentiable, traceable) and a
*chunked* one, and its ``mode`` picks the form:

- ``'full'``: always the full form.
- ``'chunked'``: the chunked form; autograd must be off (it writes its
  output in place and saves no activations).
- ``'auto'``: the chunked form on the CPU without autograd, when nothing
  traces, compiles or exports the model and the input holds more than one
  chunk; the full form otherwise (training, GPUs, export).
"""
from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn

MODES = ('auto', 'full', 'chunked')
# Tokens per chunk: a stage-1 chunk's similarities (2 heads x 49 landmarks)
# and a stage-1 MLP chunk's hidden activations stay within ~2 MB.
DEFAULT_CHUNK_TOKENS = 2048


class ChunkedForms:
    """Mixin for a module whose forward has a full and a chunked form.

    Attributes:
        mode (str): ``'auto'``, ``'full'`` or ``'chunked'`` (module doc).
        chunk_tokens (int): Tokens per chunk of the chunked form.
    """
    mode: str = 'auto'
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS

    def set_mode(self, mode: str, chunk_tokens: Optional[int] = None) -> None:
        """Set the mode, and the chunk size unless ``chunk_tokens`` is None.

        Raises:
            ValueError: For an unknown mode or a chunk size below 1.
        """
        if mode not in MODES:
            raise ValueError(f'{type(self).__name__}: mode must be one of '
                             f'{MODES}, got {mode!r}')
        if chunk_tokens is not None:
            if chunk_tokens < 1:
                raise ValueError(
                    f'{type(self).__name__}: chunk_tokens must be positive, '
                    f"got {chunk_tokens}; mode='full' never chunks")
            self.chunk_tokens = int(chunk_tokens)
        self.mode = mode

    def runs_chunked(self,
                     tensor: torch.Tensor,
                     num_items: Optional[int] = None,
                     per_chunk: Optional[int] = None) -> bool:
        """Whether the forward on ``tensor`` takes the chunked form.

        Args:
            tensor (Tensor): The forward's input.
            num_items (int, optional): Tokens (or rows) of the input.
                ``'auto'`` keeps the full form when they fit one chunk;
                None skips that check.
            per_chunk (int, optional): Tokens (or rows) per chunk; defaults
                to ``chunk_tokens``.

        Raises:
            RuntimeError: In ``'chunked'`` mode with autograd enabled.
        """
        if self.mode == 'full':
            return False
        if self.mode == 'chunked':
            if torch.is_grad_enabled():
                raise RuntimeError(
                    f"{type(self).__name__}: mode='chunked' runs without "
                    'autograd only (under torch.no_grad() or '
                    "torch.inference_mode()); use mode='auto' or 'full' "
                    'with autograd')
            return True
        if not cpu_inference_active(tensor):
            return False
        per_chunk = self.chunk_tokens if per_chunk is None else per_chunk
        return num_items is None or 0 < per_chunk < num_items


def set_inference_mode(model: nn.Module,
                       mode: str,
                       chunk_tokens: Optional[int] = None) -> nn.Module:
    """Set the mode of every module with a chunked form in ``model``.

    Args:
        model (nn.Module): A backbone, or any model that holds one.
        mode (str): ``'auto'``, ``'full'`` or ``'chunked'``.
        chunk_tokens (int, optional): Tokens per chunk; None keeps each
            module's.

    Returns:
        nn.Module: ``model`` itself.

    Raises:
        ValueError: For an unknown mode or a chunk size below 1.

    Example:
        >>> set_inference_mode(model, 'full')  # e.g. for a reference run
    """
    for module in model.modules():
        if isinstance(module, ChunkedForms):
            module.set_mode(mode, chunk_tokens)
    return model


def cpu_inference_active(tensor: torch.Tensor) -> bool:
    """Whether ``'auto'`` may take the chunked form for ``tensor``.

    Only without autograd (chunks would not save activations), only on the
    CPU (a GPU wants few large kernels, and its caches are not the limit),
    and never while the model is traced, compiled or exported: those see the
    full form, whose graph does not depend on the input size.
    """
    return (not torch.is_grad_enabled() and tensor.device.type == 'cpu'
            and not _tracing())


def _tracing() -> bool:
    compiler = getattr(torch, 'compiler', None)
    return (torch.jit.is_tracing() or torch.jit.is_scripting()
            or torch.onnx.is_in_onnx_export()
            or bool(compiler and compiler.is_compiling()))


def token_spans(num_tokens: int, chunk: int) -> Iterator[Tuple[int, int]]:
    """``(start, end)`` of consecutive chunks covering ``range(num_tokens)``.

    Args:
        num_tokens (int): Tokens to cover.
        chunk (int): Tokens per chunk; ``<= 0`` means one chunk.
    """
    if chunk <= 0:
        chunk = max(num_tokens, 1)
    for start in range(0, num_tokens, chunk):
        yield start, min(start + chunk, num_tokens)


class ColumnMoments(NamedTuple):
    """Count, mean and sum of squared deviations along dim -2.

    Merged across chunks with Chan et al.'s pairwise update
    ``μ = μa + δ·nb/n``, ``M2 = M2a + M2b + δ²·na·nb/n`` (``δ = μb − μa``),
    which keeps the accuracy of a two-pass variance (no ``E[x²] − E[x]²``
    cancellation).
    """
    count: int
    mean: torch.Tensor
    m2: torch.Tensor

    @classmethod
    def of(cls, values: torch.Tensor) -> 'ColumnMoments':
        """Moments of ``values (..., n, m)`` over its ``n`` rows."""
        mean = values.mean(dim=-2, keepdim=True)
        m2 = (values - mean).square().sum(dim=-2, keepdim=True)
        return cls(values.shape[-2], mean, m2)

    def merge(self, other: Optional['ColumnMoments']) -> 'ColumnMoments':
        """Moments of the union of both row sets."""
        if other is None:
            return self
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.m2 + other.m2 + delta.square() * (
            self.count * other.count / count)
        return ColumnMoments(count, mean, m2)

    @property
    def var(self) -> torch.Tensor:
        """Population variance (divides by the row count)."""
        return self.m2 / self.count
