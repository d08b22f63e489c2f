"""Rasterise COCO instance annotations into semantic label maps (PNG).

Polygons and crowd RLE are decoded with pycocotools. Label 0 is background,
the kept categories are 1..K in the annotation file's category order (all
80 of COCO by default, or the ``--classes`` subset), and crowd regions and
objects of categories left out are 255 (ignored). Larger objects are drawn
first, so a small object on top of a large one keeps its pixels.

Only label maps are written: point ``data_prefix.img_path`` at the COCO
image folder, whose file names the label maps share.

Example:
    python tools/dataset_converters/coco_to_semantic.py \
        data/coco/annotations/instances_val2017.json data/coco_sem/val2017
    python tools/dataset_converters/coco_to_semantic.py ANN.json OUT \
        --classes person car dog
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
from typing import List, Optional, Sequence

import numpy as np
from PIL import Image
from pycocotools.coco import COCO

IGNORE_INDEX = 255


def semantic_label_map(coco: COCO, image_id: int,
                       label_of_category: dict) -> np.ndarray:
    """The uint8 ``(H, W)`` label map of one COCO image.

    Args:
        coco (COCO): The loaded annotation file.
        image_id (int): The image.
        label_of_category (dict): COCO category id -> label (1..254);
            categories missing here are ignored (255).
    """
    info = coco.loadImgs(image_id)[0]
    labels = np.zeros((info['height'], info['width']), dtype=np.uint8)
    ignored = np.zeros_like(labels, dtype=bool)
    anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id, iscrowd=None))
    for ann in sorted(anns, key=lambda a: -a['area']):
        mask = coco.annToMask(ann).astype(bool)
        label = label_of_category.get(ann['category_id'])
        if ann.get('iscrowd', 0) or label is None:
            ignored |= mask
        else:
            labels[mask] = label
            ignored &= ~mask  # a drawn object covers an earlier crowd
    labels[ignored] = IGNORE_INDEX
    return labels


def convert(ann_file: str,
            out_dir: str,
            classes: Optional[Sequence[str]] = None) -> dict:
    """Write one label map per image of ``ann_file`` into ``out_dir``.

    Args:
        ann_file (str): A COCO instances json.
        out_dir (str): Folder for ``<image stem>.png`` and ``meta.json``.
        classes (Sequence[str], optional): Category names to keep (in this
            order); ``None`` keeps all.

    Returns:
        dict: ``classes`` (background first), ``num_images`` and
        ``ignore_index``, as written to ``meta.json``.

    Raises:
        FileNotFoundError: ``ann_file`` does not exist.
        ValueError: A name in ``classes`` is not a category of the file, or
            more than 254 classes are asked for.
    """
    if not osp.isfile(ann_file):
        raise FileNotFoundError(f'COCO annotation file not found: {ann_file}')
    coco = COCO(ann_file)
    categories = coco.loadCats(sorted(coco.getCatIds()))
    id_of_name = {c['name']: c['id'] for c in categories}
    names: List[str] = (list(classes) if classes is not None else
                        [c['name'] for c in categories])
    unknown = [n for n in names if n not in id_of_name]
    if unknown:
        raise ValueError(f'{ann_file} has no categories {unknown}; it has '
                         f'{sorted(id_of_name)}')
    if len(names) >= IGNORE_INDEX:
        raise ValueError(f'at most {IGNORE_INDEX - 1} classes fit in a '
                         f'uint8 label map, got {len(names)}')
    label_of_category = {id_of_name[n]: i + 1 for i, n in enumerate(names)}
    os.makedirs(out_dir, exist_ok=True)
    image_ids = sorted(coco.getImgIds())
    for image_id in image_ids:
        stem = osp.splitext(coco.loadImgs(image_id)[0]['file_name'])[0]
        Image.fromarray(semantic_label_map(
            coco, image_id, label_of_category)).save(
                osp.join(out_dir, stem + '.png'))
    meta = dict(
        classes=['background'] + names,
        num_images=len(image_ids),
        ignore_index=IGNORE_INDEX,
        source=osp.abspath(ann_file))
    with open(osp.join(out_dir, 'meta.json'), 'w', encoding='utf-8') as f:
        json.dump(meta, f, indent=1)
    return meta


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='COCO instance annotations -> semantic label maps')
    parser.add_argument('ann_file', help='COCO instances json')
    parser.add_argument('out_dir', help='folder for the PNG label maps')
    parser.add_argument(
        '--classes',
        nargs='+',
        help='category names to keep (default: all); others are ignored')
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    meta = convert(args.ann_file, args.out_dir, args.classes)
    print(f'{meta["num_images"]} label maps, {len(meta["classes"])} classes '
          f'(background first) -> {args.out_dir}')


if __name__ == '__main__':
    main()
