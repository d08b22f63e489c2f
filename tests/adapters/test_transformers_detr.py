"""A Hugging Face DETR detector on the LaplacianFormer backbone, through
timm: training steps that lower the loss, and post-processing to boxes.

transformers >= 4.4x cannot be installed beside mmpretrain 1.2.0 (its
multimodal models import names transformers has removed, and
``import mmdet.models`` then fails), so the OpenMMLab test environment has
no transformers and this test skips there; it runs where transformers is
installed without mmpretrain (docs/frameworks.md).
"""
import pytest
import torch

pytest.importorskip('timm')
transformers = pytest.importorskip('transformers')

import mmlaplacian.adapters.timm_models  # noqa: E402,F401  (registers them)


def tiny_detr(num_labels: int):
    config = transformers.DetrConfig(
        backbone_config=transformers.TimmBackboneConfig(
            backbone='laplacianformer_tiny', out_indices=[3],
            features_only=True, use_pretrained_backbone=False),
        num_labels=num_labels, d_model=64, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
        num_queries=10)
    return transformers.DetrForObjectDetection(config)


def test_detr_trains_and_post_processes():
    torch.manual_seed(0)
    model = tiny_detr(num_labels=3)
    images = torch.rand(2, 3, 128, 160,
                        generator=torch.Generator().manual_seed(0))
    labels = [
        dict(class_labels=torch.tensor([1]),
             boxes=torch.tensor([[0.3, 0.4, 0.2, 0.3]])),
        dict(class_labels=torch.tensor([2, 0]),
             boxes=torch.tensor([[0.6, 0.5, 0.3, 0.2], [0.2, 0.2, 0.1, 0.1]])),
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(8):
        loss = model(pixel_values=images, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses

    model.eval()
    with torch.no_grad():
        outputs = model(pixel_values=images)
    results = transformers.DetrImageProcessor().post_process_object_detection(
        outputs, threshold=0.0, target_sizes=[(128, 160)] * 2)
    assert len(results) == 2
    for result in results:
        assert result['boxes'].shape == (10, 4)
        assert result['scores'].shape == result['labels'].shape == (10, )
        assert ((result['boxes'] >= -1) & (result['boxes'] <= 161)).all()
