"""Bad annotation files: the error names the file; classes that do not match
the file's categories warn with the number of boxes dropped."""
import copy
import functools
import json
import os
import os.path as osp
import re
import warnings

import pytest
from detection_utils import MASK_RCNN_CONFIG, RETINANET_CONFIG
from mmdet.registry import DATASETS
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmlaplacian.datasets import CocoClassesWarning

CLASSES = ('circle', 'square', 'triangle', 'star')


@pytest.fixture(scope='module', autouse=True)
def synthetic_data_root(synthetic_coco):
    """The configs' ``data_root`` is the synthetic dataset: the checked
    dataset refuses a missing image folder before it reads any file."""
    saved = os.environ.get('SYNTHETIC_COCO')
    os.environ['SYNTHETIC_COCO'] = synthetic_coco
    load.cache_clear()
    yield
    if saved is None:
        os.environ.pop('SYNTHETIC_COCO')
    else:
        os.environ['SYNTHETIC_COCO'] = saved
    load.cache_clear()


@pytest.fixture(scope='module')
def train_json(synthetic_coco) -> dict:
    with open(osp.join(synthetic_coco, 'annotations',
                       'instances_train.json')) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def load(config: str) -> Config:
    return Config.fromfile(config)  # about a second: read once


def dataset_cfg(config: str, ann_file: str, classes=CLASSES,
                split='train') -> dict:
    """The config's own dataset entry, reading ``ann_file``."""
    cfg = load(config)
    init_default_scope('mmdet')
    loader = cfg.train_dataloader if split == 'train' else cfg.test_dataloader
    data = copy.deepcopy(loader.dataset)
    data.ann_file = ann_file
    data.metainfo = dict(classes=classes)
    return data


def build(ann_file: str, classes=CLASSES, split='train',
          config=MASK_RCNN_CONFIG):
    return DATASETS.build(dataset_cfg(config, ann_file, classes, split))


def write(path, content) -> str:
    if isinstance(content, (dict, list)):
        content = json.dumps(content)
    mode = 'wb' if isinstance(content, bytes) else 'w'
    with open(path, mode) as f:
        f.write(content)
    return str(path)


@pytest.mark.parametrize('config', [MASK_RCNN_CONFIG, RETINANET_CONFIG],
                         ids=['mask_rcnn', 'retinanet'])
def test_configs_use_the_checked_dataset(config, tmp_path):
    path = write(tmp_path / 'instances.json', b'')
    for split in ('train', 'test'):
        assert dataset_cfg(config, path, split=split).type == (
            'CheckedCocoDataset')
        with pytest.raises(ValueError, match=f'annotation file {path} is '
                           'empty'):
            build(path, split=split, config=config)


def test_checked_dataset_reads_what_coco_dataset_reads(synthetic_coco):
    ann_file = osp.join(synthetic_coco, 'annotations', 'instances_train.json')
    checked = build(ann_file)
    cfg = dataset_cfg(MASK_RCNN_CONFIG, ann_file)
    cfg.type = 'CocoDataset'
    plain = DATASETS.build(cfg)
    assert len(checked) == len(plain) == 8
    for i in range(len(plain)):
        assert checked.get_data_info(i) == plain.get_data_info(i)


def truncated(text: str) -> str:
    return text[:int(len(text) * 0.6)]


BAD_FILES = [
    ('empty', lambda coco: b'', 'is empty'),
    ('blank', lambda coco: '\n  \n', 'is empty'),
    ('truncated', lambda coco: truncated(json.dumps(coco)),
     'is not valid JSON: .* it looks truncated'),
    ('malformed', lambda coco: json.dumps(coco).replace('"images"',
                                                        "'images'", 1),
     'is not valid JSON: Expecting property name enclosed in double quotes'
     ' at line 1'),
    ('binary', lambda coco: b'\xff\xd8\xff\xe0 a JPEG, not JSON',
     'is not UTF-8 text'),
    ('a list', lambda coco: [coco], 'holds a JSON list, not a COCO object'),
    ('no annotations', lambda coco: {k: v for k, v in coco.items()
                                     if k != 'annotations'},
     "has no 'annotations'"),
    ('annotation without bbox',
     lambda coco: dict(coco, annotations=[
         {k: v for k, v in coco['annotations'][0].items() if k != 'bbox'}]),
     r"annotations\[0\] has no 'bbox'"),
    ('bbox of 3 numbers',
     lambda coco: dict(coco, annotations=[
         dict(coco['annotations'][0], bbox=[1, 2, 3])]),
     r'annotations\[0\] \(id \d+\) has bbox \[1, 2, 3\], not'),
]


