"""Landmark selection for the Nyström approximation."""
from __future__ import annotations

import math
from typing import Tuple

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
    grid_h = int(math.sqrt(num_landmarks * height / width))
    grid_h = max(1, min(height, num_landmarks, grid_h))
    grid_w = max(1, min(width, num_landmarks // grid_h))
    return grid_h, grid_w


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
    if tuple(grid) == tuple(hw_shape):
        landmarks = tokens
    else:
        height, width = hw_shape
        # (N, C) rows are a channels-last (C, H, W) map: pooled without a
        # copy.
        spatial = tokens.reshape(batch, height, width,
                                 channels).permute(0, 3, 1, 2)
        landmarks = F.adaptive_avg_pool2d(spatial, grid).flatten(2).transpose(
            1, 2)
    return landmarks.reshape(batch, -1, num_heads,
                             channels // num_heads).transpose(1, 2)
