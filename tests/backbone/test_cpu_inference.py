"""The chunked forms compute what the full forms compute; 'auto' picks."""
import copy

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from mmlaplacian.models import LaplacianFormer, set_inference_mode
from mmlaplacian.models.layers import (ChunkedForms, ConvBNReLU, ConvStem,
                                       LaplacianAttention, conv_stem,
                                       fold_batchnorm, landmark_grid)


def _randomise_batchnorm(model: torch.nn.Module) -> None:
    """Non-trivial BN statistics and affine terms, so folding matters."""
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)


def _modes(model: torch.nn.Module):
    """``(mode, chunk_tokens)`` of every module with a chunked form (the
    stem and conv-BN layers chunk by rows or not at all: mode only)."""
    return {(m.mode, None if isinstance(m, (ConvStem, ConvBNReLU)) else
             m.chunk_tokens)
            for m in model.modules() if isinstance(m, ChunkedForms)}


@pytest.mark.parametrize('options', [
    dict(),
    dict(kernel='gaussian'),
    dict(feature_map='none'),
    dict(share_qk=False, learnable_lam=True),
    dict(conv_kernel_size=0, num_landmarks=16),
])
def test_chunked_attention_equals_the_full_one(options):
    torch.manual_seed(0)
    hw_shape = (13, 29)  # 377 tokens: chunks of 50 leave a ragged tail
    full = LaplacianAttention(64, 2, mode='full', **options).double().eval()
    chunked = copy.deepcopy(full)
    chunked.set_mode('chunked', chunk_tokens=50)
    auto = copy.deepcopy(full)
    auto.set_mode('auto', chunk_tokens=50)
    x = torch.randn(2, 13 * 29, 64, dtype=torch.double)
    identity = torch.randn_like(x)
    with torch.no_grad():
        expected = full(x, hw_shape, identity=identity)
        out = chunked(x, hw_shape, identity=identity)
        out_auto = auto(x, hw_shape, identity=identity)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out_auto, out, rtol=0, atol=0)
    # With autograd 'auto' is the full form, and 'chunked' refuses.
    torch.testing.assert_close(
        auto(x, hw_shape, identity=identity).detach(), expected)
    with pytest.raises(RuntimeError, match='without autograd'):
        chunked(x, hw_shape)


def test_chunked_attention_never_forms_the_n_by_m_matrix(max_numel_probe):
    torch.manual_seed(0)
    hw_shape = (48, 64)
    num_tokens = hw_shape[0] * hw_shape[1]
    attn = LaplacianAttention(
        64, 2, impl='pytorch', mode='chunked', chunk_tokens=256).eval()
    x = torch.randn(1, num_tokens, 64)
    with torch.no_grad(), max_numel_probe() as probe:
        attn(x, hw_shape)
    # Largest tensors: the (N, C) projections; the N×m similarities
    # (2 heads × 49 landmarks > C = 64 per token) exist only per chunk.
    assert probe.max_numel <= num_tokens * 64
    attn.set_mode('full')
    with torch.no_grad(), max_numel_probe() as probe:
        attn(x, hw_shape)
    grid = landmark_grid(hw_shape, 49)
    # The full form forms it: (B·h, N, m).
    assert probe.max_numel >= num_tokens * 2 * grid[0] * grid[1]


def _stem(band_rows: int) -> ConvStem:
    torch.manual_seed(0)
    stem = ConvStem(3, 64, mode='chunked')
    _randomise_batchnorm(stem)
    stem.band_rows = band_rows
    return stem.eval()


@pytest.mark.parametrize('band_rows', [1, 3, 16])
@pytest.mark.parametrize('size', [(13, 17), (101, 77), (150, 211)])
def test_banded_stem_equals_the_full_one(band_rows, size):
    stem = _stem(band_rows)
    x = torch.randn(2, 3, *size).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        banded = stem(x)
        one_pass = set_inference_mode(stem, 'full')(x)
    assert banded.shape == one_pass.shape
    assert banded.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(banded, one_pass, rtol=1e-5, atol=1e-6)


def test_banded_stem_has_no_full_resolution_intermediate(monkeypatch):
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
    # A band of 4 output rows reads at most 2 * 4 + 1 rows of the second
    # conv's output and 2 more of the first's: never the 128-row maps.
    assert max(heights) <= 11


