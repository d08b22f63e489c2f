"""COCO evaluation on real COCO images: crowd RLE, sparse ids, odd sizes."""
import json
import os.path as osp

import pytest
import torch
from detection_utils import (read_test_metrics, repo_path, run_tool,
                             tool_env, write_coco_subset)
from mmdet.registry import MODELS
from mmengine.config import Config
from mmengine.registry import init_default_scope

pytestmark = pytest.mark.slow

CONFIG = repo_path('configs', 'mask_rcnn', 'lf_tiny_1x.py')


def pick_images(coco: dict) -> list:
    """A crowd-annotated image, the tallest image and the smallest one."""
    crowd = sorted({a['image_id'] for a in coco['annotations']
                    if a['iscrowd']})
    images = coco['images']
    tallest = max(images, key=lambda im: im['height'] / im['width'])['id']
    smallest = min(images, key=lambda im: im['height'] * im['width'])['id']
    return sorted({crowd[0], tallest, smallest})


def save_random_detector(path: str) -> None:
    """A randomly initialised Tiny Mask R-CNN (80 classes) checkpoint."""
    cfg = Config.fromfile(CONFIG)
    init_default_scope('mmdet')
    cfg.model.backbone.init_cfg = None
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)


def test_coco_metric_on_real_images(coco_mini, tmp_path):
    source = osp.join(coco_mini, 'annotations', 'instances_val2017.json')
    with open(source) as f:
        coco = json.load(f)
    image_ids = pick_images(coco)
    subset = write_coco_subset(source, str(tmp_path / 'subset.json'),
                               image_ids)
    checkpoint = str(tmp_path / 'random.pth')
    save_random_detector(checkpoint)

    proc = run_tool([
        'tools/test.py', CONFIG, checkpoint, '--work-dir',
        str(tmp_path), '--cfg-options',
        f'test_dataloader.dataset.ann_file={subset}',
        f'test_evaluator.ann_file={subset}',
        'test_dataloader.dataset.pipeline.1.scale=(416,320)',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        # Random weights score below the default 0.05: keep every box so
        # that COCOeval has detections to match.
        'model.test_cfg.rcnn.score_thr=0.0'
    ], env=tool_env(COCO_ROOT=coco_mini))

    out = proc.stdout
    count = len(image_ids)
    assert f'Epoch(test) [{count}/{count}]' in out
    assert out.count('Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all'
                     ) == 2
    assert 'Evaluating bbox' in out and 'Evaluating segm' in out
    metrics = read_test_metrics(str(tmp_path))
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert 0 <= metrics[key] <= 1