@pytest.mark.parametrize('name, make, expected', BAD_FILES,
                         ids=[case[0] for case in BAD_FILES])
def test_bad_annotation_file_is_named(name, make, expected, train_json,
                                      tmp_path):
    path = write(tmp_path / 'instances_train.json', make(train_json))
    with pytest.raises(ValueError) as error:
        build(path)
    message = str(error.value)
    assert f'annotation file {path}' in message
    assert re.search(expected, message), message


def boxes_of(coco: dict, names) -> int:
    ids = {c['id'] for c in coco['categories'] if c['name'] in names}
    return sum(a['category_id'] in ids for a in coco['annotations'])


def instances(dataset) -> int:
    return sum(
        len(dataset.get_data_info(i)['instances'])
        for i in range(len(dataset)))


@pytest.mark.parametrize('classes, absent', [
    (('circle', 'square'), []),
    (('circle', 'sqaure', 'triangle', 'star'), ['sqaure']),
], ids=['subset', 'misspelt'])
def test_classes_that_drop_boxes_warn_with_the_count(classes, absent,
                                                     synthetic_coco,
                                                     train_json):
    ann_file = osp.join(synthetic_coco, 'annotations', 'instances_train.json')
    total = len(train_json['annotations'])
    kept = boxes_of(train_json, classes)
    assert 0 < kept < total
    with pytest.warns(CocoClassesWarning) as record:
        dataset = build(ann_file, classes=classes)
    messages = [str(w.message) for w in record
                if issubclass(w.category, CocoClassesWarning)]
    assert any(f'{total - kept} of {total} ground-truth boxes are dropped'
               in m and ann_file in m for m in messages), messages
    if absent:
        assert any(f'metainfo.classes {absent} are not categories' in m
                   for m in messages), messages
    # The count is what mmdet really dropped: the boxes left in the dataset
    # (test mode keeps every image) are the ones of the named classes.
    test_set = build(ann_file, classes=classes, split='test')
    assert instances(test_set) == kept
    assert len(dataset) > 0


def test_matching_classes_do_not_warn(synthetic_coco):
    ann_file = osp.join(synthetic_coco, 'annotations', 'instances_train.json')
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        dataset = build(ann_file)
    assert [w for w in record if issubclass(w.category, CocoClassesWarning)
            ] == []
    assert len(dataset) == 8


def test_classes_matching_nothing_stop_training(train_json, tmp_path):
    path = write(tmp_path / 'instances_train.json', train_json)
    total = len(train_json['annotations'])
    with pytest.warns(CocoClassesWarning, match=f'{total} of {total} '
                      'ground-truth boxes are dropped.*AP will be 0'):
        with pytest.raises(ValueError, match='none of the 8 images of '
                           f'{path} is left after filter_cfg'):
            build(path, classes=('person', 'car'))


def test_file_without_images_is_an_error(train_json, tmp_path):
    path = write(tmp_path / 'instances_val.json',
                 dict(train_json, images=[], annotations=[]))
    for split in ('train', 'test'):
        with pytest.raises(ValueError, match=f'annotation file {path} lists '
                           'no images'):
            build(path, split=split)


def test_classes_in_another_order_warn_that_labels_follow_the_file(
        synthetic_coco, train_json):
    ann_file = osp.join(synthetic_coco, 'annotations', 'instances_train.json')
    swapped = ('square', 'circle', 'triangle', 'star')
    with pytest.warns(CocoClassesWarning, match="label 0 is 'circle' in the "
                      "data but named 'square'"):
        dataset = build(ann_file, classes=swapped, split='test')
    # What the warning says is what mmdet does: circles get label 0 although
    # metainfo.classes calls label 0 'square'.
    circle = next(c['id'] for c in train_json['categories']
                  if c['name'] == 'circle')
    first = next(a for a in train_json['annotations']
                 if a['category_id'] == circle)
    index = next(i for i in range(len(dataset))
                 if dataset.get_data_info(i)['img_id'] == first['image_id'])
    x, y, w, h = first['bbox']
    labels = {tuple(i['bbox']): i['bbox_label']
              for i in dataset.get_data_info(index)['instances']}
    assert labels[(x, y, x + w, y + h)] == 0
