"""The PyTorch side of a comparison: build a model from a config, and run
mmdet's own eager inference on the image the exported graph sees."""
from __future__ import annotations

import copy
import logging
from typing import Optional

import torch
import torch.nn as nn


def build_model(cfg, checkpoint: Optional[str] = None) -> nn.Module:
    """Build ``cfg.model`` in mmdet's scope, load ``checkpoint`` (weights
    only, ``init_cfg`` skipped when one is given), in eval mode on the CPU.

    Without a checkpoint the weights come from ``init_weights`` with any
    ``Pretrained`` initialisation removed: random weights, seeded, so that
    every process builds the same model.
    """
    from mmdet.registry import MODELS
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint

    import mmlaplacian  # noqa: F401  (registers LaplacianFormer)

    init_default_scope(cfg.get('default_scope', 'mmdet'))
    torch.manual_seed(0)
    model_cfg = copy.deepcopy(cfg.model)
    backbone_cfg = model_cfg.get('backbone')
    if backbone_cfg is not None:
        # A missing ImageNet checkpoint must not stop an export.
        backbone_cfg.pop('init_cfg', None)
    model = MODELS.build(model_cfg)
    if checkpoint:
        load_checkpoint(model, checkpoint, map_location='cpu', strict=True)
    else:
        # init_weights logs every parameter at INFO: keep the output short.
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(logging.WARNING)
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model.eval()


def mmdet_predict(detector: nn.Module, image: torch.Tensor):
    """mmdet's eager inference on ``image`` (``(1, 3, H, W)``, pixel values
    as the pipeline loads them): the data preprocessor, then
    ``predict(rescale=True)`` with the image as its own original.

    Returns:
        InstanceData: ``pred_instances`` (bboxes, scores, labels, masks).
    """
    from mmdet.structures import DetDataSample

    height, width = image.shape[-2:]
    sample = DetDataSample(metainfo=dict(img_shape=(height, width),
                                         ori_shape=(height, width),
                                         pad_shape=(height, width),
                                         scale_factor=(1.0, 1.0)))
    data = detector.data_preprocessor(dict(inputs=[image[0]],
                                           data_samples=[sample]),
                                      training=False)
    with torch.no_grad():
        result = detector.predict(data['inputs'],
                                  data['data_samples'],
                                  rescale=True)
    return result[0].pred_instances
