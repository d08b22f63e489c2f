"""Dataset classes and input checks that configs use at run time.

The synthetic datasets of the quick starts and tests are in
:mod:`mmlaplacian.synthetic_data`.

- Detection: the COCO annotation checks and ``CheckedCocoDataset``, the
  ``CocoDataset`` that applies them (in our ``DATASETS`` and mmdet's).
- Semantic segmentation: the label-map checks, the ``CheckLabelMap``
  transform and ``LabelMapDataset``, in our registries and mmseg's;
  the dataset module itself is imported only when a config builds it.
"""
from mmlaplacian.registry import DATASETS, TRANSFORMS, register_downstream

from .checked_coco_dataset import CheckedCocoDataset, SmallImagesWarning
from .coco_annotations import (CocoClassesWarning, class_mismatch,
                               read_coco_annotations)
from .dataset_roots import DatasetNotFoundError, check_dataset_paths
from .label_map_checks import CheckLabelMap, LabelMapError, check_label_map


def build_label_map_dataset(*args, **kwargs):
    """Build :class:`~.label_map_dataset.LabelMapDataset` (registered in
    mmseg's ``DATASETS`` under that name; imports ``mmseg.datasets``)."""
    from .label_map_dataset import LabelMapDataset
    return LabelMapDataset(*args, **kwargs)


_MMSEG = ('mmseg.registry', )
TRANSFORMS.register_module(module=CheckLabelMap)
register_downstream(CheckLabelMap, 'TRANSFORMS', _MMSEG)
DATASETS.register_module(name='LabelMapDataset', module=build_label_map_dataset)
register_downstream(
    build_label_map_dataset, 'DATASETS', _MMSEG, name='LabelMapDataset')

__all__ = [
    'CheckLabelMap', 'CheckedCocoDataset', 'CocoClassesWarning',
    'DatasetNotFoundError', 'check_dataset_paths',
    'LabelMapError', 'SmallImagesWarning', 'build_label_map_dataset',
    'check_label_map', 'class_mismatch', 'read_coco_annotations'
]
