"""Landmark selection for the Nyström approximation."""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F


def landmark_grid(hw_shape: Tuple[int, int],
                  num_landmarks: int) -> Tuple[int, int]:
    """The pooled landmark grid for a token grid, at most ``num_landmarks``.

    The grid keeps the aspect ratio of the token grid, so a 200x334 feature
    map with 49 landmarks pools to 5x9 cells. A fixed landmark count (not a
    fixed pooling ratio) keeps the attention linear at detection resolution.

    Args:
        hw_shape (tuple[int, int]): Height and width of the token grid.
        num_landmarks (int): Upper bound on the number of landmarks.

    Returns:
        tuple[int, int]: Landmark grid height and width. When the grid has
        no more tokens than ``num_landmarks`` it is returned unchanged: the
        tokens themselves are the landmarks and the approximation is exact.
    """
    height, width = hw_shape
    if height * width <= num_landmarks:
        return height, width
    if isinstance(height, torch.SymInt) or isinstance(width, torch.SymInt):
        return _symbolic_grid(height, width, num_landmarks)
    grid_h = max(1, min(height, num_landmarks,
                        _floor_sqrt(num_landmarks * height, width)))
    grid_w = max(1, min(width, num_landmarks // grid_h))
    return grid_h, grid_w


def _floor_sqrt(numerator: int, denominator: int) -> int:
    """``floor(sqrt(numerator / denominator))`` of positive integers, by
    counting up in exact integer comparisons.

    Under ``torch.compile`` sizes reach this code as plain ints that dynamo
    traces symbolically (automatic dynamic shapes). Each comparison then
    becomes a guard, so the grid is a constant of the compiled graph, which
    is recompiled only when the grid changes; ``math.sqrt`` would instead
    leave a symbolic square root in the pooling sizes that inductor cannot
    lower.
    """
    root = 0
    while (root + 1) * (root + 1) * denominator <= numerator:
        root += 1
    return root


def _symbolic_grid(height, width, num_landmarks: int):
    """:func:`landmark_grid` of symbolic sizes (dynamic-shape export): the
    same grid in integer arithmetic, ``floor(sqrt(L·H/W)) =
    floor(sqrt(floor(L·H/W)))``, which stays symbolic instead of being
    evaluated once at export time."""
    grid_h = math.floor(torch.sym_sqrt(num_landmarks * height // width))
    grid_h = torch.sym_max(
        1, torch.sym_min(torch.sym_min(height, num_landmarks), grid_h))
    grid_w = torch.sym_max(1, torch.sym_min(width, num_landmarks // grid_h))
    return grid_h, grid_w


def sizes_known_equal(sizes: Sequence, others: Sequence) -> bool:
    """Whether two shapes are equal, as a Python bool. Symbolic sizes
    (dynamic-shape export) count as equal only when provably so: no guard
    fixes them to one value."""
    for size, other in zip(sizes, others):
        same = size == other
        if isinstance(same, torch.SymBool):
            # Imported here: sympy, behind it, costs half a second to load,
            # and symbolic sizes only occur when it is loaded already.
            from torch.fx.experimental.symbolic_shapes import \
                statically_known_true
            same = statically_known_true(same)
        if not same:
            return False
    return len(sizes) == len(others)


def pooling_matrix(size, bins, like: torch.Tensor) -> torch.Tensor:
    """``(bins, size)`` weights of adaptive average pooling along one axis:
    bin ``i`` averages ``[floor(i·S/b), ceil((i+1)·S/b))``. Built from
    ``arange`` and comparisons, so it follows symbolic sizes."""
    index = torch.arange(bins, device=like.device)
    position = torch.arange(size, device=like.device)
    start = torch.div(index * size, bins, rounding_mode='floor')
    end = torch.div((index + 1) * size + bins - 1, bins,
                    rounding_mode='floor')
    inside = (position >= start[:, None]) & (position < end[:, None])
    return inside.to(like.dtype) / (end - start)[:, None].to(like.dtype)


def _pool_by_products(tokens: torch.Tensor, hw_shape: Tuple[int, int],
                      grid: Tuple[int, int]) -> torch.Tensor:
    """Adaptive average pooling of ``(B, H*W, C)`` tokens onto ``grid`` as two
    matrix products by the bins' weights (:func:`pooling_matrix`), giving
    ``(B, gh*gw, C)``.

    This is the form for traced code: it follows symbolic sizes, which
    inductor cannot lower ``_adaptive_avg_pool2d`` for. The products run on
    the tokens as they lie in memory: first over the width, as
    ``(B*H, W, C)`` matrices, which leaves a ``(B, H, gw*C)`` array for the
    product over the height. (The same products on the ``(B, C, H, W)``
    view of the tokens have unit stride along ``C``, so the batched GEMM
    copies every ``H x W`` slice first: 5-10x slower at detection sizes.)
    """
    batch, _, channels = tokens.shape
    height, width = hw_shape
    rows = pooling_matrix(height, grid[0], tokens)  # (gh, H)
    cols = pooling_matrix(width, grid[1], tokens)  # (gw, W)
    pooled = cols @ tokens.reshape(batch * height, width, channels)
    pooled = rows @ pooled.reshape(batch, height, grid[1] * channels)
    return pooled.reshape(batch, grid[0] * grid[1], channels)


def _sizes_concrete(sizes: Sequence) -> bool:
    """Whether eager code sees every size as a plain int. Under dynamo
    (``torch.compile``, strict export) a symbolic size passes for an int, so
    traced code counts as symbolic: it may be, after a recompilation with
    automatic dynamic shapes."""
    return (not torch.compiler.is_dynamo_compiling()
            and not any(isinstance(size, torch.SymInt) for size in sizes))


def pool_landmarks(tokens: torch.Tensor, hw_shape: Tuple[int, int],
                   grid: Tuple[int, int], num_heads: int) -> torch.Tensor:
    """Average-pool tokens onto the landmark grid, split into heads.

    Args:
        tokens (Tensor): ``(B, N, C)`` with ``N = H * W``; head ``i`` owns
            channels ``[i * C / heads, (i + 1) * C / heads)``.
        hw_shape (tuple[int, int]): The token grid ``(H, W)``.
        grid (tuple[int, int]): The landmark grid from :func:`landmark_grid`.
        num_heads (int): Heads to split the channels into.

    Returns:
        Tensor: ``(B, heads, m, C / heads)`` landmarks,
        ``m = grid[0] * grid[1]``. When the grid is the token grid, a view of
        the tokens themselves.
    """
    batch, num_tokens, channels = tokens.shape
    if sizes_known_equal(grid, hw_shape):
        landmarks = tokens
    elif _sizes_concrete((*hw_shape, *grid)):
        # (N, C) rows are a channels-last (C, H, W) map: pooled without a
        # copy.
        spatial = tokens.reshape(batch, *hw_shape,
                                 channels).permute(0, 3, 1, 2)
        landmarks = F.adaptive_avg_pool2d(spatial, grid).flatten(
            2).transpose(1, 2)
    else:
        landmarks = _pool_by_products(tokens, hw_shape, grid)
    return landmarks.reshape(batch, -1, num_heads,
                             channels // num_heads).transpose(1, 2)
