"""mmdet's own inference and dataset tools on our configs and a model
trained by tools/train.py (README, "Tools"): the configs' custom_imports
load mmlaplacian, nothing of ours wraps them."""
import glob
import os.path as osp
from typing import Optional

import mmdet
import numpy as np
import pytest
from detection_utils import MASK_RCNN_CONFIG, repo_path, run_tool
from PIL import Image
from pycocotools import mask as mask_util
from pycocotools.coco import COCO
from scipy import ndimage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
MMDET_TOOLS = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools')
# A drawn box outline changes the pixels it crosses by far more than JPEG's
# re-encoding (a few levels) changes any pixel; the outline of a box moved
# by a few pixels, where no box was drawn, changed by about 20 (median).
DRAWN = 40


def pixels(path: str) -> np.ndarray:
    return np.asarray(Image.open(path).convert('RGB'), dtype=np.int16)


def outline_change(drawn: np.ndarray, original: np.ndarray, box,
                   masks: np.ndarray) -> Optional[float]:
    """Mean change (largest over the channels) from ``original`` to
    ``drawn`` of the pixels on the outline of ``box`` (x1, y1, x2, y2 in
    pixels), leaving out those within 2 pixels of ``masks`` (boolean,
    image-sized), which the visualiser paints and outlines too; None when
    fewer than 4 outline pixels are left."""
    assert drawn.shape == original.shape
    change = np.abs(drawn - original).max(-1)
    height, width = change.shape
    x1, x2 = (int(np.clip(round(v), 0, width - 1)) for v in box[0::2])
    y1, y2 = (int(np.clip(round(v), 0, height - 1)) for v in box[1::2])
    outline = np.zeros(change.shape, dtype=bool)
    outline[[y1, y2], x1:x2 + 1] = True
    outline[y1:y2 + 1, [x1, x2]] = True
    outline &= ~ndimage.binary_dilation(masks, iterations=2)
    return float(change[outline].mean()) if outline.sum() >= 4 else None


def train_images(synthetic_coco: str) -> dict:
    """File name -> ground-truth boxes (x1, y1, x2, y2) and the union of
    the masks of each training image, in the annotation file's order."""
    coco = COCO(osp.join(synthetic_coco, 'annotations',
                         'instances_train.json'))
    images = {}
    for image_id, image in coco.imgs.items():
        anns = coco.imgToAnns[image_id]
        boxes = [(x, y, x + w, y + h) for x, y, w, h in
                 (a['bbox'] for a in anns)]
        masks = np.any([coco.annToMask(a) for a in anns], axis=0)
        images[image['file_name']] = (boxes, masks)
    return images


def test_det_inferencer_draws_its_predicted_boxes(trained_mask_rcnn,
                                                  synthetic_coco, tmp_path):
    """The README's DetInferencer line, with a trained checkpoint, on two
    images the model has learnt: the outlines of the confident boxes it
    predicts are drawn."""
    from mmdet.apis import DetInferencer
    names = list(train_images(synthetic_coco))[:2]
    images = [osp.join(synthetic_coco, 'train', name) for name in names]
    inferencer = DetInferencer(model=repo_path(MASK_RCNN_CONFIG),
                               weights=trained_mask_rcnn['checkpoint'],
                               device='cpu')
    threshold = 0.5
    result = inferencer(images, out_dir=str(tmp_path),
                        pred_score_thr=threshold, no_save_pred=True)
    written = sorted(glob.glob(str(tmp_path / 'vis' / '*.jpg')))
    assert [osp.basename(p) for p in written] == sorted(names)
    for image, prediction in zip(images, result['predictions']):
        drawn_ones = [i for i, score in enumerate(prediction['scores'])
                      if score >= threshold]
        assert drawn_ones, f'no confident box on a learnt image: {prediction}'
        boxes = [prediction['bboxes'][i] for i in drawn_ones]
        masks = np.any(mask_util.decode(
            [prediction['masks'][i] for i in drawn_ones]), axis=-1)
        drawn = pixels(str(tmp_path / 'vis' / osp.basename(image)))
        # A box whose outline lies on the masks cannot be told apart.
        changes = [outline_change(drawn, pixels(image), box, masks)
                   for box in boxes]
        seen = [c for c in changes if c is not None]
        assert seen and min(seen) > DRAWN, (boxes, changes)


def test_mmdet_browse_dataset_draws_the_ground_truth_boxes(
        synthetic_coco, synthetic_env, tmp_path):
    """mmdet's browse_dataset.py draws every training image (the test
    config's pipeline keeps them at their size) with each of its boxes."""
    run_tool([
        osp.join(MMDET_TOOLS, 'analysis_tools', 'browse_dataset.py'),
        MASK_RCNN_CONFIG, '--output-dir',
        str(tmp_path), '--not-show'
    ], env=synthetic_env)
    ground_truth = train_images(synthetic_coco)
    assert sorted(osp.basename(p) for p in glob.glob(
        str(tmp_path / '*.jpg'))) == sorted(ground_truth)
    for name, (boxes, masks) in ground_truth.items():
        assert boxes
        drawn = pixels(str(tmp_path / name))
        original = pixels(osp.join(synthetic_coco, 'train', name))
        for box in boxes:
            change = outline_change(drawn, original, box, masks)
            assert change is not None and change > DRAWN, (name, box, change)
