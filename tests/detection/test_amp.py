"""--amp: mixed-precision training (bfloat16 autocast on CPU)."""
import math

import pytest
import torch
from detection_utils import MASK_RCNN_CONFIG, read_scalars, run_tool
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from mmlaplacian.engine import enable_amp


class TwoStage(torch.nn.Module):

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        feats = self.backbone(x)
        return feats, self.head(feats)


def test_cpu_autocast_covers_backbone_only():
    model = TwoStage()
    cfg = Config(dict(optim_wrapper=dict(
        type='OptimWrapper', optimizer=dict(type='SGD', lr=0.1))))
    if torch.cuda.is_available():
        pytest.skip('with a GPU, --amp uses mmengine\'s AmpOptimWrapper')
    assert enable_amp(cfg) == 'CPUAutocastOptimWrapper'
    # Built under mmdet's scope, as tools/train.py builds it.
    with DefaultScope.overwrite_default_scope('mmdet'):
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    seen = {}

    def record(name):

        def hook(module, args, output):
            seen[name] = output.dtype

        return hook

    model.backbone.register_forward_hook(record('backbone'))
    model.head.register_forward_hook(record('head'))
    with wrapper.optim_context(model):
        feats, logits = model(torch.randn(3, 4))
    assert seen == {'backbone': torch.bfloat16, 'head': torch.float32}
    assert feats.dtype == torch.float32  # handed on in float32
    logits.sum().backward()
    assert model.backbone.weight.grad.dtype == torch.float32
    # Outside the context nothing is cast.
    assert model(torch.randn(3, 4))[0].dtype == torch.float32


def test_enable_amp_rejects_other_wrappers():
    cfg = Config(dict(optim_wrapper=dict(type='ApexOptimWrapper')))
    with pytest.raises(ValueError, match='ApexOptimWrapper'):
        enable_amp(cfg)


@pytest.mark.slow
def test_amp_training_has_no_nan(synthetic_env, tmp_path):
    proc = run_tool([
        'tools/train.py', MASK_RCNN_CONFIG, '--amp', '--work-dir',
        str(tmp_path), '--cfg-options', 'train_cfg.max_epochs=1',
        'val_dataloader=None', 'val_evaluator=None', 'val_cfg=None'
    ], env=synthetic_env)
    wrapper = ('AmpOptimWrapper'
               if torch.cuda.is_available() else 'CPUAutocastOptimWrapper')
    assert f'--amp: optimizer wrapper {wrapper}' in proc.stdout
    records = [r for r in read_scalars(str(tmp_path)) if 'loss' in r]
    assert len(records) == 4
    for record in records:
        values = [v for k, v in record.items() if k.startswith('loss')]
        assert values and all(math.isfinite(v) for v in values), record
    assert (tmp_path / 'epoch_1.pth').is_file()
