"""Shared parts of the GPU acceptance tests (``tests/gpu``).

Every test here needs a CUDA device and is skipped cleanly without one.
Figures the tests measure are appended, one JSON object a line, to the file
named by ``$MMLAPLACIAN_GPU_FIGURES`` (set by ``tools/gpu_check.sh``, which
puts them in its report); without the variable they are only asserted.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Iterable, Iterator, Optional

import pytest
import torch

DEVICE = 'cuda'
FIGURES_ENV = 'MMLAPLACIAN_GPU_FIGURES'
NEEDS_GPU = pytest.mark.skipif(
    not torch.cuda.is_available(), reason='needs a CUDA device')
GPU_TEST = [pytest.mark.cuda, NEEDS_GPU]


def record(check: str, metric: str, value, bound=None) -> None:
    """Append one measured figure for the gpu_check report.

    Args:
        check (str): What was checked, e.g. ``'backbone fwd+bwd'``.
        metric (str): The figure's name, e.g. ``'rel. error CUDA vs fp64'``.
        value: The figure (number or short text).
        bound: The limit the test holds it to, if any.
    """
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    line = dict(check=check, metric=metric, value=value, bound=bound)
    with open(path, 'a', encoding='utf-8') as f:
        f.write(json.dumps(line, default=str) + '\n')


def flat(tensors: Iterable[Optional[torch.Tensor]]) -> torch.Tensor:
    """All tensors as one float64 CPU vector (None counts as empty)."""
    parts = [t.detach().double().cpu().reshape(-1) for t in tensors
             if t is not None]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def relative_error(actual: Iterable, expected: Iterable) -> float:
    """``‖a − e‖ / ‖e‖`` over all tensors together (Frobenius norms)."""
    a, e = flat(actual), flat(expected)
    assert a.shape == e.shape, (a.shape, e.shape)
    return ((a - e).norm() / e.norm().clamp_min(1e-300)).item()


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """fp32 matmuls and convolutions without TF32 (on by default for
    cuDNN), so that CUDA runs at fp32 precision like the CPU."""
    saved = (torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.allow_tf32) = saved


MASK_RCNN_CONFIG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))), 'configs', 'mask_rcnn', 'lf_tiny_1x.py')


def build_mask_rcnn(drop_path_rate: Optional[float] = None) -> torch.nn.Module:
    """Tiny Mask R-CNN of ``configs/mask_rcnn/lf_tiny_1x.py``, built from the
    config with random weights (``init_cfg=None``), on the CPU."""
    from mmdet.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    cfg = Config.fromfile(MASK_RCNN_CONFIG)
    init_default_scope('mmdet')
    cfg.model.backbone.init_cfg = None
    if drop_path_rate is not None:
        cfg.model.backbone.drop_path_rate = drop_path_rate
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def synthetic_detection_batch(num_images: int = 2,
                              size: tuple = (256, 320),
                              seed: int = 0) -> dict:
    """A batch in the form mmdet's data pipeline hands to ``train_step``:
    uint8 images and DetDataSamples with two boxes, labels and masks each."""
    import numpy as np
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    height, width = size
    g = torch.Generator().manual_seed(seed)
    inputs, samples = [], []
    for i in range(num_images):
        inputs.append(torch.randint(0, 256, (3, height, width),
                                    dtype=torch.uint8, generator=g))
        boxes = [[16 + 8 * i, 24, 140, 180], [120, 40 + 8 * i, 300, 230]]
        masks = np.zeros((len(boxes), height, width), dtype=np.uint8)
        for k, (x1, y1, x2, y2) in enumerate(boxes):
            masks[k, y1:y2, x1:x2] = 1
        sample = DetDataSample(metainfo=dict(
            img_shape=(height, width), ori_shape=(height, width),
            scale_factor=(1., 1.)))
        sample.gt_instances = InstanceData(
            bboxes=torch.tensor(boxes, dtype=torch.float32),
            labels=torch.tensor([1 + i, 7]),
            masks=BitmapMasks(masks, height, width))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)
