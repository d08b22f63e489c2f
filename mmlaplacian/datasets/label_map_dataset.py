"""``LabelMapDataset``: images and PNG label maps in folders, checked.

Importing this module imports ``mmseg.datasets``; ``mmlaplacian`` imports
it only when a config asks for the dataset (see ``mmlaplacian.registry``).
"""
from __future__ import annotations

import os.path as osp
from typing import List

from mmseg.datasets import BaseSegDataset
from mmseg.datasets.transforms import LoadAnnotations

from .label_map_checks import CheckLabelMap, missing_label_files


class LabelMapDataset(BaseSegDataset):
    """A semantic-segmentation dataset that checks its files before use.

    The layout is mmseg's: images in ``data_prefix.img_path`` (``img_dir``),
    one label map per image in ``data_prefix.seg_map_path`` (``ann_dir``)
    with the same file stem. The classes come from ``metainfo``
    (``classes``, optionally ``palette``). Beyond ``BaseSegDataset`` it

    - fails at construction, naming the folder, when ``img_dir`` or
      ``ann_dir`` is missing, when no image is found, or when images have
      no label map (the first few are named);
    - puts :class:`CheckLabelMap` after ``LoadAnnotations`` in the pipeline,
      so every loaded label map must match its image's size and hold only
      class ids and ``ignore_index``.

    Args:
        *args: Passed to ``BaseSegDataset``.
        **kwargs: Passed to ``BaseSegDataset`` (``metainfo``, ``data_root``,
            ``data_prefix``, ``img_suffix``, ``seg_map_suffix``,
            ``reduce_zero_label``, ``ignore_index``, ``pipeline``, ...).

    Raises:
        ValueError: No ``classes`` in ``metainfo``.
        FileNotFoundError: A folder or label map is missing, or no image.

    Example:
        >>> dataset = dict(
        ...     type='LabelMapDataset',
        ...     data_root='data/synthetic_seg',
        ...     metainfo=dict(classes=('background', 'circle')),
        ...     data_prefix=dict(img_path='img_dir/train',
        ...                      seg_map_path='ann_dir/train'),
        ...     img_suffix='.jpg', seg_map_suffix='.png', pipeline=[...])
    """

    def __init__(self, *args, **kwargs) -> None:
        if not (kwargs.get('metainfo') or {}).get('classes'):
            raise ValueError(
                'LabelMapDataset needs metainfo=dict(classes=(...)): the '
                'class names, background first if it is a class')
        super().__init__(*args, **kwargs)
        self._insert_label_check()

    def load_data_list(self) -> List[dict]:
        img_dir = self.data_prefix.get('img_path') or ''
        ann_dir = self.data_prefix.get('seg_map_path')
        if not osp.isdir(img_dir):
            raise FileNotFoundError(
                f'{type(self).__name__}: image folder (data_prefix.img_path) '
                f'not found: {img_dir}')
        if not ann_dir or not osp.isdir(ann_dir):
            raise FileNotFoundError(
                f'{type(self).__name__}: label-map folder (ann_dir, '
                f'data_prefix.seg_map_path) not found: {ann_dir} (images: '
                f'{img_dir})')
        data_list = super().load_data_list()
        if not data_list:
            raise FileNotFoundError(
                f'{type(self).__name__}: no "*{self.img_suffix}" image in '
                f'{img_dir}' + (f' listed by {self.ann_file}'
                                if self.ann_file else ''))
        missing = missing_label_files(
            (d['img_path'], d['seg_map_path']) for d in data_list)
        if missing:
            raise FileNotFoundError(
                f'{type(self).__name__}: {len(missing)} of {len(data_list)} '
                f'images have no label map in {ann_dir}, e.g. '
                f'{", ".join(missing[:3])}')
        return data_list

    def _insert_label_check(self) -> None:
        """Put a ``CheckLabelMap`` after each ``LoadAnnotations``."""
        transforms = self.pipeline.transforms
        for index in reversed(range(len(transforms))):
            follows = transforms[index + 1] if index + 1 < len(
                transforms) else None
            if isinstance(transforms[index], LoadAnnotations) and \
                    not isinstance(follows, CheckLabelMap):
                transforms.insert(
                    index + 1,
                    CheckLabelMap(
                        num_classes=len(self.metainfo['classes']),
                        ignore_index=self.ignore_index))
