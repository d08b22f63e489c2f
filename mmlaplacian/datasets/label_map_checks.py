"""Checks of semantic-segmentation label maps, independent of any framework.

A label map that does not match its image, or holds values that are not
class ids, would otherwise train silently on garbage: mmseg crops, flips
and resizes both arrays, and the cross-entropy loss ignores nothing but the
ignore index. These checks name the file at fault.
"""
from __future__ import annotations

import os.path as osp
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np


class LabelMapError(ValueError):
    """A label map that cannot belong to its image or to the classes."""


def check_label_map(labels: np.ndarray,
                    image_shape: Sequence[int],
                    num_classes: int,
                    ignore_index: int = 255,
                    seg_map_path: Optional[str] = None,
                    img_path: Optional[str] = None) -> None:
    """Raise if a label map does not fit its image or its classes.

    Args:
        labels (np.ndarray): The ``(H, W)`` label map as loaded (after any
            ``reduce_zero_label`` or ``label_map`` remapping).
        image_shape (Sequence[int]): ``(H, W)`` (or ``(H, W, C)``) of the
            image as loaded, before any resizing.
        num_classes (int): Valid labels are ``0 .. num_classes - 1``.
        ignore_index (int): The one other value allowed.
        seg_map_path (str, optional): The label file, for the message.
        img_path (str, optional): The image file, for the message.

    Raises:
        LabelMapError: The sizes differ, the map is not 2-D, or it holds
            values that are neither class ids nor ``ignore_index``.
    """
    where = seg_map_path or '<label map>'
    if labels.ndim != 2:
        raise LabelMapError(
            f'label map {where} has shape {tuple(labels.shape)}: expected '
            'one channel of class ids (H, W); a colour (RGB) label image '
            'must be converted to class ids first')
    if tuple(labels.shape) != tuple(image_shape[:2]):
        raise LabelMapError(
            f'label map {where} is {labels.shape[1]}x{labels.shape[0]} '
            f'(WxH) but its image {img_path or "<image>"} is '
            f'{image_shape[1]}x{image_shape[0]}: they must be the same size')
    bad = invalid_values(labels, num_classes, ignore_index)
    if bad:
        shown = ', '.join(str(v) for v in bad[:10])
        more = f' (and {len(bad) - 10} more)' if len(bad) > 10 else ''
        raise LabelMapError(
            f'label map {where} holds values {shown}{more} that are neither '
            f'class ids (0..{num_classes - 1}) nor the ignore index '
            f'{ignore_index}; check the number of classes in the config '
            '(metainfo classes) and reduce_zero_label')


def invalid_values(labels: np.ndarray, num_classes: int,
                   ignore_index: int) -> List[int]:
    """Sorted values of ``labels`` outside ``0..num_classes-1`` and
    ``ignore_index``."""
    valid = ((labels >= 0) & (labels < num_classes)) | (labels == ignore_index)
    if valid.all():
        return []  # the common case, without sorting every pixel
    return [int(v) for v in np.unique(labels[~valid])]


def missing_label_files(pairs: Iterable[Tuple[str, str]]) -> List[str]:
    """The label paths of ``(img_path, seg_map_path)`` pairs that are not
    files."""
    return [seg for _, seg in pairs if not osp.isfile(seg)]
