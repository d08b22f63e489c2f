"""A classification checkpoint initialises the detector's backbone."""
import pytest
import torch
from detection_utils import repo_path
from mmdet.registry import MODELS as DET_MODELS
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope
from mmpretrain.registry import MODELS as CLS_MODELS


def save_classifier(path) -> dict:
    """An mmpretrain LaplacianFormer-Tiny classifier checkpoint.

    Returns:
        dict: The classifier's backbone state dict.
    """
    torch.manual_seed(1)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = CLS_MODELS.build(
            dict(
                type='ImageClassifier',
                backbone=dict(type='LaplacianFormer', arch='tiny'),
                neck=dict(type='GlobalAveragePooling'),
                head=dict(
                    type='LinearClsHead', num_classes=10, in_channels=512)))
    classifier.init_weights()
    # Stand-in for training: every tensor gets a value of its own.
    with torch.no_grad():
        for param in classifier.parameters():
            param.normal_()
        for name, buffer in classifier.named_buffers():
            if buffer.is_floating_point():
                buffer.uniform_(0.5, 1.5)
    state = classifier.state_dict()
    assert any(k.startswith('head.') for k in state)
    torch.save({'state_dict': state, 'meta': {}}, path)
    return {
        k[len('backbone.'):]: v
        for k, v in state.items() if k.startswith('backbone.')
    }


@pytest.mark.parametrize('family', ['mask_rcnn', 'retinanet'])
def test_classifier_checkpoint_reaches_backbone(family, tmp_path):
    checkpoint = tmp_path / 'lf_tiny_in1k.pth'
    expected = save_classifier(checkpoint)

    cfg = Config.fromfile(repo_path('configs', family, 'lf_tiny_1x.py'))
    cfg.model.backbone.init_cfg.checkpoint = str(checkpoint)
    init_default_scope('mmdet')
    detector = DET_MODELS.build(cfg.model)
    loaded = detector.backbone.state_dict()
    key = 'stages.0.pos_embed'
    assert not torch.equal(loaded[key], expected[key])

    detector.init_weights()
    loaded = detector.backbone.state_dict()
    # RetinaNet's backbone has no stage-1 norm (out_indices=(1, 2, 3)).
    assert set(loaded) <= set(expected)
    assert len(loaded) > 50
    mismatched = [k for k in loaded if not torch.equal(loaded[k],
                                                       expected[k])]
    assert mismatched == []
