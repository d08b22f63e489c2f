"""``CheckLabelMap``: a pipeline step that refuses broken label maps."""
from __future__ import annotations

from typing import Optional

from mmcv.transforms import BaseTransform

from .label_map_checks import check_label_map


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
