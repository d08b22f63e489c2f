"""ConvStem: banded CPU inference equals the one-pass stem."""
import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from mmlaplacian.models.layers import ConvStem
from mmlaplacian.models.layers import conv_stem


def _stem(band_rows: int) -> ConvStem:
    torch.manual_seed(0)
    stem = ConvStem(3, 64, inference_band_rows=band_rows)
    for module in stem.modules():  # non-trivial BN statistics to fold
        if isinstance(module, _BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    return stem.eval()


@pytest.mark.parametrize('band_rows', [1, 3, 16])
@pytest.mark.parametrize('size', [(13, 17), (101, 77), (150, 211)])
def test_bands_equal_one_pass(band_rows, size):
    stem = _stem(band_rows)
    x = torch.randn(2, 3, *size).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        banded = stem(x)
        stem.inference_band_rows = 0
        one_pass = stem(x)
    assert banded.shape == one_pass.shape
    assert banded.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(banded, one_pass, rtol=1e-5, atol=1e-6)


def test_no_full_resolution_intermediate(monkeypatch):
    heights = []
    conv_rows = conv_stem._conv_rows

    def recording(*args, **kwargs):
        out = conv_rows(*args, **kwargs)
        heights.append(out.shape[2])
        return out

    monkeypatch.setattr(conv_stem, '_conv_rows', recording)
    stem = _stem(4)
    with torch.no_grad():
        out = stem(torch.randn(1, 3, 256, 96))
    assert out.shape[2] == 64 and len(heights) == 3 * 16
    # A band of 4 output rows reads at most 2 * 4 + 1 rows of stem.1's
    # output and 2 more of stem.0's: never the 128-row maps.
    assert max(heights) <= 11


def test_autograd_and_training_take_the_module_path():
    stem = _stem(4)
    x = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        banded = stem(x)
    with_grad = stem(x)  # autograd: BN folded per layer, no bands
    assert with_grad.requires_grad
    torch.testing.assert_close(with_grad.detach(), banded)
    stem.train()
    with torch.no_grad():  # batch statistics: nothing can be folded
        trained = stem(x)
    assert not torch.allclose(trained, banded)
