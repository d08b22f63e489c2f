"""A deterministic synthetic instance-segmentation dataset in COCO format.

Each image shows a few filled shapes (circle, square, triangle, star) in
random colours, sizes and rotations on a textured, noisy background. Shapes
may overlap: later shapes lie on top, and every annotation describes the
*visible* part of its shape (polygons, box and area of what is seen). A
placement is rejected when it would hide too much of an earlier shape or cut
a hole into it, so every visible part stays a recognisable shape that COCO
polygons can describe.

Only numpy, Pillow and OpenCV are used. The same arguments always give
byte-identical files. :mod:`.label_maps` writes the same scenes as a
semantic-segmentation dataset; ``tools/dataset_converters/make_synthetic_*.py``
are their command lines.

Example:
    >>> from mmlaplacian.synthetic_data.instances import make_synthetic_coco
    >>> paths = make_synthetic_coco('data/synthetic_coco', num_train=8,
    ...                             num_val=4, image_size=128, seed=0)
"""
from __future__ import annotations

import json
import math
import os
import os.path as osp
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from PIL import Image, ImageDraw

SHAPE_CLASSES: Tuple[str, ...] = ('circle', 'square', 'triangle', 'star')
SPLITS: Tuple[str, ...] = ('train', 'val')

# A shape keeps at least this share of its area visible when others overlap.
MIN_VISIBLE_FRACTION = 0.6
# Polygon components smaller than this (pixels) are dropped as slivers.
MIN_COMPONENT_AREA = 6
MAX_PLACEMENT_TRIES = 30
# Outlines are traced on a grid this many times finer than the pixels.
TRACE_SCALE = 4
JPEG_QUALITY = 92
# Shape circumradius as a share of the image side.
RADIUS_RANGE: Tuple[float, float] = (0.09, 0.2)


def shape_polygon(kind: str, center: Tuple[float, float], radius: float,
                  angle: float) -> np.ndarray:
    """Vertices of a shape, shape ``(K, 2)`` in (x, y) pixel coordinates.

    Args:
        kind (str): One of :data:`SHAPE_CLASSES`.
        center (tuple[float, float]): Centre (x, y).
        radius (float): Circumradius (outer radius for the star).
        angle (float): Rotation in radians.

    Returns:
        np.ndarray: Polygon vertices (a circle is a 48-gon).
    """
    if kind == 'circle':
        thetas = np.linspace(0, 2 * math.pi, 48, endpoint=False)
        radii = np.full_like(thetas, radius)
    elif kind == 'square':
        thetas = angle + math.pi / 4 + np.arange(4) * math.pi / 2
        radii = np.full(4, radius)
    elif kind == 'triangle':
        thetas = angle + np.arange(3) * 2 * math.pi / 3
        radii = np.full(3, radius)
    elif kind == 'star':
        thetas = angle + np.arange(10) * math.pi / 5
        radii = np.where(np.arange(10) % 2 == 0, radius, 0.45 * radius)
    else:
        raise ValueError(f'unknown shape {kind!r}; choose from '
                         f'{SHAPE_CLASSES}')
    xs = center[0] + radii * np.cos(thetas)
    ys = center[1] + radii * np.sin(thetas)
    return np.stack([xs, ys], axis=1)


def rasterize(polygon: np.ndarray, size: int) -> np.ndarray:
    """Boolean ``(size, size)`` mask of a polygon."""
    canvas = Image.new('L', (size, size), 0)
    ImageDraw.Draw(canvas).polygon(
        [tuple(p) for p in polygon.round(2).tolist()], fill=1)
    return np.asarray(canvas, dtype=bool)


def render_background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A float ``(size, size, 3)`` background: gradient, waves, strokes."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    corners = rng.uniform(40, 215, size=(4, 3)).astype(np.float32)
    top = corners[0] * (1 - xx[..., None]) + corners[1] * xx[..., None]
    bottom = corners[2] * (1 - xx[..., None]) + corners[3] * xx[..., None]
    image = top * (1 - yy[..., None]) + bottom * yy[..., None]
    for _ in range(3):
        freq = rng.uniform(2, 12, size=2)
        phase = rng.uniform(0, 2 * math.pi)
        wave = np.sin(2 * math.pi * (freq[0] * xx + freq[1] * yy) + phase)
        image += wave[..., None] * rng.uniform(-18, 18, size=3)
    # Thin strokes that are not objects, so edges alone do not mean "shape".
    canvas = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0, x1, y1 = rng.uniform(0, size, size=4).tolist()
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        draw.line([(x0, y0), (x1, y1)], fill=colour,
                  width=int(rng.integers(1, 3)))
    return np.asarray(canvas, dtype=np.float32)


