"""LaplacianFormer through timm: every variant as ``timm.create_model``,
``features_only`` with the right ``feature_info``, timm's model interface,
and a converted backbone checkpoint loaded by ``pretrained=True`` (the
ImageNet classifier's checkpoints: tests/backbone/test_classification.py,
beside mmpretrain)."""
import subprocess
import sys

import pytest
import torch

timm = pytest.importorskip('timm')

import mmlaplacian.adapters.timm_models  # noqa: E402,F401  (registers them)
from mmlaplacian.models import LaplacianFormer  # noqa: E402

VARIANTS = {  # arch: stage channels, written out (not read from arch_zoo)
    'tiny': [64, 128, 320, 512],
    'small': [64, 128, 320, 512],
    'medium': [64, 128, 288, 512],
    'large': [64, 128, 320, 512],
    'huge': [64, 128, 352, 512],
}
IMAGE = (1, 3, 64, 96)


def image(seed=0):
    return torch.rand(IMAGE, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('arch', sorted(VARIANTS))
def test_every_variant_is_a_timm_model_with_feature_info(arch):
    name = f'laplacianformer_{arch}'
    assert name in timm.list_models('laplacianformer_*')
    net = timm.create_model(name, features_only=True, out_indices=(1, 2, 3))
    assert net.feature_info.channels() == VARIANTS[arch][1:]
    assert net.feature_info.reduction() == [8, 16, 32]
    with torch.no_grad():
        maps = net.eval()(image())
    assert [tuple(m.shape) for m in maps] == [
        (1, c, 64 // r, 96 // r)
        for c, r in zip(VARIANTS[arch][1:], (8, 16, 32))
    ]


def test_features_equal_the_detection_backbone():
    """``features_only`` returns what the mmdet backbone with the same
    weights and ``out_indices`` returns."""
    torch.manual_seed(0)
    net = timm.create_model('laplacianformer_tiny', features_only=True,
                            out_indices=(0, 1, 2, 3)).eval()
    backbone = LaplacianFormer('tiny', out_indices=(0, 1, 2, 3)).eval()
    # timm's FeatureGetterNet holds our model as ``model``.
    backbone.load_state_dict(net.model.backbone.state_dict())
    with torch.no_grad():
        for got, expected in zip(net(image(1)), backbone(image(1))):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_classifier_interface_follows_timm():
    net = timm.create_model('laplacianformer_tiny', num_classes=7).eval()
    x = image(2)
    with torch.no_grad():
        features = net.forward_features(x)
        assert features.shape == (1, 512, 2, 3)
        assert net.forward_head(features, pre_logits=True).shape == (1, 512)
        logits = net(x)
        assert logits.shape == (1, 7)
        torch.testing.assert_close(logits, net.forward_head(features))
        final, intermediates = net.forward_intermediates(x)
        torch.testing.assert_close(final, features)
        assert [t.shape[1] for t in intermediates] == [64, 128, 320, 512]
    assert net.get_classifier().out_features == 7
    net.reset_classifier(3)
    assert net(x).shape == (1, 3)
    net.reset_classifier(0)
    assert net(x).shape == (1, 512)


def test_pretrained_loads_a_converted_backbone(tmp_path):
    """A backbone-only checkpoint (what the SOFT-style converter writes)
    loads into the backbone; the head keeps its initialisation."""
    torch.manual_seed(1)
    backbone = LaplacianFormer('tiny', out_indices=(3, ))
    path = tmp_path / 'converted.pth'
    torch.save({'state_dict': backbone.state_dict()}, path)
    net = timm.create_model(
        'laplacianformer_tiny', pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path)))
    for key, value in backbone.state_dict().items():
        assert torch.equal(net.state_dict()[f'backbone.{key}'], value), key


def test_the_adapter_import_registers_the_models_and_only_it_does():
    """In a fresh interpreter: ``import mmlaplacian`` neither imports timm
    (it takes over a second) nor registers anything with it; importing the
    adapter registers the five variants."""
    code = ('import sys, mmlaplacian\n'
            'assert "timm" not in sys.modules\n'
            'import timm\n'
            'assert timm.list_models("laplacianformer*") == []\n'
            'import mmlaplacian.adapters.timm_models\n'
            'net = timm.create_model("laplacianformer_tiny")\n'
            'print(type(net).__name__, '
            'len(timm.list_models("laplacianformer*")))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # The last line: onedl-mmdetection prints a notice of its own first.
    assert out.stdout.splitlines()[-1].split() == [
        'LaplacianFormerClassifier', '5']
