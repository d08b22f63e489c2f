"""--amp: mixed-precision training (bfloat16 autocast on CPU)."""
import json
import math
import os
import os.path as osp

import pytest
import torch
from detection_utils import MASK_RCNN_CONFIG, read_scalars, run_tool
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from precision_probe import PARTS

from mmlaplacian.engine import enable_amp

AMP_EPOCHS = 8
AMP_LOSS_FALL = 0.85


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
def test_amp_trains_backbone_and_neck_in_lower_precision_and_loss_falls(
        synthetic_env, tmp_path):
    """``tools/train.py --amp`` on 4 images for 8 epochs of 2 iterations.

    ``precision_probe.py``, a hook the run's config adds, records the
    dtype of every convolution's and linear layer's output in training:
    the backbone and the neck compute in bfloat16, the heads in float32
    (mmcv's CPU kernels have no bfloat16 versions). With a GPU, mmengine's
    AmpOptimWrapper autocasts to float16 instead."""
    config = tmp_path / 'amp_probe.py'
    config.write_text(
        f'_base_ = {MASK_RCNN_CONFIG!r}\n'
        "custom_imports = dict(imports=['mmlaplacian', 'precision_probe'],"
        ' allow_failed_imports=False)\n'
        "custom_hooks = [dict(type='PrecisionProbeHook')]\n")
    env = dict(synthetic_env, PYTHONPATH=os.pathsep.join(
        [synthetic_env['PYTHONPATH'], osp.dirname(osp.abspath(__file__))]))
    work_dir = tmp_path / 'work'
    proc = run_tool([
        'tools/train.py', str(config), '--amp', '--work-dir',
        str(work_dir), '--cfg-options', f'train_cfg.max_epochs={AMP_EPOCHS}',
        'train_dataloader.dataset.indices=4', 'val_dataloader=None',
        'val_evaluator=None', 'val_cfg=None'
    ], env=env)
    if torch.cuda.is_available():
        wrapper, lower = 'AmpOptimWrapper', 'float16'
    else:
        wrapper, lower = 'CPUAutocastOptimWrapper', 'bfloat16'
    assert f'--amp: optimizer wrapper {wrapper}' in proc.stdout
    with open(work_dir / 'precisions.json', encoding='utf-8') as f:
        precisions = json.load(f)
    assert sorted(precisions) == sorted(PARTS)
    assert precisions['backbone'] == precisions['neck'] == [lower], precisions
    if not torch.cuda.is_available():
        assert precisions['rpn_head'] == precisions['roi_head'] == [
            'float32'], precisions

    records = [r for r in read_scalars(str(work_dir)) if 'loss' in r]
    assert len(records) == 2 * AMP_EPOCHS
    for record in records:
        values = [v for k, v in record.items() if k.startswith('loss')]
        assert values and all(math.isfinite(v) for v in values), record
    # Logged losses are running means over 10 iterations: the first
    # iteration against the mean of the last ten.
    losses = [r['loss'] for r in records]
    assert losses[-1] < AMP_LOSS_FALL * losses[0], losses
    assert (work_dir / f'epoch_{AMP_EPOCHS}.pth').is_file()
