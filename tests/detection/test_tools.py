"""mmdet's own inference and dataset tools on our configs and a model
trained by tools/train.py (README, "Tools"): the configs' custom_imports
load mmlaplacian, nothing of ours wraps them."""
import glob
import os.path as osp

import mmdet
import numpy as np
import pytest
from detection_utils import MASK_RCNN_CONFIG, repo_path, run_tool
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
MMDET_TOOLS = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools')


def differs(drawn: str, original: str) -> bool:
    a = np.asarray(Image.open(drawn).convert('RGB'), dtype=np.int16)
    b = np.asarray(Image.open(original).convert('RGB'), dtype=np.int16)
    return a.shape == b.shape and np.abs(a - b).mean() > 1


def test_det_inferencer_draws_predictions(trained_mask_rcnn, synthetic_coco,
                                          tmp_path):
    """The README's DetInferencer line, with a trained checkpoint."""
    from mmdet.apis import DetInferencer
    images = sorted(glob.glob(osp.join(synthetic_coco, 'val', '*.jpg')))[:2]
    inferencer = DetInferencer(model=repo_path(MASK_RCNN_CONFIG),
                               weights=trained_mask_rcnn['checkpoint'],
                               device='cpu')
    inferencer(images, out_dir=str(tmp_path), pred_score_thr=0.0,
               no_save_pred=True)
    written = sorted(glob.glob(str(tmp_path / 'vis' / '*.jpg')))
    assert [osp.basename(p) for p in written] == [
        osp.basename(p) for p in images]
    for path, original in zip(written, images):
        assert differs(path, original)


def test_mmdet_browse_dataset_draws_ground_truth(synthetic_env, tmp_path):
    run_tool([
        osp.join(MMDET_TOOLS, 'analysis_tools', 'browse_dataset.py'),
        MASK_RCNN_CONFIG, '--output-dir',
        str(tmp_path), '--not-show'
    ], env=synthetic_env)
    assert glob.glob(str(tmp_path / '*.jpg'))
