"""The synthetic shapes dataset: valid COCO, deterministic, sensible."""
import filecmp
import json
import os
import os.path as osp

import numpy as np
import pytest
from detection_utils import run_tool
from PIL import Image
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from mmlaplacian.synthetic_data.instances import (
    MIN_VISIBLE_FRACTION, SHAPE_CLASSES, is_complete, make_scene,
    make_synthetic_coco)


def test_scene_instances_are_visible_parts():
    rng = np.random.default_rng(3)
    image, instances = make_scene(rng, 128)
    assert image.shape == (128, 128, 3) and image.dtype == np.uint8
    assert instances
    union = np.zeros((128, 128), dtype=int)
    for instance in instances:
        assert 0 <= instance['category'] < len(SHAPE_CLASSES)
        union += instance['mask']
    # Visible parts never overlap: each pixel belongs to one shape at most.
    assert union.max() == 1


def test_coco_files_are_valid(synthetic_coco):
    for split, count in (('train', 8), ('val', 4)):
        ann_file = osp.join(synthetic_coco, 'annotations',
                            f'instances_{split}.json')
        coco = COCO(ann_file)
        assert len(coco.getImgIds()) == count
        assert [c['name'] for c in coco.loadCats(coco.getCatIds())] == list(
            SHAPE_CLASSES)
        assert coco.getAnnIds(), f'{split} has no instances'
        for ann in coco.loadAnns(coco.getAnnIds()):
            info = coco.loadImgs(ann['image_id'])[0]
            image = Image.open(osp.join(synthetic_coco, split,
                                        info['file_name']))
            assert image.size == (info['width'], info['height'])
            assert ann['iscrowd'] == 0
            # Box and area agree with the mask COCO tools rasterise.
            rle = mask_utils.merge(
                mask_utils.frPyObjects(ann['segmentation'], info['height'],
                                       info['width']))
            assert np.allclose(mask_utils.toBbox(rle), ann['bbox'], atol=1)
            assert abs(mask_utils.area(rle) - ann['area']) <= max(
                0.05 * ann['area'], 4)


def test_same_seed_same_bytes(tmp_path):
    first, second = tmp_path / 'a', tmp_path / 'b'
    make_synthetic_coco(str(first), 3, 2, image_size=64, seed=7)
    make_synthetic_coco(str(second), 3, 2, image_size=64, seed=7)
    files = sorted(
        osp.relpath(osp.join(d, f), first) for d, _, fs in os.walk(first)
        for f in fs)
    assert len(files) == 7  # 5 images + 2 annotation files
    match, mismatch, errors = filecmp.cmpfiles(
        first, second, files, shallow=False)
    assert mismatch == [] and errors == []

    make_synthetic_coco(str(tmp_path / 'c'), 3, 2, image_size=64, seed=8)
    assert not filecmp.cmp(first / 'train' / '000000.jpg',
                           tmp_path / 'c' / 'train' / '000000.jpg',
                           shallow=False)


def test_occluded_shapes_stay_readable():
    rng = np.random.default_rng(0)
    visible_fractions = []
    for _ in range(30):
        _, instances = make_scene(rng, 96)
        visible_fractions += [
            inst['mask'].sum() / inst['full_area'] for inst in instances
        ]
    assert min(visible_fractions) >= MIN_VISIBLE_FRACTION
    # Overlaps do happen: some shapes are partly hidden.
    assert min(visible_fractions) < 1


def test_is_complete_checks_files_and_settings(tmp_path):
    root = str(tmp_path)
    assert not is_complete(root)
    make_synthetic_coco(root, 2, 1, image_size=64, seed=5)
    assert is_complete(root) and is_complete(root, image_size=64, seed=5)
    assert not is_complete(root, image_size=128)
    assert not is_complete(root, seed=0)
    os.remove(osp.join(root, 'val', '000000.jpg'))
    assert not is_complete(root)


def test_cli_writes_dataset(tmp_path):
    out = tmp_path / 'synthetic'
    proc = run_tool([
        'tools/dataset_converters/make_synthetic_coco.py', '--out',
        str(out), '--train', '2', '--val', '1', '--size', '64'
    ])
    assert 'train: 2 images' in proc.stdout
    with open(out / 'annotations' / 'instances_val.json') as f:
        assert len(json.load(f)['images']) == 1


def test_unknown_shape_is_rejected():
    from mmlaplacian.synthetic_data.instances import shape_polygon
    with pytest.raises(ValueError, match='hexagon'):
        shape_polygon('hexagon', (0, 0), 1, 0)
