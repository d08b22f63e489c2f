"""The CPU-inference layer computes what the plain modules compute."""
import copy

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.cpu_inference import (
    BandedConvStem, ChunkedLaplacianAttention, banded_stem,
    disable_cpu_inference, enable_cpu_inference, folded_conv_bn)
from mmlaplacian.models.layers import (ConvStem, LaplacianAttention,
                                       landmark_grid)


def _randomise_batchnorm(model: torch.nn.Module) -> None:
    """Non-trivial BN statistics and affine terms, so folding matters."""
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)


@pytest.mark.parametrize('options', [
    dict(),
    dict(kernel='gaussian'),
    dict(feature_map='none'),
    dict(share_qk=False, learnable_lam=True),
    dict(conv_kernel_size=0, num_landmarks=16),
])
def test_chunked_attention_equals_the_plain_one(options):
    torch.manual_seed(0)
    hw_shape = (13, 29)  # 377 tokens: chunks of 50 leave a ragged tail
    plain = LaplacianAttention(64, 2, **options).double().eval()
    chunked = enable_cpu_inference(copy.deepcopy(plain), chunk_tokens=50)
    assert type(chunked) is ChunkedLaplacianAttention
    x = torch.randn(2, 13 * 29, 64, dtype=torch.double)
    identity = torch.randn_like(x)
    with torch.no_grad():
        expected = plain(x, hw_shape, identity=identity)
        out = chunked(x, hw_shape, identity=identity)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    # With autograd the subclass is the plain path.
    torch.testing.assert_close(
        chunked(x, hw_shape, identity=identity).detach(), expected)


def test_chunked_attention_never_forms_the_n_by_m_matrix(max_numel_probe):
    torch.manual_seed(0)
    hw_shape = (48, 64)
    num_tokens = hw_shape[0] * hw_shape[1]
    attn = enable_cpu_inference(
        LaplacianAttention(64, 2, impl='pytorch').eval(), chunk_tokens=256)
    x = torch.randn(1, num_tokens, 64)
    with torch.no_grad(), max_numel_probe() as probe:
        attn(x, hw_shape)
    # Largest tensors: the (N, C) projections; the N×m similarities
    # (2 heads × 49 landmarks > C = 64 per token) exist only per chunk.
    assert probe.max_numel <= num_tokens * 64
    disable_cpu_inference(attn)
    with torch.no_grad(), max_numel_probe() as probe:
        attn(x, hw_shape)
    grid = landmark_grid(hw_shape, 49)
    # The plain path forms it: (B·h, N, m).
    assert probe.max_numel >= num_tokens * 2 * grid[0] * grid[1]


def _stem(band_rows: int) -> ConvStem:
    torch.manual_seed(0)
    stem = ConvStem(3, 64)
    _randomise_batchnorm(stem)
    enable_cpu_inference(stem)
    stem.band_rows = band_rows
    return stem.eval()


@pytest.mark.parametrize('band_rows', [1, 3, 16])
@pytest.mark.parametrize('size', [(13, 17), (101, 77), (150, 211)])
def test_banded_stem_equals_the_plain_one(band_rows, size):
    stem = _stem(band_rows)
    assert type(stem) is BandedConvStem
    x = torch.randn(2, 3, *size).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        banded = stem(x)
        one_pass = disable_cpu_inference(stem)(x)
    assert banded.shape == one_pass.shape
    assert banded.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(banded, one_pass, rtol=1e-5, atol=1e-6)


def test_banded_stem_has_no_full_resolution_intermediate(monkeypatch):
    heights = []
    conv_rows = banded_stem._conv_rows

    def recording(*args, **kwargs):
        out = conv_rows(*args, **kwargs)
        heights.append(out.shape[2])
        return out

    monkeypatch.setattr(banded_stem, '_conv_rows', recording)
    stem = _stem(4)
    with torch.no_grad():
        out = stem(torch.randn(1, 3, 256, 96))
    assert out.shape[2] == 64 and len(heights) == 3 * 16
    # A band of 4 output rows reads at most 2 * 4 + 1 rows of the second
    # conv's output and 2 more of the first's: never the 128-row maps.
    assert max(heights) <= 11


