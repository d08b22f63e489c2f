"""The attention, the backbone and Tiny Mask R-CNN on CUDA against the CPU.

Each model runs forward and backward three times with the same weights and
inputs: on the CPU in float64 (the truth), on the CPU in float32, and on
CUDA in float32 (TF32 off). The CUDA run must be as close to the truth as
the CPU's float32 run is, within a factor of 4, or at least to 1e-4
relative (cuDNN may pick Winograd/FFT convolutions, a little less accurate
than the CPU's; TF32 or half precision would be 1e-3 or worse), for the
outputs, the input gradient and all parameter gradients together. The
figures go to the gpu_check report.
"""
import copy
from typing import Callable, List

import pytest
import torch
from gpu_utils import (DEVICE, GPU_TEST, build_mask_rcnn, exact_fp32, record,
                       relative_error)

from mmlaplacian.models import LaplacianAttention, LaplacianFormer

pytestmark = GPU_TEST
RUNS = (('cpu64', 'cpu', torch.float64), ('cpu32', 'cpu', torch.float32),
        ('cuda32', DEVICE, torch.float32))
FACTOR, FLOOR = 4.0, 1e-4


def run_fwd_bwd(model: torch.nn.Module, inputs: torch.Tensor,
                outputs: Callable, device: str, dtype: torch.dtype) -> dict:
    """Forward, then backward of a fixed random weighting of the outputs."""
    model = copy.deepcopy(model).to(device, dtype).train()
    x = inputs.detach().to(device, dtype, copy=True).requires_grad_()
    with exact_fp32():
        outs: List[torch.Tensor] = list(outputs(model, x))
        g = torch.Generator().manual_seed(1)
        loss = sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64)
                    .to(o)).sum() for o in outs)
        loss.backward()
    return dict(outputs=outs, input_grad=[x.grad],
                param_grads=[p.grad for p in model.parameters()])


def compare_devices(check: str, model: torch.nn.Module, inputs: torch.Tensor,
                    outputs: Callable) -> None:
    runs = {name: run_fwd_bwd(model, inputs, outputs, device, dtype)
            for name, device, dtype in RUNS}
    failures = []
    for part in ('outputs', 'input_grad', 'param_grads'):
        cuda = relative_error(runs['cuda32'][part], runs['cpu64'][part])
        cpu = relative_error(runs['cpu32'][part], runs['cpu64'][part])
        between = relative_error(runs['cuda32'][part], runs['cpu32'][part])
        bound = max(FACTOR * cpu, FLOOR)
        record(check, f'{part}: rel. error CUDA fp32 vs CPU fp64',
               f'{cuda:.2e}', f'{bound:.1e}')
        record(check, f'{part}: rel. error CPU fp32 vs CPU fp64', f'{cpu:.2e}')
        record(check, f'{part}: rel. difference CUDA vs CPU (fp32)',
               f'{between:.2e}')
        if not cuda <= bound:
            failures.append(f'{part}: {cuda:.2e} > {bound:.1e} (CPU fp32 '
                            f'{cpu:.2e})')
    assert not failures, f'{check}: ' + '; '.join(failures)


ATTENTION_CFGS = {
    'default': dict(),
    'gaussian-no-share-no-whiten': dict(
        kernel='gaussian', share_qk=False, feature_map='none'),
    'learnable-lam': dict(learnable_lam=True, lam=2.0),
}


@pytest.mark.parametrize('cfg', ATTENTION_CFGS, ids=list(ATTENTION_CFGS))
def test_attention_matches_cpu(cfg):
    """A 15 × 17 grid with 49 pooled landmarks (m < N, odd grid)."""
    torch.manual_seed(0)
    attention = LaplacianAttention(64, 2, **ATTENTION_CFGS[cfg])
    x = torch.randn(2, 15 * 17, 64)
    compare_devices(f'attention ({cfg}) fwd+bwd', attention, x,
                    lambda m, t: [m(t, (15, 17))])


def test_backbone_matches_cpu():
    """LaplacianFormer-T (no stochastic depth) at 2 × 3 × 224 × 288."""
    torch.manual_seed(0)
    backbone = LaplacianFormer('tiny', drop_path_rate=0.)
    backbone.init_weights()
    images = torch.randn(2, 3, 224, 288)
    compare_devices('LaplacianFormer-T fwd+bwd', backbone, images,
                    lambda m, t: m(t))


def test_mask_rcnn_matches_cpu():
    """Tiny Mask R-CNN from its config: backbone, FPN and RPN head outputs
    (the deterministic part; proposal sampling differs between devices)."""
    torch.manual_seed(0)
    detector = build_mask_rcnn(drop_path_rate=0.)
    images = torch.randn(2, 3, 256, 320)

    def outputs(model, x):
        feats = model.extract_feat(x)
        cls_scores, bbox_preds = model.rpn_head(feats)
        return [*feats, *cls_scores, *bbox_preds]

    compare_devices('Tiny Mask R-CNN (backbone+FPN+RPN) fwd+bwd', detector,
                    images, outputs)
