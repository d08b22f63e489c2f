"""The synthetic shapes scenes as a semantic-segmentation dataset.

The images are byte for byte those of
:func:`instances.make_synthetic_coco` with the same seed and size (one
random stream per image) when the shapes keep that writer's sizes (the
default ``radius_range``, :data:`instances.RADIUS_RANGE`); the labels
are PNG label maps in MMSegmentation's layout::

    <out>/img_dir/{train,val}/000000.jpg
    <out>/ann_dir/{train,val}/000000.png    uint8: 0 background, 1..4 shapes,
                                            255 ignored (shape outlines)
    <out>/meta.json                         classes, palette, seed, size,
                                            radius range

The outline of every visible shape part (``ignore_border`` pixels wide) is
marked 255, as Pascal VOC marks object boundaries: those pixels are blended
by JPEG compression and belong to neither side for certain.

Example (from the repository root):
    >>> from mmlaplacian.synthetic_data.label_maps import make_synthetic_seg
    >>> meta = make_synthetic_seg('data/synthetic_seg', num_train=8,
    ...                           num_val=4, image_size=128, seed=0)
"""
from __future__ import annotations

import json
import os
import os.path as osp
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np
from PIL import Image

from .instances import (JPEG_QUALITY, RADIUS_RANGE, SHAPE_CLASSES,
                               SPLITS, make_scene)

SEG_CLASSES = ('background', ) + SHAPE_CLASSES
# Label-map colours for viewers (background dark grey).
SEG_PALETTE = [[40, 40, 40], [230, 25, 75], [60, 180, 75], [255, 225, 25],
               [0, 130, 200]]
IGNORE_INDEX = 255
META_FILE = 'meta.json'


def scene_label_map(instances: Sequence[dict],
                    size: int,
                    ignore_border: int = 1) -> np.ndarray:
    """The uint8 ``(size, size)`` label map of one scene.

    Args:
        instances (Sequence[dict]): The instances :func:`make_scene` returns
            (``category`` and visible ``mask``).
        size (int): Image side in pixels.
        ignore_border (int): Width in pixels of the ignored outline of each
            shape; 0 labels every pixel.

    Returns:
        np.ndarray: 0 for background, ``category + 1`` for shapes,
        :data:`IGNORE_INDEX` on the outlines.
    """
    if ignore_border < 0:
        raise ValueError(f'ignore_border must be >= 0, got {ignore_border}')
    labels = np.zeros((size, size), dtype=np.uint8)
    outline = np.zeros((size, size), dtype=bool)
    kernel = np.ones((2 * ignore_border + 1, ) * 2, np.uint8)
    for instance in instances:
        mask = instance['mask']
        labels[mask] = instance['category'] + 1
        if ignore_border:
            inner = cv2.erode(mask.astype(np.uint8), kernel,
                              borderType=cv2.BORDER_REPLICATE).astype(bool)
            outline |= mask & ~inner
    labels[outline] = IGNORE_INDEX
    return labels


def generate_seg_split(out_root: str,
                       split: str,
                       num_images: int,
                       image_size: int = 256,
                       seed: int = 0,
                       ignore_border: int = 1,
                       radius_range: Tuple[float, float] = RADIUS_RANGE
                       ) -> List[str]:
    """Write the images and label maps of one split.

    Returns:
        list[str]: The label-map paths written.
    """
    if split not in SPLITS:
        raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
    image_dir = osp.join(out_root, 'img_dir', split)
    label_dir = osp.join(out_root, 'ann_dir', split)
    os.makedirs(image_dir, exist_ok=True)
    os.makedirs(label_dir, exist_ok=True)
    written = []
    for index in range(num_images):
        # The same generator as the COCO writer: the same scene per index.
        rng = np.random.default_rng([seed, SPLITS.index(split), index])
        image, instances = make_scene(
            rng, image_size, radius_range=radius_range)
        stem = f'{index:06d}'
        Image.fromarray(image).save(
            osp.join(image_dir, stem + '.jpg'), quality=JPEG_QUALITY)
        label_path = osp.join(label_dir, stem + '.png')
        Image.fromarray(scene_label_map(instances, image_size,
                                        ignore_border)).save(label_path)
        written.append(label_path)
    return written


