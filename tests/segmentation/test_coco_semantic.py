"""Real photographs: the COCO subset as 81-class label maps, trained a few
iterations with tools/train.py and evaluated with tools/test.py.

Too short to learn anything: it checks that polygons and crowd RLE become
label maps, that real, odd-sized images flow through the tools, and that
the means reported are those of the per-class table.
"""
import os.path as osp
import re

import numpy as np
import pytest
from detection_utils import read_test_metrics, repo_path, run_tool, tool_env
from PIL import Image
from pycocotools.coco import COCO

from tools.dataset_converters.coco_to_semantic import IGNORE_INDEX, convert

pytestmark = pytest.mark.slow

QUICKSTART = repo_path('configs', 'quickstart',
                       'sem_fpn_lf_tiny_synthetic_seg.py')


def check_label_maps(ann_file: str, label_dir: str, meta: dict) -> None:
    coco = COCO(ann_file)
    crowd_images = {a['image_id'] for a in coco.loadAnns(
        coco.getAnnIds(iscrowd=True))}
    assert crowd_images, 'the subset should hold crowd (RLE) regions'
    for image_id in sorted(crowd_images)[:2] + sorted(coco.getImgIds())[:2]:
        info = coco.loadImgs(image_id)[0]
        labels = np.asarray(Image.open(osp.join(
            label_dir, osp.splitext(info['file_name'])[0] + '.png')))
        assert labels.shape == (info['height'], info['width'])
        values = set(np.unique(labels).tolist())
        assert values <= set(range(len(meta['classes']))) | {IGNORE_INDEX}
        if image_id in crowd_images:  # crowd RLE -> ignored pixels
            assert IGNORE_INDEX in values
        names = {meta['classes'][v] for v in values if v != IGNORE_INDEX}
        present = {coco.loadCats(a['category_id'])[0]['name']
                   for a in coco.loadAnns(coco.getAnnIds(imgIds=image_id,
                                                         iscrowd=False))}
        # Every class drawn is annotated there; small objects may be hidden
        # by larger ones only if they lie beneath, never vanish wholesale.
        assert names - {'background'} <= present
        assert len(names - {'background'}) >= 0.5 * len(present)


def write_config(path: str, coco_mini: str, labels: dict,
                 classes: list) -> None:
    size = 160
    load = ["dict(type='LoadImageFromFile')", "dict(type='LoadAnnotations')"]
    resize = [f"dict(type='Resize', scale=({size}, {size}), keep_ratio=True)"]
    pack = ["dict(type='PackSegInputs')"]
    # Evaluation compares with the label map at full size (mmseg's order).
    pipelines = dict(
        train2017='[' + ', '.join(load + resize + pack) + ']',
        val2017='[' + ', '.join(load[:1] + resize + load[1:] + pack) + ']')

    def dataset(split: str, count: int) -> str:
        return (f"dict(data_root=None, metainfo=dict(classes={classes!r}, "
                f"palette=[]), indices={count}, data_prefix=dict("
                f"img_path={osp.join(coco_mini, split)!r}, "
                f"seg_map_path={labels[split]!r}), "
                f"pipeline={pipelines[split]})")

    with open(path, 'w', encoding='utf-8') as f:
        f.write(f"""_base_ = {QUICKSTART!r}
model = dict(data_preprocessor=dict(size=({size}, {size})),
             decode_head=dict(num_classes={len(classes)}))
train_dataloader = dict(batch_size=2, dataset={dataset('train2017', 8)})
# Photos of different sizes: mmseg predicts one image per batch.
val_dataloader = dict(batch_size=1, dataset={dataset('val2017', 4)})
test_dataloader = val_dataloader
train_cfg = dict(max_iters=4, val_interval=4)
param_scheduler = []
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=4, max_keep_ckpts=1))
""")


def test_coco_mini_label_maps_train_and_evaluate(coco_mini, tmp_path):
    labels, meta = {}, {}
    for split in ('train2017', 'val2017'):
        ann_file = osp.join(coco_mini, 'annotations',
                            f'instances_{split}.json')
        labels[split] = str(tmp_path / 'labels' / split)
        meta[split] = convert(ann_file, labels[split])
        assert len(meta[split]['classes']) == 81  # background + 80
        check_label_maps(ann_file, labels[split], meta[split])
    assert meta['train2017']['classes'] == meta['val2017']['classes']
    classes = meta['val2017']['classes']

    config = str(tmp_path / 'sem_fpn_coco_mini.py')
    write_config(config, coco_mini, labels, classes)
    work_dir = str(tmp_path / 'work')
    env = tool_env()
    run_tool([
        'tools/train.py', config, '--work-dir', work_dir, '--cfg-options',
        'val_dataloader=None', 'val_evaluator=None', 'val_cfg=None'
    ], env=env)
    with open(osp.join(work_dir, 'last_checkpoint'), encoding='utf-8') as f:
        checkpoint = f.read().strip()
    out = run_tool(['tools/test.py', config, checkpoint, '--work-dir',
                    work_dir], env=env).stdout
    assert 'Iter(test) [4/4]' in out and 'per class results' in out
    for name in ('background', 'person', 'toothbrush'):
        assert re.search(rf'\|\s+{name}\s+\|', out), name
    # Four iterations learn nothing to floor; the means must be those of
    # the per-class table (mmseg leaves classes absent from the four
    # images out, as nan).
    rows = re.findall(r'^\|\s*([a-z][a-z ]*?)\s*\|\s*([\d.]+|nan)\s*\|'
                      r'\s*([\d.]+|nan)\s*\|$', out, re.M)
    assert [name for name, _, _ in rows] == classes
    metrics = read_test_metrics(work_dir)
    for key, column in (('mIoU', 1), ('mAcc', 2)):
        values = [float(row[column]) for row in rows if row[column] != 'nan']
        assert values, rows
        assert metrics[key] == pytest.approx(np.mean(values), abs=0.01), key
