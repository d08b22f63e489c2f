"""segmentation_models_pytorch on the LaplacianFormer backbone, through its
timm encoders (``encoder_name='tu-laplacianformer_tiny'``): a U-Net whose
training steps lower the loss and whose masks have the input's size."""
import pytest
import torch
import torch.nn.functional as F

smp = pytest.importorskip('segmentation_models_pytorch')

import mmlaplacian.adapters.timm_models  # noqa: E402,F401  (registers them)


def test_unet_on_the_tiny_encoder_trains_and_segments_at_full_size():
    torch.manual_seed(0)
    model = smp.Unet('tu-laplacianformer_tiny', encoder_weights=None,
                     classes=3)
    # A transformer-style encoder: no stride-2 features (0 channels), then
    # the four stages at strides 4 to 32.
    assert model.encoder.out_channels == [3, 0, 64, 128, 320, 512]
    images = torch.rand(2, 3, 64, 96,
                        generator=torch.Generator().manual_seed(0))
    target = torch.zeros(2, 64, 96, dtype=torch.long)
    target[:, :, 48:] = 1
    target[:, 16:48, 16:40] = 2
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(6):
        loss = F.cross_entropy(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    with torch.no_grad():
        logits = model.eval()(images)
    assert logits.shape == (2, 3, 64, 96)
