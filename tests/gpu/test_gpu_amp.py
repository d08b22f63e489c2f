"""fp16 mixed-precision training of Tiny Mask R-CNN on CUDA with mmengine's
AmpOptimWrapper (what ``tools/train.py --amp`` uses on a GPU)."""
import math

import torch
from gpu_utils import (DEVICE, GPU_TEST, build_mask_rcnn, record,
                       synthetic_detection_batch)
from mmengine.optim import AmpOptimWrapper

pytestmark = GPU_TEST
STEPS = 6


def test_mask_rcnn_fp16_amp_training_steps():
    """Six fp16 AMP steps on one batch: every loss term finite, the dynamic
    loss scale still finite, no non-finite gradient left in the weights,
    the backbone's weights updated; then inference on the same images."""
    torch.manual_seed(0)
    model = build_mask_rcnn().to(DEVICE)
    wrapper = AmpOptimWrapper(
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
        dtype='float16')
    batch = synthetic_detection_batch()
    before = {name: p.detach().clone()
              for name, p in model.backbone.named_parameters()}
    totals = []
    model.train()
    for step in range(STEPS):
        log_vars = model.train_step(batch, wrapper)
        terms = {k: torch.as_tensor(v).detach().item()
                 for k, v in log_vars.items() if k.startswith('loss')}
        assert all(math.isfinite(v) for v in terms.values()), (step, terms)
        totals.append(terms['loss'])
    scale = float(wrapper.loss_scaler.get_scale())
    record('fp16 AMP (AmpOptimWrapper)', 'total loss per step',
           ', '.join(f'{v:.3f}' for v in totals))
    record('fp16 AMP (AmpOptimWrapper)', 'final loss scale', scale)
    assert math.isfinite(scale) and scale > 0
    for p in model.parameters():
        assert p.isfinite().all()
    moved = [name for name, p in model.backbone.named_parameters()
             if p.requires_grad and not torch.equal(p.detach(), before[name])]
    trainable = [n for n, p in model.backbone.named_parameters()
                 if p.requires_grad]
    record('fp16 AMP (AmpOptimWrapper)', 'backbone tensors updated',
           f'{len(moved)} of {len(trainable)}')
    # Every backbone stage learns (a skipped step would leave them all).
    for stage in range(4):
        assert any(n.startswith(f'stages.{stage}.') for n in moved), stage

    model.eval()
    with torch.no_grad():
        results = model.test_step(batch)
    assert len(results) == len(batch['inputs'])
    for result in results:
        boxes = result.pred_instances.bboxes
        assert boxes.isfinite().all()
        height, width = result.img_shape
        assert (boxes[:, 0::2] >= 0).all() and (boxes[:, 0::2] <= width).all()
        assert (boxes[:, 1::2] >= 0).all() and (boxes[:, 1::2] <= height).all()