def _has_hole(mask: np.ndarray) -> bool:
    _, hierarchy = cv2.findContours(
        mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    return hierarchy is not None and bool((hierarchy[0, :, 3] >= 0).any())


def _accepts(candidate: np.ndarray, full_masks: List[np.ndarray],
             visible_masks: List[np.ndarray]) -> bool:
    """Whether ``candidate`` on top leaves every earlier shape readable."""
    for full, visible in zip(full_masks, visible_masks):
        remaining = visible & ~candidate
        if remaining.sum() < MIN_VISIBLE_FRACTION * full.sum():
            return False
        if _has_hole(remaining):
            return False
    return True


def make_scene(rng: np.random.Generator,
               size: int,
               num_shapes: Tuple[int, int] = (2, 5),
               radius_range: Tuple[float, float] = RADIUS_RANGE,
               noise_std: float = 6.0) -> Tuple[np.ndarray, List[dict]]:
    """Draw one image and its instances.

    Args:
        rng (np.random.Generator): Source of all randomness.
        size (int): Image side in pixels.
        num_shapes (tuple[int, int]): Inclusive range of shapes attempted.
        radius_range (tuple[float, float]): Shape circumradius as a share
            of the image side.
        noise_std (float): Std of the per-pixel Gaussian noise.

    Returns:
        tuple[np.ndarray, list[dict]]: The uint8 ``(size, size, 3)`` image
        and one dict per instance with ``category`` (index into
        :data:`SHAPE_CLASSES`), ``mask`` (visible part, bool) and
        ``full_area`` (pixels of the whole shape, hidden parts included).
    """
    image = render_background(rng, size)
    categories: List[int] = []
    full_masks: List[np.ndarray] = []
    visible_masks: List[np.ndarray] = []
    for _ in range(int(rng.integers(num_shapes[0], num_shapes[1] + 1))):
        for _ in range(MAX_PLACEMENT_TRIES):
            category = int(rng.integers(len(SHAPE_CLASSES)))
            radius = rng.uniform(*radius_range) * size
            center = tuple(rng.uniform(radius * 0.6, size - radius * 0.6,
                                       size=2).tolist())
            polygon = shape_polygon(SHAPE_CLASSES[category], center, radius,
                                    rng.uniform(0, 2 * math.pi))
            candidate = rasterize(polygon, size)
            # At least half of the shape inside the image, and no earlier
            # shape hidden beyond recognition.
            if candidate.sum() >= 0.5 * _polygon_area(polygon) and _accepts(
                    candidate, full_masks, visible_masks):
                break
        else:
            continue  # no room for another readable shape
        visible_masks = [v & ~candidate for v in visible_masks]
        categories.append(category)
        full_masks.append(candidate)
        visible_masks.append(candidate)
        image[candidate] = _shape_colour(rng, image[candidate].mean(axis=0))
    image += rng.normal(0, noise_std, size=image.shape).astype(np.float32)
    instances = [
        dict(category=c, mask=v, full_area=int(f.sum()))
        for c, v, f in zip(categories, visible_masks, full_masks)
    ]
    return np.clip(image, 0, 255).round().astype(np.uint8), instances


def _polygon_area(polygon: np.ndarray) -> float:
    x, y = polygon[:, 0], polygon[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, 1)) -
                           np.dot(y, np.roll(x, 1))))


def _shape_colour(rng: np.random.Generator,
                  under: np.ndarray) -> np.ndarray:
    """A random colour that differs clearly from what it covers."""
    for _ in range(20):
        colour = rng.uniform(0, 255, size=3)
        if np.abs(colour - under).sum() > 120:
            break
    return colour.astype(np.float32)


def mask_to_polygons(mask: np.ndarray) -> List[List[float]]:
    """COCO polygons (flat ``[x0, y0, x1, y1, ...]`` lists) of a mask.

    Coordinates follow COCO (pixel ``(x, y)`` covers ``[x, x + 1)``). The
    outline is traced on a finer grid, so it follows the pixel edges
    instead of the pixel centres and rasterises back to the same mask
    (tracing centres would shave half a pixel off every side).
    """
    fine = np.kron(mask.astype(np.uint8),
                   np.ones((TRACE_SCALE, TRACE_SCALE), np.uint8))
    contours, _ = cv2.findContours(fine, cv2.RETR_EXTERNAL,
                                   cv2.CHAIN_APPROX_SIMPLE)
    polygons = []
    for contour in contours:
        area = cv2.contourArea(contour) / TRACE_SCALE**2
        if len(contour) < 3 or area < MIN_COMPONENT_AREA:
            continue
        points = (contour.reshape(-1, 2) + 0.5) / TRACE_SCALE
        polygons.append([round(float(v), 3) for v in points.reshape(-1)])
    return polygons