def test_training_statistics_are_never_folded():
    stem = set_inference_mode(_stem(4), 'auto')
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        banded = stem(x)
    with_grad = stem(x)  # autograd: the full form
    assert with_grad.requires_grad
    torch.testing.assert_close(with_grad.detach(), banded)
    stem.train()
    assert fold_batchnorm(stem[0]) is None
    with torch.no_grad():  # batch statistics: nothing can be folded
        trained = stem(x)
    assert not torch.allclose(trained, banded)


def test_folded_weights_are_cached_and_follow_updates():
    stem = _stem(4)
    first = fold_batchnorm(stem[0])
    assert fold_batchnorm(stem[0]) is first  # folded once, not per call
    with torch.no_grad():
        stem[0].bn.running_var.mul_(4.0)  # an in-place update
    second = fold_batchnorm(stem[0])
    assert second is not first
    torch.testing.assert_close(second[0], first[0] / 2)
    stem.load_state_dict(_stem(4).state_dict())  # load_state_dict too
    torch.testing.assert_close(fold_batchnorm(stem[0])[0], first[0])


def test_backbone_inference_equals_the_autograd_path():
    """Chunks, bands and folded BN (no autograd) change no output."""
    torch.manual_seed(0)
    model = LaplacianFormer(
        'tiny', drop_path_rate=0., inference_chunk_tokens=300).eval()
    _randomise_batchnorm(model)
    x = torch.randn(2, 3, 150, 211)  # stage 1: 38x53 = 2014 tokens
    reference = [out.detach() for out in model(x)]  # autograd: full form
    with torch.no_grad():
        fast = model(x)
        full = set_inference_mode(copy.deepcopy(model), 'full')(x)
    for ref, out, out_full in zip(reference, fast, full):
        assert out.is_contiguous()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out_full, ref, rtol=1e-5, atol=1e-5)


def test_mode_is_one_setting_and_changes_no_module_or_key():
    model = LaplacianFormer('tiny')
    assert _modes(model) == {('auto', 2048), ('auto', None)}
    never = LaplacianFormer('tiny', inference_chunk_tokens=0)
    assert {mode for mode, _ in _modes(never)} == {'full'}
    assert _modes(LaplacianFormer('tiny', inference_chunk_tokens=300)) == {
        ('auto', 300), ('auto', None)}
    set_inference_mode(model, 'full')
    assert _modes(model) == _modes(never)
    assert [type(m) for m in model.modules()] == [
        type(m) for m in never.modules()]
    assert list(model.state_dict()) == list(never.state_dict())
    set_inference_mode(model, 'chunked', chunk_tokens=64)
    assert _modes(model) == {('chunked', 64), ('chunked', None)}


def test_bad_modes_name_the_problem():
    with pytest.raises(ValueError, match="mode must be one of"):
        LaplacianAttention(64, 2, mode='chunk')
    with pytest.raises(ValueError, match="chunk_tokens must be positive"):
        set_inference_mode(LaplacianFormer('tiny'), 'auto', chunk_tokens=0)


@pytest.mark.parametrize('name', [
    'enable_cpu_inference', 'disable_cpu_inference',
    'ChunkedLaplacianAttention', 'BandedConvStem', 'FoldedConvModule'
])
def test_removed_names_say_what_replaces_them(name):
    with pytest.raises(ImportError, match='set_inference_mode|mode='):
        exec(f'from mmlaplacian.models.cpu_inference import {name}')


def test_tracing_sees_the_full_form():
    model = LaplacianFormer('tiny', inference_chunk_tokens=64).eval()
    full = set_inference_mode(copy.deepcopy(model), 'full')
    x = torch.randn(1, 3, 96, 128)  # stage 1: 768 tokens, 12 chunks
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        traced_full = torch.jit.trace(full, x)
        for out, ref in zip(traced(x), full(x)):
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)

    def ops(graph):
        return sorted(line.split('=')[-1].split('(')[0].strip()
                      for line in str(graph).splitlines() if '=' in line)

    assert ops(traced.inlined_graph) == ops(traced_full.inlined_graph)


def test_detectors_built_from_our_configs_take_it():
    """The mode is set in the backbone, so every tool that builds a detector
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
    assert _modes(detector.backbone) == {('auto', 2048), ('auto', None)}


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
