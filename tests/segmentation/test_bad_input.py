"""Broken label maps stop the run with a message naming the file."""
import os
import os.path as osp
import shutil

import numpy as np
import pytest
from detection_utils import run_tool, tool_env
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image
from seg_utils import SEG_CONFIG

from mmlaplacian.datasets import CheckLabelMap, LabelMapError


@pytest.fixture
def seg_copy(synthetic_seg, tmp_path) -> str:
    """A private copy of the synthetic label-map dataset, to break."""
    root = str(tmp_path / 'seg')
    shutil.copytree(synthetic_seg, root)
    return root


def build_train_set(root: str):
    from mmseg.registry import DATASETS
    cfg = Config.fromfile(SEG_CONFIG)
    init_default_scope('mmseg')
    dataset_cfg = cfg.train_dataloader.dataset
    dataset_cfg.data_root = root
    return DATASETS.build(dataset_cfg)


def label_path(root: str, index: int = 0) -> str:
    return osp.join(root, 'ann_dir', 'train', f'{index:06d}.png')


def test_clean_data_passes(seg_copy):
    dataset = build_train_set(seg_copy)
    assert len(dataset) == 8
    assert any(isinstance(t, CheckLabelMap)
               for t in dataset.pipeline.transforms)
    dataset[0]


def test_label_map_of_another_size(seg_copy):
    path = label_path(seg_copy, 2)
    Image.open(path).resize((48, 64), Image.NEAREST).save(path)
    dataset = build_train_set(seg_copy)
    with pytest.raises(LabelMapError) as error:
        dataset[2]
    message = str(error.value)
    assert path in message and '48x64' in message and '64x64' in message
    assert osp.join(seg_copy, 'img_dir', 'train', '000002.jpg') in message


def test_values_outside_the_classes(seg_copy):
    path = label_path(seg_copy, 1)
    labels = np.asarray(Image.open(path)).copy()
    labels[:3, :3] = 9
    labels[-1, -1] = 17
    Image.fromarray(labels).save(path)
    dataset = build_train_set(seg_copy)
    with pytest.raises(LabelMapError,
                       match=rf'{path} holds values 9, 17 .*0\.\.4.*255'):
        dataset[1]


def test_colour_label_image(seg_copy):
    path = label_path(seg_copy, 0)
    labels = np.asarray(Image.open(path))
    Image.fromarray(np.stack([labels] * 3, axis=-1)).save(path)
    with pytest.raises(LabelMapError, match='colour'):
        # LoadAnnotations reads label PNGs unchanged: an RGB file stays
        # three-channel.
        build_train_set(seg_copy)[0]


def test_missing_ann_dir_is_named_before_training(seg_copy):
    shutil.rmtree(osp.join(seg_copy, 'ann_dir', 'train'))
    with pytest.raises(FileNotFoundError,
                       match=r'ann_dir.*not found: .*ann_dir/train'):
        build_train_set(seg_copy)


def test_image_without_label_map(seg_copy):
    missing = label_path(seg_copy, 5)
    os.remove(missing)
    with pytest.raises(FileNotFoundError,
                       match=rf'1 of 8 images have no label map.*{missing}'):
        build_train_set(seg_copy)


def test_bad_num_classes_argument():
    with pytest.raises(ValueError, match='num_classes'):
        CheckLabelMap(num_classes=0)


@pytest.mark.slow
def test_train_tool_refuses_bad_values(seg_copy, tmp_path):
    # Every label map is broken: whichever the sampler draws first fails.
    for index in range(8):
        path = label_path(seg_copy, index)
        labels = np.asarray(Image.open(path)).copy()
        labels[0, 0] = 7
        Image.fromarray(labels).save(path)
    proc = run_tool([
        'tools/train.py', SEG_CONFIG, '--work-dir',
        str(tmp_path / 'work'), '--cfg-options', 'val_dataloader=None',
        'val_evaluator=None', 'val_cfg=None'
    ], env=tool_env(SYNTHETIC_SEG=seg_copy), expect_success=False)
    assert proc.returncode != 0
    assert 'LabelMapError' in proc.stdout
    assert osp.join(seg_copy, 'ann_dir', 'train') in proc.stdout
    assert 'holds values 7 that are neither class ids' in proc.stdout
    assert 'Iter(train)' not in proc.stdout  # not one step on garbage
