"""The Tiny Mask R-CNN recipe on real COCO images: crowd RLE, sparse ids,
odd sizes.

``configs/mask_rcnn/lf_tiny_1x.py`` goes through ``tools/train.py`` (one
iteration, from scratch) and ``tools/test.py``. A detector this new cannot
score: the run checks what can fail without learning (finite boxes inside
each image, one result per image). Whether
the evaluation itself scores correctly on these images is checked by
feeding it the ground truth (AP 1), then the ground truth with every label
wrong (AP 0).
"""
import json
import os.path as osp

import mmengine
import numpy as np
import pytest
import torch
from detection_utils import (read_test_metrics, repo_path, run_tool,
                             tool_env, write_coco_subset)
from mmdet.datasets import CocoDataset
from mmdet.evaluation import CocoMetric
from pycocotools.coco import COCO

CONFIG = repo_path('configs', 'mask_rcnn', 'lf_tiny_1x.py')
BOXES_PER_IMAGE = 20


def pick_images(coco: dict) -> list:
    """A crowd-annotated image, the tallest image and the smallest one."""
    crowd = sorted({a['image_id'] for a in coco['annotations']
                    if a['iscrowd']})
    images = coco['images']
    tallest = max(images, key=lambda im: im['height'] / im['width'])['id']
    smallest = min(images, key=lambda im: im['height'] * im['width'])['id']
    return sorted({crowd[0], tallest, smallest})


@pytest.fixture(scope='module')
def subset(coco_mini, tmp_path_factory) -> dict:
    source = osp.join(coco_mini, 'annotations', 'instances_val2017.json')
    with open(source) as f:
        coco = json.load(f)
    image_ids = pick_images(coco)
    path = str(tmp_path_factory.mktemp('coco_subset') / 'subset.json')
    write_coco_subset(source, path, image_ids)
    return dict(path=path, image_ids=image_ids)


def train_one_iteration(subset: dict, env: dict, work_dir: str) -> str:
    """The Tiny recipe trained by ``tools/train.py`` for one iteration on
    two of the subset's images at a small scale, without ImageNet weights
    (its warm-up starts at a thousandth of the learning rate: the weights
    stay nearly as initialised). Returns the checkpoint."""
    run_tool([
        'tools/train.py', CONFIG, '--work-dir', work_dir, '--cfg-options',
        'model.backbone.init_cfg=None',
        f'train_dataloader.dataset.ann_file={subset["path"]}',
        'train_dataloader.dataset.data_prefix.img=val2017/',
        'train_dataloader.dataset.indices=2',
        'train_dataloader.dataset.pipeline.2.scale=(416,320)',
        'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False', 'train_cfg.max_epochs=1',
        'val_dataloader=None', 'val_evaluator=None', 'val_cfg=None'
    ], env=env)
    with open(osp.join(work_dir, 'last_checkpoint'), encoding='utf-8') as f:
        return f.read().strip()


@pytest.mark.slow
def test_tiny_recipe_trains_and_gives_boxes_inside_real_images(
        coco_mini, subset, tmp_path):
    env = tool_env(COCO_ROOT=coco_mini)
    checkpoint = train_one_iteration(subset, env, str(tmp_path / 'train'))
    predictions = str(tmp_path / 'predictions.pkl')
    proc = run_tool([
        'tools/test.py', CONFIG, checkpoint, '--work-dir',
        str(tmp_path), '--out', predictions, '--cfg-options',
        f'test_dataloader.dataset.ann_file={subset["path"]}',
        f'test_evaluator.ann_file={subset["path"]}',
        'test_dataloader.dataset.pipeline.1.scale=(416,320)',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        # New weights score below the default 0.05: keep every box so
        # that COCOeval has detections to match, 20 per image (pasting and
        # encoding the config's 100 full-size masks per image took a third
        # of the run).
        'model.test_cfg.rcnn.score_thr=0.0',
        f'model.test_cfg.rcnn.max_per_img={BOXES_PER_IMAGE}'
    ], env=env)

    out = proc.stdout
    count = len(subset['image_ids'])
    assert f'Epoch(test) [{count}/{count}]' in out
    assert out.count('Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all'
                     ) == 2
    metrics = read_test_metrics(str(tmp_path))
    assert {'coco/bbox_mAP', 'coco/segm_mAP'} <= set(metrics)

    images = COCO(subset['path']).imgs
    results = mmengine.load(predictions)
    assert sorted(r['img_id'] for r in results) == subset['image_ids']
    for result in results:
        image = images[result['img_id']]
        assert tuple(result['ori_shape']) == (image['height'],
                                              image['width'])
        pred = result['pred_instances']
        boxes = pred['bboxes']
        assert len(boxes) == BOXES_PER_IMAGE  # every box kept
        assert torch.isfinite(boxes).all()
        assert (boxes[:, 2] >= boxes[:, 0]).all()
        assert (boxes[:, 3] >= boxes[:, 1]).all()
        assert (boxes[:, 0::2] >= 0).all()
        assert (boxes[:, 0::2] <= image['width']).all()
        assert (boxes[:, 1::2] >= 0).all()
        assert (boxes[:, 1::2] <= image['height']).all()
        assert ((pred['labels'] >= 0) & (pred['labels'] < 80)).all()
        assert len(pred['masks']) == len(boxes)


def ground_truth_as_predictions(ann_file: str,
                                wrong_labels: bool = False) -> list:
    """The non-crowd ground truth of each image as mmdet predictions.

    With ``wrong_labels`` every box gets the next class instead of its own.
    """
    coco = COCO(ann_file)
    classes = CocoDataset.METAINFO['classes']
    label_of = {c: classes.index(coco.cats[c]['name']) for c in coco.cats}
    samples = []
    for image_id, image in coco.imgs.items():
        anns = [a for a in coco.imgToAnns[image_id] if not a['iscrowd']]
        boxes = torch.tensor([[x, y, x + w, y + h]
                              for x, y, w, h in (a['bbox'] for a in anns)],
                             dtype=torch.float32)
        masks = np.stack([coco.annToMask(a) for a in anns]).astype(bool)
        labels = torch.tensor([label_of[a['category_id']] for a in anns])
        if wrong_labels:
            labels = (labels + 1) % len(classes)
        samples.append(dict(
            img_id=image_id,
            ori_shape=(image['height'], image['width']),
            pred_instances=dict(
                bboxes=boxes,
                scores=torch.linspace(1, 0.5, len(anns)),
                labels=labels,
                masks=torch.from_numpy(masks))))
    return samples


@pytest.mark.parametrize('wrong_labels, expected', [(False, 1.), (True, 0.)])
def test_coco_metric_scores_real_images_exactly(subset, wrong_labels,
                                                expected):
    metric = CocoMetric(ann_file=subset['path'], metric=['bbox', 'segm'])
    metric.dataset_meta = CocoDataset.METAINFO
    samples = ground_truth_as_predictions(subset['path'], wrong_labels)
    assert len(samples) == len(subset['image_ids'])
    metric.process({}, samples)
    results = metric.evaluate(len(samples))
    for task in ('bbox', 'segm'):
        assert results[f'coco/{task}_mAP'] == pytest.approx(
            expected, abs=1e-3), (task, results)