def make_synthetic_seg(out_root: str,
                       num_train: int = 200,
                       num_val: int = 50,
                       image_size: int = 256,
                       seed: int = 0,
                       ignore_border: int = 1,
                       radius_range: Tuple[float, float] = RADIUS_RANGE
                       ) -> dict:
    """Write the train and val splits and ``meta.json`` under ``out_root``.

    Args:
        out_root (str): Dataset folder (created if needed).
        num_train (int): Training images.
        num_val (int): Validation images.
        image_size (int): Square image side in pixels (>= 32).
        seed (int): Seed; equal arguments give byte-identical files.
        ignore_border (int): Width of the ignored shape outlines (pixels).
        radius_range (tuple[float, float]): Shape circumradius as a share of
            the image side, (min, max); the detection dataset's by default.

    Returns:
        dict: The metadata written to ``meta.json``.
    """
    if image_size < 32:
        raise ValueError(f'image_size must be >= 32, got {image_size}')
    if num_train < 0 or num_val < 0:
        raise ValueError('num_train and num_val must be >= 0, got '
                         f'{num_train} and {num_val}')
    radius_range = _check_radius_range(radius_range)
    counts = dict(zip(SPLITS, (num_train, num_val)))
    for split, count in counts.items():
        generate_seg_split(out_root, split, count, image_size, seed,
                           ignore_border, radius_range)
    meta = dict(
        description='mmlaplacian synthetic shapes, semantic labels',
        classes=list(SEG_CLASSES),
        palette=SEG_PALETTE,
        ignore_index=IGNORE_INDEX,
        ignore_border=ignore_border,
        image_size=image_size,
        radius_range=list(radius_range),
        seed=seed,
        counts=counts)
    with open(osp.join(out_root, META_FILE), 'w', encoding='utf-8') as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    return meta


def _check_radius_range(
        radius_range: Sequence[float]) -> Tuple[float, float]:
    """``radius_range`` as a float pair, or a ValueError naming it."""
    low, high = (float(r) for r in radius_range)
    if not 0 < low <= high <= 0.5:
        raise ValueError('radius_range must satisfy 0 < min <= max <= 0.5 '
                         f'(shares of the image side), got {radius_range}')
    return low, high


def is_complete_seg(out_root: str,
                    image_size: Optional[int] = None,
                    seed: Optional[int] = None,
                    radius_range: Optional[Sequence[float]] = None,
                    num_train: Optional[int] = None,
                    num_val: Optional[int] = None) -> bool:
    """Whether a dataset made as asked is there, with every file.

    Args:
        out_root (str): Dataset folder.
        image_size (int, optional): Required image side, if any.
        seed (int, optional): Required seed, if any.
        radius_range (Sequence[float], optional): Required shape radius
            range, if any.
        num_train (int, optional): Required number of training images.
        num_val (int, optional): Required number of validation images.
    """
    meta_path = osp.join(out_root, META_FILE)
    if not osp.isfile(meta_path):
        return False
    with open(meta_path, encoding='utf-8') as f:
        meta = json.load(f)
    if image_size is not None and meta.get('image_size') != image_size:
        return False
    if seed is not None and meta.get('seed') != seed:
        return False
    if radius_range is not None and meta.get('radius_range', list(
            RADIUS_RANGE)) != [float(r) for r in radius_range]:
        return False
    counts = meta.get('counts', {})
    for split, wanted in zip(SPLITS, (num_train, num_val)):
        if wanted is not None and counts.get(split) != wanted:
            return False
    for split, count in counts.items():
        for index in range(count):
            stem = f'{index:06d}'
            if not (osp.isfile(
                    osp.join(out_root, 'img_dir', split, stem + '.jpg'))
                    and osp.isfile(
                        osp.join(out_root, 'ann_dir', split, stem + '.png'))):
                return False
    return True
