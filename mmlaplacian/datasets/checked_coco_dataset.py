"""mmdet's ``CocoDataset`` with checks that name the file and the problem."""
from __future__ import annotations

import os.path as osp
import warnings
from typing import List

from mmdet.datasets import CocoDataset
from mmengine.fileio import get_local_path
from mmengine.logging import print_log

from mmlaplacian.registry import DATASETS, register

from .coco_annotations import (CocoClassesWarning, class_mismatch,
                               read_coco_annotations)
from .dataset_roots import check_dataset_paths


class SmallImagesWarning(UserWarning):
    """Training images left out for being under ``filter_cfg.min_size``."""


@register(DATASETS, 'DATASETS', ('mmdet.registry', ))
class CheckedCocoDataset(CocoDataset):
    """``CocoDataset`` that checks its annotation file and its classes.

    Reads the file once, as ``CocoDataset`` does, but:

    - a missing ``data_root``, annotation file or image folder raises
      :class:`~.dataset_roots.DatasetNotFoundError` naming the path, the
      variable that moves it (``COCO_ROOT``) and ``make demo``;
    - an empty, truncated or malformed file, or one that is not a COCO
      instances file, raises ``ValueError`` naming the file and the fault;
    - ``metainfo.classes`` absent from the file's categories, and
      ground-truth boxes dropped because their category is not one of the
      classes, are reported as a :class:`CocoClassesWarning` (also logged)
      with the number of boxes dropped;
    - images that ``filter_cfg.min_size`` leaves out of training are
      reported as a :class:`SmallImagesWarning` with their number and names;
    - a dataset left without images (none listed, or every one removed by
      ``filter_cfg``) raises ``ValueError`` instead of training zero
      iterations per epoch.

    Everything else is ``CocoDataset``'s: the same arguments, data and
    labels.
    """

    def load_data_list(self) -> List[dict]:
        check_dataset_paths(
            self.data_root, self.ann_file,
            [self.data_prefix.get('img')] if self.data_prefix else [],
            'the validation/test dataset' if self.test_mode else
            'the training dataset', 'detection')
        with get_local_path(
                self.ann_file, backend_args=self.backend_args) as local_path:
            data = read_coco_annotations(local_path, name=str(self.ann_file))
        for message in class_mismatch(data, self.metainfo['classes'],
                                      str(self.ann_file)):
            warnings.warn(message, CocoClassesWarning)
            print_log(message, logger='current', level=30)  # WARNING
        self._num_listed_images = len(data['images'])
        # Hand the parsed file to CocoDataset instead of a second read.
        api = type(self).COCOAPI

        def from_parsed(_path: str):
            coco = api()
            coco.dataset = data
            coco.createIndex()
            coco.img_ann_map = coco.imgToAnns
            coco.cat_img_map = coco.catToImgs
            return coco

        self.COCOAPI = from_parsed
        try:
            return super().load_data_list()
        finally:
            del self.COCOAPI

    def filter_data(self) -> List[dict]:
        kept = super().filter_data()
        min_size = (self.filter_cfg or {}).get('min_size', 0)
        if not self.test_mode and min_size:
            small = [
                osp.basename(d['img_path']) for d in self.data_list
                if min(d['width'], d['height']) < min_size
            ]
            if small:
                message = (
                    f'{self.ann_file}: {len(small)} of {len(self.data_list)}'
                    f' images are smaller than filter_cfg.min_size='
                    f'{min_size} pixels and are left out of training: '
                    f'{small[:10]}{" ..." if len(small) > 10 else ""}')
                warnings.warn(message, SmallImagesWarning)
                print_log(message, logger='current', level=30)  # WARNING
        if kept:
            return kept
        if not self._num_listed_images:
            raise ValueError(f'annotation file {self.ann_file} lists no '
                             'images: the dataset is empty')
        raise ValueError(
            f'none of the {self._num_listed_images} images of '
            f'{self.ann_file} is left after filter_cfg={self.filter_cfg}: '
            'no image has a ground-truth box of the classes '
            f'{list(self.metainfo["classes"])} (see the warning above on '
            'dropped boxes), or every image is smaller than min_size')
