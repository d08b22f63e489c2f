"""COCO evaluation on real COCO images: crowd RLE, sparse ids, odd sizes.

An untrained detector cannot score: its run checks what can fail without
learning (finite boxes inside each image, one result per image). Whether
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
from mmdet.registry import MODELS
from mmengine.config import Config
from mmengine.registry import init_default_scope
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


def save_random_detector(path: str) -> None:
    """A randomly initialised Tiny Mask R-CNN (80 classes) checkpoint."""
    cfg = Config.fromfile(CONFIG)
    init_default_scope('mmdet')
    cfg.model.backbone.init_cfg = None
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)


@pytest.mark.slow
def test_untrained_detector_on_real_images_gives_boxes_inside_them(
        coco_mini, subset, tmp_path):
    checkpoint = str(tmp_path / 'random.pth')
    save_random_detector(checkpoint)
    predictions = str(tmp_path / 'predictions.pkl')
    proc = run_tool([
        'tools/test.py', CONFIG, checkpoint, '--work-dir',
        str(tmp_path), '--out', predictions, '--cfg-options',
        f'test_dataloader.dataset.ann_file={subset["path"]}',
        f'test_evaluator.ann_file={subset["path"]}',
        'test_dataloader.dataset.pipeline.1.scale=(416,320)',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        # Random weights score below the default 0.05: keep every box so
        # that COCOeval has detections to match, 20 per image (pasting and
        # encoding the config's 100 full-size masks per image took a third
        # of the run).
        'model.test_cfg.rcnn.score_thr=0.0',
        f'model.test_cfg.rcnn.max_per_img={BOXES_PER_IMAGE}'
    ], env=tool_env(COCO_ROOT=coco_mini))

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
