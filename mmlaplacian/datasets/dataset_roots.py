"""What to say when a dataset is not where a config looks for it.

The configs read their data folder from an environment variable with a
default (``data_root = '{{$COCO_ROOT:data/coco}}/'``). A missing folder
otherwise ends, after the model is built, in a bare ``FileNotFoundError``
that says neither which variable moves it nor how to try the model without
the data. Only the standard library is used here.
"""
from __future__ import annotations

import os
import os.path as osp
from dataclasses import dataclass
from typing import Optional, Sequence


class DatasetNotFoundError(FileNotFoundError):
    """A dataset file or folder is missing. The message names the path
    looked for, the variable that moves it and how to go on without it."""


@dataclass(frozen=True)
class DatasetRoot:
    """A data folder that our configs read from an environment variable."""
    variable: str
    default: str
    name: str
    layout: str
    without_it: str
    task: str


KNOWN_ROOTS = (
    DatasetRoot(
        'COCO_ROOT', 'data/coco', 'COCO 2017',
        "mmdet's layout: annotations/instances_{train,val}2017.json, "
        'train2017/, val2017/',
        'make demo (synthetic shapes in COCO format: Mask R-CNN trained and '
        'evaluated on a CPU in about 10 minutes)', 'detection'),
    DatasetRoot(
        'ADE_ROOT', 'data/ade/ADEChallengeData2016', 'ADE20K',
        "mmseg's layout: images/{training,validation}/, "
        'annotations/{training,validation}/',
        'make demo-seg (synthetic label maps: Semantic FPN trained and '
        'evaluated on a CPU in about 9 minutes)', 'segmentation'),
    DatasetRoot(
        'SYNTHETIC_COCO', 'data/synthetic_coco',
        'the synthetic shapes dataset',
        'written by make demo or python tools/dataset_converters/'
        'make_synthetic_coco.py --out DIR', 'make demo', 'detection'),
    DatasetRoot(
        'SYNTHETIC_SEG', 'data/synthetic_seg', 'the synthetic label maps',
        'written by make demo-seg or python tools/dataset_converters/'
        'make_synthetic_seg.py --out DIR', 'make demo-seg', 'segmentation'),
)


def _same(a: str, b: str) -> bool:
    return osp.normpath(osp.abspath(a)) == osp.normpath(osp.abspath(b))


def match_root(data_root: Optional[str]) -> Optional[DatasetRoot]:
    """The known root that ``data_root`` came from (its variable's value or
    its default), else None."""
    if not data_root:
        return None
    for root in KNOWN_ROOTS:
        value = os.environ.get(root.variable)
        if (value and _same(data_root, value)) or (
                not value and _same(data_root, root.default)):
            return root
    return None


def missing_dataset_message(path: str, where: str, data_root: Optional[str],
                            task: str) -> str:
    """A few lines: the path looked for, where it came from, the variable
    that moves it and how to try the model without the data.

    Args:
        path (str): The missing file or folder.
        where (str): The setting it came from (``train_dataloader``, ...).
        data_root (str, optional): The dataset's ``data_root``.
        task (str): ``'detection'`` or ``'segmentation'``.
    """
    root = match_root(data_root)
    lines = [f'No such file or directory: {path} ({where}).']
    if root is not None:
        value = os.environ.get(root.variable)
        source = (f'{root.variable}={value}' if value else
                  f'the default, {root.variable} being unset')
        lines.append(
            f'{root.name} is not there: the config looks in {data_root} '
            f'({source}). Set {root.variable} to the folder that holds it '
            f'({root.layout}).')
    else:
        root = next(r for r in KNOWN_ROOTS if r.task == task)
        lines.append(
            f'The dataset\'s data_root is {data_root or "not set"}. Our '
            f'{root.name} configs read {root.variable} ({root.layout}); '
            'elsewhere fix the data_root or ann_file of the config.')
    demo = next(r for r in KNOWN_ROOTS if r.task == root.task)
    lines.append(f'To try the model without {demo.name}: {demo.without_it}.')
    return '\n'.join(lines)


def _is_local(path: Optional[str]) -> bool:
    return bool(path) and '://' not in str(path)


def check_dataset_paths(data_root: Optional[str],
                        ann_file: Optional[str],
                        folders: Sequence[str],
                        where: str,
                        task: str) -> None:
    """Raise :class:`DatasetNotFoundError` for the first missing one of
    ``data_root``, ``ann_file`` and the image/label ``folders`` (paths as
    the dataset uses them, ``data_root`` already joined). Remote paths
    (``s3://...``) are not checked."""
    if _is_local(data_root) and not osp.isdir(data_root):
        missing = data_root
    elif _is_local(ann_file) and not osp.isfile(ann_file):
        missing = ann_file
    else:
        missing = next((f for f in folders
                        if _is_local(f) and not osp.isdir(f)), None)
    if missing is not None:
        raise DatasetNotFoundError(
            missing_dataset_message(missing, where, data_root, task))
