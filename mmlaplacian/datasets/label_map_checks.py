"""Checks of semantic-segmentation label maps, and ``CheckLabelMap``, the
pipeline step that applies them.

A label map that does not match its image, or holds values that are not
class ids, would otherwise train silently on garbage: mmseg crops, flips
and resizes both arrays, and the cross-entropy loss ignores nothing but the
ignore index. These checks name the file at fault.
"""
from __future__ import annotations

import os.path as osp
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
from mmcv.transforms import BaseTransform


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


class CheckLabelMap(BaseTransform):
    """Check the loaded label map against its image and the classes.

    Put it right after ``LoadAnnotations`` (``LabelMapDataset`` does so by
    itself). It compares the label map with the image *as loaded*
    (``ori_shape``), so it may follow a ``Resize`` of the image, as in
    mmseg's test pipelines.

    Required keys: ``gt_seg_map``, ``ori_shape``. Optional: ``seg_map_path``,
    ``img_path`` (named in the error). Nothing is modified.

    Args:
        num_classes (int): Valid labels are ``0 .. num_classes - 1``.
        ignore_index (int): The one other value allowed. Defaults to 255.

    Raises:
        LabelMapError: From :meth:`transform`, naming the label file, when
            the sizes differ or a value is neither a class id nor
            ``ignore_index``.

    Example:
        >>> pipeline = [
        ...     dict(type='LoadImageFromFile'),
        ...     dict(type='LoadAnnotations'),
        ...     dict(type='CheckLabelMap', num_classes=150),
        ...     ...]
    """

    def __init__(self, num_classes: int, ignore_index: int = 255) -> None:
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(
                f'CheckLabelMap: num_classes must be a positive int, got '
                f'{num_classes!r}')
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def transform(self, results: dict) -> Optional[dict]:
        if 'gt_seg_map' not in results:
            raise KeyError(
                'CheckLabelMap needs gt_seg_map: put it after '
                f'LoadAnnotations (image {results.get("img_path")})')
        check_label_map(
            results['gt_seg_map'],
            results['ori_shape'],
            self.num_classes,
            self.ignore_index,
            seg_map_path=results.get('seg_map_path'),
            img_path=results.get('img_path'))
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')
