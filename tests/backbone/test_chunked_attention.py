"""The chunked form of the attention and its block computes what the full
form computes, in less memory; ``mode='auto'`` picks it for CPU inference."""
import os.path as osp

import pytest
import torch

from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.layers import (LaplacianAttention,
                                       LaplacianFormerBlock, landmark_grid)


def _attention(mode: str, chunk_tokens: int = 50, **options):
    torch.manual_seed(0)
    return LaplacianAttention(
        64, 2, mode=mode, chunk_tokens=chunk_tokens, **options).eval()


def _modes(model: torch.nn.Module):
    return {(m.mode, m.chunk_tokens)
            for m in model.modules() if isinstance(m, LaplacianAttention)}


@pytest.mark.parametrize('options', [
    dict(),
    dict(kernel='gaussian'),
    dict(feature_map='none'),
    dict(share_qk=False, learnable_lam=True),
    dict(conv_kernel_size=0, num_landmarks=16),
])
def test_chunked_attention_equals_the_full_one(options):
    hw_shape = (13, 29)  # 377 tokens: chunks of 50 leave a ragged tail
    full = _attention('full', **options).double()
    chunked = _attention('chunked', **options).double()
    auto = _attention('auto', **options).double()
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
    hw_shape = (48, 64)
    num_tokens = hw_shape[0] * hw_shape[1]
    x = torch.randn(1, num_tokens, 64)
    chunked = _attention('chunked', chunk_tokens=256, impl='pytorch')
    with torch.no_grad(), max_numel_probe() as probe:
        chunked(x, hw_shape)
    # Largest tensors: the (N, C) projections; the N×m similarities
    # (2 heads × 49 landmarks > C = 64 per token) exist only per chunk.
    assert probe.max_numel <= num_tokens * 64
    with torch.no_grad(), max_numel_probe() as probe:
        _attention('full', impl='pytorch')(x, hw_shape)
    grid = landmark_grid(hw_shape, 49)
    # The full form forms it: (B·h, N, m).
    assert probe.max_numel >= num_tokens * 2 * grid[0] * grid[1]


def _block(mode: str, chunk_tokens: int) -> LaplacianFormerBlock:
    torch.manual_seed(0)
    return LaplacianFormerBlock(
        64, 2, attn_cfg=dict(mode=mode, chunk_tokens=chunk_tokens)).eval()


def test_chunked_block_equals_the_full_one():
    hw_shape = (13, 29)
    x = torch.randn(2, 13 * 29, 64, dtype=torch.double)
    with torch.no_grad():
        expected = _block('full', 50).double()(x, hw_shape)
        out = _block('chunked', 50).double()(x, hw_shape)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_chunked_block_never_forms_the_mlp_activations(max_numel_probe):
    hw_shape = (48, 64)
    num_tokens = hw_shape[0] * hw_shape[1]
    x = torch.randn(1, num_tokens, 64)
    with torch.no_grad(), max_numel_probe() as probe:
        _block('chunked', 256)(x, hw_shape)
    # The hidden activations (4 × 64 per token) exist one chunk at a time.
    assert probe.max_numel <= num_tokens * 64
    with torch.no_grad(), max_numel_probe() as probe:
        _block('full', 256)(x, hw_shape)
    assert probe.max_numel >= num_tokens * 4 * 64


def test_auto_chunks_only_on_the_cpu_without_autograd_or_tracing():
    module = _attention('auto', chunk_tokens=2048)
    tokens = torch.zeros(1, 2049, 64)
    assert not module.runs_chunked(tokens)  # autograd enabled
    with torch.no_grad():
        assert module.runs_chunked(tokens)
        assert not module.runs_chunked(tokens[:, :2048])  # one chunk
        assert not module.runs_chunked(tokens.to('meta'))  # not the CPU
        seen = []

        def record(tensor):
            seen.append(module.runs_chunked(tensor))
            return tensor * 2

        torch.jit.trace(record, tokens, check_trace=False)
        torch.compile(record, fullgraph=True, backend='eager')(tokens)
        assert seen == [False, False]
    with torch.no_grad():
        assert not _attention('full').runs_chunked(tokens)
        assert _attention('chunked').runs_chunked(tokens[:, :1])


def test_backbone_inference_equals_the_autograd_path():
    """Chunks (no autograd) change no output of the backbone."""
    torch.manual_seed(0)
    model = LaplacianFormer(
        'tiny', drop_path_rate=0., attn_cfg=dict(chunk_tokens=300)).eval()
    full = LaplacianFormer(
        'tiny', drop_path_rate=0., attn_cfg=dict(mode='full')).eval()
    full.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 150, 211)  # stage 1: 38x53 = 2014 tokens
    reference = [out.detach() for out in model(x)]  # autograd: full form
    with torch.no_grad():
        fast = model(x)
        plain = full(x)
    for ref, out, out_full in zip(reference, fast, plain):
        assert out.is_contiguous()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out_full, ref, rtol=1e-5, atol=1e-5)


def test_the_mode_changes_no_module_or_key():
    auto, full = LaplacianFormer('tiny'), LaplacianFormer(
        'tiny', attn_cfg=dict(mode='full'))
    assert _modes(auto) == {('auto', 2048)}
    assert _modes(full) == {('full', 2048)}
    assert [type(m) for m in auto.modules()] == [
        type(m) for m in full.modules()]
    assert list(auto.state_dict()) == list(full.state_dict())


def test_bad_modes_name_the_problem():
    with pytest.raises(ValueError, match='mode must be one of'):
        LaplacianAttention(64, 2, mode='chunk')
    with pytest.raises(ValueError, match='chunk_tokens must be >= 1'):
        LaplacianFormer('tiny', attn_cfg=dict(chunk_tokens=0))


def test_tracing_sees_the_full_form():
    torch.manual_seed(0)
    model = LaplacianFormer('tiny', attn_cfg=dict(chunk_tokens=64)).eval()
    full = LaplacianFormer('tiny', attn_cfg=dict(mode='full')).eval()
    full.load_state_dict(model.state_dict())
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
    """The default mode is the attention's, so every tool that builds a
    detector from our configs (ours, mmdet's own test.py, DetInferencer)
    gets the chunked CPU inference."""
    from mmdet.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    cfg = Config.fromfile(osp.join(root, 'configs/mask_rcnn/lf_tiny_1x.py'))
    cfg.model.backbone.init_cfg = None
    init_default_scope('mmdet')
    detector = MODELS.build(cfg.model)
    assert _modes(detector.backbone) == {('auto', 2048)}


def test_inference_mode_equals_no_grad():
    """``torch.inference_mode`` (inference tensors: no in-place update
    outside it, also in the kernels' worker threads) gives the no-grad
    outputs."""
    torch.manual_seed(0)
    model = LaplacianFormer('tiny', attn_cfg=dict(chunk_tokens=300)).eval()
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