def scene_annotations(instances: Sequence[dict], image_id: int,
                      first_ann_id: int) -> List[dict]:
    """COCO annotation dicts for the instances of one image.

    The box spans the polygons; the area counts the visible pixels, which
    the polygons rasterise back to.
    """
    annotations = []
    for instance in instances:
        polygons = mask_to_polygons(instance['mask'])
        if not polygons:
            continue
        points = np.concatenate(
            [np.asarray(p).reshape(-1, 2) for p in polygons])
        x0, y0 = points.min(axis=0)
        x1, y1 = points.max(axis=0)
        annotations.append(
            dict(
                id=first_ann_id + len(annotations),
                image_id=image_id,
                category_id=instance['category'] + 1,
                segmentation=polygons,
                area=float(instance['mask'].sum()),
                bbox=[float(x0), float(y0),
                      float(x1 - x0), float(y1 - y0)],
                iscrowd=0))
    return annotations


def generate_split(out_root: str,
                   split: str,
                   num_images: int,
                   image_size: int = 256,
                   seed: int = 0) -> str:
    """Write the images and the COCO json of one split.

    Images go to ``<out_root>/<split>/``, annotations to
    ``<out_root>/annotations/instances_<split>.json``.

    Returns:
        str: Path of the annotation file.
    """
    if split not in SPLITS:
        raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
    image_dir = osp.join(out_root, split)
    ann_dir = osp.join(out_root, 'annotations')
    os.makedirs(image_dir, exist_ok=True)
    os.makedirs(ann_dir, exist_ok=True)
    images: List[dict] = []
    annotations: List[dict] = []
    for index in range(num_images):
        # One generator per image: any image can be regenerated on its own,
        # and train/val never share a random stream.
        rng = np.random.default_rng([seed, SPLITS.index(split), index])
        image, instances = make_scene(rng, image_size)
        image_id = index + 1
        file_name = f'{index:06d}.jpg'
        Image.fromarray(image).save(
            osp.join(image_dir, file_name), quality=JPEG_QUALITY)
        images.append(
            dict(
                id=image_id,
                file_name=file_name,
                width=image_size,
                height=image_size))
        annotations += scene_annotations(instances, image_id,
                                         len(annotations) + 1)
    coco = dict(
        info=dict(
            description='mmlaplacian synthetic shapes',
            version='1.0',
            seed=seed,
            image_size=image_size),
        licenses=[],
        images=images,
        annotations=annotations,
        categories=[
            dict(id=i + 1, name=name, supercategory='shape')
            for i, name in enumerate(SHAPE_CLASSES)
        ])
    ann_file = osp.join(ann_dir, f'instances_{split}.json')
    with open(ann_file, 'w', encoding='utf-8') as f:
        json.dump(coco, f, sort_keys=True, separators=(',', ':'))
    return ann_file


def make_synthetic_coco(out_root: str,
                        num_train: int = 200,
                        num_val: int = 50,
                        image_size: int = 256,
                        seed: int = 0) -> Dict[str, str]:
    """Write the train and val splits under ``out_root``.

    Args:
        out_root (str): Dataset folder (created if needed).
        num_train (int): Training images.
        num_val (int): Validation images.
        image_size (int): Square image side in pixels.
        seed (int): Seed; equal arguments give byte-identical files.

    Returns:
        dict[str, str]: Annotation file path per split.
    """
    if image_size < 32:
        raise ValueError(f'image_size must be >= 32, got {image_size}')
    return {
        split: generate_split(out_root, split, count, image_size, seed)
        for split, count in zip(SPLITS, (num_train, num_val))
    }


def is_complete(out_root: str,
                image_size: Optional[int] = None,
                seed: Optional[int] = None) -> bool:
    """Whether both splits exist, with all images, made as asked.

    Args:
        out_root (str): Dataset folder.
        image_size (int, optional): Required image side, if any.
        seed (int, optional): Required seed, if any.
    """
    for split in SPLITS:
        ann_file = osp.join(out_root, 'annotations', f'instances_{split}.json')
        if not osp.isfile(ann_file):
            return False
        with open(ann_file, encoding='utf-8') as f:
            coco = json.load(f)
        info = coco.get('info', {})
        if image_size is not None and info.get('image_size') != image_size:
            return False
        if seed is not None and info.get('seed') != seed:
            return False
        if not all(
                osp.isfile(osp.join(out_root, split, image['file_name']))
                for image in coco['images']):
            return False
    return True