def test_training_statistics_are_never_folded():
    stem = _stem(4)
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        banded = stem(x)
    with_grad = stem(x)  # autograd: the plain modules
    assert with_grad.requires_grad
    torch.testing.assert_close(with_grad.detach(), banded)
    stem.train()
    assert folded_conv_bn(stem[0]) is None
    with torch.no_grad():  # batch statistics: nothing can be folded
        trained = stem(x)
    assert not torch.allclose(trained, banded)


def test_folded_weights_are_cached_and_follow_updates():
    stem = _stem(4)
    first = folded_conv_bn(stem[0])
    assert folded_conv_bn(stem[0]) is first  # folded once, not per call
    with torch.no_grad():
        stem[0].bn.running_var.mul_(4.0)  # an in-place update
    second = folded_conv_bn(stem[0])
    assert second is not first
    torch.testing.assert_close(second[0], first[0] / 2)
    stem.load_state_dict(_stem(4).state_dict())  # load_state_dict too
    torch.testing.assert_close(folded_conv_bn(stem[0])[0], first[0])


def test_backbone_inference_equals_the_autograd_path():
    """Chunks, bands and folded BN (no autograd) change no output."""
    torch.manual_seed(0)
    model = LaplacianFormer(
        'tiny', drop_path_rate=0., inference_chunk_tokens=300).eval()
    _randomise_batchnorm(model)
    x = torch.randn(2, 3, 150, 211)  # stage 1: 38x53 = 2014 tokens
    reference = [out.detach() for out in model(x)]  # autograd: plain path
    with torch.no_grad():
        fast = model(x)
        plain = disable_cpu_inference(copy.deepcopy(model))(x)
    for ref, out, out_plain in zip(reference, fast, plain):
        assert out.is_contiguous()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out_plain, ref, rtol=1e-5, atol=1e-5)


def test_switch_is_one_setting_and_reversible():
    model = LaplacianFormer('tiny')
    kinds = {type(m).__name__ for m in model.modules()}
    assert {'ChunkedLaplacianAttention', 'BandedConvStem',
            'ChunkedLaplacianFormerBlock'} <= kinds
    plain = LaplacianFormer('tiny', inference_chunk_tokens=0)
    assert not any('Chunked' in type(m).__name__ or 'Banded' in type(
        m).__name__ or 'Folded' in type(m).__name__ for m in plain.modules())
    disable_cpu_inference(model)
    assert {type(m) for m in model.modules()} == {
        type(m) for m in plain.modules()}
    assert list(model.state_dict()) == list(plain.state_dict())


def test_tracing_sees_the_plain_path():
    model = LaplacianFormer('tiny', inference_chunk_tokens=64).eval()
    plain = disable_cpu_inference(copy.deepcopy(model))
    x = torch.randn(1, 3, 96, 128)  # stage 1: 768 tokens, 12 chunks
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        traced_plain = torch.jit.trace(plain, x)
        for out, ref in zip(traced(x), plain(x)):
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)

    def ops(graph):
        return sorted(line.split('=')[-1].split('(')[0].strip()
                      for line in str(graph).splitlines() if '=' in line)

    assert ops(traced.inlined_graph) == ops(traced_plain.inlined_graph)


def test_detectors_built_from_our_configs_take_it():
    """The switch is in the backbone, so every tool that builds a detector
    from our configs (ours, mmdet's own test.py, DetInferencer) gets it."""
    import os.path as osp

    from mmdet.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    cfg = Config.fromfile(osp.join(root, 'configs/mask_rcnn/lf_tiny_1x.py'))
    cfg.model.backbone.init_cfg = None
    init_default_scope('mmdet')
    detector = MODELS.build(cfg.model)
    kinds = {type(m).__name__ for m in detector.backbone.modules()}
    assert 'ChunkedLaplacianAttention' in kinds and 'BandedConvStem' in kinds


def test_inference_mode_equals_no_grad():
    """``torch.inference_mode`` (inference tensors: no in-place update
    outside it, also in the kernels' worker threads) gives the no-grad
    outputs, also after the folded weights were cached under it."""
    torch.manual_seed(0)
    model = LaplacianFormer('tiny', inference_chunk_tokens=300).eval()
    x = torch.randn(2, 3, 96, 128)
    with torch.inference_mode():
        first = model(x)
    with torch.no_grad():
        expected = model(x)
    with torch.inference_mode():
        again = model(x)
    for a, b, c in zip(first, expected, again):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(c, b)
