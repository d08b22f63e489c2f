"""The synthetic scenes as label maps: the COCO scenes, labelled right."""
import filecmp
import json
import os
import os.path as osp

import numpy as np
import pytest
from detection_utils import run_tool
from PIL import Image
from pycocotools.coco import COCO

from mmlaplacian.synthetic_data.label_maps import (IGNORE_INDEX,
                                                    SEG_CLASSES,
                                                    is_complete_seg,
                                                    make_synthetic_seg,
                                                    scene_label_map)
from mmlaplacian.synthetic_data.instances import (RADIUS_RANGE,
                                                       make_scene,
                                                       make_synthetic_coco)


def test_label_maps_match_the_coco_masks_of_the_same_scenes(tmp_path):
    seg, coco_root = str(tmp_path / 'seg'), str(tmp_path / 'coco')
    make_synthetic_seg(seg, 3, 2, image_size=96, seed=4, ignore_border=0)
    make_synthetic_coco(coco_root, 3, 2, image_size=96, seed=4)
    for split in ('train', 'val'):
        coco = COCO(osp.join(coco_root, 'annotations',
                             f'instances_{split}.json'))
        for info in coco.loadImgs(coco.getImgIds()):
            stem = osp.splitext(info['file_name'])[0]
            # Byte for byte the same pictures as the detection dataset.
            assert filecmp.cmp(
                osp.join(seg, 'img_dir', split, stem + '.jpg'),
                osp.join(coco_root, split, info['file_name']),
                shallow=False)
            labels = np.asarray(
                Image.open(osp.join(seg, 'ann_dir', split, stem + '.png')))
            assert labels.shape == (96, 96) and labels.dtype == np.uint8
            expected = np.zeros_like(labels)
            for ann in coco.loadAnns(coco.getAnnIds(imgIds=info['id'])):
                expected[coco.annToMask(ann).astype(bool)] = \
                    ann['category_id']
            # COCO polygons rasterise back to the masks within a pixel's
            # rim: nearly every pixel agrees.
            assert (labels == expected).mean() > 0.97


def test_outlines_are_ignored_and_values_are_classes():
    rng = np.random.default_rng(1)
    _, instances = make_scene(rng, 128)
    plain = scene_label_map(instances, 128, ignore_border=0)
    outlined = scene_label_map(instances, 128, ignore_border=1)
    assert set(np.unique(plain)) <= set(range(len(SEG_CLASSES)))
    assert set(np.unique(outlined)) <= set(range(len(SEG_CLASSES))) | {
        IGNORE_INDEX}
    ignored = outlined == IGNORE_INDEX
    # Only shape pixels on a shape's rim become 255; everything else keeps
    # its label.
    assert ignored.any() and (plain[ignored] > 0).all()
    assert (outlined[~ignored] == plain[~ignored]).all()
    for instance in instances:
        interior = instance['mask'].sum() - ignored[instance['mask']].sum()
        assert interior > 0.5 * instance['mask'].sum()
    with pytest.raises(ValueError, match='ignore_border'):
        scene_label_map(instances, 128, ignore_border=-1)


def test_same_seed_same_bytes_and_completeness(tmp_path):
    first, second = str(tmp_path / 'a'), str(tmp_path / 'b')
    make_synthetic_seg(first, 2, 1, image_size=48, seed=3)
    make_synthetic_seg(second, 2, 1, image_size=48, seed=3)
    files = sorted(
        osp.relpath(osp.join(d, f), first) for d, _, fs in os.walk(first)
        for f in fs)
    assert len(files) == 7  # 3 images + 3 label maps + meta.json
    _, mismatch, errors = filecmp.cmpfiles(first, second, files,
                                           shallow=False)
    assert mismatch == [] and errors == []

    assert is_complete_seg(first, image_size=48, seed=3)
    assert not is_complete_seg(first, image_size=64)
    assert not is_complete_seg(first, seed=0)
    # Made with the detection dataset's shape sizes, which meta.json says.
    assert is_complete_seg(first, radius_range=RADIUS_RANGE)
    assert not is_complete_seg(first, radius_range=(0.15, 0.3))
    assert is_complete_seg(first, num_train=2, num_val=1)
    assert not is_complete_seg(first, num_train=3)
    os.remove(osp.join(first, 'ann_dir', 'val', '000000.png'))
    assert not is_complete_seg(first)
    assert not is_complete_seg(str(tmp_path / 'absent'))


def test_cli_writes_and_then_keeps_the_dataset(tmp_path, load_script,
                                              capsys):
    out = tmp_path / 'seg'
    args = [
        '--out', str(out), '--train', '2', '--val', '1', '--size', '48',
        '--skip-if-complete'
    ]
    script = 'tools/dataset_converters/make_synthetic_seg.py'
    # The command line, once to write and once to refuse; in between its
    # main() (the same code, without a process start each time).
    assert 'train: 2 images' in run_tool([script, *args]).stdout
    with open(out / 'meta.json') as f:
        meta = json.load(f)
    assert meta['classes'] == list(SEG_CLASSES)
    assert meta['counts'] == {'train': 2, 'val': 1}
    tool = load_script(script)
    tool.main(args)
    assert 'not generating it again' in capsys.readouterr().out
    # Other shape sizes are another dataset: written again.
    tool.main(args + ['--radius', '0.15', '0.3'])
    assert 'train: 2 images' in capsys.readouterr().out
    with open(out / 'meta.json') as f:
        assert json.load(f)['radius_range'] == [0.15, 0.3]
    reversed_range = run_tool([script, *args, '--radius', '0.3', '0.15'],
                              expect_success=False)
    assert reversed_range.returncode != 0
    assert 'radius_range must satisfy' in reversed_range.stdout


def test_radius_range_sets_the_shape_sizes(tmp_path):
    root = str(tmp_path / 'big')
    make_synthetic_seg(root, 4, 0, image_size=64, seed=2,
                       radius_range=(0.25, 0.3), ignore_border=0)
    for index in range(4):
        rng = np.random.default_rng([2, 0, index])
        _, instances = make_scene(rng, 64, radius_range=(0.25, 0.3))
        labels = np.asarray(
            Image.open(osp.join(root, 'ann_dir', 'train',
                                f'{index:06d}.png')))
        assert (labels == scene_label_map(instances, 64, 0)).all()
        # Radius >= 16 px: even a half-visible star covers over 160 pixels
        # (the default sizes' smallest star, radius 5.8 px, covers 44).
        assert min(i['full_area'] for i in instances) > 120
