"""Reading COCO annotation files, with errors that name the file and the
problem.

pycocotools reads an annotation file with a bare ``json.load``: an empty or
truncated file ends in ``JSONDecodeError: Expecting value: line 1 column 1``
with no file name, a file of the wrong shape in an ``AssertionError`` or a
``KeyError`` deep inside mmdet, and ``metainfo.classes`` that do not match
the file's category names silently drop ground-truth boxes (training learns
nothing, evaluation reports zero AP). These functions need only the
standard library.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Dict, List, Sequence

REQUIRED_FIELDS = {
    'images': ('id', 'file_name', 'width', 'height'),
    'annotations': ('id', 'image_id', 'category_id', 'bbox'),
    'categories': ('id', 'name'),
}


class CocoClassesWarning(UserWarning):
    """``metainfo.classes`` and an annotation file's categories disagree."""


def read_coco_annotations(path: str, name: str = None) -> dict:
    """Read and check a COCO annotation file.

    Args:
        path (str): The local file to read.
        name (str, optional): The name to report (the configured
            ``ann_file``, which may be a URL); defaults to ``path``.

    Returns:
        dict: The parsed file.

    Raises:
        ValueError: The file is empty, not JSON (truncated or malformed),
            or not a COCO instances file. The message names the file.
    """
    name = name or path
    with open(path, 'rb') as f:
        raw = f.read()
    if not raw.strip():
        raise ValueError(f'annotation file {name} is empty '
                         f'({len(raw)} bytes)')
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as error:
        raise ValueError(f'annotation file {name} is not UTF-8 text '
                         f'(byte {error.start}): not a JSON file') from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        ends_early = not text.rstrip().endswith(('}', ']'))
        hint = (' The file ends in the middle of the JSON: it looks '
                'truncated (an interrupted download or copy?).'
                if ends_early else '')
        raise ValueError(
            f'annotation file {name} is not valid JSON: {error.msg} at line '
            f'{error.lineno} column {error.colno} ({len(raw)} bytes).'
            f'{hint}') from None
    check_coco_structure(data, name)
    return data


def check_coco_structure(data, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``data`` is COCO-shaped.

    The file needs ``images``, ``annotations`` and ``categories`` lists
    whose entries carry the fields that mmdet reads.
    """
    if not isinstance(data, dict):
        raise ValueError(
            f'annotation file {name} holds a JSON {type(data).__name__}, '
            'not a COCO object with "images", "annotations" and '
            '"categories"')
    missing = [key for key in REQUIRED_FIELDS if key not in data]
    if missing:
        raise ValueError(
            f'annotation file {name} has no {", ".join(map(repr, missing))}'
            f' (keys found: {sorted(data)}): not a COCO instances file')
    for key, fields in REQUIRED_FIELDS.items():
        entries = data[key]
        if not isinstance(entries, list):
            raise ValueError(f'annotation file {name}: "{key}" is a '
                             f'{type(entries).__name__}, not a list')
        for index, entry in enumerate(entries):
            absent = [f for f in fields if not isinstance(entry, dict)
                      or f not in entry]
            if absent:
                raise ValueError(
                    f'annotation file {name}: {key}[{index}] has no '
                    f'{", ".join(map(repr, absent))}: {entry!r:.200}')
    for index, ann in enumerate(data['annotations']):
        bbox = ann['bbox']
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise ValueError(
                f'annotation file {name}: annotations[{index}] (id '
                f'{ann["id"]}) has bbox {bbox!r}, not [x, y, width, height]')


def class_mismatch(data: dict, classes: Sequence[str],
                   name: str) -> List[str]:
    """Messages for ``classes`` that disagree with the file's categories.

    mmdet keeps only the annotations whose category name is one of
    ``metainfo.classes`` (labels follow the file's category order) and
    drops the rest without a word.

    Args:
        data (dict): The parsed annotation file.
        classes (Sequence[str]): ``metainfo.classes`` of the dataset.
        name (str): The file name to report.

    Returns:
        list[str]: One message each for classes missing from the file,
        classes in another order than the file's categories (labels follow
        the file), and ground-truth boxes dropped; empty when everything
        matches.
    """
    names: Dict[int, str] = {c['id']: c['name'] for c in data['categories']}
    wanted = set(classes)
    messages = []
    absent = [c for c in classes if c not in set(names.values())]
    if absent:
        messages.append(
            f'{name}: metainfo.classes {absent} are not categories of the '
            f'file (its categories: {sorted(set(names.values()))}); the '
            'remaining classes take their labels in the file\'s order')
    # mmdet numbers the labels in the file's category order, whatever the
    # order of metainfo.classes: names and labels then disagree.
    in_file_order = [c['name'] for c in data['categories']
                     if c['name'] in wanted]
    in_class_order = [c for c in classes if c in in_file_order]
    if in_file_order != in_class_order:
        swapped = [(i, f, c) for i, (f, c) in enumerate(
            zip(in_file_order, in_class_order)) if f != c]
        label, in_file, named = swapped[0]
        messages.append(
            f'{name}: labels follow the order of the file\'s categories '
            f'{in_file_order}, not that of metainfo.classes '
            f'{in_class_order}: label {label} is {in_file!r} in the data but '
            f'named {named!r}. List metainfo.classes in the file\'s order')
    counts = Counter(
        names.get(ann['category_id'], f'<unknown id {ann["category_id"]}>')
        for ann in data['annotations'])
    dropped = {n: k for n, k in counts.items() if n not in wanted}
    if dropped:
        total = sum(counts.values())
        lost = sum(dropped.values())
        listed = ', '.join(f'{n} x{k}' for n, k in sorted(dropped.items()))
        what = ('every ground-truth box: nothing can be learnt and the '
                'AP will be 0' if lost == total else
                'them from training and evaluation')
        messages.append(
            f'{name}: {lost} of {total} ground-truth boxes are dropped '
            f'because their categories are not in metainfo.classes '
            f'({listed}); this drops {what}')
    return messages
